"""The breakdown's y scale is not set by a few cold tokens, says how many bars it clips, and no
token with a time draws as nothing: in every look, NO_COLOR and ASCII included, a token too short
for one step of the look shows a minimum mark at the base (tui/widgets/charts.py, robust_top)."""

from __future__ import annotations

import numpy as np
import pytest

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.run import robust_top
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.charts import BreakdownChart
from bmoe_top.tui.widgets.palette import Look

LOOKS = [Look(), Look(colors="16"), Look(colors="mono"), Look(colors="mono", ascii=True), Look(ascii=True)]


def demo_like(n: int = 1024, cold: int = 40, seed: int = 3) -> np.ndarray:
    """The demo's turn: its first tokens on a cold cache at ~300 ms, the rest 5-30 ms."""
    rng = np.random.default_rng(seed)
    wall = rng.uniform(5.0, 30.0, n)
    wall[:cold] = rng.uniform(250.0, 320.0, cold)
    return wall


def chart_over(wall: np.ndarray, look: Look) -> BreakdownChart:
    run = RunModel()
    n = len(wall)
    run.add_token_rows({"step": np.arange(1, n + 1, dtype=float), "wall_ms": wall, "io_ms": wall * 0.3,
                        "mgmt_ms": wall * 0.05}, n)
    pb = Playback(run)
    pb.end()
    chart = BreakdownChart(run, pb)
    chart._look = look
    return chart


def test_a_few_cold_tokens_do_not_set_the_scale():
    wall = demo_like()
    assert np.percentile(wall, 98) > 250  # the old scale: the cold tokens'
    top = robust_top(wall)
    assert 30 <= top <= 100
    # two honest modes (hits and misses) keep the 98th percentile: nothing there is an outlier
    two = np.concatenate([np.full(500, 10.0), np.full(500, 100.0)])
    assert robust_top(two) == pytest.approx(np.percentile(two, 98))
    assert robust_top(np.array([np.nan])) == 1.0 and robust_top(np.zeros(5)) == 1.0


@pytest.mark.parametrize("look", LOOKS, ids=lambda lk: lk.describe())
def test_the_demo_turns_bars_are_tall_and_the_clipped_ones_are_counted(look):
    wall = demo_like(n=100, cold=5)
    chart = chart_over(wall, look)
    lines = [ln.text for ln in chart.build(160, 14)]
    legend, bars = lines[0], lines[1:13]
    over = int(np.count_nonzero(wall > 50))
    clip = "^" if look.ascii else "▲"
    assert f"{clip} {over} over" in legend, legend
    gut = bars[0].index("|" if look.ascii else "│") + 1
    heights = [sum(1 for row in bars if row[gut + j] != " ") for j in range(len(wall))]
    assert np.median(heights) >= 3, heights  # was 0-1 rows under a 300 ms scale


@pytest.mark.parametrize("look", LOOKS, ids=lambda lk: lk.describe())
def test_no_token_with_a_time_draws_as_nothing(look):
    # a scale of ~100 ms over 12 rows: 0.3 ms is far under an eighth of a cell, 3 ms under half a cell
    wall = np.array([100.0, 90.0, 0.3, 3.0, 5.0, 0.0, np.nan, 80.0] * 4)
    chart = chart_over(wall, look)
    lines = [ln.text for ln in chart.build(120, 14)]
    base = lines[12]
    gut = base.index("|" if look.ascii else "│") + 1
    for j, w in enumerate(wall):
        cell = base[gut + j]
        if np.isfinite(w) and w > 0:
            assert cell != " ", (j, w, base)
        elif w == 0:
            assert cell == " "
