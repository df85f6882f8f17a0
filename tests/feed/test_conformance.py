"""Every real recorded run opens in bmoe-top and shows what it holds (skips without ../shared)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from helpers import real_run_files

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.charts import BreakdownChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap


def test_summary_json_of_the_1469_token_run(real_runs):
    path = real_runs / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", "--json", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = orjson.loads(r.stdout)
    assert s["tokens"] == 1469
    assert s["tok_s"] == 3.938
    assert s["cache_hit_pct"] == 77.2
    assert s["mode"] == "overlap"
    assert s["meta"]["arch"] == "qwen35moe" and s["n_layer"] == 40 and s["n_expert"] == 256
    assert s["problems"] == 0


@pytest.mark.parametrize("path", real_run_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
async def test_every_real_file_opens_and_renders(path):
    run = open_paths([str(path)])
    s = run_summary(run)
    held = s["derived"]["token_rows"] or s["routing_rows"] or s["tokens"] or s["sidecar"] or len(run.requests)
    assert held, f"{path.name}: nothing shown"
    app = BmoeTopApp(ReplayScreen(run, title=path.name))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        for w in (BreakdownChart, LayerHeatmap, ExpertMap):
            widget = app.query_one(w)
            assert widget.build(widget.size.width, widget.size.height)


async def test_one_run_from_its_three_files(real_runs):
    d = real_runs / "bigmoeonedge-2026-07-15"
    run = open_paths([str(d / "qwen.metrics"), str(d / "qwen.route.csv"), str(d / "qwen.log")])
    s = run_summary(run)
    assert s["derived"]["token_rows"] == 128
    assert s["n_layer"] == 48 and s["n_expert"] == 128 and s["top_k"] == 6
    assert s["tokens"] == 128 and s["tok_s"] == 5.657
    assert run.route_token_count() == 128  # one routed token per decode token
    share = run.hit_matrix()
    assert share.shape == (48, 128)
    assert 0.5 < float(share[:, -32:].mean()) <= 1.0  # a warm cache late in the run
    assert any("mixture-of-experts" in t.text.lower() for t in run.turns)


def test_requests_file_lists_prompts(real_runs):
    run = open_paths([str(real_runs / "bigmoeonedge-2026-07-22" / "session-requests.jsonl")])
    # 15 generate requests, then close: no response in the file, so no turn, each request listed
    assert not run.turns and [r.status for r in run.turnless] == ["unanswered"] * 15
    assert [r.id for r in run.turnless] == list(range(15)) and run.requests[-1]["cmd"] == "close"
    assert "Janet" in run.turnless[0].prompt and "\n" in run.turnless[0].prompt
