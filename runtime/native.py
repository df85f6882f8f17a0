"""The native half of the streaming path: the eval-callback shim with its fast paths, the read
lanes and the expert LRU mirror (``bmoe_native.c``; the contract it shares with this module is
``bmoe_native.h``).

The library is the C extension ``bmoe_top.runtime._bmoe_native``, compiled when the package is
installed (bmoe_top/native_ext.py). At load, :func:`library` compares the ctypes structures and
enums below with the library's own tables (every field's name, offset and size, each structure's
size, each enum value) and refuses a library that disagrees. Without the library (no C compiler
at install), or with ``BMOE_NATIVE_HOOK=0``, :func:`library` returns None and the runtime uses its
pure-Python callback and reader (same tokens, slower).
"""

from __future__ import annotations

import ctypes
import enum
import os
from typing import Any

from bmoe_top.native_ext import load

from .ggml_struct import GGMLTensor

__all__ = ["HookState", "Job", "LogKind", "Mode", "ReadPool", "check_contract", "library", "native_error"]

_lib: Any = None
_tried = False
native_error: str | None = None


class Mode(enum.IntEnum):
    """``enum bmoe_mode``: what the callback does (``HookState.mode``)."""

    IDLE = 0
    CAPTURE = 1
    ROUTE = 2


class LogKind(enum.IntEnum):
    """``enum bmoe_log_kind``: the kind of a native log entry (the high half of its layer word)."""

    HIT = 0  # a routed expert was resident: moved to the recent end
    MISS = 1  # a routed expert was not resident
    EVICT = 2  # an expert left the LRU
    INSERT = 3  # a missed expert was read and entered the recent end
    PREFETCH = 4  # an expert predicted for the next layer was read and entered the recent end
    PAGECACHE = 5  # a missed expert every byte of which the page cache served


class HookState(ctypes.Structure):
    """``struct bmoe_hook``: the callback's state, shared with Python."""

    _fields_ = [
        ("py", ctypes.c_void_p),
        ("py_ud", ctypes.c_void_p),
        ("name_offset", ctypes.c_size_t),
        ("ne_offset", ctypes.c_size_t),
        ("nb_offset", ctypes.c_size_t),
        ("data_offset", ctypes.c_size_t),
        ("mode", ctypes.c_int),
        ("want_weights", ctypes.c_int),
        ("skip_resident", ctypes.c_int),
        ("fast_hits", ctypes.c_int),
        ("n_layer", ctypes.c_int),
        ("n_expert", ctypes.c_int),
        ("resident", ctypes.c_void_p),
        ("layer_hits", ctypes.c_void_p),
        ("touch", ctypes.c_void_p),
        ("touch_cap", ctypes.c_int),
        ("n_touch", ctypes.c_int),
        ("fast_misses", ctypes.c_int),
        ("cache", ctypes.c_void_p),
        ("src_offset", ctypes.c_size_t),
        ("type_offset", ctypes.c_size_t),
        ("layer_misses", ctypes.c_void_p),
        ("ever", ctypes.c_void_p),
        ("layer_pagecache", ctypes.c_void_p),
        ("frame_of", ctypes.c_void_p),
        ("free_frames", ctypes.c_void_p),
        ("n_free", ctypes.c_void_p),
    ]

    @classmethod
    def for_tensors(cls, py: int) -> HookState:
        return cls(py=py, name_offset=GGMLTensor.name.offset, ne_offset=GGMLTensor.ne.offset,
                   nb_offset=GGMLTensor.nb.offset, data_offset=GGMLTensor.data.offset,
                   src_offset=GGMLTensor.src.offset, type_offset=GGMLTensor.type.offset)


class Job(ctypes.Structure):
    """``struct bmoe_job``: read ``len`` bytes at ``off`` of ``fd`` into ``dst``; with ``nowait``
    (buffered) ``cached`` comes back as the bytes the page cache served without blocking."""

    _fields_ = [("fd", ctypes.c_int), ("direct", ctypes.c_int), ("off", ctypes.c_uint64),
                ("len", ctypes.c_uint64), ("dst", ctypes.c_void_p), ("cached", ctypes.c_uint64),
                ("nowait", ctypes.c_int)]


class _Field(ctypes.Structure):
    """``struct bmoe_field``: a row of the library's contract tables."""

    _fields_ = [("name", ctypes.c_char_p), ("offset", ctypes.c_size_t), ("size", ctypes.c_size_t)]


def _rows(fn: Any, name: str, *extra: Any) -> list[tuple[str, int, int]]:
    n = ctypes.c_size_t()
    ptr = fn(name.encode(), ctypes.byref(n), *extra)
    if not ptr:
        raise OSError(f"the native library has no table for {name}")
    return [((r.name or b"").decode(), int(r.offset), int(r.size)) for r in ptr[: n.value]]


def check_contract(lib: Any, hook: type[ctypes.Structure] = HookState, job: type[ctypes.Structure] = Job,
                   mode: type[enum.IntEnum] = Mode, log: type[enum.IntEnum] = LogKind) -> None:
    """Compare the ctypes structures and enums with the library's tables (bmoe_native.h): field
    names in order, offsets, sizes, structure sizes, enum names and values. Raises OSError naming
    the first difference."""
    lib.bmoe_struct_fields.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                                       ctypes.POINTER(ctypes.c_size_t)]
    lib.bmoe_struct_fields.restype = ctypes.POINTER(_Field)
    lib.bmoe_enum_values.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.bmoe_enum_values.restype = ctypes.POINTER(_Field)
    for cname, cls in (("bmoe_hook", hook), ("bmoe_job", job)):
        size = ctypes.c_size_t()
        rows = _rows(lib.bmoe_struct_fields, cname, ctypes.byref(size))
        ours = [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]
        for theirs, mine in zip(rows, ours):
            if theirs != mine:
                raise OSError(f"struct {cname}: the library has {theirs[0]} at offset {theirs[1]} ({theirs[2]} B), "
                              f"{cls.__name__} has {mine[0]} at {mine[1]} ({mine[2]} B)")
        if len(rows) != len(ours) or size.value != ctypes.sizeof(cls):
            raise OSError(f"struct {cname}: the library has {len(rows)} fields in {size.value} B, "
                          f"{cls.__name__} {len(ours)} in {ctypes.sizeof(cls)} B")
    for cname, prefix, en in (("bmoe_mode", "BMOE_MODE_", mode), ("bmoe_log_kind", "BMOE_LOG_", log)):
        theirs_v = {name.removeprefix(prefix): value for name, value, _ in _rows(lib.bmoe_enum_values, cname)}
        mine_v = {m.name: int(m.value) for m in en}
        if theirs_v != mine_v:
            raise OSError(f"enum {cname}: the library has {theirs_v}, {en.__name__} {mine_v}")


def library() -> Any:
    """The compiled library (ctypes CDLL), or None (disabled, not built, built from other sources,
    or its contract differs from this module's: :data:`native_error` says why)."""
    global _lib, _tried, native_error
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("BMOE_NATIVE_HOOK", "1") == "0":
        native_error = "disabled by BMOE_NATIVE_HOOK=0"
        return None
    try:
        lib: Any = load("bmoe_top.runtime._bmoe_native")
        check_contract(lib)
    except OSError as e:
        native_error = str(e)
        return None
    lib.bmoe_eval_cb.restype = ctypes.c_bool
    lib.bmoe_pool_new.argtypes = [ctypes.c_int]
    lib.bmoe_pool_new.restype = ctypes.c_void_p
    lib.bmoe_pool_lanes.argtypes = [ctypes.c_void_p]
    lib.bmoe_pool_lanes.restype = ctypes.c_int
    lib.bmoe_pool_free.argtypes = [ctypes.c_void_p]
    lib.bmoe_pool_free.restype = None
    lib.bmoe_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int)]
    lib.bmoe_read.restype = ctypes.c_int
    lib.bmoe_cache_new.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.bmoe_cache_new.restype = ctypes.c_void_p
    lib.bmoe_cache_tensor.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                                      ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_uint64]
    lib.bmoe_cache_tensor.restype = ctypes.c_int
    lib.bmoe_cache_sync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.bmoe_cache_sync.restype = None
    lib.bmoe_cache_take.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.bmoe_cache_take.restype = None
    lib.bmoe_cache_order.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.bmoe_cache_order.restype = ctypes.c_int
    lib.bmoe_cache_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.bmoe_cache_prefetch.restype = ctypes.c_int
    lib.bmoe_cache_settle.argtypes = [ctypes.c_void_p]
    lib.bmoe_cache_settle.restype = None
    lib.bmoe_cache_free.argtypes = [ctypes.c_void_p]
    lib.bmoe_cache_free.restype = None
    _lib = lib
    return lib


class ReadPool:
    """``n_lanes`` native read lanes (the calling thread is lane 0). :meth:`read` runs a batch of
    :class:`Job` (GIL released) and returns (busy seconds summed over lanes, 0) or
    (busy, -errno, index of the failed job)."""

    def __init__(self, lib: Any, n_lanes: int) -> None:
        self.lib = lib
        self.ptr = lib.bmoe_pool_new(int(n_lanes))
        if not self.ptr:
            raise OSError("cannot start the native read lanes")
        self.lanes = int(lib.bmoe_pool_lanes(self.ptr))
        self._jobs = (Job * 64)()
        self._busy = ctypes.c_int64()
        self._err = ctypes.c_int()

    def jobs(self, n: int) -> ctypes.Array[Job]:
        """A job array of at least ``n`` entries, reused between calls (decode thread only)."""
        if len(self._jobs) < n:
            self._jobs = (Job * max(n, 2 * len(self._jobs)))()
        return self._jobs

    def read(self, n: int) -> tuple[float, int, int]:
        rc = self.lib.bmoe_read(self.ptr, self._jobs, n, ctypes.byref(self._busy), ctypes.byref(self._err))
        return self._busy.value / 1e9, int(rc), int(self._err.value)

    def close(self) -> None:
        if self.ptr:
            self.lib.bmoe_pool_free(self.ptr)
            self.ptr = None
