"""``DrillFeed`` (tui/feed/fleet.py): a fleet instance's drill-downs -> the run model. One row per
grid step with the per-token means and the per-layer counts, successive drill-downs on a shifted
grid append only the new settled steps, a step without values is a row of absent values (never
zeros), a failed drill-down changes only the status (its text sanitised)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bmoe_top.tui.feed.fleet import DrillFeed
from bmoe_top.tui.fleet.drill import DrillDown, build_drill
from bmoe_top.tui.fleet.table import Grid
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.sources.prometheus import PromError, PromErrorKind, QueryResult, RangeResult, RangeSeries, Sample

STEP = 10.0
NAN = math.nan


def drill(start: float, n: int, values: dict[str, list[float | None]], up: list[float] | None = None,
          layers: dict[int, tuple[list[float], list[float]]] | None = None) -> DrillDown:
    """A drill-down on the grid ``start + k * STEP`` (k < n); ``values[key][k]`` (None: no point)."""
    grid = Grid(start=start, step=STEP, n=n)
    t = grid.t

    def res(vals, **labels) -> RangeResult:
        keep = [k for k, v in enumerate(vals) if v is not None]
        s = RangeSeries(labels={"job": "bmoe", "instance": "a:1", **labels}, t=t[keep],
                        v=np.array([vals[k] for k in keep], dtype=float))
        return RangeResult(query="q", start=grid.start, end=grid.end, step=STEP, series=[s])

    cols = {k: res(v) for k, v in values.items()}
    lh = RangeResult(query="h", start=grid.start, end=grid.end, step=STEP,
                     series=[res(h, layer=str(il)).series[0] for il, (h, _m) in (layers or {}).items()])
    lm = RangeResult(query="m", start=grid.start, end=grid.end, step=STEP,
                     series=[res(m, layer=str(il)).series[0] for il, (_h, m) in (layers or {}).items()])
    totals = QueryResult(query="t", at=grid.end, samples=[
        Sample({"__name__": "llamacpp:tokens_predicted_total"}, grid.end, 500.0),
        Sample({"__name__": "bmoe:timed_tokens_total"}, grid.end, 500.0),
        Sample({"__name__": "bmoe:token_wall_seconds_total"}, grid.end, 10.0)])
    return build_drill(job="bmoe", instance="a:1", at=grid.end, window_s=STEP * (n - 1), grid=grid,
                       rate_interval_s=4 * STEP, scrape_interval_s=STEP, up=res(up or [1.0] * n), columns=cols,
                       layer_hits=lh, layer_misses=lm, totals=totals)


def test_rows_per_step_with_layer_counts_and_totals():
    run = RunModel(LIVE)
    feed = DrillFeed(run, "prometheus http://p instance a:1")
    d = drill(1000.0, 4, {"tok_s": [2, 4, None, 0], "wall_ms": [50, 40, None, NAN], "io_ms": [20, 10, None, NAN],
                          "stall_ms": [0, 0, None, NAN], "compute_ms": [29, 29, None, NAN],
                          "mgmt_ms": [1, 1, None, NAN], "hit_pct": [50, 75, None, NAN],
                          "read_mib_s": [1.0, 2.0, None, 0.0], "budget_mib": [64, 64, 64, 64],
                          "resident_mib": [10, 12, 12, 13]},
              layers={0: ([1, 3, None, 0], [1, 1, None, 0]), 2: ([2, 2, None, 0], [0, 2, None, 0])})
    assert feed.apply(d) == 4 and run.tokens.n == 4 and run.row_unit == "interval"
    tok = run.tokens
    assert tok.view("t", 0, 4).tolist() == [1000.0, 1010.0, 1020.0, 1030.0]
    assert tok.view("tok_s", 0, 4)[[0, 1, 3]].tolist() == [2, 4, 0]  # a real 0 stays 0
    assert np.isnan(tok.view("tok_s", 2, 3)[0]) and np.isnan(tok.view("wall_ms", 2, 3)[0])  # absent, not 0
    assert tok.view("read_mib", 0, 2).tolist() == [0.5, 0.5]  # MiB per generated token
    assert tok.view("cache_hit_pct", 0, 2).tolist() == [50, 75]
    assert np.isnan(tok.view("read_mib", 3, 4)[0])  # 0 MiB/s over 0 tok/s: nothing to divide by
    assert run.mode()[0] == "serial" and run.breakdown(0, 2)["flash"].tolist() == [20, 10]
    # per layer: the heatmap's hit share per step, layers the runtime does not list stay unknown
    assert run.n_layer == 3
    share = run.hit_matrix(4, 0)
    assert share[0, :2].tolist() == [0.5, 0.75] and share[2, :2].tolist() == [1.0, 0.5]
    assert np.isnan(share[1]).all() and np.isnan(share[:, 2]).all()
    # the run panel: totals since the runtime started, the cache's resident and budget now
    assert run.summary["tokens"] == 500 and run.summary["s_per_tok"] == pytest.approx(0.02)
    assert run.summary["budget_mib"] == 64 and run.summary["resident_mib"] == 13
    assert run.budget_mib == 64 and run.resident_mib == 13
    assert run.status == "ok" and run.status_detail == "instance up"


def test_later_drills_append_only_new_settled_steps():
    run = RunModel(LIVE)
    feed = DrillFeed(run)
    vals = {"tok_s": [float(k) for k in range(10)]}
    assert feed.apply(drill(1000.0, 6, {k: v[:6] for k, v in vals.items()}), settled=1035.0) == 4  # 1040, 1050 wait
    # the next drill-down: the grid moved on by two steps, same points where they overlap
    assert feed.apply(drill(1020.0, 6, {k: v[2:8] for k, v in vals.items()}), settled=1075.0) == 4
    assert run.tokens.view("t", 0, run.tokens.n).tolist() == [1000.0 + STEP * k for k in range(8)]
    assert run.tokens.view("tok_s", 0, 8).tolist() == vals["tok_s"][:8]
    assert feed.apply(drill(1020.0, 6, {k: v[2:8] for k, v in vals.items()})) == 0  # nothing new: nothing added
    # a drill-down that starts after a gap (paused longer than the window): the gap is logged
    assert feed.apply(drill(1200.0, 2, {"tok_s": [1.0, 1.0]}, up=[0.0, 0.0])) == 2
    assert any("no rows for" in line for line in run.log)
    assert run.status_detail == "instance down (up = 0)"


def test_a_failed_drill_keeps_the_rows_and_says_why():
    run = RunModel(LIVE)
    feed = DrillFeed(run)
    feed.apply(drill(1000.0, 3, {"tok_s": [1, 2, 3]}))
    feed.failed(PromError(PromErrorKind.UNREACHABLE, "refused \x1b[31mred\x1b[0m", query="up{}"))
    assert run.status == "unreachable" and run.tokens.n == 3
    assert "\x1b" not in run.status_detail and "␛[31m" in run.status_detail
    feed.failed(PromError(PromErrorKind.BAD_DATA, "parse error", query="{job=bmoe}"))
    assert run.status == "error" and "{job=bmoe}" in run.log[-1] and feed.failures == 2
    feed.failed(PromError(PromErrorKind.HTTP, "HTTP 401", http_status=401))
    assert run.status == "unauthorized"
