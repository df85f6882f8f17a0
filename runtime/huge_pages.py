"""Resident weights in 2 MiB pages (docs/runtime.md "Memory").

A resident decode reads every weight of the routed experts and the dense tensors once a token.
Through llama.cpp's mmap those bytes sit in 4 KiB page-cache pages (only where the page cache
happened to hold large folios does the kernel map 2 MiB at once), so the matrix kernels walk the
weights through tens of thousands of TLB entries a token. A resident :class:`Engine` can instead
have llama.cpp read the file into anonymous memory and then collapse that memory into transparent
huge pages (``madvise(MADV_COLLAPSE)``, Linux 6.1 and later): the same bytes, the same kernels,
the same text, 512 times fewer pages.

:class:`HugePageLoad` hooks one load: the mappings the load adds are the model's weight buffers
(it allocates nothing else that large). llama.cpp allocates them before it reads the first tensor
and calls its progress callback before each tensor, so at the first call they are advised
``MADV_HUGEPAGE`` and the reads fault them in 2 MiB at a time (a few hundred faults, not tens of
thousands); after the load, :func:`collapse` turns whatever is still in 4 KiB pages into huge
pages (``MADV_COLLAPSE``, Linux 6.1) and the bytes that are huge pages are counted
(``AnonHugePages`` in ``/proc/self/smaps``). Nothing here raises: a kernel that refuses
(``transparent_hugepage`` set to ``never``, no free huge page) leaves 4 KiB pages, and the count
says so.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from bmoe_top.parsers.procfs import parse_cgroup, parse_int, parse_kb, parse_limit, parse_maps

from .expert_store import _LIBC, HUGE
from .llama_lib import L

#: madvise(2): collapse the range into huge pages now (Linux 6.1)
MADV_COLLAPSE = 25
#: a model file smaller than this (four huge pages) keeps llama.cpp's mmap unless asked otherwise
MIN_FILE_BYTES = 4 * HUGE


def worth_huge_pages(nbytes: int, cgroup_root: str = "/sys/fs/cgroup") -> bool:
    """The automatic choice for a resident model file of ``nbytes``: at least
    :data:`MIN_FILE_BYTES`, and at most half the memory this process may still use:
    ``MemAvailable`` (``/proc/meminfo``) and, under a cgroup v2 memory limit of its own, the limit
    less the cgroup's usage. False when neither can be read: llama.cpp's mmap then holds it (a
    mapped file that does not fit is paged, where read weights would not fit at all)."""
    if nbytes < MIN_FILE_BYTES:
        return False
    rooms: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            avail = parse_kb(f.read()).get("MemAvailable")
        if avail is not None:
            rooms.append(avail)
        with open("/proc/self/cgroup") as f:
            line = next((c for c in parse_cgroup(f.read()) if c.hierarchy == 0), None)
        if line is not None:
            d = cgroup_root.rstrip("/") + line.path.rstrip("/")
            with open(f"{d}/memory.max") as f:
                limit = parse_limit(f.read())
            with open(f"{d}/memory.current") as f:
                used = parse_int(f.read())
            if limit is not None and used is not None:
                rooms.append(limit - used)
    except OSError:
        pass  # no cgroup v2 memory controller here: MemAvailable alone
    return bool(rooms) and 2 * nbytes <= min(rooms)


def anon_mappings() -> list[tuple[int, int]]:
    """(start, end) addresses of this process's private, writable, anonymous mappings
    (``/proc/self/maps``), in address order; empty where there is no ``/proc``."""
    try:
        with open("/proc/self/maps") as f:
            entries = parse_maps(f.read())
    except OSError:
        return []
    return sorted((e.start, e.end) for e in entries
                  if e.inode == 0 and not e.path and e.perms.startswith("rw") and e.perms[3] == "p")


def added_ranges(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The address ranges of ``after`` that no range of ``before`` covers (both as
    :func:`anon_mappings` gives them), of at least one huge page: memory mapped in between, even
    where the kernel merged it into a mapping that was already there."""
    out: list[tuple[int, int]] = []
    for lo, hi in after:
        cur = lo
        for blo, bhi in before:
            if bhi <= cur or blo >= hi:
                continue
            if blo > cur:
                out.append((cur, blo))
            cur = max(cur, bhi)
        if hi > cur:
            out.append((cur, hi))
    return [(lo, hi) for lo, hi in out if hi - lo >= HUGE]


def collapse(ranges: list[tuple[int, int]]) -> int:
    """Collapse the whole 2 MiB pages inside each (start, end) range into transparent huge pages;
    the bytes of those ranges that are huge pages afterwards (0 where the kernel refused)."""
    for lo, hi in ranges:
        start = (lo + HUGE - 1) & ~(HUGE - 1)
        end = hi & ~(HUGE - 1)
        if end > start:
            _LIBC.madvise(start, end - start, MADV_COLLAPSE)  # a refusal leaves 4 KiB pages: counted below
    return huge_bytes(ranges)


def huge_bytes(ranges: list[tuple[int, int]]) -> int:
    """``AnonHugePages`` summed over the mappings of ``/proc/self/smaps`` that lie inside one of
    ``ranges`` (bytes). Advising a range splits the mapping at its ends, so an advised range is
    whole mappings."""
    total = 0
    inside = False
    try:
        with open(f"/proc/{os.getpid()}/smaps") as f:
            for line in f:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = any(rlo <= lo and hi <= rhi for rlo, rhi in ranges)
                elif inside and head == "AnonHugePages:":
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return total


class HugePageLoad:
    """A resident load whose weight buffers are read into 2 MiB pages. :meth:`apply` on a
    ``llama_model_params`` before the load (llama.cpp reads the file rather than mapping it; keep
    this object alive until the load returns), :meth:`finish` after it: (bytes of memory the load
    mapped, bytes of them in huge pages). That memory is the weight buffers and whatever else the
    load allocated beside them (its vocabulary, a read buffer), so it is at least the weights."""

    def __init__(self) -> None:
        self.before = anon_mappings()
        self.ranges: list[tuple[int, int]] | None = None
        self._cb = L.llama_progress_callback(self._progress)

    def apply(self, params: Any) -> None:
        params.load_mode = L.LLAMA_LOAD_MODE_NONE
        params.progress_callback = self._cb
        params.progress_callback_user_data = None

    def _advise(self) -> list[tuple[int, int]]:
        ranges = added_ranges(self.before, anon_mappings())
        for lo, hi in ranges:
            _LIBC.madvise(lo, hi - lo, mmap.MADV_HUGEPAGE)
        return ranges

    def _progress(self, _progress: float, _user_data: Any) -> bool:
        if self.ranges is None:  # before the first tensor is read: every weight buffer exists
            self.ranges = self._advise()
        return True

    def finish(self) -> tuple[int, int]:
        ranges = self.ranges if self.ranges is not None else self._advise()
        return sum(hi - lo for lo, hi in ranges), collapse(ranges)
