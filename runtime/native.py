"""The native half of the streaming path (``bmoe_native.c`` next to this file): the eval-callback
shim with its fast paths, and the pool of read lanes.

It is compiled once with the system C compiler (the one that built llama-cpp-python) into the
user cache dir, named by a hash of the source (bmoe_top/cbuild.py). Without a compiler, or with
``BMOE_NATIVE_HOOK=0``, :func:`library` returns None and the runtime uses its pure-Python
callback and reader (same tokens, slower).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from importlib import resources
from typing import Any

from bmoe_top.cbuild import build

from .ggml_struct import GGMLTensor

__all__ = ["HookState", "Job", "ReadPool", "library", "native_error"]

_lib: Any = None
_tried = False
native_error: str | None = None


class HookState(ctypes.Structure):
    """``struct bmoe_hook`` (bmoe_native.c): the callback's state, shared with Python."""

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
    ]

    @classmethod
    def for_tensors(cls, py: int) -> HookState:
        return cls(py=py, name_offset=GGMLTensor.name.offset, ne_offset=GGMLTensor.ne.offset,
                   nb_offset=GGMLTensor.nb.offset, data_offset=GGMLTensor.data.offset,
                   src_offset=GGMLTensor.src.offset, type_offset=GGMLTensor.type.offset)


class Job(ctypes.Structure):
    """``struct bmoe_job``: read ``len`` bytes at ``off`` of ``fd`` into ``dst``."""

    _fields_ = [("fd", ctypes.c_int), ("direct", ctypes.c_int), ("off", ctypes.c_uint64),
                ("len", ctypes.c_uint64), ("dst", ctypes.c_void_p)]


def _source() -> str:
    return (resources.files("bmoe_top.runtime") / "bmoe_native.c").read_text(encoding="utf-8")


def library() -> Any:
    """The compiled library (ctypes CDLL), or None (disabled, no compiler, build failed:
    :data:`native_error` says why)."""
    global _lib, _tried, native_error
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("BMOE_NATIVE_HOOK", "1") == "0":
        native_error = "disabled by BMOE_NATIVE_HOOK=0"
        return None
    try:
        lib: Any = ctypes.CDLL(str(build("bmoe_native", _source(), ("-pthread",))))
    except (OSError, subprocess.SubprocessError) as e:
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
                                      ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
    lib.bmoe_cache_tensor.restype = ctypes.c_int
    lib.bmoe_cache_sync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.bmoe_cache_sync.restype = None
    lib.bmoe_cache_take.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.bmoe_cache_take.restype = None
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
