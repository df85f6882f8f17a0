"""ctypes view of ``struct ggml_tensor`` and the few ggml / ggml-backend getters we call.

``ggml_tensor`` has no Python binding in llama-cpp-python, so we declare it here from
``ggml/include/ggml.h`` of the llama.cpp vendored by llama-cpp-python 0.3.36 (pinned in
pyproject.toml). Because a wrong layout would silently read or write the wrong bytes, the
runtime calls :func:`check_layout` on real tensors at start-up: every field we rely on is compared
with what the library's own getters (``ggml_get_name``, ``ggml_get_data``, ``ggml_nbytes``,
``ggml_nelements``, ``ggml_tensor_overhead``) return, and streaming is refused on any mismatch
(:class:`LayoutError`).
"""

from __future__ import annotations

import ctypes
import pathlib
from typing import Any

GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_OP_PARAMS = 64
GGML_MAX_NAME = 64

#: ``sizeof(struct ggml_object)`` in the pinned ggml (offs, size, next, type, padding[4]).
GGML_OBJECT_SIZE = 32

#: ggml_type values we name in messages (ggml.h ``enum ggml_type``).
GGML_TYPE_I32 = 26


class LayoutError(RuntimeError):
    """The ctypes ``ggml_tensor`` layout does not match the loaded library."""


class GGMLTensor(ctypes.Structure):
    """``struct ggml_tensor`` (ggml.h, llama-cpp-python 0.3.36)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


NAME_OFFSET = GGMLTensor.name.offset
DATA_OFFSET = GGMLTensor.data.offset


def tensor_at(addr: int) -> GGMLTensor:
    """The ``ggml_tensor`` at address ``addr`` (no copy: writes go to the library's tensor)."""
    return GGMLTensor.from_address(addr)


def tensor_name(addr: int) -> bytes:
    """The NUL-terminated name of the tensor at ``addr`` (fast path for the eval callback)."""
    return ctypes.string_at(addr + NAME_OFFSET)


class GGMLLib:
    """The ggml-base shared library that llama-cpp-python loaded, with typed getters."""

    def __init__(self) -> None:
        from .llama_lib import L  # loads libllama and its ggml dependencies

        libdir = pathlib.Path(L.__file__).parent / "lib"
        cands = sorted(libdir.glob("libggml-base.so*")) or sorted(libdir.glob("libggml-base*"))
        if not cands:
            raise LayoutError(f"libggml-base not found next to llama_cpp in {libdir}")
        lib: Any = ctypes.CDLL(str(cands[0]))
        self.lib = lib
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, args, res in [
            ("ggml_get_name", [vp], vp),
            ("ggml_get_data", [vp], vp),
            ("ggml_nbytes", [vp], sz),
            ("ggml_nelements", [vp], ctypes.c_int64),
            ("ggml_tensor_overhead", [], sz),
            ("ggml_type_name", [ctypes.c_int], ctypes.c_char_p),
            ("ggml_op_name", [ctypes.c_int], ctypes.c_char_p),
            ("ggml_backend_buffer_name", [vp], ctypes.c_char_p),
            ("ggml_backend_buffer_get_base", [vp], vp),
            ("ggml_backend_buffer_get_size", [vp], sz),
            ("ggml_backend_buffer_is_host", [vp], ctypes.c_bool),
            ("ggml_quantize_chunk", [ctypes.c_int, vp, vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, vp], sz),
            ("ggml_row_size", [ctypes.c_int, ctypes.c_int64], sz),
            ("ggml_blck_size", [ctypes.c_int], ctypes.c_int64),
        ]:
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res

    def type_name(self, t: int) -> str:
        return (self.lib.ggml_type_name(t) or b"?").decode()

    def op_name(self, op: int) -> str:
        """ggml's name of op number ``op`` (``GET_ROWS``, ``MUL_MAT_ID``, ...)."""
        return (self.lib.ggml_op_name(op) or b"?").decode()

    def row_size(self, t: int, n_per_row: int) -> int:
        """Bytes of one row of ``n_per_row`` values of ggml type ``t``."""
        return int(self.lib.ggml_row_size(t, n_per_row))

    def block_size(self, t: int) -> int:
        """Values per quantization block of ggml type ``t``."""
        return int(self.lib.ggml_blck_size(t))

    def quantize(self, t: int, src: Any, dst: Any, rows: int, n_per_row: int) -> None:
        """``ggml_quantize_chunk``: ``rows`` rows of float32 ``src`` (C-contiguous numpy) into
        ``dst`` (uint8, ``rows * row_size`` bytes), no importance matrix."""
        assert src.flags.c_contiguous and dst.flags.c_contiguous and dst.nbytes >= rows * self.row_size(t, n_per_row)
        self.lib.ggml_quantize_chunk(t, src.ctypes.data, dst.ctypes.data, 0, rows, n_per_row, None)

    def buffer_info(self, buf: int) -> tuple[str, int, int, bool]:
        """(name, base address, size in bytes, is_host) of a ``ggml_backend_buffer``."""
        if not buf:
            return ("<none>", 0, 0, False)
        name = (self.lib.ggml_backend_buffer_name(buf) or b"").decode(errors="replace")
        return (
            name,
            int(self.lib.ggml_backend_buffer_get_base(buf) or 0),
            int(self.lib.ggml_backend_buffer_get_size(buf)),
            bool(self.lib.ggml_backend_buffer_is_host(buf)),
        )


def check_layout(ggml: GGMLLib, addrs: list[int], cls: Any = GGMLTensor) -> None:
    """Compare the ctypes layout ``cls`` with the library's getters on real tensors.

    ``addrs``: addresses of live ``ggml_tensor`` objects (at least one).
    Raises :class:`LayoutError` naming the first field that disagrees.
    """
    lib = ggml.lib
    overhead = int(lib.ggml_tensor_overhead())
    if overhead != GGML_OBJECT_SIZE + ctypes.sizeof(cls):
        raise LayoutError(
            f"ggml_tensor size mismatch: library overhead {overhead} B, "
            f"ctypes {GGML_OBJECT_SIZE}+{ctypes.sizeof(cls)} B"
        )
    if not addrs:
        raise LayoutError("no tensor to check the ggml_tensor layout against")
    for a in addrs:
        t = cls.from_address(a)
        if int(lib.ggml_get_name(a) or 0) != a + cls.name.offset:
            raise LayoutError("ggml_tensor.name offset does not match ggml_get_name")
        if int(lib.ggml_get_data(a) or 0) != int(t.data or 0):
            raise LayoutError("ggml_tensor.data does not match ggml_get_data")
        nel = 1
        for i in range(GGML_MAX_DIMS):
            nel *= int(t.ne[i])
        if int(lib.ggml_nelements(a)) != nel:
            raise LayoutError("ggml_tensor.ne does not match ggml_nelements")
        # ggml_nbytes for a contiguous tensor equals nb[3]*ne[3]
        if int(lib.ggml_nbytes(a)) != int(t.nb[3]) * int(t.ne[3]):
            raise LayoutError("ggml_tensor.nb does not match ggml_nbytes")
