"""Plain mmap's page cache replayed over a routing trace: the bytes a decode token reads from the
disk when llama.cpp maps the model and the kernel's page cache is its only cache
(docs/analysis.md "Plain mmap: the page cache replayed"). Pure: no Textual, no files.

The file is cut in chunks of ``chunk`` bytes (64 KiB: a kernel readahead window is a whole
number of them). Every lookup of the trace touches its expert's pieces (one per expert tensor:
its file offset and bytes, in the order the layer computes them) chunk by chunk. A chunk the
cache does not hold is a page fault: the kernel reads around it, the window of ``readahead``
bytes centred on it (``do_sync_mmap_readahead``: ``start = fault - ra/2``), every chunk of the
window it does not hold (the rest of the window is already there and is not read again), and
marks the chunk a quarter of the window from its end (``async_size = ra/4``): a later touch of
that chunk while it is held reads the next window ahead (``page_cache_async_ra``), whose own
first chunk is marked in turn; those bytes are read though no fault waits for them. Only
expert chunks are counted and cached: the dense weights are read every token and stay resident,
so the cache's room is the RAM less them and the runtime's own memory.

Before the trace, the load: llama.cpp maps the file and warms it up with every expert of every
layer, so the replay starts with the whole file read in file order (what of it fits).

Two eviction rules:

- ``lru``: one least-recently-used list;
- ``two_list``: the kernel's active and inactive lists (``mm/vmscan.c``): a chunk read enters the
  inactive list, a second touch while it is there moves it to the active list, the active list
  is held to at most half of the room (its oldest go back to the inactive list's head), and
  eviction takes the inactive list's oldest. A cyclic scan larger than the room (every layer's
  tensors, token after token) then keeps about half its chunks instead of none.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from bmoe_top.parsers.gguf_layout import ExpertTensorInfo, ModelLayout
from bmoe_top.tui.analysis.lookups import Lookups

__all__ = ["POLICIES", "PageCacheReplay", "expert_pieces", "layout_pieces", "replay_mmap"]

POLICIES = ("lru", "two_list")
CHUNK = 64 * 1024
#: The order a MoE layer computes its expert tensors in (llama.cpp ``build_moe_ffn``: up, gate, down).
COMPUTE_ORDER = {"gate_up": 0, "up": 1, "gate": 2, "down": 3}


@dataclass(frozen=True)
class PageCacheReplay:
    """What the replay found: ``read_bytes`` read from the disk over the decode tokens,
    ``decode_tokens`` their number, ``faults`` the decode page faults (each one read), and
    ``read_per_token`` (bytes) the first over the second (0 without decode tokens)."""

    read_bytes: int
    decode_tokens: int
    faults: int

    @property
    def read_per_token(self) -> float:
        return self.read_bytes / self.decode_tokens if self.decode_tokens else 0.0


class _Lists:
    """The cache of chunks under one of :data:`POLICIES`, ``room`` chunks."""

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


def replay_mmap(lookups: Lookups, pieces: Sequence[Sequence[tuple[int, int]]], cache_bytes: float,
                readahead: float, *, policy: str = "two_list", chunk: int = CHUNK,
                async_readahead: bool = True) -> PageCacheReplay:
    """Replay ``lookups`` through plain mmap's page cache (module docstring). ``pieces[item]``:
    the (file offset, bytes) of each of the item's tensor slices, in compute order (empty: the
    item is not in the file); ``cache_bytes`` the page cache's room for experts (the RAM less
    the dense weights and the runtime's memory); ``readahead`` the device's read size (bytes).
    ``async_readahead`` False: no read-ahead marks (the read-around windows alone).
    Raises ValueError for an unknown policy, a chunk or readahead <= 0, or ``pieces`` shorter
    than the trace's items."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if chunk <= 0 or not readahead > 0:
        raise ValueError("chunk and readahead must be > 0")
    if len(pieces) < lookups.n_items:
        raise ValueError(f"pieces cover {len(pieces)} items, the trace has {lookups.n_items}")
    spans = [[(off // chunk, (off + n - 1) // chunk) for off, n in p if n > 0] for p in pieces]
    expert = sorted({c for s in spans for a, b in s for c in range(a, b + 1)})
    is_expert = set(expert)
    window = max(1, math.ceil(readahead / chunk))
    cache = _Lists(int(max(0.0, cache_bytes) // chunk), policy)
    for c in expert:
        cache.add(c)
    read = faults = 0
    items, decode = lookups.item, lookups.decode
    tokens = lookups.n_decode_tokens
    marks: dict[int, int] = {}  # a chunk whose touch reads ahead -> where that read starts

    def bring(start: int, counted: bool, keep: int = -1) -> int:
        got = [x for x in range(start, start + window) if x in is_expert and x not in cache]
        for x in got:
            marks.pop(x, None)
            if x != keep:
                cache.add(x)
        if async_readahead:
            marks[start + window - max(1, window // 4)] = start + window
        return len(got) * chunk if counted else 0

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
    return PageCacheReplay(read, tokens, faults)


def expert_pieces(offsets: Sequence[Sequence[tuple[int, int, int]]], n_expert: int) -> list[list[tuple[int, int]]]:
    """``pieces`` for :func:`replay_mmap` from each layer's expert tensors (file offset, bytes of
    one expert's slice, experts in it), in the order given: item ``layer x n_expert + e``."""
    out: list[list[tuple[int, int]]] = []
    for tensors in offsets:
        for e in range(n_expert):
            out.append([(off + e * stride, stride) for off, stride, n in tensors if e < n])
    return out



def layout_pieces(layout: ModelLayout) -> list[list[tuple[int, int]]]:
    """:func:`expert_pieces` of a GGUF's layout, each layer's tensors in :data:`COMPUTE_ORDER`; the
    shards of a split model laid end to end (a window never crosses into the next shard's file in
    truth: a few chunks of difference at each shard's end); a layer without experts has items
    without pieces."""
    starts = [sum(layout.shard_sizes[:i]) for i in range(len(layout.shard_sizes))]

    def at(t: ExpertTensorInfo) -> int:
        return t.file_offset + (starts[t.shard] if t.shard < len(starts) else 0)

    return expert_pieces([[(at(t), t.expert_stride, t.n_expert)
                           for t in sorted(ts, key=lambda t: COMPUTE_ORDER.get(t.kind, len(COMPUTE_ORDER)))]
                          for ts in layout.layers], layout.n_expert)
