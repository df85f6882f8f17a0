"""A sortable table keeps the rule through resizes (120 -> 100 -> 80 -> 120 columns): every cell
drawn on screen is its whole text or its column is left out and counted. The DataTable drew the
rows refilled on a resize before it measured their cells, and kept those lines: a compare of two
real runs read `62` for `621.1 ±3.5` and `comput` for `compute [ms/tok]`, even back at 120."""

from __future__ import annotations

import sys

from helpers import EMITTER
from helpers.cli_session import cli_session, six_requests, write_session
from helpers.drawn_table import cut_cells
from helpers.prompt import one_turn_in_the_turns_tab
from helpers.waits import pilot_until

from bmoe_top.tui.analysis.compare import compare
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.tables import SortTable

WIDTHS = (100, 80, 120)


async def _resize_and_check(pilot, app, table: SortTable, height: int, where: str) -> None:
    """At each width in turn: wait for the table laid out at it and drawn, then no cut cell."""
    await pilot_until(pilot, lambda: table.data_table.row_count == len(table.shown) > 0, f"{where}: rows")
    assert not cut_cells(app, table), f"{where} at 120:\n" + "\n".join(cut_cells(app, table))
    for w in WIDTHS:
        await pilot.resize_terminal(w, height)
        await pilot_until(pilot, lambda w=w: app.screen.size.width == w and table.region.right <= w
                          and table.data_table.row_count == len(table.shown), f"{where}: laid out at {w}")
        await pilot.pause()
        problems = cut_cells(app, table)
        assert not problems, f"{where} at {w}x{height}:\n" + "\n".join(problems)


async def test_compare_summary_keeps_cells_whole_through_resizes(real_runs) -> None:
    a = real_runs / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    b = real_runs / "bigmoeonedge-2026-07-12-pr23" / "gemma_base.csv"
    loaded = J.load_arms(J.parse_arms([str(a), str(b)], []))
    app = compare_app(loaded, compare(J.arm_inputs(loaded)), "compare")
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.main.query_one("#summary-table", SortTable)
        await _resize_and_check(pilot, app, table, 30, "compare summary")


async def test_replay_turns_keep_cells_whole_through_resizes(tmp_path) -> None:
    app = BmoeTopApp(ReplayScreen(open_paths(write_session(tmp_path, cli_session(six_requests()))), title="session"))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("5")
        table = app.query_one("#turns-table", SortTable)
        await pilot_until(pilot, lambda: table.data_table.row_count == 6, "the six requests")
        await _resize_and_check(pilot, app, table, 30, "replay turns")


async def test_live_turns_keep_cells_whole_through_resizes() -> None:
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            table = await one_turn_in_the_turns_tab(pilot, app, src)
            await _resize_and_check(pilot, app, table, 30, "live turns")
    finally:
        src.close()
