"""``bmoe-top attach --audit FILE``: follow an audit log (moe-cache-reference.md "Audit log") live.

An :class:`~bmoe_top.tui.sources.audit_tail.AuditTail` thread follows the file like ``tail -F``
into an :class:`~bmoe_top.tui.sources.audit_tail.AuditState`; the app polls ``state.version``
and shows, for the selected run (``n``/``N`` cycle through runs, newest first selected): a
status line (file, records, corrupt lines, rotations/truncations, pids), the run panel (model,
state, cache, counters since load, the exact-sum check once the run exited), the requests
table, the counters over time (hit % and MiB read per request record, as trends), the per-layer
hit % of the newest ``load``/``exit`` record and the resident-expert map of that record
(layer x expert: ``█`` resident, ``·`` not; colour = the layer's hit %).

:func:`run_attach(args)` is the entry ``bmoe-top attach --audit`` calls.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.strip import Strip
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from bmoe_top.parsers.audit import check_exact_sum
from bmoe_top.tui.screens.attach_metrics import STATUS_STYLE, TrendRows
from bmoe_top.tui.sources.audit_tail import AuditState, AuditTail
from bmoe_top.tui.widgets.grids import GUTTER, HEADER, GridView, _row_segments, fold_rows
from bmoe_top.tui.widgets.palette import (
    CELL_GLYPH, DIM, HIT_STYLES, NO_DATA_GLYPH, TITLE, fmt, hit_bin, legend_segments,
)

__all__ = ["AuditAttachApp", "ResidentMap", "run_attach", "REQUEST_COLUMNS"]

REQUEST_COLUMNS = ("pid", "task", "time", "n_prompt", "n_gen", "gen tok/s", "prompt ms", "gen ms",
                   "hit %", "hits", "misses", "from profile", "read MiB")

CSS = """
Screen { layout: vertical; }
#title { height: 1; background: $boost; padding: 0 1; }
#status { height: auto; max-height: 3; padding: 0 1; }
#body { height: 1fr; }
#side { width: 32%; min-width: 30; max-width: 50; border-right: solid $primary-darken-2; }
#requests { height: 1fr; }
TrendRows { height: 3; }
ResidentMap { height: 1fr; }
"""


class AuditView:
    """The selected run of an :class:`AuditState`, for the widgets."""

    def __init__(self, state: AuditState):
        self.state = state
        self.selected = -1  # index into runs; -1 = newest

    @property
    def version(self) -> tuple:
        return (self.state.version, self.selected)

    def run(self):
        runs = self.state.runs.runs
        if not runs:
            return None
        i = self.selected if -len(runs) <= self.selected < len(runs) else -1
        return runs[i]

    def trends(self) -> tuple:
        with self.state.lock:
            run = self.run()
            reqs = list(run.requests) if run else []
        hit, mib, tps = [], [], []
        for r in reqs:
            d = r.data
            h, m = d.get("req_hits"), d.get("req_misses")
            hit.append(100.0 * h / (h + m) if isinstance(h, int) and isinstance(m, int) and h + m > 0 else None)
            b = d.get("req_bytes_upload")
            mib.append(b / 1048576 if isinstance(b, int) else None)
            n, t = d.get("n_gen"), d.get("t_gen_ms")
            tps.append(1000.0 * n / t if isinstance(n, int) and isinstance(t, (int, float)) and t > 0 else None)
        return self.version, [("hit %", hit, "%", (0.0, 100.0)), ("MiB", mib, "MiB", None),
                              ("tok/s", tps, "", None)]

    def resident(self) -> tuple:
        """(version, share matrix (layers x experts: layer hit % where resident, NaN elsewhere),
        glyph matrix, header, empty message)."""
        with self.state.lock:
            run = self.run()
            if run is None:
                return self.version, None, None, "", "no records yet"
            res = run.resident()
            lh = run.layer_hits()
            src = "exit" if run.exit else ("load" if run.load else None)
            n_layer = (run.load.data.get("model") or {}).get("n_layer") if run.load else None
        if not res:
            return self.version, None, None, "", "no layers in the load/exit record (no MoE cache?)"
        n_layer = max(int(n_layer or 0), max(res) + 1)
        n_expert = max((max(v) + 1 for v in res.values() if v), default=1)
        share = np.full((n_layer, n_expert), np.nan)
        glyph = np.full((n_layer, n_expert), NO_DATA_GLYPH, dtype="<U1")
        for il, experts in res.items():
            h, _hp, m = lh.get(il, (0, 0, 0))
            s = h / (h + m) if h + m > 0 else np.nan
            for e in experts:
                share[il, e] = s if s == s else 1.0
                glyph[il, e] = CELL_GLYPH
        hdr = f"from the {src} record; experts 0–{n_expert - 1} (highest resident id); colour = layer hit %"
        return self.version, share, glyph, hdr, ""


class ResidentMap(GridView):
    """Layer x expert residency of the selected run (see module doc)."""

    DEFAULT_CSS = "ResidentMap { height: 1fr; }"

    def __init__(self, view: AuditView, **kw) -> None:
        super().__init__(None, None, **kw)
        self.view = view

    def _frame(self) -> list[Strip]:
        width, height = self.scrollable_content_region.size
        key = (self.view.version, width, height, self.fold)
        if key != self._key:
            self._key = key
            self._lines = self.build(width, height)
            if self._lines:
                self._lines[0] = self._lines[0].crop(0, width)
            vw = max((ln.cell_length for ln in self._lines), default=0)
            self.virtual_size = Size(vw, len(self._lines))
        return self._lines

    def build(self, width: int, height: int) -> list[Strip]:
        _v, share, glyph, hdr, empty = self.view.resident()
        title = [Segment("resident experts ", TITLE), *legend_segments(HIT_STYLES, "0%", "100%"),
                 Segment(f"  {CELL_GLYPH} resident  {NO_DATA_GLYPH} not", DIM)]
        lines = [Strip(title)]
        if share is None:
            lines.append(Strip([Segment("  " + empty, DIM)]))
            return lines
        n_layer, n_expert = share.shape
        cols = max(1, width - GUTTER)
        fe = -(-n_expert // cols) if self.fold and n_expert > cols else 1
        fl = self.layer_fold(n_layer, height - HEADER, self.fold)
        sh = fold_rows(fold_rows(share.T, fe).T, fl)
        res = fold_rows(fold_rows((glyph == CELL_GLYPH).astype(np.int64).T, fe, "sum").T, fl, "sum")
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "│", DIM),
                            Segment(hdr + (f", {fe} experts/cell" if fe > 1 else "") +
                                    (f", {fl} layers/row" if fl > 1 else ""), DIM)]))
        bins = hit_bin(sh)
        for i in range(sh.shape[0]):
            g = np.where(res[i] > 0, CELL_GLYPH, NO_DATA_GLYPH)
            lines.append(Strip(_row_segments(self.layer_label(i, fl, n_layer), bins[i], g, HIT_STYLES)))
        return lines


def run_panel(view: AuditView) -> Table:
    t = Table.grid(padding=(0, 1))
    t.add_column(style="#abb2bf", no_wrap=True)
    t.add_column()
    with view.state.lock:
        run = view.run()
        n_runs = len(view.state.runs.runs)
        if run is None:
            t.add_row("run", Text("no records yet", style="#7f848e"))
            return t
        load = run.load.data if run.load else {}
        model = load.get("model") if isinstance(load.get("model"), dict) else {}
        cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
        prof = load.get("profile")
        c = run.counters()
        lh = run.layer_hits()
        exact = check_exact_sum(run) if run.exit is not None and run.ready is not None else None
        perf = run.exit.data.get("perf") if run.exit else None
        idx = runs_index(view)
    state = "exited" if run.exit else ("ready" if run.ready else "loading")

    def sec(name):
        t.add_row(Text(name, style="bold #e5c07b"), "")

    def row(label, value):
        t.add_row(label, Text(str(value), style="#7f848e" if value == "missing" else ""))

    sec(f"run {idx + 1}/{n_runs}")
    row("pid", run.pid)
    row("state", state)
    row("model", model.get("name") or model.get("path") or "missing")
    row("layers", model.get("n_layer", "missing"))
    row("cache slots", cache.get("slots", "missing"))
    row("prefilled", cache.get("prefilled", "missing"))
    row("cache", fmt(cache["bytes"] / 1048576, 1, "MiB") if isinstance(cache.get("bytes"), int) else "missing")
    if isinstance(prof, dict):
        row("profile", prof.get("error") or f"{prof.get('path')} ({prof.get('bytes')} B)")
    else:
        row("profile", "none")
    row("load", fmt(load.get("load_ms"), 0, "ms") if load else "missing")
    sec("counters since load")
    h, m = c.get("hits"), c.get("misses")
    row("hit %", fmt(100.0 * h / (h + m), 1, "%") if h is not None and m is not None and h + m > 0 else "missing")
    for k in ("hits", "hits_profile", "misses", "swaps"):
        row(k.replace("_", " "), fmt(c.get(k), 0))
    row("read", fmt(c["bytes_upload"] / 1048576, 1, "MiB") if c.get("bytes_upload") is not None else "missing")
    row("requests", len(run.requests))
    if perf:
        row("gen tok/s", fmt(perf.get("gen_tps"), 1))
        row("prompt tok/s", fmt(perf.get("prompt_tps"), 1))
    if exact is not None:
        t.add_row("exact sum", Text("holds" if not exact else "; ".join(exact[:2]),
                                    style="#98c379" if not exact else "#e06c75"))
    if lh:
        sec("layer hit % (" + ("exit" if run.exit else "load") + ")")
        for il, (a, _p, b) in sorted(lh.items()):
            row(f"L{il}", fmt(100.0 * a / (a + b), 1, "%") if a + b else "no lookups")
    return t


def runs_index(view: AuditView) -> int:
    n = len(view.state.runs.runs)
    i = view.selected if -n <= view.selected < n else -1
    return i % n if n else 0


class AuditAttachApp(App):
    """The audit attach app over a tail (injected; ``start_tail`` starts its thread on mount)."""

    CSS = CSS
    TITLE = "bmoe-top attach"
    BINDINGS = [
        Binding("n", "run(1)", "next run"),
        Binding("N,shift+n", "run(-1)", "previous run"),
        Binding("f", "toggle_fold", "fold"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, tail: AuditTail, fps: float = 10.0, start_tail: bool = True) -> None:
        super().__init__()
        self.tail = tail
        self.state = tail.state
        self.view = AuditView(self.state)
        self.fps = fps
        self.start_tail = start_tail
        self._drawn = None
        self._rows = 0
        self._rows_key = None

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="status")
        with Horizontal(id="body"):
            with VerticalScroll(id="side"):
                yield Static(id="run-panel")
            with TabbedContent(id="tabs", initial="requests-tab"):
                with TabPane("Requests", id="requests-tab"):
                    with Vertical():
                        yield TrendRows(self.view.trends, id="audit-trends")
                        yield DataTable(id="requests", zebra_stripes=True, cursor_type="row")
                with TabPane("Resident", id="resident-tab"):
                    yield ResidentMap(self.view, id="resident-map")
        yield Footer()

    def on_mount(self) -> None:
        # keep references: query_one searches the active screen (another one under a modal)
        self._title = self.query_one("#title", Static)
        self._status = self.query_one("#status", Static)
        self._panel = self.query_one("#run-panel", Static)
        self._table = table = self.query_one("#requests", DataTable)
        self._charts = [*self.query(TrendRows), *self.query(ResidentMap)]
        table.add_columns(*REQUEST_COLUMNS)
        if self.start_tail and not self.tail.is_alive():
            self.tail.start()
        self.set_interval(1.0 / max(1.0, self.fps), self.refresh_views)
        self.refresh_views(force=True)

    def on_unmount(self) -> None:
        self.tail.stop()

    def refresh_views(self, force: bool = False) -> None:
        if not hasattr(self, "_title") or not self._title.is_attached:
            return  # before mount / during teardown
        key = self.view.version
        if key == self._drawn and not force:
            return
        self._drawn = key
        s = self.state
        with s.lock:
            status, detail = s.status, s.detail
            n_rec, n_bad, rot, trunc = s.runs.n_records, s.n_bad, s.n_rotations, s.n_truncations
            pids = s.runs.pids()
            last_bad = s.bad[-1] if s.bad else None
        self._title.update(
            Text(f"bmoe-top  attach --audit {s.path}  ", style="bold")
            + Text(f"records {n_rec}  pids {', '.join(map(str, pids)) or '—'}", style="#abb2bf"))
        if status == "ok" and n_rec == 0 and n_bad:
            st = Text("⚠ no audit record in this file yet (not an audit log?)", style=STATUS_STYLE["malformed"])
        else:
            st = Text("● following" if status == "ok" else ("… waiting for the file" if status == "waiting"
                                                            else "✖ error"), style=STATUS_STYLE.get(status, "bold"))
        if detail:
            st.append(f"  {detail}", style="#abb2bf")
        if n_bad:
            st.append(f"  {n_bad} corrupt line{'s' if n_bad > 1 else ''} skipped", style="#d19a66")
            if last_bad:
                st.append(f" (last: line {last_bad[1]}: {last_bad[2][:60]})", style="#7f848e")
        if rot or trunc:
            st.append(f"  rotated {rot}×, truncated {trunc}×", style="#7f848e")
        self._status.update(st)
        self._panel.update(run_panel(self.view))
        self._fill_requests()
        for w in self._charts:
            w.refresh()

    def _fill_requests(self) -> None:
        table = self._table
        with self.state.lock:
            run = self.view.run()
            reqs = list(run.requests) if run else []
            pid = run.pid if run else None
        key = (id(run), pid)
        if key != self._rows_key:
            table.clear()
            self._rows_key, self._rows = key, 0
        for r in reqs[self._rows:]:
            d = r.data
            h, m, hp, b = d.get("req_hits"), d.get("req_misses"), d.get("req_hits_profile"), d.get("req_bytes_upload")
            n, tg = d.get("n_gen"), d.get("t_gen_ms")
            table.add_row(
                str(r.pid), str(d.get("task", "")), r.time[11:23] if len(r.time) >= 23 else r.time,
                str(d.get("n_prompt", "missing")), str(n if n is not None else "missing"),
                fmt(1000.0 * n / tg, 1) if isinstance(n, int) and isinstance(tg, (int, float)) and tg > 0 else "missing",
                fmt(d.get("t_prompt_ms"), 1), fmt(tg, 1),
                fmt(100.0 * h / (h + m), 1) if isinstance(h, int) and isinstance(m, int) and h + m else "missing",
                fmt(h, 0), fmt(m, 0), fmt(hp, 0),
                fmt(b / 1048576, 2) if isinstance(b, int) else "missing",
            )
        self._rows = len(reqs)

    def action_run(self, step: int) -> None:
        n = len(self.state.runs.runs)
        if n:
            self.view.selected = (runs_index(self.view) + step) % n
        self.refresh_views(force=True)

    def action_toggle_fold(self) -> None:
        for w in self._charts:
            if isinstance(w, ResidentMap):
                w.fold = not w.fold


def run_attach(args) -> int:
    """``bmoe-top attach --audit FILE``. Returns the exit status."""
    tail = AuditTail(args.audit, poll_s=0.2)
    app = AuditAttachApp(tail, fps=float(getattr(args, "fps", 10.0) or 10.0))
    try:
        app.run()
    finally:
        tail.stop()
        tail.join(2)
    return 0
