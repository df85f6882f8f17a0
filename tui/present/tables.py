"""Tables as plain data, for the analysis screens' sortable tables and their text forms: columns,
rows of display strings with a sort key per cell, sorting and the ``/`` filter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Column", "Row", "Table", "sort_rows", "filter_rows", "number_key"]

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
    """Rows with ``text`` (case-insensitive) in any cell; all rows for an empty filter."""
    t = text.strip().lower()
    if not t:
        return list(rows)
    return [r for r in rows if any(t in c.lower() for c in r.cells)]
