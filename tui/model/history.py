"""Tiered, downsampled history of per-row values: what the views draw for rows no longer kept at
full resolution (docs/architecture.md "Bounded memory").

Rows are numbered 0, 1, 2, ... (a token, a scrape interval, an audit request). Besides the rows
themselves (held by the caller, maybe only the newest ones), every row is summarised in buckets of
consecutive rows at several resolutions, the way time-series stores keep history:

* level 0: buckets of ``base_rows`` rows, the newest ``capacity`` to ``2 * capacity`` of them;
* level 1: buckets of ``base_rows * fanout`` rows, likewise;
* the top level: the whole run in fewer than ``capacity`` buckets; when it fills, neighbouring
  buckets merge and its width doubles.

A bucket holds, per channel (a token column, or a layer), statistics that merge exactly:
:class:`ColumnHistory` keeps the count of values present (NaN = absent, not counted), their sum,
min and max; :class:`CountHistory` keeps two sums (cache hits and lookups). A query over whole
buckets is therefore exact whichever resolution answers it; :meth:`_History.plan` picks bin edges
that one resolution answers.

Memory is fixed by ``capacity`` (per level: channels x 2 x capacity x 8 bytes per statistic),
never by the number of rows. No Textual import and no lock: the run model's lock guards every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: Rows per level-0 bucket. Every level's width is a multiple of it.
BASE_ROWS = 64
#: Width ratio between level 0 and level 1.
FANOUT = 16
#: Buckets per level (the top level covers the whole run in fewer than this many).
CAPACITY = 4096

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Stats = dict[str, F64]
#: ``fine(a, b)``: statistics of rows ``[a, b)`` from the full-resolution rows (``[channels]`` each).
FineFn = Callable[[int, int], Stats]


@dataclass(frozen=True, slots=True)
class _Stat:
    """How one statistic merges: ``op`` (np.add, np.fmin, np.fmax) and its identity value."""

    op: Any  # a numpy ufunc
    identity: float


_ADD = _Stat(np.add, 0.0)
_MIN = _Stat(np.fmin, np.nan)  # fmin/fmax ignore NaN: NaN means "no value"
_MAX = _Stat(np.fmax, np.nan)


class _Level:
    """One resolution: complete buckets of ``width`` rows (bucket id ``b`` covers rows
    ``[b * width, (b + 1) * width)``) and the open (newest, incomplete) bucket.

    A ``whole_run`` level keeps every bucket since row 0 and doubles its width when full; the
    others keep the newest buckets (``capacity`` to ``2 * capacity`` of them).
    """

    def __init__(self, stats: dict[str, _Stat], channels: int, width: int, capacity: int,
                 whole_run: bool) -> None:
        self.stats = stats
        self.width = width
        self.capacity = capacity
        self.whole_run = whole_run
        self.first = 0  # bucket id of storage column 0
        self.n = 0  # complete buckets stored
        # one spare column past the last bucket stays at the identity (reduceat may index it)
        self.alloc = capacity + 1 if whole_run else 2 * capacity + 1
        self.arr: Stats = {k: np.full((channels, self.alloc), s.identity) for k, s in stats.items()}
        self.open: Stats = {k: np.full(channels, s.identity) for k, s in stats.items()}

    @property
    def open_id(self) -> int:
        return self.first + self.n

    @property
    def start(self) -> int:
        """First row held in a complete bucket."""
        return self.first * self.width

    @property
    def end(self) -> int:
        """Row after the last complete bucket (the open bucket's first row)."""
        return (self.first + self.n) * self.width

    def grow_channels(self, channels: int) -> None:
        have = self.open[next(iter(self.stats))].shape[0]
        if channels <= have:
            return
        for k, s in self.stats.items():
            a = np.full((channels, self.alloc), s.identity)
            a[:have] = self.arr[k]
            self.arr[k] = a
            o = np.full(channels, s.identity)
            o[:have] = self.open[k]
            self.open[k] = o

    def merge_open(self, values: Stats) -> None:
        for k, s in self.stats.items():
            s.op(self.open[k], values[k], out=self.open[k])

    def complete_open(self) -> None:
        """Store the open bucket and open the next one."""
        if self.n == self.alloc - 1:
            self._drop_oldest()
        for k, s in self.stats.items():
            self.arr[k][:, self.n] = self.open[k]
            self.open[k].fill(s.identity)
        self.n += 1
        if self.whole_run and self.n == self.capacity:
            self._halve()

    def _drop_oldest(self) -> None:
        keep = self.capacity
        drop = self.n - keep
        for k, s in self.stats.items():
            a = self.arr[k]
            a[:, :keep] = a[:, drop:self.n]
            a[:, keep:] = s.identity
        self.first += drop
        self.n = keep

    def _halve(self) -> None:
        half = self.n // 2
        for k, s in self.stats.items():
            a = self.arr[k]
            a[:, :half] = s.op(a[:, 0:2 * half:2], a[:, 1:2 * half:2])
            a[:, half:] = s.identity
        self.n = half
        self.width *= 2

    def add_blocks(self, blocks: Stats, b0: int, base: int) -> None:
        """Merge the consecutive base buckets ``b0, b0 + 1, ...`` (``base`` rows each; ``[channels,
        k]`` per statistic) in order: the same buckets, values, drops and halvings as one
        :meth:`merge_open` per base bucket (and :meth:`complete_open` at each bucket's end), with
        numpy work per slot of a bucket instead of per base bucket."""
        k = next(iter(blocks.values())).shape[1]
        pos = 0
        while pos < k:
            m = self.width // base  # base buckets per bucket of this level
            slot0 = (b0 + pos) % m
            take = k - pos
            if self.whole_run:  # up to the bucket that fills the level (it halves there)
                take = min(take, (self.capacity - self.n) * m - slot0)
            nb = (slot0 + take + m - 1) // m  # buckets touched; the first is the open one
            acc: Stats = {}
            for key, s in self.stats.items():
                a = np.full((self.open[key].shape[0], nb), s.identity)
                a[:, 0] = self.open[key]
                acc[key] = a
            # slot by slot, so each bucket merges its base buckets in row order, as merge_open does
            for j in (range(m) if take >= m else [(slot0 + i) % m for i in range(take)]):
                q0 = 0 if j >= slot0 else 1
                q1 = (take + slot0 - j + m - 1) // m
                if q1 <= q0:
                    continue
                i0 = pos + q0 * m + j - slot0
                for key, s in self.stats.items():
                    part = acc[key][:, q0:q1]
                    s.op(part, blocks[key][:, i0:i0 + (q1 - q0 - 1) * m + 1:m], out=part)
            done = (slot0 + take) // m
            self._store({key: a[:, :done] for key, a in acc.items()}, done)
            for key, s in self.stats.items():
                if done < nb:
                    self.open[key][:] = acc[key][:, done]
                else:
                    self.open[key].fill(s.identity)
            if self.whole_run and self.n == self.capacity:
                self._halve()
            pos += take

    def _store(self, values: Stats, c: int) -> None:
        """Store ``c`` complete buckets after the last one, dropping the oldest as
        :meth:`complete_open` does one by one (a level that is not whole-run holds ``capacity + 1``
        to ``2 * capacity`` of them once full)."""
        if not c:
            return
        t = self.n + c
        if self.whole_run or t <= self.alloc - 1:
            for key in self.stats:
                self.arr[key][:, self.n:t] = values[key]
            self.n = t
            return
        cap = self.capacity
        keep = cap + (t - 2 * cap - 1) % cap + 1
        for key, s in self.stats.items():
            a = self.arr[key]
            if keep > c:
                old = keep - c
                a[:, :old] = a[:, self.n - old:self.n]
                a[:, old:keep] = values[key]
            else:
                a[:, :keep] = values[key][:, c - keep:]
            a[:, keep:] = s.identity
        self.first += t - keep
        self.n = keep

    def add_at(self, bucket: int, values: Stats) -> None:
        """Merge ``values`` into bucket ``bucket`` when this level holds it (complete or open)."""
        if bucket == self.open_id:
            self.merge_open(values)
            return
        i = bucket - self.first
        if 0 <= i < self.n:
            for k, s in self.stats.items():
                col = self.arr[k][:, i]
                s.op(col, values[k], out=col)

    def reduce(self, k: str, b0: I64, b1: I64) -> F64:
        """Statistic ``k`` over the complete buckets ``[b0[j], b1[j])`` (sorted, non-empty,
        non-overlapping, inside what is held): ``[channels, len(b0)]``."""
        idx = np.empty(2 * len(b0), dtype=np.int64)
        idx[0::2] = b0 - self.first
        idx[1::2] = b1 - self.first
        red = self.stats[k].op.reduceat(self.arr[k][:, : self.n + 1], idx, axis=1)
        out: F64 = red[:, 0::2]
        return out


class _History:
    """The three levels over one set of channels; subclasses say how rows arrive."""

    STATS: dict[str, _Stat] = {}

    def __init__(self, fine: FineFn, fine_start: Callable[[], int], channels: int = 0,
                 capacity: int = CAPACITY, base_rows: int = BASE_ROWS, fanout: int = FANOUT) -> None:
        if capacity < 4 or capacity % 2:
            raise ValueError("capacity must be an even number >= 4")
        self._fine = fine
        self._fine_start = fine_start
        self.channels = channels
        self.base_rows = base_rows
        self.levels = (
            _Level(self.STATS, channels, base_rows * fanout, capacity, whole_run=False),  # coarse
            _Level(self.STATS, channels, base_rows, capacity, whole_run=False),  # fine
        )
        self.top = _Level(self.STATS, channels, base_rows, capacity, whole_run=True)

    def _all_levels(self) -> tuple[_Level, _Level, _Level]:
        """Coarsest first: the whole-run level (its width only grows), level 1, level 0."""
        return (self.top, self.levels[0], self.levels[1])

    def grow_channels(self, channels: int) -> None:
        if channels > self.channels:
            for lv in self._all_levels():
                lv.grow_channels(channels)
            self.channels = channels

    def resolutions(self) -> list[tuple[int, int]]:
        """(rows per bucket, first row held) of every resolution, full rows (width 1) first."""
        out = [(1, self._fine_start())]
        out += [(lv.width, lv.start) for lv in reversed(self.levels)]
        out.append((self.top.width, 0))
        return out

    def plan(self, lo: int, hi: int, n: int, total_rows: int) -> tuple[I64, int]:
        """Bin edges for about ``n`` bins over rows ``[lo, hi)``, all answered exactly by one
        resolution, and that resolution's width: the coarsest one whose buckets are no wider than
        the bins asked for and that holds ``lo`` (else the finest that holds ``lo``). The first edge
        is ``lo`` rounded down to the width, the last ``hi`` rounded up (never past ``total_rows``)."""
        lo = max(0, min(lo, total_rows))
        hi = max(lo, min(hi, total_rows))
        if hi <= lo or n <= 0:
            return np.array([lo], dtype=np.int64), 1
        target = -(-(hi - lo) // n)
        holding = [(w, s) for w, s in self.resolutions() if s <= lo]
        fitting = [w for w, _s in holding if w <= target]
        width = max(fitting) if fitting else min(w for w, _s in holding)
        step = -(-target // width) * width
        edges = np.arange(lo - lo % width, hi, step, dtype=np.int64)
        return np.append(edges, min(total_rows, -(-hi // width) * width)), width

    def query(self, edges: I64) -> Stats:
        """Statistics of consecutive row ranges ``[edges[j], edges[j + 1])``: ``[channels, bins]``
        per statistic. Exact for edges from :meth:`plan`; rows held at no resolution add nothing."""
        nb = max(0, len(edges) - 1)
        out = {k: np.full((self.channels, nb), s.identity) for k, s in self.STATS.items()}
        if nb == 0:
            return out
        fine_start = self._fine_start()
        lo_e, hi_e = edges[:-1], edges[1:]
        done = hi_e <= lo_e
        # bins inside the complete buckets of one level: one reduceat per level
        for lv in self._all_levels():
            w = lv.width
            ok = ~done & (lo_e >= lv.start) & (hi_e <= lv.end) & (lo_e % w == 0) & (hi_e % w == 0)
            if ok.any():
                sel = np.flatnonzero(ok)
                for k in self.STATS:
                    out[k][:, sel] = lv.reduce(k, lo_e[sel] // w, hi_e[sel] // w)
                done |= ok
        # bins held at full resolution: one reduceat over the rows
        fine = ~done & (lo_e >= fine_start)
        if fine.any():
            sel = np.flatnonzero(fine)
            part = self._fine_bins(lo_e[sel], hi_e[sel])
            for k in self.STATS:
                out[k][:, sel] = part[k]
            done |= fine
        # the rest (a bin reaching into the newest rows): piece by piece
        for j in np.flatnonzero(~done):
            part = self._range(int(lo_e[j]), int(hi_e[j]), fine_start)
            for k, s in self.STATS.items():
                col = out[k][:, j]
                s.op(col, part[k], out=col)
        return out

    def _fine_bins(self, lo: I64, hi: I64) -> Stats:
        """Full-resolution statistics per bin; subclasses may vectorise."""
        cols = [self._fine(int(a), int(b)) for a, b in zip(lo, hi)]
        return {k: np.stack([c[k] for c in cols], axis=1) for k in self.STATS}

    def _open_end(self) -> int:
        """Row after the last row merged into the levels' open buckets."""
        raise NotImplementedError

    def _range(self, a: int, b: int, fine_start: int) -> Stats:
        """Rows ``[a, b)``: complete buckets of the coarsest level that holds the start, then the
        open bucket (rows up to :meth:`_open_end`) when the range reaches that far, then full rows."""
        acc = {k: np.full(self.channels, s.identity) for k, s in self.STATS.items()}

        def merge(part: Stats) -> None:
            for k, s in self.STATS.items():
                s.op(acc[k], part[k], out=acc[k])

        open_end = self._open_end()
        pos = a
        while pos < b:
            for lv in self._all_levels():
                w = lv.width
                if pos % w == 0 and lv.start <= pos < lv.end:
                    stop = min(b, lv.end)
                    stop -= stop % w
                    if stop > pos:
                        b0 = np.array([pos // w], dtype=np.int64)
                        b1 = np.array([stop // w], dtype=np.int64)
                        merge({k: lv.reduce(k, b0, b1)[:, 0] for k in self.STATS})
                        pos = stop
                        break
                if pos == lv.end and b >= open_end > pos:
                    merge(lv.open)
                    pos = open_end
                    break
            else:
                if pos >= fine_start:
                    merge(self._fine(pos, b))
                    break
                # held nowhere at this alignment (cannot happen when each level spans more rows
                # than the next coarser level's width): skip to the next base bucket
                pos = min(b, pos - pos % self.base_rows + self.base_rows)
        return acc


class ColumnHistory(_History):
    """Count, sum, min and max of each token column (a channel) per bucket.

    Rows are folded in blocks of ``base_rows`` as they complete (:meth:`fold`); the newest,
    incomplete block is read from the full-resolution rows (``fine``).
    """

    STATS = {"count": _ADD, "sum": _ADD, "min": _MIN, "max": _MAX}

    def __init__(self, fine: FineFn, fine_start: Callable[[], int], channels: int = 0,
                 capacity: int = CAPACITY, base_rows: int = BASE_ROWS, fanout: int = FANOUT,
                 fine_bins: Callable[[I64, I64], Stats] | None = None) -> None:
        super().__init__(fine, fine_start, channels, capacity, base_rows, fanout)
        self.folded = 0  # rows folded into buckets (a multiple of base_rows)
        self._fine_bins_fn = fine_bins

    def _fine_bins(self, lo: I64, hi: I64) -> Stats:
        if self._fine_bins_fn is not None:
            return self._fine_bins_fn(lo, hi)
        return super()._fine_bins(lo, hi)

    def _open_end(self) -> int:
        return self.folded

    def fold(self, block: Stats) -> None:
        """Fold the statistics (``[channels]`` each) of rows ``[folded, folded + base_rows)``."""
        self.folded += self.base_rows
        for lv in self._all_levels():
            lv.merge_open(block)
            if self.folded % lv.width == 0:
                lv.complete_open()

    def fold_blocks(self, blocks: Stats) -> None:
        """Fold ``k`` base blocks at once (``[channels, k]`` each: the statistics of rows
        ``[folded + j * base_rows, folded + (j + 1) * base_rows)``): the same levels as ``k``
        calls of :meth:`fold`."""
        k = next(iter(blocks.values())).shape[1]
        if not k:
            return
        b0 = self.folded // self.base_rows
        for lv in self._all_levels():
            lv.add_blocks(blocks, b0, self.base_rows)
        self.folded += k * self.base_rows


class CountHistory(_History):
    """Cache hits and lookups per layer (a channel) per bucket of rows.

    Counts may arrive for any row in any order (routing after its token, an audit ``exit`` record
    for an older request row): :meth:`add` merges them into every level's bucket that holds the
    row, and buckets complete as the highest row moves past them.
    """

    STATS = {"hits": _ADD, "lookups": _ADD}

    def __init__(self, fine: FineFn, fine_start: Callable[[], int], channels: int = 0,
                 capacity: int = CAPACITY, base_rows: int = BASE_ROWS, fanout: int = FANOUT) -> None:
        super().__init__(fine, fine_start, channels, capacity, base_rows, fanout)
        self.rows = 0  # one past the highest row seen

    def _open_end(self) -> int:
        return self.rows

    def advance(self, rows: int) -> None:
        """Rows ``[0, rows)`` exist: complete every bucket that ends at or before ``rows``."""
        if rows <= self.rows:
            return
        self.rows = rows
        for lv in self._all_levels():
            while lv.end + lv.width <= rows:
                lv.complete_open()

    def add_block(self, row0: int, hits: F64, lookups: F64) -> None:
        """Add per-layer counts of rows ``row0, row0 + 1, ...`` (``[channels, k]`` each)."""
        k = hits.shape[1]
        if k == 0:
            return
        self.advance(row0 + k)
        if k == 1:  # one row (a live token): its counts go into one bucket per level as they are
            one = {"hits": hits[:, 0], "lookups": lookups[:, 0]}
            for lv in self._all_levels():
                lv.add_at(row0 // lv.width, one)
            return
        rows = np.arange(row0, row0 + k, dtype=np.int64)
        for lv in self._all_levels():
            b = rows // lv.width
            cuts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
            hs = np.add.reduceat(hits, cuts, axis=1)
            ls = np.add.reduceat(lookups, cuts, axis=1)
            for j, c in enumerate(cuts):
                lv.add_at(int(b[c]), {"hits": hs[:, j], "lookups": ls[:, j]})


def column_stats(block: F64) -> Stats:
    """Count/sum/min/max per channel of a ``[channels, rows]`` block (NaN = absent)."""
    if block.shape[1] == 0:
        z = np.zeros(block.shape[0])
        return {"count": z, "sum": z.copy(), "min": z + np.nan, "max": z + np.nan}
    # a channel with every value present (the usual one): three passes and no copy; the channels
    # whose sum is NaN hold an absent value and are counted value by value
    total = block.sum(axis=1)
    out = {"count": np.full(block.shape[0], float(block.shape[1])), "sum": total,
           "min": np.minimum.reduce(block, axis=1), "max": np.maximum.reduce(block, axis=1)}
    gaps = np.flatnonzero(np.isnan(total))
    if len(gaps):
        sub = block[gaps]
        present = ~np.isnan(sub)
        out["count"][gaps] = present.sum(axis=1)
        out["sum"][gaps] = np.where(present, sub, 0.0).sum(axis=1)
        out["min"][gaps] = np.fmin.reduce(sub, axis=1)
        out["max"][gaps] = np.fmax.reduce(sub, axis=1)
    return out


def column_stats_bins(block: F64, lo: I64, hi: I64) -> Stats:
    """:func:`column_stats` per bin ``[lo[j], hi[j])`` of the block's columns (sorted, non-empty,
    non-overlapping bins)."""
    idx = np.empty(2 * len(lo), dtype=np.int64)
    idx[0::2], idx[1::2] = lo, hi
    padded = np.concatenate([block, np.full((block.shape[0], 1), np.nan)], axis=1)
    present = ~np.isnan(padded)
    return {
        "count": np.add.reduceat(present.astype(np.float64), idx, axis=1)[:, 0::2],
        "sum": np.add.reduceat(np.where(present, padded, 0.0), idx, axis=1)[:, 0::2],
        "min": np.fmin.reduceat(padded, idx, axis=1)[:, 0::2],
        "max": np.fmax.reduceat(padded, idx, axis=1)[:, 0::2],
    }
