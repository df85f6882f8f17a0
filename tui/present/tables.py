"""Tables as plain data, for the analysis screens' sortable tables and their text forms: columns,
rows of display strings with a sort key per cell, sorting and the ``/`` filter."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bmoe_top.tui.present.search import contains

__all__ = ["Column", "Row", "Table", "filter_rows", "number_key", "sort_rows", "text_table"]

SortKey = float | str


@dataclass(frozen=True, slots=True)
class Column:
    """A column: ``key`` names it (stable across versions), ``label`` heads it, ``numeric``
    right-aligns it, ``short`` heads it when the full labels do not fit the width, ``drop`` is
    how early it is left out when even the short labels do not fit (the highest first; 0: only
    after every column with a ``drop``, from the right)."""

    key: str
    label: str
    numeric: bool = True
    short: str = ""
    drop: int = 0


@dataclass(frozen=True, slots=True)
class Row:
    """A row: ``cells`` the display strings, ``keys`` one sort key per cell (a number, NaN for
    "missing", or a string), ``kind`` a row kind the views style (``""``, ``"good"``, ``"bad"``,
    ``"section"``, ``"missing"``; see ``bmoe_top.tui.widgets.palette.KIND_STYLE``)."""

    cells: tuple[str, ...]
    keys: tuple[SortKey, ...]
    kind: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    """``title``, ``columns``, ``rows`` in their natural order, ``note`` a line under the table."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    note: str = ""


def number_key(v: float | int | None) -> float:
    """A sort key for a number: NaN for an absent value (sorted last either way)."""
    if v is None or isinstance(v, bool):
        return math.nan
    f = float(v)
    return f if math.isfinite(f) else math.nan


def _key(row: Row, col: int) -> tuple[int, float | str]:
    k = row.keys[col] if col < len(row.keys) else math.nan
    if isinstance(k, float) and math.isnan(k):
        return (1, 0.0)
    return (0, k)


def sort_rows(rows: Sequence[Row], col: int, descending: bool = False) -> list[Row]:
    """Rows sorted by column ``col`` (stable; absent values last in both directions)."""
    present = [r for r in rows if _key(r, col)[0] == 0]
    absent = [r for r in rows if _key(r, col)[0] == 1]
    nums = [r for r in present if not isinstance(r.keys[col], str)]
    strs = [r for r in present if isinstance(r.keys[col], str)]
    nums.sort(key=lambda r: float(r.keys[col]), reverse=descending)
    strs.sort(key=lambda r: str(r.keys[col]).lower(), reverse=descending)
    return nums + strs + absent


def filter_rows(rows: Sequence[Row], text: str) -> list[Row]:
    """Rows with ``text`` in any cell (:func:`~bmoe_top.tui.present.search.contains`: literal,
    case-insensitive); all rows for an empty filter."""
    if not text:
        return list(rows)
    return [r for r in rows if contains(text, r.cells)]


def _cell_key(cell: str) -> SortKey:
    """A display string's sort key: its number (``1,024``, ``87.5``, ``12 %``), NaN when absent
    (``""``, ``-``, ``n/a``), else the text."""
    t = cell.strip().replace(",", "").rstrip("%").strip()
    if t in ("", "-", "n/a", "missing"):
        return math.nan
    try:
        f = float(t)
    except ValueError:
        return cell
    return f if math.isfinite(f) else math.nan


def text_table(title: str, columns: Sequence[str | Column], rows: Iterable[Sequence[str]], note: str = "") -> Table:
    """A :class:`Table` of display strings (a turn list) under ``columns`` (labels, or
    :class:`Column` templates whose key, short label and drop order are kept): each cell sorts by
    its number when it reads as one (:func:`_cell_key`); a column is numeric (right-aligned) when
    each of its present cells does."""
    out = [Row(tuple(r), tuple(_cell_key(c) for c in r)) for r in rows]
    cols = []
    for i, c in enumerate(columns):
        keys = [r.keys[i] for r in out if i < len(r.keys)]
        numeric = bool(keys) and all(not isinstance(k, str) for k in keys)
        cols.append(Column(c, c, numeric=numeric) if isinstance(c, str)
                    else Column(c.key, c.label, numeric=numeric, short=c.short, drop=c.drop))
    return Table(title, tuple(cols), tuple(out), note)
