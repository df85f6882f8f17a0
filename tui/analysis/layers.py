"""Per-layer view of a replay: which layers miss most at a budget, and what moving budget
between layers would buy (a greedy allocation over each layer's own LRU curve, as AdapMoE
sizes its per-layer caches). docs/analysis.md "Per layer".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .cachesim import Curve, LayerCurves

__all__ = ["LayerRow", "Allocation", "layer_table", "allocate"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class LayerRow:
    """One layer at one budget of a global-cache curve: decode ``lookups``, ``hits``, ``misses``,
    ``hit_pct`` (NaN without lookups), ``miss_share_pct`` its share of all decode misses."""

    layer: int
    lookups: int
    hits: int
    misses: int
    hit_pct: float
    miss_share_pct: float


def layer_table(curve: Curve, budget: int) -> list[LayerRow]:
    """Layers with decode lookups at ``budget`` (bytes, one of the curve's), most misses first.
    Raises KeyError if the curve has no such budget."""
    j = curve.at(budget)
    hits = curve.layer_hits[:, j]
    look = curve.layer_lookups
    miss = look - hits
    total = int(miss.sum())
    rows = []
    for il in np.flatnonzero(look > 0).tolist():
        m = int(miss[il])
        rows.append(LayerRow(il, int(look[il]), int(hits[il]), m, 100.0 * int(hits[il]) / int(look[il]),
                             100.0 * m / total if total else 0.0))
    rows.sort(key=lambda r: (-r.misses, r.layer))
    return rows


@dataclass(frozen=True, slots=True)
class Allocation:
    """Expert slots per layer (``slots`` int64 [n_layer]) for one LRU per layer within
    ``budget`` bytes; ``bytes_used``; ``decode_hits`` what that buys (exact: each layer's own
    replay at its slots)."""

    budget: int
    slots: I64
    bytes_used: int
    decode_hits: int


def _hull(hits: I64) -> list[int]:
    """Vertices (slot counts) of the upper concave hull of (c, hits[c]), c = 0..n."""
    pts: list[int] = []
    for c in range(hits.shape[0]):
        while len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            # drop b if it lies on or below the segment a -> c
            if (int(hits[b]) - int(hits[a])) * (c - a) <= (int(hits[c]) - int(hits[a])) * (b - a):
                pts.pop()
            else:
                break
        pts.append(c)
    return pts


def allocate(lc: LayerCurves, budget: int) -> Allocation:
    """Greedy allocation of ``budget`` bytes over the MoE layers' own LRU caches: take hull
    segments of the layers' curves in order of hits per byte while they fit, then fill what is
    left expert by expert with the best single-slot gain. Not guaranteed optimal when a curve
    is far from concave; the hits it reports are exact for the slots it chose."""
    n_layer = lc.hits.shape[0]
    slots = np.zeros(n_layer, dtype=np.int64)
    segs: list[tuple[float, int, int, int]] = []  # (-gain per byte, layer, from, to)
    for il in lc.moe_layers.tolist():
        v = _hull(lc.hits[il])
        size = int(lc.layer_bytes[il])
        for a, b in zip(v[:-1], v[1:]):
            gain = int(lc.hits[il, b]) - int(lc.hits[il, a])
            if gain > 0:
                segs.append((-gain / ((b - a) * size), il, a, b))
    segs.sort()
    left = int(budget)
    for _g, il, a, b in segs:
        size = int(lc.layer_bytes[il])
        if slots[il] != a:
            continue  # an earlier segment of this layer was not taken
        cost = (b - a) * size
        if cost <= left:
            slots[il] = b
            left -= cost
    # fill the rest one expert at a time
    while True:
        best, best_il = 0, -1
        for il in lc.moe_layers.tolist():
            c = int(slots[il])
            size = int(lc.layer_bytes[il])
            if c + 1 < lc.hits.shape[1] and size <= left:
                g = int(lc.hits[il, c + 1]) - int(lc.hits[il, c])
                if g > best:
                    best, best_il = g, il
        if best_il < 0:
            break
        slots[best_il] += 1
        left -= int(lc.layer_bytes[best_il])
    idx = np.arange(n_layer)
    used = int((slots * lc.layer_bytes).sum())
    return Allocation(int(budget), slots, used, int(lc.hits[idx, slots].sum()))
