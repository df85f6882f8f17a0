"""The one ``/`` search of every screen (docs/user-guide.md "Search"), as in less and k9s.

``/`` opens a one-line box above the footer from any focus outside a text box; typing filters
the rows of a table or marks the text live, the first match selected; Enter keeps the query and
gives the focus back where it was; Escape in the box clears the query (and does nothing else);
``n`` / ``N`` go to the next / previous match, round the ends (the status line says so). While
a query is kept the line shows it with the count and position (``/expert: match 3 of 17``,
``/expert: no match``). Matching is literal and case-insensitive
(:mod:`bmoe_top.tui.present.search`).

A screen derives from :class:`SearchScreen`, composes one :class:`SearchBar`, lists
:data:`SEARCH_KEYS` in its key table and answers :meth:`SearchScreen.search_target` with what is
searched now: a :class:`Searchable` (a sortable table, the answer text, the problems list, the
fleet table) and its name. Each target keeps its own query (a text search never filters a table).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Static, TabbedContent

from bmoe_top.tui.present.search import SearchState
from bmoe_top.tui.widgets.inputs import SteadyInput
from bmoe_top.tui.widgets.keymap import Key

__all__ = ["SEARCH_KEYS", "SearchBar", "SearchCountChanged", "SearchScreen", "Searchable"]


#: The search keys of every screen (:mod:`bmoe_top.tui.widgets.keymap`, scope ``screen``: in a
#: text box they type). ``/`` is looked up before the key goes to the focus (``priority``): the
#: box has the focus before the next key is routed, so the keys typed right after ``/`` go into
#: it, never to the screen's keys (``q`` quit).
SEARCH_KEYS: tuple[Key, ...] = (
    Key("slash", "search", "search: filter the table / mark the text", footer="search", title="Search…",
        priority=True),
    Key("n", "search_step(1)", "the next match (round the end)", title="Next match"),
    Key("N", "search_step(-1)", "the previous match (round the start)", title="Previous match"),
)


@runtime_checkable
class Searchable(Protocol):
    """What ``/`` searches: it shows a query (filters its rows or marks its text), counts the
    matches shown, and brings one of them into view."""

    def search(self, query: str) -> None:
        """Show ``query`` ("": everything, unmarked)."""

    def match_count(self) -> int:
        """The matches of the query shown now (0 without a query)."""

    def show_match(self, index: int) -> None:
        """Select match ``index`` (0-based, below :meth:`match_count`) and scroll it into view."""


class SearchCountChanged(Message):
    """A :class:`Searchable`'s match count changed with its data (new rows, a longer answer):
    the status line counts again."""


class SearchBar(Horizontal):
    """The search box and its status line (one row, above the footer; hidden while no query is
    kept and the box is closed)."""

    DEFAULT_CSS = """
    SearchBar { height: 1; display: none; }
    SearchBar.-editing, SearchBar.-kept { display: block; }
    SearchBar > Input { display: none; width: 1fr; height: 1; border: none; padding: 0 1; }
    SearchBar.-editing > Input { display: block; }
    SearchBar > .search-status { width: auto; height: 1; padding: 0 1; color: $text-muted; }
    SearchBar.-kept > .search-status { width: 1fr; }
    SearchBar.-editing > .search-status { width: auto; }
    """

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        #: each target's search, by the target's name
        self.states: dict[str, SearchState] = {}
        self._return: Widget | None = None
        self._target_name = ""

    def compose(self) -> ComposeResult:
        box = SteadyInput(placeholder="search (literal, any case): Enter keeps it, Escape clears it", id="search")
        box.can_focus = False  # only while open: never a Tab stop or a screen's first focus
        yield box
        yield Static(classes="search-status")

    @property
    def editing(self) -> bool:
        """Whether the box is open."""
        return self.has_class("-editing")

    @property
    def box(self) -> Input:
        return self.query_one("#search", Input)

    def state(self) -> SearchState:
        """The search of the current target."""
        return self.states.setdefault(self._target_name, SearchState())

    def _target(self) -> tuple[str, Searchable] | None:
        screen = self.screen
        found = screen.search_target() if isinstance(screen, SearchScreen) else None
        if found is not None:
            self._target_name = found[0]
        return found

    # ------------------------------------------------------------------------------ actions
    def open(self) -> None:
        """Open the box on the current target (its kept query in it), keeping the focus to give
        back. The box has the focus when this returns (not after a refresh): the keys typed right
        after ``/``, already queued, go into it, never to the screen's keys. With nothing to
        search on this tab the box opens too (what is typed lands in it) and says so."""
        if self._target() is None:
            self._target_name = ""
        focused = self.screen.focused
        if focused is not self.box:
            self._return = focused
        self.add_class("-editing")
        self.box.can_focus = True
        self.box.value = self.state().query if self._target_name else ""
        self.box.cursor_position = len(self.box.value)
        self.screen.set_focus(self.box)
        self.show_status()

    def close(self) -> None:
        """Close the box and give the focus back where it was (nowhere, if that is gone)."""
        self.remove_class("-editing")
        self.box.can_focus = False
        back, self._return = self._return, None
        if back is not None and back.is_attached and back.focusable and back.is_on_screen:
            back.focus()
        else:
            self.screen.set_focus(None)
        self.show_status()

    def clear(self) -> None:
        """Clear the current target's query (everything shown again, nothing marked)."""
        self.apply("")

    def apply(self, query: str) -> None:
        """Search the current target for ``query`` and select its first match."""
        found = self._target()
        if found is None:
            return
        _name, target = found
        target.search(query)
        st = self.state()
        st.update(query, target.match_count())
        if st.index >= 0:
            target.show_match(st.index)
        self.show_status()

    def step(self, k: int) -> None:
        """``n`` / ``N``: the match ``k`` on from the current one, round the ends."""
        found = self._target()
        st = self.state()
        if found is None or not st.query:
            self.notify("no search: / searches", timeout=2)
            return
        st.update(st.query, found[1].match_count())
        if st.step(k):
            found[1].show_match(st.index)
        self.show_status()

    def recount(self) -> None:
        """The target's data changed: count its matches again (the current one kept)."""
        found = self._target()
        st = self.state()
        if found is not None and st.query:
            st.update(st.query, found[1].match_count())
        self.show_status()

    def retarget(self) -> None:
        """The screen shows another target (a tab switch): show that target's search."""
        if self._target() is not None:
            self.recount()
        else:
            self._target_name = ""
            self.show_status()

    def show_status(self) -> None:
        """The status line: the query's count and position, and what n / N / Escape do."""
        st = self.state() if self._target_name else SearchState()
        self.set_class(bool(st.query) and not self.editing, "-kept")
        if self.editing and not self._target_name:
            self.query_one(".search-status", Static).update(Text("nothing to search on this tab", style="dim"))
            return
        line = Text(st.status(), style="bold" if st.count else "")
        if st.query and not self.editing:
            line.append("   n next · N previous · / edit", style="dim")
        self.query_one(".search-status", Static).update(line)

    # ------------------------------------------------------------------------------- events
    @on(Input.Changed, "#search")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.editing:
            self.apply(event.value)

    @on(Input.Submitted, "#search")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.apply(event.value)
        self.close()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.editing:
            event.stop()
            event.prevent_default()
            self.clear()
            self.close()


class SearchScreen(Screen[None]):
    """A screen with the ``/`` search: the actions of :data:`SEARCH_KEYS` and the recount of a
    target whose data changed. A subclass composes one :class:`SearchBar` and answers
    :meth:`search_target`."""

    def search_target(self) -> tuple[str, Searchable] | None:
        """What ``/`` searches now and its name (its id; None: nothing on this screen or tab):
        the focused :class:`Searchable` (or the one holding the focus), else the first one in
        the active tab, else the first one on the screen."""
        focused = self.focused
        for node in focused.ancestors_with_self if focused is not None else ():
            if isinstance(node, Searchable) and isinstance(node, Widget):
                return node.id or type(node).__name__, node
        tabs = self.query(TabbedContent)
        where: Widget = self
        if tabs:
            tc = tabs.first(TabbedContent)
            if not tc.active:
                return None
            where = tc.get_pane(tc.active)
        for w in where.query(Widget):
            if isinstance(w, Searchable):
                return w.id or type(w).__name__, w
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``/`` in a text box types (its key is looked up before the box gets it)."""
        if action == "search" and isinstance(self.focused, Input):
            return False
        return True

    @property
    def search_bar(self) -> SearchBar:
        return self.query_one(SearchBar)

    def action_search(self) -> None:
        self.search_bar.open()

    def action_search_step(self, k: int) -> None:
        self.search_bar.step(k)

    def action_clear_search(self) -> None:
        self.search_bar.clear()

    @on(TabbedContent.TabActivated)
    def _retarget(self) -> None:
        bars = self.query(SearchBar)
        if bars:
            self.call_after_refresh(bars.first().retarget)

    @on(SearchCountChanged)
    def _recount(self, event: SearchCountChanged) -> None:
        event.stop()
        bars = self.query(SearchBar)
        if bars:
            bars.first().recount()
