"""The cache-sizing screen (``bmoe-top whatif TRACE ...``): hit % and MiB read per token against
the cache budget for every policy, the run's budget, T and the whole bank marked, the region
below T greyed (LRU cannot hit there: cache off is better), the compulsory-miss ceiling, the
gap to Belady; the policies at the cursor's budget, the layers that miss most there and what an
allocation across layers would buy, the routing skew; ``w`` writes a profile.

Keys: ←/→ move the budget cursor (shift or PgUp/PgDn: ten steps; Home/End), ``r`` the run's
budget, ``b`` the recommended one, ``y`` the y metric of the lower chart (MiB read per token,
flash I/O s/token, predicted tok/s with the knee, the fastest budget and the break-even against
plain mmap marked, and plain mmap as a line), ``a`` all policies or the main ones, ``w`` write an
STRP profile, ``1``-``4`` tabs, ``s`` / ``S`` / ``/`` sort and filter a table, ``?`` / F1 help, ``q`` quit.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Group
from rich.table import Table as RichTable
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, Static, TabbedContent, TabPane

from bmoe_top.outfile import OutputFileError
from bmoe_top.tui.analysis.layers import allocate
from bmoe_top.tui.analysis.policies import MAIN, NAMES, POLICIES
from bmoe_top.tui.analysis.whatif import Replay, WhatIf
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.jobs.whatif import write_profile
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.whatif import (
    HIT_DEFINITION,
    MIB,
    SpeedView,
    WhatIfInput,
    layer_table_rows,
    policy_table,
    skew_rows,
    speed_rows,
    summary_rows,
)
from bmoe_top.tui.screens.analysis_modals import AnalysisHelp, PathScreen, leave
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.base import remember
from bmoe_top.tui.widgets.curves import CurveChart, CurveMark, CurvePlot, CurveSeries
from bmoe_top.tui.widgets.focus import SCROLL_KEYS, FocusRules, PanelScroll, PaneTabs
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.palette import KIND_STYLE
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.search import SEARCH_KEYS, SearchBar, SearchScreen
from bmoe_top.tui.widgets.tables import TABLE_KEYS, SortTable

__all__ = ["WhatIfScreen", "run_whatif", "whatif_app"]
#: lower-chart metrics ``y`` cycles through: (key, title, unit)
LOWER = (("read", "MiB read per token", "MiB"), ("io", "flash I/O per token (estimated)", "s"),
         ("tok_s", "predicted tok/s", "tok/s"))

#: the measured points' slot in SERIES_LOOK (after every policy's)
MEASURED_LOOK = len(POLICIES)

HELP_NOTES = (
    "Hit % = " + HIT_DEFINITION + ".\n\n"
    "T, the token cycle: the bytes one decode token routes (top-k experts at every MoE layer). Below T an\n"
    "expert is always pushed out before its layer comes round again: LRU hits (about) nothing and the cache\n"
    "only costs management time, so cache off is strictly better (the grey region).\n"
    "Compulsory ceiling: first lookups always miss, so no cache beats it.\n"
    "Belady: evict the expert needed farthest ahead; Belady - LRU is the most a smarter policy could buy.\n"
    "Static profile: the hottest experts of the first half of the trace, scored on the second half.\n"
    "Flash I/O: MiB read per token / the run's measured read bandwidth (serial reads).\n"
    "Predicted tok/s: compute + flash wait + mgmt per token (overlap: max(compute, flash) + mgmt + stall), the\n"
    "run's own costs and read bandwidth (--bandwidth, or bmoe-top probe --remember); with --ram, the page cache\n"
    "behind the expert cache and plain mmap beside it. Knee: past it one more GiB buys under 5 % of tok/s.\n"
    "docs/analysis.md explains every number."
)


class WhatIfScreen(FocusRules, SearchScreen):
    """The what-if report ``report`` of ``inp`` (with the curves behind it, ``replay``);
    ``measured``: (budget MiB, tok/s) points runs measured (a sweep's arms), drawn over the
    predicted tok/s curves, which the lower chart then opens on."""

    DEFAULT_CSS = """
    WhatIfScreen { layout: vertical; }
    #wi-title { height: 1; background: $boost; padding: 0 1; }
    #wi-body { height: 1fr; }
    #wi-tabs { width: 1fr; }
    #wi-side { width: 46; border-left: solid $primary-darken-2; }
    #side-summary { padding: 0 1; }  /* its left column takes the focus bar (PanelScroll) */
    #wi-readout { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    #chart-a, #chart-b { height: 1fr; }
    #alloc { height: auto; padding: 0 1; }
    #skew { padding: 0 1; }
    WhatIfScreen.-ascii #wi-side { border-left: ascii $primary-darken-2; }
    WhatIfScreen.narrow #wi-side { display: none; }
    WhatIfScreen.short #chart-b { display: none; }
    """

    KEYS: ClassVar[tuple[km.Key, ...]] = (
        km.Key("left", "cursor(-1)", "a smaller budget", "anywhere", footer="◀ budget", palette=False),
        km.Key("right", "cursor(1)", "a larger budget", "anywhere", footer="budget ▶", palette=False),
        km.Key("shift+left,pageup", "cursor(-10)", "ten budget steps down", "anywhere", palette=False),
        km.Key("shift+right,pagedown", "cursor(10)", "ten budget steps up", "anywhere", palette=False),
        km.Key("home", "cursor_to('start')", "the smallest budget", "anywhere", title="Smallest budget"),
        km.Key("end", "cursor_to('end')", "the whole bank", "anywhere", title="Whole bank"),
        km.Key("r", "cursor_to('run')", "the run's budget", footer="run's budget", title="The run's budget"),
        km.Key("b", "cursor_to('recommended')", "the recommended budget", footer="recommended",
               title="Recommended budget"),
        km.Key("y", "cycle_metric", "the next metric (hit %, read/token, tok/s)", footer="metric",
               title="Next metric"),
        km.Key("a", "toggle_policies", "all policies / the main ones", footer="all/main policies",
               title="All / main policies"),
        km.Key("z", "toggle_zoom", "zoom the curves on the budgets that matter", footer="zoom", title="Zoom"),
        km.Key("w", "write_profile", "write an STRP profile for bmoe-run", footer="write profile",
               title="Write profile…"),
        km.Key("1", "tab('curves')", "the Curves tab", title="Tab: Curves"),
        km.Key("2", "tab('policies')", "the Policies tab", title="Tab: Policies"),
        km.Key("3", "tab('layers')", "the Layers tab", title="Tab: Layers"),
        km.Key("4", "tab('skew')", "the Skew tab", title="Tab: Skew"),
        km.Key("question_mark,f1", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        km.Key("q", "quit", "quit (opened from the sweep: back to it)", footer="quit", title="Quit"),
        km.Key("ctrl+c", "quit", "quit", "anywhere", palette=False),
        km.Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", "anywhere", palette=False),
        *SEARCH_KEYS,
        *km.FOCUS_KEYS,
        *TABLE_KEYS,
        # the side panel scrolls by ↑ ↓ (its PgUp PgDn Home End are the budget cursor's here)
        *(k for k in SCROLL_KEYS if k.keys in ("up", "down", "escape")),
    )
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(KEYS)
    #: actions that belong to the curves (the tables and text boxes keep their keys)
    CURSOR_ACTIONS = frozenset({"cursor", "cursor_to"})

    def __init__(self, inp: WhatIfInput, report: WhatIf, replay: Replay, *, title: str = "",
                 speed: SpeedView | None = None, measured: tuple[tuple[float, float], ...] = ()) -> None:
        super().__init__()
        self.inp, self.report, self.replay = inp, report, replay
        self.speed = speed
        self.measured = measured
        self.source_title = title
        by = {c.policy: c for c in report.curves}
        self.by = by
        sweep = np.asarray(by["lru"].budgets_mib if "lru" in by else report.lru_all.budgets_mib)
        dense = np.asarray(report.lru_all.budgets_mib)
        self.positions = np.unique(np.concatenate([sweep, dense[dense < report.token_cycle_mib],
                                                   [report.recommended_budget_mib]]))
        start = report.run_budget_mib if report.run_budget_mib is not None else report.recommended_budget_mib
        self.index = self._nearest(start)
        kept = BmoeTopApp.startup_settings().whatif
        lower = self._lower_metrics()
        # index into LOWER for the lower chart (or the only one, with hit % first)
        self.metric = lower.index(kept.metric) if kept.metric in lower else 0
        if measured and "tok_s" in lower:
            self.metric = lower.index("tok_s")
        if kept.metric not in (names := [m[0] for m in LOWER]):
            BmoeTopApp.settings_problem("whatif.metric", kept.metric, names, names[0])
        self.narrow_metric = 0  # narrow: 0 = hit %, then LOWER
        self.all_policies = kept.all_policies
        self.whole_bank = kept.whole_bank  # x axis: the whole bank, or the interesting part (``z``)
        self._alloc_cache: dict[int, tuple[list[int], float, float]] = {}

    # ---------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(id="wi-title")
        with Horizontal(id="wi-body"):
            with PaneTabs(id="wi-tabs", initial="curves"):
                with TabPane("Curves", id="curves"), Vertical():
                    yield CurveChart(id="chart-a")
                    yield CurveChart(id="chart-b")
                with TabPane("Policies", id="policies"):
                    yield SortTable(id="policy-table")
                with TabPane("Layers", id="layers"), Vertical():
                    yield Static(id="alloc")
                    yield SortTable(id="layer-table")
                with TabPane("Skew", id="skew-tab"), VerticalScroll():
                    yield Static(id="skew")
            with PanelScroll(id="wi-side"):  # Tab, then ↑ ↓ scroll it
                yield Static(id="side-summary")
        yield Static(id="wi-readout")
        yield SearchBar()
        yield FittingFooter()

    def on_mount(self) -> None:
        self._layout_classes(self.app.size.width, self.app.size.height)
        self.query_one("#skew", Static).update(self._skew_text())
        self.refresh_views()

    def on_resize(self, event: events.Resize) -> None:
        self._layout_classes(event.size.width, event.size.height)
        self.refresh_views()

    def _layout_classes(self, width: int, height: int) -> None:
        self.set_class(width < 120, "narrow")
        self.set_class(height < 36, "short")

    # ---------------------------------------------------------------------------------- values
    @property
    def budget_mib(self) -> float:
        """The cursor's budget (in the report's unit)."""
        return float(self.positions[self.index])

    @property
    def unit(self) -> str:
        return "MiB" if self.report.sizes_known else "slots"

    def _nearest(self, v: float) -> int:
        return int(np.argmin(np.abs(self.positions - v)))

    def _marks(self) -> tuple[CurveMark, ...]:
        r = self.report
        marks = []
        if r.run_budget_mib is not None:
            marks.append(CurveMark(r.run_budget_mib, f"run's budget {fmt(r.run_budget_mib, 0)} {self.unit}", "│",
                                   "|", "bright_white"))
        marks.append(CurveMark(r.token_cycle_mib, f"T {fmt(r.token_cycle_mib, 0)} {self.unit}", "╎", "!", "yellow"))
        marks.append(CurveMark(r.recommended_budget_mib, f"recommended {fmt(r.recommended_budget_mib, 0)} {self.unit}",
                               "┊", ";", "green"))
        marks.append(CurveMark(r.bank_mib, f"whole bank {fmt(r.bank_mib, 0)} {self.unit}", "▕", "]", "white"))
        return tuple(marks)

    def _series(self, metric: str) -> tuple[CurveSeries, ...]:
        out = []
        for i, pol in enumerate(POLICIES):
            p = pol.name
            c = self.by.get(p)
            if c is None:
                continue
            if pol.replay == "one_pass":
                c = self.report.lru_all  # every budget, not only the sweep's
            if metric == "hit":
                y = c.decode_hit_pct
            elif metric == "read":
                y = c.read_mib_per_token
            else:
                if not c.io_s_per_token:
                    continue
                y = c.io_s_per_token
            out.append(CurveChart.series_from(p, pol.label, c.budgets_mib, y, i))
        return tuple(out)

    def _tok_s_series(self) -> tuple[CurveSeries, ...]:
        from bmoe_top.tui.jobs.sizing import tok_s_curve

        out = []
        assert self.speed is not None
        for i, pol in enumerate(POLICIES):
            x, y = tok_s_curve(self.speed, pol.name)
            if x.size:
                out.append(CurveChart.series_from(pol.name, pol.label, x, y, i))
        if self.measured:
            mx, my = zip(*self.measured)
            out.insert(0, CurveSeries("measured", "measured (sweep, median of runs)", np.asarray(mx, dtype=np.float64),
                                      np.asarray(my, dtype=np.float64), MEASURED_LOOK, points=True))
        return tuple(out)

    def _speed_marks(self) -> tuple[CurveMark, ...]:
        r = self.speed.reports.get("lru") if self.speed is not None else None
        if r is None:
            return ()
        marks = [CurveMark(r.best_mib, f"fastest {fmt(r.best_mib, 0)} MiB", "┃", "#", "green")]
        if r.knee_mib is not None:
            marks.append(CurveMark(r.knee_mib, f"knee {fmt(r.knee_mib, 0)} MiB", "╏", ":", "cyan"))
        if r.break_even_mib is not None:
            marks.append(CurveMark(r.break_even_mib, f"break-even vs mmap {fmt(r.break_even_mib, 0)} MiB", "┆", "'",
                                   "magenta"))
        return tuple(marks)

    def _plot(self, metric: str) -> CurvePlot:
        r = self.report
        hidden = frozenset() if self.all_policies else frozenset(NAMES) - MAIN
        shade = f"below T: LRU hits ~0%, cache off is strictly better (LRU hits 0 below {fmt(r.zero_hit_below_mib, 0)})"
        common = dict(x_label="cache budget", x_unit=self.unit, marks=self._marks(), shade_below=r.token_cycle_mib,
                      shade_label=shade, cursor=self.budget_mib, x_min=0.0, x_max=self.x_max(), hidden=hidden)
        if metric == "hit":
            return CurvePlot(title="decode hit % against the cache budget", y_label="decode hit", y_unit="%",
                             series=self._series("hit"), y_min=0.0, y_max=100.0,
                             hline=(r.compulsory_ceiling_pct,
                                    f"compulsory ceiling {fmt(r.compulsory_ceiling_pct, 1)}%"),
                             note="hits / decode lookups", **common)  # type: ignore[arg-type]
        if metric == "read":
            return CurvePlot(title=f"{'MiB' if r.sizes_known else 'experts'} read per decode token", y_label="read",
                             y_unit=self.unit, series=self._series("read"), y_min=0.0,
                             hline=(r.token_cycle_mib, f"cache off: T = {fmt(r.token_cycle_mib, 0)} per token"),
                             **common)  # type: ignore[arg-type]
        if metric == "tok_s" and self.speed is not None:
            sp = self.speed
            lru = sp.reports.get("lru")
            mmap = lru.mmap if lru is not None else None
            mode = "overlap" if sp.overlap else "serial"
            levels = "expert cache + page cache" if sp.levels == 2 else "expert cache alone (no --ram / dense)"
            return CurvePlot(title=f"predicted tok/s ({mode}; {levels})", y_label="tok/s", y_unit="tok/s",
                             series=self._tok_s_series(), y_min=0.0,
                             hline=(mmap.tok_s(sp.overlap), f"plain mmap {fmt(mmap.tok_s(sp.overlap), 2)} tok/s")
                             if mmap is not None else None,
                             **{**common, "marks": self._marks() + self._speed_marks()})  # type: ignore[arg-type]
        bw = fmt(r.read_mib_s, 0) if r.read_mib_s else "?"
        return CurvePlot(title=f"flash I/O s per token at {bw} MiB/s (estimated, serial reads)", y_label="I/O",
                         y_unit="s", series=self._series("io"), y_min=0.0, **common)  # type: ignore[arg-type]

    def x_max(self) -> float:
        """The x axis' end: the whole bank, or (zoomed, the default) twice the largest of the run's,
        the recommended and the measured points' budgets, at least 2 T, never past the bank; the
        cursor stays inside."""
        r = self.report
        if self.whole_bank:
            return r.bank_mib
        focus = max(r.run_budget_mib or 0.0, r.recommended_budget_mib, *(x for x, _ in self.measured))
        return float(min(r.bank_mib, max(2.0 * focus, 2.0 * r.token_cycle_mib, self.budget_mib * 1.05)))

    def _lower_metrics(self) -> list[str]:
        keys = ["read"]
        if self.report.read_mib_s:
            keys.append("io")
        if self.speed is not None and self.speed.reports:
            keys.append("tok_s")
        return keys

    def _title(self, width: int | None = None) -> Text:
        """The title at ``width`` cells (None: whole): the definition of hit % only when it fits
        whole."""
        t = safe_text(f"bmoe-top  {self.source_title}  ")
        t.append(f"budget {fmt(self.budget_mib, 0)} {self.unit} (cursor)", style="bold")
        define = "   hit % = decode hits / decode lookups"
        if width is None or t.cell_len + len(define) <= width:
            t.append(define, style="dim")
        return t

    def _readout(self) -> Text:
        b = self.budget_mib
        lru, bel = self.by.get("lru"), self.by.get("belady")
        t = Text()
        t.append(f"at {fmt(b, 0)} {self.unit}: ", style="bold")
        j = self.report.lru_all.budgets_mib
        k = int(np.searchsorted(np.asarray(j), b + 1e-9, side="right")) - 1
        hit = self.report.lru_all.decode_hit_pct[k] if k >= 0 else math.nan
        read = self.report.lru_all.read_mib_per_token[k] if k >= 0 else math.nan
        t.append(f"LRU {fmt(hit, 2)}%  ", style="bold")
        t.append(f"{fmt(read, 1)} {self.unit} read/token", style="")
        if self.report.lru_all.io_s_per_token and k >= 0:
            t.append(f"  ≈{fmt(self.report.lru_all.io_s_per_token[k], 3)} s/token flash I/O", style="")
        if bel is not None and lru is not None:
            sj = int(np.searchsorted(np.asarray(bel.budgets_mib), b + 1e-9, side="right")) - 1
            if sj >= 0 and b >= self.report.token_cycle_mib:
                gap = bel.decode_hit_pct[sj] - lru.decode_hit_pct[sj]
                t.append(f"  Belady {fmt(bel.decode_hit_pct[sj], 2)}% (+{fmt(gap, 2)} pt: the most a policy could buy)",
                         style="")
        if b < self.report.token_cycle_mib:
            t.append("  below T: cache off is strictly better", style=KIND_STYLE["bad"])
        return t

    def _side_text(self) -> Group:
        grid = RichTable.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(ratio=1)
        rows = summary_rows(self.inp, self.report, self.budget_mib)
        if self.speed is not None:
            rows += speed_rows(self.speed, "lru", self.budget_mib)
        for label, value, kind in rows:
            style = KIND_STYLE.get(kind, "")
            if kind == "section":
                grid.add_row(Text(""), Text(""))
                grid.add_row(Text(label, style=style), Text(""))
                continue
            grid.add_row(Text(label), safe_text(value, style))
        grid.add_row(Text(""), Text(""))
        grid.add_row(Text("routing skew", style=KIND_STYLE["section"]), Text(""))
        for label, value in skew_rows(self.report):
            grid.add_row(Text(label), Text(value))
        notes = [safe_text(f"note: {n}", KIND_STYLE["missing"]) for n in self.inp.notes]
        return Group(grid, *notes)

    def _skew_text(self) -> Text:
        t = Text("routing skew over the decode lookups\n\n", style=KIND_STYLE["section"])
        for label, value in skew_rows(self.report):
            t.append(f"  {label:<24}", style="dim")
            t.append(value + "\n")
        t.append("\nA skewed router (high top-8 share, low entropy, short reuse distances) is what a cache feeds on;\n"
                 "never-reused experts are misses no policy can avoid.", style="dim")
        return t

    def _allocation(self) -> tuple[list[int], float, float]:
        """(slots per layer, even-split hit %, allocated hit %) at the cursor's budget."""
        key = int(self.budget_mib * MIB)
        got = self._alloc_cache.get(key)
        if got is None:
            from bmoe_top.tui.analysis.layers import layer_partitioned_curve

            lc = self.replay.layer_curves
            al = allocate(lc, key)
            eq = layer_partitioned_curve(self.replay.lookups, [key], lc)
            dl = max(1, self.report.decode_lookups)
            got = ([int(s) for s in al.slots], 100.0 * int(eq.decode_hits[0]) / dl, 100.0 * al.decode_hits / dl)
            self._alloc_cache[key] = got
        return got

    def refresh_views(self) -> None:
        if not self.query("#wi-title"):
            return  # before compose finished
        title = self.query_one("#wi-title", Static)
        title.update(self._title(self.size.width - 2))  # the title spans the screen, padding 0 1
        self.query_one("#wi-readout", Static).update(self._readout())
        narrow_one = self.has_class("short")
        lower = self._lower_metrics()
        if narrow_one:
            seq = ["hit", *lower]
            self.query_one("#chart-a", CurveChart).set_plot(self._plot(seq[self.narrow_metric % len(seq)]))
        else:
            self.query_one("#chart-a", CurveChart).set_plot(self._plot("hit"))
            metric = lower[self.metric % len(lower)]
            # the measured points are only on the tok/s chart: its legend names them
            b = replace(self._plot(metric), legend=bool(self.measured) and metric == "tok_s")
            self.query_one("#chart-b", CurveChart).set_plot(b)
        self.query_one("#policy-table", SortTable).set_table(policy_table(self.report, self.budget_mib, self.speed))
        if self.query_one("#wi-tabs", TabbedContent).active == "layers":
            self._refresh_layers()
        if not self.has_class("narrow"):
            self.query_one("#side-summary", Static).update(self._side_text())

    def _refresh_layers(self) -> None:
        slots, even, alloc = self._allocation()
        k = int(np.searchsorted(np.asarray(self.report.lru_all.budgets_mib), self.budget_mib + 1e-9,
                                side="right")) - 1
        glob = float(self.report.lru_all.decode_hit_pct[max(0, k)])
        t = Text()
        t.append(f"at {fmt(self.budget_mib, 0)} {self.unit}: ", style="bold")
        t.append(f"one global LRU {fmt(glob, 2)}%   one LRU per layer, split evenly {fmt(even, 2)}%   "
                 f"allocated by each layer's curve {fmt(alloc, 2)}% ({alloc - even:+.2f} pt)")
        t.append("\nthe allocation moves budget to the layers whose curves gain most per MiB (AdapMoE's greedy "
                 "sizing); the table lists the layers by misses under the global LRU", style="dim")
        self.query_one("#alloc", Static).update(t)
        self.query_one("#layer-table", SortTable).set_table(layer_table_rows(self.replay, self.budget_mib, slots))

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "layers":
            self._refresh_layers()

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The budget cursor's keys work on the curves; tables and text boxes keep theirs."""
        if action in self.CURSOR_ACTIONS:
            if isinstance(self.focused, Input):
                return False
            tabs = self.query("#wi-tabs")
            if tabs and tabs.first(TabbedContent).active not in ("curves", "policies", "layers"):
                return False
        return super().check_action(action, parameters)

    def action_cursor(self, k: int) -> None:
        self.index = int(np.clip(self.index + k, 0, len(self.positions) - 1))
        self.refresh_views()

    def action_cursor_to(self, where: str) -> None:
        r = self.report
        if where == "start":
            self.index = 0
        elif where == "end":
            self.index = len(self.positions) - 1
        elif where == "run":
            if r.run_budget_mib is None:
                self.notify("the run's budget is not known (give its CSV or log, or --run-budget)",
                            severity="warning")
                return
            self.index = self._nearest(r.run_budget_mib)
        else:
            self.index = self._nearest(r.recommended_budget_mib)
        self.refresh_views()

    def action_cycle_metric(self) -> None:
        if self.has_class("short"):
            self.narrow_metric += 1
        else:
            self.metric += 1
            lower = self._lower_metrics()
            remember(self, "whatif.metric", lower[self.metric % len(lower)])
        self.refresh_views()

    def action_toggle_policies(self) -> None:
        self.all_policies = not self.all_policies
        remember(self, "whatif.all_policies", self.all_policies)
        self.notify("all policies" if self.all_policies else
                    "main policies: " + ", ".join(p.label for p in POLICIES if p.main))
        self.refresh_views()

    def action_toggle_zoom(self) -> None:
        self.whole_bank = not self.whole_bank
        remember(self, "whatif.whole_bank", self.whole_bank)
        self.refresh_views()

    def action_tab(self, tab: str) -> None:
        self.query_one("#wi-tabs", TabbedContent).active = tab if tab != "skew" else "skew-tab"

    def action_write_profile(self) -> None:
        default = Path(self.inp.trace).name.split(".")[0] + ".strp"

        def done(path: str | None) -> None:
            if not path:
                return
            try:
                ranked, slots = write_profile(self.inp, self.report, path, force=False)
            except OutputFileError as e:
                self.notify(str(e), severity="error", timeout=8)
                return
            self.notify(f"wrote {path}: {ranked:,} experts ranked for {slots:,} slots "
                        f"(bmoe-run --moe-cache-profile {path})")

        self.app.push_screen(PathScreen("Write an STRP profile (experts by lookups, hottest first) for "
                                        "bmoe-run --moe-cache-profile, to:", default), done)

    def action_help(self) -> None:
        self.app.push_screen(AnalysisHelp("bmoe-top whatif: keys", km.help_rows(self.KEYS), HELP_NOTES))

    def action_quit(self) -> None:
        leave(self)


def whatif_app(inp: WhatIfInput, report: WhatIf, replay: Replay, title: str = "whatif",
               speed: SpeedView | None = None) -> BmoeTopApp:
    """The app over a :class:`WhatIfScreen` (``speed``: the tok/s model over the report)."""
    return BmoeTopApp(WhatIfScreen(inp, report, replay, title=title, speed=speed))


def run_whatif(inp: WhatIfInput, report: WhatIf, replay: Replay, title: str = "whatif",
               speed: SpeedView | None = None) -> int:
    """Run the what-if screen; returns the exit status."""
    app = whatif_app(inp, report, replay, title, speed)
    app.run()
    return app.return_code or 0
