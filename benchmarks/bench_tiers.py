"""The tier check: what it costs bmoe-run to tell, for every buffered expert read, whether the page
cache or the disk served it (docs/memory.md "The three tiers in bmoe-run").

A buffered read (``--no-odirect``) on the native lanes either reads plainly (``nowait`` 0: no
check) or asks the page cache first with ``preadv2(RWF_NOWAIT)`` and reads the rest as usual
(``nowait`` 1: what bmoe-run does). Both are timed in the same run, interleaved, ``--rounds``
rounds, at 3 slice sizes, in two states: the slices in the page cache (the check *is* the read),
and the file dropped from it before every batch (``POSIX_FADV_DONTNEED``; the check is one failing
system call in front of a disk read). For comparison, the check the other way: ``mincore`` over
the slice's pages on a read-only mapping of the file, then the plain read. The ratio is the
median over rounds of (time with the check) / (time without); ``per read`` the median difference.

Run: .venv/bin/python benchmarks/bench_tiers.py [--rounds 7] [--reads 16] [--dir build]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import tempfile
import time
from pathlib import Path

from bmoe_top.runtime import native

SIZES = (64 << 10, 1 << 20, 8 << 20)  # a small slice, a bench-model-sized one, a large model's
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def drop(fd: int) -> None:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def warm(fd: int, size: int) -> None:
    buf = bytearray(1 << 20)
    for off in range(0, size, len(buf)):
        os.preadv(fd, [buf], off)


class Case:
    """``reads`` slices of ``size`` bytes at spread-out offsets of ``fd``, read into ``dst``."""

    def __init__(self, lib, fd: int, file_size: int, size: int, reads: int, dst: int) -> None:
        self.pool = native.ReadPool(lib, 1)
        self.fd, self.size, self.reads, self.dst = fd, size, reads, dst
        step = (file_size - size) // max(1, reads - 1) // PAGE * PAGE
        self.offs = [i * step for i in range(reads)]
        self.vec = (ctypes.c_ubyte * (size // PAGE + 2))()

    def native_batch(self, nowait: int) -> float:
        jobs = self.pool.jobs(1)
        t = 0.0
        for off in self.offs:
            j = jobs[0]
            j.fd, j.direct, j.off, j.len, j.dst, j.nowait = self.fd, 0, off, self.size, self.dst, nowait
            t0 = time.perf_counter()
            _busy, rc, _bad = self.pool.read(1)
            t += time.perf_counter() - t0
            assert rc == 0, os.strerror(-rc)
        return t

    def mincore_batch(self, addr: int) -> float:
        jobs = self.pool.jobs(1)
        t = 0.0
        for off in self.offs:
            j = jobs[0]
            j.fd, j.direct, j.off, j.len, j.dst, j.nowait = self.fd, 0, off, self.size, self.dst, 0
            t0 = time.perf_counter()
            if _libc.mincore(addr + off, self.size, self.vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            _resident = sum(self.vec[: self.size // PAGE])
            _busy, rc, _bad = self.pool.read(1)
            t += time.perf_counter() - t0
            assert rc == 0
        return t

    def close(self) -> None:
        self.pool.close()


def measure(lib, path: Path, file_size: int, size: int, reads: int, rounds: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    dst = mmap.mmap(-1, size)
    dst_addr = ctypes.addressof(ctypes.c_char.from_buffer(dst))
    case = Case(lib, fd, file_size, size, reads, dst_addr)
    # an untouched read-only mapping of the file for mincore (never read: residency unchanged)
    addr = _libc.mmap(None, file_size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    try:
        for state in ("cached", "cold"):
            plain, check, mc = [], [], []
            for r in range(rounds):
                order = [("plain", 0), ("check", 1), ("mincore", 2)]
                if r % 2:
                    order.reverse()
                for name, kind in order:
                    if state == "cached":
                        warm(fd, file_size)
                    else:
                        drop(fd)
                    t = case.mincore_batch(addr) if kind == 2 else case.native_batch(kind)
                    {"plain": plain, "check": check, "mincore": mc}[name].append(t / reads)
            ratio = statistics.median(c / p for c, p in zip(check, plain))
            ratio_mc = statistics.median(c / p for c, p in zip(mc, plain))
            extra = statistics.median(c - p for c, p in zip(check, plain))
            print(f"{size >> 10:>6} KiB {state:<6}  plain {statistics.median(plain) * 1e6:9.1f} us/read  "
                  f"RWF_NOWAIT check {statistics.median(check) * 1e6:9.1f} us/read  ratio {ratio:5.3f}  "
                  f"({extra * 1e6:+.1f} us/read)   mincore check {statistics.median(mc) * 1e6:9.1f} us/read  "
                  f"ratio {ratio_mc:5.3f}")
    finally:
        _libc.munmap(addr, file_size)
        case.close()
        dst.close()
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reads", type=int, default=16, help="slices read per batch")
    ap.add_argument("--dir", default=None, help="folder for the test file (a disk file system, not tmpfs)")
    args = ap.parse_args()
    lib = native.library()
    if lib is None:
        raise SystemExit(f"bench_tiers: no native library ({native.native_error})")
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "slices.bin"
        file_size = max(SIZES) * args.reads
        with open(path, "wb") as f:
            for _ in range(file_size // (8 << 20)):
                f.write(os.urandom(8 << 20))
            f.flush()
            os.fsync(f.fileno())
        print(f"file {file_size >> 20} MiB on {d}; {args.reads} reads per batch, {args.rounds} rounds, medians")
        for size in SIZES:
            measure(lib, path, file_size, size, args.reads, args.rounds)


if __name__ == "__main__":
    main()
