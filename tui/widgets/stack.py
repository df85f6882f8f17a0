"""The Overview's column of views, sized like btop's boxes (:mod:`bmoe_top.tui.widgets.sizing`):
each view's :meth:`~bmoe_top.tui.widgets.base.RunView.need` for the column's height, a view
whose minimum does not fit left out (the least important first), and the maps never pushed
below the fold.
"""

from __future__ import annotations

from textual import events
from textual.containers import Vertical

from bmoe_top.tui.widgets.base import RunView
from bmoe_top.tui.widgets.sizing import allot

__all__ = ["PanelStack"]


class PanelStack(Vertical):
    """A vertical column whose :class:`RunView` children get their heights from :func:`allot`.

    ``compact``: the screen's compact layout (smaller minimums); ``hidden``: the panel groups the
    user hid (a view whose :attr:`RunView.group` is in it takes no rows); ``first``: the map that
    is kept when only one fits (``"heatmap"`` or ``"expert-map"``). :meth:`fit` after any of them
    changes, or after a view became empty or got data."""

    DEFAULT_CSS = "PanelStack { height: 1fr; overflow: hidden hidden; }"

    def __init__(self, *children: RunView, **kw: object) -> None:
        super().__init__(*children, **kw)  # type: ignore[arg-type]
        self.compact = False
        self.hidden: frozenset[str] = frozenset()
        self.first = "heatmap"
        self.heights: dict[str, int] = {}

    def on_resize(self, event: events.Resize) -> None:
        self.fit()

    def fit(self) -> dict[str, int]:
        """Set each view's height for the column's height now; returns {view id: rows} (0: left
        out or hidden)."""
        views = [w for w in self.children if isinstance(w, RunView)]
        rows = self.size.height
        shown = [w for w in views if w.group not in self.hidden]
        needs = [w.need(self.compact, first=w.id == self.first) for w in shown]
        got = dict(zip((id(w) for w in shown), allot(rows, needs), strict=True))
        heights: dict[str, int] = {}
        for w in views:
            h = got.get(id(w), 0)
            heights[w.id or ""] = h
            if h <= 0:
                w.styles.display = "none"
            else:
                w.styles.display = "block"
                w.styles.height = h
                w.fit_rows(h)
        self.heights = heights
        return heights
