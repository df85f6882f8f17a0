"""The ``/`` search as plain data, shared by every screen (docs/user-guide.md "Search"): what
matches a query, and where a search stands (its query, how many matches, which one is current).

A query matches literally and case-insensitively: a pattern with regex characters (``.*``, ``[``,
``\\``) or escape sequences is text like any other, never a regex. The match count and position
are :class:`SearchState`'s; the widget that types the query and draws the status line is
:mod:`bmoe_top.tui.widgets.search`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from bmoe_top.parsers.sanitize import sanitize

__all__ = ["SearchState", "contains", "spans"]


@lru_cache(maxsize=64)
def _pattern(query: str) -> re.Pattern[str]:
    return re.compile(re.escape(query), re.IGNORECASE)


def spans(query: str, text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-overlapping occurrence of ``query`` in ``text``, literal and
    case-insensitive, in the original text's offsets; none for an empty query."""
    if not query:
        return []
    return [m.span() for m in _pattern(query).finditer(text)]


def contains(query: str, cells: Iterable[str]) -> bool:
    """Whether any of ``cells`` holds ``query`` (literal, case-insensitive); an empty query
    matches everything."""
    if not query:
        return True
    pat = _pattern(query)
    return any(pat.search(c) is not None for c in cells)


@dataclass
class SearchState:
    """Where one search stands: ``query``, ``count`` matches, ``index`` the current one (0-based;
    -1: none), ``wrapped`` where the last step went round an end to (``"first"`` or ``"last"``;
    ``""``: it did not)."""

    query: str = ""
    count: int = 0
    index: int = -1
    wrapped: str = ""

    def update(self, query: str, count: int) -> None:
        """The query typed or the data changed: ``count`` matches now. A new query starts at the
        first match; the same one keeps its place (clamped to the count), and its wrap note while
        the count is the same."""
        if query == self.query and count == self.count:
            return
        if query != self.query:
            self.index = 0 if count else -1
        elif count:
            self.index = min(max(self.index, 0), count - 1)
        else:
            self.index = -1
        self.query, self.count, self.wrapped = query, count, ""

    def step(self, k: int) -> bool:
        """Move ``k`` matches on (``k`` < 0: back), going round at either end; returns False when
        there is no match to move to. :attr:`wrapped` says whether it went round."""
        if not self.query or self.count <= 0:
            return False
        raw = self.index + k
        self.index = raw % self.count
        self.wrapped = "first" if raw >= self.count else "last" if raw < 0 else ""
        return True

    def status(self) -> str:
        """The status line (the query sanitised): ``/expert: match 3 of 17``, ``/expert: no
        match``, with ``(wrapped to the first)`` / ``(wrapped to the last)`` after a step round
        an end; empty without a query."""
        if not self.query:
            return ""
        shown = "/" + sanitize(self.query)
        if self.count <= 0:
            return f"{shown}: no match"
        out = f"{shown}: match {self.index + 1:,} of {self.count:,}"
        if self.wrapped:
            out += f" (wrapped to the {self.wrapped})"
        return out
