"""One instance's drill-down: the time panels and the per-layer hit heatmap, from ``query_range``.

Pure: :func:`build_drill` takes the answers asked for one instance on one grid and returns a
:class:`DrillDown`. Because the numbers come from Prometheus' storage, the panels reach back over
the whole window, including the time before bmoe-top started.

Arrays: ``series[key]`` (every table column, the drill-down's ``io_ms`` and ``stall_ms``,
``stall_share`` and ``up``) is float64 on ``t``
with NaN where the instance had no value (absent, or undefined such as a hit % without lookups).
The heatmap is ``layer_hits`` / ``layer_misses`` (lookups per second, the rate window's mean,
shape ``[n_layer, n]``, rows in ``layers`` order) and ``layer_hit_pct`` (NaN where the layer had
no lookup). ``totals`` are the counters since the runtime started, at the drill's time, by the
short keys of :data:`bmoe_top.parsers.prom.SERIES` (``None`` when not exported).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from bmoe_top.parsers.limits import MAX_LAYERS, int_within
from bmoe_top.parsers.prom import SERIES
from bmoe_top.tui.fleet.queries import COLUMNS, DRILL_COLUMNS, exported
from bmoe_top.tui.fleet.table import Grid, align, names_by_key
from bmoe_top.tui.sources.prometheus import PromError, QueryResult, RangeResult

__all__ = ["DrillDown", "build_drill", "COUNTER_KEYS"]

#: Counter series name -> short key (``llamacpp:tokens_predicted_total`` -> ``tokens_predicted``).
COUNTER_KEYS: dict[str, str] = {s.name: s.key for s in SERIES if s.type == "counter" and not s.per_layer}


@dataclass(slots=True)
class DrillDown:
    """One instance over the window (module docstring). ``not_exported``: column keys whose
    series the instance does not export; ``no_data``: column keys without a value in the
    window although they may be exported; ``errors``: key -> the :class:`PromError` of that
    query (``layers``, ``totals``, ``exported`` included); ``first_t``: the earliest grid time
    with any value (``None`` when empty); ``queries``: key -> PromQL; ``n_queries``: requests
    made; ``labels``: the target's other grouping labels (which Prometheus, when two hold an
    instance of this name)."""

    job: str
    instance: str
    at: float
    window_s: float
    step_s: float
    rate_interval_s: float
    scrape_interval_s: float
    t: np.ndarray
    series: dict[str, np.ndarray]
    not_exported: list[str]
    no_data: list[str]
    layers: list[int]
    layer_hits: np.ndarray
    layer_misses: np.ndarray
    layer_hit_pct: np.ndarray
    totals: dict[str, float | None]
    first_t: float | None
    queries: dict[str, str] = field(default_factory=dict)
    errors: dict[str, PromError] = field(default_factory=dict)
    n_queries: int = 0
    labels: dict[str, str] = field(default_factory=dict)


def _one(res: RangeResult, grid: Grid) -> np.ndarray | None:
    """The answer's values on ``grid`` (label sets folded: first point per step), or ``None``."""
    if not res.series:
        return None
    out = np.full(grid.n, np.nan)
    filled = np.zeros(grid.n, dtype=bool)
    for s in res.series:
        vals, have = align(s, grid)
        take = have & ~filled
        out[take] = vals[take]
        filled |= have
    return np.where(np.isfinite(out), out, np.nan)


def _per_layer(res: RangeResult, grid: Grid) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    for s in res.series:
        il = int_within(s.labels.get("layer", ""), MAX_LAYERS - 1)
        if il is None:
            continue  # a layer label that is not a number within the cap is not a layer
        vals, _ = align(s, grid)
        if il in out:
            out[il] = np.where(np.isnan(out[il]), vals, out[il] + np.nan_to_num(vals))
        else:
            out[il] = vals
    return out


def build_drill(*, job: str, instance: str, at: float, window_s: float, grid: Grid, rate_interval_s: float,
                scrape_interval_s: float, up: RangeResult | PromError,
                columns: Mapping[str, RangeResult | PromError], layer_hits: RangeResult | PromError,
                layer_misses: RangeResult | PromError, totals: QueryResult | PromError,
                exported_now: QueryResult | PromError | None = None, queries: Mapping[str, str] | None = None,
                n_queries: int = 0, labels: Mapping[str, str] | None = None) -> DrillDown:
    """The drill-down from the answers asked on ``grid`` for one instance (``exported_now``: the
    ``exported_query`` answer, as for :func:`~bmoe_top.tui.fleet.table.build_table`; ``labels``:
    the target's other grouping labels, which the queries matched)."""
    errors: dict[str, PromError] = {}
    series: dict[str, np.ndarray] = {}
    not_exported: list[str] = []
    no_data: list[str] = []
    if isinstance(exported_now, PromError):
        errors["exported"] = exported_now
    known = names_by_key(exported_now).get((job, instance))  # one target: the queries matched its labels
    nan = np.full(grid.n, np.nan)
    if isinstance(up, PromError):
        errors["up"] = up
        series["up"] = nan.copy()
    else:
        got_up = _one(up, grid)
        series["up"] = got_up if got_up is not None else nan.copy()
    for c in COLUMNS + DRILL_COLUMNS:
        res = columns.get(c.key)
        if not isinstance(res, RangeResult):
            if isinstance(res, PromError):
                errors[c.key] = res
            series[c.key] = nan.copy()
            continue
        got = _one(res, grid)
        if got is None:
            (not_exported if known is not None and not exported(c, known) else no_data).append(c.key)
            series[c.key] = nan.copy()
        else:
            series[c.key] = got
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        share = 100.0 * series["flash_ms"] / series["wall_ms"]
    series["stall_share"] = np.where(np.isfinite(share) & (series["wall_ms"] > 0), share, np.nan)
    hits: dict[int, np.ndarray] = {}
    misses: dict[int, np.ndarray] = {}
    for name, res, dest in (("layers", layer_hits, hits), ("layers", layer_misses, misses)):
        if isinstance(res, PromError):
            errors[name] = res
        else:
            dest.update(_per_layer(res, grid))
    layers = sorted(set(hits) | set(misses))
    h = np.vstack([hits.get(il, nan) for il in layers]) if layers else np.empty((0, grid.n))
    m = np.vstack([misses.get(il, nan) for il in layers]) if layers else np.empty((0, grid.n))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pct = 100.0 * h / (h + m)
    pct = np.where(np.isfinite(pct), pct, np.nan)
    tot: dict[str, float | None] = dict.fromkeys(COUNTER_KEYS.values())
    if isinstance(totals, PromError):
        errors["totals"] = totals
    else:
        for s in totals.samples:
            k = COUNTER_KEYS.get(s.labels.get("__name__", ""))
            if k is not None and math.isfinite(s.v):
                tot[k] = s.v
    t = grid.t
    anyv = np.zeros(grid.n, dtype=bool)
    for k, arr in series.items():
        anyv |= np.isfinite(arr) if k != "up" else (arr == 1)
    first = np.flatnonzero(anyv)
    return DrillDown(job=job, instance=instance, at=at, window_s=window_s, step_s=grid.step,
                     rate_interval_s=rate_interval_s, scrape_interval_s=scrape_interval_s, t=t, series=series,
                     not_exported=not_exported, no_data=no_data, layers=layers, layer_hits=h, layer_misses=m,
                     layer_hit_pct=pct,
                     totals=tot, first_t=float(t[first[0]]) if first.size else None, queries=dict(queries or {}),
                     errors=errors, n_queries=n_queries, labels=dict(labels or {}))
