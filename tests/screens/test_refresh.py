"""The repaint tiers of the run screens (tui/screens/base.py): a tick with nothing new does no
work, new data repaints the title at once and the views only when ``refresh`` seconds are due,
``{`` / ``}`` step the refresh interval, keys repaint at once, and ``--refresh`` on the command
line. No test waits for the interval: the ticks are called directly and the interval is set to
"never" or "now"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import synth
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.model.run import ProcessMemory
from bmoe_top.tui.screens.base import REFRESH_S, REFRESH_STEPS
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.charts import BreakdownChart
from bmoe_top.tui.widgets.panels import RunPanel

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")
NEVER = 1e9  # a refresh interval no test outlives


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    return [str(p)]


def title_of(app) -> str:
    return app.query_one("#title").plain


async def test_nothing_new_means_no_work_and_new_data_waits_for_the_interval(csv_run):
    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="tiers")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("end")  # at the end of the run: the playback holds still
        await pilot.pause()
        screen.refresh_s = NEVER
        screen.tick()  # the first tick after the key may still see the key's change
        polls, title_key = screen.view_polls, screen._title_key
        chart = app.query_one(BreakdownChart)
        painted = chart._polled
        for _ in range(5):
            screen.tick()
        assert screen.view_polls == polls and screen._title_key is title_key  # idle: nothing at all
        # new data: the title follows at once, the views wait for the refresh interval
        run.add_token_row({"wall_ms": 30.0, "io_ms": 5.0})
        screen.playback.end()
        screen.tick()
        assert screen._title_key is not title_key and "65" in title_of(app)
        assert screen.view_polls == polls and chart._polled == painted
        screen.tick()
        assert screen.view_polls == polls
        screen.refresh_s = 0.0  # the interval is due: the next tick polls the views once
        screen.tick()
        assert screen.view_polls == polls + 1 and chart._polled != painted
        screen.tick()
        assert screen.view_polls == polls + 1  # and nothing is left to do
        # a key repaints at once, whatever the interval
        screen.refresh_s = NEVER
        await pilot.press("left")
        await pilot.pause()
        assert screen.view_polls > polls + 1


async def test_braces_step_the_refresh_interval_and_the_palette_lists_them(csv_run):
    screen = ReplayScreen(open_paths(csv_run), title="keys")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        assert screen.refresh_s == REFRESH_S
        await pilot.press("right_curly_bracket")
        assert screen.refresh_s == REFRESH_STEPS[REFRESH_STEPS.index(REFRESH_S) - 1]
        for _ in range(len(REFRESH_STEPS) + 1):
            await pilot.press("right_curly_bracket")
        assert screen.refresh_s == REFRESH_STEPS[0]
        for _ in range(len(REFRESH_STEPS) + 1):
            await pilot.press("left_curly_bracket")
        assert screen.refresh_s == REFRESH_STEPS[-1]
        titles = [t for t, _h, _cb in screen.commands()]
        assert "Refresh less often" in titles and "Refresh more often" in titles
        keys = dict(screen.key_rows())
        assert keys["{"] == "refresh less often" and keys["}"] == "refresh more often"


def test_the_refresh_option_is_documented_and_checked(monkeypatch):
    from bmoe_top.tui.cli import _apply_look, build_parser

    out = subprocess.run([str(BMOE_TOP), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--refresh S" in out.stdout and "htop" in out.stdout
    bad = subprocess.run([str(BMOE_TOP), "replay", "--refresh", "0.01", "x.csv"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "between 0.1 and 10 seconds" in bad.stderr
    monkeypatch.setattr(BmoeTopApp, "refresh_s", None)
    for argv in (["--refresh", "2.5", "replay", "x.csv"], ["replay", "x.csv", "--refresh", "2.5"]):
        args = build_parser().parse_args(argv)
        _apply_look(args)
        assert BmoeTopApp.refresh_s == 2.5
        assert ReplayScreen(small_run(), title="x").refresh_s == 2.5
        monkeypatch.setattr(BmoeTopApp, "refresh_s", None)


def small_run():
    from bmoe_top.tui.model import RunModel

    run = RunModel()
    run.add_token_rows({"wall_ms": np.ones(3)}, 3)
    return run


def count_draws(monkeypatch, widgets) -> dict[str, int]:
    """Count each widget's render_lines calls (the compositor draws every widget that overlaps the
    box it repaints through it, from its cache of lines or not)."""
    calls: dict[str, int] = {}
    for w in widgets:
        calls[w.id] = 0
        inner = w.render_lines

        def counted(crop, _inner=inner, _id=w.id):
            calls[_id] += 1
            return _inner(crop)

        monkeypatch.setattr(w, "render_lines", counted)
    return calls


async def test_a_fast_repaint_draws_the_title_and_no_view(csv_run, monkeypatch):
    """New rows between two view repaints redraw the title line and nothing of the views: the
    answer tail is refreshed after the title's repaint, so the box Textual redraws is the title's
    line and then the tail's, never the screen between them."""
    from bmoe_top.tui.widgets.base import RunView

    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="fast")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        screen.refresh_s = NEVER
        screen.tick()
        await pilot.pause()
        views = list(app.query(RunView))
        assert views
        calls = count_draws(monkeypatch, views)
        title_calls = count_draws(monkeypatch, [app.query_one("#title")])
        run.add_token_row({"wall_ms": 30.0, "io_ms": 5.0})
        screen.playback.end()
        screen.tick()
        await pilot.pause()
        await pilot.pause()
        assert title_calls["title"] >= 1 and "65" in title_of(app)
        assert sum(calls.values()) == 0, calls
        screen.refresh_s = 0.0  # the views' interval is due: now they draw
        screen.tick()
        await pilot.pause()
        assert sum(calls.values()) > 0


async def test_problems_list_is_built_again_only_for_a_new_problem(csv_run, monkeypatch):
    """The problems list's height follows its text, so each build lays the screen out again:
    new token rows leave it alone, a new problem rebuilds it."""
    from bmoe_top.tui.widgets.panels import ProblemsPanel

    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="problems")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        panel = app.query_one(ProblemsPanel)
        builds = []
        inner = panel.renderable_for
        monkeypatch.setattr(panel, "renderable_for", lambda: builds.append(1) or inner())
        panel.update_from_run()
        for _ in range(3):
            run.add_token_row({"wall_ms": 30.0})
            panel.update_from_run()
        assert builds == []
        run.add_problem("x.csv", 7, "garbage", "not a number")
        panel.update_from_run()
        assert builds == [1] and "1 bad line" in panel.renderable_for().plain


async def test_the_text_boxes_of_the_run_screens_do_not_blink(csv_run):
    """A blinking cursor repaints twice a second while nothing moves (htop's prompt does not blink)."""
    from textual.widgets import Input

    app = BmoeTopApp(ReplayScreen(open_paths(csv_run), title="blink"))
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("slash")  # the search box, focused
        await pilot_until(pilot, lambda: isinstance(app.focused, Input), "the search box focused")
        boxes = list(app.query(Input))
        assert boxes and app.focused in boxes
        assert all(not box.cursor_blink for box in boxes)


def tick_timers(screen) -> list:
    """The screen's timers that call its repaint tick and are running (not paused)."""
    return [t for t in screen._timers
            if getattr(t._callback, "__func__", None) is type(screen).tick and t._active.is_set()]


async def test_every_mode_screen_runs_one_repaint_timer(csv_run, tmp_path):
    """Textual calls the ``on_mount`` of every class of a screen: a mode screen that also called
    the base's ran it twice, and two timers ticked at twice ``fps``."""
    import sys

    from helpers import EMITTER

    from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
    from bmoe_top.tui.screens.live import LiveScreen
    from bmoe_top.tui.sources.child_session import ChildSession
    from bmoe_top.tui.sources.tail import FileTail

    audit = tmp_path / "audit.jsonl"
    audit.write_bytes(b"")
    screens = [ReplayScreen(open_paths(csv_run), title="replay"),
               LiveScreen(ChildSession([sys.executable, EMITTER]), title="live"),
               AuditAttachScreen(FileTail(str(audit)))]
    for screen in screens:
        app = BmoeTopApp(screen)
        async with app.run_test(size=(150, 44)) as pilot:
            await pilot.pause()
            assert len(tick_timers(screen)) == 1, type(screen).__name__


async def test_the_fast_tier_is_never_slower_than_the_views_refresh(csv_run):
    """With ``--refresh`` under FAST_S the title and the answer's tail follow at the refresh
    interval (time is moved by setting the last repaint back, not by waiting)."""
    from bmoe_top.tui.screens.base import FAST_S

    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="fast")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        screen.refresh_s = FAST_S / 4
        screen.tick()
        for n in (65, 66):
            run.add_token_row({"wall_ms": 30.0, "io_ms": 5.0})  # only the data moves
            screen.clock.fast_at -= FAST_S / 2  # older than the refresh interval, younger than FAST_S
            screen.clock.views_at = screen.clock.fast_at
            before = screen.clock.fast_at
            screen.tick()
            assert screen.clock.fast_at > before and f"{n:,}" in title_of(app)


async def test_the_expert_map_waits_its_min_interval_while_following_and_a_key_repaints_it(csv_run):
    """New rows while the view follows the newest token repaint the breakdown at every views'
    interval and the expert map at most every ``min_interval`` (time moved by setting its last
    paint back, never by waiting); a cursor move by the user repaints it at once."""
    from bmoe_top.tui.widgets.grids import ExpertMap

    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="follow")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        emap, chart = app.query_one(ExpertMap), app.query_one(BreakdownChart)
        assert emap.min_interval > 0
        screen.playback.follow = True
        screen.refresh_s = 0.0
        screen.tick()
        painted, chart_key = emap._polled, chart._polled
        run.add_token_row({"wall_ms": 30.0, "io_ms": 5.0})
        screen.playback.tick(0.0)
        screen.refresh_views()
        assert chart._polled != chart_key and emap._polled == painted  # the map waits
        emap._painted_at -= emap.min_interval
        screen.refresh_views()
        assert emap._polled != painted  # its interval is over: repainted
        painted = emap._polled
        run.add_token_row({"wall_ms": 31.0, "io_ms": 5.0})
        await pilot.press("left")  # the user moves the cursor: at once, whatever the interval
        await pilot.pause()
        assert emap._polled != painted


async def test_when_the_views_are_due_the_title_and_the_tail_go_with_them(csv_run, monkeypatch):
    """A tick that repaints the views repaints the title and the answer's tail in the same pass
    (no tail left for a pass of its own after it); between views, new rows repaint the tail alone
    (the title's numbers wait for the views, so they show the views' token). So a second holds
    two repaints, not five."""
    from bmoe_top.tui.screens.base import FAST_S
    from bmoe_top.tui.widgets.panels import AnswerTail

    run = open_paths(csv_run)
    screen = ReplayScreen(run, title="sync")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        tail = app.query_one(AnswerTail)
        deferred: list[int] = []
        monkeypatch.setattr(screen, "refresh_tails", lambda: deferred.append(1))
        screen.tick()
        await pilot.pause()
        deferred.clear()
        screen.refresh_s = 0.0  # the views are due at every tick
        run.add_token_row({"wall_ms": 30.0, "io_ms": 5.0})
        polls, tail_key = screen.view_polls, tail._key
        screen.tick()
        await pilot.pause()
        assert screen.view_polls == polls + 1 and tail._key != tail_key and deferred == []
        screen.refresh_s = NEVER  # between views: the fast tier repaints the tail alone
        title = title_of(app)
        run.add_token_row({"wall_ms": 31.0, "io_ms": 5.0})
        screen.clock.fast_at -= FAST_S
        screen.tick()
        await pilot.pause()
        assert screen.view_polls == polls + 1 and deferred == [1] and title_of(app) == title


async def test_the_screen_ticks_fps_a_second_only_while_something_animates(csv_run):
    """A replay held still (or a live view following at 1x) ticks every BASE_TICK_S; playing,
    it ticks fps a second; one of the two timers runs at a time."""
    from bmoe_top.tui.screens.base import BASE_TICK_S

    screen = ReplayScreen(open_paths(csv_run), title="pace", fps=20)
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("home")
        await pilot.pause()
        assert [t._interval for t in tick_timers(screen)] == [BASE_TICK_S]
        # 0.1x: the run plays for half a minute (at 4x a loaded machine's pause outlasted it)
        screen.playback.speed_index = 0
        await pilot.press("space")  # play
        await pilot.pause()
        assert screen.playback.playing
        assert [t._interval for t in tick_timers(screen)] == [1 / 20]
        await pilot.press("space")  # pause
        await pilot.pause()
        assert [t._interval for t in tick_timers(screen)] == [BASE_TICK_S]


async def test_the_title_never_ends_on_the_heading_of_its_numbers(csv_run):
    """At any width the title shows its numbers' heading ("run:", "last 32:") only with at least
    one number after it (at 80 columns it ended on a bare "│ last 32:")."""
    screen = ReplayScreen(open_paths(csv_run), title="a title long enough to crowd the numbers out")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        seen = 0
        for width in range(30, 201):
            text = screen.title_text(width).plain.rstrip()
            assert not text.endswith(("run:", "last 32:")), (width, text)
            seen += "run:" in text
        assert seen  # the numbers do show where they fit


def recorded_session(tmp_path, tiers: bool):
    """(run, screen, app) over a recorded one-turn session of 12 tokens (with memory tiers or not)."""
    p = tmp_path / "run.rec"
    p.write_bytes(synth.session_recording(turns=1, n=12, tiers=tiers))
    run = open_paths([str(p)])
    screen = ReplayScreen(run, title="memory")
    return run, screen, BmoeTopApp(screen)


async def test_a_process_memory_reading_repaints_the_run_panel_and_no_view(tmp_path):
    """A live child's memory is read every second also between turns: the reading moves the
    run panel's memory rows, and nothing else is repainted or polled (the title, the views, the
    alerts and the other panels do not draw it): idle, the screen stays idle."""
    run, screen, app = recorded_session(tmp_path, tiers=True)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        screen.refresh_s = 0.0  # every tick is due: only what changed decides
        screen.tick()
        version, polls = run.version, screen.view_polls
        views = screen._widgets()[1]
        keys = [v._polled for v in views]
        panel = app.query_one(RunPanel)
        run.set_process_memory(ProcessMemory(rss_anon=300 << 20, rss_file=50 << 20, mem_available=7 << 30))
        screen.tick()
        assert run.version == version and screen.view_polls == polls  # the run panel alone
        assert [v._polled for v in views] == keys  # no view drew a frame
        await pilot_until(pilot, lambda: "300" in panel_text(panel))
        run.set_process_memory(ProcessMemory(rss_anon=300 << 20, rss_file=50 << 20, mem_available=7 << 30))
        screen.tick()
        assert screen.view_polls == polls and "300" in panel_text(panel)  # the same reading: nothing new
        run.add_log("a line")  # anything else new since: the whole repaint again
        screen.tick()
        assert screen.view_polls == polls + 1


@pytest.mark.parametrize("tiers", [False, True])
async def test_a_memory_reading_does_not_rebuild_a_run_panel_that_does_not_draw_it(tmp_path, tiers):
    """Without a memory tiers section (a runtime that sends no tiers) the run panel draws no
    memory reading: a reading alone (every second between turns) is nothing new to the screen (its
    change key is the same) and leaves the panel as it is; a panel that draws one (tiers) is
    rebuilt by it."""
    run, screen, app = recorded_session(tmp_path, tiers=tiers)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        screen.refresh_s = 0.0
        screen.tick()
        panel = app.query_one(RunPanel)
        builds: list[int] = []
        build = panel.build
        panel.build = lambda width: (builds.append(width), build(width))[1]  # type: ignore[method-assign]
        text = panel_text(panel)
        before = screen.change_key()
        run.set_process_memory(ProcessMemory(rss_anon=300 << 20, rss_file=50 << 20, mem_available=7 << 30))
        assert (screen.change_key() != before) == tiers
        screen.tick()
        assert bool(builds) == tiers
        assert ("300" in panel_text(panel)) == tiers and (tiers or panel_text(panel) == text)


def panel_text(panel) -> str:
    return "\n".join(strip.text for strip in panel._lines)

