"""The comparison screen (``bmoe-top compare A B ...``): the summary table with noise-aware deltas
(``~`` unless p < 0.05 and above the noise floor), the warm-up/steady split of every run, the
runs side by side per token aligned by step, the contamination panel (entry state) and the
advice (runs needed, interleaving); a "different workload" banner when routed experts differ,
and "within-run only" when an arm has one run.

Keys: ``1``-``4`` tabs, ``s`` / ``S`` / ``/`` sort and filter a table, ``y`` the per-token
chart's metric (wall, flash wait, hit %), ``r`` the next run of multi-run arms, ``?`` / F1 help,
``q`` quit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static, TabbedContent, TabPane

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.analysis.compare import WITHIN_RUN_LABEL, Comparison
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.present.compare import (
    FLASH,
    LoadedArm,
    entry_rows,
    short_names,
    summary_table,
    token_series,
    token_table,
    warmup_table,
)
from bmoe_top.tui.screens.analysis_modals import AnalysisHelp, leave
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.base import remember
from bmoe_top.tui.widgets.curves import CurveChart, CurveMark, CurvePlot
from bmoe_top.tui.widgets.focus import SCROLL_KEYS, FocusRules, PanelScroll, PaneTabs
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.palette import KIND_STYLE
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.search import SEARCH_KEYS, SearchBar, SearchScreen
from bmoe_top.tui.widgets.tables import TABLE_KEYS, SortTable

__all__ = ["CompareScreen", "compare_app", "run_compare"]

#: the per-token chart's metrics: (token column, title, unit)
TOKEN_METRICS = (("wall_ms", "wall ms per token", "ms"), (FLASH, "flash wait ms per token", "ms"),
                 ("cache_hit_pct", "cumulative hit %", "%"))

HELP_NOTES = (
    "Timing metrics use each run's steady part: MSER-5 picks where warm-up ends from the data.\n"
    "Several runs per arm: the run is the unit (its steady mean); Mann-Whitney U gives p, the Hodges-Lehmann\n"
    "shift the size of the change and its interval. One run per arm: a moving-block bootstrap of the tokens,\n"
    "within-run only: it does not cover the order of the runs or thermal drift.\n"
    "~ = within the noise: p >= 0.05 or a change under the noise floor (default 2%, --noise-floor).\n"
    "Deterministic metrics (decode hit %, MiB/token, routed experts) are compared exactly: same / differs.\n"
    "Take at least 4 runs per arm for a test, 6 for a 95% interval, and run the arms interleaved (A B A B).\n"
    "docs/analysis.md explains every number."
)


class CompareScreen(FocusRules, SearchScreen):
    """The comparison ``c`` of the loaded ``arms`` (see the module docstring)."""

    DEFAULT_CSS = """
    CompareScreen { layout: vertical; }
    #cmp-title { height: 1; background: $boost; padding: 0 1; }
    #cmp-banner { height: auto; padding: 0 1; }
    #cmp-tabs { height: 1fr; }
    #summary-table { height: 1fr; }
    #cmp-notes { height: auto; max-height: 6; }
    #cmp-advice { height: auto; padding: 0 1; }
    #token-chart { height: 1fr; min-height: 10; }
    #token-table { height: 1fr; }
    CompareScreen.short #token-table { display: none; }
    CompareScreen.short #cmp-notes { max-height: 3; }
    CompareScreen.short #summary-table .sort-note { display: none; }
    CompareScreen.short .sort-note { max-height: 1; }
    #contamination { padding: 0 1; }
    """

    KEYS: ClassVar[tuple[km.Key, ...]] = (
        km.Key("1", "tab('summary')", "the Summary tab", title="Tab: Summary"),
        km.Key("2", "tab('tokens')", "the Per token tab", title="Tab: Per token"),
        km.Key("3", "tab('warmup')", "the Warm-up tab", title="Tab: Warm-up"),
        km.Key("4", "tab('entry')", "the Contamination tab", title="Tab: Contamination"),
        # ← / → scroll the tab's table sideways wherever the focus is (1-4 switch tabs)
        km.Key("left", "scroll_table(-1)", "scroll the table left", "anywhere", palette=False),
        km.Key("right", "scroll_table(1)", "scroll the table right", "anywhere", palette=False),
        km.Key("y", "cycle_metric", "the next per-token metric", footer="token metric", title="Next token metric"),
        km.Key("r", "next_run", "per token: the next run of each arm", footer="next run", title="Next run"),
        km.Key("question_mark,f1", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        km.Key("q", "quit", "quit (opened from the sweep: back to it)", footer="quit", title="Quit"),
        km.Key("ctrl+c", "quit", "quit", "anywhere", palette=False),
        km.Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", "anywhere", palette=False),
        *SEARCH_KEYS,
        *km.FOCUS_KEYS,
        *TABLE_KEYS,
        *SCROLL_KEYS,
    )
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(KEYS)

    def __init__(self, arms: list[LoadedArm], c: Comparison, *, title: str = "") -> None:
        super().__init__()
        self.arms, self.c = arms, c
        self.source_title = title
        kept = BmoeTopApp.startup_settings().compare.token_metric
        names = [m[0] for m in TOKEN_METRICS]
        self.metric = names.index(kept) if kept in names else 0
        if kept not in names:
            BmoeTopApp.settings_problem("compare.token_metric", kept, names, names[0])
        self.run_index = 0

    def compose(self) -> ComposeResult:
        yield Static(id="cmp-title")
        yield Static(id="cmp-banner")
        with PaneTabs(id="cmp-tabs", initial="summary"):
            with TabPane("Summary", id="summary"), Vertical():
                yield SortTable(summary_table(self.c), id="summary-table", scrolls=True)
                with PanelScroll(id="cmp-notes"):  # Tab, then ↑ ↓ scroll what the rows leave out
                    yield Static(id="cmp-advice")
            with TabPane("Per token", id="tokens"), Vertical():
                yield CurveChart(id="token-chart")
                yield SortTable(id="token-table", scrolls=True)
            with TabPane("Warm-up", id="warmup"):
                yield SortTable(warmup_table(self.c), id="warmup-table", scrolls=True)
            with TabPane("Contamination", id="entry"), VerticalScroll():
                yield Static(id="contamination")
        yield SearchBar()
        yield FittingFooter()

    def on_mount(self) -> None:
        self.set_class(self.app.size.height < 36, "short")
        self.refresh_views()

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height < 36, "short")
        self.call_after_refresh(self._fit_texts)

    def _fit_texts(self) -> None:
        """What depends on the size: the title's width, the note in the advice on a short screen."""
        title = self.query_one("#cmp-title", Static)
        title.update(self._title(self.size.width - 2))  # the title spans the screen, padding 0 1
        self.query_one("#cmp-advice", Static).update(self._advice())

    # ----------------------------------------------------------------------------------- views
    def _title(self, width: int | None = None) -> Text:
        """The title at ``width`` cells (None: whole): each arm and its runs, the arms by their
        short names when the full ones do not fit, else only how many arms and runs."""
        t = safe_text(f"bmoe-top  {self.source_title}  ")
        base = f"   baseline {self.c.baseline}"
        short = short_names([a.name for a in self.arms])

        def runs(name: Callable[[str], str]) -> str:
            return " · ".join(f"{name(a.name)}: {len(a.runs)} run{'s' if len(a.runs) != 1 else ''}" for a in self.arms)

        options = [runs(str), runs(lambda n: short[n]),
                   f"{len(self.arms)} arms, {sum(len(a.runs) for a in self.arms)} runs"]
        room = None if width is None else width - t.cell_len - len(base)
        text = next((o for o in options if room is None or len(sanitize(o)) <= room), options[-1])
        t.append_text(safe_text(text, "bold"))
        if width is None or t.cell_len + len(base) <= width:
            t.append(base, style="dim")
        return t

    def _banner(self) -> Text:
        t = Text()
        for line in (self.c.identical_note, self.c.banner):
            if line:
                t.append_text(safe_text(line, "bold " + KIND_STYLE["bad"]))
                t.append("\n")
        if all(len(a.runs) == 1 for a in self.arms):
            t.append(WITHIN_RUN_LABEL, style="bold " + KIND_STYLE["derived"])
            t.append("  (one run per arm: intervals from the runs' own tokens)", style="dim")
        else:
            t.append("the run is the unit: each run's steady mean; Mann-Whitney U, Hodges-Lehmann shift",
                     style="dim")
        return t

    def _advice(self) -> Text:
        """The warm-up split, the advice and the contamination hints; on a short screen the
        summary table's note first (its own note line is left out there)."""
        t = Text()
        if self.has_class("short"):
            t.append_text(safe_text(summary_table(self.c).note + "\n", "dim"))
        split = "; ".join(f"{w.name}: steady from token {w.split} of {w.tokens}" for w in self.c.warmup)
        t.append("warm-up (MSER-5): ", style="bold")
        t.append_text(safe_text(split + "\n"))
        for a in self.c.advice:
            t.append("• ", style="dim")
            t.append_text(safe_text(a + "\n"))
        for h in self.c.contamination.hints:
            t.append("• ", style="dim")
            t.append_text(safe_text(h + "\n", KIND_STYLE["bad"]))
        return t

    def _contamination(self) -> Text:
        t = Text("entry state: how each run started\n\n", style=KIND_STYLE["section"])
        for label, value, kind in entry_rows(self.c):
            t.append(f"  {label:<24}", style="dim")
            t.append_text(safe_text(value + "\n", KIND_STYLE.get(kind, "")))
        t.append("\nA run that starts hotter, with less free memory or a lower CPU clock is slower for reasons "
                 "that are not the change:\nrun the arms in the reverse order too, or interleave them (A B A B), "
                 "and see whether the difference follows the order.\n", style="dim")
        t.append("\nadvice\n", style=KIND_STYLE["section"])
        for a in self.c.advice:
            t.append_text(safe_text(f"  • {a}\n"))
        return t

    def _token_plot(self) -> CurvePlot:
        col, title, unit = TOKEN_METRICS[self.metric % len(TOKEN_METRICS)]
        keys, values, by_step = token_series(self.arms, col, self.run_index)
        x = np.arange(1, keys.shape[0] + 1, dtype=np.float64)
        series = tuple(CurveChart.series_from(a.name, f"{a.name}: {a.runs[min(self.run_index, len(a.runs) - 1)].name}",
                                              x, v, i) for i, (a, v) in enumerate(zip(self.arms, values)))
        marks = []
        splits = {(w.arm, w.run): w.split for w in self.c.warmup}
        for i, (a, v) in enumerate(zip(self.arms, values)):
            run = a.runs[min(self.run_index, len(a.runs) - 1)]
            s = splits.get((a.name, run.name))
            fin = np.flatnonzero(np.isfinite(v))
            if s is not None and 0 < s < fin.size:
                marks.append(CurveMark(float(x[fin[s]]), f"{a.name} steady from token {s}", "┊", ":",
                                       ("bright_cyan", "magenta", "bright_blue", "green")[i % 4]))
        finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.zeros(0)
        y_max = 100.0 if unit == "%" else (float(np.percentile(finite, 99)) * 1.1 if finite.size else None)
        note = f"aligned by {'(turn, step)' if by_step else 'row'}; a column: the mean of its tokens"
        if unit != "%":
            note += "; y clipped at the 99th percentile"
        return CurvePlot(title=title, x_label="position, aligned", x_unit="token", y_label=title, y_unit=unit,
                         series=series, marks=tuple(marks), y_min=0.0, y_max=y_max, note=note)

    def refresh_views(self) -> None:
        if not self.query("#cmp-title"):
            return  # before compose finished
        title = self.query_one("#cmp-title", Static)
        title.update(self._title(self.size.width - 2))  # the title spans the screen, padding 0 1
        self.query_one("#cmp-banner", Static).update(self._banner())
        self.query_one("#cmp-advice", Static).update(self._advice())
        self.query_one("#contamination", Static).update(self._contamination())
        self.query_one("#token-chart", CurveChart).set_plot(self._token_plot())
        self.query_one("#token-table", SortTable).set_table(token_table(self.arms, self.c, self.run_index))

    # --------------------------------------------------------------------------------- actions
    def action_tab(self, tab: str) -> None:
        self.query_one("#cmp-tabs", TabbedContent).active = tab

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """← / → belong to a text box while one has the focus."""
        if action == "scroll_table" and isinstance(self.focused, Input):
            return False
        return super().check_action(action, parameters)

    def action_scroll_table(self, d: int) -> None:
        """← / →: the active tab's table by one column (the columns the width leaves out come in)."""
        tab = self.query_one("#cmp-tabs", TabbedContent).active
        tables = self.query(f"#{tab} SortTable")
        if tables:
            tables.first(SortTable).scroll_columns(d)

    def action_cycle_metric(self) -> None:
        self.metric += 1
        remember(self, "compare.token_metric", TOKEN_METRICS[self.metric % len(TOKEN_METRICS)][0])
        self.refresh_views()

    def action_next_run(self) -> None:
        most = max(len(a.runs) for a in self.arms)
        if most == 1:
            self.notify("one run per arm: nothing to cycle")
            return
        self.run_index = (self.run_index + 1) % most
        self.notify("per token: run " + ", ".join(f"{a.name}: {a.runs[min(self.run_index, len(a.runs) - 1)].name}"
                                                   for a in self.arms))
        self.refresh_views()

    def action_help(self) -> None:
        self.app.push_screen(AnalysisHelp("bmoe-top compare: keys", km.help_rows(self.KEYS), HELP_NOTES))

    def action_quit(self) -> None:
        leave(self)


def compare_app(arms: list[LoadedArm], c: Comparison, title: str = "compare") -> BmoeTopApp:
    """The app over a :class:`CompareScreen`."""
    return BmoeTopApp(CompareScreen(arms, c, title=title))


def run_compare(arms: list[LoadedArm], c: Comparison, title: str = "compare") -> int:
    """Run the comparison screen; returns the exit status."""
    app = compare_app(arms, c, title)
    app.run()
    return app.return_code or 0

