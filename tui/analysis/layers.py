"""Per-layer view of a replay: which layers miss most at a budget, and what moving budget
between layers would buy (a greedy allocation over each layer's own LRU curve, as AdapMoE
sizes its per-layer caches). docs/analysis.md "Per layer".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .cachesim import Curve, LayerCurves, _check_budgets, _totals, layer_curves
from .lookups import Lookups

__all__ = ["LayerRow", "Allocation", "layer_table", "allocate", "layer_partitioned_curve"]

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
    return list(_hull_of(np.ascontiguousarray(hits, dtype=np.int64).tobytes()))


@functools.lru_cache(maxsize=4096)
def _hull_of(raw: bytes) -> tuple[int, ...]:
    """:func:`_hull` of the int64 curve ``raw``: the what-if allocates at every sweep budget over
    the same layer curves, so each layer's hull is computed once."""
    hits = np.frombuffer(raw, dtype=np.int64)
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
    return tuple(pts)


def _greedy(lc: LayerCurves, budget: int) -> I64:
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
        if slots[il] != a:
            continue  # an earlier segment of this layer was not taken
        cost = (b - a) * int(lc.layer_bytes[il])
        if cost <= left:
            slots[il] = b
            left -= cost
    return slots


def _improve(lc: LayerCurves, budget: int, slots: I64) -> I64:
    """Fill what is left with the best single-expert gains, then move single experts between
    layers while that buys hits."""
    moe = lc.moe_layers
    if moe.size == 0:
        return slots
    h = lc.hits[moe]
    size = lc.layer_bytes[moe]
    n_slots = h.shape[1] - 1
    s = slots[moe].copy()
    rows = np.arange(moe.size)
    big = np.int64(1) << np.int64(62)
    for _round in range(4 * n_slots * moe.size):
        left = int(budget) - int((s * size).sum())
        up = np.minimum(s + 1, n_slots)
        ga = np.where(s < n_slots, h[rows, up] - h[rows, s], -1)
        lr = np.where(s > 0, h[rows, s] - h[rows, np.maximum(s - 1, 0)], big)
        add = np.where(size <= left, ga, -1)
        mv = ga[None, :] - lr[:, None]
        ok = (size[None, :] <= left + size[:, None]) & ~np.eye(moe.size, dtype=bool)
        mv = np.where(ok, mv, -1)
        if add.max() > 0 and add.max() >= mv.max():
            s[int(add.argmax())] += 1
            continue
        if mv.max() <= 0:
            break
        a, b = np.unravel_index(int(mv.argmax()), mv.shape)
        s[a] -= 1
        s[b] += 1
    out = slots.copy()
    out[moe] = s
    return out


def allocate(lc: LayerCurves, budget: int) -> Allocation:
    """Allocate ``budget`` bytes over the MoE layers' own LRU caches: the better of an even split
    and a greedy pass over the layers' curves (hull segments in order of hits per byte, then
    single-expert additions and moves between layers while they buy hits). Not guaranteed
    optimal when curves are far from concave; never worse than the even split; the hits it
    reports are exact for the slots it chose (each layer's own replay)."""
    n_layer = lc.hits.shape[0]
    idx = np.arange(n_layer)
    moe = lc.moe_layers
    even = np.zeros(n_layer, dtype=np.int64)
    if moe.size:
        even[moe] = np.minimum(lc.hits.shape[1] - 1, (int(budget) // moe.size) // lc.layer_bytes[moe])
    cands = [even, _improve(lc, budget, _greedy(lc, budget))]
    slots = max(cands, key=lambda c: int(lc.hits[idx, c].sum()))
    used = int((slots * lc.layer_bytes).sum())
    return Allocation(int(budget), slots, used, int(lc.hits[idx, slots].sum()))


def layer_partitioned_curve(lk: Lookups, budgets: npt.ArrayLike, curves: LayerCurves | None = None,
                            by_allocation: bool = False) -> Curve:
    """One LRU per layer at each global budget: split evenly over the MoE layers (each layer
    gets ``budget / n_moe_layers`` bytes, whole experts), or with ``by_allocation`` by
    :func:`allocate`."""
    b = _check_budgets(budgets)
    lc = curves if curves is not None else layer_curves(lk)
    moe = lc.moe_layers
    nb = b.shape[0]
    hd = np.zeros(nb, dtype=np.int64)
    hb = np.zeros(nb, dtype=np.int64)
    hl = np.zeros((lk.n_layer, nb), dtype=np.int64)
    for j, bud in enumerate(b.tolist()):
        if by_allocation:
            slots = allocate(lc, bud).slots
        else:
            slots = np.zeros(lk.n_layer, dtype=np.int64)
            if moe.size:
                slots[moe] = np.minimum(lk.n_expert, (bud // moe.size) // lc.layer_bytes[moe])
        idx = np.arange(lk.n_layer)
        hl[:, j] = lc.hits[idx, slots]
        hd[j] = int(hl[:, j].sum())
        hb[j] = int(lc.hit_bytes[idx, slots].sum())
    dl, db, ll = _totals(lk)
    return Curve("lru_layer_alloc" if by_allocation else "lru_layer_equal", b, hd, hb, hl, dl, db, ll,
                 lk.n_decode_tokens)
