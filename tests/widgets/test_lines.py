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


def test_file_names_are_shortened_in_their_middle_keeping_their_ends():
    from bmoe_top.tui.widgets.lines import elide_words, middle_ellipsis

    short = middle_ellipsis("qwen3-30b-a3b-q4km.gguf", 12)
    assert len(short) == 12 and short.endswith(".gguf") and short.startswith("qwen")
    path = middle_ellipsis("/tmp/pytest-of-root/pytest-911/audit.jsonl", 24)
    assert len(path) == 24 and path.endswith("/audit.jsonl") and path.startswith("/tmp")
    for width in (20, 30, 40, 60):
        line = elide_words("replay qwen3-30b-a3b-cache64.csv + qwen3-30b-a3b-cache64.route.csv", width)
        assert len(line) <= width, (width, line)
        words = line.split(" ")
        assert words[0] == "replay", line
        # every file name keeps its extension, or the line ends with … after whole words
        assert all(w.endswith(".csv") for w in words if "qwen" in w) or line.endswith("…"), line
    assert elide_words("replay a.csv + b.csv", 40) == "replay a.csv + b.csv"
