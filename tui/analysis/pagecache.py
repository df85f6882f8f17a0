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

A mapping whose file was advised ``POSIX_FADV_SEQUENTIAL`` reads twice the device's readahead:
the advice sets the file's ``ra_pages`` to twice the device's (``mm/fadvise.c``), and the
read-around window and the read ahead are the file's ``ra_pages``. llama.cpp's ``llama_mmap`` gives
that advice before it maps the model, so its windows are ``2 x read_ahead_kb`` (``sequential``).

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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bmoe_top.parsers.gguf_layout import ExpertTensorInfo, ModelLayout
from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis.lookups import Lookups

__all__ = ["LLAMA_SEQUENTIAL", "POLICIES", "PageCacheReplay", "expert_pieces", "layout_pieces", "replay_mmap",
           "window_bytes"]

POLICIES = ("lru", "two_list")
CHUNK = 64 * 1024
#: llama.cpp's ``llama_mmap`` advises the model file ``POSIX_FADV_SEQUENTIAL`` before mapping it (Linux).
LLAMA_SEQUENTIAL = True
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


def replay_mmap(lookups: Lookups, pieces: Sequence[Sequence[tuple[int, int]]], cache_bytes: float,
                readahead: float, *, policy: str = "two_list", chunk: int = CHUNK,
                async_readahead: bool = True, sequential: bool = False) -> PageCacheReplay:
    """Replay ``lookups`` through plain mmap's page cache (module docstring). ``pieces[item]``:
    the (file offset, bytes) of each of the item's tensor slices, in compute order (empty: the
    item is not in the file); ``cache_bytes`` the page cache's room for experts (the RAM less
    the dense weights and the runtime's memory); ``readahead`` the device's read size (bytes).
    ``async_readahead`` False: no read-ahead marks (the read-around windows alone);
    ``sequential``: the file was advised ``POSIX_FADV_SEQUENTIAL`` (llama.cpp's mmap), so every
    window is ``2 x readahead`` (:func:`window_bytes`). Compiled
    (``_kernels.mmap_replay``): a 48-layer trace of 128 tokens (40,000 lookups of 2.9 MiB
    experts) takes well under a second. Raises ValueError for an unknown policy, a chunk or
    readahead <= 0, or ``pieces`` shorter than the trace's items."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if chunk <= 0 or not readahead > 0:
        raise ValueError("chunk and readahead must be > 0")
    if len(pieces) < lookups.n_items:
        raise ValueError(f"pieces cover {len(pieces)} items, the trace has {lookups.n_items}")
    spans = [[(off // chunk, (off + n - 1) // chunk) for off, n in p if n > 0] for p in pieces[:lookups.n_items]]
    span_off = np.zeros(len(spans) + 1, dtype=np.int64)
    span_off[1:] = np.cumsum([len(s) for s in spans])
    flat = np.array([ab for s in spans for ab in s], dtype=np.int64).reshape(-1, 2)
    n_chunks = int(flat[:, 1].max()) + 1 if flat.size else 0
    is_expert = np.zeros(n_chunks, dtype=np.bool_)
    for a, b in flat:
        is_expert[a:b + 1] = True
    window = max(1, math.ceil(window_bytes(readahead, sequential) / chunk))
    room = int(max(0.0, cache_bytes) // chunk)
    read, faults = K.mmap_replay(lookups.item, lookups.decode, span_off, np.ascontiguousarray(flat[:, 0]),
                                 np.ascontiguousarray(flat[:, 1]), is_expert, room, window, policy == "two_list",
                                 async_readahead)
    return PageCacheReplay(int(read) * chunk, lookups.n_decode_tokens, int(faults))


def window_bytes(readahead: float, sequential: bool) -> float:
    """The bytes a fault reads around it and a read ahead reads: the file's readahead, which is
    the device's ``readahead`` doubled when the file was advised ``POSIX_FADV_SEQUENTIAL``."""
    return 2.0 * readahead if sequential else float(readahead)


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
