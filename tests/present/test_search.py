"""The ``/`` search as plain data (tui/present/search.py): a query matches literally and in any
case (regex characters and escape sequences are text), and the search's count, position, wrap
and status line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.present.search import SearchState, contains, spans


def test_a_query_matches_literally_in_any_case():
    assert spans("Expert", "expert EXPERT ExPeRt") == [(0, 6), (7, 13), (14, 20)]
    assert spans(".*", "a.*b and ab") == [(1, 3)]  # not a regex: only the two characters
    assert spans("[", "x[1] [2]") == [(1, 2), (5, 6)]
    assert spans("\\d", "\\d 5") == [(0, 2)]
    assert spans("\x1b[31m", "red \x1b[31mtext") == [(4, 9)]
    assert spans("", "anything") == []
    assert contains("MOE", ("bmoe-top", "x")) and not contains("a.c", ("abc",)) and contains("", ())


@settings(max_examples=200, deadline=None)
@given(query=st.text(st.characters(codec="ascii"), min_size=1, max_size=4),
       text=st.text(st.characters(codec="ascii"), max_size=60))
def test_spans_are_every_non_overlapping_case_insensitive_occurrence(query, text):
    want, at, low, q = [], 0, text.lower(), query.lower()
    while (i := low.find(q, at)) >= 0:
        want.append((i, i + len(q)))
        at = i + len(q)
    assert spans(query, text) == want
    assert contains(query, (text,)) == bool(want)


def test_n_and_shift_n_go_round_the_ends_and_say_so():
    s = SearchState()
    s.update("expert", 3)
    assert (s.index, s.status()) == (0, "/expert: match 1 of 3")
    assert s.step(1) and s.step(1) and s.status() == "/expert: match 3 of 3"
    assert s.step(1) and s.status() == "/expert: match 1 of 3 (wrapped to the first)"
    assert s.step(-1) and s.status() == "/expert: match 3 of 3 (wrapped to the last)"
    assert s.step(-1) and s.status() == "/expert: match 2 of 3"


def test_new_data_keeps_the_position_a_new_query_starts_at_the_first_match():
    s = SearchState()
    s.update("a", 5)
    s.step(3)
    s.step(2)
    assert s.wrapped == "first"
    s.update("a", 5)  # a repaint with the same rows keeps the note
    assert s.wrapped == "first" and s.index == 0
    s.step(3)
    s.update("a", 7)  # more rows came
    assert s.index == 3 and s.wrapped == ""
    s.update("a", 2)  # fewer: the last one
    assert s.index == 1
    s.update("ab", 4)
    assert s.index == 0


def test_no_match_no_query_and_a_hostile_query():
    s = SearchState()
    assert not s.step(1) and s.status() == ""
    s.update("zzz", 0)
    assert not s.step(1) and s.status() == "/zzz: no match"
    s.update("\x1b]0;pwned\x07", 0)
    assert "\x1b" not in s.status() and "\x07" not in s.status() and "␛" in s.status()
