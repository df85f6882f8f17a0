"""The live what-if panel: while a run streams its routing (BMOE_ROUTE), the LRU hit curve over
every cache budget, replayed from the routing as it arrives, with the run's budget, T and the
whole bank marked, and what a smaller or bigger cache would give right now.

The replay (:class:`bmoe_top.tui.jobs.live_whatif.LiveWhatIf`) runs on a worker thread every
``interval`` seconds while the panel is shown (every :data:`HIDDEN_INTERVAL_S` while its tab is
hidden, sooner when the routing not replayed yet nears the model's window, and at once when the
tab is shown again) and reads the run model under its lock; it publishes
its newest view, which a timer on the UI thread draws, so the screen stays responsive whatever the
token rate. The analysis core (numba) is imported by that
thread on its first update, never at startup.
"""

from __future__ import annotations

import math
import threading
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from bmoe_top.tui.jobs.live_whatif import LiveWhatIf
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.whatif import LiveView
from bmoe_top.tui.widgets.curves import CurveChart, CurveMark, CurvePlot, CurveSeries

__all__ = ["HIDDEN_INTERVAL_S", "LiveWhatIfPanel"]

#: Seconds between replays while the panel's tab is hidden: each replay has a fixed cost beside
#: its per-token one, and nothing shows its result until the tab is shown (then it replays at once).
HIDDEN_INTERVAL_S = 5.0


class LiveWhatIfPanel(Vertical):
    """The live LRU curve of ``run`` (see the module docstring). ``interval`` seconds between
    replays; ``follower`` the replay (default one over ``run``)."""

    DEFAULT_CSS = """
    LiveWhatIfPanel { height: 1fr; }
    LiveWhatIfPanel > .lw-readout { height: auto; max-height: 4; padding: 0 1; }
    LiveWhatIfPanel > CurveChart { height: 1fr; }
    """

    def __init__(self, run: RunModel, *, interval: float = 0.25, follower: LiveWhatIf | None = None,
                 **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.run = run
        self.follower = follower if follower is not None else LiveWhatIf(run)
        self.interval = interval
        self.view: LiveView | None = None
        self.error = ""
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and when the panel is shown again
        self._shown = False  # on screen at the UI timer's last look (or shown since)
        self._thread: threading.Thread | None = None
        self._pending: LiveView | None = None  # the newest view the worker made, not drawn yet
        self._error_shown = False
        self.updates = 0  # views drawn (tests wait on it)

    def compose(self) -> ComposeResult:
        yield Static(self._readout(), classes="lw-readout")
        yield CurveChart(id="lw-chart")

    def on_mount(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bmoe-live-whatif", daemon=True)
        self._thread.start()
        self.set_interval(self.interval, self._drain)

    def on_unmount(self) -> None:
        self.stop()

    def on_show(self) -> None:
        """The tab was shown: replay what arrived while it was hidden now, not at the next wake."""
        self._shown = True
        self._wake.set()

    def stop(self) -> None:
        """Ask the replay thread to end (it does at once, or after the replay under way)."""
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        """The worker thread: replay what arrived, publish the newest view, wait. Until the
        first routing is replayed it waits ``interval`` even while hidden: that replay loads the
        analysis core, a cost better paid when routing starts than in the middle of a run."""
        replayed = False
        last = 0.0  # monotonic time of the last replay
        while not self._stop.is_set():
            try:
                if not (replayed and not self._shown and time.monotonic() - last < HIDDEN_INTERVAL_S
                        and not self.follower.lagging()):
                    last = time.monotonic()
                    if self.follower.update():
                        self._pending = self.follower.view()
                        replayed = True
            except Exception as e:  # a replay failure is shown; the panel and the run go on
                self.error = f"the live replay stopped: {e}"
                return
            self._wake.wait(self.interval)
            self._wake.clear()

    def _drain(self) -> None:
        """The UI thread: draw the newest view the worker published, if any, once the panel is
        shown (a hidden tab keeps it: drawing it would lay the screen out again for nothing).
        """
        self._shown = shown = self.is_on_screen
        if not shown:
            return
        view, self._pending = self._pending, None
        if view is not None or (self.error and not self._error_shown):
            self._error_shown = bool(self.error)
            self._show(view)

    def _show(self, view: LiveView | None) -> None:
        if view is not None:
            self.view = view
        if not self.query(".lw-readout"):
            return
        self.query_one(".lw-readout", Static).update(self._readout())
        if self.view is not None:
            self.query_one("#lw-chart", CurveChart).set_plot(self._plot(self.view))
        self.updates += 1

    def _readout(self) -> Text:
        v = self.view
        t = Text()
        if self.error:
            t.append(self.error, style="bold #e06c75")
            return t
        if v is None:
            t.append("live what-if: waiting for routing (the runtime sends it with --route-telemetry: BMOE_ROUTE)",
                     style="dim")
            return t
        t.append(f"live what-if over {v.tokens:,} decode tokens ({v.lookups:,} lookups), LRU as bmoe-run runs it",
                 style="bold")
        t.append(f"   sizes: {v.sizes}", style="dim")
        if v.skipped_rows:
            t.append(f"   {v.skipped_rows:,} routing rows arrived faster than the replay and were skipped",
                     style="#d19a66")
        if v.problems:
            t.append(f"   {v.problems} tokens not replayed ({self.follower.last_error})", style="#d19a66")
        t.append("\n")
        if v.run_budget is not None and v.replay_at_budget is not None:
            t.append(f"now at the run's budget {fmt(v.run_budget, 0)} {v.unit}: ", style="bold")
            if v.turn_at_budget is not None:
                t.append(f"this turn {fmt(v.turn_at_budget, 1, '%')}", style="bold")
                if v.runtime_hit_pct is not None:
                    t.append(f" (the runtime reports {fmt(v.runtime_hit_pct, 1, '%')})", style="dim")
                t.append(f", session {fmt(v.replay_at_budget, 1, '%')}", style="bold")
            else:
                t.append(f"{fmt(v.replay_at_budget, 1, '%')} decode hits", style="bold")
            parts = []
            for f in (0.5, 2.0):
                b = v.run_budget * f
                h = v.hit_at(b)
                if math.isfinite(h):
                    parts.append(f"{'half' if f < 1 else 'double'} ({fmt(b, 0)}): {fmt(h, 1, '%')}")
            parts.append(f"whole bank: {fmt(v.hit_at(v.bank), 1, '%')}")
            t.append("   " + " · ".join(parts))
        else:
            t.append(f"whole bank ({fmt(v.bank, 0)} {v.unit}): {fmt(v.hit_at(v.bank), 1, '%')} decode hits; "
                     "the run's budget is not known yet", style="dim")
        return t

    def _plot(self, v: LiveView) -> CurvePlot:
        marks = []
        if v.run_budget is not None:
            marks.append(CurveMark(v.run_budget, f"run's budget {fmt(v.run_budget, 0)} {v.unit}", "│", "|",
                                   "bright_white"))
        marks.append(CurveMark(v.token_cycle, f"T {fmt(v.token_cycle, 1)} {v.unit}", "╎", "!", "yellow"))
        marks.append(CurveMark(v.bank, f"whole bank {fmt(v.bank, 0)} {v.unit}", "▕", "]", "white"))
        series = (CurveSeries("lru", "LRU now (decode hit %)", v.budgets, v.decode_hit_pct, 0),)
        return CurvePlot(title="live: decode hit % if the cache were this big", x_label="cache budget", x_unit=v.unit,
                         y_label="decode hit", y_unit="%", series=series, marks=tuple(marks), y_min=0.0,
                         y_max=100.0, shade_below=v.token_cycle,
                         shade_label="below T: LRU cannot keep a token's experts (cache off is better)",
                         cursor=v.run_budget, x_min=0.0, x_max=v.bank, note="updates as the routing arrives")
