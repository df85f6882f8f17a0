"""Where the keyboard focus may go on the mode screens: a tab container that lets go of the
focus of a pane it hides, and the rule that Tab visits only widgets shown on screen.

Textual moves the focus of a widget that is hidden to the next focusable one; when a tab switch
hid a pane holding the focus, that was a widget of the same hidden pane, whose focus switched the
tab back: the tab keys, the palette's tab entries and clicks on the tab bar did nothing until the
focus went elsewhere (docs/user-guide.md "Keys").
"""

from __future__ import annotations

from textual.widget import Widget
from textual.widgets import TabbedContent

__all__ = ["PaneTabs", "shown_focus_chain"]


class PaneTabs(TabbedContent):
    """A :class:`~textual.widgets.TabbedContent` whose tab switch (a key, the palette, a click)
    first takes the focus off a widget of the pane it hides (the screen's keys answer again)."""

    def _watch_active(self, active: str) -> None:
        screen = self.screen if self.is_attached else None
        focused = screen.focused if screen is not None else None
        if focused is not None and screen is not None:
            pane = next((a for a in focused.ancestors if a.parent is not None and a.parent.parent is self), None)
            if pane is not None and pane.id != active:
                screen.set_focus(None)
        super()._watch_active(active)


def shown_focus_chain(chain: list[Widget]) -> list[Widget]:
    """The widgets of a focus chain drawn in the last screen update (not scrolled out of view,
    not squeezed to no size): a Tab stop is always one the user can see."""
    return [w for w in chain if w.is_on_screen and w.region.width > 0 and w.region.height > 0]
