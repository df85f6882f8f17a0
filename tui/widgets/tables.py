"""A table of a :class:`bmoe_top.tui.present.tables.Table` that sorts and filters: ``s`` sorts by
the next column (or click a header), ``S`` reverses; the screen's ``/`` search
(:mod:`bmoe_top.tui.widgets.search`) filters it (rows containing the text in any cell), ``n`` /
``N`` move its cursor through the rows shown. Sorting puts absent values last either way. The
sort is kept in the settings (``[sort.TABLE]``, the table's id) and used at the next start.

It shows the columns that fit its width by one rule (:func:`fit_columns`): every column whole, else
with the short labels, else without the columns marked to drop; a column is never cut in the
middle, and a table that leaves columns out says how many (:func:`hidden_note`). A screen whose
← / → scroll it (:meth:`SortTable.scroll_columns`) brings the columns left out in one by one,
the first column (the row's name) kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from bmoe_top.tui.present.tables import Column, Row, Table, filter_rows, sort_rows
from bmoe_top.tui.settings import SortSetting
from bmoe_top.tui.widgets.base import remember, settings_of
from bmoe_top.tui.widgets.keymap import Key, bindings
from bmoe_top.tui.widgets.palette import KIND_STYLE
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.search import SearchCountChanged

__all__ = ["TABLE_KEYS", "SortTable", "fit_columns", "hidden_note"]


#: A focused sortable table's keys (:mod:`bmoe_top.tui.widgets.keymap`, scope ``table``).
TABLE_KEYS: tuple[Key, ...] = (
    Key("s", "sort_next", "sort by the next column", "table", footer="sort", palette=False),
    Key("S", "sort_reverse", "reverse the sort", "table", palette=False),
)


class SortTable(Vertical):
    """The table, a one-line header (title, sort, filter, shown/total rows) and a note line; a
    :class:`~bmoe_top.tui.widgets.search.Searchable` (the filter is the screen's ``/`` search)."""

    DEFAULT_CSS = """
    SortTable { height: 1fr; }
    SortTable > .sort-head { height: auto; max-height: 2; padding: 0 1; }
    SortTable > .sort-note { height: auto; max-height: 3; padding: 0 1; color: $text-muted; }
    SortTable > DataTable { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings(TABLE_KEYS, scope=("table",))

    def __init__(self, table: Table | None = None, *, scrolls: bool = False, follow: bool = False,
                 **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.table = table
        #: a log (rows appended at the end, oldest first): in the table's own order, a cursor on
        #: the last row (or no row yet) moves to the new last row when rows come, as ``tail -f``
        self.follow = follow
        #: whether the screen's ← / → scroll the columns (:meth:`scroll_columns`); the header
        #: line then says so for the columns left out
        self.scrolls = scrolls
        #: columns after the first (the row's name, always shown) scrolled out on the left
        self.col_start = 0
        self.sort_col: int | None = None
        self.descending = False
        self.filter_text = ""
        self.shown: list[Row] = []
        #: labels of the columns the width leaves out
        self.hidden: list[str] = []
        #: indices (into the table's columns) of the columns shown, in order, and their labels
        self.shown_cols: list[int] = []
        self.shown_labels: list[str] = []
        #: the shown columns' widths (cells, without the padding), as given to the DataTable
        self.col_widths: list[int] = []

    def compose(self) -> ComposeResult:
        yield Static(classes="sort-head")
        dt: DataTable[Text] = DataTable(zebra_stripes=True, cursor_type="row")
        yield dt
        yield Static(classes="sort-note")

    def on_mount(self) -> None:
        self._kept_sort()
        self.populate()

    def set_table(self, table: Table) -> None:
        """Show ``table`` (keeping the sort and the filter; new columns: the kept sort, if any)."""
        same_cols = self.table is not None and [c.key for c in self.table.columns] == [c.key for c in table.columns]
        self.table = table
        if not same_cols:
            self.sort_col = None
            self.col_start = 0
            self._kept_sort()
        self.populate(rebuild_columns=not same_cols)

    @property
    def settings_name(self) -> str:
        """The table's name in the settings (``[sort.NAME]``): its id."""
        return self.id or ""

    def _kept_sort(self) -> None:
        """The sort the settings keep for this table, when it names one of its columns."""
        kept = settings_of(self).sort.get(self.settings_name) if self.settings_name else None
        if kept is None or self.table is None:
            return
        keys = [c.key for c in self.table.columns]
        if kept.column in keys:
            self.sort_col, self.descending = keys.index(kept.column), kept.descending

    @property
    def data_table(self) -> DataTable[Text]:
        return self.query_one(DataTable)

    def populate(self, rebuild_columns: bool = True) -> None:
        if self.table is None or not self.query(DataTable):
            return
        t = self.table
        dt = self.data_table
        rows = filter_rows(t.rows, self.filter_text)
        if self.sort_col is not None:
            rows = sort_rows(rows, self.sort_col, self.descending)
        if self.filter_text and len(rows) != len(self.shown):
            self.post_message(SearchCountChanged())
        cursor = dt.cursor_row
        follow = self.follow and self.sort_col is None and (not self.shown or cursor >= len(self.shown) - 1)
        self.shown = rows
        labels, shown = self._fit(t, rows)
        # Each column as wide as its widest cell shown, given to the DataTable: its own widths
        # (measured when it is next idle) come after it may have drawn, and its line caches keep
        # what it drew at the widths before (cells cut after a resize).
        widths = [max([cell_len(label), *(cell_len(r.cells[i]) for r in rows if i < len(r.cells))])
                  for i, label in zip(shown, labels)]
        if (rebuild_columns or not dt.columns
                or (labels, shown, widths) != (self.shown_labels, self.shown_cols, self.col_widths)):
            dt.clear(columns=True)
            for i, label, w in zip(shown, labels, widths):
                c = t.columns[i]
                dt.add_column(Text(label, justify="right" if c.numeric else "left", end=""), key=c.key, width=w)
        else:
            dt.clear()
        self.shown_cols, self.shown_labels, self.col_widths = shown, labels, widths
        self.hidden = [c.label for i, c in enumerate(t.columns) if i not in shown]
        for r in rows:
            style = KIND_STYLE.get(r.kind, "")
            dt.add_row(*[Text(r.cells[i] if i < len(r.cells) else "", style=style,
                              justify="right" if t.columns[i].numeric else "left", end="", no_wrap=True)
                         for i in shown])
        if rows:
            dt.move_cursor(row=len(rows) - 1 if follow else min(max(0, cursor), len(rows) - 1))
        self._draw_head()
        self.query_one(".sort-note", Static).update(safe_text(t.note))

    def _draw_head(self) -> None:
        """The header (two lines at most): the title, the columns left out, the sort, the filter,
        the rows shown and the keys; where that takes more lines, the columns left out are only
        counted, then the keys go (:meth:`head_text`)."""
        width = self.size.width - 2
        console = self.app.console
        for level in range(3):
            head = self.head_text(level)
            if width <= 0 or len(head.wrap(console, width)) <= 2:
                break
        self.query_one(".sort-head", Static).update(head)

    def head_text(self, level: int = 0) -> Text:
        """The header at shortening ``level``: 0 whole, 1 the hidden columns counted not named,
        2 also without the keys."""
        t = self.table
        head = safe_text(t.title if t is not None else "", "bold")
        if self.hidden:
            note = hidden_note(self.hidden, self.scrolls)
            if level >= 1:
                note = note.split(" (", 1)[0] + ":" + note.rsplit(":", 1)[1]
            head.append("   " + note, style="dim")
        if t is not None and self.sort_col is not None:
            head.append(f"   sorted by {t.columns[self.sort_col].label} {'(descending)' if self.descending else ''}",
                        style="dim")
        if self.filter_text:
            head.append("   filter ", style="dim")
            head.append_text(safe_text(repr(self.filter_text), "bold"))
        head.append(f"   {len(self.shown)}/{len(t.rows) if t is not None else 0} rows", style="dim")
        if level < 2:
            head.append("   s sort · S reverse · / filter", style="dim")
        return head

    def _fit(self, t: Table, rows: list[Row]) -> tuple[list[str], list[int]]:
        """The column labels and which columns fit the width (:func:`fit_columns`, the sort's
        arrow on its column's label); columns left out are named on the header line."""
        marks = {self.sort_col: " ▼" if self.descending else " ▲"} if self.sort_col is not None else {}
        order = [0, *range(1 + self.col_start, len(t.columns))] if t.columns else []
        # scrolled: the columns in their order from the first one scrolled to (none skipped)
        cols = [t.columns[i] if not self.col_start else replace(t.columns[i], drop=0) for i in order]
        labels, shown = fit_columns(cols,
                                    [[r.cells[i] if i < len(r.cells) else "" for i in order] for r in rows],
                                    self.size.width - 2, {order.index(k): v for k, v in marks.items() if k in order})
        return labels, [order[j] for j in shown]

    def scroll_columns(self, d: int) -> bool:
        """Scroll the columns after the first one column right (``d`` 1: the next column left
        out on the right comes in) or left (``d`` -1); False when there is nothing that way."""
        if self.table is None:
            return False
        if d > 0:
            shown_after = [i for i in self.shown_cols if i > 0]
            if not any(i > max(shown_after, default=0) for i in range(1, len(self.table.columns))):
                return False
            self.col_start += 1
        else:
            if self.col_start == 0:
                return False
            self.col_start -= 1
        self.populate(rebuild_columns=True)
        return True

    def on_resize(self, event: events.Resize) -> None:
        if self.table is not None and self._fit(self.table, self.shown) != (self.shown_labels, self.shown_cols):
            self.populate(rebuild_columns=True)
        elif self.table is not None and self.query(".sort-head"):
            self._draw_head()

    # ----------------------------------------------------------------------------- actions
    def sort_by(self, col: int, descending: bool | None = None) -> None:
        """Sort by column ``col`` (numbers descending first, text ascending, unless given)."""
        if self.table is None:
            return
        col = col % len(self.table.columns)
        if descending is None:
            descending = self.table.columns[col].numeric
        self.sort_col, self.descending = col, descending
        self.populate()
        if self.settings_name:
            remember(self, f"sort.{self.settings_name}", SortSetting(self.table.columns[col].key, descending))

    def action_sort_next(self) -> None:
        if self.table is None:
            return
        self.sort_by(0 if self.sort_col is None else self.sort_col + 1)

    def action_sort_reverse(self) -> None:
        if self.sort_col is None:
            self.sort_by(0)
            return
        self.sort_by(self.sort_col, not self.descending)

    # ---------------------------------------------------------------------- the / search
    def search(self, query: str) -> None:
        """Show the rows with ``query`` in a cell ("": every row)."""
        self.filter_text = query
        self.populate(rebuild_columns=False)

    def match_count(self) -> int:
        """Rows shown for the query (0 without one)."""
        return len(self.shown) if self.filter_text else 0

    def show_match(self, index: int) -> None:
        """The cursor on shown row ``index``, scrolled into view."""
        if self.shown:
            self.data_table.move_cursor(row=min(max(0, index), len(self.shown) - 1), scroll=True)

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        i = self.shown_cols[event.column_index] if event.column_index < len(self.shown_cols) else event.column_index
        if self.sort_col == i:
            self.sort_by(i, not self.descending)
        else:
            self.sort_by(i)


#: Cells of a last column of prose shown whole whatever its longer cells (a word: ``cancelled``);
#: past that its text may run off the right edge.
PROSE_WHOLE = 16


def _need(columns: Sequence[Column], labels: list[str], cell_w: list[int], shown: list[int]) -> int:
    """Cells the ``shown`` columns take (a last column of prose: its heading, and its cells up to
    :data:`PROSE_WHOLE`)."""
    last = shown[-1]
    tail = cell_w[last] if columns[last].numeric else \
        min(cell_w[last], max(cell_len(labels[last]), PROSE_WHOLE) + 2)
    return sum(cell_w[j] for j in shown[:-1]) + tail


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int,
                marks: Mapping[int, str] | None = None) -> tuple[list[str], list[int]]:
    """The labels and the indices (in order) of the ``columns`` that fit ``width`` cells whole
    with the cells of ``rows``: every column with the full labels, else with the short ones, else
    without the columns marked to ``drop`` first (the highest first), then without the rightmost
    (one column always stays). A last column of prose needs its heading's width and its cells'
    up to :data:`PROSE_WHOLE` (longer text may run off the right edge); ``marks`` adds a suffix
    to a column's label (a sort arrow)."""
    marks = marks or {}
    n = len(columns)
    labels: list[str] = []
    cell_w: list[int] = []
    shown = list(range(n))
    for short in (False, True):
        labels = [((c.short or c.label) if short else c.label) + marks.get(i, "") for i, c in enumerate(columns)]
        if width <= 0 or not n:
            return labels, shown
        cell_w = [max([cell_len(labels[j]), *(cell_len(r[j]) for r in rows if j < len(r))]) + 2 for j in range(n)]
        if _need(columns, labels, cell_w, shown) <= width:
            return labels, shown
    order = sorted((j for j in range(n) if columns[j].drop > 0), key=lambda j: (-columns[j].drop, -j))
    while len(shown) > 1 and _need(columns, labels, cell_w, shown) > width:
        shown.remove(order.pop(0) if order else shown[-1])
    return [labels[j] for j in shown], shown


def hidden_note(hidden: Sequence[str], scrolls: bool = False) -> str:
    """What a table that leaves columns out says: ``2 columns hidden (n_prompt, n_past): widen
    the terminal`` (``scrolls``: ``← / → scroll`` when the screen's arrows bring them in)."""
    n = len(hidden)
    how = "← / → scroll" if scrolls else "widen the terminal"
    return f"{n} column{'s' if n != 1 else ''} hidden ({', '.join(hidden)}): {how}"


