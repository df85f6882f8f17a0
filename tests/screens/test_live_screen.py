"""Pilot tests of the live screen (tui/screens/live.py) over a real child (the emitter, then the real
bmoe-run --session on the tiny model): ready, prompt, streaming, turns table, cancel,
continue vs new chat, rejected request, stderr in the log, aborted child, quit closes it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import EMITTER
from helpers.hostile import screen_text
from helpers.prompt import send_prompt
from textual.widgets import DataTable, Input, Static

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.playback import SPEEDS, Playback
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.session_socket import SessionSocketClient

BMOE_RUN = Path(sys.executable).with_name("bmoe-run")


async def wait_for(pilot, cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await pilot.pause(0.05)
    return cond()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def status_text(app) -> str:
    return str(app.query_one("#live-status", Static).render())


async def test_live_app_over_emitter_full_loop():
    src = ChildSession([sys.executable, EMITTER, "--rate", "100", "--stderr-bytes", "500"], stall_after_s=2.0)
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        assert await wait_for(pilot, lambda: "ready" in status_text(app) and "emitter" in status_text(app))
        # turn 1: new chat
        await send_prompt(pilot, app, "hello", 30)
        assert await wait_for(pilot, lambda: app.main.run_model.n_tokens >= 5)
        assert "generating" in status_text(app) or src.state == "ready"
        assert await wait_for(pilot, lambda: src.state == "ready" and src.status().turns_done == 1)
        table = app.query_one("#turns-table DataTable", DataTable)
        assert await wait_for(pilot, lambda: table.row_count == 1)  # the views' next repaint adds the row
        assert app.main.run_model.turns[-1].prompt == "hello"
        # the next prompt continues the chat (clear_kv false)
        assert app.main.new_chat is False
        # a turn far longer than the test: it is still generating when Esc arrives, however late the
        # app sees its tokens on a loaded machine
        await send_prompt(pilot, app, "more", 4_000)  # 40 s, and the chat holds it (n_ctx 4096)
        assert await wait_for(pilot, lambda: src.state == "generating" and app.main.run_model.n_tokens >= 35)
        await pilot.press("escape")  # cancel mid-turn
        assert await wait_for(pilot, lambda: src.state == "ready" and src.status().turns_done == 2)
        assert await wait_for(pilot, lambda: table.row_count == 2)
        done = app.main.run_model.turns[-1].done
        assert done["cancelled"] is True and done["n_past"] > app.main.run_model.turns[0].done["n_past"]
        # rejected request: notice in the status line, session still usable
        await send_prompt(pilot, app, "REJECT this", 5)
        assert await wait_for(pilot, lambda: src.status().last_error == "prompt rejected")
        assert await wait_for(pilot, lambda: src.state == "ready")
        # a request without a turn: a row that says so and why, no turn number; the turns are still 2
        assert await wait_for(pilot, lambda: table.row_count == 3)
        refused = [str(c) for c in table.get_row_at(2)]
        assert refused[0] == "-" and refused[-1] == "rejected: prompt rejected"
        assert app.main.run_model.turn_count == 2 and app.main.run_model.turnless[-1].prompt == "REJECT this"
        # the rejected prompt is back in the box, to edit and send again (before: erased)
        box = app.query_one("#prompt", Input)
        assert await wait_for(pilot, lambda: box.value == "REJECT this")
        # stderr went to the log pane
        assert any("llama_model_loader" in x for x in app.main.run_model.log)
        pid = src.pid
        await pilot.press("ctrl+q")
    src.close()
    assert src.status().state == "exited" and not alive(pid)


async def test_live_app_shows_aborted_child_with_exit_code():
    src = ChildSession([sys.executable, EMITTER, "--die-mid-line", "2", "--rate", "100"])
    app = live_app(src, title="dies")
    async with app.run_test(size=(140, 40)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        await send_prompt(pilot, app, "x", 20)
        assert await wait_for(pilot, lambda: src.state == "aborted")
        assert await wait_for(pilot, lambda: app.main.run_model.status == "aborted"), app.main.run_model.status
        assert await wait_for(pilot, lambda: "aborted" in status_text(app) and "SIGKILL" in status_text(app))
        assert app.main.run_model.problem_count >= 1  # the truncated last line
        # what it had stays on screen
        assert app.main.run_model.n_tokens == 2


async def test_live_app_ready_timeout_message():
    src = ChildSession([sys.executable, EMITTER, "--no-ready"], ready_timeout_s=0.3)
    app = live_app(src, title="never ready")
    async with app.run_test(size=(140, 40)) as pilot:
        assert await wait_for(pilot, lambda: src.status().ready_timeout)
        assert await wait_for(pilot, lambda: "no BMOE_READY" in status_text(app)), status_text(app)
    src.close(timeout=0.2)
    assert not alive(src.pid)


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
async def test_live_app_over_real_runtime(tmp_path):
    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path / "tiny.gguf", preset="tiny")
    src = ChildSession([str(BMOE_RUN), "-m", str(model), "--session", "--route-telemetry", "-c", "512"],
                       ready_timeout_s=60, env={"BMOE_TOKEN_DELAY_MS": "5"})  # room to cancel mid-turn
    app = live_app(src, title="bmoe-run tiny")
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready", 60)
        await send_prompt(pilot, app, "Hello", 8)
        assert await wait_for(pilot, lambda: src.status().turns_done == 1, 60)
        run = app.main.run_model
        assert run.n_tokens == 8 and run.turns[-1].text
        assert run.resident is not None  # BMOE_RESIDENT filled the expert map
        assert await wait_for(pilot, lambda: app.query_one("#turns-table DataTable", DataTable).row_count == 1)
        # continue the chat, then cancel a long turn
        await send_prompt(pilot, app, " again", 4)
        assert await wait_for(pilot, lambda: src.status().turns_done == 2, 60)
        assert run.turns[-1].done["n_past"] > run.turns[0].done["n_past"]
        await send_prompt(pilot, app, "long", 400)
        assert await wait_for(pilot, lambda: run.n_tokens >= 14, 60)
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: src.status().turns_done == 3, 30)
        assert run.turns[-1].cancelled
        # more than n_ctx holds: cut to what fits (said), a new chat, and the runtime takes it
        await send_prompt(pilot, app, "x", 100000)
        assert await wait_for(pilot, lambda: run.n_tokens >= 20, 60)
        assert src.status().last_error is None
        assert any("does not fit the context (n_ctx 512)" in n.message for n in app._notifications)
        await pilot.press("ctrl+x")
        assert await wait_for(pilot, lambda: src.status().turns_done == 4 and src.state == "ready", 30)
        await pilot.press("ctrl+q")
    assert src.close() == 0
    assert not alive(src.pid)


async def test_live_app_attach_keeps_screen_when_runtime_goes_away_and_reconnects(tmp_path):
    import os
    import signal
    import subprocess

    from bmoe_top.tui.sources.session_socket import SessionSocketClient

    sock = f"/tmp/bmoe-l-scr-{os.getpid()}.sock"

    def start():
        return subprocess.Popen([sys.executable, EMITTER, "--socket", sock, "--rate", "200"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)

    p = start()
    src = SessionSocketClient(sock, max_backoff_s=0.2)
    app = live_app(src, title="attach")
    try:
        async with app.run_test(size=(150, 44)) as pilot:
            assert await wait_for(pilot, lambda: src.state == "ready", 20)
            await send_prompt(pilot, app, "hi", 8)
            assert await wait_for(pilot, lambda: src.status().turns_done == 1, 20)
            n = app.main.run_model.n_tokens
            p.send_signal(signal.SIGKILL)
            p.wait()
            assert await wait_for(pilot, lambda: src.state == "disconnected", 10)
            shown = await wait_for(pilot, lambda: "disconnected" in status_text(app) and "runtime" in status_text(app))
            assert shown, status_text(app)
            assert app.main.run_model.n_tokens == n  # what it had stays on screen
            os.unlink(sock)
            p = start()
            assert await wait_for(pilot, lambda: src.state == "ready" and src.status().connects == 2, 20)
            assert await wait_for(pilot, lambda: "connects 2" in status_text(app)), status_text(app)
            await pilot.press("ctrl+q")
    finally:
        src.close()
        if p.poll() is None:
            p.kill()
            p.wait()
        if os.path.exists(sock):
            os.unlink(sock)


async def test_live_app_plays_a_recording_turn_by_turn(tmp_path):
    from bmoe_top.parsers.recording import load_recording
    from bmoe_top.tui.sources.recorder import Recorder
    from bmoe_top.tui.sources.replay import RecordingSource

    path = tmp_path / "two-turns.jsonl"
    src0 = ChildSession([sys.executable, EMITTER, "--rate", "500"], recorder=Recorder(path)).start()
    assert src0.wait_state("ready", 10)
    for i in range(2):
        src0.generate(f"turn {i}", 5, clear_kv=(i == 0))
        time.sleep(0.05)
        assert src0.wait_state("ready", 10)
    src0.close()
    src0.recorder.close()
    src = RecordingSource(load_recording(path), speed=4.0, turn_by_turn=True)
    app = live_app(src, title="play")
    async with app.run_test(size=(150, 44)) as pilot:
        # stopped before the first turn: nothing plays until Enter
        assert await wait_for(pilot, lambda: src.player.paused_at_turn.is_set(), 10)
        assert await wait_for(pilot, lambda: "paused before turn 1: Enter plays it" in status_text(app))
        assert app.main.run_model.n_tokens == 0 and src.status().turns_done == 0
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: src.player.turn == 1 and src.player.paused_at_turn.is_set(), 10)
        assert await wait_for(pilot, lambda: "paused before turn 2: Enter plays it" in status_text(app))
        assert app.main.run_model.n_tokens == 5 and len(app.query("#prompt")) == 0
        # the title says what follows the newest token: a recording, not a live run
        title = app.main.title_text().plain
        assert "playing a recording" in title and " live" not in title.split("·")[0], title
        # a recording has no chat to start and nothing to cancel: ctrl+n is not offered (it was,
        # and did nothing)
        keys = {b.binding.key for b in app.active_bindings.values() if b.enabled}
        assert "ctrl+n" not in keys
        await pilot.press("enter")  # a recording: Enter plays the next turn
        assert await wait_for(pilot, lambda: src.state == "exited", 10)
        assert app.main.run_model.n_tokens == 10
        assert await wait_for(pilot, lambda: app.query_one("#turns-table DataTable", DataTable).row_count == 2)
        await pilot.press("ctrl+q")


async def test_escape_closes_the_seek_box_and_help_lists_live_keys():
    from bmoe_top.tui.screens.modals import HelpScreen, SeekScreen

    src = ChildSession([sys.executable, EMITTER, "--rate", "100"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        await pilot.press("escape")  # leave the prompt box
        await pilot.press("g")
        assert isinstance(app.screen, SeekScreen)
        await pilot.press("escape")  # the modal gets escape, not the app's cancel key
        await pilot.pause()
        assert not isinstance(app.screen, SeekScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        text = screen_text(app)
        assert "cancel" in text and "pause" in text and "zoom in" in text  # the live keys and the replay keys
        await pilot.press("escape")
    src.close(timeout=1)


async def test_arrow_then_end_follows_live_and_the_next_turn_is_followed():
    """Follow is a state the user sees and toggles: an arrow key leaves it (paused, the picture
    holds still), End comes back to it, and the next prompt's tokens reach every time view."""
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(160, 48)) as pilot:
        screen, pb = app.main, app.main.playback
        run = screen.run_model
        assert await wait_for(pilot, lambda: src.state == "ready")
        await send_prompt(pilot, app, "one", 12)
        assert await wait_for(pilot, lambda: src.state == "ready" and src.status().turns_done == 1)
        assert await wait_for(pilot, lambda: "● live" in app.query_one("#title").plain)
        # the playback follows the turn's last rows at the screen's next tick
        assert await wait_for(pilot, lambda: pb.cursor == run.n_tokens)
        assert pb.state() == "live"
        await pilot.press("escape")  # leave the prompt box: the arrows move the selection
        await pilot.press("left")
        assert pb.state() == "paused" and pb.sel == run.n_tokens - 2
        assert await wait_for(pilot, lambda: "paused" in app.query_one("#title").plain)
        await pilot.press("end")
        assert pb.state() == "live" and pb.follow and pb.selected is None
        await send_prompt(pilot, app, "two", 12)
        assert await wait_for(pilot, lambda: src.state == "ready" and src.status().turns_done == 2)
        assert await wait_for(pilot, lambda: run.n_tokens >= 24 and pb.cursor == run.n_tokens)
        n = run.n_tokens
        assert pb.state() == "live" and pb.sel == n - 1
        # every time view draws the same window, ending at the newest token
        for wid in ("#overview-strip", "#breakdown", "#trends"):
            view = app.query_one(wid)
            w = view.window(view.content_size.width)
            assert w.hi == n and w.selected == n - 1, wid
        assert f"token {n}" in app.query_one("#breakdown").text(150, 14)
        await pilot.press("ctrl+q")
    src.close()


async def test_at_80x24_a_launch_that_cannot_start_says_why():
    # the compact layout hides the status line; one that holds a reason is shown
    src = ChildSession(["/nonexistent/cmd"])
    app = live_app(src, title="launch cmd")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "failed")
        line = app.query_one("#live-status", Static)
        assert await wait_for(pilot, lambda: "No such file or directory" in screen_text(app))
        assert line.display and "cannot start /nonexistent/cmd" in screen_text(app)
    src.close()


async def test_at_80x24_an_attach_to_a_missing_socket_says_why(tmp_path):
    src = SessionSocketClient(str(tmp_path / "missing.sock"))
    app = live_app(src, title="attach missing.sock")
    async with app.run_test(size=(80, 24)) as pilot:
        def letters() -> str:  # the reason may wrap, inside a word too (the line takes up to 3 rows)
            return "".join(screen_text(app).split())

        assert await wait_for(pilot, lambda: "missing.sock(nosocket)" in letters()), screen_text(app)
    src.close()


async def test_at_80x24_a_healthy_session_keeps_the_compact_layout():
    src = ChildSession([sys.executable, EMITTER, "--rate", "100"])
    app = live_app(src, title="emitter")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        line = app.query_one("#live-status", Static)
        assert await wait_for(pilot, lambda: not line.display)  # ready: nothing to explain, the line stays hidden
        assert await wait_for(pilot, lambda: not line.has_class("-problem"))
    src.close()


def _live_run(n: int) -> RunModel:
    run = RunModel()
    run.add_token_rows({"step": np.arange(1, n + 1, dtype=float), "wall_ms": np.full(n, 20.0)}, n)
    run.set_status(Status.GENERATING)
    return run


def test_space_after_home_on_a_live_view_plays_on_from_there():
    run = _live_run(100)
    pb = Playback(run, follow=True, speed_index=SPEEDS.index(1.0))
    pb.tick(0.1)
    assert pb.state() == "live" and pb.cursor == 100
    pb.start()  # Home: token 1, paused
    assert pb.state() == "paused" and pb.sel == 0
    pb.toggle()  # space: play on from token 1 (it went back to the newest token)
    assert pb.state() == "replay" and pb.cursor <= 2 and not pb.follow
    pb.tick(0.5)  # at 1x a 20 ms token: 25 more tokens in half a second, and up to as many again to catch up
    assert 25 <= pb.cursor <= 52 and pb.playing
    pb.toggle()  # space again pauses where it is
    assert pb.state() == "paused" and pb.sel < 53
    pb.toggle()
    run.add_token_rows({"step": np.arange(101, 111, dtype=float), "wall_ms": np.full(10, 20.0)}, 10)  # still live
    for _ in range(40):
        pb.tick(0.1)
    assert pb.state() == "live" and pb.follow and pb.cursor == 110  # caught up: following live again


def test_space_at_the_newest_token_of_a_live_view_follows_at_once():
    run = _live_run(50)
    pb = Playback(run, follow=True)
    pb.tick(0.1)
    pb.toggle()
    assert pb.state() == "paused"
    pb.toggle()
    assert pb.state() == "live" and pb.cursor == 50


async def test_the_turns_table_shows_a_request_id_as_sent():
    """A request id is an identifier: 373002, not 373,002."""
    src = ChildSession([sys.executable, EMITTER, "--rate", "500"], stall_after_s=5.0)
    app = live_app(src, title="ids")
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        src.generate("hello", 5, id=373002)
        table = app.query_one("#turns-table DataTable", DataTable)
        assert await wait_for(pilot, lambda: table.row_count == 1)
        assert str(table.get_row_at(0)[1]) == "373002"


def test_the_help_lists_each_key_once_as_the_live_screen_answers_it():
    """ctrl+c cancels on a live screen: the help said cancel, quit and Textual's "Copy selected
    text" for it; Tab said "Focus Next". A map's own keys are listed as such ("on a map: ")."""
    rows = _live_screen().key_rows()
    keys = [k for keyset, desc in rows if not desc.startswith(("on a map", "in a table", "on a scrolling panel"))
            for k in keyset.split(" / ")]
    assert len(keys) == len(set(keys)), rows
    desc = dict(r for r in rows if not r[1].startswith(("on a map", "on a scrolling panel")))
    assert desc["ctrl+x / ctrl+c"] == "cancel the generation" and desc["c"] == "next colour scale"
    assert "next map" in desc["Tab"] and desc["Escape"].startswith("leave")
    assert ("Escape", "on a map: leave the map") in rows
    assert ("Escape", "on a scrolling panel: leave the panel") in rows
    assert not any("Copy" in d or "Focus" in d for _k, d in rows)


def _live_screen():
    from bmoe_top.tui.screens.live import LiveScreen

    return LiveScreen(ChildSession([sys.executable, EMITTER]))


async def test_a_request_refused_while_a_turn_runs_is_listed_after_that_turn():
    """bmoe-run refuses a malformed request at once, while another generates: its row waits for
    the running turn's row (the table keeps the session's order), and the table holds each once."""
    src = ChildSession([sys.executable, EMITTER, "--rate", "500"], stall_after_s=5.0)
    app = live_app(src, title="order")
    async with app.run_test(size=(160, 48)) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        run, screen = app.main.run_model, app.main
        run.note_request({"cmd": "generate", "id": 8, "prompt": 42})
        run.begin_turn(id=7, prompt="first")
        assert run.reject_request(8, "generate: 'prompt' must be a string")
        table = app.query_one("#turns-table DataTable", DataTable)
        screen.update_turns()
        assert table.row_count == 0  # turn 1 still runs
        run.finish_turn({"id": 7, "tokens": 0, "tok_s": 1.0})
        screen.update_turns()
        screen.update_turns()
        assert [[str(c) for c in table.get_row_at(i)[:2]] for i in range(table.row_count)] == [["1", "7"], ["-", "8"]]
        assert str(table.get_row_at(1)[-1]) == "rejected: generate: 'prompt' must be a string"


async def test_enter_on_an_empty_prompt_box_says_why_nothing_was_sent():
    # the box is emptied by each turn; Enter on it sent nothing and said nothing
    src = ChildSession([sys.executable, EMITTER, "--rate", "100"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            assert await wait_for(pilot, lambda: src.state == "ready")
            app.query_one("#prompt", Input).value = "   "
            app.query_one("#prompt", Input).focus()
            await pilot.press("enter")
            assert await wait_for(pilot, lambda: any("prompt box is empty" in n.message for n in app._notifications))
            assert src.status().turns_done == 0 and src.state == "ready"
    finally:
        src.close()
