"""How the rows of a column of panels are shared, like btop's boxes: each panel says the rows it
needs at least, the rows it would like, whether it takes spare rows, and its priority; the
column gives every panel its minimum in priority order (a panel whose minimum no longer fits is
left out, the least important first), then raises each towards the rows it would like in the
same order, then spreads what is left over the panels that grow. A panel with nothing to show
asks for one row and does not grow, so its rows go to the others.

Pure arithmetic: no Textual, no Rich (a contract, ``pyproject.toml``); the panels' own numbers
are in :meth:`bmoe_top.tui.widgets.base.RunView.need` and its overrides, and
:class:`bmoe_top.tui.widgets.stack.PanelStack` applies the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Need", "allot"]


@dataclass(frozen=True, slots=True)
class Need:
    """What one panel of a column asks for, in rows.

    ``least``: the rows without which it is left out (0: it may be drawn with no rows at all,
    never left out); ``want``: the rows it would like (at least ``least``); ``grow``: its share of
    the spare rows (0: none); ``priority``: lower is more important (given its rows first, left
    out last)."""

    least: int
    want: int
    grow: int = 0
    priority: int = 5

    def __post_init__(self) -> None:
        if self.least < 0 or self.want < self.least or self.grow < 0:
            raise ValueError(f"a panel's rows must satisfy 0 <= least <= want and grow >= 0: {self}")


def allot(rows: int, needs: Sequence[Need]) -> list[int]:
    """The rows each of ``needs`` gets out of ``rows`` (same order; 0: left out).

    Every panel that is not left out gets at least its ``least``; the sum never exceeds
    ``rows`` (when ``rows`` is negative, it is taken as 0); spare rows go to the growing panels in
    proportion to ``grow`` (the remainder to the most important first). When no panel grows,
    the spare rows stay unused."""
    left = max(0, rows)
    got = [0] * len(needs)
    order = sorted(range(len(needs)), key=lambda i: (needs[i].priority, i))
    shown: list[int] = []
    for i in order:
        if needs[i].least <= left:
            got[i] = needs[i].least
            left -= needs[i].least
            shown.append(i)
    for i in shown:
        more = min(needs[i].want - got[i], left)
        got[i] += more
        left -= more
    growing = [i for i in shown if needs[i].grow > 0]
    weight = sum(needs[i].grow for i in growing)
    if left and weight:
        spare = left
        for i in growing:
            share = spare * needs[i].grow // weight
            got[i] += share
            left -= share
        for i in growing:  # the remainder, one row each, the most important first
            if not left:
                break
            got[i] += 1
            left -= 1
    return got
