"""Which byte ranges of a GGUF model a page-cache residency sample counts, and how their counts fold
into the layer x expert map (docs/memory.md "The residency map"). Pure: the sampler that asks the
kernel is ``bmoe_top.tui.sources.residency``.

A page counts for every range it overlaps: an expert slice (expert ``e`` of one expert tensor of
layer ``il``: ``[file_offset + e*stride, file_offset + (e+1)*stride)``) whose first and last bytes
share a page with its neighbours counts that page for both, exactly as the kernel's ``cachestat``
counts a byte range and as ``mincore`` over the range's pages does. The share of a slice that is
resident is its resident pages over the pages it spans (:attr:`ResidencyPlan.slice_pages`), summed
over the layer's expert tensors (gate, up, down: one expert's weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .gguf_layout import ModelLayout
from .limits import dims_problem

__all__ = ["ResidencyPlan", "fold_counts", "plan_residency", "span_pages"]

I64 = NDArray[np.int64]


def span_pages(offsets: I64, lengths: I64, page_size: int) -> I64:
    """Pages each byte range ``[offset, offset + length)`` touches (0 for an empty range)."""
    first = offsets // page_size
    last = (offsets + np.maximum(lengths, 1) - 1) // page_size
    out: I64 = np.where(lengths > 0, last - first + 1, 0).astype(np.int64)
    return out


@dataclass(frozen=True)
class ResidencyPlan:
    """The byte ranges of one model (all shards) a sample counts.

    ``paths``/``sizes``: the shards in order (bytes); per shard, ``offsets``/``lengths`` (int64,
    bytes, in file order) and ``slots``: what each range is, ``layer * n_expert + expert`` for an
    expert slice, :attr:`dense_slot` for a dense tensor. ``slice_pages`` (int64 ``[n_layer,
    n_expert]``): pages each expert's slices span together (0 in a layer with no experts);
    ``dense_pages``: pages the dense tensors span; ``file_pages``: pages of every shard whole.
    """

    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    page_size: int
    n_layer: int
    n_expert: int
    offsets: tuple[I64, ...]
    lengths: tuple[I64, ...]
    slots: tuple[I64, ...]
    slice_pages: I64
    dense_pages: int
    file_pages: int

    @property
    def dense_slot(self) -> int:
        return self.n_layer * self.n_expert

    @property
    def n_ranges(self) -> int:
        return sum(len(o) for o in self.offsets)

    @property
    def shard_pages(self) -> list[int]:
        return [-(-s // self.page_size) for s in self.sizes]


def plan_residency(layout: ModelLayout, page_size: int) -> ResidencyPlan:
    """The ranges of ``layout`` (every expert slice of every expert tensor, every dense tensor),
    for pages of ``page_size`` bytes. Raises ``ValueError`` (one line) when the model's
    ``n_layer x n_expert`` is over the caps of ``parsers/limits.py``."""
    problem = dims_problem(n_layer=layout.n_layer, n_expert=layout.n_expert)
    if problem is not None:
        raise ValueError(f"{layout.path}: {problem}")
    L, E = layout.n_layer, max(0, layout.n_expert)
    n_shards = len(layout.paths) or 1
    offs: list[list[I64]] = [[] for _ in range(n_shards)]
    lens: list[list[I64]] = [[] for _ in range(n_shards)]
    slots: list[list[I64]] = [[] for _ in range(n_shards)]
    slice_pages = np.zeros((L, E), dtype=np.int64)
    experts = np.arange(E, dtype=np.int64)
    for il, tensors in enumerate(layout.layers):
        for t in tensors:
            o = t.file_offset + experts * t.expert_stride
            ln = np.full(E, t.expert_stride, dtype=np.int64)
            offs[t.shard].append(o)
            lens[t.shard].append(ln)
            slots[t.shard].append(il * E + experts)
            slice_pages[il] += span_pages(o, ln, page_size)
    dense = L * E
    dense_pages = 0
    for shard, runs in enumerate(_dense_runs(layout, n_shards, page_size)):
        if runs:
            o1 = np.array([a for a, _ in runs], dtype=np.int64)
            l1 = np.array([n for _, n in runs], dtype=np.int64)
            offs[shard].append(o1)
            lens[shard].append(l1)
            slots[shard].append(np.full(len(runs), dense, dtype=np.int64))
            dense_pages += int(span_pages(o1, l1, page_size).sum())
    out_o, out_l, out_s = [], [], []
    for k in range(n_shards):
        o = np.concatenate(offs[k]) if offs[k] else np.zeros(0, dtype=np.int64)
        ln = np.concatenate(lens[k]) if lens[k] else np.zeros(0, dtype=np.int64)
        s = np.concatenate(slots[k]) if slots[k] else np.zeros(0, dtype=np.int64)
        order = np.argsort(o, kind="stable")
        out_o.append(o[order])
        out_l.append(ln[order])
        out_s.append(s[order])
    sizes = tuple(layout.shard_sizes) if layout.shard_sizes else (layout.file_size,)
    return ResidencyPlan(
        paths=tuple(str(p) for p in (layout.paths or [layout.path])), sizes=sizes, page_size=page_size,
        n_layer=L, n_expert=E, offsets=tuple(out_o), lengths=tuple(out_l), slots=tuple(out_s),
        slice_pages=slice_pages, dense_pages=dense_pages, file_pages=sum(-(-s // page_size) for s in sizes))


def _dense_runs(layout: ModelLayout, n_shards: int, page_size: int) -> list[list[tuple[int, int]]]:
    """Per shard, the dense tensors as runs ``(offset, length)``: tensors less than a page apart
    are one run, so a page two of them share (small norms, alignment padding) counts once."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n_shards)]
    for d in sorted(layout.dense, key=lambda d: (d.shard, d.file_offset)):
        runs = out[d.shard]
        if d.n_bytes <= 0:
            continue
        if runs and d.file_offset - (runs[-1][0] + runs[-1][1]) < page_size:
            a, n = runs[-1]
            runs[-1] = (a, max(a + n, d.file_offset + d.n_bytes) - a)
        else:
            runs.append((d.file_offset, d.n_bytes))
    return out


def fold_counts(plan: ResidencyPlan, counts: list[I64]) -> tuple[I64, int]:
    """Resident pages per range (one int64 array per shard, aligned with ``plan.offsets``) ->
    (resident pages per expert ``[n_layer, n_expert]``, resident pages of the dense tensors)."""
    n = plan.dense_slot + 1
    total = np.zeros(n, dtype=np.int64)
    for s, c in zip(plan.slots, counts):
        if len(s):
            total += np.bincount(s, weights=c, minlength=n).astype(np.int64)
    return total[:-1].reshape(plan.n_layer, plan.n_expert), int(total[-1])
