"""Memory for the expert tensors: the buffers their ggml ``data`` pointers are redirected to.

Each expert tensor gets a :class:`TensorBuffer`: an address ``addr`` congruent to the tensor's
file offset modulo 4096 (so O_DIRECT reads land straight in place) inside a private anonymous
mapping. Untouched pages cost no RAM.

Two layouts (:class:`ExpertStore`):

* **in place** (a cache): one mapping per tensor. A missing expert's pages are faulted in by the
  read itself (a separate ``MADV_POPULATE_WRITE`` pass cost more than it saved); eviction
  releases with ``MADV_DONTNEED`` the whole pages that lie strictly inside the slice (slice sizes
  are not page multiples, so the edge pages shared with a neighbour stay).
* **windows** (no cache): the tensors of one kind and size share one mapping across layers, each
  at its own 4096-congruent shift. A layer's experts are read into the window just before the
  layer multiplies them; the next layer's routing (which needs this layer's output) always
  comes after, so the window is free again. Nothing is released per token: after the first
  tokens the window's pages stay committed and reads land on them (one layer's experts of RAM).
* **frames** (a budget below the bank, :func:`frame_plan`): the tensors of one kind share one pool
  of ``n_frames`` frames across every layer, in 2 MiB pages (``MADV_HUGEPAGE``) unless the
  store is asked for 4 KiB pages (``huge=False``: ``MADV_NOHUGEPAGE``), faulted in when the store
  is made (``MADV_POPULATE_WRITE``: the first reads into a frame then cost no page fault, and the
  zeroing of fresh pages is paid at load, not during the first tokens). Expert ``e`` of
  layer ``il`` lives in whichever frame the cache gave it; the routed ids are rewritten to frame
  numbers before the layer multiplies (docs/runtime.md "A budget below the bank: frames"). A
  tensor's ``addr`` is its pool's base plus its file offset mod 4096, and frame ``s`` is
  ``frame_stride`` bytes further per frame, so every frame keeps the tensor's congruence and
  O_DIRECT reads land in place. Nothing is released per eviction: the frame is read over.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Callable, Iterable

from bmoe_top.parsers.gguf_layout import ExpertTensorInfo, ModelLayout

from .expert_io import DIRECT_ALIGN, round_down, round_up

PAGE = mmap.PAGESIZE
#: madvise(2): fault the range in for writing now (Linux 5.14)
MADV_POPULATE_WRITE = 23
#: the transparent huge page size on x86-64 and arm64 with 4 KiB base pages
HUGE = 2 << 20

__all__ = ["TensorBuffer", "ExpertStore", "PAGE", "FramePlan", "frame_plan"]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_LIBC.madvise.restype = ctypes.c_int
_SYS_PROCESS_MADVISE = 440 if sys.platform.startswith("linux") else None  # one number on every arch
#: batches per process_madvise call (the kernel's UIO_MAXIOV is 1024)
_IOV_MAX = 512


class _Batch:
    """``process_madvise(2)`` on this process: many ranges, one system call. Disabled on the
    first refusal (kernels before 5.10, or that refuse ``MADV_DONTNEED`` there); :func:`dontneed`
    then calls ``madvise`` per range."""

    def __init__(self) -> None:
        self.pidfd = -1
        if _SYS_PROCESS_MADVISE is not None and hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(os.getpid())
            except OSError:
                self.pidfd = -1
        self.pid = os.getpid()

    def usable(self) -> bool:
        if self.pidfd >= 0 and self.pid != os.getpid():  # a forked child: not this process's pidfd
            self.pidfd = -1
        return self.pidfd >= 0

    def advise(self, ranges: list[tuple[int, int]]) -> bool:
        """True when the kernel advised every range."""
        assert _SYS_PROCESS_MADVISE is not None
        for i0 in range(0, len(ranges), _IOV_MAX):
            part = ranges[i0 : i0 + _IOV_MAX]
            iov = (_IoVec * len(part))()
            want = 0
            for i, (a, n) in enumerate(part):
                iov[i].base, iov[i].len = a, n
                want += n
            got = _LIBC.syscall(ctypes.c_long(_SYS_PROCESS_MADVISE), ctypes.c_long(self.pidfd), iov,
                                ctypes.c_size_t(len(part)), ctypes.c_long(mmap.MADV_DONTNEED), ctypes.c_ulong(0))
            if got != want:
                if i0 == 0 and got < 0:
                    os.close(self.pidfd)
                    self.pidfd = -1
                    return False
                for a, n in part:  # partly done: one by one (advising twice is harmless)
                    _LIBC.madvise(a, n, mmap.MADV_DONTNEED)
        return True


_BATCH: _Batch | None = None


def dontneed(ranges: list[tuple[int, int]]) -> None:
    """``MADV_DONTNEED`` every (address, bytes) range of this process's private anonymous
    memory: one ``process_madvise`` call per batch where the kernel allows, else ``madvise`` per
    range."""
    global _BATCH
    if not ranges:
        return
    if len(ranges) > 1:
        if _BATCH is None:
            _BATCH = _Batch()
        if _BATCH.usable() and _BATCH.advise(ranges):
            return
    for a, n in ranges:
        _LIBC.madvise(a, n, mmap.MADV_DONTNEED)


class _Mapping:
    """One private anonymous mapping and the ctypes anchor that gives its address. ``huge`` True:
    the usable part starts on a 2 MiB boundary (``base``; ``size`` bytes from there) and is advised
    ``MADV_HUGEPAGE``; False: advised ``MADV_NOHUGEPAGE`` (4 KiB pages even where the kernel makes
    huge pages unasked); None: the kernel's default."""

    def __init__(self, size: int, huge: bool | None = None) -> None:
        size = round_up(max(1, size), PAGE)
        self.mm = mmap.mmap(-1, size + (HUGE if huge else 0), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        start = ctypes.addressof(self._anchor)
        self.base = round_up(start, HUGE) if huge else start
        self.offset = self.base - start  # of ``base`` inside ``mm``
        self.size = size
        if huge is not None and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self.mm.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE, self.offset,
                                round_up(size, PAGE))
            except OSError:
                pass  # transparent huge pages off: 4 KiB pages, the same bytes

    def populate(self) -> bool:
        """Fault every page of the usable part in now (``MADV_POPULATE_WRITE``, Linux 5.14); False
        where the kernel refuses (the pages then fault in as they are first written)."""
        return _LIBC.madvise(self.base, round_up(self.size, PAGE), MADV_POPULATE_WRITE) == 0

    def close(self) -> None:
        try:
            del self._anchor
            self.mm.close()
        except (BufferError, ValueError):
            pass  # still exported to ctypes/ggml; the mapping dies with the process


class TensorBuffer:
    """Where one expert tensor's data lives: ``addr`` (``size`` bytes, ``shift`` bytes into its
    mapping, ``shift`` = file offset mod 4096) and ``view`` (a memoryview of exactly the tensor).
    ``shared``: the mapping is a window other tensors use too (nothing is committed or released).
    ``frame_stride``: bytes from one frame to the next in a frame pool (0: the tensor in place)."""

    def __init__(self, info: ExpertTensorInfo, mapping: _Mapping, shared: bool, frame_stride: int = 0,
                 n_frames: int = 0) -> None:
        self.info = info
        self.shift = info.file_offset % DIRECT_ALIGN
        self.shared = shared or frame_stride > 0
        self.frame_stride = frame_stride
        self.size = info.n_bytes if not frame_stride else (n_frames - 1) * frame_stride + info.expert_stride
        self._map = mapping
        self.addr = mapping.base + self.shift
        start = mapping.offset + self.shift
        self.view = memoryview(mapping.mm)[start : start + self.size]

    def frame_range(self, s: int) -> tuple[int, int]:
        """Byte range [start, end) of frame ``s`` from ``addr`` (frame pools only)."""
        a = s * self.frame_stride
        return a, a + self.info.expert_stride

    @property
    def mapping_span(self) -> tuple[int, int]:
        """(address, bytes) of the mapping the tensor lives in."""
        return self._map.base, self._map.size

    def slice_range(self, e: int) -> tuple[int, int]:
        """Byte range [start, end) of expert ``e`` inside the tensor."""
        s = self.info.expert_stride
        return e * s, (e + 1) * s

    def inner_pages(self, e0: int, e1: int | None = None) -> tuple[int, int]:
        """Mapping offsets of the whole pages inside experts ``e0..e1`` that no neighbour shares."""
        a = self.slice_range(e0)[0]
        b = self.slice_range(e0 if e1 is None else e1)[1]
        return round_up(a + self.shift, PAGE), round_down(b + self.shift, PAGE)

    def release_range(self, e: int, prev_free: bool = False, next_free: bool = False) -> tuple[int, int] | None:
        """The pages to give back for expert ``e`` (in place only) as (address, bytes), or None:
        the whole pages inside its slice, and the page it shares with the previous (next) expert
        too when that one is not resident either (``prev_free``/``next_free``; the first and last
        expert share theirs with no one)."""
        if self.shared:
            return None
        lo, hi = self.slice_range(e)
        lo += self.shift
        hi += self.shift
        a, b = round_up(lo, PAGE), round_down(hi, PAGE)
        if a != lo and (prev_free or e == 0):
            a -= PAGE
        if b != hi and (next_free or e == self.info.n_expert - 1):
            b += PAGE
        b = min(b, self._map.size)
        return (self._map.base + a, b - a) if b > a else None

    def close(self) -> None:
        self.view.release()


class FramePlan:
    """How a frame layout holds a budget: ``n_frames`` experts (the budget over ``expert_bytes``,
    one expert's slices summed, what the LRU counts), each kind's ``strides`` (bytes from frame to
    frame: the slice, plus a page where the kind's tensors start at several offsets modulo 4096)."""

    def __init__(self, n_frames: int, strides: dict[str, int], expert_bytes: int) -> None:
        self.n_frames = n_frames
        self.strides = strides
        self.expert_bytes = expert_bytes


def frame_plan(layout: ModelLayout, budget: int | None) -> FramePlan | None:
    """The frame layout for ``budget`` bytes, or None when it does not apply: no budget or none
    below the bank, fewer frames than one layer has experts (what a prefill's routing of one
    layer may need at once; the in-place layout lets such a layer exceed the budget), a kind whose
    slices differ in size between layers or are not a multiple of 4096 bytes (a frame could not
    keep every layer's congruence), or layers that stream different kinds of tensors."""
    if not budget or budget >= layout.expert_bank_bytes or not layout.tensors:
        return None
    strides: dict[str, int] = {}
    shifts: dict[str, set[int]] = {}
    kinds_per_layer = {tuple(sorted(i.kind for i in ts)) for ts in layout.layers if ts}
    if len(kinds_per_layer) != 1:
        return None
    for info in layout.tensors.values():
        if strides.setdefault(info.kind, info.expert_stride) != info.expert_stride or info.expert_stride % DIRECT_ALIGN:
            return None
        shifts.setdefault(info.kind, set()).add(info.file_offset % DIRECT_ALIGN)
    # one shift for a kind: the frames need no room for it; several: a page of room each (layout
    # overhead outside the budget, as the in-place layout's pages shared by two slices are)
    padded = {k: st + (DIRECT_ALIGN if len(shifts[k]) > 1 else 0) for k, st in strides.items()}
    expert_bytes = sum(strides.values())
    n_frames = min(int(budget // expert_bytes), layout.n_expert * len(layout.moe_layers))
    if n_frames < layout.n_expert:
        return None
    return FramePlan(n_frames, padded, expert_bytes)


class ExpertStore:
    """A :class:`TensorBuffer` for every expert tensor of ``layout`` (``buffers[name]``,
    ``layer_bufs[il]``), laid out in place, as shared windows or in frame pools (``frames``, a
    :class:`FramePlan`; see module doc). ``huge``: the frame pools in 2 MiB pages (else 4 KiB
    pages); :attr:`huge` says whether pools in 2 MiB pages were made, :attr:`populated` whether
    every pool was faulted in when it was made (:meth:`_Mapping.populate`)."""

    def __init__(self, layout: ModelLayout, windows: bool = False, frames: FramePlan | None = None,
                 huge: bool = True) -> None:
        self.windows = bool(windows)
        self.frames = frames
        self.huge = bool(frames is not None and huge)
        self.populated = frames is not None
        self._maps: list[_Mapping] = []
        self.buffers: dict[str, TensorBuffer] = {}
        if frames is not None:
            pools: dict[str, _Mapping] = {}
            for kind, stride in frames.strides.items():
                pools[kind] = _Mapping(frames.n_frames * stride + DIRECT_ALIGN, huge=self.huge)
                self._maps.append(pools[kind])
                self.populated = pools[kind].populate() and self.populated
            for info in layout.tensors.values():
                self.buffers[info.name] = TensorBuffer(info, pools[info.kind], shared=True,
                                                       frame_stride=frames.strides[info.kind], n_frames=frames.n_frames)
        elif self.windows:
            groups: dict[tuple[str, int], list[ExpertTensorInfo]] = {}
            for info in layout.tensors.values():
                groups.setdefault((info.kind, info.expert_stride), []).append(info)
            for infos in groups.values():
                m = _Mapping(max(i.n_bytes for i in infos) + DIRECT_ALIGN)
                self._maps.append(m)
                for info in infos:
                    self.buffers[info.name] = TensorBuffer(info, m, shared=True)
        else:
            for info in layout.tensors.values():
                m = _Mapping(info.n_bytes + info.file_offset % DIRECT_ALIGN)
                self._maps.append(m)
                self.buffers[info.name] = TensorBuffer(info, m, shared=False)
        self.layer_bufs: list[list[TensorBuffer]] = [[self.buffers[i.name] for i in ts] for ts in layout.layers]

    def release_experts(self, il: int, experts: Iterable[int], resident: Callable[[int, int], bool]) -> None:
        """Give back the pages of ``experts`` of layer ``il``; ``resident(il, e)`` says which
        neighbours still hold their shared edge pages."""
        self.release_pairs([(il, e) for e in experts], resident)

    def release_pairs(self, pairs: Iterable[tuple[int, int]], resident: Callable[[int, int], bool]) -> None:
        """Give back the pages of every (layer, expert) in ``pairs`` in one batch (:func:`dontneed`);
        ``resident`` is asked after every pair has left (a page two evicted neighbours share goes)."""
        if self.windows or self.frames is not None:
            return
        ranges = []
        for il, e in pairs:
            prev_free = e > 0 and not resident(il, e - 1)
            next_free = not resident(il, e + 1)
            for tb in self.layer_bufs[il]:
                r = tb.release_range(e, prev_free, next_free)
                if r is not None:
                    ranges.append(r)
        dontneed(ranges)

    def close(self) -> None:
        for tb in self.buffers.values():
            tb.close()
        for m in self._maps:
            m.close()
        self.buffers = {}
        self._maps = []
