"""The fleet's instances table: one row per instance, a column per number, each with a sparkline
of the window under it (docs/fleet.md "The screen").

:class:`FleetTableView` is a Textual ``DataTable`` (row cursor, header click, a fixed instance
column, horizontal scroll) filled from :class:`~bmoe_top.tui.fleet.table.InstanceRow` rows in
the order the screen decided (sorted, filtered). The cells are built by the pure functions
here: :func:`cell_text` (a cell's number, or the word for why there is none: ``not exported``,
``no data``, ``undefined``, ``error``, never 0; a stale value with its age), :func:`spark_text`
(the window folded into the column's width, ``·`` where there was no value) and
:func:`row_cells` (with sparklines, "not exported" takes the cell's two lines). Label values
(instance, job) are drawn through :func:`bmoe_top.parsers.sanitize.sanitize`, never parsed as
markup.

The worst instances stand out: a down or gone row has its instance and state in bold red with
``✖``; the highest stall share and the lowest hit % are marked ``▲`` / ``▼`` in bold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.text import Text
from textual.widgets import DataTable

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.fleet.table import Cell, CellState, InstanceRow, InstanceState, Key
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.widgets.palette import EIGHTHS, NO_DATA_GLYPH

__all__ = ["ViewColumn", "VIEW_COLUMNS", "SORT_KEYS", "FleetTableView", "cell_text", "spark_text", "age_text",
           "row_cells", "num_text", "value_of", "STATE_WORDS"]

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
    _col("tok_s", "tok/s"),
    _col("prompt_tok_s", "prompt tok/s"),
    _col("hit_pct", "hit %", scale=(0.0, 100.0)),
    _col("read_mib_s", "read MiB/s", 2),
    _col("wall_ms", "wall ms"),
    _col("compute_ms", "= compute"),
    _col("flash_ms", "+ flash"),
    _col("mgmt_ms", "+ mgmt", 2),
    _col("stall_share", "stall %", scale=(0.0, 100.0)),
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
    fin = b[np.isfinite(b)]
    lo, hi = scale if scale is not None else (min(0.0, float(fin.min())), float(fin.max()))
    # in halves: the span of -1e308 .. 1e308 is no float, half of it is
    span = hi / 2 - lo / 2 if hi > lo else 1.0
    out = []
    for x in b.tolist():
        if not math.isfinite(x):
            out.append(NO_DATA_GLYPH)
        else:
            out.append(EIGHTHS[1 + int(round(min(1.0, max(0.0, (x / 2 - lo / 2) / span)) * 7))])
    return "".join(out)


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


def row_cells(row: InstanceRow, values: dict[str, tuple[str, str]], widths: dict[str, int],
              sparks: bool) -> list[Text]:
    """The row's cells in :data:`VIEW_COLUMNS` order: the value (numbers right-aligned), and
    with ``sparks`` the sparkline of the window on a second line."""
    cells = []
    for c in VIEW_COLUMNS:
        text, style = values[c.key]
        w = widths[c.key]
        under = None
        if sparks and text == STATE_WORDS[CellState.NOT_EXPORTED]:
            text, under = "not", "exported"  # two lines: the column stays as narrow as its numbers
        line = text.ljust(w) if c.spark is None or c.key == "state" else text.rjust(w)
        t = Text(line, style=style, no_wrap=True, overflow="ellipsis")
        if under is not None:
            t.append("\n" + under.rjust(w), style=style)
        elif sparks:
            if c.spark is not None:
                arr = row.spark.get(c.spark)
                spark = spark_text(arr, w, c.scale)
                style_s = (UP_STYLE if arr is not None and np.nanmin(arr) == 1 else DOWN_STYLE) \
                    if c.key == "state" and arr is not None and np.isfinite(arr).any() else SPARK_STYLE
                t.append("\n")
                t.append(spark, style=style_s)
            else:
                t.append("\n" + _sub(row, c.key).ljust(w), style=ABSENT_STYLE)
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
    """The DataTable key of an instance's row: its job, instance and other grouping labels (an
    address may serve two jobs; two Prometheus servers may hold an instance of one name)."""
    return "\x00".join(key)


class FleetTableView(DataTable[Text]):
    """The instances table (see the module docstring). ``show(rows, ...)`` redraws it keeping
    the cursor on the same instance; ``keys`` are the shown rows' (job, instance) in order."""

    DEFAULT_CSS = "FleetTableView { height: 1fr; }"

    def __init__(self, **kw: object) -> None:
        # the cursor row keeps its cells' colours (a down row stays red under the cursor)
        super().__init__(cursor_type="row", fixed_columns=1, zebra_stripes=False,
                         cursor_foreground_priority="renderable", **kw)  # type: ignore[arg-type]
        self.keys: list[Key] = []
        self._shape: tuple[object, ...] | None = None
        self._headers: tuple[str, bool] | None = None

    def on_mount(self) -> None:
        for c in VIEW_COLUMNS:
            self.add_column(header_label(c, "rank", False), key=c.key)

    def set_sort(self, sort: str, descending: bool) -> None:
        """Mark the sorted column in the header."""
        if self._headers == (sort, descending):
            return
        self._headers = (sort, descending)
        for c in VIEW_COLUMNS:
            self.columns[c.key].label = header_label(c, sort, descending)  # type: ignore[index]
        self._require_update_dimensions = True
        self.refresh()

    @property
    def selected(self) -> Key | None:
        """The key of the row under the cursor (job, instance, ...), or ``None`` when the table is
        empty."""
        if not self.keys or not 0 <= self.cursor_row < len(self.keys):
            return None
        return self.keys[self.cursor_row]

    def show(self, rows: Sequence[InstanceRow], sparks: bool = True) -> None:
        """Draw ``rows`` in this order; the cursor stays on the instance it was on."""
        values = [row_values(r) for r in rows]
        widths = column_widths(values, sparks, self._headers[0] if self._headers else "")
        keys = [r.key for r in rows]
        shape = (tuple(keys), sparks, tuple(widths.values()))
        cells = [row_cells(r, v, widths, sparks) for r, v in zip(rows, values)]
        if shape == self._shape:  # same rows, order and widths: the cells change in place
            for r, row_cells_ in zip(rows, cells):
                for c, cell in zip(VIEW_COLUMNS, row_cells_):
                    self.update_cell(row_key(*r.key), c.key, cell)
            return
        selected = self.selected
        scroll_x = self.scroll_x
        self.clear()
        self._shape = shape
        self.keys = keys
        for c in VIEW_COLUMNS:  # the widths are known: set now, not measured later (on idle)
            col = self.columns[c.key]  # type: ignore[index]
            col.width = col.content_width = widths[c.key]
            col.auto_width = False
        for r, row_cells_ in zip(rows, cells):
            self.add_row(*row_cells_, height=2 if sparks else 1, key=row_key(*r.key))
        if selected in keys:
            self.move_cursor(row=keys.index(selected), animate=False)
        if scroll_x:
            self.call_after_refresh(self.scroll_to, x=scroll_x, animate=False)
