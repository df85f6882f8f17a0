"""The fleet's instances table: one row per instance, a column per number, each with a sparkline
of the window under it (docs/fleet.md "The screen").

:class:`FleetTableView` is a line-API widget (a row cursor, header clicks, the instance column
fixed, the others scrolled sideways a whole column at a time) over
:class:`~bmoe_top.tui.fleet.table.InstanceRow` rows in the order the screen decided (sorted,
filtered): it builds and draws only the rows on screen, so 5,000 rows cost what 20 do. The cells
are built by the pure functions here: :func:`cell_text` (a cell's number, or the word for why
there is none: ``not exported``, ``no data``, ``undefined``, ``error``, never 0; a stale value
with its age), :func:`spark_text` (the window folded into the column's width, ``·`` where there
was no value) and :func:`cell_lines` (with sparklines, "not exported" takes the cell's two
lines). Text is shown whole, or shortened with a rule (:func:`shorten`: ``10.0.…:8080``), or its
column is left out whole; the header says how many columns are hidden on each side
(:func:`layout`). Label values (instance, job) are drawn through
:func:`bmoe_top.parsers.sanitize.sanitize`, never parsed as markup.

The worst instances stand out: a down or gone row has its instance and state in bold red with
``✖``; the highest flash wait share and the lowest hit % are marked ``▲`` / ``▼`` in bold.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import BindingType
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.fleet.queries import COLUMN_BY_KEY
from bmoe_top.tui.fleet.table import Cell, CellState, InstanceRow, InstanceState, Key
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.base import ascii_strip, look_of, truecolor_filters
from bmoe_top.tui.widgets.lines import blank, strip
from bmoe_top.tui.widgets.palette import EIGHTHS, NO_DATA_GLYPH

__all__ = ["FLEET_TABLE_KEYS", "ViewColumn", "VIEW_COLUMNS", "SORT_KEYS", "FleetTableView", "Layout", "cell_text",
           "cell_lines",
           "spark_text", "age_text", "layout", "row_cells", "num_text", "shorten", "value_of", "STATE_WORDS"]

#: Narrowest a sparkline gets (cells).
SPARK_MIN = 7

DOWN_STYLE = "bold #e06c75"
WORST_STYLE = "bold #e5c07b"
ABSENT_STYLE = "italic #7f848e"
STALE_STYLE = "italic #d19a66"
ERROR_STYLE = "bold #e06c75"
SPARK_STYLE = "#56b6c2"
UP_STYLE = "#98c379"

#: A cell state without a number -> its word.
STATE_WORDS = {CellState.UNDEFINED: "undefined", CellState.NOT_EXPORTED: "not exported",
               CellState.NO_DATA: "no data", CellState.ERROR: "error"}


@dataclass(frozen=True, slots=True)
class ViewColumn:
    """A table column: ``key`` (the column key, also the DataTable's), ``label`` (header),
    ``sort`` (the :func:`~bmoe_top.tui.fleet.table.sort_rows` key), ``spark`` (the row's spark
    key drawn under it, or ``None``), ``digits``, ``scale`` (a fixed sparkline range, else 0 to
    the window's maximum)."""

    key: str
    label: str
    sort: str
    spark: str | None = None
    digits: int = 1
    scale: tuple[float, float] | None = None


def _col(key: str, label: str, digits: int = 1, scale: tuple[float, float] | None = None) -> ViewColumn:
    return ViewColumn(key, label, key, key, digits, scale)


#: The columns, left to right. The split reads as its sum: wall = compute + flash wait + mgmt, in
#: ms per generated token.
VIEW_COLUMNS: tuple[ViewColumn, ...] = (
    ViewColumn("instance", "instance", "instance"),
    ViewColumn("job", "job", "job"),
    ViewColumn("state", "state", "state", "up", scale=(0.0, 1.0)),
    _col("tok_s", COLUMN_BY_KEY["tok_s"].label),
    _col("prompt_tok_s", COLUMN_BY_KEY["prompt_tok_s"].label),
    _col("hit_pct", COLUMN_BY_KEY["hit_pct"].label, scale=(0.0, 100.0)),
    _col("read_mib_s", COLUMN_BY_KEY["read_mib_s"].label, 2),
    _col("wall_ms", "wall ms"),
    _col("compute_ms", "= compute"),
    _col("flash_ms", "+ flash"),
    _col("mgmt_ms", "+ mgmt", 2),
    _col("stall_share", "flash %", scale=(0.0, 100.0)),  # the short header of flash/wall %
    ViewColumn("resident", "res/budget MiB", "resident_mib", "resident_mib", 2),
    ViewColumn("requests", "proc/defer", "requests_processing", "requests_processing", 0),
)

#: Every sort key, in column order (``rank`` = worst first is the screen's default).
SORT_KEYS: tuple[str, ...] = tuple(c.sort for c in VIEW_COLUMNS)


def age_text(s: float | None) -> str:
    """An age in seconds, short: ``0s``, ``42s``, ``3m``, ``2h``; ``?`` when unknown."""
    if s is None or not math.isfinite(s):
        return "?"
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.0f}h"


def num_text(v: float, digits: int = 1) -> str:
    """A number as the table shows it: :func:`~bmoe_top.tui.present.numbers.fmt`, and a count
    (``digits`` 0) of a whole value without decimals."""
    return fmt(int(v) if digits == 0 and float(v).is_integer() else v, digits)


def cell_text(cell: Cell, digits: int = 1) -> tuple[str, str]:
    """(text, style) of one cell: the number (``ok``), the number and its age (``stale``: the
    newest value in the window), or the state's word (:data:`STATE_WORDS`)."""
    if cell.state is CellState.OK and cell.value is not None:
        return num_text(cell.value, digits), ""
    if cell.state is CellState.STALE:
        v = "–" if cell.value is None else num_text(cell.value, digits)
        return f"{v} ({age_text(cell.age_s)})", STALE_STYLE
    return STATE_WORDS[cell.state], ERROR_STYLE if cell.state is CellState.ERROR else ABSENT_STYLE


def _pair(a: Cell, b: Cell, digits: int) -> tuple[str, str]:
    """``a/b`` (resident/budget, processing/deferred); one word when neither has a number."""
    ta, sa = cell_text(a, digits)
    tb, sb = cell_text(b, digits)
    if a.state is b.state and a.state not in (CellState.OK, CellState.STALE):
        return ta, sa
    return f"{ta}/{tb}", sa or sb


def spark_bins(v: np.ndarray, width: int) -> np.ndarray:
    """``v`` folded into ``width`` bins (mean of each bin's finite points; NaN where none);
    with fewer points than bins a point spans several bins."""
    n = int(v.size)
    if n == 0 or width <= 0:
        return np.full(max(0, width), np.nan)
    lo = (np.arange(width) * n) // width
    ok = np.isfinite(v)
    s = np.add.reduceat(np.where(ok, v, 0.0), lo)
    c = np.add.reduceat(ok.astype(np.float64), lo)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = np.where(c > 0, s / np.where(c > 0, c, 1.0), np.nan)
    return out


def spark_text(v: np.ndarray | None, width: int, scale: tuple[float, float] | None = None) -> str:
    """A sparkline of ``v`` in ``width`` cells: ``▁`` (the scale's bottom, 0 for rates) to ``█``,
    ``·`` where a bin had no value; blank when the window had no value at all."""
    if v is None or width <= 0 or not np.isfinite(v).any():
        return " " * max(0, width)
    b = spark_bins(v, width)
    fin = np.isfinite(b)
    lo, hi = scale if scale is not None else (min(0.0, float(b[fin].min())), float(b[fin].max()))
    # in halves: the span of -1e308 .. 1e308 is no float, half of it is
    span = hi / 2 - lo / 2 if hi > lo else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        level = np.rint(np.clip((b / 2 - lo / 2) / span, 0.0, 1.0) * 7)
    idx = np.where(fin, np.nan_to_num(level), 8).astype(np.int64)
    return "".join(_SPARK_GLYPHS[idx].tolist())


#: The sparkline's glyphs by level (0: the bottom .. 7: the top) and 8: no value.
_SPARK_GLYPHS = np.array([*EIGHTHS[1:], NO_DATA_GLYPH])


def _state(row: InstanceRow) -> tuple[str, str]:
    if row.state is InstanceState.UP:
        return "up", UP_STYLE
    if row.state in (InstanceState.DOWN, InstanceState.GONE):
        return f"{row.state.value} {age_text(row.last_up_age_s)}" if row.last_up_age_s is not None \
            else row.state.value, DOWN_STYLE
    return "unknown", ABSENT_STYLE


def row_values(row: InstanceRow) -> dict[str, tuple[str, str]]:
    """Column key -> (text, style) of the value line (label values sanitised)."""
    bad = row.state in (InstanceState.DOWN, InstanceState.GONE)
    out: dict[str, tuple[str, str]] = {
        "instance": (("✖ " if bad else "  ") + sanitize(row.instance), DOWN_STYLE if bad else "bold"),
        "job": (sanitize(" ".join([row.job, *(f"{k}={v}" for k, v in row.labels.items())])), ""),
        "state": _state(row),
        "resident": _pair(row.cells["resident_mib"], row.cells["budget_mib"], 2),
        "requests": _pair(row.cells["requests_processing"], row.cells["requests_deferred"], 0),
    }
    for c in VIEW_COLUMNS:
        if c.key not in out:
            text, style = cell_text(row.cells[c.key], c.digits)
            if c.key == "stall_share" and "highest_stall" in row.flags:
                text, style = text + " ▲", WORST_STYLE
            elif c.key == "hit_pct" and "lowest_hit" in row.flags:
                text, style = text + " ▼", WORST_STYLE
            out[c.key] = (text, style)
    return out


def column_widths(rows: Sequence[dict[str, tuple[str, str]]], sparks: bool, sort: str = "") -> dict[str, int]:
    """Each column's width: its header (with the sort mark when ``sort`` is its key), its widest
    value, and (with sparklines) ``SPARK_MIN``."""
    out = {}
    word = STATE_WORDS[CellState.NOT_EXPORTED]
    for c in VIEW_COLUMNS:
        w = max([len(c.label) + (2 if c.sort == sort else 0)] +
                [len("exported") if sparks and r[c.key][0] == word else len(r[c.key][0]) for r in rows])
        if sparks and c.spark is not None:
            w = max(w, SPARK_MIN)
        out[c.key] = w
    return out


def _sub(row: InstanceRow, key: str) -> str:
    """The second line of a cell without a sparkline (instance: restarts in the window)."""
    if key == "instance" and row.restarts:
        return f"  ↻ {row.restarts} restart" + ("s" if row.restarts > 1 else "")
    return ""


def cell_lines(row: InstanceRow, c: ViewColumn, value: tuple[str, str], w: int,
               sparks: bool) -> list[tuple[str, str]]:
    """One cell's lines, each (text of ``w`` cells, style): the value (numbers right-aligned; the
    instance and the job shortened with a rule when wider than ``w``: :func:`shorten`), and with
    ``sparks`` the sparkline of the window under it ("not exported" takes both lines, so the
    column stays as narrow as its numbers)."""
    text, style = value
    if sparks and text == STATE_WORDS[CellState.NOT_EXPORTED]:
        return [("not".rjust(w), style), ("exported".rjust(w), style)]
    if c.spark is None or c.key == "state":
        line = shorten(text, w)
        line += " " * (w - cell_len(line))
    else:
        line = text.rjust(w)
    out = [(line, style)]
    if sparks:
        if c.spark is not None:
            arr = row.spark.get(c.spark)
            style_s = (UP_STYLE if arr is not None and np.nanmin(arr) == 1 else DOWN_STYLE) \
                if c.key == "state" and arr is not None and np.isfinite(arr).any() else SPARK_STYLE
            out.append((spark_text(arr, w, c.scale), style_s))
        else:
            out.append((shorten(_sub(row, c.key), w).ljust(w), ABSENT_STYLE))
    return out


def row_cells(row: InstanceRow, values: dict[str, tuple[str, str]], widths: dict[str, int],
              sparks: bool) -> list[Text]:
    """The row's cells in :data:`VIEW_COLUMNS` order, as Rich text (:func:`cell_lines`, one line
    each)."""
    cells = []
    for c in VIEW_COLUMNS:
        t = Text(no_wrap=True)
        for i, (line, style) in enumerate(cell_lines(row, c, values[c.key], widths[c.key], sparks)):
            t.append(("\n" if i else "") + line, style=style)
        cells.append(t)
    return cells


def value_of(cell: Text) -> str:
    """What a drawn cell says, without its sparkline (a two-line "not exported" as one)."""
    lines = [ln.strip() for ln in cell.plain.split("\n")]
    if lines[:2] == ["not", "exported"]:
        return STATE_WORDS[CellState.NOT_EXPORTED]
    return lines[0]


def header_label(c: ViewColumn, sort: str, descending: bool) -> Text:
    """The header of ``c``, with ``▼``/``▲`` when the table is sorted by it."""
    mark = (" ▼" if descending else " ▲") if c.sort == sort else ""
    return Text(c.label + mark, style="bold" if mark else "", no_wrap=True)


def row_key(*key: str) -> str:
    """A row's key as one string: its job, instance and other grouping labels (an address may
    serve two jobs; two Prometheus servers may hold an instance of one name)."""
    return "\x00".join(key)


def shorten(text: str, width: int) -> str:
    """``text`` whole when it takes at most ``width`` cells; else its head and its tail around
    ``…`` (the tail, a port or a label's value, is what tells two names apart), never a word cut
    without a mark; nothing when ``width`` < 1."""
    if cell_len(text) <= width:
        return text
    if width < 1:
        return ""
    tail_w = (width - 1 + 1) // 2
    head_w = width - 1 - tail_w
    head, tail = "", ""
    for ch in text:
        if cell_len(head + ch) > head_w:
            break
        head += ch
    for ch in reversed(text):
        if cell_len(ch + tail) > tail_w:
            break
        tail = ch + tail
    return head + "…" + tail


#: Cells between two columns.
GAP = 2
#: The instance column takes at most this share of the width; longer names are shortened.
NAME_SHARE = 0.4
#: The fixed column (always drawn) and the ones that scroll sideways, whole.
FIXED, SCROLLED = VIEW_COLUMNS[0], VIEW_COLUMNS[1:]


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns drawn at a width: ``columns`` ((column, width, x) each, the fixed one first),
    ``hidden_left`` and ``hidden_right`` (scrolled columns not drawn, on each side), ``right_x``
    (where the right marker starts)."""

    columns: tuple[tuple[ViewColumn, int, int], ...]
    hidden_left: int
    hidden_right: int
    right_x: int


def layout(widths: dict[str, int], width: int, first: int) -> Layout:
    """Which whole columns fit in ``width`` cells with the scrolled ones starting at index
    ``first`` of :data:`SCROLLED`: a column is drawn whole or not at all, and a marker on each
    side says how many are hidden there (``‹2``, ``3 more ›``)."""
    name_w = min(widths[FIXED.key], max(len(FIXED.label), int(width * NAME_SHARE)))
    cols: list[tuple[ViewColumn, int, int]] = [(FIXED, name_w, 0)]
    left = len(f"‹{first} ") if first else GAP
    x = name_w + left
    rest = SCROLLED[first:]
    drawn = 0
    for i, c in enumerate(rest):
        w = widths[c.key]
        more = len(rest) - i - 1
        room = width - (len(f"  {more} more ›") if more else 0)
        if x + w > room:
            break
        cols.append((c, w, x))
        x += w + GAP
        drawn += 1
    return Layout(tuple(cols), first, len(rest) - drawn, x - GAP if drawn else x)


#: The fleet table's keys while it has the focus (:mod:`bmoe_top.tui.widgets.keymap`).
FLEET_TABLE_KEYS: tuple[km.Key, ...] = (
    km.Key("up", "cursor(-1)", "the row above", "fleet-table", palette=False),
    km.Key("down", "cursor(1)", "the row below", "fleet-table", palette=False),
    km.Key("pageup", "page(-1)", "a page up", "fleet-table", palette=False),
    km.Key("pagedown", "page(1)", "a page down", "fleet-table", palette=False),
    km.Key("home", "edge(-1)", "the first row", "fleet-table", palette=False),
    km.Key("end", "edge(1)", "the last row", "fleet-table", palette=False),
    km.Key("left", "columns(-1)", "columns to the left", "fleet-table", palette=False),
    km.Key("right", "columns(1)", "columns to the right", "fleet-table", palette=False),
    km.Key("enter", "select", "drill into the row", "fleet-table", palette=False),
)


class FleetTableView(ScrollView, can_focus=True):
    """The instances table (see the module docstring), drawing only the rows on screen.

    ``show(rows, sparks)`` sets the rows in the order the screen decided (kept by reference:
    nothing is drawn or measured until a row is on screen); the cursor stays on the instance it
    was on. Up/down, page up/down, home/end move the cursor; left/right scroll the columns
    sideways one whole column at a time (the instance column stays); Enter or a click on the
    cursor row posts :class:`Selected`, a click on a header :class:`HeaderClicked`. A column's
    width is its header's, its widest value on screen so far and, with sparklines,
    ``SPARK_MIN``; it never shrinks while the rows keep their sparkline setting."""

    DEFAULT_CSS = "FleetTableView { height: 1fr; overflow-x: hidden; }"

    BINDINGS: ClassVar[list[BindingType]] = km.bindings(FLEET_TABLE_KEYS, scope=("fleet-table",))

    class Selected(Message):
        """Enter, or a click on the cursor row: ``key`` of the row."""

        def __init__(self, key: Key) -> None:
            super().__init__()
            self.key = key

    class HeaderClicked(Message):
        """A click on the header of ``column``."""

        def __init__(self, column: ViewColumn) -> None:
            super().__init__()
            self.column = column

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.rows: list[InstanceRow] = []
        self.cursor_row = 0
        self.first_col = 0
        self.sparks = True
        self.sort: tuple[str, bool] = ("rank", False)
        self._index: dict[Key, int] = {}
        # per row key: (the row object they were made of, its value texts / its drawn lines)
        self._values: dict[Key, tuple[InstanceRow, dict[str, tuple[str, str]]]] = {}
        self._widths = self._header_widths()
        self._layout: Layout | None = None
        self._strips: dict[tuple[Key, bool], tuple[InstanceRow, list[Strip]]] = {}

    # -- what is shown ------------------------------------------------------------------------------
    @property
    def keys(self) -> list[Key]:
        """The shown rows' keys, in order."""
        return [r.key for r in self.rows]

    @property
    def row_height(self) -> int:
        return 2 if self.sparks else 1

    @property
    def selected(self) -> Key | None:
        """The key of the row under the cursor (job, instance, ...), or ``None`` when the table is
        empty."""
        return self.rows[self.cursor_row].key if 0 <= self.cursor_row < len(self.rows) else None

    def show(self, rows: Sequence[InstanceRow], sparks: bool = True) -> None:
        """Show ``rows`` in this order; the cursor stays on the instance it was on."""
        selected = self.selected
        if sparks != self.sparks:
            self._widths = self._header_widths(sparks)
        self.sparks = sparks
        self.rows = list(rows)
        self._index = {r.key: i for i, r in enumerate(self.rows)}
        # what was made of rows that stay (the same objects: a filter or a sort, not a refresh) stays
        self._values = {k: v for k, v in self._values.items() if k in self._index and
                        self.rows[self._index[k]] is v[0]}
        self._strips = {k: v for k, v in self._strips.items() if k[0] in self._index and
                        self.rows[self._index[k[0]]] is v[0]}
        if selected in self._index:
            self.cursor_row = self._index[selected]
        self.cursor_row = max(0, min(self.cursor_row, len(self.rows) - 1))
        self.virtual_size = Size(self.size.width, 1 + len(self.rows) * self.row_height)
        self._scroll_cursor_into_view()
        self.refresh()

    def set_sort(self, sort: str, descending: bool) -> None:
        """Mark the sorted column in the header."""
        if self.sort != (sort, descending):
            self.sort = (sort, descending)
            self._widths = {k: max(w, self._header_widths()[k]) for k, w in self._widths.items()}
            self._layout = None
            self.refresh()

    def visible_rows(self) -> range:
        """The indexes of the rows on screen."""
        first = int(self.scroll_y) // self.row_height
        n = -(-max(0, self.scrollable_content_region.height - 1) // self.row_height) + 1
        return range(first, min(len(self.rows), first + n))

    def row_values(self, i: int) -> dict[str, tuple[str, str]]:
        """Column key -> (text, style) of row ``i``'s value line, built once per :meth:`show`."""
        r = self.rows[i]
        got = self._values.get(r.key)
        if got is None or got[0] is not r:
            got = self._values[r.key] = (r, row_values(r))
        return got[1]

    def get_row(self, key: Key | str) -> list[Text]:
        """The cells of the row of ``key`` (a key, or :func:`row_key` of one) as drawn, in
        :data:`VIEW_COLUMNS` order."""
        k = tuple(key.split("\x00")) if isinstance(key, str) else key
        i = self._index[k]
        return row_cells(self.rows[i], self.row_values(i), self._widths, self.sparks)

    def header_x(self, key: str) -> int | None:
        """Where the header of column ``key`` starts on screen (``None`` when it is not drawn)."""
        lay = self._current_layout()
        return next((x for c, _w, x in lay.columns if c.key == key), None)

    def move_cursor(self, row: int) -> None:
        """Put the cursor on row ``row`` and scroll it into view."""
        if self.rows:
            self.cursor_row = max(0, min(row, len(self.rows) - 1))
            self._scroll_cursor_into_view()
            self.refresh()

    # -- keys and the mouse -------------------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        page = max(1, (self.scrollable_content_region.height - 1) // self.row_height)
        self.move_cursor(self.cursor_row + step * page)

    def action_edge(self, step: int) -> None:
        self.move_cursor(0 if step < 0 else len(self.rows) - 1)

    def action_columns(self, step: int) -> None:
        lay = self._current_layout()
        if step > 0 and not lay.hidden_right:
            return
        self.first_col = max(0, min(len(SCROLLED) - 1, self.first_col + step))
        self._layout = None
        self._strips.clear()
        self.refresh()

    def action_select(self) -> None:
        if self.selected is not None:
            self.post_message(self.Selected(self.selected))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            for c, w, x in self._current_layout().columns:
                if x <= event.x < x + w:
                    self.post_message(self.HeaderClicked(c))
            return
        i = (int(self.scroll_y) + event.y - 1) // self.row_height
        if 0 <= i < len(self.rows):
            if i == self.cursor_row:
                self.action_select()
            else:
                self.move_cursor(i)

    def on_resize(self) -> None:
        self._layout = None
        self._strips.clear()
        self.virtual_size = Size(self.size.width, 1 + len(self.rows) * self.row_height)

    # -- drawing ------------------------------------------------------------------------------------
    def _header_widths(self, sparks: bool | None = None) -> dict[str, int]:
        sparks = self.sparks if sparks is None else sparks
        sort = self.sort[0] if hasattr(self, "sort") else ""
        return {c.key: max(len(c.label) + (2 if c.sort == sort else 0), SPARK_MIN if sparks and c.spark else 0)
                for c in VIEW_COLUMNS}

    def _measure(self) -> None:
        """Widen the columns for the rows on screen (never narrower than before)."""
        word = STATE_WORDS[CellState.NOT_EXPORTED]
        grew = False
        for i in self.visible_rows():
            for c in VIEW_COLUMNS:
                text = self.row_values(i)[c.key][0]
                w = len("exported") if self.sparks and text == word else cell_len(text)
                if w > self._widths[c.key]:
                    self._widths[c.key] = w
                    grew = True
        if grew:
            self._layout = None
            self._strips.clear()

    def _current_layout(self) -> Layout:
        if self._layout is None:
            if self.first_col and layout(self._widths, self.size.width, 0).hidden_right == 0:
                self.first_col = 0  # everything fits again: no column hidden on the left
            self._layout = layout(self._widths, self.size.width, self.first_col)
            self._strips.clear()
        return self._layout

    def _scroll_cursor_into_view(self) -> None:
        h = self.scrollable_content_region.height
        if h <= 1 or not self.rows:
            return
        top = self.cursor_row * self.row_height
        bottom = top + self.row_height
        y = int(self.scroll_y)
        if top < y:
            self.scroll_to(y=top, animate=False, immediate=True)
        elif bottom > y + h - 1:
            self.scroll_to(y=bottom - (h - 1), animate=False, immediate=True)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._measure()
        return super().render_lines(crop)

    def get_line_filters(self) -> Sequence[LineFilter]:
        return truecolor_filters(look_of(self), super().get_line_filters())

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        look = look_of(self)
        lay = self._current_layout()
        if y == 0:
            line = self._header(lay, width)
        else:
            i, sub = divmod(int(self.scroll_y) + y - 1, self.row_height)
            if i >= len(self.rows):
                return blank(width)
            row = self.rows[i]
            at = (row.key, i == self.cursor_row)
            cached = self._strips.get(at)
            if cached is None or cached[0] is not row:
                cached = self._strips[at] = (row, self._row_lines(i, lay, width, look.window))
            line = cached[1][sub]
        return ascii_strip(line) if look.ascii else line

    def _header(self, lay: Layout, width: int) -> Strip:
        parts: list[tuple[str, Style]] = []
        x = 0
        sort, desc = self.sort
        for c, w, cx in lay.columns:
            if cx > x:
                gap = f"‹{lay.hidden_left} " if x and lay.hidden_left and c is not FIXED and \
                    x == lay.columns[0][1] else ""
                parts.append((gap.ljust(cx - x), _style(MARK_STYLE)))
            label = header_label(c, sort, desc)
            parts.append((shorten(label.plain, w).ljust(w), _style(str(label.style) or "bold")))
            x = cx + w
        if lay.hidden_right:
            parts.append((f"  {lay.hidden_right} more ›".rjust(max(0, width - x)), _style(MARK_STYLE)))
        return strip(parts, width)

    def _row_lines(self, i: int, lay: Layout, width: int, cursor: Style) -> list[Strip]:
        """Row ``i``'s lines (its values, and its sparklines when shown)."""
        row = self.rows[i]
        values = self.row_values(i)
        under = cursor if i == self.cursor_row else None
        parts: list[list[tuple[str, Style]]] = [[] for _ in range(self.row_height)]
        x = 0
        for c, w, cx in lay.columns:
            cells = cell_lines(row, c, values[c.key], w, self.sparks)
            for sub, out in enumerate(parts):
                if cx > x:
                    out.append((" " * (cx - x), _style("", under)))
                text, style = cells[sub] if sub < len(cells) else (" " * w, "")
                out.append((text, _style(style, under)))
            x = cx + w
        if x < width:
            for out in parts:
                out.append((" " * (width - x), _style("", under)))
        return [strip(out, width) for out in parts]


MARK_STYLE = "bold #e5c07b"


@functools.lru_cache(maxsize=512)
def _style(spec: str, under: Style | None = None) -> Style:
    """A style from its text (``bold #e06c75``), on the cursor's background when ``under``."""
    st = Style.parse(spec) if spec else Style()
    return st + under if under is not None else st
