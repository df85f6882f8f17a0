"""A line nested deeper than any JSON decoder recurses, on the screens: a replay and a live child
each show it as one problem, and every line around it still counts (the replay's token rows, the
live turn to its end)."""

from __future__ import annotations

import sys

from helpers import EMITTER
from helpers.hostile import screen_text
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_replay
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession

SIZE = (160, 48)
NEST = "[" * 1100 + "]" * 1100


async def test_replay_shows_a_deep_line_as_one_problem(tmp_path):
    f = tmp_path / "deep.txt"
    f.write_text("\n".join([
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10,"text":"a"}',
        'BMOE_ROUTE {"step":1,"experts":%s}' % NEST,
        'BMOE_PROGRESS {"step":2,"steps":2,"wall_ms":10,"text":"ab"}',
    ]) + "\n")
    run, not_runs = open_replay([str(f)])
    assert not_runs == [] and run.tokens.n == 2 and run.problem_count == 1
    app = BmoeTopApp(ReplayScreen(run, title="deep"))
    async with app.run_test(size=SIZE) as pilot:
        app.main.action_tab("problems")
        await pilot_until(pilot, lambda: "depth limit exceeded" in screen_text(app), "the problem drawn")


async def test_live_child_goes_on_past_a_deep_line():
    src = ChildSession([sys.executable, EMITTER, "--deep", "1100"])
    app = live_app(src, title="deep")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: src.state == "ready", "READY")
            src.generate("hello", 6)
            await pilot_until(pilot, lambda: src.status().turns_done == 1, "the turn's end")
            assert src.status().state == "ready"
            model = app.main.model
            await pilot_until(pilot, lambda: model.tokens.n == 6 and model.problem_count == 3, "6 rows, 3 problems")
    finally:
        src.close()
