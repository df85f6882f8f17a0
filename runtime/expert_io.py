"""Expert reads: byte ranges of the model's shards into memory addresses.

``os.preadv`` releases the GIL, so reads run beside the decode thread and each other. With
``O_DIRECT`` (probed per shard: some file systems refuse it) a slice whose memory address is
congruent to its file offset modulo 4096 is read by one scatter ``preadv``: the page-aligned
middle straight into place, the two edge pages into a 4096-aligned bounce buffer; anything else
goes through the bounce buffer. Without ``O_DIRECT`` reads go through the page cache straight
into place.

Test hook: ``BMOE_INJECT_READ_ERROR=N`` makes the N-th read (1-based) fail once.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DIRECT_ALIGN = 4096
BOUNCE_BYTES = 4 << 20

__all__ = ["ExpertIOError", "ExpertReader", "DIRECT_ALIGN"]


class ExpertIOError(OSError):
    """A read of expert bytes failed or came back short."""


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def round_down(x: int, a: int) -> int:
    return x // a * a


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
    in use). ``io_threads``: read lanes (1 = the caller reads; more = a thread pool, ``pool``).
    Raises ``OSError`` when a shard cannot be opened.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]], io_threads: int = 1, o_direct: bool = True):
        self.paths = [str(Path(p)) for p in paths]
        self.pool: ThreadPoolExecutor | None = None
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
        self.io_threads = max(1, int(io_threads))
        self.pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="bmoe-io") if self.io_threads > 1 else None
        self._local = threading.local()
        self._inject_at = int(os.environ.get("BMOE_INJECT_READ_ERROR", "0") or 0)
        self._reads = 0
        self._count_lock = threading.Lock()

    def ensure_pool(self) -> ThreadPoolExecutor:
        """The lane pool, created with one lane when the reader had none (speculative reads)."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="bmoe-io")
        return self.pool

    def _bounce(self) -> mmap.mmap:
        b = getattr(self._local, "bounce", None)
        if b is None:
            b = mmap.mmap(-1, BOUNCE_BYTES)
            self._local.bounce = b
        return b

    def read_into(self, view: memoryview, file_off: int, dest_addr: int | None = None, shard: int = 0) -> float:
        """Fill ``view`` with bytes of shard ``shard`` from ``file_off``. Returns seconds spent.

        With O_DIRECT and ``dest_addr`` (the view's address) congruent to ``file_off`` modulo 4096,
        one ``preadv`` reads the page-aligned middle straight into ``view``. Raises
        :class:`ExpertIOError` on an OS error or a short read.
        """
        t0 = time.perf_counter()
        n = len(view)
        if self._inject_at:
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
                while pos < n:
                    got = os.preadv(fd, [view[pos:]], file_off + pos)
                    if got <= 0:
                        raise ExpertIOError(f"short read at offset {file_off + pos}: end of file")
                    pos += got
        except ExpertIOError:
            raise
        except OSError as e:
            raise ExpertIOError(f"read of {n} bytes at offset {file_off} failed: {e.strerror or e}") from None
        return time.perf_counter() - t0

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
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        for fd in [*self.fds, *self.dfds]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fds, self.dfds = [], []
