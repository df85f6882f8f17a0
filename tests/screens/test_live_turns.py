"""The live screen's Turns tab lists every finished turn: cancelled ones, a turn that ends while the
tab is hidden, and with a text search still active on another tab (tui/screens/live.py)."""

from __future__ import annotations

import sys

from helpers import EMITTER
from helpers.prompt import send_prompt
from helpers.waits import pilot_until
from textual.widgets import DataTable, Input

from bmoe_top.tui.screens.live import CONTEXT_MARGIN, live_app
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
        assert screen.search_bar.states["answer-full"].query == "w3"
        for i in range(2):  # two turns far longer than the test, cancelled mid-turn
            await send_prompt(pilot, app, f"long {i}", 100_000)
            await pilot_until(pilot, lambda i=i: src.state == "generating" and screen.run_model.n_tokens >= 3 * (i + 1),
                              "generating")
            await pilot.press("ctrl+x")
            await pilot_until(pilot, lambda i=i: src.state == "ready" and src.status().turns_done == i + 1,
                              f"turn {i + 1} cancelled")
        await send_prompt(pilot, app, "short", 5)
        await pilot_until(pilot, lambda: src.status().turns_done == 3, "turn 3 done")
        table = app.query_one("#turns-table DataTable", DataTable)
        await pilot_until(pilot, lambda: table.row_count == 3, "three rows in the Turns table")
        ends = [str(table.get_row_at(r)[-1]) for r in range(3)]
        assert ends == ["cancelled", "cancelled", "done"]
        # the Turns tab's own filter still works, and leaving it empty shows every turn again
        screen.action_tab("turns")
        await pilot.pause()
        await pilot.press("escape", "slash", *"cancelled")  # out of the prompt box, then search
        await pilot_until(pilot, lambda: table.row_count == 2, "two cancelled turns")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: table.row_count == 3, "every turn again")
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


def notes(app, part: str) -> list[str]:
    return [n.message for n in app._notifications if part in n.message]


async def test_a_conversation_that_would_not_fit_the_context_starts_a_new_chat_said_once():
    """The demo's second 1,024-token turn on n_ctx 2048, in small: each turn fills most of the
    context, and the next prompt goes as a new chat instead of being refused."""
    src = ChildSession([sys.executable, EMITTER, "--rate", "500", "--n-ctx", "64", "--enforce-ctx"])
    app = live_app(src, title="emitter", n_predict=40)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        for turn in (1, 2, 3):
            await send_prompt(pilot, app, "# ")
            await pilot_until(pilot, lambda t=turn: src.status().turns_done == t and src.state == "ready",
                              f"turn {turn} done")
            assert src.status().last_error is None
        assert len(notes(app, "starts a new chat")) == 2  # turns 2 and 3, once each
        with app.main.run_model.lock:
            assert [t.done["tokens"] for t in app.main.run_model.turns] == [40, 40, 40]
        await pilot.press("ctrl+q")
    src.close()


async def test_a_source_that_does_not_say_n_ctx_is_sent_again_as_a_new_chat_and_its_error_shows_once():
    src = ChildSession([sys.executable, EMITTER, "--rate", "500", "--n-ctx", "64", "--enforce-ctx", "--hide-ctx"])
    app = live_app(src, title="emitter", n_predict=40)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.main
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        await send_prompt(pilot, app, "first")
        await pilot_until(pilot, lambda: src.status().turns_done == 1 and src.state == "ready", "turn 1")
        await send_prompt(pilot, app, "second")  # 4 + 44 + 40 > 64: refused, then sent as a new chat
        await pilot_until(pilot, lambda: src.status().turns_done == 2 and src.state == "ready", "turn 2")
        assert len(notes(app, "sent again as a new chat")) == 1
        # a turn no chat can hold is refused: the error once on the status line, the prompt back in the box
        await send_prompt(pilot, app, "third", 100)
        await pilot_until(pilot, lambda: src.status().last_error is not None and src.state == "ready", "refused")
        await pilot_until(pilot, lambda: app.query_one("#prompt", Input).value == "third", "the prompt back")
        line = screen._status_text().plain
        assert line.count("exceeds n_ctx (64)") == 1, line
        await pilot.press("ctrl+q")
    src.close()


async def test_an_n_predict_no_chat_can_hold_is_cut_to_what_fits():
    src = ChildSession([sys.executable, EMITTER, "--rate", "500", "--n-ctx", "64", "--enforce-ctx"])
    app = live_app(src, title="emitter", n_predict=100)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_until(pilot, lambda: src.state == "ready", "ready")
        await send_prompt(pilot, app, "# ")
        await pilot_until(pilot, lambda: src.status().turns_done == 1 and src.state == "ready", "turn 1")
        assert src.status().last_error is None and len(notes(app, "does not fit the context")) == 1
        with app.main.run_model.lock:
            assert app.main.run_model.turns[0].done["tokens"] == 64 - 2 - CONTEXT_MARGIN  # "# " is 2 bytes
        await pilot.press("ctrl+q")
    src.close()
