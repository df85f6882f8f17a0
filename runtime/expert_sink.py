"""Load a model without reading or keeping its expert bytes: the memory half of streaming.

llama.cpp 0.3.36 maps a model file with ``MAP_POPULATE`` (``llama_mmap``: only files holding
tensors an architecture marks ``TENSOR_READ_LAZY`` escape it, and no MoE expert tensor is marked),
so an mmap load reads the whole file and makes it resident, and a plain read
(``LLAMA_LOAD_MODE_NONE``) copies every tensor into RAM. Either way the load reads every expert
byte from the disk and the peak RSS of the process is the whole model, whatever the expert
budget. :class:`ExpertSink` avoids both with the public model parameters:

* **a skeleton of the file**: llama.cpp loads (``LLAMA_LOAD_MODE_NONE``) a copy of each shard in
  memory (``memfd_create``) that holds the header and every dense tensor's bytes, the expert
  tensors' ranges being holes (``/proc/self/fd/N``, through ``llama_model_load_from_splits``):
  reading a hole reads zeros from no page, so no expert byte comes from the disk or lands in the
  page cache; the skeleton is dropped once the model is loaded (where it cannot be made, e.g.
  under a small ``RLIMIT_FSIZE``, which memfd writes obey, llama.cpp reads the file itself and
  the sink below still keeps at most one expert tensor);
* ``tensor_buft_overrides``: every ``blk.N.ffn_*_exps.weight`` goes to a buffer type of ours. It is
  a copy of ggml's own ``CPU_Mapped`` host buffer type (``ggml_backend_cpu_buffer_from_ptr``)
  whose ``alloc_buffer`` places the buffer in an anonymous mapping we own, backed by transparent
  huge pages where the kernel allows (``MADV_HUGEPAGE``: one page fault and one release per
  2 MiB instead of 512, which a virtual machine makes dear), so its tensors are ordinary host
  tensors, never repacked;
* ``progress_callback``: llama.cpp calls it before reading each tensor and once at the end; each
  call gives every page of the sink back. So at most one expert tensor (of zeros) is resident at a
  time while loading, none afterwards: streaming then points the expert tensors at the expert
  store and the sink is never read again.

The copied buffer type relies on the layout of ``struct ggml_backend_buffer_type`` (six interface
function pointers, the device, the context: ggml-backend-impl.h of the pinned ggml); it is
checked through the public getters (name, host, alignment, an allocation landing in our mapping)
before use, and :class:`SinkError` is raised when it does not match.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pathlib
from typing import Any

import numpy as np

from bmoe_top.parsers.gguf_layout import EXPERT_PATTERN, ModelLayout

from .llama_lib import L

__all__ = ["ExpertSink", "SinkError"]

_N_IFACE = 6  # get_name, alloc_buffer, get_alignment, get_max_size, get_alloc_size, is_host
_ALLOC_SLOT = 1
_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class SinkError(RuntimeError):
    """ggml's buffer type layout is not the one this module was written for."""


class _Override(ctypes.Structure):
    """``struct llama_model_tensor_buft_override`` (llama.h; not bound by llama-cpp-python)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class _BufferType(ctypes.Structure):
    _fields_ = [("iface", ctypes.c_void_p * _N_IFACE), ("device", ctypes.c_void_p), ("context", ctypes.c_void_p)]


def _ggml_base() -> Any:
    libdir = pathlib.Path(L.__file__).parent / "lib"
    cands = sorted(libdir.glob("libggml-base.so*"))
    if not cands:
        raise SinkError(f"libggml-base not found next to llama_cpp in {libdir}")
    lib: Any = ctypes.CDLL(str(cands[0]))
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args, res in [
        ("ggml_backend_cpu_buffer_from_ptr", [vp, sz], vp),
        ("ggml_backend_buffer_get_type", [vp], vp),
        ("ggml_backend_buffer_get_base", [vp], vp),
        ("ggml_backend_buffer_free", [vp], None),
        ("ggml_backend_buft_name", [vp], ctypes.c_char_p),
        ("ggml_backend_buft_is_host", [vp], ctypes.c_bool),
        ("ggml_backend_buft_get_alignment", [vp], sz),
        ("ggml_backend_buft_alloc_buffer", [vp, sz], vp),
    ]:
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return lib


PAGE = mmap.PAGESIZE


def _skeleton(path: pathlib.Path, holes: list[tuple[int, int]]) -> int:
    """A memfd with the bytes of ``path`` outside ``holes`` ([start, end) ranges), the holes
    left unwritten (they read as zeros and use no page). Raises OSError."""
    fd = os.memfd_create(f"bmoe-skeleton-{path.name}"[:240], os.MFD_CLOEXEC)
    try:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(src).st_size
            pos = 0
            for a, b in [*sorted(holes), (size, size)]:
                while pos < a:
                    os.lseek(fd, pos, os.SEEK_SET)
                    n = os.sendfile(fd, src, pos, a - pos)
                    if n <= 0:
                        raise OSError(f"{path} ends at byte {pos}, before its header says")
                    pos += n
                pos = max(pos, b)
            os.ftruncate(fd, size)
        finally:
            os.close(src)
    except OSError:
        os.close(fd)
        raise
    return fd


class ExpertSink:
    """The skeleton files, buffer type, override list and progress callback of a load that reads
    and keeps no expert bytes.

    ``layout``: the model's expert tensors (their ranges are the skeleton's holes). Use
    :meth:`apply` on a ``llama_model_params`` and load :meth:`load_paths` (keep this object alive
    for the model's lifetime; :meth:`loaded` once the model is loaded). With ``measure`` (default:
    the test hook ``BMOE_MEASURE_LOAD=1``) :attr:`peak_resident` is the most sink bytes found
    resident at one progress call (about one expert tensor) and :attr:`files_seen` the files open
    then. Raises :class:`SinkError` when ggml's buffer type does not match.
    """

    def __init__(self, layout: ModelLayout, measure: bool | None = None) -> None:
        self.lib = _ggml_base()
        self.layout = layout
        self.measure = os.environ.get("BMOE_MEASURE_LOAD") == "1" if measure is None else bool(measure)
        self._maps: list[mmap.mmap] = []
        self._skeletons: list[int] = []
        self.peak_resident = 0
        self.calls = 0
        #: measure mode: the files the process had open at the progress calls (what llama.cpp read)
        self.files_seen: set[str] = set()
        #: bytes the skeletons hold (the dense tensors and the headers)
        self.skeleton_bytes = 0
        self._alloc_cb = _ALLOC_FN(self._alloc)
        self._progress_cb = L.llama_progress_callback(self._progress)
        self.buft = self._make_buffer_type()
        self._pattern = EXPERT_PATTERN.encode()
        self.overrides = (_Override * 2)()
        self.overrides[0].pattern = self._pattern
        self.overrides[0].buft = ctypes.addressof(self.buft)
        self._check()

    # -- the buffer type -------------------------------------------------------------------------
    def _make_buffer_type(self) -> _BufferType:
        lib = self.lib
        probe = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        anchor = ctypes.c_char.from_buffer(probe)
        try:
            buf = lib.ggml_backend_cpu_buffer_from_ptr(ctypes.addressof(anchor), PAGE)
            src = lib.ggml_backend_buffer_get_type(buf)
            lib.ggml_backend_buffer_free(buf)
        finally:
            del anchor
            probe.close()
        if not src:
            raise SinkError("ggml_backend_cpu_buffer_from_ptr gave no buffer type")
        self._src = src
        bt = _BufferType.from_buffer_copy(ctypes.string_at(src, ctypes.sizeof(_BufferType)))
        bt.iface[_ALLOC_SLOT] = ctypes.cast(self._alloc_cb, ctypes.c_void_p).value
        return bt

    def _check(self) -> None:
        lib, mine, src = self.lib, ctypes.addressof(self.buft), self._src
        if lib.ggml_backend_buft_name(mine) != b"CPU_Mapped" or lib.ggml_backend_buft_name(src) != b"CPU_Mapped":
            raise SinkError("the copied buffer type does not name itself CPU_Mapped")
        if not lib.ggml_backend_buft_is_host(mine):
            raise SinkError("the copied buffer type is not a host buffer type")
        if lib.ggml_backend_buft_get_alignment(mine) != lib.ggml_backend_buft_get_alignment(src):
            raise SinkError("the copied buffer type has another alignment")
        n = len(self._maps)
        buf = lib.ggml_backend_buft_alloc_buffer(mine, 2 * PAGE)
        ok = bool(buf) and len(self._maps) == n + 1 and lib.ggml_backend_buffer_get_base(buf) == self._base(-1)
        if buf:
            lib.ggml_backend_buffer_free(buf)
        if self._maps[n:]:
            self._maps.pop().close()
        if not ok:
            raise SinkError("an allocation through the copied buffer type did not land in the sink")

    @staticmethod
    def _addr(m: mmap.mmap) -> int:
        a = ctypes.c_char.from_buffer(m)
        try:
            return ctypes.addressof(a)
        finally:
            del a

    def _base(self, i: int) -> int:
        return self._addr(self._maps[i])

    def _alloc(self, _buft: int, size: int) -> int:
        """``alloc_buffer``: a CPU buffer over a fresh anonymous mapping (pages cost nothing until
        llama.cpp writes them; huge pages where the kernel allows)."""
        try:
            m = mmap.mmap(-1, max(PAGE, size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError:
            return 0
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                m.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass  # no transparent huge pages here: 4 KiB pages, as without the advice
        self._maps.append(m)
        return int(self.lib.ggml_backend_cpu_buffer_from_ptr(self._addr(m), size) or 0)

    # -- loading -----------------------------------------------------------------------------------
    def load_paths(self) -> list[str]:
        """The files llama.cpp loads, one per shard: the skeletons (made on the first call).
        Raises OSError when a shard cannot be read or a skeleton cannot be written (nothing is
        left open then)."""
        if not self._skeletons:
            holes: list[list[tuple[int, int]]] = [[] for _ in self.layout.paths]
            for info in self.layout.tensors.values():
                holes[info.shard].append((info.file_offset, info.file_offset + info.n_bytes))
            try:
                for path, h in zip(self.layout.paths, holes):
                    self._skeletons.append(_skeleton(path, h))
            except OSError:
                self.loaded()
                raise
            self.skeleton_bytes = sum(os.fstat(fd).st_blocks * 512 for fd in self._skeletons)
        return [f"/proc/self/fd/{fd}" for fd in self._skeletons]

    def loaded(self) -> None:
        """The model is loaded: the skeletons' pages go (llama.cpp has copied the dense tensors)."""
        for fd in self._skeletons:
            os.close(fd)
        self._skeletons = []

    def _progress(self, _progress: float, _ud: object) -> bool:
        """Before each tensor is read (and once at the end): release every sink page."""
        self.calls += 1
        if self.measure:
            self.peak_resident = max(self.peak_resident, self.resident_bytes())
            for fd in os.listdir("/proc/self/fd"):
                try:
                    self.files_seen.add(os.readlink(f"/proc/self/fd/{fd}"))
                except OSError:
                    pass
        self.release()
        return True

    def release(self) -> None:
        """Give back every page of the sink (its contents are never needed again)."""
        for m in self._maps:
            m.madvise(mmap.MADV_DONTNEED)

    def resident_bytes(self) -> int:
        """Bytes of the sink in RAM now (``mincore``; a page only read counts too)."""
        return sum(_resident_bytes(m) for m in self._maps)

    def apply(self, params: Any) -> None:
        """Set the load mode, the override list and the progress callback on ``params``."""
        params.load_mode = L.LLAMA_LOAD_MODE_NONE
        params.tensor_buft_overrides = ctypes.addressof(self.overrides)
        params.progress_callback = self._progress_cb
        params.progress_callback_user_data = None

    def spans(self) -> list[tuple[int, int]]:
        """[start, end) addresses of the sink's mappings."""
        return [(self._addr(m), self._addr(m) + len(m)) for m in self._maps]

    def mapped_bytes(self) -> int:
        return sum(len(m) for m in self._maps)

    def close(self) -> None:
        """Unmap the sink (after the model that points into it is freed)."""
        self.loaded()
        for m in self._maps:
            try:
                m.close()
            except (BufferError, ValueError):
                pass
        self._maps = []


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_LIBC.mincore.restype = ctypes.c_int


def _resident_bytes(m: mmap.mmap) -> int:
    """Bytes of ``m`` in RAM now (``mincore``)."""
    n = (len(m) + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * n)()
    if _LIBC.mincore(ExpertSink._addr(m), len(m), vec) != 0:
        return 0
    return int((np.frombuffer(memoryview(vec), dtype=np.uint8) & 1).sum()) * PAGE
