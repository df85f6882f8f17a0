"""The run screens' Events tab (tui/screens/base.py, docs/events.md) in a Textual pilot, over a
real poller of a real loopback HTTP server that stops: the source going down is a ``source``
event on screen and in the state folder's log, the table sorts and filters, and the next session
shows the earlier one's events."""

from __future__ import annotations

from helpers.scripted_http import Scripted
from helpers.waits import pilot_until
from textual.widgets import DataTable

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.jobs.event_file import default_path, log_files, read_events
from bmoe_top.tui.model import Status
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.widgets.tables import SortTable

DOWN = ("refused", "unreachable")


def _cells(table: SortTable) -> list[tuple[str, ...]]:
    return [r.cells for r in table.shown]


async def test_a_server_that_stops_is_a_source_event_on_screen_and_on_disk() -> None:
    srv = Scripted()
    poller = MetricsPoller(srv.url, interval=0.05, timeout=2)
    screen = MetricsAttachScreen(poller)
    app = BmoeTopApp(screen)
    try:
        async with app.run_test(size=(140, 36)) as pilot:
            run = screen.model
            await pilot_until(pilot, lambda: run.status == Status.OK, "the first good scrape")
            srv.close()  # the server stops: nothing listens on its port any more
            await pilot_until(pilot, lambda: any(e.new == "refused" for e in run.events.snapshot()),
                              "a source event for the refused connection")
            await pilot.press("e")
            assert screen._active_tab() == "events-tab"
            table = app.query_one("#events", SortTable)
            await pilot_until(pilot, lambda: any(c[4] == "refused" for c in _cells(table)), "the refused row")
            ours = [c for c in _cells(table) if c[6] == f"metrics: {srv.url}"]
            # down: refused, or unreachable first when the server closed during a scrape
            assert [(c[1], c[3], c[4]) for c in ours[:2]] == [("source", "empty", "connecting"),
                                                             ("source", "connecting", "ok")]
            assert ours[2][3] == "ok" and ours[2][4] in DOWN and ours[-1][4] == "refused"
            assert "refused" in ours[-1][5].lower()  # the poller's reason as the detail

            # the screen's `/` filters the table of the Events tab
            await pilot.press("slash", *"refused", "enter")
            await pilot_until(pilot, lambda: table.filter_text == "refused", "the filter")
            assert _cells(table) and all(any("refused" in c.lower() for c in row) for row in _cells(table))
            await pilot.press("slash", "escape")
            await pilot_until(pilot, lambda: table.filter_text == "", "the filter cleared")

            # a focused table sorts by the next column (s), then reverses (S)
            table.query_one(DataTable).focus()
            await pilot.press("s")
            assert table.sort_col == 0 and not table.descending  # the time, oldest first
            await pilot.press("S")
            assert table.descending and _cells(table)[0][4] == "refused"  # the newest first
        mine = [e for e in read_events(log_files(default_path()))[0].events if e.run == run.events.run]
        assert [(e.kind, e.old, e.new) for e in mine[:2]] == [("source", "empty", "connecting"),
                                                              ("source", "connecting", "ok")]
        assert mine[2].old == "ok" and mine[2].new in DOWN and mine[-1].new == "refused"
        kept = [e for e in run.events.snapshot() if e.run == run.events.run]
        # each event on disk once, as recorded (the poller runs on after the unmount)
        assert [e.to_dict() for e in mine] == [e.to_dict() for e in kept[:len(mine)]]
        assert screen.event_file is None  # closed with the screen
    finally:
        poller.stop()

    # the next session over another server shows the earlier one's events before its own
    srv2 = Scripted()
    poller2 = MetricsPoller(srv2.url, interval=0.05, timeout=2)
    screen2 = MetricsAttachScreen(poller2)
    app2 = BmoeTopApp(screen2)
    try:
        async with app2.run_test(size=(140, 36)) as pilot:
            await pilot_until(pilot, lambda: screen2.model.status == Status.OK, "the first good scrape")
            await pilot.press("e")
            table = app2.query_one("#events", SortTable)
            await pilot_until(pilot, lambda: any(c[6] == f"metrics: {srv2.url}" for c in _cells(table)),
                              "this session's events")
            sources = [c[6] for c in _cells(table)]
            assert f"metrics: {srv.url}" in sources
            assert sources.index(f"metrics: {srv.url}") < sources.index(f"metrics: {srv2.url}")
    finally:
        poller2.stop()
        srv2.close()


async def test_a_file_replay_writes_no_events(tmp_path) -> None:
    from helpers import synth

    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.screens.replay import ReplayScreen

    (tmp_path / "run.csv").write_bytes(synth.token_csv(32))
    screen = ReplayScreen(open_paths([str(tmp_path / "run.csv")]), title="r")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("e")
        assert screen._active_tab() == "events-tab"
        assert screen.event_file is None and screen.model.events.snapshot() == ()
        assert "0/0 rows" in str(app.query_one("#events .sort-head").render())
