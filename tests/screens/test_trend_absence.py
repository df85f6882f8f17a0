"""The live screen's trends at 200x60 tell "no data yet" (a live source before its first token)
apart from "not in this source" (token rows arrived without that column), over a real child."""

from __future__ import annotations

import sys
import time

from helpers import EMITTER
from textual.widgets import Input

from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.charts import TrendChart


async def wait_for(pilot, cond, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await pilot.pause(0.05)
    return cond()


def trend_lines(app) -> list[str]:
    t = app.screen.query_one(TrendChart)
    return [s.text for s in t.build(t.size.width, max(t.size.height, t.wanted_height(t.size.width)))]


async def test_trends_say_no_data_yet_until_the_first_token_then_only_what_the_source_lacks():
    src = ChildSession([sys.executable, EMITTER, "--rate", "50"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(200, 60)) as pilot:
            assert await wait_for(pilot, lambda: src.state == "ready")
            await pilot.pause(0.2)
            before = " ".join(trend_lines(app))
            assert "no data yet: tok/s, hit %, read" in before and "not in this source" not in before
            box = app.query_one("#prompt", Input)
            box.value = "hello"
            await pilot.press("enter")
            run = app.main.run_model
            assert await wait_for(pilot, lambda: run.tokens.n >= 5)
            await pilot.pause(0.2)
            lines = trend_lines(app)
            drawn = [ln.split("│")[0].strip() for ln in lines if "│" in ln]
            assert {"tok/s", "hit %", "read"} <= set(drawn), lines
            absent = [ln for ln in lines if "not in this source" in ln]
            # the emitter sends no memory columns: those are "not in this source", the rest is drawn
            assert absent and "rss" in absent[0] and "hit %" not in absent[0] and "no data yet" not in " ".join(lines)
    finally:
        src.close()
