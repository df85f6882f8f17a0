"""Tokens a second from hit rates: the what-if's curves turned into predicted decode speed, for
one cache level (an expert cache read with O_DIRECT) and two (the expert cache in front of the
page cache), with plain mmap (no expert cache) beside it (docs/analysis.md "Predicted speed").
Pure: no Textual, no files.

Per decode token, with ``h`` the hit rate at budget ``B``::

    misses   = lookups x (1 - h)
    flash_ms = misses x miss_bytes / (read_mb_s x 10^6) x 1000
    compute  = compute_ms + miss_ms x lookups x (1 - h_B)
    mgmt     = mgmt_ms + evict_ms x evictions
    serial   = compute + flash_ms + mgmt
    overlap  = max(compute, flash_ms) + mgmt + stall_ms
    tok/s    = 1000 / (s/token in ms)

``miss_ms`` is the compute time an expert-cache miss adds besides its read and mgmt (the runtime
leaving its native path for the miss, the copy in), ``h_B`` the expert cache's own hit at ``B``:
0 unless measured (``bmoe-top sweep`` fits it on the reference arm), and 0 for plain mmap.
``evictions`` the expert cache's misses per token that evict at ``B`` (a cache evicts only once
full: tui/analysis/cachesim.py ``decode_evictions``), ``evict_ms`` the mgmt one of them costs (the
runtime moves the evicted expert's pages into the missed one): 0 unless measured (``bmoe-top
sweep``), ``mgmt_ms`` then the whole mgmt of a token at every budget; no eviction term for plain
mmap (the page cache's evictions are the kernel's).

Two levels: the page cache holds ``P = ram - dense - runtime - B`` bytes; a miss of the expert
cache that the page cache holds costs no read. Both are LRU-like and the page cache keeps a copy
of what the expert cache read through it (inclusive), so together they hit as one cache of
``max(B, P)`` would: ``h2 = h(max(B, P))``. Plain mmap is ``B = 0`` with the page cache reading
in readahead-sized pieces: a miss reads ``ceil(miss_bytes / R) x R`` bytes and the page cache
holds ``miss_bytes / that`` of useful bytes per byte, so ``h_mmap = h(P x miss_bytes / read)``;
or, closer to stock llama.cpp, the bytes a token reads as the page cache's replay over the trace
finds them (``pagecache.replay_mmap``: a window is the expert's neighbours, not waste).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = ["Memory", "Prediction", "SizingReport", "TokenCosts", "hit_at", "mmap_prediction", "predict",
           "sizing_report", "two_level_prediction"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class TokenCosts:
    """What one decode token costs besides its reads, as the run measured at steady state, and
    what a miss reads. ``compute_ms``, ``mgmt_ms``, ``stall_ms``: ms per token (``stall_ms``:
    the flash wait the runtime measured under overlap that compute did not hide; 0 for a serial
    run); ``lookups``: expert lookups per token (MoE layers x top-k); ``miss_bytes``: bytes read
    per miss (one expert of one layer, every tensor); ``read_mb_s``: read bandwidth at the slice
    size and queue depth the runtime uses (10^6 bytes/s; ``bmoe-top probe``); ``miss_ms``: the
    compute one expert-cache miss adds besides its read and mgmt (ms; 0: not known), so
    ``compute_ms`` is then a token's compute with no miss; ``evict_ms``: the mgmt one evicting
    miss adds (ms; 0: not known), so ``mgmt_ms`` is then a token's mgmt with no eviction."""

    compute_ms: float
    mgmt_ms: float
    lookups: float
    miss_bytes: float
    read_mb_s: float
    stall_ms: float = 0.0
    miss_ms: float = 0.0
    evict_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute_ms", "mgmt_ms", "lookups", "miss_bytes", "stall_ms", "miss_ms", "evict_ms"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {v!r}")
        if not (math.isfinite(self.read_mb_s) and self.read_mb_s > 0):
            raise ValueError(f"read_mb_s must be a finite number > 0, not {self.read_mb_s!r}")


@dataclass(frozen=True)
class Memory:
    """The RAM a run has (bytes): ``ram`` in all (the machine's, or its cgroup's limit),
    ``dense`` the weights that are always resident (attention, shared experts, embeddings),
    ``runtime`` the runtime's own memory (KV cache, buffers); ``readahead`` the page cache's read
    size for plain mmap (bytes: the device's ``read_ahead_kb`` x 1024)."""

    ram: float
    dense: float
    runtime: float
    readahead: float = 128 * 1024

    def page_cache(self, budget_bytes: float) -> float:
        """Bytes left for the page cache beside an expert cache of ``budget_bytes`` (negative: the
        budget does not fit)."""
        return self.ram - self.dense - self.runtime - budget_bytes


@dataclass(frozen=True)
class Prediction:
    """One budget's predicted decode token: ``budget_mib``; ``hit`` (0..1) what avoids a read
    (both levels for a two-level prediction); the parts in ms per token; ``serial_ms`` and
    ``overlap_ms`` the two totals and their tok/s. ``fits`` False: the budget does not fit in
    the RAM given (every number is then still the one-level figure)."""

    budget_mib: float
    hit: float
    compute_ms: float
    flash_ms: float
    mgmt_ms: float
    stall_ms: float
    serial_ms: float
    overlap_ms: float
    fits: bool = True

    @property
    def serial_tok_s(self) -> float:
        return 1000.0 / self.serial_ms if self.serial_ms > 0 else math.inf

    @property
    def overlap_tok_s(self) -> float:
        return 1000.0 / self.overlap_ms if self.overlap_ms > 0 else math.inf

    def tok_s(self, overlap: bool) -> float:
        return self.overlap_tok_s if overlap else self.serial_tok_s


def hit_at(budgets_mib: Sequence[float], hits: Sequence[float], mib: float) -> float:
    """The hit rate (0..1) at ``mib`` read off a curve by straight lines between its points
    (``budgets_mib`` ascending, ``hits`` 0..1), from (0, 0) below the first point, flat past the
    last. Raises ValueError for an empty or unsorted curve."""
    if not budgets_mib or len(budgets_mib) != len(hits):
        raise ValueError("a curve needs as many hit rates as budgets, at least one")
    if any(b > a for a, b in zip(budgets_mib[1:], budgets_mib)):
        raise ValueError("the curve's budgets must ascend")
    if mib <= 0:
        return 0.0
    xs, ys = [0.0, *budgets_mib], [0.0, *hits]
    if xs[1] == 0:
        xs, ys = xs[1:], ys[1:]
    if mib >= xs[-1]:
        return float(ys[-1])
    i = bisect.bisect_right(xs, mib)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return float(y0 + (y1 - y0) * (mib - x0) / (x1 - x0)) if x1 > x0 else float(y1)


def predict(budget_mib: float, hit: float, costs: TokenCosts, *, miss_bytes: float | None = None,
            fits: bool = True, cache_hit: float | None = None, evictions: float = 0.0) -> Prediction:
    """The decode token at ``hit`` (0..1): the formula of the module's docstring. ``miss_bytes``
    overrides what a miss reads (plain mmap's readahead-sized reads); ``cache_hit`` the expert
    cache's own hit when ``hit`` counts a second level too (default ``hit``); ``evictions`` the
    expert cache's evicting misses per token (>= 0). Raises ValueError for a hit outside 0..1 or
    evictions that are negative or not finite."""
    if not 0.0 <= hit <= 1.0:
        raise ValueError(f"hit must be 0..1, not {hit!r}")
    if not (math.isfinite(evictions) and evictions >= 0):
        raise ValueError(f"evictions must be a finite number >= 0, not {evictions!r}")
    per_miss = costs.miss_bytes if miss_bytes is None else miss_bytes
    flash_ms = costs.lookups * (1.0 - hit) * per_miss / (costs.read_mb_s * 1e6) * 1e3
    own = hit if cache_hit is None else cache_hit
    compute = costs.compute_ms + costs.miss_ms * costs.lookups * (1.0 - own)
    mgmt = costs.mgmt_ms + costs.evict_ms * evictions
    serial = compute + flash_ms + mgmt
    overlap = max(compute, flash_ms) + mgmt + costs.stall_ms
    return Prediction(budget_mib, hit, compute, flash_ms, mgmt, costs.stall_ms, serial, overlap, fits)


def two_level_prediction(budgets_mib: Sequence[float], hits: Sequence[float], budget_mib: float,
                         costs: TokenCosts, memory: Memory, evictions: float = 0.0) -> Prediction:
    """An expert cache of ``budget_mib`` read through the page cache that the rest of
    ``memory`` leaves: ``h(max(B, P))`` avoids a read (module docstring); ``evictions`` the
    expert cache's own evicting misses per token."""
    page = memory.page_cache(budget_mib * MIB)
    reach = max(budget_mib, page / MIB)
    return predict(budget_mib, hit_at(budgets_mib, hits, reach), costs, fits=page >= 0,
                   cache_hit=hit_at(budgets_mib, hits, budget_mib), evictions=evictions)


def mmap_prediction(budgets_mib: Sequence[float], hits: Sequence[float], costs: TokenCosts,
                    memory: Memory, *, read_per_token: float | None = None) -> Prediction:
    """Plain mmap (no expert cache, ``B = 0``): the page cache reads ``ceil(miss_bytes / R) x R``
    bytes a miss (``R``: ``memory.readahead``) and holds that much less of what is used.
    ``read_per_token``: the bytes a decode token reads as the page cache's replay over the trace
    found them (tui/analysis/pagecache.py ``replay_mmap``), used instead of that rule; ``hit`` is
    then the share of a token's expert bytes not read (0 when it reads more). Plain mmap has no
    expert cache (no ``miss_ms``, ``evict_ms``, ``mgmt_ms`` or ``stall_ms`` of one) and overlaps nothing (a page
    fault stalls the thread that touched the page): its overlap total is its serial one."""
    page = memory.page_cache(0.0)
    mmap_costs = replace(costs, miss_ms=0.0, evict_ms=0.0, mgmt_ms=0.0, stall_ms=0.0)
    if read_per_token is not None:
        if not (math.isfinite(read_per_token) and read_per_token >= 0):
            raise ValueError(f"read_per_token must be a finite number >= 0, not {read_per_token!r}")
        full = costs.lookups * costs.miss_bytes
        if read_per_token <= full:
            p = predict(0.0, 1.0 - read_per_token / full if full > 0 else 1.0, mmap_costs, fits=page >= 0)
        else:
            p = predict(0.0, 0.0, mmap_costs, miss_bytes=read_per_token / costs.lookups, fits=page >= 0)
    else:
        read = math.ceil(costs.miss_bytes / memory.readahead) * memory.readahead if memory.readahead > 0 \
            else costs.miss_bytes
        useful = max(0.0, page) * (costs.miss_bytes / read if read > 0 else 1.0)
        p = predict(0.0, hit_at(budgets_mib, hits, useful / MIB), mmap_costs, miss_bytes=read, fits=page >= 0)
    return replace(p, overlap_ms=p.serial_ms)


@dataclass(frozen=True)
class SizingReport:
    """The budgets' predictions and what they say (docs/analysis.md "Predicted speed"):
    ``points`` one per budget; ``mmap`` plain mmap at the same RAM (None without a RAM);
    ``best_mib`` the budget of the highest tok/s; ``larger_is_slower`` whether the largest budget
    is slower than that best; ``break_even_mib`` the smallest budget at least as fast as plain
    mmap (None: none is, or no RAM); ``knee_mib`` the first budget past which one more GiB buys
    less than ``knee_share`` of its tok/s; ``cache_to_demand`` per point, the budget over the
    distinct expert bytes a token needs."""

    overlap: bool
    points: list[Prediction]
    mmap: Prediction | None
    best_mib: float
    larger_is_slower: bool
    break_even_mib: float | None
    knee_mib: float | None
    knee_share: float
    cache_to_demand: list[float]


def sizing_report(budgets_mib: Sequence[float], hits: Sequence[float], costs: TokenCosts, *,
                  memory: Memory | None = None, overlap: bool = False, knee_share: float = 0.05,
                  demand_bytes: float | None = None, evictions: Sequence[float] | None = None,
                  mmap_read_per_token: float | None = None, mmap_read_mb_s: float | None = None) -> SizingReport:
    """Predict every budget of a hit-rate curve (``budgets_mib`` ascending, ``hits`` 0..1).
    With ``memory`` the expert cache reads through the page cache (two levels) and plain mmap
    is predicted beside it; without, one level (O_DIRECT). ``overlap``: the overlap totals rank
    the budgets, else the serial ones. ``demand_bytes``: distinct expert bytes a token needs
    (default ``lookups x miss_bytes``). ``evictions``: evicting misses per token at each budget
    (default none). ``mmap_read_per_token``: plain mmap's bytes a token from the page cache's
    replay (:func:`mmap_prediction`); ``mmap_read_mb_s``: the rate plain mmap's faults read at
    (default the costs' read bandwidth). Raises ValueError for an empty curve or evictions not one a
    budget."""
    ev = [0.0] * len(budgets_mib) if evictions is None else list(evictions)
    if len(ev) != len(budgets_mib):
        raise ValueError(f"{len(ev)} eviction counts for {len(budgets_mib)} budgets")
    if memory is None:
        points = [predict(b, hit_at(budgets_mib, hits, b), costs, evictions=e) for b, e in zip(budgets_mib, ev)]
        mmap = None
    else:
        points = [two_level_prediction(budgets_mib, hits, b, costs, memory, e) for b, e in zip(budgets_mib, ev)]
        mmap_costs = costs if mmap_read_mb_s is None else replace(costs, read_mb_s=mmap_read_mb_s)
        mmap = mmap_prediction(budgets_mib, hits, mmap_costs, memory, read_per_token=mmap_read_per_token)
    fitting = [p for p in points if p.fits] or points
    speed = [p.tok_s(overlap) for p in fitting]
    best = fitting[max(range(len(fitting)), key=lambda i: (speed[i], -i))]
    larger_is_slower = speed[-1] < best.tok_s(overlap) * (1 - 1e-9)
    break_even = None
    if mmap is not None:
        break_even = next((p.budget_mib for p in fitting if p.tok_s(overlap) >= mmap.tok_s(overlap)), None)
    knee = None
    for a, b in zip(fitting, fitting[1:]):
        gib = (b.budget_mib - a.budget_mib) / 1024
        if gib > 0 and (b.tok_s(overlap) - a.tok_s(overlap)) / gib < knee_share * a.tok_s(overlap):
            knee = a.budget_mib
            break
    demand = demand_bytes if demand_bytes is not None else costs.lookups * costs.miss_bytes
    ratio = [p.budget_mib * MIB / demand if demand > 0 else math.inf for p in points]
    return SizingReport(overlap, points, mmap, best.budget_mib, larger_is_slower, break_even, knee, knee_share,
                        ratio)
