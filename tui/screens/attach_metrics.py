"""``bmoe-top attach --metrics URL``: watch a ``/metrics`` endpoint (bmoe-run serve or a patched
llama-server) live, on the replay screen.

The :class:`~bmoe_top.tui.sources.metrics_poll.MetricsPoller` thread scrapes into the one
:class:`~bmoe_top.tui.run.RunModel` the replay screen's views render from (one row per scrape
interval: ``run.row_unit == "interval"``), so the breakdown (ms per token, mean over each
interval), the trends (tok/s, cumulative hit %, MiB per token), the layer x interval hit heatmap
and the run panel (totals since the server started) are the replay screen's own widgets. What
the attach adds (:class:`~bmoe_top.tui.screens.attach.AttachApp`): a status line (ok /
connecting / unreachable / unauthorized / malformed / error, each its own colour and words, with
the reason; when the server goes away the last picture stays under the banner), and a panel with
the newest interval's rates, the counters since start and the per-token times; ``r`` scrapes
now. A value the server does not export reads "not exported" / "missing", never 0.

:func:`run_attach(args)` is the entry ``bmoe-top attach --metrics`` calls.
"""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text
from textual.binding import Binding

from bmoe_top.parsers.prom import TIME_KEYS
from bmoe_top.tui.run import fmt
from bmoe_top.tui.screens.attach import STATUS_STYLE, STATUS_WORDS, AttachApp
from bmoe_top.tui.sources.metrics_poll import MetricsPoller

__all__ = ["MetricsAttachApp", "run_attach", "side_table"]


def _val(summary_totals: dict | None, key: str, not_exported: set[str], name: str, digits=1, unit="", scale=1.0):
    if summary_totals is None:
        return "missing"
    if name in not_exported:
        return "not exported"
    v = summary_totals.get(key)
    return fmt(None if v is None else v * scale, digits, unit)


def side_table(s: dict) -> Table:
    """The side panel: rates of the newest interval, totals, per-token breakdown."""
    from bmoe_top.parsers.prom import SERIES_BY_KEY

    t = Table.grid(padding=(0, 1))
    t.add_column(style="#abb2bf", no_wrap=True)
    t.add_column(no_wrap=True)
    ne = set(s.get("not_exported") or [])
    tot = s.get("totals")
    r = s.get("rates")

    def sec(name):
        t.add_row(Text(name, style="bold #e5c07b"), "")

    def row(label, value):
        t.add_row(label, Text(value, style="#7f848e" if value in ("missing", "not exported") else ""))

    def rate(key, series_key, digits=1, unit=""):
        if tot is not None and SERIES_BY_KEY[series_key].name in ne:
            return "not exported"
        if r is None:
            return "missing"
        if r.get("reset"):
            return "restart: new baseline"
        if r.get(key) is None and key == "hit_pct" and tot is not None:
            return "idle (no lookups)"
        return fmt(r.get(key), digits, unit)

    sec("interval")
    row("length", fmt(r["interval_s"], 1, "s") if r else "missing")
    row("gen tok/s", rate("tok_s", "tokens_predicted"))
    row("prompt tok/s", rate("prompt_tok_s", "prompt_tokens"))
    row("hit %", rate("hit_pct", "hits", 1, "%"))
    row("read", rate("read_mib_s", "upload_bytes", 2, "MiB/s"))
    row("swaps", rate("swaps", "swaps", 0))
    sec("since start")
    row("hit %", fmt(tot.get("hit_pct"), 1, "%") if tot else "missing")
    for key, label, digits, unit, scale in (
        ("tokens_predicted", "generated", 0, "tok", 1), ("prompt_tokens", "prompt", 0, "tok", 1),
        ("hits", "hits", 0, "", 1), ("hits_profile", "from profile", 0, "", 1), ("misses", "misses", 0, "", 1),
        ("upload_bytes", "read", 1, "MiB", 1 / 1048576), ("swaps", "swaps", 0, "", 1),
        ("slots", "slots", 0, "", 1), ("prefilled", "prefilled", 0, "", 1),
        ("cache_bytes", "cache", 1, "MiB", 1 / 1048576),
        ("requests_processing", "processing", 0, "", 1), ("requests_deferred", "queued", 0, "", 1),
    ):
        row(label, _val(tot, key, ne, SERIES_BY_KEY[key].name, digits, unit, scale))
    sec("ms per token")
    tm = (r or {}).get("token_ms") or {}
    for k in TIME_KEYS:
        name = SERIES_BY_KEY[k + "_s"].name
        if tot is not None and name in ne:
            row(k, "not exported")
        elif r is None or r.get("reset"):
            row(k, "missing")
        else:
            row(k, fmt(tm.get(k), 2, "ms"))
    return t


class MetricsAttachApp(AttachApp):
    """The replay screen over a metrics poller's run model (the poller is injected: tests
    pass one aimed at any server). ``start_poller``: start the thread on mount (tests may
    drive ``scrape_once`` themselves)."""

    BINDINGS = AttachApp.BINDINGS + [Binding("r", "scrape_now", "scrape now")]

    def __init__(self, poller: MetricsPoller, fps: float = 10.0, start_poller: bool = True) -> None:
        self.poller = poller
        self.state = poller.state
        self.start_poller = start_poller
        super().__init__(poller.state.run, title=f"attach {poller.url}", fps=fps)

    def start_source(self) -> None:
        if self.start_poller and not self.poller.is_alive():
            self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    def attach_key(self):
        return (self.state.version, int(time.time()))

    def status_text(self) -> Text:
        s = self.state.summary()
        st = s["status"]
        t = Text()
        t.append(STATUS_WORDS.get(st, st), style=STATUS_STYLE.get(st, "bold"))
        if s.get("detail"):
            t.append(f"  {s['detail']}", style="#abb2bf")
        last = self.state.last_ok_wall
        if st != "ok" and last is not None:
            t.append(f"  (showing the last good scrape, {time.time() - last:.0f} s old)", style="#e06c75")
        if st == "unreachable" and self.state.next_retry_s:
            t.append(f"  retry in {self.state.next_retry_s:.0f} s", style="#7f848e")
        t.append(f"  scrapes {s['scrapes_ok']} ok / {s['scrapes_failed']} failed", style="#7f848e")
        if s.get("json_quoted"):
            t.append("  body JSON-quoted (decoded)", style="#d19a66")
        if s.get("restarts"):
            t.append(f"  restarts seen: {s['restarts']}", style="#d19a66")
        if s.get("proxy_note"):
            t.append(f"  proxy: {s['proxy_note']}", style="#7f848e")
        return t

    def panel_renderable(self) -> Table:
        return side_table(self.state.summary())

    def action_scrape_now(self) -> None:
        if not self.poller.is_alive():
            self.poller.scrape_once()
        self.refresh_views(force=True)
        self.update_attach(force=True)


def run_attach(args) -> int:
    """``bmoe-top attach --metrics URL [--interval S] [--api-key KEY]``. Returns the exit status."""
    interval = float(getattr(args, "interval", None) or 1.0)
    timeout = float(getattr(args, "timeout", None) or 0) or max(2.0, min(10.0, 2 * interval))
    timeout = min(timeout, 10.0)
    poller = MetricsPoller(args.metrics, interval=interval, timeout=timeout, api_key=getattr(args, "api_key", None))
    app = MetricsAttachApp(poller, fps=float(getattr(args, "fps", 10.0) or 10.0))
    try:
        app.run()
    finally:
        poller.stop()
        poller.join(timeout + 1)
    return 0
