"""The live screen's Turns tab lists every finished turn: cancelled ones, a turn that ends while the
tab is hidden, and with a text search still active on another tab (tui/screens/live.py)."""

from __future__ import annotations

import sys

from helpers import EMITTER
from helpers.prompt import send_prompt
from helpers.waits import pilot_until
from textual.widgets import DataTable, Input

from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.sources.child_session import ChildSession


async def test_cancel_cancel_complete_lists_three_turns_even_after_a_text_search():
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.main
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        # a search in the Text tab (kept after Enter) must not filter the Turns table
        await pilot.press("escape")
        await pilot.press("slash")
        await pilot.press(*"w3")
        await pilot.press("enter")
        assert screen.search_query == "w3"
        for i in range(2):  # two turns far longer than the test, cancelled mid-turn
            await send_prompt(pilot, app, f"long {i}", 100_000)
            await pilot_until(pilot, lambda i=i: src.state == "generating" and screen.run_model.n_tokens >= 3 * (i + 1),
                              "generating")
            await pilot.press("ctrl+x")
            await pilot_until(pilot, lambda i=i: src.state == "ready" and src.status().turns_done == i + 1,
                              f"turn {i + 1} cancelled")
        await send_prompt(pilot, app, "short", 5)
        await pilot_until(pilot, lambda: src.status().turns_done == 3, "turn 3 done")
        table = app.query_one("#turns-table", DataTable)
        await pilot_until(pilot, lambda: table.row_count == 3, "three rows in the Turns table")
        ends = [str(table.get_row_at(r)[-1]) for r in range(3)]
        assert ends == ["cancelled", "cancelled", "done"]
        # the Turns tab's own filter still works, and leaving it empty shows every turn again
        screen.action_tab("turns")
        await pilot.pause()
        screen.apply_search("cancelled")
        assert table.row_count == 2
        screen.apply_search("")
        assert table.row_count == 3
        await pilot.press("ctrl+q")
    src.close()


async def test_prompt_placeholder_says_what_escape_does_while_generating_and_not():
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        ph = app.query_one("#prompt", Input).placeholder
        assert "Escape cancels it" in ph and "leaves the box" in ph
        await send_prompt(pilot, app, "long", 100_000)
        await pilot_until(pilot, lambda: src.state == "generating", "generating")
        await pilot.press("escape")  # what the placeholder says: it cancels
        await pilot_until(pilot, lambda: src.state == "ready" and src.status().turns_done == 1, "cancelled")
        await pilot.press("ctrl+q")
    src.close()


async def test_faster_than_1x_on_a_live_view_says_it_only_catches_up():
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        pb = app.main.playback
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        await send_prompt(pilot, app, "short", 5)
        await pilot_until(pilot, lambda: src.status().turns_done == 1 and pb.behind == 0, "turn done, view at it")
        await pilot.press("escape")  # leave the prompt box: ] is the view's key
        speed = pb.speed
        await pilot.press("right_square_bracket")
        # before: the speed went up with nothing on screen, and ] seemed to do nothing
        assert pb.speed == speed and pb.follow
        assert any("already at the newest token" in str(n.message) for n in app._notifications)
        await pilot.press("ctrl+q")
    src.close()


async def test_the_tab_ctrl_keys_work_from_the_prompt_box():
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        box = app.query_one("#prompt", Input)
        tabs = app.main.query_one("#tabs")
        for key, tab in (("ctrl+t", "turns"), ("ctrl+o", "whatif"), ("ctrl+l", "log")):
            box.focus()
            await pilot.pause()
            await pilot.press(key)  # before: nothing happened while the prompt box had the focus
            await pilot.pause()
            assert tabs.active == tab, key
            assert box.value == ""
        await pilot.press("ctrl+q")
    src.close()
