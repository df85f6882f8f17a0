"""What the fleet screen draws, as pure functions (tui/widgets/fleet_table.py, tui/screens/fleet.py):
a cell's number or the word for why there is none (never 0), stale values with their age,
sparklines (absent points as ``·``, nothing at all as blank, fixed scales), the worst marks,
every Prometheus error kind in one sanitised line, and the keys the help lists."""

from __future__ import annotations

import numpy as np
import pytest
from rich.text import Text

from bmoe_top.tui.fleet.table import Cell, CellState, InstanceRow, InstanceState, column_keys
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen, error_text
from bmoe_top.tui.sources.prometheus import PromError, PromErrorKind
from bmoe_top.tui.widgets.fleet_table import (
    SPARK_MIN,
    VIEW_COLUMNS,
    age_text,
    cell_text,
    column_widths,
    row_cells,
    row_values,
    spark_bins,
    spark_text,
    value_of,
)
from bmoe_top.tui.widgets.keymap import help_rows


def test_a_cell_says_its_number_or_why_not():
    assert cell_text(Cell(12.345, CellState.OK))[0] == "12.3"
    assert cell_text(Cell(0.0, CellState.OK))[0] == "0.0"  # a real zero
    assert cell_text(Cell(3.0, CellState.OK), 0)[0] == "3"  # a count
    assert cell_text(Cell(17.2, CellState.STALE, 35.0))[0] == "17.2 (35s)"
    assert cell_text(Cell(None, CellState.STALE, 400.0))[0] == "– (7m)"
    for state, word in ((CellState.NOT_EXPORTED, "not exported"), (CellState.NO_DATA, "no data"),
                        (CellState.UNDEFINED, "undefined"), (CellState.ERROR, "error")):
        text, style = cell_text(Cell(None, state))
        assert text == word and style and "0" not in text
    assert [age_text(s) for s in (0.2, 42, 200, 9000, None)] == ["0s", "42s", "3m", "2h", "?"]


def test_sparklines():
    assert spark_text(None, 8) == " " * 8 and spark_text(np.full(10, np.nan), 5) == " " * 5  # nothing: blank
    v = np.array([0.0, 1.0, 2.0, np.nan, 4.0, 4.0, np.nan, np.nan])
    s = spark_text(v, 8)
    assert len(s) == 8 and s[0] == "▁" and s[-1] == "·" and s[4] == "█"  # 0 is the bottom, absent is ·
    assert spark_text(np.array([50.0, 50.0]), 4, (0.0, 100.0)) == "▅▅▅▅"  # a fixed scale: 50 % is mid
    # fewer points than cells: each point spans cells; more: each cell is a bin's mean
    assert spark_bins(np.array([1.0, 3.0]), 4).tolist() == [1, 1, 3, 3]
    assert spark_bins(np.arange(8.0), 4).tolist() == [0.5, 2.5, 4.5, 6.5]
    assert np.isnan(spark_bins(np.array([np.nan, np.nan, 1.0, 1.0]), 2)[0])


def _row(state=InstanceState.UP, flags=(), **cells) -> InstanceRow:
    all_cells = {k: Cell(None, CellState.NOT_EXPORTED) for k in column_keys()}
    all_cells.update(cells)
    spark = {k: np.full(6, np.nan) for k in column_keys()}
    spark["up"] = np.array([1, 1, 1, 0, 0, 0.0]) if state is InstanceState.DOWN else np.ones(6)
    spark["tok_s"] = np.array([1, 2, 3, 4, 5, 6.0])
    return InstanceRow(job="bmoe", instance="edge\x1b]0;t\x07:1", state=state, last_up_age_s=30.0,
                       restarts=2, cells=all_cells, spark=spark, flags=tuple(flags))


def test_row_values_mark_the_worst_and_keep_labels_inert():
    row = _row(InstanceState.DOWN, ("down", "highest_stall", "lowest_hit"),
               tok_s=Cell(5.0, CellState.OK), stall_share=Cell(63.0, CellState.OK), hit_pct=Cell(41.0, CellState.OK),
               resident_mib=Cell(0.41, CellState.OK), budget_mib=Cell(0.5, CellState.OK),
               requests_processing=Cell(1.0, CellState.OK), requests_deferred=Cell(0.0, CellState.OK))
    v = row_values(row)
    assert v["instance"][0] == "✖ edge␛]0;t␇:1" and "\x1b" not in v["instance"][0]
    assert v["state"][0] == "down 30s"
    assert v["stall_share"][0] == "63.0 ▲" and v["hit_pct"][0] == "41.0 ▼"
    assert v["resident"][0] == "0.41/0.50" and v["requests"][0] == "1/0"
    assert v["wall_ms"][0] == "not exported"
    widths = column_widths([v], sparks=True)
    cells = row_cells(row, v, widths, sparks=True)
    assert len(cells) == len(VIEW_COLUMNS) and all(isinstance(c, Text) for c in cells)
    by = {c.key: cell for c, cell in zip(VIEW_COLUMNS, cells)}
    assert [value_of(by[k]) for k in ("tok_s", "wall_ms", "state")] == ["5.0", "not exported", "down 30s"]
    assert by["wall_ms"].plain.split("\n")[1].strip() == "exported"  # the word takes both lines
    assert widths["wall_ms"] == SPARK_MIN + 1 and "↻ 2 restarts" in by["instance"].plain
    spark = by["tok_s"].plain.split("\n")[1]
    assert len(spark) == widths["tok_s"] and spark[-1] == "█"
    flat = column_widths([v], sparks=False)
    assert flat["wall_ms"] == len("not exported")
    assert row_cells(row, v, flat, sparks=False)[0].plain.count("\n") == 0


@pytest.mark.parametrize("kind", list(PromErrorKind))
def test_every_error_kind_is_one_sanitised_line(kind):
    err = PromError(kind, "it \x1b[2Jfailed\nbadly", query='up{job="x\x1b"}', http_status=502,
                    body="<html>\x1b]52;c;pwn\x07</html>")
    text = error_text(err)
    assert text.startswith(kind.value + ": it ") and "\n" not in text and "\x1b" not in text and "\x07" not in text
    if kind in (PromErrorKind.BAD_DATA, PromErrorKind.EXECUTION, PromErrorKind.TOO_MANY_SAMPLES,
                PromErrorKind.EMPTY, PromErrorKind.TIMEOUT):
        assert 'query: up{job="x␛"}' in text
    if kind in (PromErrorKind.HTTP, PromErrorKind.MALFORMED):
        assert "(HTTP 502)" in text and "body: <html>␛]52;c;pwn␇</html>" in text


def test_help_lists_the_keys():
    rows = dict(help_rows(FleetScreen.KEYS))
    assert rows["/"].startswith("search: filter the table") and rows["n"].startswith("the next match")
    assert rows["s / >"] == "sort by the next column"
    assert rows["w"].startswith("worst first") and rows["r"] == "refresh now"
    assert rows["space"] == "pause / resume the refresh" and rows["? / h / F1"].startswith("help")
    assert not any("Focus" in d or "Copy" in d for d in rows.values())  # Textual's own words: not this screen's
    scoped = ("on a map", "on a scrolling panel")  # the rows of a focused map or panel
    drill = dict(r for r in help_rows(FleetDrillScreen.KEYS) if not r[1].startswith(scoped))
    assert drill["Escape"] == "back to the table" and "space / p" in drill  # the shared playback keys too
