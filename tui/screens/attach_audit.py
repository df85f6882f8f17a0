"""``bmoe-top attach --audit FILE``: an audit log (docs/metrics.md "Audit log") followed live,
on the shared views.

A :class:`~bmoe_top.tui.sources.tail.FileTail` follows the file like ``tail -F`` and is bound to
the run model with :func:`bmoe_top.tui.feed.bind.bind` (the audit feed, the code path of
``bmoe-top replay a.jsonl``): one row per ``request`` record, so the breakdown (ms per generated
token of each request), the trends, the layer x request heatmap (per-layer hits/misses of each
run, from its ``exit`` record, on its last request), the expert map (resident experts of the
newest ``load``/``exit`` record) and the run panel are the shared widgets.

The attach adds a status line (file, records, pids, corrupt lines, rotations/truncations), an
audit-run panel for the selected run (``n``/``N`` cycle through runs; newest first: pid, state,
cache, counters since load, the exact-sum check once the run exited, per-layer hit %) and a
Requests tab (every request, all pids; ``ctrl+r`` shows it; ``s``/``S`` or a header click sort it).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import TabPane

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import LIVE, RunModel, Status
from bmoe_top.tui.model.health import AuditIndex, TailHealth
from bmoe_top.tui.present.audit import audit_run_rows, requests_table, runs_index
from bmoe_top.tui.screens.attach import AttachScreen
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.sources.tail import FileTail
from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.keymap import Key, bindings, footer_first, merged
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.tables import TABLE_KEYS, SortTable

__all__ = ["AuditAttachScreen", "run_audit_attach"]


class AuditAttachScreen(AttachScreen):
    """The shared views over a followed audit file's run model (the tail is given; ``start_tail``
    starts its thread on mount)."""

    KEYS: ClassVar[tuple[Key, ...]] = merged((
        Key("full_stop", "select_run(1)", "the next run of the audit log", footer="next run", title="Next run"),
        Key("comma", "select_run(-1)", "the previous run of the audit log", footer="previous run",
            title="Previous run"),
        Key("ctrl+r", "goto_tab('requests-tab')", "the Requests tab", scope="anywhere", footer="requests",
            title="Tab: Requests"),
        *TABLE_KEYS,
    ), RunScreen.KEYS)
    BINDINGS: ClassVar[list[BindingType]] = bindings(footer_first(KEYS, 3))

    def __init__(self, tail: FileTail, fps: float = 10.0, start_tail: bool = True,
                 run: RunModel | None = None) -> None:
        self.binding = bind(tail, run if run is not None else RunModel(LIVE))
        self.tail = tail
        self.feed = self.binding.feed
        self.start_tail = start_tail
        self.selected = -1  # index into the audit runs; -1 = newest
        self._rows = 0
        self._requests: list[dict[str, object]] = []  # each request turn's end record, in order
        super().__init__(self.binding.run, title=f"attach --audit {tail.path}", fps=fps)

    def compose_tabs(self) -> ComposeResult:
        yield TabPane("Requests", SortTable(requests_table([]), id="requests"), id="requests-tab")

    def start_source(self) -> None:
        if self.start_tail and not self.tail.is_alive():
            self.tail.start()

    def on_unmount(self) -> None:
        self.tail.stop()

    def attach_key(self) -> Hashable:
        return (self.model.version, self.selected)

    def status_text(self) -> Text:
        run = self.model
        with run.lock:
            status, detail = run.status, run.status_detail
            idx = run.audit_index or AuditIndex()
            tail = run.tail_health or TailHealth()
        look = look_of(self)
        if status == Status.MALFORMED:
            st = Text("⚠ no audit record in this file yet (not an audit log?)", style=look.status_style("malformed"))
        else:
            words = {Status.OK: "● following", Status.WAITING: "… waiting for the file"}.get(status, "✖ error")
            st = Text(words, style=look.status_style(str(status)))
        if detail:
            st.append_text(safe_text(f"  {detail}", look.label, multiline=False))
        st.append(f"  records {idx.records}  pids {', '.join(map(str, idx.pids)) or '—'}", style=look.label)
        if idx.bad_lines:
            n_bad = idx.bad_lines
            st.append(f"  {n_bad} corrupt line{'s' if n_bad > 1 else ''} skipped", style=look.warn)
            if idx.bad:
                last_bad = idx.bad[-1]
                st.append_text(safe_text(f" (last: line {last_bad[1]}: {last_bad[2][:60]})", look.dim, multiline=False))
        if tail.rotations or tail.truncations:
            st.append(f"  rotated {tail.rotations}×, truncated {tail.truncations}×", style=look.dim)
        return st

    def panel_rows(self) -> Sequence[tuple[str, str, str]]:
        return audit_run_rows(self.model, self.selected)

    def update_attach(self, force: bool = False) -> None:
        super().update_attach(force)
        self._fill_requests()

    def _fill_requests(self) -> None:
        """The Requests table with every request turn so far (a finished request never changes;
        the table keeps its sort, kept in the settings as ``[sort.requests]``, and its filter)."""
        tables = self.query("#requests")
        if not tables:
            return
        run = self.model
        with run.lock:
            new = [dict(t.done) for t in run.turns if t.index >= self._rows and t.done is not None]
            self._rows = run.turn_count
        if new:
            self._requests.extend(new)
            tables.first(SortTable).set_table(requests_table(self._requests))

    def action_select_run(self, step: int) -> None:
        idx = self.model.audit_index
        n = len(idx.runs) if idx is not None else 0
        if n:
            self.selected = (runs_index(n, self.selected) + step) % n
        self.update_attach(force=True)


def run_audit_attach(path: str, *, fps: float = 10.0) -> int:
    """``bmoe-top attach --audit FILE``: follow ``path`` at ``fps`` repaints a second. Returns the
    exit status."""
    tail = FileTail(path, poll_s=0.2)
    app = BmoeTopApp(AuditAttachScreen(tail, fps=fps))
    try:
        app.run()
    finally:
        tail.stop()
        if tail.is_alive():
            tail.join(2)
    return app.return_code or 0
