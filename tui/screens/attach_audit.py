"""``bmoe-top attach --audit FILE``: follow an audit log (moe-cache-reference.md "Audit log") live,
on the replay screen.

An :class:`~bmoe_top.tui.sources.audit_tail.AuditTail` thread follows the file like ``tail -F``
and feeds the one :class:`~bmoe_top.tui.run.RunModel` the replay screen's views render from
(through :class:`~bmoe_top.tui.sources.audit_tail.AuditIngest`, the same code path as
``bmoe-top replay a.jsonl``): one row per ``request`` record (``run.row_unit == "request"``), so
the breakdown (ms per generated token of each request), the trends (tok/s, hit % since load, MiB
per token), the layer x request heatmap (per-layer hits/misses of each run, from its ``exit``
record, on its last request), the expert map (resident experts of the newest ``load``/``exit``
record) and the run panel (the newest run's numbers) are the replay screen's own widgets.

What the attach adds (:class:`~bmoe_top.tui.screens.attach.AttachApp`): a status line (file,
records, pids, corrupt lines, rotations/truncations), an audit-run panel for the selected run
(``n``/``N`` cycle through runs; newest first selected: pid, state, cache, counters since load,
the exact-sum check once the run exited, per-layer hit %) and a Requests tab (a table of every
request, all pids, from the run model's turns; ``ctrl+r`` shows it).

:func:`run_attach(args)` is the entry ``bmoe-top attach --audit`` calls.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable, TabbedContent, TabPane

from bmoe_top.parsers.audit import check_exact_sum
from bmoe_top.tui.run import fmt
from bmoe_top.tui.screens.attach import STATUS_STYLE, AttachApp
from bmoe_top.tui.sources.audit_tail import AuditState, AuditTail, audit_status

__all__ = ["AuditAttachApp", "run_attach", "run_panel", "REQUEST_COLUMNS"]

REQUEST_COLUMNS = ("pid", "task", "time", "n_prompt", "n_gen", "gen tok/s", "prompt ms", "gen ms",
                   "hit %", "hits", "misses", "from profile", "read MiB")


def run_panel(state: AuditState, selected: int) -> Table:
    """The selected audit run (``selected`` indexes the runs; -1 = newest): pid, state, model,
    cache, counters since load, the exact-sum check once it exited, per-layer hit %."""
    t = Table.grid(padding=(0, 1))
    t.add_column(style="#abb2bf", no_wrap=True)
    t.add_column(no_wrap=True, overflow="ellipsis")
    with state.lock:
        runs = state.runs.runs
        n_runs = len(runs)
        idx = runs_index(n_runs, selected)
        run = runs[idx] if runs else None
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
    run_state = "exited" if run.exit else ("ready" if run.ready else "loading")

    def sec(name):
        t.add_row(Text(name, style="bold #e5c07b"), "")

    def row(label, value):
        t.add_row(label, Text(str(value), style="#7f848e" if value == "missing" else ""))

    sec(f"run {idx + 1}/{n_runs}")
    row("pid", run.pid)
    row("state", run_state)
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


def runs_index(n_runs: int, selected: int) -> int:
    i = selected if -n_runs <= selected < n_runs else -1
    return i % n_runs if n_runs else 0


def request_row(done: dict) -> tuple[str, ...]:
    """One Requests-table row from a request turn's ``done`` (see ``AuditIngest``)."""
    h, m = done.get("req_hits"), done.get("req_misses")
    hp, b = done.get("req_hits_profile"), done.get("req_bytes_upload")
    n = done.get("n_gen")
    tm = str(done.get("time") or "")
    return (
        str(done.get("pid")), str(done.get("task", "")), tm[11:23] if len(tm) >= 23 else tm,
        str(done.get("n_prompt", "missing")), str(n if n is not None else "missing"),
        fmt(done.get("tok_s"), 1), fmt(done.get("t_prompt_ms"), 1), fmt(done.get("t_gen_ms"), 1),
        fmt(done.get("cache_hit_pct"), 1), fmt(h, 0), fmt(m, 0), fmt(hp, 0),
        fmt(b / 1048576, 2) if isinstance(b, int) else "missing",
    )


class AuditAttachApp(AttachApp):
    """The replay screen over an audit tail's run model (the tail is injected;
    ``start_tail`` starts its thread on mount)."""

    BINDINGS = AttachApp.BINDINGS + [
        Binding("n", "select_run(1)", "next run"),
        Binding("N,shift+n", "select_run(-1)", "previous run"),
        Binding("ctrl+r", "tab('requests-tab')", "requests"),
    ]

    def __init__(self, tail: AuditTail, fps: float = 10.0, start_tail: bool = True) -> None:
        self.tail = tail
        self.state = tail.state
        self.start_tail = start_tail
        self.selected = -1  # index into the audit runs; -1 = newest
        self._rows = 0
        self._table: DataTable | None = None
        super().__init__(tail.state.run, title=f"attach --audit {tail.path}", fps=fps)

    async def mount_extra(self) -> None:
        self._table = DataTable(id="requests", zebra_stripes=True, cursor_type="row")
        await self.query_one("#tabs", TabbedContent).add_pane(TabPane("Requests", self._table, id="requests-tab"))
        self._table.add_columns(*REQUEST_COLUMNS)

    def start_source(self) -> None:
        if self.start_tail and not self.tail.is_alive():
            self.tail.start()

    def on_unmount(self) -> None:
        self.tail.stop()

    def attach_key(self):
        return (self.state.version, self.selected)

    def status_text(self) -> Text:
        s = self.state
        status, detail = audit_status(s)
        with s.lock:
            n_rec, n_bad, rot, trunc = s.runs.n_records, s.n_bad, s.n_rotations, s.n_truncations
            pids = s.runs.pids()
            last_bad = s.bad[-1] if s.bad else None
        if status == "malformed":
            st = Text("⚠ no audit record in this file yet (not an audit log?)", style=STATUS_STYLE["malformed"])
        else:
            st = Text("● following" if status == "ok" else ("… waiting for the file" if status == "waiting"
                                                            else "✖ error"), style=STATUS_STYLE.get(status, "bold"))
        if detail:
            st.append(f"  {detail}", style="#abb2bf")
        st.append(f"  records {n_rec}  pids {', '.join(map(str, pids)) or '—'}", style="#abb2bf")
        if n_bad:
            st.append(f"  {n_bad} corrupt line{'s' if n_bad > 1 else ''} skipped", style="#d19a66")
            if last_bad:
                st.append(f" (last: line {last_bad[1]}: {last_bad[2][:60]})", style="#7f848e")
        if rot or trunc:
            st.append(f"  rotated {rot}×, truncated {trunc}×", style="#7f848e")
        return st

    def panel_renderable(self) -> Table:
        return run_panel(self.state, self.selected)

    def update_attach(self, force: bool = False) -> None:
        super().update_attach(force)
        self._fill_requests()

    def _fill_requests(self) -> None:
        """Append a row per new request turn (a finished request never changes)."""
        table = self._table
        if table is None or not table.is_attached:
            return
        run = self.model
        with run.lock:
            new = [dict(t.done) for t in run.turns[self._rows:] if t.done is not None]
            self._rows = len(run.turns)
        for d in new:
            table.add_row(*request_row(d))

    def action_select_run(self, step: int) -> None:
        n = len(self.state.runs.runs)
        if n:
            self.selected = (runs_index(n, self.selected) + step) % n
        self.update_attach(force=True)


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
