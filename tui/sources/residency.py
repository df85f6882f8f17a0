"""Page-cache residency of a GGUF model's expert slices and dense tensors, sampled without reading
the model or changing what is resident (docs/memory.md "How residency is sampled"). No Textual.

:class:`FileCounter` counts the resident pages of byte ranges of one open file, with one of:

* ``cachestat`` (Linux 6.5+): asks the page cache about each range of the file; no mapping. Its
  cost follows the ranges and the pages cached, not the file's size: one sample of a 17 GiB
  model costs a small part of one ``mincore`` over it (``benchmarks/bench_residency.py``).
* ``mincore``: over a ``PROT_READ``, ``MAP_SHARED`` mapping of the whole file that is never
  touched (no ``MAP_POPULATE``, no ``madvise``): the kernel looks each page up in the page cache.

Both run in a small C loop (``residency_native.c``, the extension
``bmoe_top.tui.sources._residency_native`` built at install: :mod:`bmoe_top.native_ext`); without
a C compiler, ``mincore`` is called from Python and summed with numpy (slower, the same
counts). ``method="auto"`` takes ``cachestat`` where the kernel has it.

Permission: the kernel answers for a file only to a caller who owns it, may write it, or has
CAP_FOWNER (root). For anyone else ``cachestat`` fails with EPERM and ``mincore`` reports every
page resident (to hide what others read); :func:`can_see_residency` tells beforehand, and a
:class:`FileCounter` refuses with :class:`ResidencyError` rather than report that.

:class:`ModelSampler` holds the counters of one model's shards and its
:class:`~bmoe_top.parsers.residency.ResidencyPlan`; :meth:`ModelSampler.sample` returns
:class:`ResidencyCounts`, or raises :class:`ResidencyError` (one line) when a shard was replaced
or truncated since it was opened (the last good counts are the caller's to keep).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from bmoe_top.native_ext import load
from bmoe_top.parsers.gguf_layout import ModelError, ModelLayout, read_layout
from bmoe_top.parsers.residency import ResidencyPlan, fold_counts, plan_residency

__all__ = ["METHODS", "FileCounter", "ModelSampler", "ResidencyCounts", "ResidencyError", "can_see_residency",
           "native_error", "open_model"]

I64 = NDArray[np.int64]
PAGE = mmap.PAGESIZE
#: What ``method`` may be.
METHODS = ("auto", "cachestat", "mincore")


class ResidencyError(Exception):
    """Residency cannot be sampled (one line for the user: the file, and why)."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value

_native: ctypes.CDLL | None = None
_tried = False
native_error: str | None = None
_P = ctypes.c_void_p
_N = ctypes.c_int64


def _lib() -> ctypes.CDLL | None:
    """The compiled helper, loaded the first time it is asked for; None when it was not built
    (no C compiler at install) or is stale (:data:`native_error` says why)."""
    global _native, _tried, native_error
    if not _tried:
        _tried = True
        try:
            lib = load("bmoe_top.tui.sources._residency_native")
            lib.bmoe_cachestat_ranges.argtypes = [ctypes.c_int, _N, _P, _P, _P]
            lib.bmoe_cachestat_ranges.restype = _N
            lib.bmoe_mincore_ranges.argtypes = [_P, _N, _N, _N, _P, _P, _P, _P]
            lib.bmoe_mincore_ranges.restype = _N
            _native = lib
        except OSError as e:
            native_error = str(e)
    return _native


def can_see_residency(path: str, st: os.stat_result) -> bool:
    """Whether the kernel tells this process which pages of the file are cached: it owns the
    file, may write it, or is root (CAP_FOWNER)."""
    euid = os.geteuid()
    if euid == 0 or st.st_uid == euid:
        return True
    try:
        return os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids)
    except OSError:
        return False


def _errno_text(code: int) -> str:
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"


class FileCounter:
    """Resident pages of byte ranges of the file open on ``fd`` (``path`` names it in messages),
    ``size`` bytes. ``method``: one of :data:`METHODS`. The counter keeps its own duplicate of
    the descriptor (and, for ``mincore``, the mapping) until :meth:`close`.

    Raises :class:`ResidencyError` when this process may not see the file's residency."""

    def __init__(self, path: str, fd: int, size: int, method: str = "auto") -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}")
        st = os.fstat(fd)
        if not can_see_residency(path, st):
            raise ResidencyError(
                f"{path}: the kernel tells which pages of a file are cached only to its owner, to whoever may "
                f"write it, or to root: run bmoe-top as uid {st.st_uid} (the file's owner) or as root")
        self.path = path
        self.size = size
        self.fd = os.dup(fd)
        self._addr: int | None = None
        self._vec: NDArray[np.uint8] | None = None
        lib = _lib()
        self.native = lib is not None
        if method == "auto":
            method = "cachestat" if lib is not None and self._cachestat_works(lib) else "mincore"
        elif method == "cachestat" and (lib is None or not self._cachestat_works(lib)):
            raise ResidencyError(f"{path}: cachestat is not available here "
                                 f"({native_error or 'the kernel has no cachestat (Linux 6.5+)'})")
        self.method = method

    def _cachestat_works(self, lib: ctypes.CDLL) -> bool:
        out = np.zeros(1, dtype=np.int64)
        rc = int(lib.bmoe_cachestat_ranges(self.fd, 0, None, None, out.ctypes.data))
        if rc == -errno.EPERM:
            raise ResidencyError(f"{self.path}: the kernel refuses to say which pages are cached (EPERM)")
        return rc == 0

    def _map(self) -> int:
        if self._addr is None:
            addr = _libc.mmap(None, self.size, mmap.PROT_READ, mmap.MAP_SHARED, self.fd, 0)
            if addr is None or addr == _MAP_FAILED:
                code = ctypes.get_errno()
                raise ResidencyError(f"{self.path}: cannot map it read-only: {_errno_text(code)}")
            self._addr = int(addr)
            self._vec = np.empty(-(-self.size // PAGE), dtype=np.uint8)
        return self._addr

    def count(self, offsets: I64, lengths: I64) -> tuple[I64, int]:
        """(resident pages of each range ``[offsets[i], offsets[i] + lengths[i])``, resident pages
        of the whole file). Raises :class:`ResidencyError` when the kernel call fails."""
        n = len(offsets)
        out = np.zeros(n + 1, dtype=np.int64)
        if self.size <= 0:
            return out[:n], 0
        o = np.ascontiguousarray(offsets, dtype=np.int64)
        ln = np.ascontiguousarray(lengths, dtype=np.int64)
        lib = _native if self.native else None
        if self.method == "cachestat":
            assert lib is not None
            rc = int(lib.bmoe_cachestat_ranges(self.fd, n, o.ctypes.data, ln.ctypes.data, out.ctypes.data))
        else:
            addr = self._map()
            assert self._vec is not None
            if lib is not None:
                rc = int(lib.bmoe_mincore_ranges(addr, self.size, PAGE, n, o.ctypes.data, ln.ctypes.data,
                                                 self._vec.ctypes.data, out.ctypes.data))
            else:
                rc = self._mincore_numpy(addr, o, ln, out)
        if rc != 0:
            raise ResidencyError(f"{self.path}: {self.method} failed: {_errno_text(-rc)}")
        return out[:n], int(out[n])

    def _mincore_numpy(self, addr: int, o: I64, ln: I64, out: I64) -> int:
        vec = self._vec
        assert vec is not None
        if _libc.mincore(addr, self.size, vec.ctypes.data) != 0:
            return -ctypes.get_errno()
        bits = np.concatenate(([0], np.cumsum(vec & 1, dtype=np.int64)))
        npages = len(vec)
        first = np.clip(o // PAGE, 0, npages)
        last = np.clip((o + np.maximum(ln, 1) - 1) // PAGE + 1, 0, npages)
        out[:-1] = np.where(ln > 0, bits[last] - bits[first], 0)
        out[-1] = bits[-1]
        return 0

    def close(self) -> None:
        if self._addr is not None:
            _libc.munmap(self._addr, self.size)
            self._addr = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True, slots=True)
class ResidencyCounts:
    """One sample of a model's residency, in pages (of ``plan.page_size`` bytes): ``slices``
    (int64 ``[n_layer, n_expert]``: each expert's resident pages, its tensors' slices together),
    ``dense`` (the dense tensors'), ``files`` (each shard's whole, header included) and
    ``method`` (``cachestat`` or ``mincore``)."""

    slices: I64
    dense: int
    files: tuple[int, ...]
    method: str

    @property
    def file_total(self) -> int:
        return sum(self.files)


@dataclass(frozen=True, slots=True)
class Identity:
    """What a shard was when it was opened: device, inode and size."""

    dev: int
    ino: int
    size: int


class ModelSampler:
    """The counters of one model's shards (``opened``: ``(path shown, fd)`` per shard, in the
    plan's order; the sampler keeps duplicates of the descriptors) and its plan.

    Raises :class:`ResidencyError` when a shard's residency cannot be seen (permission) or a
    shard is shorter than its tensors need."""

    def __init__(self, plan: ResidencyPlan, opened: list[tuple[str, int]], method: str = "auto") -> None:
        self.plan = plan
        self.counters: list[FileCounter] = []
        self.identity: list[Identity] = []
        try:
            for (path, fd), size in zip(opened, plan.sizes):
                st = os.fstat(fd)
                if st.st_size < size:
                    raise ResidencyError(f"{path} has {st.st_size:,} bytes, its tensors need {size:,}: truncated")
                self.identity.append(Identity(st.st_dev, st.st_ino, size))
                self.counters.append(FileCounter(path, fd, size, method))
        except BaseException:
            self.close()
            raise
        self.method = self.counters[0].method if self.counters else method

    def check(self) -> None:
        """Raises :class:`ResidencyError` when a shard is now shorter than its tensors need (cut
        while watched: its pages past the end are gone)."""
        for c, ident in zip(self.counters, self.identity):
            size = os.fstat(c.fd).st_size
            if size < ident.size:
                raise ResidencyError(f"{c.path} was truncated while watched: {size:,} bytes, its tensors need "
                                     f"{ident.size:,}")

    def sample(self) -> ResidencyCounts:
        """Count every range once (see the module docstring); raises :class:`ResidencyError`."""
        self.check()
        counts: list[I64] = []
        files: list[int] = []
        for c, o, ln in zip(self.counters, self.plan.offsets, self.plan.lengths):
            per, whole = c.count(o, ln)
            counts.append(per)
            files.append(whole)
        slices, dense = fold_counts(self.plan, counts)
        return ResidencyCounts(slices, dense, tuple(files), self.method)

    def close(self) -> None:
        for c in self.counters:
            c.close()
        self.counters = []


def open_model(path: str, method: str = "auto") -> tuple[ModelLayout, ModelSampler]:
    """Read the layout of the GGUF at ``path`` (its first shard for a split model) and open a
    sampler on it. Raises :class:`~bmoe_top.parsers.gguf_layout.ModelError` (a damaged or
    foreign file) or :class:`ResidencyError` (permission, truncation), each one line."""
    layout = read_layout(path, require_moe=False)
    try:
        plan = plan_residency(layout, PAGE)
    except ValueError as e:
        raise ModelError(str(e)) from None
    opened: list[tuple[str, int]] = []
    try:
        for p in plan.paths:
            try:
                opened.append((p, os.open(p, os.O_RDONLY | os.O_CLOEXEC)))
            except OSError as e:
                raise ResidencyError(f"cannot open {p}: {e.strerror or e}") from None
        return layout, ModelSampler(plan, opened, method)
    finally:
        for _p, fd in opened:
            os.close(fd)
