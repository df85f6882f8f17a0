"""``bmoe-top fleet --prometheus URL``: the runtimes a Prometheus scrapes, live (docs/fleet.md
"The screen").

:class:`FleetScreen` is the instances table (:class:`~bmoe_top.tui.widgets.fleet_table.FleetTableView`)
refreshed by a :class:`~bmoe_top.tui.sources.prometheus.RefreshThread` over a
:class:`~bmoe_top.tui.fleet.session.FleetSession` (never faster than the scrape interval): sort
by any column (keys, or a click on its header), ``/`` filter, worst first by default (down,
then the highest flash wait share, then the lowest hit %), a refresh-now key, a pause key. The title
says the state (``● live``, ``❚❚ paused``, ``✖ disconnected``, ``⚠ error``, ``◆ fixed time``);
the status line says why a refresh failed (unreachable, timeout, bad_data with its query,
execution, too many samples, an empty result) while the table keeps its last good values with
their age, and which columns' queries failed.

Enter drills into the instance under the cursor: :class:`FleetDrillScreen` is the shared views of
``attach --metrics`` (breakdown, trends, layer heatmap, run panel) over a run model that
:class:`~bmoe_top.tui.feed.fleet.DrillFeed` fills from ``query_range`` answers, so the history
from before bmoe-top started is there from the first frame; Escape goes back to the table.

Every label value and error text from Prometheus is drawn through
:func:`bmoe_top.parsers.sanitize.sanitize`. With ``at`` (``--at``) both screens show that one
time, refreshed once.
"""

from __future__ import annotations

import collections
import gc
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Input, Static

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.fleet import DrillFeed
from bmoe_top.tui.fleet.drill import DrillDown
from bmoe_top.tui.fleet.queries import COLUMN_BY_KEY, DERIVED
from bmoe_top.tui.fleet.session import TABLE_POINTS, FleetSession
from bmoe_top.tui.fleet.table import CellState, FleetState, FleetTable, InstanceRow, Key, search_cells, sort_rows
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.model.quantities import Quantity, q
from bmoe_top.tui.present.numbers import show
from bmoe_top.tui.present.search import contains
from bmoe_top.tui.screens.attach import AttachScreen
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.screens.modals import HelpScreen
from bmoe_top.tui.sources.prometheus import (
    PromAlert,
    PromError,
    PromErrorKind,
    PrometheusClient,
    RefreshThread,
    format_duration,
)
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.base import remember
from bmoe_top.tui.widgets.fleet_table import (
    FLEET_TABLE_KEYS,
    SORT_KEYS,
    STATE_WORDS,
    VIEW_COLUMNS,
    FleetTableView,
    age_text,
    cell_text,
    shorten,
)
from bmoe_top.tui.widgets.focus import FocusRules
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.palette import STATUS_STYLE
from bmoe_top.tui.widgets.search import SEARCH_KEYS, Searchable, SearchBar, SearchScreen

__all__ = ["FleetDrillScreen", "FleetOptions", "FleetScreen", "STATE_INDICATOR", "error_text", "run_fleet"]

#: The screen's state -> (indicator, style).
STATE_INDICATOR = {
    "connecting": ("… connecting", STATUS_STYLE["connecting"]),
    "live": ("● live", STATUS_STYLE["ok"]),
    "paused": ("❚❚ paused", "bold #e5c07b"),
    "disconnected": ("✖ disconnected", STATUS_STYLE["disconnected"]),
    "error": ("⚠ error", STATUS_STYLE["error"]),
    "fixed": ("◆ fixed time", "bold #61afef"),
}

#: Errors that mean Prometheus cannot be reached (the others: it answered, with an error).
DISCONNECTED = frozenset({PromErrorKind.UNREACHABLE, PromErrorKind.TIMEOUT})

LEGEND = ("wall = compute + flash wait + mgmt, ms per token   ✖ down   ▲ highest flash wait share   ▼ lowest hit %   "
          "(12s) stale: newest value, its age   · no value   not exported: no such series   ←/→ more columns")

#: What the fleet's help says under its keys.
FLEET_NOTES = """
One row per runtime the Prometheus scrapes, refreshed never faster than its scrape interval.
Worst first: down, then the highest stall share, then the lowest hit %. A header click sorts by
that column. A value older than the newest refresh shows its age; · is no value; "not exported":
the runtime exports no such series. Enter opens the instance over the window (Escape comes back).
"""

#: What the drill-down's help says under its keys.
DRILL_NOTES = """
One instance over the fleet's window, from Prometheus' history (query_range): the wall-time
breakdown, the trends and the layer heatmap, on the shared token axis. Escape goes back to the
table; the playback keys move through the window.
"""

#: Keys a focused text box keeps for itself.
TYPING_ACTIONS = frozenset({"sort_next", "sort_prev", "invert", "worst", "refresh_now", "toggle_pause",
                            "toggle_sparks", "help", "quit", "search", "search_step", "columns"})

_LABELS = {c.sort: c.label for c in VIEW_COLUMNS}


def alerts_text(alerts: Sequence[PromAlert]) -> Text:
    """One line of Prometheus's alerts on the table's rows (empty when none): the firing ones by
    name and instance, then how many are pending. Label values are sanitised."""
    firing = [a for a in alerts if a.state == "firing"]
    pending = len(alerts) - len(firing)
    t = Text()
    if not alerts:
        return t
    if firing:
        t.append(f"▲ firing {len(firing)}: ", style="bold #e06c75")
        t.append(", ".join(sanitize(f"{a.name} {a.labels.get('instance', '')}".strip()) for a in firing[:4])
                 + (" …" if len(firing) > 4 else ""), style="#e06c75")
    if pending:
        t.append(("  " if firing else "") + f"{pending} pending", style="#d19a66")
    t.append("\n")
    return t


def error_text(err: PromError) -> str:
    """One line for a Prometheus error: its kind, message, HTTP status, the query (sanitised)."""
    out = f"{err.kind.value}: {err.message}"
    if err.http_status is not None and err.kind in (PromErrorKind.HTTP, PromErrorKind.MALFORMED):
        out += f" (HTTP {err.http_status})"
    if err.body and err.kind in (PromErrorKind.HTTP, PromErrorKind.MALFORMED):
        out += f" body: {err.body[:120]}"
    if err.query and err.kind in (PromErrorKind.BAD_DATA, PromErrorKind.EXECUTION, PromErrorKind.TOO_MANY_SAMPLES,
                                  PromErrorKind.EMPTY, PromErrorKind.TIMEOUT, PromErrorKind.ERROR):
        out += f"  query: {err.query}"
    return sanitize(out)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def filter_rows(rows: Iterable[InstanceRow], text: str) -> list[InstanceRow]:
    """The rows the ``/`` search keeps: those with ``text`` in their instance, job or a grouping
    label (:func:`~bmoe_top.tui.fleet.table.search_cells`); every row for an empty query."""
    return [r for r in rows if contains(text, search_cells(r))]


class FleetSearch:
    """The fleet table as the ``/`` search's target (a
    :class:`~bmoe_top.tui.widgets.search.Searchable`): the query filters the rows, ``n`` / ``N``
    move the cursor through the rows shown."""

    def __init__(self, screen: FleetScreen) -> None:
        self.screen = screen

    def search(self, query: str) -> None:
        self.screen.filter_text = query
        self.screen._resort()

    def match_count(self) -> int:
        return len(self.screen.shown) if self.screen.filter_text else 0

    def show_match(self, index: int) -> None:
        self.screen.query_one(FleetTableView).move_cursor(index)


class FleetScreen(FocusRules, SearchScreen):
    """The instances table (see the module docstring).

    ``url``, ``selector``, ``window_s``, ``points``, ``api_key``, ``timeout``: as
    ``bmoe-top fleet``; ``at``: show that time only (Unix s); ``drill``: (job or None, instance,
    other labels of its target) to drill into once the table is shown; ``fps``: polls of the
    refresh thread's results per second; ``label``: what the title calls the Prometheus (default its URL). ``state``
    (:class:`~bmoe_top.tui.fleet.table.FleetState`): the last good table and the newest error;
    ``shown``: the rows drawn, in order."""

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    #fleet-status { height: auto; max-height: 4; padding: 0 1; background: $panel; }
    #fleet-legend { height: auto; padding: 0 1; color: $text-muted; }
    """

    KEYS: ClassVar[tuple[km.Key, ...]] = (
        km.Key("enter", "drill", "drill into the instance under the cursor", title="Drill down"),
        *SEARCH_KEYS,
        km.Key("s,greater_than_sign", "sort_next", "sort by the next column", footer="sort by next column",
               title="Sort by the next column"),
        km.Key("less_than_sign", "sort_prev", "sort by the previous column", title="Sort by the previous column"),
        km.Key("i", "invert", "invert the sort", title="Invert the sort"),
        km.Key("w", "worst", "worst first (down, highest stall share, lowest hit %)", footer="worst first",
               title="Worst first"),
        km.Key("r", "refresh_now", "refresh now", footer="refresh now", title="Refresh now"),
        km.Key("space", "toggle_pause", "pause / resume the refresh", footer="pause", title="Pause / resume"),
        km.Key("v", "toggle_sparks", "sparklines on / off", title="Sparklines"),
        km.Key("left", "columns(-1)", "columns to the left", palette=False),
        km.Key("right", "columns(1)", "columns to the right", palette=False),
        km.Key("escape", "clear_search", "clear the search", title="Clear the search"),
        km.Key("question_mark,h,f1", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        km.Key("q", "quit", "quit", footer="quit", title="Quit"),
        km.Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", "anywhere", palette=False),
        *km.FOCUS_KEYS,
        *FLEET_TABLE_KEYS,
    )
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(KEYS)

    def __init__(self, url: str, selector: str = "", window_s: float = 300.0, *, points: int = TABLE_POINTS,
                 api_key: str | None = None, timeout: float = 10.0, at: float | None = None,
                 drill: tuple[str | None, str, dict[str, str]] | None = None, fps: float = 10.0,
                 label: str | None = None) -> None:
        super().__init__()
        self.url = url
        self.label = url if label is None else label
        self.selector = selector
        self.window_s = float(window_s)
        self.points = points
        self.api_key = api_key
        self.timeout = timeout
        self.at = at
        self.fps = fps
        self.pending_drill = drill
        self.client = PrometheusClient(url, timeout=timeout, api_key=api_key)
        self.session = FleetSession(self.client, selector=selector, window_s=window_s, points=points)
        self.state = FleetState()
        kept = BmoeTopApp.startup_settings().fleet
        sorts = ("rank", *SORT_KEYS)
        self.sort = kept.sort if kept.sort in sorts else "rank"
        if kept.sort not in sorts:
            BmoeTopApp.settings_problem("fleet.sort", kept.sort, sorts, "rank")
        self.descending = kept.descending
        self.filter_text = ""
        self.sparks = kept.sparklines
        self.user_paused = False
        self.shown: list[InstanceRow] = []
        self.n_applied = 0
        #: What the screen shows, for the refresh thread: (sort, descending, filter, first row on
        #: screen, rows on screen); a tuple, replaced whole.
        self.view_spec: tuple[str, bool, str, int, int] = ("rank", False, "", 0, 30)
        self._asked_detail = False
        self._inbox: collections.deque[FleetTable | PromError] = collections.deque()
        self._thread: RefreshThread[FleetTable] | None = None
        self._title_key: Hashable = None

    # ---------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="fleet-status")
        yield FleetTableView(id="fleet-table")
        yield Static(Text(LEGEND), id="fleet-legend")  # wrapped on a narrow terminal, never cut
        yield SearchBar()
        yield FittingFooter()

    def on_mount(self) -> None:
        self._thread = self.session.refresher(self._inbox.append, self._inbox.append, refresh=self._refresh,
                                              on_exit=self.client.close)
        self._thread.start()
        self.set_interval(1.0 / max(1.0, self.fps), self.tick)
        self.query_one(FleetTableView).focus()
        self.draw_status(force=True)

    def on_unmount(self) -> None:
        if self._thread is not None:
            self._thread.stop()

    def on_screen_suspend(self) -> None:
        """A drill-down covers the table: no table refreshes meanwhile."""
        if self._thread is not None:
            self._thread.pause()

    def on_screen_resume(self) -> None:
        if self._thread is not None and not self.user_paused and self.at is None:
            self._thread.resume()
            self._thread.refresh_now()

    def _refresh(self) -> FleetTable:
        table = self.session.refresh(self.at, detail=self._choose)
        if self.at is not None and self._thread is not None:
            self._thread.pause()  # one time, shown once
        return table

    def _choose(self, rows: list[InstanceRow]) -> list[Key]:
        """On the refresh thread: the rows of a large fleet to read in detail, the ones the
        screen shows (its sort, filter and scroll: :attr:`view_spec`) and a page on each side."""
        sort, descending, text, first, n = self.view_spec
        shown = filter_rows(rows, text)
        if sort != "rank":
            shown = sort_rows(shown, sort, descending)
        start = max(0, first - n)
        return [r.key for r in shown[start:start + self.session.detail_rows]]

    # ---------------------------------------------------------------------------- repaint loop
    def tick(self) -> None:
        changed = False
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, FleetTable):
                self.state.apply(item)
                changed = True
            else:
                self.state.fail(item, time.time())
        if changed:
            self.draw_table()
            _freeze_once()
        self.follow_view()
        self.draw_status()
        if self.pending_drill is not None and self.state.table is not None:
            job, inst, labels = self.pending_drill
            self.pending_drill = None
            self.open_drill(job, inst, labels)

    def view_state(self) -> str:
        """``connecting``, ``live``, ``paused``, ``disconnected``, ``error`` or ``fixed``."""
        err = self.state.error
        if self.user_paused:
            return "paused"
        if err is not None:
            return "disconnected" if err.kind in DISCONNECTED else "error"
        if self.state.table is None:
            return "connecting"
        return "fixed" if self.at is not None else "live"

    def ordered(self, table: FleetTable) -> list[InstanceRow]:
        """The table's rows filtered and sorted as the screen shows them."""
        rows = filter_rows(table.rows, self.filter_text)
        return rows if self.sort == "rank" else sort_rows(rows, self.sort, self.descending)

    def draw_table(self) -> None:
        table = self.state.table
        if table is None or not self.is_attached:
            return
        view = self.query_one(FleetTableView)
        self.shown = self.ordered(table)
        view.set_sort(self.sort, self.descending)
        view.show(self.shown, sparks=self.sparks)
        self.n_applied += 1
        if self.filter_text and self.query(SearchBar):
            self.search_bar.recount()
        self._asked_detail = False
        self.follow_view()

    def follow_view(self) -> None:
        """Tell the refresh thread what is on screen (:attr:`view_spec`); when rows on screen were
        not read in detail (scrolled to, sorted or filtered up), ask for a refresh now (never
        sooner than the scrape interval)."""
        if not self.is_attached:
            return
        view = self.query_one(FleetTableView)
        vis = view.visible_rows()
        self.view_spec = (self.sort, self.descending, self.filter_text, vis.start, max(1, len(vis)))
        table = self.state.table
        if self.sparks and table is not None and not self._asked_detail and self._thread is not None and \
                any(view.rows[i].key not in table.detail for i in vis):
            self._asked_detail = True
            self._thread.refresh_now()

    def title_text(self, width: int | None = None) -> Text:
        """The title: what is read and its state, then its numbers; at ``width`` cells the
        parts that do not fit are left out whole, the least needed first (the window's rules,
        the selector, the table's age, the sort), never cut."""
        st = self.state
        word, style = STATE_INDICATOR[self.view_state()]
        label = sanitize(self.label)
        parts: list[tuple[int, Text]] = [(0, Text("bmoe-top  fleet ", style="bold") + Text(label))]
        if self.selector:
            parts.append((5, Text("  " + sanitize(self.selector), style="#abb2bf")))
        parts.append((0, Text("  ") + Text(word, style=style) + Text(" ")))
        table = st.table
        if table is not None:
            n = len(table.rows)
            count = Text(f"  {n} instance{'s' if n != 1 else ''}")
            if self.filter_text:
                count.append(f" ({len(self.shown)} shown)", style="#e5c07b")
            parts.append((1, count))
            parts.append((6, Text(f"  window {format_duration(table.window_s)}, step {format_duration(table.step_s)}, "
                                  f"scrape {format_duration(table.scrape_interval_s)}, "
                                  f"rate [{format_duration(table.rate_interval_s)}]", style="#7f848e")))
            if self.at is not None:
                parts.append((3, Text(f"  at {_utc(table.at)}", style="#61afef")))
            else:
                parts.append((4, Text(f"  table {age_text(st.age_s(time.time()))} old", style="#7f848e")))
        sort = "worst first" if self.sort == "rank" else f"by {_LABELS.get(self.sort, self.sort)} " + (
            "▼" if self.descending else "▲")
        parts.append((2, Text(f"  sorted {sort}", style="#7f848e")))
        if width is not None:
            for drop in (6, 5, 4, 3, 2, 1):
                if sum(p.cell_len for _, p in parts) <= width:
                    break
                parts = [(k, p) for k, p in parts if k != drop]
            over = sum(p.cell_len for _, p in parts) - width
            if over > 0:  # what is read, shortened with a rule
                room = max(1, cell_len(label) - over)
                parts[0] = (0, Text("bmoe-top  fleet ", style="bold") + Text(shorten(label, room)))
        t = Text()
        for _, p in parts:
            t.append_text(p)
        return t

    def status_text(self) -> Text:
        st = self.state
        t = Text()
        if st.error is not None:
            t.append(("✖ " if st.error.kind in DISCONNECTED else "⚠ ") + error_text(st.error), style="bold #e06c75")
            if st.table is not None:
                t.append(f"  (showing the last good table, {age_text(st.age_s(time.time()))} old)", style="#e06c75")
            t.append("\n")
        table = st.table
        if table is None:
            if st.error is None:
                t.append("asking Prometheus…", style="#7f848e")
            return t
        for key, err in table.errors.items():
            col = COLUMN_BY_KEY.get(key)
            label = col.label if col is not None else DERIVED.get(key, (key,))[0]
            t.append(f"⚠ {label}: ", style="bold #d19a66")
            t.append(error_text(err) + "\n", style="#d19a66")
        for w in table.warnings[:2]:
            t.append("⚠ prometheus warning: " + sanitize(w) + "\n", style="#d19a66")
        t.append_text(alerts_text(table.alerts))
        worst = table.worst
        if worst is not None:
            t.append("worst: ", style="#abb2bf")
            bad = worst.state.value in ("down", "gone")
            t.append(sanitize(worst.instance), style="bold #e06c75" if bad else "bold")
            t.append(f" ({sanitize(worst.job)})  " + ", ".join(_flag_text(worst, f) for f in worst.flags))
        elif not table.rows:
            t.append("no instance", style="#7f848e")
        else:
            t.append("every instance up", style="#98c379")
        if self.filter_text:
            t.append("  filter: ", style="#e5c07b")
            t.append(sanitize(self.filter_text), style="bold #e5c07b")
        t.rstrip()
        return t

    def draw_status(self, force: bool = False) -> None:
        if not self.is_attached or not self.query("#title"):
            return
        st = self.state
        key = (self.view_state(), st.n_ok, st.n_failed, id(st.error), self.sort, self.descending, self.filter_text,
               len(self.shown), None if self.at is not None else int(time.time()), self.size.width)
        if key == self._title_key and not force:
            return
        self._title_key = key
        title = self.query_one("#title", Static)
        self.query_one("#title", Static).update(self.title_text(title.content_region.width or None))
        self.query_one("#fleet-status", Static).update(self.status_text())

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Typing in the filter box is typing, not keys."""
        if action in TYPING_ACTIONS and isinstance(self.focused, Input):
            return False
        return super().check_action(action, parameters)

    def _resort(self) -> None:
        self.draw_table()
        self.draw_status(force=True)

    def set_sort(self, sort: str, descending: bool | None = None) -> None:
        """Sort by ``sort`` (a key of :data:`~bmoe_top.tui.widgets.fleet_table.SORT_KEYS` or
        ``rank``); ``descending`` default: numbers high first, names a to z."""
        self.sort = sort
        self.descending = (sort not in ("instance", "job", "state", "rank")) if descending is None else descending
        remember(self, "fleet.sort", sort)
        remember(self, "fleet.descending", self.descending)
        self._resort()

    def action_sort_next(self, step: int = 1) -> None:
        keys = ("rank", *SORT_KEYS)
        i = keys.index(self.sort) if self.sort in keys else 0
        self.set_sort(keys[(i + step) % len(keys)])

    def action_sort_prev(self) -> None:
        self.action_sort_next(-1)

    def action_invert(self) -> None:
        if self.sort != "rank":
            self.set_sort(self.sort, not self.descending)

    def action_worst(self) -> None:
        self.set_sort("rank")

    @on(FleetTableView.HeaderClicked)
    def _header(self, event: FleetTableView.HeaderClicked) -> None:
        col = event.column
        if col.sort == self.sort:
            self.set_sort(col.sort, not self.descending)
        else:
            self.set_sort(col.sort)

    def action_refresh_now(self) -> None:
        if self._thread is not None:
            self._thread.refresh_now()

    def action_toggle_pause(self) -> None:
        self.user_paused = not self.user_paused
        if self._thread is not None and self.at is None:
            if self.user_paused:
                self._thread.pause()
            else:
                self._thread.resume()
                self._thread.refresh_now()
        self.draw_status(force=True)

    def action_columns(self, step: int) -> None:
        self.query_one(FleetTableView).action_columns(step)

    def action_toggle_sparks(self) -> None:
        self.sparks = not self.sparks
        remember(self, "fleet.sparklines", self.sparks)
        self.draw_table()

    def search_target(self) -> tuple[str, Searchable] | None:
        """The table: its rows are what ``/`` filters."""
        return "fleet", FleetSearch(self)

    def action_clear_search(self) -> None:
        """Escape: the search cleared, the focus back on the table."""
        super().action_clear_search()
        self.query_one(FleetTableView).focus()

    @on(FleetTableView.Selected)
    def _row_selected(self, event: FleetTableView.Selected) -> None:
        self.drill_key(event.key)

    def action_drill(self) -> None:
        sel = self.query_one(FleetTableView).selected
        if sel is not None:
            self.drill_key(sel)

    def drill_key(self, key: Key) -> None:
        table = self.state.table
        row = table.row(key[1], key[0], dict(zip(table.by[2:], key[2:]))) if table is not None else None
        if row is not None:
            self.open_drill(row.job, row.instance, row.labels)

    def open_drill(self, job: str | None, instance: str, labels: dict[str, str] | None = None) -> None:
        """Push the drill-down of ``instance`` (of ``job``, with these other grouping ``labels``;
        None: the first target of that name)."""
        self.app.push_screen(FleetDrillScreen(self.url, self.selector, self.window_s, instance, job,
                                              api_key=self.api_key, timeout=self.timeout, at=self.at,
                                              fps=self.fps, labels=labels))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(km.help_rows(self.KEYS), FLEET_NOTES, "bmoe-top fleet: keys"))

    def action_quit(self) -> None:
        self.app.exit()


_frozen = False


def _freeze_once() -> None:
    """Once per process, when the first table is drawn: collect, then move every object alive
    (the app's widgets, styles, code: some 60,000, alive for good) out of the cyclic garbage
    collector's walks (:func:`gc.freeze`). A full collection then walks the fleet's objects only
    (33 ms became 10 ms with 5,000 rows), where it came as 60 ms pauses on keys. Frozen objects
    are still freed when their last reference goes."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


def _flag_text(row: InstanceRow, flag: str) -> str:
    if flag in ("down", "gone"):
        return f"{flag} (last up {age_text(row.last_up_age_s)} ago)" if row.last_up_age_s is not None else flag
    if flag == "highest_stall":
        return f"highest flash wait share {cell_text(row.cells['stall_share'])[0]} %"
    if flag == "lowest_hit":
        return f"lowest hit % {cell_text(row.cells['hit_pct'])[0]}"
    return flag


#: The drill-down side panel's "now" rows: catalogue keys (``bmoe_top.tui.model.quantities``); each
#: label a tok/s, a share or an amount of another scope shares names its scope (the rate window).
NOW_ROWS = ("fleet.tok_s", "fleet.prompt_tok_s", "fleet.hit_pct", "fleet.read_mib_s", "fleet.wall_ms",
            "fleet.compute_ms", "fleet.flash_ms", "fleet.mgmt_ms", "fleet.stall_share", "fleet.resident_mib",
            "fleet.budget_mib", "fleet.requests_processing", "fleet.requests_deferred")


class FleetDrillScreen(AttachScreen):
    """One instance over the window, on the shared views (see the module docstring). ``feed``
    (:class:`~bmoe_top.tui.feed.fleet.DrillFeed`) fills ``model``; ``started_at``: when this
    screen was made (Unix s), to say how much of the history predates it."""

    KEYS: ClassVar[tuple[km.Key, ...]] = km.merged((
        km.Key("escape", "back", "back to the table", footer="back to the table", title="Back to the table"),
        km.Key("r", "refresh_now", "refresh now", footer="refresh now", title="Refresh now"),
    ), RunScreen.KEYS)
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(km.footer_first(KEYS, 2))

    def __init__(self, url: str, selector: str, window_s: float, instance: str, job: str | None = None, *,
                 api_key: str | None = None, timeout: float = 10.0, at: float | None = None,
                 fps: float = 10.0, labels: dict[str, str] | None = None) -> None:
        self.url = url
        self.instance = instance
        self.job = job
        self.labels = dict(labels or {})
        self.at = at
        self.started_at = time.time()
        run = RunModel(LIVE)
        self.feed = DrillFeed(run, f"prometheus {url} instance {instance}")
        self.client = PrometheusClient(url, timeout=timeout, api_key=api_key)
        self.session = FleetSession(self.client, selector=selector, window_s=window_s)
        self.error: PromError | None = None
        self.error_at: float | None = None
        self.last: DrillDown | None = None
        self._lock = threading.Lock()
        self._thread: RefreshThread[DrillDown] | None = None
        self._jumped = False
        name = sanitize(" ".join([instance, *(f"{k}={v}" for k, v in self.labels.items())])) + \
            (f" ({sanitize(job)})" if job else "")
        super().__init__(run, title=f"fleet {name}", fps=fps)
        if at is not None:
            self.playback.follow = False  # one fixed time: no live edge to follow

    # -- the source ------------------------------------------------------------------------------
    def _drill(self) -> DrillDown:
        d = self.session.drill(self.instance, self.job, at=self.at, labels=self.labels)
        if self.at is not None and self._thread is not None:
            self._thread.pause()
        return d

    def _got(self, d: DrillDown) -> None:
        settled = None if self.at is not None else time.time() - d.scrape_interval_s
        self.feed.apply(d, settled=settled)
        with self._lock:
            self.error = None
            self.last = d

    def _failed(self, err: PromError) -> None:
        self.feed.failed(err)
        with self._lock:
            self.error, self.error_at = err, time.time()

    def start_source(self) -> None:
        self._thread = RefreshThread(self._drill, self._got, self._failed, every=0.0,
                                     min_interval=lambda: self.session.scrape_interval_s, on_exit=self.client.close)
        self._thread.start()

    def on_unmount(self) -> None:
        if self._thread is not None:
            self._thread.stop()

    def refresh_views(self, force: bool = False) -> None:
        if self.at is not None and not self._jumped and self.model.tokens.n:
            self._jumped = True
            self.playback.end()  # a fixed time: open on its newest step
        super().refresh_views(force)

    # -- the status line and the side panel -------------------------------------------------------
    def attach_key(self) -> Hashable:
        return (self.model.version, None if self.at is not None else int(time.time()))

    def status_text(self) -> Text:
        with self._lock:
            err, d = self.error, self.last
        t = Text()
        if err is not None:
            t.append(("✖ " if err.kind in DISCONNECTED else "⚠ ") + error_text(err), style="bold #e06c75")
            if d is not None:
                t.append(f"  (showing the last good drill-down, {age_text(time.time() - d.at)} old)", style="#e06c75")
            return t
        if d is None:
            t.append("… asking Prometheus for the window", style=STATUS_STYLE["connecting"])
            return t
        up = d.series["up"][-1] if d.series["up"].size else float("nan")
        t.append("● up " if up == 1 else "✖ down " if up == 0 else "? not scraped now ",
                 style=STATUS_STYLE["ok"] if up == 1 else STATUS_STYLE["error"])
        t.append(f"  window {format_duration(d.window_s)}, step {format_duration(d.step_s)}, "
                 f"rate [{format_duration(d.rate_interval_s)}]", style="#7f848e")
        if self.at is not None:
            t.append(f"  at {_utc(d.at)}", style="#61afef")
        if d.first_t is not None:
            before = self.started_at - d.first_t if self.at is None else d.at - d.first_t
            what = "before bmoe-top started" if self.at is None else "before that time"
            t.append(f"  history from {age_text(before)} {what}" if before > 0 else "", style="#98c379")
        for key, e in d.errors.items():
            t.append(f"\n⚠ {key}: " + error_text(e), style="#d19a66")
        return t

    def panel_rows(self) -> Sequence[tuple[str, str, str]]:
        with self._lock:
            d = self.last
        rows: list[tuple[str, str, str]] = [("instance", "", "section"), ("instance", sanitize(self.instance), "name")]
        if d is None:
            return rows
        rows.append(("job", sanitize(d.job), ""))
        rows += [(sanitize(k), sanitize(v), "") for k, v in d.labels.items()]
        window = format_duration(d.rate_interval_s)
        rows.append((f"now (rate window {window})", "", "section"))
        for key in NOW_ROWS:
            x = q(key)
            rows.append((x.screen_label(window=window), *_series_now(d, x)))
        if d.not_exported:
            names = ", ".join(COLUMN_BY_KEY[k].label for k in d.not_exported if k in COLUMN_BY_KEY)
            rows.append(("not exported", names, "missing"))
        return rows

    # -- actions ----------------------------------------------------------------------------------
    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def action_refresh_now(self) -> None:
        if self._thread is not None:
            self._thread.refresh_now()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(km.help_rows(self.KEYS), DRILL_NOTES, "bmoe-top fleet, one instance: keys"))


def _series_now(d: DrillDown, x: Quantity) -> tuple[str, str]:
    """The newest value of the drill-down series of quantity ``x``, with its age when older than
    the newest step."""
    key = x.field
    a = d.series.get(key)
    if key in d.not_exported:
        return STATE_WORDS[CellState.NOT_EXPORTED], "missing"
    if a is None or not a.size:
        return STATE_WORDS[CellState.NO_DATA], "missing"
    ok = np.flatnonzero(np.isfinite(a))
    if not ok.size:
        return STATE_WORDS[CellState.NO_DATA], "missing"
    j = int(ok[-1])
    text = show(x, float(a[j]))
    if j < a.size - 1:
        text += f" ({age_text(float(d.t[-1] - d.t[j]))} old)"
    return text, ""


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """``bmoe-top fleet``'s options: the Prometheus ``url``, the ``selector``, the window in
    seconds, the points per sparkline, the ``api_key``, the query ``timeout`` (s), a fixed end
    time ``at`` (epoch s; None: now), ``drill`` (job, instance, labels) to open one instance's
    drill-down first, and the screen's ``fps``."""

    url: str
    selector: str = ""
    window_s: float = 300.0
    points: int = TABLE_POINTS
    api_key: str | None = None
    timeout: float = 10.0
    at: float | None = None
    drill: tuple[str | None, str, dict[str, str]] | None = None
    fps: float = 10.0


def run_fleet(opts: FleetOptions) -> int:
    """``bmoe-top fleet --prometheus URL ...`` interactive. Returns the exit status."""
    screen = FleetScreen(opts.url, opts.selector, opts.window_s, points=opts.points, api_key=opts.api_key,
                         timeout=opts.timeout, at=opts.at, drill=opts.drill, fps=opts.fps)
    app = BmoeTopApp(screen)
    app.run()
    return app.return_code or 0
