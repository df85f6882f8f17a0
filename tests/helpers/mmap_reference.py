"""Plain mmap's page cache replayed in plain Python, chunk by chunk with ``OrderedDict`` lists: the
rules of tui/analysis/pagecache.py written out as the module docstring states them. Kept for the
tests (tests/analysis/test_pagecache.py: the compiled ``_kernels.mmap_replay`` gives the same bytes
and faults on random traces). Not used by the package."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from bmoe_top.tui.analysis.lookups import Lookups


class _Lists:
    """The cache of chunks, ``room`` of them, under ``policy`` (``lru`` or ``two_list``)."""

    def __init__(self, room: int, policy: str) -> None:
        self.room = room
        self.two = policy == "two_list"
        self.inactive: OrderedDict[int, None] = OrderedDict()
        self.active: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, c: int) -> bool:
        return c in self.inactive or c in self.active

    def touch(self, c: int) -> None:
        if c in self.active:
            self.active.move_to_end(c)
        elif not self.two:
            self.inactive.move_to_end(c)
        else:
            del self.inactive[c]
            self.active[c] = None
            while len(self.active) > self.room // 2:
                old, _ = self.active.popitem(last=False)
                self.inactive[old] = None
                self.inactive.move_to_end(old, last=False)

    def add(self, c: int) -> None:
        if self.room <= 0:
            return
        while len(self.inactive) + len(self.active) >= self.room:
            if self.inactive:
                self.inactive.popitem(last=False)
            else:
                self.active.popitem(last=False)
        self.inactive[c] = None


def replay_mmap_reference(lookups: Lookups, pieces: Sequence[Sequence[tuple[int, int]]], cache_bytes: float,
                readahead: float, *, policy: str = "two_list", chunk: int = 64 * 1024,
                async_readahead: bool = True, sequential: bool = False) -> tuple[int, int]:
    """(chunks read by the decode lookups, their faults): ``replay_mmap``'s arguments, chunk 64 KiB."""
    spans = [[(off // chunk, (off + n - 1) // chunk) for off, n in p if n > 0] for p in pieces]
    expert = sorted({c for s in spans for a, b in s for c in range(a, b + 1)})
    is_expert = set(expert)
    window = max(1, math.ceil((2 * readahead if sequential else readahead) / chunk))
    cache = _Lists(int(max(0.0, cache_bytes) // chunk), policy)
    for c in expert:
        cache.add(c)
    read = faults = 0
    items, decode = lookups.item, lookups.decode
    marks: dict[int, int] = {}  # a chunk whose touch reads ahead -> where that read starts

    def bring(start: int, counted: bool, keep: int = -1) -> int:
        got = [x for x in range(start, start + window) if x in is_expert and x not in cache]
        for x in got:
            marks.pop(x, None)
            if x != keep:
                cache.add(x)
        if async_readahead:
            marks[start + window - max(1, window // 4)] = start + window
        return len(got) if counted else 0

    for i in range(lookups.n):
        counted = bool(decode[i])
        for a, b in spans[int(items[i])]:
            for c in range(a, b + 1):
                if c in cache:
                    cache.touch(c)
                    ahead = marks.pop(c, None)
                    if ahead is not None:
                        read += bring(ahead, counted)
                    continue
                if counted:
                    faults += 1
                read += bring(max(0, c - window // 2), counted, keep=c)
                cache.add(c)
    return read, faults


