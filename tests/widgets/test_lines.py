"""Run-length merging of cell indexes into segments: one segment per run of equal cells, every
segment styled, and a memo shared by the rows of one table never hands a row another cell's
segment (also when the table grows between rows, as the maps' cursor cells make it)."""

from __future__ import annotations

import numpy as np
import pytest
from rich.segment import Segment
from rich.style import Style

from bmoe_top.tui.widgets.lines import segments_from_index

RED, BLUE = Style(color="red"), Style(color="blue")


def test_runs_of_equal_cells_become_one_segment():
    table = [("·", RED), ("█", BLUE)]
    segs = segments_from_index(np.array([0, 0, 1, 1, 1, 0]), table)
    assert segs == [Segment("··", RED), Segment("███", BLUE), Segment("·", RED)]
    assert segments_from_index(np.zeros(0, np.int64), table) == []


def test_a_shared_memo_draws_what_no_memo_draws_as_the_table_grows():
    rng = np.random.default_rng(3)
    table: list[tuple[str, Style]] = [(ch, Style(color=f"color({i})")) for i, ch in enumerate("abcdefghijkl")]
    memo: dict[int, Segment] = {}
    for row in range(40):
        idx = rng.integers(0, len(table), size=200)
        idx[rng.random(200) < 0.5] = idx[0]  # long runs as well as single cells
        shared = segments_from_index(idx, table, memo)
        assert shared == segments_from_index(idx, table)
        assert "".join(s.text for s in shared) == "".join(table[i][0] for i in idx)
        table.append((f"{row % 10}", Style(color="white", reverse=True)))  # a cursor variant, as the maps add


def test_a_table_too_large_for_the_memo_key_is_refused():
    with pytest.raises(ValueError):
        segments_from_index(np.array([0]), [("x", RED)] * (1 << 20))
