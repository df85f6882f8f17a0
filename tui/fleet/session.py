"""Ask Prometheus for the fleet: the queries of one table refresh and of one drill-down.

:class:`FleetSession` holds a :class:`~bmoe_top.tui.sources.prometheus.PrometheusClient`, the
selector and the window. ``refresh(at)`` makes the table's requests in order and builds the
:class:`~bmoe_top.tui.fleet.table.FleetTable`; ``drill(instance, at)`` makes the drill-down's and
builds the :class:`~bmoe_top.tui.fleet.drill.DrillDown`. Requests per refresh (docs/fleet.md):
one instant query of the targets (every ``up`` series in the window with its labels: which
instances the selector picks, none is an ``empty`` error, and which labels tell two targets of
one job and instance apart: :func:`~bmoe_top.tui.fleet.table.grouping`), the targets list when
the scrape interval must be re-read (every minute, or when the set of instances changes; plus
the configuration when no target reports an interval, and an estimate from the stored samples
when the server has neither: a long-term store), one range query for ``up`` and one per column
(14), two instant queries (the restarts, and which series each instance exports): 18 (19 or 20
when the interval is re-read). A drill-down: the instant targets query, then
``up``, every column and the drill-down's own two (``io_ms``, ``stall_ms``), two per-layer
queries and two instant ones (totals, exported series), on a grid of at most
:data:`~bmoe_top.tui.fleet.queries.MAX_POINTS` points: 22 (23 when the interval is re-read).

Errors: the first query's failure (unreachable, bad_data from a bad selector, empty, ...) and
any transport failure (unreachable, timeout) raise :class:`PromError`; a later query that
Prometheus refuses or fails (bad_data, execution, too_many_samples) is kept for its column and
the other columns still count.
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable, Iterable, Mapping

from bmoe_top.tui.fleet import queries as q
from bmoe_top.tui.fleet.drill import DrillDown, build_drill
from bmoe_top.tui.fleet.table import (
    FleetTable,
    Grid,
    InstanceRow,
    Key,
    Now,
    RankMemory,
    build_table,
    grouping,
    missing_keys,
    with_detail,
)
from bmoe_top.tui.sources.prometheus import (
    KeyedResult,
    PromError,
    PromErrorKind,
    PrometheusClient,
    QueryResult,
    RangeResult,
    RefreshThread,
    require_series,
)

__all__ = ["FleetSession", "DEFAULT_SCRAPE_S", "DETAIL_ROWS", "TABLE_POINTS", "Chooser", "aligned"]

#: Assumed when neither the targets nor the configuration state an interval: Prometheus' default.
DEFAULT_SCRAPE_S = 60.0
#: Points of a table sparkline (the drill-down uses up to ``queries.MAX_POINTS``).
TABLE_POINTS = 120
#: Rows read in detail (range queries: sparklines, ages) in a refresh of a large fleet; a fleet
#: up to this size is read in detail whole.
DETAIL_ROWS = 100
#: Picks the rows to read in detail from the rows ranked worst first (their keys, in order).
Chooser = Callable[[list[InstanceRow]], Iterable[Key]]
#: Seconds a learned scrape interval is trusted before the targets are read again.
INTERVAL_TTL_S = 60.0

_FATAL = (PromErrorKind.UNREACHABLE, PromErrorKind.TIMEOUT)


class FleetSession:
    """The fleet as seen through one Prometheus (module docstring).

    ``selector``: PromQL label matchers (``{job="bmoe"}``; empty = every series);
    ``window_s``: the span of the sparklines and the drill-down (s); ``points``: sparkline
    points in the table; ``clock``: wall-clock time (Unix s: Prometheus' time base).
    ``scrape_interval_s`` is the interval the last refresh used (``None`` before one);
    ``ranking`` what the rows were last ranked by (successive refreshes rank worst first with
    hysteresis: :class:`~bmoe_top.tui.fleet.table.RankMemory`)."""

    def __init__(self, client: PrometheusClient, selector: str = "", window_s: float = 300.0,
                 points: int = TABLE_POINTS, clock: Callable[[], float] = time.time, detail_rows: int = DETAIL_ROWS):
        if not window_s > 0:
            raise ValueError(f"window must be > 0 s, got {window_s!r}")
        self.client = client
        self.selector = selector
        self.window_s = float(window_s)
        self.points = max(2, min(int(points), q.MAX_POINTS))
        self.clock = clock
        self.detail_rows = max(1, int(detail_rows))
        self.scrape_interval_s: float | None = None
        self.ranking = RankMemory()
        self._intervals: dict[frozenset[tuple[str, str]], tuple[float, float]] = {}

    def _scrape_interval(self, keys: frozenset[tuple[str, str]], at: float) -> float:
        """The scrape interval of these instances, re-read when older than ``INTERVAL_TTL_S``:
        the targets' (or the configuration's), else estimated from the stored samples (a store
        without a targets list: :func:`~bmoe_top.tui.fleet.queries.interval_query`)."""
        now = time.monotonic()
        known = self._intervals.get(keys)
        if known is None or now - known[1] > INTERVAL_TTL_S:
            iv = self._told_interval(keys)
            if iv is None:
                res = self._instant(q.interval_query(self.selector), at)
                if isinstance(res, QueryResult) and res.samples:
                    iv = q.interval_estimate(res.samples[0].v)
            known = (iv if iv and iv > 0 else DEFAULT_SCRAPE_S, now)
            if len(self._intervals) > 64:
                self._intervals.clear()
            self._intervals[keys] = known
        self.scrape_interval_s = known[0]
        return known[0]

    def _told_interval(self, keys: frozenset[tuple[str, str]]) -> float | None:
        """The interval the targets list (or the configuration) states; ``None`` when the server
        states none or has no such API (a 404 or an empty answer from a long-term store)."""
        try:
            return self.client.scrape_interval(keys)
        except PromError as exc:
            if exc.kind in _FATAL:
                raise
            return None

    def _instances(self, at: float, *extra: str) -> tuple[str, list[dict[str, str]]]:
        """The targets' label sets (every target with an ``up`` sample in the window); raises
        :class:`PromError` ``empty`` when there is none."""
        expr = q.instances_query(self.selector, self.window_s, *extra)
        res = require_series(self.client.query(expr, at))
        assert isinstance(res, QueryResult)
        return expr, [dict(s.labels) for s in res.samples]

    def _range(self, expr: str, grid: Grid) -> RangeResult | PromError:
        try:
            return self.client.query_range(expr, grid.start, grid.end, grid.step)
        except PromError as exc:
            if exc.kind in _FATAL:
                raise
            return exc

    def _keyed(self, expr: str, at: float, by: tuple[str, ...]) -> KeyedResult | PromError:
        try:
            return self.client.query_keyed(expr, at, by)
        except PromError as exc:
            if exc.kind in _FATAL:
                raise
            return exc

    def _instant(self, expr: str, at: float) -> QueryResult | PromError:
        try:
            return self.client.query(expr, at)
        except PromError as exc:
            if exc.kind in _FATAL:
                raise
            return exc

    def refresh(self, at: float | None = None, detail: Chooser | None = None) -> FleetTable:
        """The instances table (:meth:`_refresh`), with the cyclic garbage collector paused: a
        large fleet's answers and table are some 200,000 small objects, whose allocation would
        otherwise run full collections over the app's whole heap (a third of the refresh's CPU
        at 5,000 instances). Nothing here makes a reference cycle."""
        was = gc.isenabled()
        gc.disable()
        try:
            table = self._refresh(at, detail)
        finally:
            if was:
                gc.enable()
        if at is None:
            self._alerts(table)
        return table

    def _alerts(self, table: FleetTable) -> None:
        """The pending and firing alerts of the table's rows (their ``by`` labels match a row),
        firing first; a Prometheus that cannot say (no rules API) leaves ``alerts_error``."""
        try:
            got = self.client.alerts()
        except PromError as exc:
            table.alerts_error = exc
            table.n_queries += 1
            return
        table.n_queries += 1
        rows = {(r.job, r.instance, *(r.labels.get(b, "") for b in table.by[2:])) for r in table.rows}
        mine = [a for a in got if tuple(a.labels.get(b, "") for b in table.by) in rows]
        table.alerts = sorted(mine, key=lambda a: (a.state != "firing", a.name, a.labels.get("instance", "")))

    def _refresh(self, at: float | None, detail: Chooser | None) -> FleetTable:
        """The instances table at ``at`` (Unix s; ``None`` = now, the newest multiple of the step:
        :func:`aligned`). A fleet of up to ``detail_rows`` targets is read in detail (range
        queries: sparklines, ages, a down row's last good values); a larger one is read by
        instant queries (every row's values now) and in detail for ``detail_rows`` rows at most:
        the ones ``detail`` picks from the rows ranked worst first (default: the first). Raises
        :class:`PromError`."""
        live = at is None
        at = self.clock() if at is None else float(at)
        n0 = self.client.n_requests
        targets_expr, targets = self._instances(at)
        by = grouping(targets)
        scrape = self._scrape_interval(_pairs(targets), at)
        step = q.choose_step(self.window_s, scrape, self.points)
        rng = q.rate_interval(scrape, step)
        if live:
            at = aligned(at, step)
        grid = Grid.ending_at(at, self.window_s, step)
        exprs = {"targets": targets_expr, "up": q.up_query(self.selector, by=by),
                 **q.column_queries(self.selector, rng, by=by),
                 "restarts": q.restarts_query(self.selector, self.window_s, by=by)}
        keys = {tuple(t.get(b, "") for b in by) for t in targets}
        build = functools.partial(build_table, selector=self.selector, at=at, window_s=self.window_s, grid=grid,
                                  rate_interval_s=rng, scrape_interval_s=scrape, by=by, queries=exprs)
        if len(keys) <= self.detail_rows:  # the whole fleet in detail
            up = self._range(exprs["up"], grid)
            if isinstance(up, PromError):
                raise up
            cols = {c.key: self._range(exprs[c.key], grid) for c in q.COLUMNS}
            restarts = self._instant(exprs["restarts"], at)
            exprs["exported"] = q.exported_query(self.selector, self.window_s, by=by)
            exported_now = self._instant(exprs["exported"], at)
            return build(up=up, columns=cols, restarts=restarts, exported_now=exported_now,
                         n_queries=self.client.n_requests - n0, memory=self.ranking)
        up_now = self._keyed(exprs["up"], at, by)
        if isinstance(up_now, PromError):
            raise up_now
        answers = {c.key: self._keyed(exprs[c.key], at, by) for c in q.COLUMNS}
        now = Now(up=up_now.values, columns={k: res if isinstance(res, PromError) else res.values
                                             for k, res in answers.items()}, targets=keys,
                  warnings=list(dict.fromkeys(w for res in (up_now, *answers.values())
                                              if isinstance(res, KeyedResult) for w in res.warnings)))
        restarts = self._instant(exprs["restarts"], at)
        # which series a row exports tells "not exported" from "no data" for a cell without a
        # value now: asked for those rows only (none in a fleet where every row has every value)
        lacking = missing_keys(now)
        found: QueryResult | PromError | None = None
        if lacking:
            narrow = q.detail_matchers(by, lacking) if len(lacking) <= 4 * self.detail_rows else []
            exprs["exported"] = q.exported_query(self.selector, self.window_s, *narrow, by=by)
            found = self._instant(exprs["exported"], at)
        table = build(restarts=restarts, exported_now=found, now=now, memory=self.ranking.copy())
        chosen = [k for k in (detail or _first)(table.rows) if k in keys][: self.detail_rows]
        if not chosen:
            table.n_queries = self.client.n_requests - n0
            return table
        extra = q.detail_matchers(by, chosen)
        up_detail = self._range(q.up_query(self.selector, *extra, by=by), grid)
        cols = {c.key: self._range(q.column_query(c, self.selector, rng, *extra, by=by), grid) for c in q.COLUMNS}
        return with_detail(table, grid, up=up_detail, columns=cols, detail=chosen, exported_now=found,
                           memory=self.ranking, n_queries=self.client.n_requests - n0)

    def refresher(self, on_result: Callable[[FleetTable], None], on_error: Callable[[PromError], None],
                  every: float = 0.0, refresh: Callable[[], FleetTable] | None = None,
                  on_exit: Callable[[], None] | None = None) -> RefreshThread[FleetTable]:
        """A (not yet started) :class:`RefreshThread` calling ``refresh`` (default this session's
        :meth:`refresh`) every ``every`` s, never faster than the scrape interval the last
        refresh learned; ``on_exit`` runs on the thread when it ends."""
        return RefreshThread(refresh or self.refresh, on_result, on_error, every=every,
                             min_interval=lambda: self.scrape_interval_s, on_exit=on_exit)

    def drill(self, instance: str, job: str | None = None, at: float | None = None,
              labels: Mapping[str, str] | None = None) -> DrillDown:
        """``instance``'s drill-down at ``at`` (``job``, ``labels`` narrow it when one address
        serves several jobs, or two Prometheus servers hold an instance of that name: without
        them the first such target, by its labels). ``at`` ``None``: now, the newest multiple of
        the step (:func:`aligned`; the drill's ``at``), so that the grids of successive drills
        share their points (a screen appends the new ones). Raises :class:`PromError` (``empty``
        when the selector picks no such instance)."""
        live = at is None
        at = self.clock() if at is None else float(at)
        n0 = self.client.n_requests
        extra = [q.label_matcher("instance", instance)]
        if job is not None:
            extra.append(q.label_matcher("job", job))
        extra += [q.label_matcher(k, v) for k, v in (labels or {}).items()]
        _, targets = self._instances(at, *extra)
        by = grouping(targets)
        first = min(targets, key=lambda t: tuple(t.get(b, "") for b in by))
        job_name = first.get("job", "")
        if job is None:
            extra.append(q.label_matcher("job", job_name))
        pinned = {b: first.get(b, "") for b in by[2:]}
        extra += [q.label_matcher(k, v) for k, v in pinned.items()]
        up_expr = q.up_query(self.selector, *extra)
        scrape = self._scrape_interval(_pairs(targets), at)
        step = q.choose_step(self.window_s, scrape)
        rng = q.rate_interval(scrape, step)
        if live:
            at = aligned(at, step)
        grid = Grid.ending_at(at, self.window_s, step)
        exprs = {"up": up_expr, **q.column_queries(self.selector, rng, *extra, drill=True)}
        layer_exprs = q.layer_queries(self.selector, rng, *extra)
        exprs["layer_hits"] = layer_exprs["hits"]
        exprs["layer_misses"] = layer_exprs["misses"]
        exprs["totals"] = q.totals_query(self.selector, *extra)
        exprs["exported"] = q.exported_query(self.selector, self.window_s, *extra)
        up = self._range(up_expr, grid)
        cols = {c.key: self._range(exprs[c.key], grid) for c in q.COLUMNS + q.DRILL_COLUMNS}
        lh = self._range(exprs["layer_hits"], grid)
        lm = self._range(exprs["layer_misses"], grid)
        totals = self._instant(exprs["totals"], at)
        exported_now = self._instant(exprs["exported"], at)
        return build_drill(job=job_name, instance=instance, at=at, window_s=self.window_s, grid=grid,
                           rate_interval_s=rng, scrape_interval_s=scrape, up=up, columns=cols, layer_hits=lh,
                           layer_misses=lm, totals=totals, exported_now=exported_now, queries=exprs,
                           n_queries=self.client.n_requests - n0, labels={**(labels or {}), **pinned})


def aligned(at: float, step: float) -> float:
    """The newest multiple of ``step`` at or before ``at`` (Unix s): where a live grid ends, so
    that successive refreshes on one step share their points (and a store that caches range
    queries on step multiples, VictoriaMetrics, can answer from its cache)."""
    return math.floor(round(at / step, 6)) * step


def _first(rows: list[InstanceRow]) -> list[Key]:
    return [r.key for r in rows]


def _pairs(targets: list[dict[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((t.get("job", ""), t.get("instance", "")) for t in targets)
