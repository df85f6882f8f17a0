"""The Turns tabs (live / play and a session's replay) at 80x24, 120x40 and 200x60: every column
they show is drawn whole inside the table (a last column of prose: its heading), the others are
left out whole by the table rule (short headings first, then the columns marked to drop) and the
table says how many; the live table's `resident/budget MiB` ran off the right edge at 80 and 120
columns (`resident/bu`)."""

from __future__ import annotations

import sys

import pytest
from helpers import EMITTER
from helpers.cli_session import cli_session, six_requests, write_session
from helpers.prompt import one_turn_in_the_turns_tab
from helpers.waits import pilot_until
from textual.widgets import Static

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.present.turns import TURN_TABLE as REPLAY_TABLE
from bmoe_top.tui.screens.live import TURN_TABLE as LIVE_TABLE
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.tables import SortTable

SIZES = [(80, 24), (120, 40), (200, 60)]


def check_columns(sort_table: SortTable, columns, where: str) -> None:
    """Every shown column inside the table's width; the shown and the hidden are every column,
    and the hidden ones are counted on the table's header line."""
    table = sort_table.data_table
    width = table.scrollable_content_region.width
    shown = list(table.ordered_columns)
    x = 0
    for i, col in enumerate(shown):
        x += col.get_render_width(table)
        label = str(col.label)
        last_prose = i == len(shown) - 1 and not next(c for c in columns if c.key == col.key.value).numeric
        end = x if not last_prose else x - col.get_render_width(table) + len(label) + 2
        assert end <= width, f"{where}: column {label!r} ends at {end}, the table is {width} wide"
    labels = {c.key: c for c in columns}
    keys = [c.key.value for c in shown]
    assert all(k in labels for k in keys), where
    hidden = [c.label for c in columns if c.key not in keys]
    head = str(sort_table.query_one(".sort-head", Static).render())
    assert sort_table.hidden == hidden, where
    if hidden:
        assert f"{len(hidden)} column" in head and all(h in head for h in hidden), f"{where}: {head!r}"
    else:
        assert "hidden" not in head, where


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_replay_turns_tab_shows_its_columns_whole(size, tmp_path):
    app = BmoeTopApp(ReplayScreen(open_paths(write_session(tmp_path, cli_session(six_requests()))), title="session"))
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        table = app.query_one("#turns-table", SortTable)
        await pilot_until(pilot, lambda: table.data_table.row_count == 6, "the six requests")
        await pilot.pause()
        check_columns(table, REPLAY_TABLE, f"replay {size}")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_live_turns_tab_shows_its_columns_whole(size):
    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=size) as pilot:
            table = await one_turn_in_the_turns_tab(pilot, app, src)
            await pilot.pause()
            check_columns(table, LIVE_TABLE, f"live {size}")
    finally:
        src.close()
