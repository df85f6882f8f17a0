"""The bmoe-top Textual app: the main screen over one run model, playback keys, help.

Data comes in off the UI thread (sources feed :class:`RunModel` under its lock); the app polls
``run.version`` on a timer and repaints at most ``fps`` times a second, whatever the input rate.
"""

from __future__ import annotations

import time

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Label, Static, TabbedContent, TabPane

from bmoe_top.tui.playback import Playback
from bmoe_top.tui.run import RunModel
from bmoe_top.tui.widgets.charts import BreakdownChart, TrendChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import AnswerPanel, AnswerTail, ProblemsPanel, RunPanel, safe_text

CSS = """
Screen { layout: vertical; }
#title { height: 1; background: $boost; color: $text; padding: 0 1; }
#body { height: 1fr; }
#side { width: 30%; min-width: 34; max-width: 48; border-right: solid $primary-darken-2; }
#side VerticalScroll { height: 1fr; }
#run-panel-scroll { height: 2fr; }
#answer-side { height: 1fr; border-top: solid $primary-darken-2; }
#main { width: 1fr; }
#grids { height: 1fr; }
LayerHeatmap { width: 1fr; }
ExpertMap { width: 1fr; border-left: solid $primary-darken-2; }
TabbedContent { height: 1fr; width: 1fr; }
TabPane { padding: 0; }
#log-scroll, #problems-scroll, #text-scroll { height: 1fr; }
"""


class SeekScreen(ModalScreen[int | None]):
    """Ask for a token number to seek to."""

    DEFAULT_CSS = """
    SeekScreen { align: center middle; }
    #seek-box { width: 44; height: auto; border: round $primary; padding: 1 2; background: $surface; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def compose(self) -> ComposeResult:
        with Vertical(id="seek-box"):
            yield Label(f"Seek to token (1–{self.n}):" if self.n else "Seek to token (none yet):")
            yield Input(placeholder="token number", id="seek-input", type="integer")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(int(event.value))
        except ValueError:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key the app understands."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 72; height: auto; max-height: 90%; border: round $primary; padding: 1 2;
                background: $surface; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss_help", "close")]

    def __init__(self, bindings: list[tuple[str, str]]) -> None:
        super().__init__()
        self.rows = bindings

    def compose(self) -> ComposeResult:
        text = "bmoe-top keys\n\n" + "\n".join(f"  {k:<22} {d}" for k, d in self.rows)
        text += (
            "\n\nBreakdown: wall = compute + flash wait + mgmt per token; flash wait is io_ms in"
            "\nserial runs and stall_ms under overlap (io_ms is lane-busy time there)."
            "\nHeatmaps use fixed colour scales; · marks a cell with no data."
        )
        with VerticalScroll(id="help-box"):
            yield Static(text)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


class BmoeTopApp(App):
    """bmoe-top over one :class:`RunModel`.

    ``title`` names the source; ``fps`` bounds the repaint rate (default 10 per second);
    ``follow`` pins the cursor to the newest token (live sources).
    """

    CSS = CSS
    TITLE = "bmoe-top"
    BINDINGS = [
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

    def __init__(self, run: RunModel, title: str = "", fps: float = 10.0, follow: bool = False,
                 start_at_end: bool = True) -> None:
        super().__init__()
        self.model = run
        self.playback = Playback(run, follow=follow)
        if start_at_end:
            self.playback.cursor = self.playback.n
        self.source_title = title
        self.fps = fps
        self._last_tick = time.monotonic()
        self._drawn_key: tuple | None = None
        self._log_len = 0

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(self._title_text(), id="title")
        with Horizontal(id="body"):
            with Vertical(id="side"):
                with VerticalScroll(id="run-panel-scroll"):
                    yield RunPanel(self.model, self.playback, id="run-panel")
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
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1.0 / max(1.0, self.fps), self.tick)
        self.refresh_views(force=True)

    # ------------------------------------------------------------ repaint loop
    def _title_text(self):
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
        """Seconds since a live source's last line, when it has been quiet for more than 3 s."""
        if not self.playback.follow or self.model.last_line_t is None:
            return None
        if self.model.status not in ("generating", "loading"):
            return None
        q = time.monotonic() - self.model.last_line_t
        return q if q > 3.0 else None

    def tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self.playback.tick(dt)
        self.refresh_views()

    @property
    def main_screen(self):
        """The screen the views live on (queries must not go to a modal or the command palette)."""
        return self.screen_stack[0] if self.screen_stack else None

    def refresh_views(self, force: bool = False) -> None:
        if self.playback.follow:
            self.playback.tick(0.0)  # live: the cursor is the newest row, even between timer ticks
        key = (self.model.version, self.playback.cursor, self.playback.playing, self.playback.speed_index,
               int(self.quiet_seconds() or 0), self.playback.turn_by_turn)
        if key == self._drawn_key and not force:
            return
        root = self.main_screen
        title = root.query("#title") if root is not None and root.is_attached else None
        if not title:
            return  # before compose finished, or during teardown (timers and deferred calls)
        self._drawn_key = key
        title.first(Static).update(self._title_text())
        root.query_one("#run-panel", RunPanel).update_from_run()
        for ap in (*root.query(AnswerPanel), *root.query(AnswerTail)):
            ap.update_from_run()
        root.query_one("#problems-panel", ProblemsPanel).update_from_run()
        for w in (BreakdownChart, TrendChart, LayerHeatmap, ExpertMap):
            for widget in root.query(w):
                widget.refresh()
        with self.model.lock:
            n = len(self.model.log)
            if n != self._log_len:
                self._log_len = n
                lines = list(self.model.log)[-2000:]
                root.query_one("#log-text", Static).update(safe_text("\n".join(lines)))

    # ----------------------------------------------------------------- actions
    PLAYBACK_ACTIONS = frozenset({"toggle_play", "step", "jump_start", "jump_end"})

    #: Priority actions that a modal screen (seek box, help) must receive instead of the app.
    MODAL_YIELDS = frozenset({"cancel_generation"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Playback keys go to a focused text input (prompt box, seek box) instead; keys a
        modal screen uses (escape) go to the modal."""
        if action in self.PLAYBACK_ACTIONS and isinstance(self.focused, Input):
            return False
        if isinstance(self.screen, ModalScreen) and (action in self.PLAYBACK_ACTIONS or action in self.MODAL_YIELDS):
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

        self.push_screen(SeekScreen(self.playback.n), done)

    def action_toggle_turn_by_turn(self) -> None:
        self.playback.turn_by_turn = not self.playback.turn_by_turn
        self.notify("playback pauses at the end of each turn" if self.playback.turn_by_turn
                    else "playback runs through turns")

    def action_toggle_fold(self) -> None:
        root = self.main_screen
        if root is None:
            return
        for w in (*root.query(LayerHeatmap), *root.query(ExpertMap)):
            w.fold = not w.fold

    @on(TabbedContent.TabActivated)
    def _tab_shown(self) -> None:
        self.call_after_refresh(self.refresh_views, True)

    def action_tab(self, tab: str) -> None:
        if self.main_screen is not None:
            self.main_screen.query_one("#tabs", TabbedContent).active = tab

    def action_help(self) -> None:
        rows, seen = [], set()
        for cls in type(self).__mro__:  # subclasses (live, attach) add their own keys first
            for b in getattr(cls, "BINDINGS", None) or []:
                if not isinstance(b, Binding) or b.key in seen:
                    continue
                seen.add(b.key)
                keys = (b.key.replace("question_mark", "?").replace("equals_sign", "=").replace("plus", "+")
                        .replace("minus", "-").replace(",", " / "))
                rows.append((keys, b.description))
        self.push_screen(HelpScreen(rows))
