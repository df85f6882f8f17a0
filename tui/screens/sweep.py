"""The sweep's screen (``bmoe-top sweep -m MODEL --cache-mb LIST -o DIR``): the grid's progress
while it runs (a bar, the run going on, done / running / left, the time so far and the ETA), the
table of arms (measured tok/s, median and spread over the runs; the predicted tok/s, its error,
the error with each run's own costs; the runs whose routing differs from the reference's,
flagged), and from it ``compare`` on two arms and the what-if with the measured points over the
predicted curve (docs/analysis.md "The sweep").

The sweep runs on its own thread (:func:`~bmoe_top.tui.jobs.sweep.run_sweep`), which hands each
:class:`~bmoe_top.tui.present.sweep.SweepProgress` and the result to an inbox the screen drains on
a timer; ``p`` pauses it between runs, ``q`` stops it (the running child's process group ended, the
run left undone for the next sweep over the folder to make).

Keys: ``p`` pause / resume, ``m`` mark the cursor's arm, ``c`` compare (the marked arms, else the
first arm and the cursor's), ``w`` the what-if, ``s`` / ``S`` / ``/`` sort and search the table,
``?`` / F1 help, ``q`` quit.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import ProgressBar, Static

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.jobs.sweep import SweepControl, SweepError, SweepPlan, SweepStopped, run_sweep
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.sweep import (
    SweepDocument,
    SweepProgress,
    SweepResult,
    error_words,
    progress_words,
    sweep_document,
    sweep_table,
)
from bmoe_top.tui.present.whatif import RunCosts
from bmoe_top.tui.screens.analysis_modals import AnalysisHelp
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.focus import FocusRules
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.lines import elide_words
from bmoe_top.tui.widgets.palette import KIND_STYLE
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.search import SEARCH_KEYS, SearchBar, SearchScreen
from bmoe_top.tui.widgets.tables import TABLE_KEYS, SortTable

__all__ = ["SweepScreen", "run_sweep_screen", "sweep_app"]

#: Seconds between two looks at the sweep thread's inbox.
TICK_S = 0.2
#: Seconds the screen waits, on leaving, for the sweep thread to end its child.
JOIN_S = 10.0

HELP_NOTES = (
    "The sweep runs every arm (cache budget x read lanes) --runs times, interleaved, each run a bmoe-run child\n"
    "recorded in DIR/c<MiB>-l<lanes>/run<N>/; a run found done there is not run again.\n"
    "tok/s measured: the median of the arm's runs (each its CSV's # summary tok/s); spread: (largest - smallest)\n"
    "/ median over them. Predicted: the reference run's (round 1 of the first arm) routing replayed through LRU at\n"
    "each budget, its read bandwidth per lane x the arm's lanes, and the reference arm's runs' costs: a token's\n"
    "compute with no miss plus what a miss adds (fitted on their tokens), the median mgmt and stall.\n"
    "Error: (predicted - measured) / measured; with own costs: each run predicted with its own compute and mgmt\n"
    "(the read model alone). A run whose routing differs from the reference's is\n"
    "another workload: flagged and left out of the medians.\n"
    "p pauses after the run going on; q stops the sweep (the run going on is ended and made again next time).\n"
    "docs/analysis.md \"The sweep\" explains every number."
)


class SweepScreen(FocusRules, SearchScreen):
    """The sweep of ``plan`` (see the module docstring); ``start``: run it on mount (a test
    may hand the result in with :meth:`show_result` instead)."""

    DEFAULT_CSS = """
    SweepScreen { layout: vertical; }
    #sw-title { height: 1; background: $boost; padding: 0 1; }
    #sw-bar { height: 1; padding: 0 1; }
    #sw-status { height: auto; max-height: 2; padding: 0 1; }
    #sweep-arms { height: 1fr; }
    #sw-notes { height: auto; padding: 0 1; }  /* whole: the arms' table takes what is left */
    """

    KEYS: ClassVar[tuple[km.Key, ...]] = (
        km.Key("p", "toggle_pause", "pause / resume the sweep (after the run going on)", footer="pause",
               title="Pause / resume"),
        km.Key("m", "mark", "mark the cursor's arm for compare (two at most)", footer="mark", title="Mark arm"),
        km.Key("c", "compare", "compare two arms: the marked ones, else the first arm and the cursor's",
               footer="compare", title="Compare arms"),
        km.Key("w", "whatif", "the what-if: predicted tok/s curves with the measured points", footer="what-if",
               title="What-if"),
        km.Key("question_mark,f1", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        km.Key("q", "quit", "quit (stops the sweep: the run going on is made again next time)", footer="quit",
               title="Quit"),
        km.Key("ctrl+c", "quit", "quit", "anywhere", palette=False),
        km.Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", "anywhere", palette=False),
        *SEARCH_KEYS,
        *km.FOCUS_KEYS,
        *TABLE_KEYS,
    )
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(KEYS)

    def __init__(self, plan: SweepPlan, *, start: bool = True) -> None:
        super().__init__()
        self.plan = plan
        self.start = start
        self.control = SweepControl()
        self.progress: SweepProgress | None = None
        self.result: SweepResult | None = None
        self.error: str | None = None
        #: marked arms, indices into the plan's arms, oldest first
        self.marked: list[int] = []
        self._inbox: collections.deque[SweepProgress | SweepResult | str] = collections.deque()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(id="sw-title")
        yield ProgressBar(total=len(self.plan.arms()) * self.plan.runs, show_eta=False, id="sw-bar")
        yield Static(id="sw-status")
        yield SortTable(id="sweep-arms")
        yield Static(id="sw-notes")
        yield SearchBar()
        yield FittingFooter()

    def on_mount(self) -> None:
        self.set_class(self.app.size.height < 36, "short")
        if self.start:
            self._thread = threading.Thread(target=self._work, name="bmoe-sweep", daemon=True)
            self._thread.start()
            self.set_interval(TICK_S, self.tick)
        self.refresh_views()

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height < 36, "short")

    def on_unmount(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sweep and wait for its thread (the running child ended)."""
        self.control.stop()
        if self._thread is not None:
            self._thread.join(JOIN_S)

    # ---------------------------------------------------------------------------------- thread
    def _work(self) -> None:
        try:
            result = run_sweep(self.plan, self._inbox.append, self.control)
        except SweepStopped:
            return
        except SweepError as e:
            self._inbox.append(str(e))
            return
        self._inbox.append(result)

    def tick(self) -> None:
        """Drain the sweep thread's inbox into the views."""
        if not self._inbox:
            return
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, SweepProgress):
                self.progress = item
            elif isinstance(item, SweepResult):
                self.show_result(item)
                return
            else:
                self.error = item
        self.refresh_views()

    def show_result(self, result: SweepResult) -> None:
        """The sweep has ended with ``result``."""
        self.result = result
        self.refresh_views()

    # ---------------------------------------------------------------------------------- views
    @property
    def shown(self) -> SweepResult | None:
        """The arms on screen: the result, else the sweep so far."""
        if self.result is not None:
            return self.result
        return self.progress.so_far if self.progress is not None else None

    def document(self) -> SweepDocument | None:
        """The screen's document: what ``bmoe-top sweep --once --json`` prints (None before the end)."""
        return sweep_document(self.result) if self.result is not None else None

    def _title(self) -> Text:
        """The model and the sweep's folder (file names shortened in their middle to fit the
        width: :func:`~bmoe_top.tui.widgets.lines.elide_words`), the grid, then its pace when
        there is room."""
        p = self.plan
        width = max(20, (self.size.width or 80) - 2)
        grid = f"  {len(p.arms())} arms x {p.runs} runs"
        pace = f"  {p.order}, {p.n_predict} tokens a run{', overlap' if p.overlap else ''}"
        head = elide_words(f"bmoe-top  sweep {Path(p.model).name} -> {p.out}", max(20, width - len(grid)))
        t = safe_text(head)
        t.append(grid, style="bold")
        if len(head) + len(grid) + len(pace) <= width:
            t.append(pace, style="dim")
        return t

    def _status(self) -> Text:
        if self.error is not None:
            return safe_text(f"the sweep stopped: {self.error}", "bold " + KIND_STYLE["bad"])
        p = self.progress
        if p is not None and self.result is None:
            p = replace(p, paused=self.control.paused)
        words = progress_words(p, self.result)
        return safe_text(words, "bold " + KIND_STYLE["bad"] if p is not None and p.paused else "")

    def _notes(self) -> Text:
        t = Text()
        r = self.result
        if r is not None:
            t.append(error_words(r) + "\n")
            for n in r.notes:
                t.append_text(safe_text(f"note: {n}\n", KIND_STYLE["missing"]))
        arms = self.plan.arms()
        if self.marked:
            t.append("marked: " + ", ".join(_arm_name(*arms[i]) for i in self.marked) + "  ", style="bold")
        t.append("m marks an arm, c compares two, w the what-if" if r is not None
                 else "c compares two arms of the runs ended so far; w opens the what-if once the sweep has ended",
                 style="dim")
        return t

    def refresh_views(self) -> None:
        if not self.query("#sw-title"):
            return  # before compose finished
        self.query_one("#sw-title", Static).update(self._title())
        p = self.progress
        bar = self.query_one("#sw-bar", ProgressBar)
        total = len(self.plan.arms()) * self.plan.runs
        bar.update(total=total, progress=p.done if p is not None else 0)
        self.query_one("#sw-status", Static).update(self._status())
        shown = self.shown
        if shown is not None:
            table = sweep_table(shown)
            arms = self.query_one("#sweep-arms", SortTable)
            if table != arms.table:  # a tick with nothing new keeps the table as drawn (its cursor, its fit)
                arms.set_table(table)
        self.query_one("#sw-notes", Static).update(self._notes())

    # --------------------------------------------------------------------------------- actions
    def _cursor_arm(self) -> int | None:
        """The arm (index into the plan's arms) under the table's cursor."""
        st = self.query_one("#sweep-arms", SortTable)
        if not st.shown:
            return None
        row = st.shown[min(max(0, st.data_table.cursor_row), len(st.shown) - 1)]
        key = (row.keys[0], row.keys[1])
        arms = self.plan.arms()
        return next((i for i, (c, lanes) in enumerate(arms) if (c, lanes) == key), None)

    def action_toggle_pause(self) -> None:
        if self.result is not None or self.error is not None or not self.start:
            self.notify("the sweep has ended: nothing to pause")
            return
        if self.control.paused:
            self.control.resume()
            self.notify("sweep resumed")
        else:
            self.control.pause()
            self.notify("sweep paused after the run going on (p resumes)")
        self.refresh_views()

    def action_mark(self) -> None:
        i = self._cursor_arm()
        if i is None:
            self.notify("no arm under the cursor yet", severity="warning")
            return
        if i in self.marked:
            self.marked.remove(i)
        else:
            self.marked = [*self.marked, i][-2:]
        self.refresh_views()

    def _arms_to_compare(self) -> list[int]:
        if len(self.marked) == 2:
            return list(self.marked)
        cur = self._cursor_arm()
        first = self.marked[0] if self.marked else 0
        return [first, cur] if cur is not None and cur != first else []

    def action_compare(self) -> None:
        from bmoe_top.tui.analysis.compare import compare
        from bmoe_top.tui.jobs import compare as J
        from bmoe_top.tui.screens.compare import CompareScreen

        shown = self.shown
        pick = self._arms_to_compare()
        if shown is None or len(pick) != 2:
            self.notify("mark two arms (m), or put the cursor on an arm other than the first", severity="warning")
            return
        specs = []
        for i in pick:
            a = shown.arms[i]
            runs = [[str(Path(x.dir) / "run.csv"), str(Path(x.dir) / "run.route.csv")] for x in a.runs
                    if x.tok_s is not None and not x.routing_differs]
            if not runs:
                self.notify(f"{_arm_name(a.cache_mb, a.io_threads)}: no run ended well yet", severity="warning")
                return
            specs.append(J.ArmSpec(_arm_name(a.cache_mb, a.io_threads), runs, named=True))
        try:
            loaded = J.load_arms(specs)
            c = compare(J.arm_inputs(loaded))
        except J.CompareError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        self.app.push_screen(CompareScreen(loaded, c, title="compare (sweep " + " vs ".join(s.name for s in specs)
                                           + ")"))

    def action_whatif(self) -> None:
        from bmoe_top.tui.jobs.sizing import speed_view
        from bmoe_top.tui.jobs.whatif import WhatIfError, analyse_input, load_whatif
        from bmoe_top.tui.screens.whatif import WhatIfScreen

        r = self.result
        if r is None or r.reference is None or r.reference_inputs["compute_ms"] is None:
            self.notify("the what-if opens once the sweep has ended with a prediction" if r is None
                        else "nothing was predicted: " + "; ".join(r.notes), severity="warning")
            return
        ref = Path(r.reference)
        try:
            inp = load_whatif([str(ref / "run.route.csv"), str(ref / "run.csv")])
            report, replay = analyse_input(inp)
        except WhatIfError as e:
            self.notify(str(e), severity="error", timeout=8)
            return
        ri = r.reference_inputs
        lanes = self.plan.io_threads[0]
        ref_arm = r.arms[0]
        costs = RunCosts(float(ri["compute_ms"] or 0.0), float(ri["mgmt_ms"] or 0.0), float(ri["stall_ms"] or 0.0),
                         ri["mode"] == "overlap", lanes, ref_arm.measured_tok_s,
                         inp.run_costs.read_mib_per_tok if inp.run_costs is not None else None,
                         float(ri["miss_ms"] or 0.0), float(ri["evict_ms"] or 0.0))
        inp = replace(inp, run_costs=costs)
        speed = speed_view(inp, report, machine_ram=(None, ""))
        points = tuple((a.cache_mb, a.measured_tok_s) for a in r.arms
                       if a.io_threads == lanes and a.measured_tok_s is not None)
        self.app.push_screen(WhatIfScreen(inp, report, replay, title=f"whatif (sweep reference {ref.parent.name})",
                                          speed=speed, measured=points))

    def action_help(self) -> None:
        self.app.push_screen(AnalysisHelp("bmoe-top sweep: keys", km.help_rows(self.KEYS), HELP_NOTES))

    def action_quit(self) -> None:
        self.control.stop()
        self.app.exit()


def _arm_name(cache_mb: float, lanes: int) -> str:
    return f"{fmt(cache_mb, 0)} MiB x{lanes}"


def sweep_app(plan: SweepPlan, *, start: bool = True) -> BmoeTopApp:
    """The app over a :class:`SweepScreen`."""
    return BmoeTopApp(SweepScreen(plan, start=start))


def run_sweep_screen(plan: SweepPlan) -> int:
    """Run the sweep on its screen; returns the exit status (1 when a run failed, as the text
    forms)."""
    screen = SweepScreen(plan)
    app = BmoeTopApp(screen)
    app.run()
    screen.close()
    failed = screen.error is not None or screen.result is not None and any(
        x.tok_s is None for a in screen.result.arms for x in a.runs)
    return app.return_code or (1 if failed else 0)
