"""A log table that follows its newest row (tui/widgets/tables.py ``SortTable(follow=True)``, the
Events tab): a cursor on the last row moves to the new last row as rows come; one moved up stays;
a sorted table keeps its cursor where it is. The Events tab opened on a log of earlier sessions
showed their oldest rows, this session's below the fold."""

from __future__ import annotations

from textual.app import App, ComposeResult

from bmoe_top.tui.present.tables import Column, Row, Table
from bmoe_top.tui.widgets.tables import SortTable


def log(n: int) -> Table:
    return Table("events", (Column("n", "n"), Column("what", "what", numeric=False)),
                 tuple(Row((str(i), f"event {i}"), (float(i), f"event {i}")) for i in range(n)))


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield SortTable(log(0), follow=True, id="t")


async def test_the_cursor_follows_the_newest_row_until_moved_up_and_not_in_a_sort():
    app = _One()
    async with app.run_test(size=(80, 20)) as pilot:
        t = app.query_one("#t", SortTable)
        t.set_table(log(40))  # the first rows: the newest in view
        await pilot.pause()
        dt = t.data_table
        assert dt.cursor_row == 39 and dt.scroll_y > 0
        t.set_table(log(45))
        await pilot.pause()
        assert dt.cursor_row == 44
        dt.move_cursor(row=10)
        t.set_table(log(50))  # read up the log: it stays there
        await pilot.pause()
        assert dt.cursor_row == 10
        dt.move_cursor(row=49)
        t.action_sort_next()  # sorted: the cursor stays
        await pilot.pause()
        at = dt.cursor_row
        t.set_table(log(55))
        await pilot.pause()
        assert dt.cursor_row == at
