"""The live demo a bare ``bmoe-top`` starts (tui/cli.py ``default_main``), on the real bundled
runtime and the trained demo model: the prompt waits in the box, the turn streams in slow motion
behind the live run until End goes real-time, and the run tells the cache story (a cold start,
then a cumulative decode hit rate that keeps climbing, with evictions and re-reads all along).
docs/demo-model.md "The demo run" has the numbers. Counts only, never times."""

from __future__ import annotations

import sys

import numpy as np
from helpers import EMITTER
from helpers.prompt import send_prompt
from helpers.waits import pilot_until
from textual.widgets import Input, Static

from bmoe_top.tui.cli import DEMO_N_PREDICT, DEMO_PROMPT, DEMO_SPEED, runtime_command
from bmoe_top.tui.playback import SPEEDS
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.sources.child_session import ChildSession


async def test_the_default_demo_streams_in_slow_motion_and_its_cache_warms():
    src = ChildSession(runtime_command())
    app = live_app(src, title="demo", n_predict=DEMO_N_PREDICT, prompt=DEMO_PROMPT, speed=DEMO_SPEED)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.main
            pb, run = screen.playback, screen.run_model
            await pilot_until(pilot, lambda: src.state == "ready", "ready", limit=300)
            box = app.query_one("#prompt", Input)
            assert box.value == DEMO_PROMPT and app.focused is box
            await pilot_until(pilot, lambda: "press Enter to send the prompt below"
                              in str(app.query_one("#live-status", Static).render()), "the status line's hint")
            await pilot.press("enter")  # the demo's prompt is already in the box
            await pilot_until(pilot, lambda: run.n_tokens >= 48, "48 tokens", limit=300)
            # slow motion: the view trails the live run and says so
            assert pb.follow and pb.speed == DEMO_SPEED < 1.0 and pb.cursor < run.n_tokens
            title = screen.title_text(120).plain
            assert f"{DEMO_SPEED:g}x" in title and "behind" in title and "End: real time" in title
            assert app.focused is box and box.value == ""  # ready for the next prompt
            await pilot.press("end")  # one key to real time, even in the (empty) prompt box
            assert pb.speed == 1.0 and pb.speed_index == SPEEDS.index(1.0) and pb.follow
            await pilot_until(pilot, lambda: pb.cursor == run.n_tokens or pb.cursor >= 48, "the cursor at real time")
            assert "End: real time" not in screen.title_text(120).plain
            await pilot_until(pilot, lambda: src.status().turns_done == 1 and run.turns[-1].done, "the turn's end",
                              limit=900)
            done = dict(run.turns[-1].done)
            hit = np.asarray(run.tokens.view("cache_hit_pct"), dtype=np.float64)
            # the next prompt: the conversation and 1,024 more tokens would not fit n_ctx, so it
            # starts a new chat (said once) instead of being refused
            await send_prompt(pilot, app, DEMO_PROMPT)
            await pilot_until(pilot, lambda: run.n_tokens >= DEMO_N_PREDICT + 8, "the second turn's tokens",
                              limit=300)
            assert src.status().last_error is None
            assert len([n for n in app._notifications if "starts a new chat" in n.message]) == 1
            await pilot.press("ctrl+x")
            await pilot_until(pilot, lambda: src.status().turns_done == 2, "the second turn cancelled", limit=120)
    finally:
        src.close()
    assert done["tokens"] == DEMO_N_PREDICT and len(hit) == DEMO_N_PREDICT
    # the cumulative decode hit rate climbs from a cold cache, like the real runs of
    # ../shared/data/real-runs (6.7% at the first token, 52.6% at 16, 77% at 128): low at the first
    # token, well up by 128, and still rising in the second half of the turn (not flat from token 3)
    first, at16, at128, half, end = hit[0], hit[15], hit[127], hit[DEMO_N_PREDICT // 2 - 1], hit[-1]
    assert first < 30.0 and first < at16, (first, at16)
    assert at128 - at16 >= 10.0 and end - at16 >= 15.0, (at16, at128, end)
    assert end > half
    # misses all along: the working set does not fit the budget
    assert done["cache_evictions"] > 0 and done["cache_rereads"] > 0
    assert done["cache_resident_mib"] <= done["cache_budget_mib"]


async def test_end_in_the_empty_prompt_box_leaves_slow_motion_and_moves_the_text_cursor_otherwise():
    src = ChildSession([sys.executable, EMITTER, "--rate", "100"])
    app = live_app(src, title="emitter", n_predict=400, prompt="hello", speed=DEMO_SPEED)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            pb, run = app.main.playback, app.main.run_model
            await pilot_until(pilot, lambda: src.state == "ready", "ready")
            box = app.query_one("#prompt", Input)
            await pilot.press("enter")
            await pilot_until(pilot, lambda: run.n_tokens >= 10, "10 tokens")
            assert pb.speed == DEMO_SPEED and app.focused is box and box.value == ""
            await pilot.press("a", "b", "home", "end")  # text in the box: End is the text cursor's
            assert box.value == "ab" and box.cursor_position == 2 and pb.speed == DEMO_SPEED
            box.value = ""
            await pilot.press("end")  # the empty box: End is the view's, to real time
            assert pb.speed == 1.0 and pb.follow and app.focused is box
    finally:
        src.close()


def test_slow_motion_trails_a_run_that_grows_while_it_ticks():
    """The pace of a slow-motion live view is read while the feed thread appends rows: every tick
    sees a consistent set of rows (no IndexError), and the view trails the newest row."""
    import threading

    from bmoe_top.tui.model import LIVE, RunModel, Status
    from bmoe_top.tui.playback import Playback

    run = RunModel(LIVE)
    run.set_status(Status.GENERATING, "")
    pb = Playback(run, follow=True, speed_index=SPEEDS.index(DEMO_SPEED))
    done = threading.Event()

    def feed() -> None:
        for _ in range(20_000):
            run.add_token_row({"wall_ms": 0.5})
        done.set()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave as often as the interpreter allows
    try:
        writer = threading.Thread(target=feed)
        writer.start()
        ticks = 0
        while not done.is_set():
            pb.tick(0.001)
            ticks += 1
        writer.join()
    finally:
        sys.setswitchinterval(switch)
    pb.tick(0.001)
    assert ticks > 0 and 0 <= pb.cursor < pb.n == 20_000 and pb.behind > 0
