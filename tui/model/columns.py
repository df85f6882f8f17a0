"""Per-row numeric columns: the newest rows at full resolution, every row in a tiered history.

:class:`TokenColumns` holds float64 columns by name (NaN = the source did not send the value).
Rows are appended one at a time (live sources: :meth:`TokenColumns.append`, O(1) amortised, rows
are buffered and moved into numpy in blocks) or many at once (files: :meth:`TokenColumns.extend`).
With a ``window``, only the newest ``window`` rows (at least) stay at full resolution; every row
is also summarised in :class:`~bmoe_top.tui.model.history.ColumnHistory`, so whole-run statistics
and series never need the old rows (docs/architecture.md "Bounded memory").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bmoe_top.tui.model.history import (
    BASE_ROWS,
    CAPACITY,
    F64,
    I64,
    ColumnHistory,
    Stats,
    column_stats,
    column_stats_bins,
)

__all__ = ["ColumnStats", "ColumnsReader", "Series", "TokenColumns"]

#: Ranges whose statistics a column store remembers before it starts again (bounded memory).
STATS_MEMO = 256
#: Base blocks a file's rows are folded into the history in at a time (bounded temporaries).
_FOLD_BLOCKS = 1 << 14


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """One column over a range of rows: ``count`` values present (absent = NaN not counted), their
    ``sum``, ``min`` and ``max`` (NaN when ``count`` is 0)."""

    count: int
    sum: float
    min: float
    max: float

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan

    def __add__(self, other: ColumnStats) -> ColumnStats:
        """The statistics of two disjoint row ranges together."""
        if not other.count:
            return self
        if not self.count:
            return other
        return ColumnStats(self.count + other.count, self.sum + other.sum, min(self.min, other.min),
                           max(self.max, other.max))


@dataclass(frozen=True, slots=True)
class Series:
    """Columns over consecutive row bins: bin ``j`` is rows ``[edges[j], edges[j + 1])``.

    ``count``/``sum``/``min``/``max`` map a column name to ``[bins]`` arrays (count 0 and NaN
    min/max where no row had a value); ``width`` is the rows per bucket of the resolution that
    answered (1 = every row was read).
    """

    edges: I64
    width: int
    count: Mapping[str, F64]
    sum: Mapping[str, F64]
    min: Mapping[str, F64]
    max: Mapping[str, F64]

    @property
    def bins(self) -> int:
        return max(0, len(self.edges) - 1)

    def mean(self, name: str) -> F64:
        c = self.count[name]
        with np.errstate(invalid="ignore", divide="ignore"):
            out: F64 = np.where(c > 0, self.sum[name] / np.where(c > 0, c, 1), np.nan)
        return out


class ColumnsReader(Protocol):
    """What the views may do with token columns (see :class:`TokenColumns`)."""

    @property
    def n(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def names(self) -> list[str]: ...
    def has(self, name: str) -> bool: ...
    def view(self, name: str, lo: int = 0, hi: int | None = None) -> F64: ...
    def last(self, name: str) -> float: ...
    def stats(self, name: str, lo: int = 0, hi: int | None = None) -> ColumnStats: ...
    def series(self, names: Iterable[str], lo: int = 0, hi: int | None = None, bins: int = 100) -> Series: ...


class TokenColumns:
    """Named float64 columns of rows ``0 .. n-1`` (see the module docstring).

    ``window``: keep at least the newest ``window`` rows at full resolution, fold older ones into
    the history only (None: keep every row). Reading methods see every appended row. A column no
    row has carried a value for has no storage (it reads as NaN: absent); a file's columns given
    to :meth:`extend` with ``adopt`` are kept as they are, without a copy.
    """

    def __init__(self, names: Iterable[str] = (), *, window: int | None = None,
                 history_capacity: int = CAPACITY, base_rows: int = BASE_ROWS) -> None:
        if window is not None and window < 2 * base_rows:
            raise ValueError(f"window must be at least {2 * base_rows} rows")
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._cap = 1024 if window is None else min(1024, 2 * window)
        self._cols: list[F64 | None] = []  # per column: rows _start .. _start + _cap, None = never sent
        self._start = 0  # first row held at full resolution (a multiple of base_rows)
        self._stored = 0  # rows in the columns (global rows _start .. _start + _stored - 1)
        self._pending: list[list[float]] = []  # appended rows not yet moved into the columns
        self._n = 0
        self._seen: set[int] = set()
        #: (column, lo) -> (hi, stats of rows [lo, hi)): a repeated or extended query over held
        #: rows reads only the rows added since (a run panel asks for the same ranges every frame).
        self._stats_memo: dict[tuple[int, int], tuple[int, ColumnStats]] = {}
        self._window = window
        self._base = base_rows
        self.history = ColumnHistory(self._fine, lambda: self._start, 0, history_capacity, base_rows,
                                     fine_bins=self._fine_bins)
        for name in names:
            self._add(name)

    # -- shape ---------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Rows appended so far."""
        return self._n

    @property
    def start(self) -> int:
        """First row still held at full resolution (0 unless a window is set)."""
        return self._start

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def has(self, name: str) -> bool:
        """True when at least one row carried a value for ``name``."""
        i = self._index.get(name)
        return i is not None and i in self._seen

    @property
    def nbytes(self) -> int:
        """Bytes of the full-resolution rows held (the columns' storage, pending rows aside)."""
        return sum(c.nbytes for c in self._cols if c is not None)

    def _add(self, name: str) -> int:
        i = len(self._names)
        self._names.append(name)
        self._index[name] = i
        self._cols.append(None)
        for row in self._pending:
            row.append(math.nan)
        self.history.grow_channels(len(self._names))
        return i

    def _storage(self, i: int) -> F64:
        """Column ``i``'s storage, made (NaN: absent) the first time a value arrives for it."""
        col = self._cols[i]
        if col is None:
            col = self._cols[i] = np.full(self._cap, np.nan)
        return col

    # -- writes --------------------------------------------------------------------------------
    def append(self, row: Mapping[str, float | int | None]) -> int:
        """Append one row (names not given stay NaN; a new name adds a column); returns its index."""
        vals = [math.nan] * len(self._names)
        index = self._index
        for name, v in row.items():
            if v is None:
                continue
            i = index.get(name)
            if i is None:
                i = self._add(name)
                vals.append(math.nan)
            vals[i] = v
            if i not in self._seen:
                self._seen.add(i)
        self._pending.append(vals)
        i_row = self._n
        self._n += 1
        if self._n % self._base == 0:
            self._flush()
            if self._window is not None:
                self._fold_ready()
        return i_row

    def extend(self, columns: Mapping[str, Sequence[float] | F64], n: int, adopt: bool = False) -> None:
        """Append ``n`` rows given as whole columns (length ``n`` each; a column not given, or
        all NaN, is absent in these rows). ``adopt``: the rows are the first and the store keeps
        every row, so float64 arrays are kept as they are instead of copied (the caller never
        writes them afterwards)."""
        if n <= 0:
            return
        self._flush()
        for name in columns:
            if name not in self._index:
                self._add(name)
        given = {self._index[name]: np.asarray(arr, dtype=np.float64)[:n] for name, arr in columns.items()}
        sent = {i for i, vals in given.items() if i in self._seen or _any_value(vals)}
        if adopt and self._window is None and self._n == 0 and self._stored == 0:
            for i in sent:
                vals = given[i]
                if vals.ndim != 1 or len(vals) != n:
                    break
            else:
                for i in sent:
                    self._cols[i] = given[i]
                    self._seen.add(i)
                self._cap = self._stored = self._n = n
                return
        self._reserve(n)
        j = self._stored
        for i in sent:
            self._storage(i)[j:j + n] = given[i]
            self._seen.add(i)
        self._stored += n
        self._n += n
        if self._window is not None:
            self._fold_ready()

    def _reserve(self, k: int) -> None:
        """Room for ``k`` more rows. With a window, storage grows to twice the window and then the
        oldest rows (already folded into the history) are dropped down to the window, so rows move
        once per ``window`` appends."""
        need = self._stored + k
        if need <= self._cap:
            return
        w = self._window
        if w is not None and self._cap >= 2 * w:
            keep_from = min(self.history.folded, self._start + need - w)
            keep_from -= keep_from % self._base
            drop = keep_from - self._start
            if drop > 0:
                kept = self._stored - drop
                for col in self._cols:
                    if col is not None:
                        col[:kept] = col[drop:self._stored]
                        col[kept:] = np.nan
                self._stored = kept
                self._start = keep_from
                need -= drop
        if need > self._cap:
            cap = max(self._cap, 16)
            while cap < need:
                cap *= 2
            for i, col in enumerate(self._cols):
                if col is not None:
                    grown = np.full(cap, np.nan)
                    grown[: self._stored] = col[: self._stored]
                    self._cols[i] = grown
            self._cap = cap

    def _flush(self) -> None:
        """Move buffered rows into the numpy columns."""
        p = self._pending
        if not p:
            return
        k = len(p)
        self._reserve(k)
        j = self._stored
        block = np.array(p, dtype=np.float64)  # [k, columns]
        for i in self._seen:
            self._storage(i)[j:j + k] = block[:, i]
        self._stored += k
        p.clear()

    def _fold_ready(self) -> None:
        """Fold every complete base block of held rows into the history: one block at a time as
        live rows arrive, every block at once after a file's rows (a store that keeps every row
        folds when the history is first read)."""
        h = self.history
        self._flush()
        a = h.folded
        b = self._start + self._stored
        b -= (b - a) % self._base
        if b - a == self._base:
            h.fold(column_stats(self._held(a, b)))
            return
        slab = self._base * _FOLD_BLOCKS
        for lo in range(a, b, slab):  # in slabs: the blocks' statistics stay small beside the rows
            h.fold_blocks(self._block_stats(lo, min(b, lo + slab)))

    def _held(self, a: int, b: int) -> F64:
        """Rows ``[a, b)`` (held) of every column as a ``[channels, rows]`` block (NaN rows for
        a column never sent)."""
        out = np.full((len(self._cols), max(0, b - a)), np.nan)
        for i, col in enumerate(self._cols):
            if col is not None:
                out[i] = col[a - self._start: b - self._start]
        return out

    def _block_stats(self, a: int, b: int) -> Stats:
        """:func:`~bmoe_top.tui.model.history.column_stats` of each base block of rows ``[a, b)``
        (held; ``b - a`` a multiple of ``base_rows``): ``[channels, blocks]``, column by column."""
        k = (b - a) // self._base
        ch = len(self._cols)
        out: Stats = {key: np.empty((ch, k)) for key in ("count", "sum", "min", "max")}
        for i, col in enumerate(self._cols):
            if col is None:  # never sent: no value in any block
                out["count"][i] = out["sum"][i] = 0.0
                out["min"][i] = out["max"][i] = np.nan
                continue
            st = column_stats(col[a - self._start: b - self._start].reshape(k, self._base))
            for key in out:
                out[key][i] = st[key]
        return out

    # -- the history's view of full rows --------------------------------------------------------
    def _fine(self, a: int, b: int) -> Stats:
        self._flush()
        a = max(a, self._start)
        b = max(a, min(b, self._start + self._stored))
        return column_stats(self._held(a, b))

    def _fine_bins(self, lo: I64, hi: I64) -> Stats:
        self._flush()
        end = self._start + self._stored
        lo = np.clip(lo, self._start, end)
        hi = np.maximum(lo, np.clip(hi, self._start, end))
        a = int(lo.min()) if len(lo) else self._start
        b = int(hi.max()) if len(hi) else a
        return column_stats_bins(self._held(a, b), lo - a, hi - a)

    # -- reads ---------------------------------------------------------------------------------
    def view(self, name: str, lo: int = 0, hi: int | None = None) -> F64:
        """Values of rows ``[lo, hi)`` (default all), read-only. NaN for a column never sent, and
        for rows no longer held at full resolution (see :meth:`series` for those)."""
        self._flush()
        hi = self._n if hi is None else max(0, min(hi, self._n))
        lo = max(0, min(lo, hi))
        i = self._index.get(name)
        col = None if i is None else self._cols[i]
        if col is None:
            return np.full(hi - lo, np.nan)
        if lo >= self._start:
            v = col[lo - self._start: hi - self._start].view()
            v.flags.writeable = False
            return v
        out = np.full(hi - lo, np.nan)
        a = max(lo, self._start)
        if hi > a:
            out[a - lo:] = col[a - self._start: hi - self._start]
        return out

    def last(self, name: str) -> float:
        """Value of the newest row (NaN when absent or no rows)."""
        i = self._index.get(name)
        if i is None or not self._n:
            return math.nan
        if self._pending:
            return float(self._pending[-1][i])
        col = self._cols[i]
        return math.nan if col is None else float(col[self._stored - 1])

    def stats(self, name: str, lo: int = 0, hi: int | None = None) -> ColumnStats:
        """Exact count/sum/min/max of ``name`` over rows ``[lo, hi)`` (default the whole run).
        ``lo`` and ``hi`` are rounded to the history's buckets where the rows are no longer held."""
        hi = self._n if hi is None else min(hi, self._n)
        i = self._index.get(name)
        if i is None or hi <= lo:
            return ColumnStats(0, 0.0, math.nan, math.nan)
        self._flush()
        lo = max(0, lo)
        if lo >= self._start:  # every row is held: straight from them
            memo = self._stats_memo.get((i, lo))
            if memo is not None and lo <= memo[0] <= hi:
                done, st = memo
            else:
                done, st = lo, ColumnStats(0, 0.0, math.nan, math.nan)
            col = self._cols[i]
            if done < hi and col is not None:
                q = column_stats(col[None, done - self._start: hi - self._start])  # the one column asked for
                st = st + ColumnStats(int(q["count"][0]), float(q["sum"][0]), float(q["min"][0]), float(q["max"][0]))
                if len(self._stats_memo) >= STATS_MEMO:
                    self._stats_memo.clear()
                self._stats_memo[(i, lo)] = (hi, st)
            return st
        self._fold_ready()
        edges, _w = self.history.plan(lo, hi, 1, self._n)
        q = self.history.query(np.array([edges[0], edges[-1]], dtype=np.int64))
        return ColumnStats(int(q["count"][i, 0]), float(q["sum"][i, 0]), float(q["min"][i, 0]),
                           float(q["max"][i, 0]))

    def series(self, names: Iterable[str], lo: int = 0, hi: int | None = None, bins: int = 100) -> Series:
        """Count/sum/min/max of each column in about ``bins`` bins over rows ``[lo, hi)`` (default
        the whole run), from the finest resolution that still holds ``lo`` (see
        :meth:`~bmoe_top.tui.model.history.ColumnHistory.plan`): exact per bin."""
        self._fold_ready()
        hi = self._n if hi is None else min(hi, self._n)
        edges, width = self.history.plan(lo, hi, bins, self._n)
        q = self.history.query(edges)
        nb = max(0, len(edges) - 1)
        out: dict[str, dict[str, F64]] = {"count": {}, "sum": {}, "min": {}, "max": {}}
        for name in names:
            i = self._index.get(name)
            for k in out:
                if i is None:
                    out[k][name] = np.zeros(nb) if k in ("count", "sum") else np.full(nb, np.nan)
                else:
                    out[k][name] = q[k][i].copy()
        return Series(edges, width, out["count"], out["sum"], out["min"], out["max"])


def _any_value(vals: F64) -> bool:
    """At least one value is present (not NaN); the first one usually says so."""
    return bool(len(vals)) and (not math.isnan(vals[0]) or not np.isnan(vals).all())
