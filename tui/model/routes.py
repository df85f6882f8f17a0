"""Routing: which experts the router picked per (token, layer), and whether each was a cache hit.

:class:`RouteStore` keeps

* routing rows ``(tok, layer, expert, hit, tier)`` of the newest tokens (every token without a
  window): ``tok`` is the token row, or ``-1 - turn`` for a turn's prefill rows; ``hit`` 1 resident
  when routed, 0 miss, -1 not known; ``tier`` the memory tier that served it (:data:`TIER_CACHE`,
  :data:`TIER_PAGE_CACHE`, :data:`TIER_DISK`; :data:`TIER_UNKNOWN` when the source did not say:
  docs/memory.md "The three tiers in bmoe-run");
* per (layer, row) cache hits and lookups: from routing rows, or given directly (a ``/metrics``
  interval's per-layer counters, an audit ``exit`` record), for the newest rows at full resolution
  and for every row in a :class:`~bmoe_top.tui.model.history.CountHistory`;
* per (layer, expert) routed counts, hit counts, misses the page cache and the disk served and
  last-routing hit for any cursor: kept exactly
  for cursors inside the routing window (the older rows are folded into a base), and as of the
  nearest of a few checkpoints for an older cursor. Inside the window, prefix snapshots every
  ``snapshot_rows`` routing rows bound the cost of any cursor move: forward it costs the rows in
  between, backward at most one snapshot interval (not the run so far).

No Textual import; the run model's lock guards every call.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from bmoe_top.tui.model.history import BASE_ROWS, CAPACITY, F64, I64, CountHistory, Stats

__all__ = ["TIER_CACHE", "TIER_DISK", "TIER_PAGE_CACHE", "TIER_UNKNOWN", "ExpertCounts", "LayerShares",
           "RouteStore", "RoutesReader", "page_cache_share"]

I32 = NDArray[np.int32]
I8 = NDArray[np.int8]

#: A routing row's ``tier`` (the values of ``BMOE_ROUTE``'s ``tier``: docs/telemetry.md), and the
#: value of a row whose source did not say.
TIER_CACHE, TIER_PAGE_CACHE, TIER_DISK, TIER_UNKNOWN = 0, 1, 2, -1

#: Checkpoints of the expert aggregates kept for cursors older than the routing window.
MAX_CHECKPOINTS = 16
#: Prefix snapshots of the expert aggregates inside the routing window (for backward seeks): at
#: most this many; past it every other one is dropped and the interval doubles.
MAX_SNAPSHOTS = 256
#: The first snapshot interval: this many routing rows per (layer, expert) slot, at least
#: :data:`MIN_SNAPSHOT_ROWS` (a snapshot costs 9 bytes per slot, 17 once a row has had a tier; a
#: routing row 26 bytes).
SNAPSHOT_ROWS_PER_SLOT = 4
MIN_SNAPSHOT_ROWS = 4096


@dataclass(frozen=True, slots=True)
class ExpertCounts:
    """Per (layer, expert) over tokens before a cursor: ``routed`` and ``hits`` (int64), the misses
    the page cache and the disk served (``pagecache``, ``disk``, int64: routing rows whose tier
    the source said), ``last`` (int8: 1 hit / 0 miss at the expert's last routing, -1 never
    routed). ``as_of`` is None when the
    counts stop at the cursor asked for; when the cursor is older than the routing rows kept, they
    stop at an earlier checkpoint: the rows of tokens before ``as_of`` (-1: no row at all)."""

    routed: I64
    hits: I64
    pagecache: I64
    disk: I64
    last: I8
    as_of: int | None = None


@dataclass(frozen=True, slots=True)
class LayerShares:
    """Hit share per layer in row bins: ``share`` float ``[n_layer, bins]`` (NaN where nothing was
    looked up), ``lookups`` the counts behind it; bin ``j`` is rows ``[edges[j], edges[j + 1])``;
    ``width`` rows per bucket of the resolution that answered."""

    edges: I64
    width: int
    share: F64
    lookups: F64


@dataclass(slots=True)
class _Aggregate:
    """Expert aggregates over the first ``rows`` routing rows (global row numbers)."""

    rows: int
    routed: I64
    hits: I64
    pagecache: I64
    disk: I64
    last: I8


class RoutesReader(Protocol):
    """What the views may do with routing (see :class:`RouteStore`)."""

    @property
    def n(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def tok(self) -> I64: ...
    @property
    def layer(self) -> I32: ...
    @property
    def expert(self) -> I32: ...
    @property
    def hit(self) -> I8: ...
    @property
    def tier(self) -> I8: ...
    @property
    def tier_rows(self) -> int: ...
    @property
    def count_rows(self) -> int: ...
    @property
    def max_tok(self) -> int: ...
    @property
    def max_layer(self) -> int: ...
    @property
    def max_expert(self) -> int: ...
    @property
    def window_tokens(self) -> int | None: ...


class RouteStore:
    """See the module docstring. ``window_tokens``: keep routing rows of at least the newest that
    many tokens (None: all); ``count_rows``: keep per-layer counts of at least the newest that many
    rows at full resolution (None: all)."""

    def __init__(self, *, window_tokens: int | None = None, count_rows: int | None = None,
                 history_capacity: int = CAPACITY, base_rows: int = BASE_ROWS) -> None:
        self._window = window_tokens
        self._cap = 8192
        self._tok = np.zeros(self._cap, np.int64)
        self._layer = np.zeros(self._cap, np.int32)
        self._expert = np.zeros(self._cap, np.int32)
        self._hit = np.zeros(self._cap, np.int8)
        self._tier = np.zeros(self._cap, np.int8)
        self._cummax = np.zeros(self._cap, np.int64)
        self._n = 0  # rows held
        self._row0 = 0  # global number of held row 0 (rows before it are folded into the base)
        self._evicted_max_tok = -1  # the newest token among folded rows
        self.max_tok = -1
        self.max_layer = -1
        self.max_expert = -1
        self._tier_rows = 0  # routing rows ever added whose tier the source said
        zero = np.zeros((0, 0), np.int64)
        self._base = _Aggregate(0, zero, zero, zero, zero, np.zeros((0, 0), np.int8))
        self._acc: _Aggregate | None = None
        self._checkpoints: list[tuple[int, _Aggregate]] = []  # (token the counts stop at, counts)
        self._snapshots: list[_Aggregate] = []  # prefix aggregates at multiples of _snap_every rows
        self._snap_every = 0  # 0: not chosen yet (the first snapshot sizes it from the shape)
        # per (layer, row) counts at full resolution: rows [_lc0, _lc0 + _lc_cols)
        self._count_window = count_rows
        self._base_rows = base_rows
        self._lc_hits = np.zeros((0, 1024), np.float64)
        self._lc_look = np.zeros((0, 1024), np.float64)
        self._lc0 = 0
        self._lc_rows = 0  # one past the highest row with counts
        self.counts = CountHistory(self._count_fine, lambda: self._lc0, 0, history_capacity, base_rows)

    # -- routing rows ----------------------------------------------------------------------------
    @property
    def window_tokens(self) -> int | None:
        """Tokens whose routing rows are kept at least (None: all); older rows are folded into
        the aggregates when the store is full."""
        return self._window

    @property
    def n(self) -> int:
        """Routing rows held."""
        return self._n

    @property
    def total(self) -> int:
        """Routing rows ever added."""
        return self._row0 + self._n

    @property
    def tok(self) -> I64:
        return self._tok[: self._n]

    @property
    def layer(self) -> I32:
        return self._layer[: self._n]

    @property
    def expert(self) -> I32:
        return self._expert[: self._n]

    @property
    def hit(self) -> I8:
        return self._hit[: self._n]

    @property
    def tier(self) -> I8:
        return self._tier[: self._n]

    @property
    def tier_rows(self) -> int:
        """Routing rows ever added whose tier the source said (0: it never says, the tier view
        says so rather than showing zeros)."""
        return self._tier_rows

    def extend(self, tok: NDArray[np.integer], layer: NDArray[np.integer], expert: NDArray[np.integer],
               hit: NDArray[np.integer], tier: NDArray[np.integer] | None = None) -> None:
        """Add routing rows (arrays of one length, in arrival order); ``tier`` None: not said
        (:data:`TIER_UNKNOWN` for every row), and a value that is no tier (not 0, 1 or 2) is not
        said either."""
        t64: I64 = np.asarray(tok, dtype=np.int64)
        k = len(t64)
        if not k:
            return
        l64: I64 = np.asarray(layer, dtype=np.int64)
        e64: I64 = np.asarray(expert, dtype=np.int64)
        h64: I64 = np.asarray(hit, dtype=np.int64)
        self._reserve(k)
        s = slice(self._n, self._n + k)
        self._tok[s] = t64
        self._layer[s] = l64
        self._expert[s] = e64
        self._hit[s] = h64
        if tier is None:
            self._tier[s] = TIER_UNKNOWN
        else:
            r64 = np.asarray(tier, dtype=np.int64)
            known = (r64 >= TIER_CACHE) & (r64 <= TIER_DISK)
            self._tier[s] = np.where(known, r64, TIER_UNKNOWN)  # a value no tier has: not said
            self._tier_rows += int(np.count_nonzero(known))
        self._cummax[s] = np.maximum.accumulate(np.maximum(t64, self.max_tok))
        self._n += k
        self.max_tok = int(self._cummax[self._n - 1])
        self.max_layer = max(self.max_layer, int(l64.max()))
        self.max_expert = max(self.max_expert, int(e64.max()))
        if int(t64.min()) >= 0 and int(l64.min()) >= 0 and int(h64.min()) >= 0:  # every row counts (a live token)
            self._count_routes(t64, l64, h64 > 0)
            return
        m = (t64 >= 0) & (l64 >= 0) & (h64 >= 0)
        if m.any():
            self._count_routes(t64[m], l64[m], h64[m] > 0)

    def _count_routes(self, tok: I64, layer: I64, hit: NDArray[np.bool_]) -> None:
        """Per (layer, row) lookups and hits of routing rows, added in row blocks."""
        n_layer = self.max_layer + 1
        t0, t1 = int(tok.min()), int(tok.max())
        if t0 == t1:  # one token's rows (a live BMOE_ROUTE line): one column per layer
            look1 = np.bincount(layer, minlength=n_layer).astype(np.float64)[:, None]
            hits1 = np.bincount(layer, weights=hit, minlength=n_layer).astype(np.float64)[:, None]
            self.add_counts_block(t0, hits1, look1)
            return
        span = t1 - t0 + 1
        if span * n_layer > 1 << 24:  # very sparse rows: one block per distinct row
            for t in np.unique(tok):
                sel = tok == t
                self._count_routes(tok[sel], layer[sel], hit[sel])
            return
        idx = (tok - t0) * n_layer + layer
        look = np.bincount(idx, minlength=span * n_layer).reshape(span, n_layer).T.astype(np.float64)
        hits = np.bincount(idx, weights=hit, minlength=span * n_layer).reshape(span, n_layer).T.astype(np.float64)
        self.add_counts_block(t0, hits, look)

    def _reserve(self, k: int) -> None:
        need = self._n + k
        if need <= self._cap:
            return
        if self._window is not None and self.max_tok >= 0:
            self._evict(self.max_tok + 1 - self._window)
            need = self._n + k
        if need > self._cap:
            cap = self._cap
            while cap < need:
                cap *= 2
            for name in _COLUMNS:
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: self._n] = old[: self._n]
                setattr(self, name, new)
            self._cap = cap

    def _evict(self, keep_tok: int) -> None:
        """Fold the routing rows of tokens before ``keep_tok`` into the base aggregates."""
        r = int(np.searchsorted(self._cummax[: self._n], keep_tok, side="left"))
        if r <= 0:
            return
        shape = (self.max_layer + 1, self.max_expert + 1)
        base = self._grown(self._base, shape)
        self._add_rows(base, 0, r)
        base.rows = self._row0 + r
        self._base = base
        self._evicted_max_tok = int(self._cummax[r - 1])
        self._checkpoints.append((self._evicted_max_tok + 1, _small(base, self._tier_rows > 0)))
        if len(self._checkpoints) > MAX_CHECKPOINTS:
            self._checkpoints = self._checkpoints[1::2]
        keep = self._n - r
        for name in _COLUMNS:
            a = getattr(self, name)
            a[:keep] = a[r:self._n]
        self._n = keep
        self._row0 += r
        if self._acc is not None and self._acc.rows < self._row0:
            self._acc = None
        self._snapshots = [a for a in self._snapshots if a.rows >= self._row0]

    # -- per-layer counts ------------------------------------------------------------------------
    def add_counts(self, row: int, hits: F64, misses: F64) -> None:
        """Add per-layer lookup counts of one row (a token, or a coarser row such as a scrape
        interval). ``hits``/``misses``: ``[n_layer]``; a NaN or negative entry (not exported,
        counter went down) adds nothing for that layer. No routing row is added."""
        h = np.asarray(hits, dtype=np.float64)
        m = np.asarray(misses, dtype=np.float64)
        ok = np.isfinite(h) & np.isfinite(m) & (h >= 0) & (m >= 0)
        if row < 0 or not ok.any():
            return
        il = np.flatnonzero(ok)
        self.max_tok = max(self.max_tok, int(row))
        self.max_layer = max(self.max_layer, int(il.max()))
        n_layer = self.max_layer + 1
        hv = np.zeros((n_layer, 1))
        lv = np.zeros((n_layer, 1))
        hv[il, 0] = np.floor(h[il])
        lv[il, 0] = np.floor(h[il]) + np.floor(m[il])
        self.add_counts_block(int(row), hv, lv)

    def add_counts_block(self, row0: int, hits: F64, lookups: F64) -> None:
        """Add per-layer hits and lookups of rows ``row0 ..`` (``[layers, k]`` each)."""
        n_layer, k = hits.shape
        self.max_layer = max(self.max_layer, n_layer - 1)
        self.max_tok = max(self.max_tok, row0 + k - 1)
        self._lc_reserve(n_layer, row0 + k)
        a = row0 - self._lc0
        if a + k > 0:  # rows older than the window at full resolution only go to the history
            c0 = max(0, -a)
            self._lc_hits[:n_layer, a + c0:a + k] += hits[:, c0:]
            self._lc_look[:n_layer, a + c0:a + k] += lookups[:, c0:]
        self._lc_rows = max(self._lc_rows, row0 + k)
        if n_layer > self.counts.channels:
            self.counts.grow_channels(n_layer)
        if n_layer < self.counts.channels:
            pad = self.counts.channels - n_layer
            hits = np.vstack([hits, np.zeros((pad, k))])
            lookups = np.vstack([lookups, np.zeros((pad, k))])
        self.counts.add_block(row0, hits, lookups)

    def _lc_reserve(self, n_layer: int, rows: int) -> None:
        """Room for per-layer counts of ``n_layer`` layers up to row ``rows``."""
        L, cap = self._lc_hits.shape
        need = rows - self._lc0
        if n_layer <= L and need <= cap:
            return
        if need > cap and self._count_window is not None:
            keep_from = max(0, rows - self._count_window)
            keep_from -= keep_from % self._base_rows
            drop = keep_from - self._lc0
            if drop > 0:
                for a in (self._lc_hits, self._lc_look):
                    if drop < cap:
                        a[:, : cap - drop] = a[:, drop:]
                        a[:, cap - drop:] = 0
                    else:
                        a[:] = 0
                self._lc0 = keep_from
                need = rows - self._lc0
        L2 = max(L, n_layer)
        cap2 = cap
        while cap2 < need:
            cap2 *= 2
        if (L2, cap2) != (L, cap):
            for name in ("_lc_hits", "_lc_look"):
                old = getattr(self, name)
                new = np.zeros((L2, cap2))
                new[:L, :cap] = old
                setattr(self, name, new)

    def _count_fine(self, a: int, b: int) -> Stats:
        a = max(a, self._lc0)
        b = max(a, min(b, self._lc0 + self._lc_hits.shape[1]))
        L = self.counts.channels
        hits = np.zeros(L)
        look = np.zeros(L)
        n = min(L, self._lc_hits.shape[0])
        hits[:n] = self._lc_hits[:n, a - self._lc0:b - self._lc0].sum(axis=1)
        look[:n] = self._lc_look[:n, a - self._lc0:b - self._lc0].sum(axis=1)
        return {"hits": hits, "lookups": look}

    @property
    def count_rows(self) -> int:
        """One past the highest row with per-layer counts or routing."""
        return max(self._lc_rows, self.max_tok + 1)

    def hit_share(self, n_layer: int, lo: int, hi: int) -> F64:
        """Hit share float ``[n_layer, hi - lo]`` of rows ``[lo, hi)``; NaN where nothing was looked
        up, or the row is no longer held at full resolution (see :meth:`layer_series`)."""
        out = np.full((n_layer, max(0, hi - lo)), np.nan)
        L, cap = self._lc_hits.shape
        a, b = max(lo, self._lc0), min(hi, self._lc0 + cap)
        l2 = min(n_layer, L)
        if l2 <= 0 or b <= a:
            return out
        look = self._lc_look[:l2, a - self._lc0:b - self._lc0]
        hits = self._lc_hits[:l2, a - self._lc0:b - self._lc0]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:l2, a - lo:b - lo] = np.where(look > 0, hits / np.where(look > 0, look, 1), np.nan)
        return out

    def layer_series(self, n_layer: int, lo: int, hi: int, bins: int) -> LayerShares:
        """Hit share per layer in about ``bins`` bins over rows ``[lo, hi)``, exact per bin."""
        total = self.count_rows
        self.counts.advance(total)
        edges, width = self.counts.plan(lo, hi, bins, total)
        q = self.counts.query(edges)
        nb = max(0, len(edges) - 1)
        share = np.full((n_layer, nb), np.nan)
        look = np.zeros((n_layer, nb))
        l2 = min(n_layer, self.counts.channels)
        look[:l2] = q["lookups"][:l2]
        with np.errstate(invalid="ignore", divide="ignore"):
            share[:l2] = np.where(look[:l2] > 0, q["hits"][:l2] / np.where(look[:l2] > 0, look[:l2], 1), np.nan)
        return LayerShares(edges, width, share, look)

    def tier_split(self, lo: int, hi: int, l0: int, l1: int) -> tuple[int, int] | None:
        """(page-cache misses, disk misses) of the routing rows of tokens ``[lo, hi)`` and layers
        ``[l0, l1)``; None when no row of them has a tier (the source does not say) or some of
        those tokens' rows are no longer held. Costs the rows of those tokens (the tokens' rows
        are found by bisection)."""
        if not self._tier_rows or hi <= lo or lo <= self._evicted_max_tok:
            return None
        cm = self._cummax[: self._n]
        a = int(np.searchsorted(cm, lo, side="left"))
        b = int(np.searchsorted(cm, hi, side="left"))
        tok, layer, tier = self._tok[a:b], self._layer[a:b], self._tier[a:b]
        sel = (tok >= lo) & (tok < hi) & (layer >= l0) & (layer < l1)
        told = tier[sel]
        if not (told >= 0).any():
            return None
        return int(np.count_nonzero(told == TIER_PAGE_CACHE)), int(np.count_nonzero(told == TIER_DISK))

    # -- expert aggregates -------------------------------------------------------------------------
    def rows_before(self, stop: int | None) -> int:
        """Global number of routing rows that belong to tokens before ``stop`` (all when None),
        counting only held rows past the base."""
        if stop is None or stop > self.max_tok:
            return self.total
        return self._row0 + int(np.searchsorted(self._cummax[: self._n], stop, side="left"))

    @staticmethod
    def _grown(agg: _Aggregate, shape: tuple[int, int]) -> _Aggregate:
        """A copy of ``agg`` with room for ``shape`` (never smaller than it was)."""
        L = max(shape[0], agg.routed.shape[0])
        E = max(shape[1], agg.routed.shape[1])
        routed, hits, pagecache, disk = (_crop(a.astype(np.int64), (L, E))
                                         for a in (agg.routed, agg.hits, agg.pagecache, agg.disk))
        last = np.full((L, E), -1, np.int8)
        last[: agg.last.shape[0], : agg.last.shape[1]] = agg.last
        return _Aggregate(agg.rows, routed, hits, pagecache, disk, last)

    def _add_rows(self, agg: _Aggregate, a: int, b: int, sign: int = 1) -> None:
        """Add held rows ``[a, b)`` (local indexes) to ``agg`` (subtract with ``sign=-1``; the
        last-routing state only moves forward)."""
        if b <= a:
            return
        L, E = agg.routed.shape
        layer, expert, hit = self._layer[a:b], self._expert[a:b], self._hit[a:b]
        m = (layer >= 0) & (layer < L) & (expert >= 0) & (expert < E)
        idx = layer[m].astype(np.int64) * E + expert[m]
        agg.routed += sign * np.bincount(idx, minlength=L * E).reshape(L, E)
        agg.hits += sign * np.bincount(idx, weights=hit[m] > 0, minlength=L * E).reshape(L, E).astype(np.int64)
        if self._tier_rows:
            tier = self._tier[a:b][m]
            for t, out in ((TIER_PAGE_CACHE, agg.pagecache), (TIER_DISK, agg.disk)):
                sel = tier == t
                if sel.any():
                    out += sign * np.bincount(idx[sel], minlength=L * E).reshape(L, E)
        if sign > 0:
            agg.last[layer[m], expert[m]] = (hit[m] > 0).astype(np.int8)  # later rows win

    def expert_counts(self, n_layer: int, n_expert: int, stop: int | None) -> ExpertCounts:
        """Expert aggregates ``[n_layer, n_expert]`` over tokens before ``stop`` (prefill rows of
        turns started before it included). Moving the cursor forward costs the rows in between,
        backward (or to a new shape) the rows since the newest prefix snapshot before it."""
        shape = (n_layer, n_expert)
        if stop is not None and stop <= self._evicted_max_tok:
            return self._from_checkpoint(shape, stop)
        R = self.rows_before(stop)
        acc = self._acc
        need = (max(n_layer, self.max_layer + 1), max(n_expert, self.max_expert + 1))
        if acc is None or acc.routed.shape != need or R < acc.rows:
            acc = self._grown(self._start_before(R), need)
        self._advance(acc, R)
        self._acc = acc
        return ExpertCounts(_crop(acc.routed, shape), _crop(acc.hits, shape), _crop(acc.pagecache, shape),
                            _crop(acc.disk, shape), _crop(acc.last, shape, -1))

    def _start_before(self, rows: int) -> _Aggregate:
        """The newest aggregate over at most ``rows`` rows to count on from: a snapshot, else the base."""
        i = bisect.bisect_right([a.rows for a in self._snapshots], rows)
        if i:
            return self._snapshots[i - 1]
        base = self._base
        return _Aggregate(self._row0, base.routed, base.hits, base.pagecache, base.disk, base.last)

    def _advance(self, acc: _Aggregate, rows: int) -> None:
        """Count held rows into ``acc`` up to global row ``rows``, snapshotting at each multiple of
        the snapshot interval it passes that is newer than the newest snapshot."""
        if self._snap_every == 0:
            self._snap_every = max(MIN_SNAPSHOT_ROWS, SNAPSHOT_ROWS_PER_SLOT * acc.routed.size)
        while acc.rows < rows:
            every = self._snap_every
            nxt = (acc.rows // every + 1) * every
            b = min(rows, nxt)
            self._add_rows(acc, acc.rows - self._row0, b - self._row0)
            acc.rows = b
            if b == nxt and (not self._snapshots or self._snapshots[-1].rows < b):
                self._snapshots.append(_small(acc, self._tier_rows > 0))
                if len(self._snapshots) > MAX_SNAPSHOTS:
                    self._snap_every *= 2
                    self._snapshots = [a for a in self._snapshots if a.rows % self._snap_every == 0]

    def _from_checkpoint(self, shape: tuple[int, int], stop: int) -> ExpertCounts:
        best: tuple[int, _Aggregate] | None = None
        for tok_stop, agg in self._checkpoints:
            if tok_stop <= stop:
                best = (tok_stop, agg)
        if best is None:
            z = np.zeros(shape, np.int64)
            return ExpertCounts(z, z.copy(), z.copy(), z.copy(), np.full(shape, -1, np.int8), as_of=-1)
        tok_stop, agg = best
        routed, hits, pagecache, disk = (_crop(a.astype(np.int64), shape)
                                         for a in (agg.routed, agg.hits, agg.pagecache, agg.disk))
        return ExpertCounts(routed, hits, pagecache, disk, _crop(agg.last, shape, -1), as_of=tok_stop)


def page_cache_share(pagecache: NDArray[np.integer], disk: NDArray[np.integer]) -> F64:
    """The catalogue's ``map.page_cache_share`` (0..1, not %) per cell of counts of one shape
    (:class:`ExpertCounts`' ``pagecache`` and ``disk``, folded or not): NaN where no miss with
    a tier was counted (no miss is not 0)."""
    pc = np.asarray(pagecache, dtype=np.float64)
    told = pc + np.asarray(disk, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(told > 0, pc / np.where(told > 0, told, 1.0), np.nan)


_A = TypeVar("_A", bound=np.generic)

#: The routing row columns, each one array of the store's capacity.
_COLUMNS = ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax")


#: The tier counts a kept aggregate has while no row has had a tier: none (every reader crops
#: or grows a kept aggregate to its shape, zeros).
_NO_TIERS: I64 = np.zeros((0, 0), np.int64)


def _small(agg: _Aggregate, tiers: bool) -> _Aggregate:
    """A copy of ``agg`` kept for later (a checkpoint, a snapshot): its counts as int32, the tier
    counts only when some row has had a tier (``tiers``; 8 bytes a slot saved for a source that
    sends none)."""
    return _Aggregate(agg.rows, agg.routed.astype(np.int32), agg.hits.astype(np.int32),
                      agg.pagecache.astype(np.int32) if tiers else _NO_TIERS,
                      agg.disk.astype(np.int32) if tiers else _NO_TIERS, agg.last.copy())


def _crop(a: NDArray[_A], shape: tuple[int, int], fill: int = 0) -> NDArray[_A]:
    """``a`` cut or padded (with ``fill``) to ``shape``."""
    if a.shape == shape:
        return a
    out = np.full(shape, fill, dtype=a.dtype)
    L, E = min(shape[0], a.shape[0]), min(shape[1], a.shape[1])
    out[:L, :E] = a[:L, :E]
    return out
