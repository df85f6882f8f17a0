"""A firing alert on a run screen (docs/alerts.md): it is in the title (the status line every run
screen has) and in the run panel, with ASCII and without, and it never takes the focus."""

from __future__ import annotations

from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.alerts import AlertState
from bmoe_top.tui.model.run import KEEP_ALL, LIVE, Retention
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.panels import RunPanel


def falling_hit_run(n: int = 1000, retention: Retention = LIVE) -> RunModel:
    """10 tok/s (0.1 s a token of the run's clock); the hit rate falls from 80 % to 10 % at row 100,
    so CacheHitLow (under 30 % for 60 s) fires 600 rows later. A live source's model (bounded):
    its alert changes go into its event log."""
    run = RunModel(retention)
    run.add_token_rows({"wall_ms": [100.0] * n, "io_ms": [20.0] * n,
                        "cache_hit_pct": [80.0] * 100 + [10.0] * (n - 100)}, n)
    return run


def alert_events(run: RunModel) -> list[tuple[str, str | None, str]]:
    """The alert changes the run's event log holds (docs/events.md), oldest first."""
    return [(e.subject, e.old, e.new) for e in run.events.snapshot() if e.kind == "alert"]


async def test_a_firing_alert_is_in_the_title_and_the_run_panel_and_takes_no_focus():
    screen = ReplayScreen(falling_hit_run(retention=KEEP_ALL), title="falling")  # type: ignore[arg-type]
    app = BmoeTopApp(screen)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_until(pilot, lambda: screen.alerts.rows == 1000)
        focused = app.focused
        assert screen.alerts.state("CacheHitLow") is AlertState.FIRING
        await pilot_until(pilot, lambda: "▲ CacheHitLow" in app.query_one("#title").plain)
        panel = app.query_one(RunPanel)
        await pilot_until(pilot, lambda: "firing: hit 10.0 % < 30" in panel.text(), "the run panel's alert row")
        assert "CacheHitLow" in panel.text()
        assert app.focused is focused  # shown, never focused
        await pilot.press("space")  # the keys still work: the replay plays
        await pilot_until(pilot, lambda: screen.playback.playing, "the replay playing")


async def test_a_live_runs_alert_changes_go_into_its_event_log():
    """Every transition the screen is handed goes into a live model's event log, in order (the
    transitions come from the rules over another run: the wiring alone, whatever the repaints)."""
    from bmoe_top.tui.model.alerts import AlertEngine
    from bmoe_top.tui.settings import Settings

    transitions = AlertEngine(Settings().rules()).advance_run(falling_hit_run(retention=KEEP_ALL))
    assert [(t.rule, str(t.new)) for t in transitions] == [("CacheHitLow", "pending"), ("CacheHitLow", "firing")]
    run = RunModel(LIVE)
    screen = ReplayScreen(run, title="live")  # type: ignore[arg-type]
    async with BmoeTopApp(screen).run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen.on_alert_transitions(transitions)
        got = alert_events(run)
        assert got == [("CacheHitLow", "pending", "firing")]  # into firing: the pending wait is none
        detail = [e.detail for e in run.events.snapshot() if e.kind == "alert"]
        assert detail[0] == "10 at row 701 (70.1 s into the run)"


async def test_an_alert_that_goes_pending_and_back_records_no_event():
    # a rule near its threshold went pending and back 47 times in one live session, several in one
    # millisecond: each was an event, and the run panel's 4-row pending block came and went
    from bmoe_top.tui.model.alerts import Transition

    flaps = [Transition("TokSCollapse", AlertState.INACTIVE if i % 2 == 0 else AlertState.PENDING,
                        AlertState.PENDING if i % 2 == 0 else AlertState.INACTIVE, 40.0, float(i), i)
             for i in range(20)]
    run = RunModel(LIVE)
    screen = ReplayScreen(run, title="live")  # type: ignore[arg-type]
    async with BmoeTopApp(screen).run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen.on_alert_transitions(flaps)
        assert alert_events(run) == []
        screen.on_alert_transitions([Transition("TokSCollapse", AlertState.PENDING, AlertState.FIRING, 40.0, 30.0, 30),
                                     Transition("TokSCollapse", AlertState.FIRING, AlertState.RESOLVED, 60.0, 31.0,
                                                31)])
        assert alert_events(run) == [("TokSCollapse", "pending", "firing"), ("TokSCollapse", "firing", "resolved")]


async def test_ascii_terminals_get_a_plain_mark():
    BmoeTopApp.force_ascii = True
    try:
        screen = ReplayScreen(falling_hit_run(), title="falling")
        app = BmoeTopApp(screen)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot_until(pilot, lambda: "! CacheHitLow" in app.query_one("#title").plain)
    finally:
        BmoeTopApp.force_ascii = None


async def test_no_alert_no_mark():
    run = RunModel()
    run.add_token_rows({"wall_ms": [100.0] * 200, "io_ms": [20.0] * 200, "cache_hit_pct": [90.0] * 200}, 200)
    screen = ReplayScreen(run, title="fine")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_until(pilot, lambda: screen.alerts.rows == 200)
        title = app.query_one("#title").plain
        assert "▲" not in title and not screen.alerts.active()
        assert "firing" not in app.query_one(RunPanel).text()


async def test_a_file_replay_shows_its_alerts_but_records_no_event():
    """A file's replay evaluates the rules (the title shows a firing alert) but its event log stays
    empty: its alerts fired when the run ran, not now."""
    run = RunModel()
    run.add_token_rows({"wall_ms": [100.0] * 1000, "cache_hit_pct": [10.0] * 1000}, 1000)
    screen = ReplayScreen(run, title="file")  # type: ignore[arg-type]
    async with BmoeTopApp(screen).run_test(size=(160, 45)) as pilot:
        await pilot_until(pilot, lambda: screen.alerts.rows == 1000)
        assert screen.alerts.state("CacheHitLow") is AlertState.FIRING
        assert alert_events(run) == []
