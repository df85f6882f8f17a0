"""The instances table widget (tui/widgets/fleet_table.py) in a Textual pilot, on 5,000 generated
rows: it builds only the rows on screen, the cursor keys move over all of them, columns scroll
sideways whole (never cut: ``= compute`` is shown whole or not at all) with the header saying how
many are hidden on each side, long names are shortened with a rule, Enter and clicks post their
messages; and the pure layout rules."""

from __future__ import annotations

import numpy as np
import pytest
from textual.app import App, ComposeResult

from bmoe_top.tui.fleet.table import Cell, CellState, InstanceRow, InstanceState, column_keys
from bmoe_top.tui.widgets.fleet_table import (
    FIXED,
    GAP,
    SCROLLED,
    VIEW_COLUMNS,
    FleetTableView,
    layout,
    shorten,
    value_of,
)

N = 5000


def make_rows(n: int = N, name_len: int = 0) -> list[InstanceRow]:
    rows = []
    for i in range(n):
        cells = {k: Cell(float(i % 97) + 0.5, CellState.OK, 0.0) for k in column_keys()}
        name = f"10.0.{i // 200}.{i % 200}:8080" if not name_len else f"{'long-host-name-' * 8}{i}"[-name_len:]
        spark = {k: np.linspace(0, i % 7, 12) for k in column_keys()} | {"up": np.ones(12)} if i < 40 else {}
        rows.append(InstanceRow(job="bmoe", instance=name, state=InstanceState.UP, last_up_age_s=0.0, restarts=0,
                                cells=cells, spark=spark, rank=i + 1))
    return rows


class One(App[None]):
    def __init__(self, rows: list[InstanceRow]) -> None:
        super().__init__()
        self.rows = rows
        self.got: list[object] = []

    def compose(self) -> ComposeResult:
        yield FleetTableView()

    def on_mount(self) -> None:
        view = self.query_one(FleetTableView)
        view.show(self.rows)
        view.focus()

    def on_fleet_table_view_selected(self, event: FleetTableView.Selected) -> None:
        self.got.append(event.key)

    def on_fleet_table_view_header_clicked(self, event: FleetTableView.HeaderClicked) -> None:
        self.got.append(event.column.key)


def screen_text(view: FleetTableView) -> list[str]:
    return [view.render_line(y).text for y in range(view.size.height)]


async def test_only_the_rows_on_screen_are_built_and_the_cursor_reaches_every_row():
    rows = make_rows()
    app = One(rows)
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(FleetTableView)
        await pilot.pause()
        on_screen = len(view.visible_rows())
        assert 10 <= on_screen <= 16 and len(view._values) <= on_screen  # 2 lines a row, a header
        lines = screen_text(view)
        assert lines[1].startswith("  10.0.0.0:8080") and "10.0.0.13:8080" in "\n".join(lines)
        await pilot.press("end")
        assert view.cursor_row == N - 1 and view.selected == ("bmoe", "10.0.24.199:8080")
        await pilot.pause()
        assert "10.0.24.199:8080" in "\n".join(screen_text(view)) and len(view._values) <= 2 * on_screen
        await pilot.press("home", "pagedown", "down")
        assert view.cursor_row == (view.scrollable_content_region.height - 1) // 2 + 1
        await pilot.press("enter")
        await pilot.pause()
        assert app.got == [rows[view.cursor_row].key]
        # a row read without detail has no sparkline: blank, never made up
        view.move_cursor(len(rows) - 1)
        await pilot.pause()
        assert not any(ch in screen_text(view)[-1] for ch in "▁▂▃▄▅▆▇█")
        view.move_cursor(0)
        await pilot.pause()
        assert any(ch in screen_text(view)[2] for ch in "▁▂▃▄▅▆▇█")  # a row read in detail has them


async def test_columns_scroll_sideways_whole_and_the_header_says_how_many_are_hidden():
    app = One(make_rows(60))
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(FleetTableView)
        await pilot.pause()
        header = view.render_line(0).text
        drawn = [c for c, _w, _x in view._current_layout().columns]
        hidden = len(VIEW_COLUMNS) - len(drawn)
        assert hidden > 0 and header.rstrip().endswith(f"{hidden} more ›")
        for c in drawn:  # every drawn header whole
            assert c.label in header
        await pilot.press("right", "right", "right", "right", "right")
        await pilot.pause()
        header = view.render_line(0).text
        lay = view._current_layout()
        assert lay.hidden_left == 5 and "‹5" in header and header.startswith("instance")
        for c, _w, _x in lay.columns:
            assert c.label in header, c.label  # "= compute" whole, never "mpute"
        assert "mpute" not in header.replace("= compute", "")
        await pilot.press(*["right"] * 20)
        assert view._current_layout().hidden_right == 0  # it stops at the last column
        await pilot.press(*["left"] * 20)
        assert view.first_col == 0 and view._current_layout().hidden_left == 0
        # a click on a header posts it
        x = view.header_x("job")
        await pilot.click(FleetTableView, offset=(x + 1, 0))
        assert app.got == ["job"]


async def test_long_names_are_shortened_with_a_rule():
    app = One(make_rows(30, name_len=70))
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(FleetTableView)
        await pilot.pause()
        line = view.render_line(1).text
        w = view._current_layout().columns[0][1]
        assert w == int(80 * 0.4) and "…" in line[:w + 2]
        name = view.rows[0].instance
        shown = line[2:w].strip() if line.startswith("  ") else line[:w]
        assert shown.endswith(name[-3:]) and shown.startswith(name[:3])
        assert value_of(view.get_row(view.rows[0].key)[1]) == "bmoe"


@pytest.mark.parametrize(("text", "width", "want"), [
    ("10.0.0.1:8080", 20, "10.0.0.1:8080"), ("10.0.0.1:8080", 9, "10.0…8080"), ("abc", 1, "…"), ("abc", 0, ""),
    ("ｗｉｄｅ-name", 6, "ｗ…ame"), ("ｗｉｄｅ-name", 4, "…me")])
def test_shorten_keeps_head_and_tail(text, width, want):
    assert shorten(text, width) == want


def test_layout_draws_whole_columns_and_counts_the_hidden_ones():
    widths = {c.key: 10 for c in VIEW_COLUMNS}
    wide = layout(widths, 1000, 0)
    assert len(wide.columns) == len(VIEW_COLUMNS) and wide.hidden_left == wide.hidden_right == 0
    narrow = layout(widths, 60, 0)
    assert narrow.columns[0][0] is FIXED and narrow.hidden_left == 0
    assert len(narrow.columns) - 1 + narrow.hidden_right == len(SCROLLED)
    assert all(x + w <= 60 for _c, w, x in narrow.columns)
    assert narrow.right_x + len(f"  {narrow.hidden_right} more ›") <= 60
    scrolled = layout(widths, 60, 3)
    assert scrolled.hidden_left == 3 and scrolled.columns[1][0] is SCROLLED[3]
    assert scrolled.columns[1][2] == 10 + len("‹3 ") and narrow.columns[1][2] == 10 + GAP
