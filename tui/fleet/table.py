"""The instances table: one row per scrape target from the columns' range-query answers.

A row is a (job, instance), and more labels when two targets share those: several Prometheus
servers writing into one store with their ``external_labels`` (:func:`grouping`), so that two
instances of one name under two Prometheus servers stay two rows.

Pure: :func:`build_table` takes the answers (:class:`~bmoe_top.tui.sources.prometheus.RangeResult`
per column, or the :class:`~bmoe_top.tui.sources.prometheus.PromError` its query raised) and the
time grid they were asked on, and returns a :class:`FleetTable`. :class:`FleetState` keeps the
last good table and the newest error between refreshes, for a screen.

A row's cells are typed (:class:`Cell`: value, :class:`CellState`, age). The value of a row is
read at its reference point: the newest grid point when the instance is up, else the last one
at which ``up`` was 1 (the last good values, with their age). Absent is never 0:

* ``ok``: a number at the reference point (0 is a real zero, e.g. tok/s of an idle instance);
* ``undefined``: Prometheus computed NaN/Inf there (a ratio with nothing to divide by: no
  lookups, no generated token in the rate window);
* ``stale``: a value older than the table's time, with its age: every number of a down or gone
  row (read at its last up point), or, when the series has no point at the reference point but
  had one earlier in the window, the newest earlier value;
* ``not_exported``: the instance was up in the window and exported series in it, but not the
  ones this column reads (a stock llama-server has no ``llamacpp:moe_cache_*``; a runtime without
  bmoe's time sums has no split);
* ``no_data``: no value in the window although the column may be exported (never up in the
  window; just started: a rate needs two samples in its range; or which series it exports is
  not known);
* ``error``: that column's query failed (the table's ``errors`` says how).

Sparklines: ``row.spark[key]`` is a float64 array on ``table.t`` with NaN where the series had
no value (absent or undefined). The worst-instance ranking orders rows: down (or gone) first,
then the highest flash wait share (flash wait / wall, the ``stall_share`` column), then the lowest
hit %; ``row.flags`` marks the down rows and the instances with the highest flash wait share and
the lowest hit %. Across refreshes it ranks with hysteresis (:class:`RankMemory`): a row moves
only on a real change.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from bmoe_top.tui.fleet.queries import BY, COLUMN_BY_KEY, COLUMNS, DERIVED, exported
from bmoe_top.tui.sources.prometheus import PromAlert, PromError, QueryResult, RangeResult, RangeSeries

__all__ = [
    "CellState",
    "Cell",
    "InstanceState",
    "InstanceRow",
    "FleetTable",
    "FleetState",
    "Grid",
    "align",
    "build_table",
    "rank_rows",
    "RankMemory",
    "RANK_BAND",
    "sort_rows",
    "search_cells",
    "column_keys",
    "names_by_key",
    "grouping",
    "Key",
    "Now",
    "missing_keys",
    "NowCells",
    "with_detail",
]


class CellState(enum.StrEnum):
    OK = "ok"
    UNDEFINED = "undefined"
    STALE = "stale"
    NOT_EXPORTED = "not_exported"
    NO_DATA = "no_data"
    ERROR = "error"


class Cell(NamedTuple):
    """``value`` (``None`` unless ``ok`` or ``stale``), ``state``, ``age_s`` (seconds from the
    value's point to the table's time; ``None`` when there is no point). A named tuple: a large
    fleet's table holds one per instance and column."""

    value: float | None
    state: CellState
    age_s: float | None = None


class InstanceState(enum.StrEnum):
    UP = "up"          # its newest scrape succeeded (up == 1)
    DOWN = "down"      # its newest scrape failed (up == 0)
    GONE = "gone"      # it was a target in the window but is not now (its up series went stale)
    UNKNOWN = "unknown"  # series without an up series (not scraped by this Prometheus: federated, pushed)


#: A row's identity: the values of the table's grouping labels (job, instance, then the others).
Key = tuple[str, ...]


@dataclass(slots=True)
class InstanceRow:
    """One instance: ``job``, ``instance``, ``state``, ``last_up_age_s`` (seconds since the last
    grid point at which it was up: 0 when up, ``None`` when never up in the window),
    ``restarts`` in the window (``None`` when nothing says), ``cells`` (every column key and
    every derived key -> :class:`Cell`), ``spark`` (the same keys plus ``up`` -> array on the
    table's ``t``), ``rank`` (1 = worst), ``flags`` (``down``, ``gone``, ``highest_stall``,
    ``lowest_hit``), ``labels`` (the other grouping labels, e.g. ``{"prometheus": "east"}``:
    empty unless two targets share a job and an instance)."""

    job: str
    instance: str
    state: InstanceState
    last_up_age_s: float | None
    restarts: int | None
    cells: Mapping[str, Cell]
    spark: dict[str, np.ndarray]
    rank: int = 0
    flags: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    key: Key = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # made once: sorting, filtering and the screen's index read it for every row at every key
        self.key = (self.job, self.instance, *self.labels.values()) if self.labels else (self.job, self.instance)

    def value(self, key: str) -> float | None:
        return self.cells[key].value


@dataclass(frozen=True, slots=True)
class Grid:
    """The evaluation times of a range query: ``start + k * step`` for ``k < n``; ``end`` is the
    newest (the table's time)."""

    start: float
    step: float
    n: int

    @property
    def end(self) -> float:
        return self.start + (self.n - 1) * self.step

    @property
    def t(self) -> np.ndarray:
        return self.start + self.step * np.arange(self.n, dtype=np.float64)

    @classmethod
    def ending_at(cls, end: float, window_s: float, step: float) -> Grid:
        """The grid of ``window_s`` seconds (at least two points) ending at ``end``."""
        n = max(2, int(math.floor(window_s / step + 1e-9)) + 1)
        return cls(start=end - (n - 1) * step, step=step, n=n)


@dataclass(slots=True)
class FleetTable:
    """The instances table at time ``at`` (Unix s). ``rows`` in rank order (worst first);
    ``t`` the sparklines' time grid; ``window_s``, ``step_s``, ``rate_interval_s`` (the
    ``rate()`` range), ``scrape_interval_s``; ``queries`` (key -> PromQL, ``up`` and
    ``restarts`` included); ``errors`` (column key -> the :class:`PromError` of its query);
    ``warnings`` (Prometheus' own); ``n_queries`` (requests this refresh made); ``by`` (the
    grouping labels: :func:`grouping`); ``detail`` (the keys of the rows read in detail, with
    sparklines: every row of a fleet up to ``FleetSession.detail_rows``); ``alerts`` (the pending
    and firing alerts of Prometheus's rules on the table's rows, firing first: ``/api/v1/alerts``,
    read for a table of now only) or ``alerts_error`` (why they could not be read)."""

    selector: str
    at: float
    window_s: float
    step_s: float
    rate_interval_s: float
    scrape_interval_s: float
    t: np.ndarray
    rows: list[InstanceRow]
    queries: dict[str, str]
    errors: dict[str, PromError] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    n_queries: int = 0
    by: tuple[str, ...] = BY
    detail: frozenset[Key] = frozenset()
    alerts: list[PromAlert] = field(default_factory=list)
    alerts_error: PromError | None = None

    def row(self, instance: str, job: str | None = None, labels: Mapping[str, str] | None = None
            ) -> InstanceRow | None:
        """The first row (in rank order) of ``instance`` (and ``job``, and ``labels``)."""
        for r in self.rows:
            if r.instance == instance and (job is None or r.job == job) and \
                    (labels is None or all(r.labels.get(k) == v for k, v in labels.items())):
                return r
        return None

    @property
    def worst(self) -> InstanceRow | None:
        """The first-ranked row when something is wrong with it (a flag), else ``None``."""
        return self.rows[0] if self.rows and self.rows[0].flags else None


def column_keys() -> list[str]:
    """Every cell key in display order: the queried columns, then the derived ones."""
    return list(_CELL_KEYS)


_CELL_KEYS = tuple([c.key for c in COLUMNS] + list(DERIVED))


def _key(labels: Mapping[str, str], by: tuple[str, ...] = BY) -> Key:
    if by == BY:
        return (labels.get("job", ""), labels.get("instance", ""))
    return tuple([labels.get(b, "") for b in by])


def grouping(label_sets: Iterable[Mapping[str, str]]) -> tuple[str, ...]:
    """The grouping labels of a fleet's rows, from its targets' ``up`` label sets: ``job``,
    ``instance``, then (sorted) every label whose value differs between two targets of one job
    and instance (the ``external_labels`` of two Prometheus servers writing into one store)."""
    first: dict[tuple[str, str], Mapping[str, str]] = {}
    extra: set[str] = set()
    for labels in label_sets:
        k = (labels.get("job", ""), labels.get("instance", ""))
        seen = first.setdefault(k, labels)
        if seen is not labels:
            extra |= {n for n in set(seen) | set(labels) if seen.get(n) != labels.get(n)}
    return BY + tuple(sorted(extra - {"__name__", *BY}))


def align(series: RangeSeries, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """``series`` on ``grid``: (values with NaN where it has no point, mask of the points it has).
    Points off the grid (another step) are dropped."""
    vals = np.full(grid.n, np.nan)
    have = np.zeros(grid.n, dtype=bool)
    if series.t.size:
        with np.errstate(invalid="ignore", over="ignore"):
            pos = (series.t - grid.start) / grid.step
        near = np.isfinite(pos) & (pos > -1.0) & (pos < grid.n)  # a time off any grid (1e300 s) is no index
        t, v = series.t[near], series.v[near]
        idx = np.rint(pos[near]).astype(np.int64)
        ok = (idx >= 0) & (idx < grid.n) & (np.abs(t - (grid.start + idx * grid.step)) < grid.step * 0.01)
        vals[idx[ok]] = v[ok]
        have[idx[ok]] = True
    return vals, have


def _by_key(result: RangeResult, grid: Grid, by: tuple[str, ...]) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
    out: dict[Key, tuple[np.ndarray, np.ndarray]] = {}
    for s in result.series:
        vals, have = align(s, grid)
        k = _key(s.labels, by)
        if k in out:  # two label sets folded onto one key: keep the first point at each step
            pv, ph = out[k]
            take = have & ~ph
            pv[take] = vals[take]
            ph |= have
        else:
            out[k] = (vals, have)
    return out


def _cell(vals: np.ndarray, have: np.ndarray, ref: int, t: np.ndarray, at: float, old: bool = False) -> Cell:
    """The cell read at grid point ``ref``; ``old``: ``ref`` is not the newest point (a down row's
    last good values): a number there is ``stale``, with its age."""
    if have[ref]:
        v = float(vals[ref])
        if math.isfinite(v):
            return Cell(v, CellState.STALE if old else CellState.OK, at - float(t[ref]))
        return Cell(None, CellState.UNDEFINED, at - float(t[ref]))
    earlier = np.flatnonzero(have[:ref])
    if earlier.size:
        j = int(earlier[-1])
        v = float(vals[j])
        return Cell(v if math.isfinite(v) else None, CellState.STALE, at - float(t[j]))
    return Cell(None, CellState.NOT_EXPORTED)


def _ratio_cell(num: Cell, den: Cell) -> Cell:
    if num.state is CellState.ERROR or den.state is CellState.ERROR:
        return Cell(None, CellState.ERROR)
    if num.state in (CellState.NOT_EXPORTED, CellState.NO_DATA):
        return Cell(None, num.state)
    if den.state in (CellState.NOT_EXPORTED, CellState.NO_DATA):
        return Cell(None, den.state)
    if num.value is None or den.value is None or den.value <= 0:
        state = CellState.STALE if CellState.STALE in (num.state, den.state) else CellState.UNDEFINED
        return Cell(None, state, num.age_s)
    state = CellState.STALE if CellState.STALE in (num.state, den.state) else CellState.OK
    return Cell(100.0 * num.value / den.value, state, max(num.age_s or 0.0, den.age_s or 0.0))


def names_by_key(res: QueryResult | PromError | None, by: tuple[str, ...] = BY) -> dict[Key, set[str]]:
    """The series names each instance exports, from the ``exported_query`` answer."""
    out: dict[Key, set[str]] = {}
    if isinstance(res, QueryResult):
        for s in res.samples:
            out.setdefault(_key(s.labels, by), set()).add(s.labels.get("__name__", ""))
    return out


#: The largest count a float holds exactly: a restart count above it, below 0 or not whole is no count.
_EXACT = float(2 ** 53)


def _restarts(res: QueryResult | PromError | None, by: tuple[str, ...]) -> dict[Key, int]:
    if not isinstance(res, QueryResult):
        return {}
    return {_key(s.labels, by): int(s.v) for s in res.samples if 0.0 <= s.v <= _EXACT and s.v.is_integer()}


@dataclass(frozen=True, slots=True)
class Now:
    """Instant answers at the table's time for the whole fleet (a fleet larger than the rows read
    in detail), each by key (``PrometheusClient.query_keyed``): ``up`` (the ``up`` query: up or down now; a target
    without a sample now is gone), ``columns`` (key -> the column's values now, or its error),
    ``targets`` (every target in the window, gone ones included), ``warnings``."""

    up: dict[Key, float] | PromError
    columns: Mapping[str, dict[Key, float] | PromError]
    targets: Collection[Key] = ()
    warnings: list[str] = field(default_factory=list)


def missing_keys(now: Now) -> set[Key]:
    """The targets (keys) without a value now in some column whose query answered."""
    out: set[Key] = set()
    for got in now.columns.values():
        if not isinstance(got, PromError) and len(got) < len(now.targets):
            out |= {k for k in now.targets if k not in got}
    return out


def _range_row(key: Key, up_by: Mapping[Key, tuple[np.ndarray, np.ndarray]],
               col_by: Mapping[str, Mapping[Key, tuple[np.ndarray, np.ndarray]]], errors: Mapping[str, PromError],
               names: Mapping[Key, set[str]], grid: Grid, at: float) -> tuple[InstanceState, float | None,
                                                                                dict[str, Cell], dict[str, np.ndarray]]:
    """A row read in detail: its state, last-up age, cells and sparklines from the range answers."""
    t = grid.t
    last = grid.n - 1
    spark: dict[str, np.ndarray] = {}
    ref: int | None
    if key in up_by:
        uv, uh = up_by[key]
        spark["up"] = uv
        ups = np.flatnonzero(uh & (uv == 1))
        ref = int(ups[-1]) if ups.size else None
        if uh[last] and uv[last] == 1:
            state = InstanceState.UP
        elif uh[last]:
            state = InstanceState.DOWN
        else:
            state = InstanceState.GONE
    else:
        spark["up"] = np.full(grid.n, np.nan)
        state = InstanceState.UNKNOWN
        ref = last
    cells: dict[str, Cell] = {}
    for c in COLUMNS:
        if c.key in errors or c.key not in col_by:
            cells[c.key] = Cell(None, CellState.ERROR)
            spark[c.key] = np.full(grid.n, np.nan)
            continue
        got = col_by[c.key].get(key)
        if got is None:
            known = names.get(key)
            missing = ref is not None and known is not None and not exported(c, known)
            cells[c.key] = Cell(None, CellState.NOT_EXPORTED if missing else CellState.NO_DATA)
            spark[c.key] = np.full(grid.n, np.nan)
            continue
        vals, have = got
        spark[c.key] = np.where(np.isfinite(vals), vals, np.nan)
        cells[c.key] = Cell(None, CellState.NO_DATA) if ref is None else _cell(vals, have, ref, t, at, ref != last)
    cells["stall_share"] = _ratio_cell(cells["flash_ms"], cells["wall_ms"])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        share = 100.0 * spark["flash_ms"] / spark["wall_ms"]
    spark["stall_share"] = np.where(np.isfinite(share) & (spark["wall_ms"] > 0), share, np.nan)
    return state, None if ref is None else at - float(t[ref]), cells, spark


_UNDEF, _STALE_UNKNOWN = Cell(None, CellState.UNDEFINED), Cell(None, CellState.STALE)
_ERROR, _NOT_EXPORTED, _NO_DATA = Cell(None, CellState.ERROR), Cell(None, CellState.NOT_EXPORTED), \
    Cell(None, CellState.NO_DATA)


class NowCells(Mapping[str, Cell]):
    """A row's cells read from the instant answers, each made when it is read (a large fleet's
    rows are mostly never drawn: 5,000 rows x 15 cells would otherwise be 75,000 objects each
    refresh for the garbage collector to walk). ``cols``: each column's key -> its values now
    (``None`` when its query failed), shared by the table's rows; ``up``: whether the row is up
    (else its numbers are stale, of an unknown age); ``known``: the series it exports (``None``:
    not asked)."""

    __slots__ = ("_key", "_cols", "_up", "_known")

    def __init__(self, key: Key, cols: Mapping[str, Mapping[Key, float] | None], up: bool,
                 known: set[str] | None) -> None:
        self._key, self._cols, self._up, self._known = key, cols, up, known

    def __getitem__(self, ck: str) -> Cell:
        if ck == "stall_share":
            return _ratio_cell(self["flash_ms"], self["wall_ms"])
        got = self._cols[ck]  # KeyError for a key that is no column
        if got is None:
            return _ERROR
        v = got.get(self._key)
        up = self._up
        if v is None:
            known = self._known
            return _NOT_EXPORTED if up and known is not None and not exported(COLUMN_BY_KEY[ck], known) \
                else _NO_DATA
        if v - v != 0.0:  # NaN or infinite: nothing to divide by
            return _UNDEF if up else _STALE_UNKNOWN
        return Cell(v, CellState.OK, 0.0) if up else Cell(v, CellState.STALE)

    def number(self, ck: str) -> float | None:
        """The number of cell ``ck`` (what ``ok`` and ``stale`` cells hold), else ``None``:
        what sorting and ranking read, without making the cell."""
        if ck == "stall_share":
            c = self[ck]
            return c.value
        got = self._cols.get(ck)
        v = None if got is None else got.get(self._key)
        return v if v is not None and v - v == 0.0 else None

    def __iter__(self) -> Iterator[str]:
        return iter(_CELL_KEYS)

    def __len__(self) -> int:
        return len(_CELL_KEYS)


def _now_state(key: Key, up_now: Mapping[Key, float] | None) -> InstanceState:
    if up_now is None:
        return InstanceState.UNKNOWN
    u = up_now.get(key)
    return InstanceState.GONE if u is None else InstanceState.UP if u == 1 else InstanceState.DOWN


def _range_answers(up: RangeResult | PromError | None, columns: Mapping[str, RangeResult | PromError], grid: Grid,
                   by: tuple[str, ...]) -> tuple[dict[Key, tuple[np.ndarray, np.ndarray]],
                                                 dict[str, dict[Key, tuple[np.ndarray, np.ndarray]]],
                                                 dict[str, PromError], list[str]]:
    """The range answers per key on the grid: ``up``, each column, the errors, the warnings."""
    up_by = _by_key(up, grid, by) if isinstance(up, RangeResult) else {}
    col_by: dict[str, dict[Key, tuple[np.ndarray, np.ndarray]]] = {}
    errors: dict[str, PromError] = {"up": up} if isinstance(up, PromError) else {}
    warnings = list(up.warnings) if isinstance(up, RangeResult) else []
    for c in COLUMNS:
        res = columns.get(c.key)
        if isinstance(res, RangeResult):
            col_by[c.key] = _by_key(res, grid, by)
            warnings += [w for w in res.warnings if w not in warnings]
        elif isinstance(res, PromError):
            errors[c.key] = res
    return up_by, col_by, errors, warnings


def build_table(*, selector: str, at: float, window_s: float, grid: Grid, rate_interval_s: float,
                scrape_interval_s: float, up: RangeResult | None = None,
                columns: Mapping[str, RangeResult | PromError] | None = None,
                restarts: QueryResult | PromError | None = None, exported_now: QueryResult | PromError | None = None,
                queries: Mapping[str, str] | None = None, n_queries: int = 0, memory: RankMemory | None = None,
                by: tuple[str, ...] = BY, now: Now | None = None) -> FleetTable:
    """The table from the answers asked on ``grid`` (its ``end`` is ``at``): ``up`` (the
    ``up`` query), ``columns`` (key -> answer or error; a key of ``COLUMNS`` missing here is an
    error too), ``restarts`` (an instant query: per-instance counts), ``exported_now`` (the
    ``exported_query`` answer: without it no cell says ``not_exported``); ``memory``: the
    previous refreshes' ranking, for worst first with hysteresis (:func:`rank_rows`); ``by``: the
    grouping labels the queries used (:func:`grouping`).

    With range answers (``up``, ``columns``) of the whole fleet every row is read in detail: its
    sparklines, a stale value's age, a down row's last good values. With ``now`` instead (a
    large fleet) every row is read from the instant answers: its values now, no sparklines
    (``spark`` empty), until :func:`with_detail` reads some in detail."""
    errors: dict[str, PromError] = {}
    if isinstance(restarts, PromError):
        errors["restarts"] = restarts
    if isinstance(exported_now, PromError):
        errors["exported"] = exported_now
    names = names_by_key(exported_now, by)
    n_restarts = _restarts(restarts, by)
    rows = []
    if now is None:
        if up is None:
            raise ValueError("build_table needs the range answers or the instant ones (now)")
        up_by, col_by, range_errors, warnings = _range_answers(up, columns or {}, grid, by)
        errors.update(range_errors)
        keys: set[Key] = set(up_by)
        for per_key in col_by.values():
            keys |= set(per_key)
        for key in keys:
            state, last_up, cells, spark = _range_row(key, up_by, col_by, errors, names, grid, at)
            rows.append(InstanceRow(job=key[0], instance=key[1], state=state, last_up_age_s=last_up,
                                    restarts=n_restarts.get(key), cells=cells, spark=spark,
                                    labels=dict(zip(by[2:], key[2:]))))
    else:
        warnings = list(now.warnings)
        up_now = None if isinstance(now.up, PromError) else now.up
        if isinstance(now.up, PromError):
            errors["up"] = now.up
        cols_now: dict[str, dict[Key, float]] = {}
        for c in COLUMNS:
            res_now = now.columns.get(c.key)
            if isinstance(res_now, PromError):
                errors[c.key] = res_now
            elif res_now is not None:
                cols_now[c.key] = res_now
        keys = set(now.targets) | set(up_now or ())
        for per_now in cols_now.values():
            keys |= set(per_now)
        cols: dict[str, Mapping[Key, float] | None] = {
            c.key: None if c.key in errors else cols_now.get(c.key) for c in COLUMNS}
        no_labels: dict[str, str] = {}
        for key in keys:
            state = _now_state(key, up_now)
            is_up = state is InstanceState.UP or state is InstanceState.UNKNOWN
            rows.append(InstanceRow(job=key[0], instance=key[1], state=state,
                                    last_up_age_s=0.0 if state is InstanceState.UP else None,
                                    restarts=n_restarts.get(key), cells=NowCells(key, cols, is_up, names.get(key)),
                                    spark={}, labels=dict(zip(by[2:], key[2:])) if len(by) > 2 else no_labels))
    rank_rows(rows, memory)
    return FleetTable(selector=selector, at=at, window_s=window_s, step_s=grid.step, rate_interval_s=rate_interval_s,
                      scrape_interval_s=scrape_interval_s, t=grid.t, rows=rows, queries=dict(queries or {}),
                      errors=errors, warnings=warnings, n_queries=n_queries, by=by,
                      detail=frozenset(keys) if now is None else frozenset())


def with_detail(table: FleetTable, grid: Grid, *, up: RangeResult | PromError,
                columns: Mapping[str, RangeResult | PromError], detail: Collection[Key],
                exported_now: QueryResult | PromError | None = None, memory: RankMemory | None = None,
                n_queries: int | None = None) -> FleetTable:
    """``table`` (read from instant answers) with the rows of ``detail`` read again from range
    answers asked for those rows on its ``grid``: their sparklines, ages and a down row's last
    good values. Ranked again (with ``memory``); errors of the range queries join the table's."""
    up_by, col_by, errors, warnings = _range_answers(up, columns, grid, table.by)
    names = names_by_key(exported_now, table.by)
    keep = set(detail) & set(up_by)
    rows = []
    for r in table.rows:
        if r.key in keep:
            state, last_up, cells, spark = _range_row(r.key, up_by, col_by, errors, names, grid, table.at)
            r = InstanceRow(job=r.job, instance=r.instance, state=state, last_up_age_s=last_up, restarts=r.restarts,
                            cells=cells, spark=spark, labels=r.labels)
        rows.append(r)
    rank_rows(rows, memory)
    return dataclasses.replace(table, rows=rows, errors={**table.errors, **errors},
                               warnings=table.warnings + [w for w in warnings if w not in table.warnings],
                               n_queries=table.n_queries if n_queries is None else n_queries,
                               detail=frozenset(keep))


def _num(row: InstanceRow, key: str) -> float | None:
    """The number of a cell (``ok`` or ``stale``), else ``None``."""
    cells = row.cells
    if type(cells) is NowCells:
        return cells.number(key)
    c = cells.get(key)
    return c.value if c is not None and (c.state is CellState.OK or c.state is CellState.STALE) else None


#: A ranked value moves a row only when it changed by more than this (percentage points) since the
#: value the row was last ranked by: a 1 s scrape's noise must not reorder the table.
RANK_BAND = {"stall_share": 5.0, "hit_pct": 5.0}


_BANDS = tuple(RANK_BAND.items())


class RankMemory:
    """What each row was last ranked by, so that worst-first ranks with hysteresis: a row's flash
    wait share and hit % count as unchanged while they stay within :data:`RANK_BAND` of the values it
    was last ranked by, and rows that rank equal keep their previous order. A change of state
    (up, down, gone) or of a value past the band moves the row at once. Holds only the rows of the
    last ranking (bounded by the fleet)."""

    def __init__(self) -> None:
        self.values: dict[Key, dict[str, float | None]] = {}
        self.order: dict[Key, int] = {}

    def copy(self) -> RankMemory:
        """A copy to rank with that leaves this memory as it is."""
        out = RankMemory()
        out.values, out.order = dict(self.values), dict(self.order)
        return out

    def ranked(self, row: InstanceRow, key: Key | None = None) -> dict[str, float | None]:
        """The values ``row`` (its ``key``) ranks by now (the remembered ones while within the
        band)."""
        old = self.values.get(row.key if key is None else key)
        out: dict[str, float | None] = {}
        for name, band in _BANDS:
            v = _num(row, name)
            p = None if old is None else old.get(name)
            out[name] = p if v is not None and p is not None and abs(v - p) <= band else v
        return out


def rank_rows(rows: list[InstanceRow], memory: RankMemory | None = None) -> None:
    """Order ``rows`` in place worst first and set ``rank`` and ``flags``: down/gone first, then
    the highest flash wait share, then the lowest hit %; ties by the previous order (with ``memory``),
    then by job and instance. With ``memory`` the values rank with hysteresis
    (:class:`RankMemory`), and ``memory`` is updated to this ranking."""
    mem = memory if memory is not None else RankMemory()
    keyed = [(r.key, r) for r in rows]
    by_key = {k: mem.ranked(r, k) for k, r in keyed}
    shares = [s for v in by_key.values() if (s := v["stall_share"]) is not None]
    hits = [h for v in by_key.values() if (h := v["hit_pct"]) is not None]
    top_share = max(shares) if len(shares) > 1 else None
    low_hit = min(hits) if len(hits) > 1 else None
    last = len(mem.order)
    bad = (InstanceState.DOWN, InstanceState.GONE)

    def sort_key(item: tuple[Key, InstanceRow]) -> tuple[int, float, float, int, Key]:
        k, r = item
        v = by_key[k]
        s, h = v["stall_share"], v["hit_pct"]
        return (0 if r.state in bad else 1, -(s if s is not None else -1.0), h if h is not None else 101.0,
                mem.order.get(k, last), k)

    keyed.sort(key=sort_key)
    rows[:] = [r for _, r in keyed]
    for i, (k, r) in enumerate(keyed, 1):
        r.rank = i
        flags = []
        if r.state is InstanceState.DOWN:
            flags.append("down")
        elif r.state is InstanceState.GONE:
            flags.append("gone")
        v = by_key[k]
        if top_share is not None and v["stall_share"] == top_share:
            flags.append("highest_stall")
        if low_hit is not None and v["hit_pct"] == low_hit:
            flags.append("lowest_hit")
        r.flags = tuple(flags)
    mem.values = by_key
    mem.order = {k: i for i, (k, _r) in enumerate(keyed)}


def sort_rows(rows: Iterable[InstanceRow], key: str, descending: bool = False) -> list[InstanceRow]:
    """Rows sorted by a cell key (or ``instance``, ``job``, ``state``, ``rank``, ``restarts``);
    rows without a number always last, whatever the direction."""
    rows = list(rows)
    if key in ("instance", "job", "state"):
        return sorted(rows, key=lambda r: str(getattr(r, key)), reverse=descending)
    if key in ("rank", "restarts", "last_up_age_s"):
        have = [r for r in rows if getattr(r, key) is not None]
        return sorted(have, key=lambda r: getattr(r, key), reverse=descending) + \
            [r for r in rows if getattr(r, key) is None]
    nums = [(_num(r, key), r) for r in rows]
    numbered = [(v, r) for v, r in nums if v is not None]
    numbered.sort(key=lambda vr: vr[0], reverse=descending)
    return [r for _v, r in numbered] + [r for v, r in nums if v is None]


def search_cells(row: InstanceRow) -> tuple[str, ...]:
    """What the ``/`` search looks in for an instance: its instance, job and other grouping
    label values."""
    return (row.instance, row.job, *row.labels.values())


class FleetState:
    """The last good table and the newest failure, between refreshes (for a screen).

    ``apply(table)`` on a successful refresh; ``fail(error, now)`` on a failed one: the last
    table stays, with ``error`` set until the next success. ``age_s(now)`` = seconds since the
    last good table's time (``None`` before the first); ``n_ok``, ``n_failed`` count refreshes."""

    def __init__(self) -> None:
        self.table: FleetTable | None = None
        self.error: PromError | None = None
        self.error_at: float | None = None
        self.n_ok = 0
        self.n_failed = 0

    def apply(self, table: FleetTable) -> None:
        self.table = table
        self.error = None
        self.error_at = None
        self.n_ok += 1

    def fail(self, error: PromError, now: float) -> None:
        self.error = error
        self.error_at = now
        self.n_failed += 1

    def age_s(self, now: float) -> float | None:
        return None if self.table is None else now - self.table.at
