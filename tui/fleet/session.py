"""Ask Prometheus for the fleet: the queries of one table refresh and of one drill-down.

:class:`FleetSession` holds a :class:`~bmoe_top.tui.sources.prometheus.PrometheusClient`, the
selector and the window. ``refresh(at)`` makes the table's requests in order and builds the
:class:`~bmoe_top.tui.fleet.table.FleetTable`; ``drill(instance, at)`` makes the drill-down's and
builds the :class:`~bmoe_top.tui.fleet.drill.DrillDown`. Requests per refresh (docs/fleet.md):
one instant ``up`` query (which instances the selector picks; none is an ``empty`` error), the
targets list when the scrape interval must be re-read (every minute, or when the set of
instances changes; plus the configuration when no target reports an interval), one range query
for ``up`` and one per column (14), two instant queries (the restarts, and which series each
instance exports): 18 (19 when the interval is re-read). A drill-down: the instant ``up``, then
``up``, every column and the drill-down's own two (``io_ms``, ``stall_ms``), two per-layer
queries and two instant ones (totals, exported series), on a grid of at most
:data:`~bmoe_top.tui.fleet.queries.MAX_POINTS` points: 22 (23 when the interval is re-read).

Errors: the first query's failure (unreachable, bad_data from a bad selector, empty, ...) and
any transport failure (unreachable, timeout) raise :class:`PromError`; a later query that
Prometheus refuses or fails (bad_data, execution, too_many_samples) is kept for its column and
the other columns still count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from bmoe_top.tui.fleet import queries as q
from bmoe_top.tui.fleet.drill import DrillDown, build_drill
from bmoe_top.tui.fleet.table import FleetTable, Grid, RankMemory, build_table
from bmoe_top.tui.sources.prometheus import (
    PromError,
    PromErrorKind,
    PrometheusClient,
    QueryResult,
    RangeResult,
    RefreshThread,
    require_series,
)

__all__ = ["FleetSession", "DEFAULT_SCRAPE_S", "TABLE_POINTS"]

#: Assumed when neither the targets nor the configuration state an interval: Prometheus' default.
DEFAULT_SCRAPE_S = 60.0
#: Points of a table sparkline (the drill-down uses up to ``queries.MAX_POINTS``).
TABLE_POINTS = 120
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
                 points: int = TABLE_POINTS, clock: Callable[[], float] = time.time):
        if not window_s > 0:
            raise ValueError(f"window must be > 0 s, got {window_s!r}")
        self.client = client
        self.selector = selector
        self.window_s = float(window_s)
        self.points = max(2, min(int(points), q.MAX_POINTS))
        self.clock = clock
        self.scrape_interval_s: float | None = None
        self.ranking = RankMemory()
        self._intervals: dict[frozenset[tuple[str, str]], tuple[float, float]] = {}

    def _scrape_interval(self, keys: frozenset[tuple[str, str]]) -> float:
        """The scrape interval of these instances, re-read when older than ``INTERVAL_TTL_S``."""
        now = time.monotonic()
        known = self._intervals.get(keys)
        if known is None or now - known[1] > INTERVAL_TTL_S:
            iv = self.client.scrape_interval(keys)
            known = (iv if iv and iv > 0 else DEFAULT_SCRAPE_S, now)
            if len(self._intervals) > 64:
                self._intervals.clear()
            self._intervals[keys] = known
        self.scrape_interval_s = known[0]
        return known[0]

    def _instances(self, at: float, *extra: str) -> tuple[str, frozenset[tuple[str, str]]]:
        expr = q.up_query(self.selector, *extra)
        res = require_series(self.client.query(expr, at))
        assert isinstance(res, QueryResult)
        return expr, frozenset((s.labels.get("job", ""), s.labels.get("instance", "")) for s in res.samples)

    def _range(self, expr: str, grid: Grid) -> RangeResult | PromError:
        try:
            return self.client.query_range(expr, grid.start, grid.end, grid.step)
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

    def refresh(self, at: float | None = None) -> FleetTable:
        """The instances table at ``at`` (Unix s; ``None`` = now). Raises :class:`PromError`."""
        at = self.clock() if at is None else float(at)
        n0 = self.client.n_requests
        up_expr, keys = self._instances(at)
        scrape = self._scrape_interval(keys)
        step = q.choose_step(self.window_s, scrape, self.points)
        rng = q.rate_interval(scrape, step)
        grid = Grid.ending_at(at, self.window_s, step)
        exprs = {"up": up_expr, **q.column_queries(self.selector, rng)}
        up = self._range(up_expr, grid)
        if isinstance(up, PromError):
            raise up
        cols = {c.key: self._range(exprs[c.key], grid) for c in q.COLUMNS}
        exprs["restarts"] = q.restarts_query(self.selector, self.window_s)
        exprs["exported"] = q.exported_query(self.selector, self.window_s)
        restarts = self._instant(exprs["restarts"], at)
        exported_now = self._instant(exprs["exported"], at)
        return build_table(selector=self.selector, at=at, window_s=self.window_s, grid=grid, rate_interval_s=rng,
                           scrape_interval_s=scrape, up=up, columns=cols, restarts=restarts,
                           exported_now=exported_now, queries=exprs, n_queries=self.client.n_requests - n0,
                           memory=self.ranking)

    def refresher(self, on_result: Callable[[FleetTable], None], on_error: Callable[[PromError], None],
                  every: float = 0.0, refresh: Callable[[], FleetTable] | None = None,
                  on_exit: Callable[[], None] | None = None) -> RefreshThread[FleetTable]:
        """A (not yet started) :class:`RefreshThread` calling ``refresh`` (default this session's
        :meth:`refresh`) every ``every`` s, never faster than the scrape interval the last
        refresh learned; ``on_exit`` runs on the thread when it ends."""
        return RefreshThread(refresh or self.refresh, on_result, on_error, every=every,
                             min_interval=lambda: self.scrape_interval_s, on_exit=on_exit)

    def drill(self, instance: str, job: str | None = None, at: float | None = None,
              align: bool = False) -> DrillDown:
        """``instance``'s drill-down at ``at`` (``job`` narrows it when one address serves
        several jobs). ``align``: end the grid at the newest multiple of the step at or before
        ``at`` (the drill's ``at`` then is that time), so that the grids of successive drills
        share their points (a screen appends the new ones). Raises :class:`PromError` (``empty``
        when the selector picks no such instance)."""
        at = self.clock() if at is None else float(at)
        n0 = self.client.n_requests
        extra = [q.label_matcher("instance", instance)]
        if job is not None:
            extra.append(q.label_matcher("job", job))
        up_expr, keys = self._instances(at, *extra)
        scrape = self._scrape_interval(keys)
        step = q.choose_step(self.window_s, scrape)
        rng = q.rate_interval(scrape, step)
        if align:
            at = math.floor(round(at / step, 6)) * step
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
        job_name = job if job is not None else sorted(keys)[0][0]
        return build_drill(job=job_name, instance=instance, at=at, window_s=self.window_s, grid=grid,
                           rate_interval_s=rng, scrape_interval_s=scrape, up=up, columns=cols, layer_hits=lh,
                           layer_misses=lm, totals=totals, exported_now=exported_now, queries=exprs,
                           n_queries=self.client.n_requests - n0)
