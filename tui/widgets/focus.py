"""Where the keyboard focus may go on every screen: a tab container that lets go of the focus of
a pane it hides, the rule that Tab visits only widgets shown on screen, and the screen base
(:class:`FocusRules`) that applies both with the run screens' Tab stops (the maps, the tables, the
text boxes and the run panel's column, :class:`PanelScroll`; never a tab bar or another scrolling
container, nothing focused at the start).

Textual moves the focus of a widget that is hidden to the next focusable one; when a tab switch
hid a pane holding the focus, that was a widget of the same hidden pane, whose focus switched the
tab back: the tab keys, the palette's tab entries and clicks on the tab bar did nothing until the
focus went elsewhere (docs/user-guide.md "Keys").
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import BindingType
from textual.containers import ScrollableContainer, VerticalScroll
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.widget import Widget
from textual.widgets import TabbedContent, Tabs

from bmoe_top.tui.widgets.keymap import Key, bindings

__all__ = ["SCROLL_KEYS", "FocusRules", "PaneTabs", "PanelScroll", "quiet_containers", "shown_focus_chain"]


#: A scrolling panel's keys while it has the focus (:mod:`bmoe_top.tui.widgets.keymap`, scope
#: ``panel``); ← / → stay the screen's (the previous / next token, compare's column scroll).
SCROLL_KEYS: tuple[Key, ...] = (
    Key("up", "scroll_up", "scroll up a row", "panel", palette=False),
    Key("down", "scroll_down", "scroll down a row", "panel", palette=False),
    Key("pageup", "page_up", "a page up", "panel", palette=False),
    Key("pagedown", "page_down", "a page down", "panel", palette=False),
    Key("home", "scroll_home", "the first row", "panel", palette=False),
    Key("end", "scroll_end", "the last row", "panel", palette=False),
    Key("escape", "leave", "leave the panel", "panel", palette=False),
)


class PanelScroll(VerticalScroll, inherit_bindings=False):
    """A column of text often taller than its room (the run panel's side column, compare's
    notes): a Tab stop whose keys scroll it (:data:`SCROLL_KEYS`, nothing else: the screen's ← / →
    still answer), marked while focused by a bar down its left edge (its ASCII stand-in under
    ``--ascii``)."""

    can_focus = True
    DEFAULT_CSS = "PanelScroll:focus > * { outline-left: heavy $accent; }"  # over the panels' padding
    BINDINGS: ClassVar[list[BindingType]] = bindings(SCROLL_KEYS, scope=("panel",))

    def action_leave(self) -> None:
        """Escape: the focus leaves the panel (the screen's keys answer again)."""
        self.screen.set_focus(None)

    def action_page_up(self) -> None:
        self.scroll_page_up()

    def action_page_down(self) -> None:
        self.scroll_page_down()


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


def quiet_containers(screen: Screen[None]) -> None:
    """Take the tab bars and the scrolling containers of ``screen`` out of Tab's stops: a focused
    tab bar takes the arrow keys, and a focused container shows no mark (an invisible stop)."""
    for tabs in screen.query(Tabs):
        tabs.can_focus = False
    for scroll in screen.query(ScrollableContainer):
        if not isinstance(scroll, (ScrollView, PanelScroll)):  # a table or a log scrolls as a view of its own
            scroll.can_focus = False


class FocusRules(Screen[None]):
    """A screen whose Tab stops follow the run screens' rules: nothing is focused at the start
    (the screen's keys answer), Tab visits only widgets drawn on screen
    (:func:`shown_focus_chain`), never a tab bar or a scrolling container
    (:func:`quiet_containers`). Textual calls this ``on_mount`` after the subclass's own."""

    AUTO_FOCUS: ClassVar[str | None] = ""

    @property
    def focus_chain(self) -> list[Widget]:
        """Tab's stops: the focusable widgets drawn on screen."""
        return shown_focus_chain(super().focus_chain)

    def on_mount(self) -> None:
        quiet_containers(self)
