"""Memory samples: what ``bmoe-top attach --pid``/``--gguf`` reads each interval, and how it is
recorded (docs/memory.md "Recording"). Pure: the readers are ``bmoe_top.tui.sources.memory``.

Two records: :class:`WatchedFiles` (the model file(s) watched and their layout in pages: sent
once, and again when the files change) and :class:`MemorySample` (one reading: the resident
pages of every expert slice, of the dense tensors and of each file, the process's counters, the
system's memory and pressure, the cgroup's limit and usage, and the tokens the server generated).
Every figure that could not be read is None (absent is not zero). Sizes are bytes, counters are
since the process started, times unix seconds.

In a recording (``--record``, :mod:`bmoe_top.parsers.recording`) each record is one entry of
``src`` ``memory`` whose line is a JSON object with ``kind`` ``files``, ``sample`` or ``note``
(one line of text: why a sample is missing). :class:`SampleEncoder` writes the layer x expert
pages whole every :data:`KEYFRAME` samples and after a change of files, and in between only the
slices whose pages changed (``changed``: ``[[layer, expert, pages], ...]``);
:class:`SampleDecoder` reads them back, and a sample whose base is not known (a lost or bad
line before it) has no slice pages until the next whole one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from .limits import MAX_LAYER_EXPERT_CELLS, dims_problem

__all__ = ["KEYFRAME", "CgroupFigures", "MemorySample", "ProcessFigures", "SampleDecoder", "SampleEncoder",
           "SystemFigures", "WatchedFiles", "decode_line"]

I64 = NDArray[np.int64]
#: Samples between two whole layer x expert maps in a recording.
KEYFRAME = 60
#: The largest count a recording may state for pages, bytes or a counter (an int64 holds it).
_MAX_COUNT = 1 << 62


@dataclass(frozen=True, slots=True)
class WatchedFiles:
    """The model watched: its ``paths`` (shards in order) and their ``sizes`` (bytes), the
    ``page_size``, ``n_layer`` x ``n_expert`` and the pages each expert's slices span
    (``slice_pages``, int64 ``[n_layer, n_expert]``, 0 in a layer with no experts), the pages of
    the dense tensors and of each file whole, ``arch`` and ``name`` from its header, ``method``
    (``cachestat`` or ``mincore``), ``pid`` (None: a file watched alone) and ``direct_io``: the
    process holds the file open with ``O_DIRECT`` (its reads bypass the page cache)."""

    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    page_size: int
    n_layer: int
    n_expert: int
    slice_pages: I64
    dense_pages: int
    file_pages: tuple[int, ...]
    arch: str
    name: str
    method: str
    pid: int | None = None
    direct_io: bool = False

    @property
    def total_pages(self) -> int:
        return sum(self.file_pages)


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """The watched process (``/proc/PID/stat``, ``io``, ``status``): its ``pid``, ``comm`` and
    ``state``; ``majflt``/``minflt`` (page faults since it started), ``cpu_ticks`` (user + system);
    ``read_bytes`` (bytes it caused to be read from storage) and ``rchar`` (bytes its read calls
    returned, page cache hits included); ``rss`` (VmRSS) = ``rss_anon`` + ``rss_file`` +
    ``rss_shmem`` (bytes), ``swap`` (VmSwap)."""

    pid: int
    comm: str
    state: str
    majflt: int | None = None
    minflt: int | None = None
    cpu_ticks: int | None = None
    read_bytes: int | None = None
    rchar: int | None = None
    rss: int | None = None
    rss_anon: int | None = None
    rss_file: int | None = None
    rss_shmem: int | None = None
    swap: int | None = None


@dataclass(frozen=True, slots=True)
class SystemFigures:
    """The machine (``/proc/meminfo``, ``/proc/pressure/memory``): bytes of RAM in all
    (``mem_total``), available without swapping (``mem_available``) and in the page cache
    (``cached``); memory pressure: the share of the last 10 s in which some (``full``: every
    non-idle) task stalled on memory, percent, and the stall totals in microseconds."""

    mem_total: int | None = None
    mem_available: int | None = None
    cached: int | None = None
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None
    psi_some_total_us: int | None = None
    psi_full_total_us: int | None = None


@dataclass(frozen=True, slots=True)
class CgroupFigures:
    """The memory cgroup the process runs in (cgroup ``version`` 1 or 2): its ``path``; the
    tightest ``limit`` on it (bytes; None = none) and ``limit_path``, the cgroup that sets it
    (itself or an ancestor); that cgroup's ``usage`` and ``file`` (its page cache, bytes)."""

    version: int
    path: str
    limit: int | None = None
    limit_path: str = ""
    usage: int | None = None
    file: int | None = None


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One reading at unix time ``t``: resident pages of each expert (``slices``, int64
    ``[n_layer, n_expert]`` as :class:`WatchedFiles` says them), of the dense tensors (``dense``)
    and of each file (``files``), all None when residency was not read this time; the process,
    the system and the cgroup (None when not read); ``tokens``: the server's generated-token
    counter (``--metrics``), None without one."""

    t: float
    slices: I64 | None = None
    dense: int | None = None
    files: tuple[int, ...] | None = None
    proc: ProcessFigures | None = None
    system: SystemFigures | None = None
    cgroup: CgroupFigures | None = None
    tokens: int | None = None


def _dump(obj: dict[str, Any]) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def _figures(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    return {k: getattr(obj, k) for k in obj.__slots__ if getattr(obj, k) is not None}


class SampleEncoder:
    """Records -> recording lines (see the module docstring); one encoder per recording."""

    def __init__(self) -> None:
        self._base: I64 | None = None
        self._since_key = 0

    def files(self, w: WatchedFiles) -> str:
        self._base = None
        return _dump({"kind": "files", "paths": list(w.paths), "sizes": list(w.sizes), "page_size": w.page_size,
                      "n_layer": w.n_layer, "n_expert": w.n_expert, "slice_pages": w.slice_pages.tolist(),
                      "dense_pages": w.dense_pages, "file_pages": list(w.file_pages), "arch": w.arch,
                      "name": w.name, "method": w.method, "pid": w.pid, "direct_io": w.direct_io})

    def sample(self, s: MemorySample) -> str:
        d: dict[str, Any] = {"kind": "sample", "t": round(s.t, 6)}
        if s.slices is not None:
            if self._base is None or self._base.shape != s.slices.shape or self._since_key >= KEYFRAME:
                d["slices"] = s.slices.tolist()
                self._since_key = 0
            else:
                li, ei = np.nonzero(s.slices != self._base)
                d["changed"] = np.stack([li, ei, s.slices[li, ei]], axis=1).tolist()
                self._since_key += 1
            self._base = s.slices.copy()
            d["dense"] = s.dense
            d["files"] = list(s.files or ())
        for key in ("proc", "system", "cgroup"):
            f = _figures(getattr(s, key))
            if f is not None:
                d[key] = f
        if s.tokens is not None:
            d["tokens"] = s.tokens
        return _dump(d)

    @staticmethod
    def note(text: str, t: float) -> str:
        return _dump({"kind": "note", "t": round(t, 6), "text": text})


class _Bad(Exception):
    pass


def _count(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_COUNT:
        raise _Bad(f"{what} must be a count from 0 to 2^62, got {str(v)[:40]}")
    return v


def _opt_count(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    return None if v is None else _count(v, key)


def _opt_float(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise _Bad(f"{key} must be a number, got {str(v)[:40]}")
    return float(v)


def _text(d: dict[str, Any], key: str, cap: int = 4096) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        raise _Bad(f"{key} must be a string")
    return v[:cap]


def _counts(v: Any, what: str, cap: int = 1 << 16) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > cap:
        raise _Bad(f"{what} must be a list of at most {cap} counts")
    return tuple(_count(x, what) for x in v)


def _matrix(v: Any, n_layer: int, n_expert: int, what: str) -> I64:
    if not isinstance(v, list) or len(v) != n_layer or any(not isinstance(r, list) or len(r) != n_expert for r in v):
        raise _Bad(f"{what} must be {n_layer} lists of {n_expert} counts")
    try:
        a = np.array(v, dtype=np.int64).reshape(n_layer, n_expert)
    except (ValueError, TypeError, OverflowError):
        raise _Bad(f"{what} must hold counts") from None
    if a.size and (a.min() < 0 or a.max() > _MAX_COUNT):
        raise _Bad(f"{what} must hold counts from 0 to 2^62")
    return a


def _files(d: dict[str, Any]) -> WatchedFiles:
    problem = dims_problem(n_layer=d.get("n_layer"), n_expert=d.get("n_expert"))
    if problem is not None:
        raise _Bad(problem)
    n_layer, n_expert = _count(d.get("n_layer"), "n_layer"), _count(d.get("n_expert"), "n_expert")
    if n_layer * n_expert > MAX_LAYER_EXPERT_CELLS:
        raise _Bad(f"{n_layer} x {n_expert} is over the cap of {MAX_LAYER_EXPERT_CELLS} cells")
    paths = d.get("paths")
    if not isinstance(paths, list) or not paths or len(paths) > 4096 or not all(isinstance(p, str) for p in paths):
        raise _Bad("paths must be a list of file names")
    sizes = _counts(d.get("sizes"), "sizes")
    file_pages = _counts(d.get("file_pages"), "file_pages")
    if len(sizes) != len(paths) or len(file_pages) != len(paths):
        raise _Bad("paths, sizes and file_pages must be as long as each other")
    page = _count(d.get("page_size"), "page_size")
    if page <= 0:
        raise _Bad("page_size must be above 0")
    pid = d.get("pid")
    if pid is not None:
        _count(pid, "pid")
    return WatchedFiles(tuple(p[:4096] for p in paths), sizes, page, n_layer, n_expert,
                        _matrix(d.get("slice_pages"), n_layer, n_expert, "slice_pages"),
                        _count(d.get("dense_pages"), "dense_pages"), file_pages, _text(d, "arch", 200),
                        _text(d, "name", 200), _text(d, "method", 40), pid, bool(d.get("direct_io", False)))


def _proc(d: Any) -> ProcessFigures | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise _Bad("proc must be an object")
    return ProcessFigures(_count(d.get("pid"), "pid"), _text(d, "comm", 64), _text(d, "state", 8),
                          *(_opt_count(d, k) for k in ("majflt", "minflt", "cpu_ticks", "read_bytes", "rchar",
                                                       "rss", "rss_anon", "rss_file", "rss_shmem", "swap")))


def _system(d: Any) -> SystemFigures | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise _Bad("system must be an object")
    return SystemFigures(_opt_count(d, "mem_total"), _opt_count(d, "mem_available"), _opt_count(d, "cached"),
                         _opt_float(d, "psi_some_avg10"), _opt_float(d, "psi_full_avg10"),
                         _opt_count(d, "psi_some_total_us"), _opt_count(d, "psi_full_total_us"))


def _cgroup(d: Any) -> CgroupFigures | None:
    if d is None:
        return None
    if not isinstance(d, dict) or d.get("version") not in (1, 2):
        raise _Bad("cgroup must be an object with version 1 or 2")
    return CgroupFigures(int(d["version"]), _text(d, "path"), _opt_count(d, "limit"), _text(d, "limit_path"),
                         _opt_count(d, "usage"), _opt_count(d, "file"))


def decode_line(line: str) -> dict[str, Any]:
    """The JSON object of one recorded memory line; ``ValueError`` (one line) when it is not one
    or has no ``kind``."""
    try:
        d = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("kind") not in ("files", "sample", "note"):
        raise ValueError('not a memory record (an object with "kind" files, sample or note)')
    return d


class SampleDecoder:
    """Recording lines -> records (see the module docstring): :meth:`read` returns a
    :class:`WatchedFiles`, a :class:`MemorySample`, or a note's text; ``ValueError`` (one line) for
    a line that is not a well-formed record (the decoder then waits for a whole map)."""

    def __init__(self) -> None:
        self.files: WatchedFiles | None = None
        self._base: I64 | None = None

    def read(self, line: str) -> WatchedFiles | MemorySample | tuple[float | None, str]:
        d = decode_line(line)
        kind = d["kind"]
        try:
            if kind == "files":
                self.files = _files(d)
                self._base = None
                return self.files
            t = _opt_float(d, "t")
            if kind == "note":
                return (t, _text(d, "text", 400))
            if t is None:
                raise _Bad("a sample needs its time t")
            return self._sample(d, t)
        except _Bad as e:
            self._base = None
            raise ValueError(str(e)) from None

    def _sample(self, d: dict[str, Any], t: float) -> MemorySample:
        slices: I64 | None = None
        w = self.files
        if "slices" in d or "changed" in d:
            if w is None:
                raise _Bad("a sample before any files record")
            if "slices" in d:
                slices = _matrix(d["slices"], w.n_layer, w.n_expert, "slices")
            elif self._base is not None:
                ch = d["changed"]
                if not isinstance(ch, list) or len(ch) > w.n_layer * w.n_expert:
                    raise _Bad("changed must be a list of [layer, expert, pages]")
                slices = self._base.copy()
                for item in ch:
                    if not isinstance(item, list) or len(item) != 3:
                        raise _Bad("changed must be a list of [layer, expert, pages]")
                    li, ei, pages = (_count(x, "changed") for x in item)
                    if li >= w.n_layer or ei >= w.n_expert:
                        raise _Bad(f"changed names layer {li} expert {ei}, outside {w.n_layer} x {w.n_expert}")
                    slices[li, ei] = pages
            self._base = slices
        files = _counts(d["files"], "files") if "files" in d else None
        return MemorySample(t, slices, _opt_count(d, "dense"), files,
                            _proc(d.get("proc")), _system(d.get("system")), _cgroup(d.get("cgroup")),
                            _opt_count(d, "tokens"))
