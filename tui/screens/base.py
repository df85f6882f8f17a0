"""The screen every mode builds on: one title line (the honest state indicator and the run's
numbers), the run panel and answer tail on the side, and the Overview / Text / Log / Problems
tabs, over one run model, with the playback keys.

The Overview is the shared time axis from top to bottom: the whole-run overview strip (the
visible window marked), the wall-time breakdown, the trends and the layer x token heatmap draw
the same window, column for column; the layer x expert map shows the state as of the selected
token. A mode screen composes its own parts into this layout through hooks called from
:meth:`RunScreen.compose` (a status line under the title, panels above the run panel, extra
tabs, a bar at the bottom); nothing is added to the DOM after mount.

Repaints come in two tiers, like htop's ``-d`` delay: the answer's tail follows new rows every
:data:`FAST_S` seconds, and the title line follows a change of state at the next tick (every
:data:`BASE_TICK_S`, or ``fps`` a second while a replay plays or a slow-motion view moves; a key
at once); the views (overview strip, breakdown, trends, maps), the panels and the title's numbers
repaint every ``refresh`` seconds while data streams (default :data:`REFRESH_S`; ``{`` and ``}``
step through :data:`REFRESH_STEPS`; a replay that plays, and every key, repaint at once), with
the tail in the same repaint, so the fast tier keeps step with them and the title's token is the
views' token. A tick with nothing new (the run's version, the playback, the size and the state
indicator unchanged) does nothing at all. Those decisions are :class:`~bmoe_top.tui.screens.clock.RepaintClock`'s
(no Textual in it), over a :class:`~bmoe_top.tui.screens.clock.ChangeKey`; this screen only carries them out.

Layouts follow the terminal: ``-compact`` under 100 x 30 (no side panel, no tab bar, one header
line, one map at a time: ``m`` swaps them), ``-tiny`` under 60 x 15 (a message that says so).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.jobs.event_file import EventFile, default_path, record_to_file
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.model.alerts import AlertEngine, AlertState, Transition, firing_text
from bmoe_top.tui.playback import Playback, PlayState
from bmoe_top.tui.present.events import events_table
from bmoe_top.tui.present.summary import mode_words
from bmoe_top.tui.screens.clock import FAST_S, ChangeKey, Repaint, RepaintClock, Scene
from bmoe_top.tui.screens.modals import HELP_FOOTNOTE, HelpScreen, ModeScreen, SeekScreen
from bmoe_top.tui.widgets.banner import Banner
from bmoe_top.tui.widgets.base import NeedChanged, RunView, ascii_text, look_of, remember, settings_of
from bmoe_top.tui.widgets.charts import BreakdownChart, OverviewStrip, TokenSelected, TrendChart
from bmoe_top.tui.widgets.diagnosis import DiagnosisLine
from bmoe_top.tui.widgets.focus import SCROLL_KEYS, PanelScroll, PaneTabs, quiet_containers, shown_focus_chain
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.grids import GRID_KEYS, ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.keymap import DATA_TABLE_KEYS, FOCUS_KEYS, Key, bindings, help_rows, key_label, parse_action
from bmoe_top.tui.widgets.lines import elide_words
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import (
    AnswerPanel,
    AnswerTail,
    ProblemsPanel,
    RunPanel,
    TitleLine,
    header_parts,
    safe_text,
)
from bmoe_top.tui.widgets.search import SEARCH_KEYS, SearchBar, SearchScreen
from bmoe_top.tui.widgets.stack import PanelStack
from bmoe_top.tui.widgets.tables import SortTable

__all__ = ["BASE_TICK_S", "COMPACT", "FAST_S", "MIN_SIZE", "REFRESH_S", "REFRESH_STEPS", "RunScreen"]

#: Log-pane lines drawn (the newest).
LOG_SHOWN = 2000
#: The widgets a repaint updates from the run besides the views, in update order.
PANEL_KINDS: tuple[type, ...] = (Banner, DiagnosisLine, RunPanel, AnswerPanel, AnswerTail, ProblemsPanel)
#: The panel groups a key hides or shows (``[panels]`` in the settings file), and their keys.
PANEL_GROUPS = ("trends", "answer", "maps")
PANEL_KEYS = {"trends": "T", "answer": "A", "maps": "M"}
#: Below this size the screen says it is too small (columns, rows).
MIN_SIZE = (60, 15)
#: Below this size the compact layout is used (columns, rows).
COMPACT = (100, 30)
#: Seconds between repaints of the views and panels while data streams (``--refresh``).
REFRESH_S = 1.0
#: Seconds between ticks while nothing on the screen animates (a live view following the newest
#: row at 1x, a replay held still): new rows, a state change and the fast tier need no more, and
#: each tick costs the event loop a wake-up. A replay that plays or a slow-motion live view ticks
#: ``fps`` a second.
BASE_TICK_S = 0.25
#: The refresh intervals ``{`` and ``}`` step through (seconds).
REFRESH_STEPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
#: Statuses of a source that is not there (the indicator says "disconnected").
GONE = frozenset({Status.DISCONNECTED, Status.UNREACHABLE, Status.REFUSED, Status.SERVER_ERROR, Status.DISABLED,
                  Status.UNAUTHORIZED, Status.HTTP_ERROR, Status.ERROR, Status.MALFORMED})

#: Actions whose keys type into a focused text box instead (the footer does not offer them there).
TYPING_KEYS = frozenset({
    "toggle_play", "step", "jump_start", "jump_end", "zoom_in", "zoom_out", "zoom_fit", "faster", "slower",
    "seek", "toggle_fold", "toggle_tier_map", "toggle_turn_by_turn", "toggle_panels", "cycle_palette", "swap_map",
    "mode_detail", "search", "search_step", "tab", "help", "quit", "refresh_slower", "refresh_faster",
})


#: Actions whose keys move a focused table's cursor instead.
TABLE_NAV = frozenset({"step", "jump_start", "jump_end", "focus_prompt"})


class RunScreen(SearchScreen):
    """The views over ``run`` (see the module docstring).

    ``title`` names the source; ``fps`` is the ticks per second (replay frames, and how soon a
    key or a state change shows; default 10); the title and the answer text follow new rows
    every :data:`FAST_S` seconds; ``refresh`` is the seconds between repaints of the views and panels
    while data streams (default :attr:`BmoeTopApp.refresh_s <bmoe_top.tui.app.BmoeTopApp>`, else
    :data:`REFRESH_S`); ``follow`` pins the cursor to the newest row (live sources); ``start_at_end`` opens a replay
    with every row revealed, the whole run in the window and its last row selected
    (:meth:`~bmoe_top.tui.playback.Playback.open_finished`).
    """

    #: The screen's keys (:mod:`bmoe_top.tui.widgets.keymap`): its bindings, help, footer and
    #: palette entries are made from it; a mode screen's table is its own rows merged over these.
    KEYS: ClassVar[tuple[Key, ...]] = (
        Key("space,p", "toggle_play", "pause / resume the playback", footer="pause", title="Pause / resume"),
        Key("left", "step(-1)", "select the previous token", title="Previous token"),
        Key("right", "step(1)", "select the next token", title="Next token"),
        Key("shift+left,pageup", "step(-50)", "50 tokens back"),
        Key("shift+right,pagedown", "step(50)", "50 tokens on"),
        Key("home", "jump_start", "the first token", title="First token"),
        Key("end", "jump_end", "follow live (in real time), or the last token", footer="live/end",
            title="Follow live / last token"),
        Key("plus,equals_sign", "zoom_in", "zoom in: half as many tokens per column", footer="zoom in",
            title="Zoom in"),
        Key("minus", "zoom_out", "zoom out: twice as many tokens per column", footer="out", title="Zoom out"),
        Key("0", "zoom_fit", "zoom to the whole run", title="Zoom to the whole run"),
        Key("left_square_bracket,less_than_sign", "slower", "slower playback (under 1x a live view trails)",
            title="Slower playback / slow motion"),
        Key("right_square_bracket,greater_than_sign", "faster", "faster playback", title="Faster playback"),
        Key("left_curly_bracket", "refresh_slower", "refresh less often", title="Refresh less often"),
        Key("right_curly_bracket", "refresh_faster", "refresh more often", title="Refresh more often"),
        Key("g", "seek", "seek to a token by its number", title="Seek to a token…"),
        *SEARCH_KEYS,
        Key("f", "toggle_fold", "fold / scroll the layer maps", title="Fold / scroll the layer maps"),
        Key("t", "toggle_turn_by_turn", "turn by turn playback", title="Turn by turn playback"),
        Key("c", "cycle_palette", "next colour scale", title="Palette: next colour scale"),
        Key("m", "swap_map", "other map (while one is left out for want of rows)", title="Other map"),
        Key("v", "toggle_tier_map", "expert map: routing heat / memory tiers (misses by tier)",
            title="Expert map: routing heat / memory tiers"),
        Key("T", "toggle_panels('trends')", "trends on / off", title="Trends on / off"),
        Key("A", "toggle_panels('answer')", "answer on / off", title="Answer on / off"),
        Key("M", "toggle_panels('maps')", "maps on / off", title="Maps on / off"),
        Key("d", "mode_detail", "mode details (wall-time breakdown)", title="Mode details (wall-time breakdown)"),
        Key("1", "tab('overview')", "the Overview tab", title="Tab: Overview"),
        Key("2", "tab('text')", "the Text tab", title="Tab: Text"),
        Key("3", "tab('log')", "the Log tab", title="Tab: Log"),
        Key("4", "tab('problems')", "the Problems tab", title="Tab: Problems"),
        Key("e", "tab('events-tab')", "the Events tab: alerts, diagnosis, source states, turns",
            title="Tab: Events"),
        Key("f1,question_mark", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        Key("q", "quit", "quit", footer="quit", title="Quit"),
        Key("ctrl+c", "quit", "quit", scope="anywhere", palette=False),
        Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", scope="anywhere", palette=False),
        *FOCUS_KEYS,
        *GRID_KEYS,
        *SCROLL_KEYS,
        *DATA_TABLE_KEYS,
    )
    BINDINGS: ClassVar[list[BindingType]] = bindings(KEYS)

    #: What the help says under the keys: the screen's parts and what its marks mean.
    HELP_NOTES: ClassVar[str] = HELP_FOOTNOTE

    #: Nothing takes the focus on its own: the arrow keys move the selection (a focused tab bar
    #: would take them); the live screen focuses its prompt box itself.
    AUTO_FOCUS = ""

    #: Whether the side shows the answer's tail (sources without answer text leave it out).
    SHOW_ANSWER = True
    #: A live source quiet for longer than this (seconds) gets "no telemetry for N s" in the title.
    quiet_after_s = 3.0

    def __init__(self, run: RunModel, *, title: str = "", fps: float = 10.0, refresh: float | None = None,
                 follow: bool = False, start_at_end: bool = True) -> None:
        super().__init__()
        self.model = run
        self.playback = Playback(run, follow=follow)
        if start_at_end and not follow:
            self.playback.open_finished()
        self.source_title = title
        self.fps = fps
        kept = BmoeTopApp.startup_settings()
        if refresh is None:
            refresh = BmoeTopApp.refresh_s if BmoeTopApp.refresh_s is not None else kept.view.refresh_s
        #: when what repaints (the views every ``refresh_s``, the title and the tail between them)
        self.clock = RepaintClock(max(REFRESH_STEPS[0], float(refresh)), now=time.monotonic(),
                                  follows_rows=self.FOLLOWS_ROWS)
        self._title_key: ChangeKey | None = None
        self._base_timer: Timer | None = None
        self._frame_timer: Timer | None = None
        self._animating = False
        self.view_polls = 0  # polls of the views and panels (tests wait on it)
        self._parts: tuple[Any, ...] | None = None  # the widgets repainted, looked up once
        self._run_panels: tuple[RunPanel, ...] = ()  # those of them that are run panels
        self._log_len = 0
        self._layout = ""
        self._empty: dict[str, bool] = {}
        self._fitted_needs: tuple[int, ...] | None = None  # the views' need_changes at the last fit
        self.show_experts_compact = kept.view.compact_map == "experts"
        self._header_cache: tuple[tuple[Any, ...], list[tuple[str, Style]]] | None = None
        #: the settings' alert rules over this run's rows, evaluated at each repaint of the views
        #: (docs/alerts.md); a firing one is in the title and the run panel, never takes focus
        self.alerts = AlertEngine(kept.rules())
        self._events_shown = -1  # the event log's version the Events table shows
        #: the tab shown, as the last TabActivated said (the tick reads it: no widget lookup a tick)
        self._tab_shown_id = ""
        #: the JSONL writer of the run's events (docs/events.md), from mount to unmount
        self.event_file: EventFile | None = None

    # ---------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield TitleLine(id="title")
        yield Banner(self.model, id="banner")
        yield DiagnosisLine.for_run(self.model, BmoeTopApp.startup_settings().probe.best_mb_s, id="diagnosis")
        yield from self.compose_status()
        with Horizontal(id="body"):
            with Vertical(id="side"):
                with PanelScroll(id="run-panel-scroll"):
                    yield from self.compose_side()
                    yield RunPanel(self.model, self.playback, id="run-panel", alerts=self.alerts)
                if self.SHOW_ANSWER:
                    yield AnswerTail(self.model, self.playback, id="answer-side")
            with PaneTabs(id="tabs", initial="overview"):
                with TabPane("Overview", id="overview"):
                    with PanelStack(id="main"):
                        yield OverviewStrip(self.model, self.playback, id="overview-strip")
                        yield BreakdownChart(self.model, self.playback, id="breakdown")
                        yield TrendChart(self.model, self.playback, id="trends")
                        yield LayerHeatmap(self.model, self.playback, id="heatmap")
                        yield ExpertMap(self.model, self.playback, id="expert-map")
                with TabPane("Text", id="text"):
                    with VerticalScroll(id="text-scroll"):
                        yield AnswerPanel(self.model, self.playback, id="answer-full")
                with TabPane("Log", id="log"):
                    with VerticalScroll(id="log-scroll"):
                        yield Static(id="log-text")
                with TabPane("Problems", id="problems"):
                    with VerticalScroll(id="problems-scroll"):
                        yield ProblemsPanel(self.model, id="problems-panel")
                yield from self.compose_tabs()
                yield TabPane("Events", SortTable(events_table((), 0), follow=True, id="events"), id="events-tab")
        yield from self.compose_bottom()
        yield SearchBar(id="search-bar")
        yield FittingFooter(compact=True)
        yield Static(id="too-small")

    def compose_status(self) -> ComposeResult:
        """A status line under the title (live and attach modes)."""
        yield from ()

    def compose_side(self) -> ComposeResult:
        """Panels above the run panel (attach modes)."""
        yield from ()

    def compose_tabs(self) -> ComposeResult:
        """Extra tabs (TabPane) after Problems."""
        yield from ()

    def compose_bottom(self) -> ComposeResult:
        """A bar above the footer (the live prompt box)."""
        yield from ()

    def on_mount(self) -> None:
        """The repaint timer, the layout and the first paint. Textual calls the ``on_mount`` of
        every class of the screen, the subclass's first: a subclass never calls this one (a
        second call would start a second timer); what must follow it goes in :meth:`after_mount`."""
        quiet_containers(self)  # the arrow keys move the selection, not the tabs
        self._apply_settings()
        frame_s = 1.0 / max(1.0, self.fps)
        # one of the two ticks at a time (:meth:`_pace`): frames while something animates, else the base
        self._base_timer = self.set_interval(max(BASE_TICK_S, frame_s), self.tick)
        self._frame_timer = self.set_interval(frame_s, self.tick, pause=True)
        self.apply_layout(self.size.width, self.size.height)
        self.refresh_views(force=True)
        self._keep_events()
        self.after_mount()

    def after_mount(self) -> None:
        """What a mode screen does once the shared timer, layout and first paint are up."""

    def event_log_path(self) -> str | None:
        """Where the run's events are appended (docs/events.md): the state folder's log for a
        live source, None for a file (its events did not happen now)."""
        return str(default_path()) if self.model.retention.bounded else None

    def _keep_events(self) -> None:
        """Write the run's events to the log (:meth:`event_log_path`) until the screen goes; the
        earlier sessions' newest events are read back into the Events table. A write error is
        said once on the banner; the session goes on."""
        path = self.event_log_path()
        if path is not None and self.event_file is None:
            self.event_file = record_to_file(self.model.events, path, on_error=self.model.add_alert)

    def on_unmount(self) -> None:
        out, self.event_file = self.event_file, None
        if out is not None:
            self.model.events.unlisten(out.write)
            out.close()

    @property
    def focus_chain(self) -> list[Widget]:
        """Tab's stops: the focusable widgets drawn on screen (:func:`shown_focus_chain`)."""
        return shown_focus_chain(super().focus_chain)

    def _apply_settings(self) -> None:
        """The kept settings this screen draws with: the maps' fold, the expert map's view and the
        panel groups shown."""
        kept = settings_of(self)
        for w in (*self.query(LayerHeatmap), *self.query(ExpertMap)):
            w.fold = kept.view.fold_maps
        for em in self.query(ExpertMap):
            em.tiers = kept.view.expert_map == "tiers"
        self._show_groups({group for group in PANEL_GROUPS if not getattr(kept.panels, group)})

    def _show_groups(self, hidden: set[str]) -> None:
        """Hide the panel groups in ``hidden`` and show the others (the column shares its rows again)."""
        for group in PANEL_GROUPS:
            self.set_class(group in hidden, f"-no-{group}")
        for stack in self.query(PanelStack):
            stack.hidden = frozenset(hidden)
            stack.fit()

    def action_toggle_panels(self, group: str) -> None:
        """Hide or show a panel group (trends, answer, maps), kept in ``[panels]`` for the next start."""
        shown = not getattr(settings_of(self).panels, group)
        self.remember(f"panels.{group}", shown)
        self._show_groups({g for g in PANEL_GROUPS if not getattr(settings_of(self).panels, g)})
        again = "hides" if shown else "shows"
        self.notify(f"{group} {'shown' if shown else 'hidden'} ({PANEL_KEYS[group]} {again} them)", timeout=2)

    @on(NeedChanged)
    def _need_changed(self, event: NeedChanged) -> None:
        event.stop()
        self._fit_stacks(tuple(self.views()))

    def _fit_stacks(self, views: Iterable[RunView]) -> None:
        """Share the Overview's rows again when a view's need changed since the last such fit
        (:attr:`RunView.need_changes <bmoe_top.tui.widgets.base.RunView>`). :meth:`refresh_views`
        fits right after its polls, so the views' new heights go into the same layout pass as
        their ``-empty`` classes (at a turn's first rows: one pass of the whole screen, not two);
        the :class:`NeedChanged` those polls posted then finds the column fitted already. A view
        that polls itself (a key on a map) is fitted by its message."""
        changes = tuple(v.need_changes for v in views)
        if changes == self._fitted_needs:
            return
        self._fitted_needs = changes
        for stack in self.query(PanelStack):
            stack.fit()

    def remember(self, name: str, value: Any) -> None:
        """Keep a setting a key changed for the next start (``BmoeTopApp.remember``)."""
        remember(self, name, value)

    def on_resize(self, event: events.Resize) -> None:
        self.apply_layout(event.size.width, event.size.height)

    def apply_layout(self, width: int, height: int) -> None:
        """Pick the layout for ``width`` x ``height`` (classes ``-tiny`` / ``-compact``)."""
        tiny = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        compact = not tiny and (width < COMPACT[0] or height < COMPACT[1])
        layout = "tiny" if tiny else ("compact" if compact else "normal")
        self.set_class(tiny, "-tiny")
        self.set_class(compact, "-compact")
        if tiny:
            for w in self.query("#too-small").results(Static):
                w.update(Text(f"Terminal size too small:\n  width = {width}  height = {height}\n\n"
                              f"Needed for this screen:\n  width = {MIN_SIZE[0]}  height = {MIN_SIZE[1]}",
                              justify="center"))
        for stack in self.query(PanelStack):
            stack.compact = compact
            stack.first = "expert-map" if self.show_experts_compact else "heatmap"
        if layout != self._layout:
            self._layout = layout
            self._title_key = None

    # ---------------------------------------------------------------------------- the title
    def status_word(self) -> str:
        """The source's own state for the title (the live screen says ready / generating)."""
        return ""

    def following_word(self, look: Look) -> str:
        """The title's state while the view follows the newest token of its source."""
        return f"{look.g.live} live"

    def state_parts(self, look: Look) -> list[tuple[str, Style]]:
        """The honest state indicator: live / paused / replay (speed) / ended / disconnected."""
        pb, run, g = self.playback, self.model, look.g
        st = pb.state()
        status = run.status
        out: list[tuple[str, Style]] = []
        if status in GONE:
            word = "disconnected" if status == Status.DISCONNECTED else f"disconnected ({status})"
            out.append((f"{g.down} {word}", look.alert))
            if st == PlayState.PAUSED:
                out.append((f" {g.paused} paused", look.warn))
        elif st == PlayState.LIVE:
            out.append((self.following_word(look), look.good + Style(bold=True)))
            behind = pb.behind
            if pb.speed < 1.0:
                out.append((f" {pb.speed_label()}" + (f" ({behind:,} behind)" if behind else ""), look.warn))
                out.append((" · End: real time", look.dim))
            elif behind:  # faster than 1x, trailing: catching up
                out.append((f" {pb.speed_label()} ({behind:,} behind, catching up)", look.dim))
        elif st == PlayState.PLAYING and pb.live_source:  # playing on from an earlier token: live again at the newest
            out.append((f"{g.playing} playing {pb.speed_label()} ({pb.n - pb.cursor:,} behind, catching up)",
                        look.accent))
            out.append((" · End: live", look.dim))
        elif st == PlayState.PLAYING:
            out.append((f"{g.playing} replay {pb.speed_label()}", look.accent))
            if pb.turn_by_turn:
                out.append((" (turn by turn)", look.dim))
        elif st == PlayState.ENDED:
            out.append((f"{g.ended} ended" + (" (aborted)" if status == Status.ABORTED else ""), look.dim +
                        Style(bold=True)))
        else:
            out.append((f"{g.paused} paused", look.warn))
            if pb.live_source:
                out.append((" · End: live", look.dim))
        return out

    def title_text(self, width: int | None = None) -> Text:
        look = look_of(self)
        pb, run = self.playback, self.model
        width = width or self.size.width or 120
        t = Text(no_wrap=True, overflow="ellipsis")
        if width >= 90:
            t.append("bmoe-top ", style=look.title)
        src = sanitize(self.source_title)
        if width >= 90:
            t.append(elide_words(src, max(10, width // 4)) + "  ", style=look.label)  # file names keep their ends
        state = self.state_parts(look)
        for text, style in state:
            t.append(text, style=style)
        firing = firing_text(self.alerts.firing(), look.ascii)
        if firing:
            t.append(f"  {firing}", style=look.alert)
        t.append(" ")
        word = self.status_word()
        if word and not any(word in text for text, _s in state):  # said once: "✖ disconnected", not twice
            t.append(f" · {word}", style=look.status_style(word))
        unit = run.row_unit
        n = pb.n
        if n and pb.live_source and (pb.selected is not None or pb.behind):
            # the viewed row, and the runtime's newest row named once as such
            pos = f"  {unit} {pb.sel + 1:,} · runtime at {n:,}"
        elif pb.selected is not None or not pb.follow:
            pos = f"  {unit} {pb.sel + 1:,}/{n:,}" if n else f"  no {unit}s"
        else:  # following: the rows the views draw (the cursor), as the breakdown counts them
            pos = f"  {unit}s {min(pb.cursor, n):,}"
            step, steps = run.tokens.last("step"), run.tokens.last("steps")
            if step == step and steps == steps and run.status == Status.GENERATING:
                pos += f" (turn {int(step):,}/{int(steps):,})"
        t.append(pos, style=Style(bold=True))
        if pb.fit:
            t.append("  whole run", style=look.dim)
        elif pb.per_col != 1:
            t.append(f"  {pb.per_col:,.0f}/col" if pb.per_col > 1 else f"  {round(1 / pb.per_col)} cols each",
                     style=look.dim)
        quiet = self.quiet_seconds()
        if quiet is not None:
            t.append(f"  no telemetry for {quiet:.0f} s", style=look.alert)
        used = t.cell_len + 4  # the separator
        fits: list[tuple[str, Style]] = []
        for i, (text, style) in enumerate(self._header_parts(look)):
            piece = ("" if i == 0 else " · " if i > 1 else " ") + text
            if used + len(piece) > width - 1:
                break
            fits.append((piece, style))
            used += len(piece)
        if len(fits) > 1:  # the first part is a heading ("last 32:"): never alone at the end
            t.append(f"  {look.g.vbar} ", style=look.dim)
            for piece, style in fits:
                t.append(piece, style=style)
        return t

    def _header_parts(self, look: Look) -> list[tuple[str, Style]]:
        """:func:`header_parts` as of the viewed row (the title follows the views: in slow motion
        and after a seek its numbers are the viewed row's), computed again only when what it
        reads changed: the viewed row, the token rows (appended, or folded into history), the
        cache and device numbers, the status. Its sums run over the whole run, so a repaint for
        any other reason (a log line, a key) reuses them."""
        run = self.model
        stop = self.playback.sel + 1
        with run.lock:
            key = (stop, run.tokens.n, run.tokens.start, run.turn_count, str(run.status), run.resident_mib,
                   run.budget_mib, len(run.summary), len(run.sidecar), look)
        if self._header_cache is None or self._header_cache[0] != key:
            self._header_cache = (key, header_parts(run, look, stop=stop if stop > 0 else None))
        return self._header_cache[1]

    def quiet_seconds(self) -> float | None:
        """Seconds since a live source's last line, when it has been quiet for more than
        :attr:`quiet_after_s`."""
        last = self.model.last_line_t
        if not self.playback.follow or last is None:
            return None
        if self.model.status not in (Status.GENERATING, Status.LOADING):
            return None
        q = time.monotonic() - last
        return q if q > self.quiet_after_s else None

    # ---------------------------------------------------------------------------- repaint loop
    @property
    def refresh_s(self) -> float:
        """Seconds between repaints of the views while data streams (the clock's)."""
        return self.clock.refresh_s

    @refresh_s.setter
    def refresh_s(self, seconds: float) -> None:
        self.clock.refresh_s = seconds

    def change_key(self) -> ChangeKey:
        """What the title and the views draw from, besides the widgets' own state: the run's
        version, the playback, the state indicator, the look and the size; and the process memory
        reading's version while a run panel draws it (else a reading, every second between turns,
        is nothing new to this screen)."""
        pb, size = self.playback, self.size
        drawn = self._parts is None or any(p.draws_memory for p in self._run_panels)
        return ChangeKey(self.model.version, pb.cursor, Scene(
            selected=pb.selected, playing=pb.playing, follow=pb.follow, speed_index=pb.speed_index,
            per_col=pb.per_col, fit=pb.fit, quiet_s=int(self.quiet_seconds() or 0), turn_by_turn=pb.turn_by_turn,
            status_word=self.status_word(), look=look_of(self), size=(size.width, size.height)),
            self.model.memory_version if drawn else 0)

    #: New rows repaint the views, the panels and the title together at the next tick (a source
    #: of a few rows a second); else they wait for the views' repaint, and new rows alone repaint
    #: only the answer's tail.
    FOLLOWS_ROWS: ClassVar[bool] = False

    def tick(self) -> None:
        """The repaint timer (every :data:`BASE_TICK_S`, ``fps`` a second while something
        animates): the answer tail when new rows came (and the title with it when the state
        changed; the views with them with :attr:`FOLLOWS_ROWS`); the views, the panels and the title once
        ``refresh`` seconds have passed since their last poll (every tick while a replay or a
        slow-motion live view moves); nothing when nothing changed."""
        now = time.monotonic()
        self.playback.tick(self.clock.elapsed(now))
        key = self.change_key()
        pb = self.playback
        animating = pb.playing or (pb.follow and pb.speed < 1.0)  # a replay or a slow-motion view moves
        self._pace(animating)
        what = self.clock.tick(now, key, animating)
        if self._tab_shown_id == "events-tab" and self.model.events.version != self._events_shown:
            self.refresh_events()
        if what is Repaint.VIEWS:
            self.refresh_views()
        elif what is Repaint.MEMORY:
            self.refresh_memory(key)
        elif what is Repaint.TAILS:
            self.refresh_tails()
        elif what is Repaint.FAST:
            self.refresh_fast(key)

    def _pace(self, animating: bool) -> None:
        """Tick ``fps`` a second while ``animating``, every :data:`BASE_TICK_S` otherwise."""
        if animating == self._animating:
            return
        self._animating = animating
        frames, base = self._frame_timer, self._base_timer
        if frames is None or base is None:
            return
        (frames if animating else base).resume()
        (base if animating else frames).pause()

    def _widgets(self, requery: bool = False) -> tuple[Any, ...]:
        """(title, views, panels, log, tabs, answer tails), looked up once after compose (again
        with ``requery``: a forced repaint), not on every tick. One walk of the screen's widgets
        (a CSS query per kind would match selectors against every node, each time)."""
        if self._parts is None or requery:
            views: list[RunView] = []
            kinds: dict[type, list[Any]] = {k: [] for k in PANEL_KINDS}
            title = log = tabs = None
            for w in self.walk_children(with_self=False):
                if isinstance(w, RunView):
                    views.append(w)
                elif isinstance(w, PANEL_KINDS):
                    kinds[next(k for k in PANEL_KINDS if isinstance(w, k))].append(w)
                elif isinstance(w, TabbedContent):
                    tabs = tabs or w
                elif isinstance(w, TitleLine) and w.id == "title":
                    title = title or w
                elif isinstance(w, Static) and w.id == "log-text":
                    log = log or w
            if title is None:
                title = self.query_one("#title", TitleLine)  # raises NoMatches, as before compose
            self._run_panels = tuple(kinds[RunPanel])
            self._parts = (title, tuple(views), tuple(w for k in PANEL_KINDS for w in kinds[k]), log, tabs,
                           tuple(kinds[AnswerTail]))
        return self._parts

    def _ready(self) -> bool:
        """Composed and attached (timers and deferred calls also run before compose finished and
        during teardown)."""
        return self.is_attached and (self._parts is not None or bool(self.query("#title")))

    def _update_title(self, key: ChangeKey, force: bool = False) -> None:
        key = replace(key, memory=0)  # the title does not draw the process-memory reading
        if key != self._title_key or force:
            self._title_key = key
            look = look_of(self)
            title = self.title_text()
            # one line, its size fixed by the CSS: no layout pass (a reflow of the whole screen)
            self._widgets()[0].update(ascii_text(title) if look.ascii else title)

    def refresh_fast(self, key: ChangeKey | None = None) -> None:
        """The fast tier: the title line, then (after that repaint) the answer's tail. Textual
        repaints the box around everything refreshed together: the title across the top and the
        tail at the bottom of the side would take in every view between them."""
        if not self._ready():
            return
        self.playback.clamp()
        self._update_title(key if key is not None else self.change_key())
        if self._widgets()[5]:
            self.call_after_refresh(self.refresh_tails)

    def refresh_tails(self) -> None:
        """The answer's tail follows new rows (its own repaint: only its lines change)."""
        if self._ready():
            for tail in self._widgets()[5]:
                tail.update_from_run()

    def views(self) -> Iterator[RunView]:
        if not self._ready():
            return iter(())
        return iter(self._widgets()[1])

    def refresh_views(self, force: bool = False) -> None:
        """Repaint what changed since the last repaint (everything with ``force``): the title,
        the views (when the Overview is shown), the panels and the log."""
        if self.playback.follow:
            self.playback.tick(0.0)  # live: the cursor is the newest row, even between timer ticks
        if not self._ready():
            return
        self.playback.clamp()
        title, views, panels, logs, tabs, _tails = self._widgets(requery=force)
        self.view_polls += 1
        changed = self.evaluate_alerts()
        key = self.change_key()
        self.clock.views_painted(time.monotonic(), key)
        self._update_title(key, force or bool(changed))
        self._collapse_empty((*views, *_tails))
        overview_shown = (tabs.active if tabs is not None else "") == "overview"
        for view in views:
            if overview_shown or force:
                view.poll(force)
        self._fit_stacks(views)
        for panel in panels:
            panel.update_from_run(force)
        with self.model.lock:
            n = len(self.model.log)
            if logs is not None and n != self._log_len:
                self._log_len = n
                lines = list(self.model.log)[-LOG_SHOWN:]
                logs.update(safe_text("\n".join(lines), multiline=True))

    def refresh_memory(self, key: ChangeKey) -> None:
        """The views' repaint when only a process-memory reading is new since the last one
        (``key``: what the screen draws from now): the run panel's memory rows, and the title
        when the fast tier drew it from another key since (a change that came and went); the
        views, alerts and other panels draw the same (a live child between turns reads its
        memory every second)."""
        if not self._ready():
            return
        self.clock.views_painted(time.monotonic(), key)
        self._update_title(key)  # a change of the fast tier that came and went since the views
        for panel in self._widgets()[2]:
            if isinstance(panel, RunPanel):
                panel.update_from_run()

    def evaluate_alerts(self) -> list[Transition]:
        """Evaluate the alert rules over the rows that came since the last repaint (the run's own
        clock: a replay gives the transitions its live run gave); each state change goes to
        :meth:`on_alert_transitions`. Returns the changes."""
        got = self.alerts.advance_run(self.model)
        if got:
            self.on_alert_transitions(got)
        return got

    def on_alert_transitions(self, transitions: list[Transition]) -> None:
        """The alert state changes of one evaluation, in row order (rule name, old and new state,
        value, run clock, row: :class:`~bmoe_top.tui.model.alerts.Transition`): those into and out
        of firing are recorded in the run's event log (docs/events.md); a pending alert that clears
        is a wait, not an event (a rule near its threshold went pending and back 47 times in one
        session, several in one millisecond). The screen shows the states themselves (title, run
        panel). A file's replay records none, as its source and turns record none (its alerts
        did not fire now)."""
        if not self.model.retention.bounded:
            return
        for tr in transitions:
            if AlertState.FIRING not in (tr.old, tr.new):
                continue
            reading = "absent" if tr.value is None else f"{tr.value:.4g}"
            self.model.events.record("alert", tr.rule, str(tr.old), str(tr.new),
                                     f"{reading} at row {tr.row + 1:,} ({tr.t:.1f} s into the run)")

    def _collapse_empty(self, views: Iterable[RunView | AnswerTail]) -> None:
        """A view with nothing to show takes one line (class ``-empty``); so does the answer's
        tail of a source without answer text (the run panel above it takes its rows)."""
        for view in views:
            empty = bool(getattr(view, "empty", False))
            vid = view.id or ""
            if self._empty.get(vid) != empty:
                self._empty[vid] = empty
                view.set_class(empty, "-empty")

    def _active_tab(self) -> str:
        tabs = self._widgets()[4] if self._ready() else None
        return tabs.active if tabs is not None else ""

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that type into a focused text box are not offered there; the map swap only in
        the compact layout."""
        if action in TYPING_KEYS and isinstance(self.focused, Input):
            return False
        if action in TABLE_NAV and isinstance(self.focused, DataTable):
            return False  # a focused table's own arrows, pages, Home and End (its cursor)
        if action == "swap_map":  # only while one map is left out for want of rows
            return any(stack.heights.get(m) == 0 for stack in self.query(PanelStack)
                       for m in ("heatmap", "expert-map")) and settings_of(self).panels.maps
        return super().check_action(action, parameters)

    def _moved(self) -> None:
        pb = self.playback
        self._pace(pb.playing or (pb.follow and pb.speed < 1.0))
        self.refresh_views()

    @on(TokenSelected)
    def _token_selected(self, event: TokenSelected) -> None:
        self.refresh_views()

    def action_toggle_play(self) -> None:
        self.playback.toggle()
        self._moved()

    def action_step(self, k: int) -> None:
        self.playback.step(k)
        self._moved()

    def action_jump_start(self) -> None:
        self.playback.start()
        self._moved()

    def action_jump_end(self) -> None:
        self.playback.end()
        self._moved()

    def action_go_live(self) -> None:
        self.playback.end()
        self._moved()

    def action_faster(self) -> None:
        pb = self.playback
        if pb.state() == PlayState.LIVE and pb.speed >= 1.0 and not pb.behind:
            # a live view at the newest token cannot go faster than the run: say so, not nothing
            self.notify("live: already at the newest token (faster speeds catch up a view that trails)",
                        timeout=3)
            return
        pb.faster()
        self._moved()

    def action_slower(self) -> None:
        self.playback.slower()
        self._moved()

    def action_refresh_slower(self) -> None:
        """``{``: repaint the views less often (the next longer of :data:`REFRESH_STEPS`)."""
        self._set_refresh(next((x for x in REFRESH_STEPS if x > self.refresh_s + 1e-9), REFRESH_STEPS[-1]))

    def action_refresh_faster(self) -> None:
        """``}``: repaint the views more often (the next shorter of :data:`REFRESH_STEPS`)."""
        self._set_refresh(next((x for x in reversed(REFRESH_STEPS) if x < self.refresh_s - 1e-9), REFRESH_STEPS[0]))

    def _set_refresh(self, seconds: float) -> None:
        self.refresh_s = seconds
        self.remember("view.refresh_s", seconds)
        self.notify(f"views repaint every {seconds:g} s while data streams ({{ less often, }} more often)",
                    timeout=2)
        self.refresh_views()

    def action_set_speed(self, index: int) -> None:
        self.playback.speed_index = max(0, min(index, 10))
        self._moved()

    def action_zoom_in(self) -> None:
        pb = self.playback
        if pb.per_col == 1 and not pb.fit:
            self.notify("full resolution: one token per column")
        pb.zoom(-2)
        self._moved()

    def action_zoom_out(self) -> None:
        self.playback.zoom(2)
        self._moved()

    def action_zoom_fit(self) -> None:
        self.playback.zoom_fit()
        self._moved()

    def action_seek(self) -> None:
        def done(value: int | None) -> None:
            if value is not None:
                self.playback.seek(value)
                self.refresh_views()

        self.app.push_screen(SeekScreen(self.playback.n), done)

    def action_toggle_turn_by_turn(self) -> None:
        self.playback.turn_by_turn = not self.playback.turn_by_turn
        self.notify("playback pauses at the end of each turn" if self.playback.turn_by_turn
                    else "playback runs through turns")

    def action_toggle_fold(self) -> None:
        fold = not settings_of(self).view.fold_maps
        for w in (*self.query(LayerHeatmap), *self.query(ExpertMap)):
            w.fold = fold
        self.remember("view.fold_maps", fold)

    def action_toggle_tier_map(self) -> None:
        """The expert map's other view (routing heat, memory tiers), kept in ``[view]``."""
        tiers = settings_of(self).view.expert_map != "tiers"
        for em in self.query(ExpertMap):
            em.tiers = tiers
        self.remember("view.expert_map", "tiers" if tiers else "heat")

    def action_cycle_palette(self) -> None:
        look = look_of(self).next_scale()
        app = self.app
        if isinstance(app, BmoeTopApp):
            app.look = look
        self.remember("look.colour_scale", look.scale)
        self.notify(f"palette: {look.scale}" + (" (not colour-blind safe)" if look.scale == "classic" else ""))
        self.refresh_views(force=True)

    def action_swap_map(self) -> None:
        self.show_experts_compact = not self.show_experts_compact
        self.remember("view.compact_map", "experts" if self.show_experts_compact else "tokens")
        self.apply_layout(self.size.width, self.size.height)
        for stack in self.query(PanelStack):
            stack.fit()
        self.refresh_views(force=True)

    def action_mode_detail(self) -> None:
        with self.model.lock:
            mode, why = self.model.mode()
        self.app.push_screen(ModeScreen(mode, mode_words(mode), why))

    @on(TabbedContent.TabActivated)
    def _tab_shown(self) -> None:
        self.call_after_refresh(self.refresh_views, True)
        self._tab_shown_id = self._active_tab()
        if self._tab_shown_id == "events-tab":
            self.refresh_events()

    def refresh_events(self) -> None:
        """The Events table with the events kept (only while its tab is shown: a hidden table
        costs nothing; it keeps its sort and filter)."""
        tables = self.query("#events")
        if not tables:
            return
        log = self.model.events
        self._events_shown = log.version
        tables.first(SortTable).set_table(events_table(log.snapshot(), log.total))

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_goto_tab(self, tab: str) -> None:
        """A tab's ctrl key: it works in a text box too (it types nothing), unlike the digit keys
        of :meth:`action_tab`, which type there."""
        self.action_tab(tab)

    def action_quit(self) -> None:
        self.app.exit()

    # ------------------------------------------------------------------------------ search
    def action_search(self) -> None:
        """``/``: on the Overview, the Text tab's search (the Overview shows no text)."""
        if self._active_tab() == "overview":
            self.action_tab("text")  # the box opens at once: the keys typed after / go into it
        self.search_bar.open()

    def action_search_step(self, k: int) -> None:
        """``n`` / ``N``: on the Overview, the Text tab's next match (when a text search is kept)."""
        if self._active_tab() == "overview" and self.search_bar.states.get("text", None) is not None \
                and self.search_bar.states["text"].query:
            self.action_tab("text")
            self.call_after_refresh(self.search_bar.step, k)
            return
        self.search_bar.step(k)

    # ------------------------------------------------------------------------------ help
    def key_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for the help screen, from :attr:`KEYS`: each key once, as the
        screen answers it (a mode's own key before the shared one: ctrl+c cancels on a live
        screen)."""
        return help_rows(self.KEYS)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.key_rows(), self.HELP_NOTES))

    def commands(self) -> list[tuple[str, str, Any]]:
        """The screen's own actions for the command palette, from :attr:`KEYS`: (title, keys,
        callback); an action this screen does not offer now (:meth:`check_action`) is left out."""
        out: list[tuple[str, str, Any]] = []
        for k in self.KEYS:
            if k.palette and k.scope in ("screen", "anywhere"):
                _ns, name, _args = parse_action(k.action)
                if self.check_action(name, ()) is False:
                    continue
                out.append((k.palette_title, key_label(k.keys),
                            lambda a=k.action: self.app.call_later(self.run_action, a)))
        return out



__all__ += ["GONE", "TYPING_KEYS"]
