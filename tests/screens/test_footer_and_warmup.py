"""Pilot tests of two promises of the views: the footer offers only the keys that work where the
focus is (in the live prompt box, ``+`` and ``-`` type characters and are not offered), and the
cache warm-up of the real 1,469-token run is visible at 120 columns (skipped when
../shared/data/real-runs is absent)."""

from __future__ import annotations

import sys

import pytest
from helpers import EMITTER, REAL_RUNS
from helpers.waits import pilot_until
from textual.widgets import Input
from textual.widgets._footer import FooterKey

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.charts import OverviewStrip

REAL_1469 = REAL_RUNS / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"


def footer_actions(app) -> set[str]:
    return {k.action for k in app.screen.query(FooterKey)}


async def test_the_footer_offers_the_keys_that_work_where_the_focus_is():
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot_until(pilot, lambda: src.state == "ready", 'src.state == "ready"')
            box = app.query_one("#prompt", Input)
            assert app.focused is box
            # the box's keys (ctrl+n: new chat) are in the footer
            inside = await pilot_until(pilot, lambda: "toggle_chat" in footer_actions(app) and footer_actions(app),
                                       "the prompt box's keys in the footer")
            assert "zoom_in" not in inside and "zoom_out" not in inside and "toggle_play" not in inside
            pb = app.main.playback
            zoom = pb.per_col
            await pilot.press("plus", "minus")
            assert box.value == "+-" and pb.per_col == zoom  # typed, not zoomed
            box.value = ""
            await pilot.press("escape")  # nothing generating: leaves the box
            assert app.focused is None
            await pilot_until(pilot, lambda: {"zoom_in", "zoom_out", "toggle_play"} <= footer_actions(app),
                              "the screen's keys in the footer")
    finally:
        src.close()


@pytest.mark.skipif(not REAL_1469.is_file(), reason="../shared/data/real-runs is absent")
async def test_the_real_runs_cache_warm_up_shows_at_120_columns():
    run = open_paths([str(REAL_1469)])
    assert run.tokens.n == 1469
    app = BmoeTopApp(ReplayScreen(run, title="real"))
    async with app.run_test(size=(120, 40)) as pilot:
        strip = app.screen.query_one(OverviewStrip)
        width = await pilot_until(pilot, lambda: strip.size.width >= 60 and strip.size.width, "the strip's layout")
        rows = [ln.text for ln in strip.build(width, strip.size.height)]
        hit_row = next(r for r in rows if "hit %" in r)
        spark = strip.look.g.spark
        gut = strip.geometry(width)[0]
        cells = hit_row[gut:gut + strip.geometry(width)[2]]
        levels = [spark.index(c) for c in cells if c in spark]
        assert len(levels) >= 50  # the whole run in the width, every column drawn
        # the cumulative hit rate climbs from 6.7 % to 77 %: the first columns are lower than the last
        first, last = levels[:3], levels[-10:]
        assert max(first) < min(last), (first, last)
