"""The column's arithmetic (tui/widgets/sizing.py): minimums in priority order, then the rows
each panel would like, then the spare rows to the panels that grow; the least important panel
is left out first; the sum never exceeds the column."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.tui.widgets.sizing import Need, allot


def test_minimums_first_then_wants_then_spare_rows_to_growers():
    needs = [Need(3, 3, priority=2), Need(4, 10, grow=1, priority=3), Need(1, 7, priority=4),
             Need(8, 8, grow=1, priority=0), Need(10, 10, grow=1, priority=1)]
    assert allot(26, needs) == [3, 4, 1, 8, 10]  # minimums only
    assert allot(34, needs) == [3, 10, 3, 8, 10]  # the breakdown's wish before the trends'
    assert allot(44, needs) == [3, 12, 7, 10, 12]  # 6 spare rows shared 1:1:1
    assert allot(45, needs) == [3, 12, 7, 11, 12]  # ...the remainder to the most important grower first


def test_the_least_important_panel_is_left_out_first_and_the_maps_last():
    needs = [Need(3, 3, priority=2), Need(4, 10, grow=1, priority=3), Need(8, 8, priority=0),
             Need(10, 10, priority=1)]
    assert allot(21, needs) == [3, 0, 8, 10]
    assert allot(12, needs) == [3, 0, 8, 0]
    assert allot(-3, needs) == [0, 0, 0, 0]


def test_a_panel_with_nothing_to_show_gives_its_rows_away():
    full = allot(40, [Need(4, 10, grow=1), Need(8, 8, grow=1), Need(10, 10, grow=1)])
    empty = allot(40, [Need(4, 10, grow=1), Need(1, 1), Need(1, 1)])
    assert sum(full) == sum(empty) == 40 and empty[0] == 38


def test_a_need_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="least <= want"):
        Need(5, 3)


@given(st.integers(-5, 200), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 3),
                                                 st.integers(0, 5)), max_size=8))
def test_every_panel_shown_gets_its_minimum_and_the_sum_fits(rows, raw):
    needs = [Need(a, a + b, g, p) for a, b, g, p in raw]
    got = allot(rows, needs)
    assert sum(got) <= max(0, rows)
    for n, h in zip(needs, got, strict=True):
        assert h == 0 or n.least <= h
        assert n.grow or h <= n.want
    if any(n.grow for n, h in zip(needs, got, strict=True) if h or n.least == 0):
        assert sum(got) == max(0, rows)
