"""The screen every mode builds on: a title, the run panel and answer tail on the side, and the
Overview / Text / Log / Problems tabs, over one run model, with playback keys.

A mode screen composes its own parts into this layout through hooks called from
:meth:`RunScreen.compose` (a status line under the title, panels above the run panel, extra tabs,
a bar at the bottom); nothing is added to the DOM after mount.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.screens.modals import HelpScreen, SeekScreen
from bmoe_top.tui.widgets.charts import BreakdownChart, TrendChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import AnswerPanel, AnswerTail, ProblemsPanel, RunPanel, safe_text

__all__ = ["RunScreen"]

#: Log-pane lines drawn (the newest).
LOG_SHOWN = 2000


class RunScreen(Screen[None]):
    """The views over ``run`` (see the module docstring).

    ``title`` names the source; ``fps`` bounds the repaint rate (default 10 per second);
    ``follow`` pins the cursor to the newest row (live sources); ``start_at_end`` opens a replay
    on the whole run.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        # Playback keys win over scroll containers (priority), but not over a text input.
        Binding("space", "toggle_play", "play/pause", priority=True),
        Binding("left", "step(-1)", "◀ token", show=False, priority=True),
        Binding("right", "step(1)", "token ▶", show=False, priority=True),
        Binding("shift+left,pageup", "step(-50)", "◀◀ 50", show=False, priority=True),
        Binding("shift+right,pagedown", "step(50)", "50 ▶▶", show=False, priority=True),
        Binding("home", "jump_start", "start", show=False, priority=True),
        Binding("end", "jump_end", "end", show=False, priority=True),
        Binding("plus,equals_sign", "faster", "faster"),
        Binding("minus", "slower", "slower"),
        Binding("g", "seek", "seek"),
        Binding("f", "toggle_fold", "fold"),
        Binding("t", "toggle_turn_by_turn", "turn by turn", show=False),
        Binding("1", "tab('overview')", "overview", show=False),
        Binding("2", "tab('text')", "text", show=False),
        Binding("3", "tab('log')", "log", show=False),
        Binding("p", "tab('problems')", "problems"),
        Binding("question_mark,h", "help", "help"),
        Binding("q", "quit", "quit"),
    ]

    #: Actions a focused text input (prompt box, seek box) keeps for itself.
    PLAYBACK_ACTIONS = frozenset({"toggle_play", "step", "jump_start", "jump_end"})
    #: Whether the side shows the answer's tail (sources without answer text leave it out).
    SHOW_ANSWER = True
    #: A live source quiet for longer than this (seconds) gets "no telemetry for N s" in the title.
    quiet_after_s = 3.0

    def __init__(self, run: RunModel, *, title: str = "", fps: float = 10.0, follow: bool = False,
                 start_at_end: bool = True) -> None:
        super().__init__()
        self.model = run
        self.playback = Playback(run, follow=follow)
        if start_at_end:
            self.playback.cursor = self.playback.n
        self.source_title = title
        self.fps = fps
        self._last_tick = time.monotonic()
        self._drawn_key: tuple[Any, ...] | None = None
        self._log_len = 0

    # ---------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(self._title_text(), id="title")
        yield from self.compose_status()
        with Horizontal(id="body"):
            with Vertical(id="side"):
                with VerticalScroll(id="run-panel-scroll"):
                    yield from self.compose_side()
                    yield RunPanel(self.model, self.playback, id="run-panel")
                if self.SHOW_ANSWER:
                    yield AnswerTail(self.model, self.playback, id="answer-side")
            with TabbedContent(id="tabs", initial="overview"):
                with TabPane("Overview", id="overview"):
                    with Vertical(id="main"):
                        yield BreakdownChart(self.model, self.playback, id="breakdown")
                        yield TrendChart(self.model, self.playback, id="trends")
                        with Horizontal(id="grids"):
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
        yield from self.compose_bottom()
        yield Footer()

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
        self.set_interval(1.0 / max(1.0, self.fps), self.tick)
        self.refresh_views(force=True)

    # ---------------------------------------------------------------------------- repaint loop
    def _title_text(self) -> Text:
        pb = self.playback
        state = "▶ playing" if pb.playing else ("● live" if pb.follow else "❚❚ paused")
        if pb.turn_by_turn:
            state += " (turn by turn)"
        t = safe_text(f"bmoe-top  {self.source_title}  ")
        unit = self.model.row_unit
        if pb.follow:  # live: no playback speed; the turn's progress instead
            step, steps = self.model.tokens.last("step"), self.model.tokens.last("steps")
            turn = f"  (this turn {int(step)}/{int(steps)})" if step == step and steps == steps else ""
            t.append(f"{state}  {unit} {pb.n:,}{turn}", style="bold")
        else:
            t.append(f"{state} {pb.speed_label()}  {unit} {pb.cursor:,}/{pb.n:,}", style="bold")
        quiet = self.quiet_seconds()
        if quiet is not None:
            t.append(f"  no telemetry for {quiet:.0f} s", style="bold #e06c75")
        return t

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

    def tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self.playback.tick(dt)
        self.refresh_views()

    def refresh_views(self, force: bool = False) -> None:
        """Repaint what changed since the last repaint (everything with ``force``)."""
        if self.playback.follow:
            self.playback.tick(0.0)  # live: the cursor is the newest row, even between timer ticks
        pb = self.playback
        key = (self.model.version, pb.cursor, pb.playing, pb.speed_index, int(self.quiet_seconds() or 0),
               pb.turn_by_turn)
        if (key == self._drawn_key and not force) or not self.is_attached:
            return
        titles = self.query("#title")
        if not titles:
            return  # before compose finished, or during teardown (timers and deferred calls)
        self._drawn_key = key
        titles.first(Static).update(self._title_text())
        # panes of tabs not shown yet may still be composing: each view is looked for, not assumed
        for panel in (*self.query(RunPanel), *self.query(AnswerPanel), *self.query(AnswerTail),
                      *self.query(ProblemsPanel)):
            panel.update_from_run()
        for w in (BreakdownChart, TrendChart, LayerHeatmap, ExpertMap):
            for widget in self.query(w):
                widget.refresh()
        logs = self.query("#log-text")
        with self.model.lock:
            n = len(self.model.log)
            if logs and n != self._log_len:
                self._log_len = n
                lines = list(self.model.log)[-LOG_SHOWN:]
                logs.first(Static).update(safe_text("\n".join(lines)))

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Playback keys go to a focused text input (prompt box) instead."""
        if action in self.PLAYBACK_ACTIONS and isinstance(self.focused, Input):
            return False
        return True

    def action_toggle_play(self) -> None:
        self.playback.toggle()
        self.refresh_views()

    def action_step(self, k: int) -> None:
        self.playback.step(k)
        self.refresh_views()

    def action_jump_start(self) -> None:
        self.playback.start()
        self.refresh_views()

    def action_jump_end(self) -> None:
        self.playback.end()
        self.refresh_views()

    def action_faster(self) -> None:
        self.playback.faster()
        self.refresh_views()

    def action_slower(self) -> None:
        self.playback.slower()
        self.refresh_views()

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
        for w in (*self.query(LayerHeatmap), *self.query(ExpertMap)):
            w.fold = not w.fold

    @on(TabbedContent.TabActivated)
    def _tab_shown(self) -> None:
        self.call_after_refresh(self.refresh_views, True)

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_quit(self) -> None:
        self.app.exit()

    def action_help(self) -> None:
        rows, seen = [], set()
        for cls in type(self).__mro__:  # a mode's own keys first, then the shared ones
            for b in cls.__dict__.get("BINDINGS", ()):
                if not isinstance(b, Binding) or b.key in seen:
                    continue
                seen.add(b.key)
                keys = (b.key.replace("question_mark", "?").replace("equals_sign", "=").replace("plus", "+")
                        .replace("minus", "-").replace(",", " / "))
                rows.append((keys, b.description))
        self.app.push_screen(HelpScreen(rows))
