"""Reading a :class:`~bmoe_top.tui.widgets.tables.SortTable` as the screen draws it (the
compositor's cells, not the table's model) and checking the table rule: a cell is drawn whole or
its column is left out, and the header line names the columns left out."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.widgets import Static

from bmoe_top.tui.widgets.tables import SortTable


def _screen_cells(app: Any) -> list[list[str]]:
    """The screen's lines as one string per cell (a wide character, then "" for its second cell)."""
    out = []
    for strip in app.screen._compositor.render_strips():
        line: list[str] = []
        for seg in strip:
            for ch in seg.text:
                line += [ch] + [""] * (cell_len(ch) - 1)
        out.append(line)
    return out


def drawn_rows(app: Any, table: SortTable) -> list[list[str]]:
    """The header and the rows on screen, each as its cells' drawn text (stripped), cut at the
    columns' widths as the DataTable has them."""
    dt = table.data_table
    region = dt.scrollable_content_region
    screen = _screen_cells(app)
    edges = []
    x = region.x - int(dt.scroll_x)
    for col in dt.ordered_columns:
        w = col.get_render_width(dt)
        edges.append((x, x + w))
        x += w
    rows = []
    for y in range(region.y, min(region.bottom, region.y + 1 + dt.row_count)):
        line = screen[y]
        rows.append(["".join(line[max(a, region.x):min(b, region.right)]).strip() for a, b in edges])
    return rows


def cut_cells(app: Any, table: SortTable) -> list[str]:
    """What breaks the rule on screen: a drawn heading or cell that is not its whole text (a last
    column of prose may run off the right edge: its start drawn), a column neither shown nor
    named on the header line."""
    t = table.table
    assert t is not None
    problems = []
    dt = table.data_table
    right = dt.scrollable_content_region.right
    shown = table.shown_cols
    drawn = drawn_rows(app, table)
    full = [table.shown_labels, *([r.cells[i] if i < len(r.cells) else "" for i in shown] for r in table.shown)]
    x = dt.scrollable_content_region.x
    ends = []
    for col in dt.ordered_columns:
        x += col.get_render_width(dt)
        ends.append(x)
    for y, (cells, whole) in enumerate(zip(drawn, full)):
        for j, (got, want) in enumerate(zip(cells, whole)):
            runs_off = j == len(shown) - 1 and not t.columns[shown[j]].numeric and ends[j] > right
            if got != want.strip() and not (runs_off and got and want.startswith(got)):
                where = "heading" if y == 0 else f"row {y}"
                problems.append(f"{where} {t.columns[shown[j]].key}: drawn {got!r} for {want!r}")
    hidden = [c.label for i, c in enumerate(t.columns) if i not in shown]
    if table.hidden != hidden:
        problems.append(f"hidden {table.hidden} but not shown {hidden}")
    head = str(table.query_one(".sort-head", Static).render())
    if hidden and f"{len(hidden)} column" not in head:
        problems.append(f"the header does not count the {len(hidden)} columns left out: {head!r}")
    return problems
