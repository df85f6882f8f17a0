"""The trends at 200x60: the live screen tells "no data yet" (a live source before its first
token) apart from "not in this source" (token rows arrived without that column), over a real
child; the device's memory series of a real phone run (RSS, available memory, swap in use) are
trends on the shared token axis (skipped when ../shared/data/real-runs is absent)."""

from __future__ import annotations

import sys

import pytest
from helpers import EMITTER, REAL_RUNS
from helpers.waits import pilot_until
from textual.widgets import Input

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.charts import BreakdownChart, TrendChart

PHONE_RUN = REAL_RUNS / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"


def trend_lines(app) -> list[str]:
    t = app.screen.query_one(TrendChart)
    return [s.text for s in t.build(t.size.width, max(t.size.height, t.wanted_height(t.size.width)))]


async def test_trends_say_no_data_yet_until_the_first_token_then_only_what_the_source_lacks():
    src = ChildSession([sys.executable, EMITTER, "--rate", "50"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(200, 60)) as pilot:
            await pilot_until(pilot, lambda: src.state == "ready", 'src.state == "ready"')
            before = await pilot_until(pilot, lambda: "no data yet" in (t := " ".join(trend_lines(app))) and t,
                                       "the trends drawn")
            assert "no data yet: tok/s, hit %, read" in before and "not in this source" not in before
            box = app.query_one("#prompt", Input)
            box.value = "hello"
            await pilot.press("enter")
            run = app.main.run_model
            await pilot_until(pilot, lambda: run.tokens.n >= 5, 'run.tokens.n >= 5')
            def drawn_trends() -> list[str] | None:  # the column gives the trends their rows once they have data
                ls = trend_lines(app)
                drawn = {ln.split("│")[0].strip() for ln in ls if "│" in ln}
                return ls if "no data yet" not in " ".join(ls) and {"tok/s", "hit %", "read"} <= drawn else None

            lines = await pilot_until(pilot, drawn_trends, "the trends drawn from the tokens")
            absent = [ln for ln in lines if "not in this source" in ln]
            # the emitter sends no memory columns: those are "not in this source", the rest is drawn
            assert absent and "rss" in absent[0] and "hit %" not in absent[0] and "no data yet" not in " ".join(lines)
            assert "swap" not in absent[0]  # an optional device column: drawn when sent, never listed
    finally:
        src.close()


@pytest.mark.skipif(not PHONE_RUN.is_file(), reason="../shared/data/real-runs is absent")
async def test_a_phone_runs_memory_series_are_trends_on_the_shared_token_axis():
    run = open_paths([str(PHONE_RUN)])
    app = BmoeTopApp(ReplayScreen(run, title="phone"))
    async with app.run_test(size=(200, 60)) as pilot:
        lines = await pilot_until(pilot, lambda: app.screen.query_one(TrendChart).size.width and trend_lines(app),
                                  "the trends laid out")
        rows = {ln.split("│")[0].strip(): ln for ln in lines if "│" in ln and ln.split("│")[0].strip()}
        assert {"rss", "avail", "swap"} <= set(rows), list(rows)
        assert "GiB" in rows["rss"] or "MiB" in rows["rss"]
        # the same token columns as the breakdown above: one sparkline cell per window column
        trend = app.screen.query_one(TrendChart)
        bars = app.screen.query_one(BreakdownChart)
        assert trend.geometry(trend.size.width) == bars.geometry(bars.size.width)


async def test_every_trend_scale_names_its_unit(tmp_path):
    """The tok/s and majflt trends drew their scale as a bare ``0–40.0`` while the others said
    ``0–100 %`` or ``0–0.100 MiB``: every scale carries its quantity's unit (the catalogue's)."""
    from helpers import synth

    from bmoe_top.tui.model.quantities import q

    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    app = BmoeTopApp(ReplayScreen(open_paths([str(p)]), title="units"))
    async with app.run_test(size=(200, 60)) as pilot:
        lines = await pilot_until(pilot, lambda: app.screen.query_one(TrendChart).size.width and trend_lines(app),
                                  "the trends laid out")
        scales = [ln.rsplit(" 0–", 1)[1].strip() for ln in lines if " 0–" in ln]
        assert scales and all(s.split(" ", 1)[1:] for s in scales), scales  # a number, then its unit
        assert any(s.endswith(q("token.tok_s").unit) for s in scales), scales
