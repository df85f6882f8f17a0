"""Expert reads: byte ranges of the model's shards into memory addresses.

A batch of reads (:meth:`ExpertReader.read_runs`) is spread over ``io_threads`` lanes, the
calling thread being lane 0. With the native library (:mod:`bmoe_top.runtime.native`) the lanes
are C threads and the whole batch is one call that releases the GIL; without it they are Python
threads around ``os.preadv`` (which releases the GIL too). With ``O_DIRECT`` (probed per shard:
some file systems refuse it) a slice whose memory address is congruent to its file offset
modulo 4096 is read by one scatter ``preadv``: the page-aligned middle straight into place, the
two edge pages into a 4096-aligned bounce buffer; anything else goes through the bounce buffer.
Without ``O_DIRECT`` reads go through the page cache straight into place, and each read tells
which tier served it (docs/memory.md "The three tiers in bmoe-run"): a first
``preadv2(RWF_NOWAIT)`` returns, without blocking, the bytes the page cache holds from the start
of the range (it stops at the first page it does not hold); the rest is read as usual, from disk.
That first call *is* the read when the range is cached, and one failing system call when it is
not (benchmarks/bench_tiers.py). With ``O_DIRECT`` every byte comes from disk.

Test hook: ``BMOE_INJECT_READ_ERROR=N`` makes the N-th read (1-based) fail once.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import native

DIRECT_ALIGN = 4096
BOUNCE_BYTES = 4 << 20

__all__ = ["ExpertIOError", "ExpertReader", "Run", "DIRECT_ALIGN"]


@dataclass(frozen=True, slots=True)
class Run:
    """One read: ``length`` bytes at ``file_off`` of shard ``shard`` into address ``addr``
    (``view`` is the same memory as a memoryview, for the Python path)."""

    shard: int
    file_off: int
    length: int
    addr: int
    view: memoryview

    @property
    def xfer(self) -> int:
        """Bytes the read transfers once widened to 4096-byte pages (what O_DIRECT moves)."""
        return round_up(self.file_off + self.length, DIRECT_ALIGN) - round_down(self.file_off, DIRECT_ALIGN)


class ExpertIOError(OSError):
    """A read of expert bytes failed or came back short."""


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def round_down(x: int, a: int) -> int:
    return x // a * a


def _probe_nowait(fd: int) -> bool:
    """The file system answers ``preadv2(RWF_NOWAIT)`` on buffered reads of ``fd``."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return False
    try:
        os.preadv(fd, [bytearray(1)], 0, flag)
    except BlockingIOError:
        return True  # answered: that byte is not in the page cache
    except OSError:
        return False  # EOPNOTSUPP: this file system cannot say
    return True


def _probe_direct(path: str) -> int:
    """An ``O_DIRECT`` descriptor of ``path`` when the file system accepts aligned reads, else -1."""
    if not hasattr(os, "O_DIRECT"):
        return -1
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return -1
    probe = mmap.mmap(-1, DIRECT_ALIGN)
    try:
        os.preadv(dfd, [probe], 0)
        return dfd
    except OSError:
        os.close(dfd)
        return -1
    finally:
        probe.close()


class ExpertReader:
    """Reads byte ranges of the shard files ``paths`` into memory.

    ``o_direct``: use ``O_DIRECT`` where every shard accepts it (``direct`` tells whether it is
    in use). ``io_threads``: read lanes (1 = the caller reads). ``use_native``: the C lanes when
    the native library builds (``native_lanes`` is then set). ``nowait``: buffered reads ask the
    page cache first (every shard's file system answers ``RWF_NOWAIT``); ``tiers``: each read says
    which bytes the page cache served (``nowait``, or ``direct``: none). Raises ``OSError`` when
    a shard cannot be opened.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]], io_threads: int = 1, o_direct: bool = True,
                 use_native: bool = True):
        self.paths = [str(Path(p)) for p in paths]
        self.pool: ThreadPoolExecutor | None = None  # Python lanes (without the native library)
        self._spec_pool: ThreadPoolExecutor | None = None
        self.fds: list[int] = []
        self.dfds: list[int] = []
        try:
            for p in self.paths:
                self.fds.append(os.open(p, os.O_RDONLY | os.O_CLOEXEC))
            if o_direct:
                for p in self.paths:
                    self.dfds.append(_probe_direct(p))
        except OSError:
            self.close()
            raise
        self.direct = bool(self.dfds) and all(fd >= 0 for fd in self.dfds)
        if not self.direct:
            for fd in self.dfds:
                if fd >= 0:
                    os.close(fd)
            self.dfds = []
        self.nowait = not self.direct and all(_probe_nowait(fd) for fd in self.fds)
        self.tiers = self.direct or self.nowait
        self.io_threads = max(1, int(io_threads))
        self._lib = native.library() if use_native else None
        self.native_lanes: native.ReadPool | None = None
        if self._lib is not None:
            self.native_lanes = native.ReadPool(self._lib, self.io_threads)
        elif self.io_threads > 1:
            self.pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="bmoe-io")
        self._local = threading.local()
        self._inject_at = int(os.environ.get("BMOE_INJECT_READ_ERROR", "0") or 0)
        self._reads = 0
        self._count_lock = threading.Lock()
        self._extra_lanes: list[native.ReadPool] = []

    @property
    def injects_errors(self) -> bool:
        """The ``BMOE_INJECT_READ_ERROR`` test hook is set (every read must go through this class)."""
        return bool(self._inject_at)

    def spec_pool(self) -> ThreadPoolExecutor:
        """The one thread speculative reads run on (its batches read alone, off the lanes)."""
        if self._spec_pool is None:
            self._spec_pool = ThreadPoolExecutor(1, thread_name_prefix="bmoe-spec",
                                                 initializer=self.mark_speculative_thread)
        return self._spec_pool

    # -- batches ------------------------------------------------------------------------------
    def read_runs(self, runs: Sequence[Run]) -> tuple[float, list[int]]:
        """Read every run; returns the lanes' summed busy seconds and, per run, the bytes the
        page cache served (from the run's start; 0 with O_DIRECT or without :attr:`tiers`).
        On the decode thread the batch uses the ``io_threads`` lanes; on any other thread
        (speculative reads) it reads alone. Raises :class:`ExpertIOError` (the first failure)
        after every lane has stopped."""
        if not runs:
            return 0.0, []
        self._count_reads(runs)
        on_decode = not getattr(self._local, "spec", False)
        if self._lib is not None:
            lanes = self.native_lanes if on_decode else self._own_native_lane()
            assert lanes is not None
            return self._read_native(lanes, runs)
        cached = [0] * len(runs)
        if on_decode and self.pool is not None and len(runs) > 1:
            return self._read_lanes(runs, cached), cached
        busy = 0.0
        for i, r in enumerate(runs):
            busy += self._read_run(r, cached, i)
        return busy, cached

    def mark_speculative_thread(self) -> None:
        """Called by a speculative-read worker: its batches read alone, not on the shared lanes."""
        self._local.spec = True

    def _own_native_lane(self) -> native.ReadPool:
        pool = getattr(self._local, "native", None)
        if pool is None:
            pool = native.ReadPool(self._lib, 1)
            self._local.native = pool
            with self._count_lock:
                self._extra_lanes.append(pool)
        return pool

    def _count_reads(self, runs: Sequence[Run]) -> None:
        if not self._inject_at:
            return
        with self._count_lock:
            first = self._reads + 1
            self._reads += len(runs)
            hit = first <= self._inject_at <= self._reads
        if hit:
            r = runs[self._inject_at - first]
            raise ExpertIOError(f"read of {r.length} bytes at offset {r.file_off} failed: injected I/O error")

    def _read_native(self, lanes: native.ReadPool, runs: Sequence[Run]) -> tuple[float, list[int]]:
        jobs = lanes.jobs(len(runs))
        direct = 1 if self.direct else 0
        nowait = 1 if self.nowait else 0
        fds = self.dfds if self.direct else self.fds
        for i, r in enumerate(runs):
            j = jobs[i]
            j.fd, j.direct, j.off, j.len, j.dst, j.nowait = fds[r.shard], direct, r.file_off, r.length, r.addr, nowait
        busy, rc, bad = lanes.read(len(runs))
        if rc:
            r = runs[bad] if 0 <= bad < len(runs) else runs[0]
            why = os.strerror(-rc) if rc != -5 else "short read (end of file?)"
            raise ExpertIOError(f"read of {r.length} bytes at offset {r.file_off} failed: {why}")
        return busy, [int(jobs[i].cached) for i in range(len(runs))]

    def _read_run(self, r: Run, cached: list[int], i: int) -> float:
        t0 = time.perf_counter()
        cached[i] = self._read(r.view, r.file_off, r.addr, r.shard, counted=True)
        return time.perf_counter() - t0

    def _read_lanes(self, runs: Sequence[Run], cached: list[int]) -> float:
        """Python lanes (the calling thread is lane 0) pull runs, largest first, from one shared
        iterator: a slow read does not hold up the others' remaining work."""
        assert self.pool is not None
        queue_ = iter(sorted(range(len(runs)), key=lambda i: runs[i].length, reverse=True))

        def lane() -> float:
            busy = 0.0
            for i in queue_:  # next() on a shared iterator is atomic under the GIL
                busy += self._read_run(runs[i], cached, i)
            return busy

        futs = [self.pool.submit(lane) for _ in range(min(self.io_threads, len(runs)) - 1)]
        busy = 0.0
        err: BaseException | None = None
        try:
            busy += lane()
        except BaseException as e:  # noqa: BLE001 - re-raised below after all lanes finish
            err = e
        for f in futs:
            try:
                busy += f.result()
            except BaseException as e:  # noqa: BLE001
                err = err or e
        if err:
            raise err
        return busy

    # -- one range (Python path) ----------------------------------------------------------------
    def _bounce(self) -> mmap.mmap:
        b = getattr(self._local, "bounce", None)
        if b is None:
            b = mmap.mmap(-1, BOUNCE_BYTES)
            self._local.bounce = b
        return b

    def read_into(self, view: memoryview, file_off: int, dest_addr: int | None = None, shard: int = 0,
                  counted: bool = False) -> float:
        """Fill ``view`` with bytes of shard ``shard`` from ``file_off``. Returns seconds spent.

        With O_DIRECT and ``dest_addr`` (the view's address) congruent to ``file_off`` modulo 4096,
        one ``preadv`` reads the page-aligned middle straight into ``view``. Raises
        :class:`ExpertIOError` on an OS error or a short read.
        """
        t0 = time.perf_counter()
        self._read(view, file_off, dest_addr, shard, counted)
        return time.perf_counter() - t0

    def _read(self, view: memoryview, file_off: int, dest_addr: int | None, shard: int, counted: bool) -> int:
        """:meth:`read_into`'s read; returns the bytes the page cache served (:attr:`nowait`)."""
        n = len(view)
        cached = 0
        if self._inject_at and not counted:
            with self._count_lock:
                self._reads += 1
                hit = self._reads == self._inject_at
            if hit:
                raise ExpertIOError(f"read of {n} bytes at offset {file_off} failed: injected I/O error")
        try:
            if self.direct:
                dfd = self.dfds[shard]
                aligned = dest_addr is not None and (dest_addr - file_off) % DIRECT_ALIGN == 0
                if not (aligned and n >= 2 * DIRECT_ALIGN and self._read_direct_scatter(dfd, view, file_off)):
                    self._read_direct_bounce(dfd, view, file_off)
            else:
                fd = self.fds[shard]
                pos = 0
                if self.nowait:
                    try:
                        pos = cached = os.preadv(fd, [view], file_off, os.RWF_NOWAIT)
                    except BlockingIOError:
                        pass  # its first page is not in the page cache
                while pos < n:
                    got = os.preadv(fd, [view[pos:]], file_off + pos)
                    if got <= 0:
                        raise ExpertIOError(f"short read at offset {file_off + pos}: end of file")
                    pos += got
        except ExpertIOError:
            raise
        except OSError as e:
            raise ExpertIOError(f"read of {n} bytes at offset {file_off} failed: {e.strerror or e}") from None
        return cached

    def _read_direct_scatter(self, dfd: int, view: memoryview, file_off: int) -> bool:
        n = len(view)
        end = file_off + n
        a = round_down(file_off, DIRECT_ALIGN)
        head = file_off - a
        mid0 = a + DIRECT_ALIGN if head else a
        mid1 = round_down(end, DIRECT_ALIGN)
        if mid1 <= mid0:
            return False
        bounce = self._bounce()
        bmv = memoryview(bounce)
        iovs = []
        if head:
            iovs.append(bmv[:DIRECT_ALIGN])
        iovs.append(view[mid0 - file_off : mid1 - file_off])
        if end > mid1:
            iovs.append(bmv[DIRECT_ALIGN : 2 * DIRECT_ALIGN])
        got = os.preadv(dfd, iovs, a)
        if got < end - a:
            return False  # short (e.g. a signal): redo through the bounce path
        if head:
            view[: DIRECT_ALIGN - head] = bounce[head:DIRECT_ALIGN]
        if end > mid1:
            view[mid1 - file_off :] = bounce[DIRECT_ALIGN : DIRECT_ALIGN + (end - mid1)]
        return True

    def _read_direct_bounce(self, dfd: int, view: memoryview, file_off: int) -> None:
        n = len(view)
        bounce = self._bounce()
        pos = 0
        while pos < n:
            off = file_off + pos
            a = round_down(off, DIRECT_ALIGN)
            lead = off - a
            want = min(n - pos, BOUNCE_BYTES - lead)
            span = round_up(lead + want, DIRECT_ALIGN)
            got = os.preadv(dfd, [memoryview(bounce)[:span]], a)
            if got < lead + want:
                raise ExpertIOError(f"short read at offset {off}: {max(0, got - lead)} of {want} bytes")
            view[pos : pos + want] = bounce[lead : lead + want]
            pos += want

    def close(self) -> None:
        for ex in (self._spec_pool, self.pool):
            if ex is not None:
                ex.shutdown(wait=True)
        self.pool = self._spec_pool = None
        for lanes in [self.native_lanes, *self._extra_lanes]:
            if lanes is not None:
                lanes.close()
        self.native_lanes, self._extra_lanes = None, []
        for fd in [*self.fds, *self.dfds]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fds, self.dfds = [], []
