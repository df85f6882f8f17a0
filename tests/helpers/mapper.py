"""A real process that maps a model the way llama.cpp does (read-only, shared, no readahead) and
touches the pages a test names, for the memory watcher's tests.

    with Mapper(path) as m:          # maps path whole; m.pid is the process
        m.touch([(offset, length)])  # one load per page of each range through the mapping
        m.direct()                   # also holds the file open with O_DIRECT

Each command is acknowledged on the child's stdout, so the test goes on only after the child did it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .procs import stop_process

_CHILD = r"""
import mmap, os, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ, flags=mmap.MAP_SHARED)
m.madvise(mmap.MADV_RANDOM)
page = mmap.PAGESIZE
keep = []
print("ready", flush=True)
for line in sys.stdin:
    cmd, *rest = line.split()
    if cmd == "touch":
        s = 0
        for off, n in zip(rest[0::2], rest[1::2]):
            off, n = int(off), int(n)
            for p in range(off // page * page, off + n, page):
                s += m[p]
        print("ok", s, flush=True)
    elif cmd == "direct":
        keep.append(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT))
        print("ok", flush=True)
    elif cmd == "unmap":
        m.close()
        f.close()
        print("ok", flush=True)
"""


class Mapper:
    """The child process (see the module docstring); ``stop()`` or the context manager ends it."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _ask(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        got = self._line()
        assert got.startswith("ok"), got

    def touch(self, ranges: list[tuple[int, int]]) -> None:
        self._ask("touch " + " ".join(f"{o} {n}" for o, n in ranges))

    def direct(self) -> None:
        self._ask("direct")

    def unmap(self) -> None:
        self._ask("unmap")

    def stop(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return stop_process(self.proc)

    def __enter__(self) -> Mapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
