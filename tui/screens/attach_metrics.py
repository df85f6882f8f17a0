"""``bmoe-top attach --metrics URL``: watch a ``/metrics`` endpoint (bmoe-run serve or a patched
llama-server) live.

The :class:`~bmoe_top.tui.sources.metrics_poll.MetricsPoller` thread scrapes into a
:class:`~bmoe_top.tui.sources.metrics_poll.MetricsState`; the app polls ``state.version`` on a
timer (at most ``fps`` repaints a second) and shows: a status line (ok / unreachable /
unauthorized / malformed, each its own colour and words, with the reason; when the server goes
away the last picture stays under the banner), the rates of the newest interval and the totals,
the per-token time breakdown when the server exports the time sums, trends over the intervals
(tok/s, hit %, MiB/s read), and per-layer hit % over time as a layer x interval heatmap (the
replay screen's colour scale and fold rules). A value the server does not export reads
"not exported", never 0.

:func:`run_attach(args)` is the entry ``bmoe-top attach --metrics`` calls.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Static

from bmoe_top.parsers.prom import TIME_KEYS
from bmoe_top.tui.sources.metrics_poll import MetricsPoller, MetricsState
from bmoe_top.tui.widgets.grids import GUTTER, HEADER, GridView, _row_segments, fold_rows
from bmoe_top.tui.widgets.palette import (
    DIM, EIGHTHS, HIT_STYLES, LABEL, NO_DATA_GLYPH, NO_DATA_STYLE, TITLE, TREND_STYLE, fmt, hit_bin,
    legend_segments,
)

__all__ = ["MetricsAttachApp", "MatrixHeatmap", "TrendRows", "run_attach", "STATUS_STYLE"]

STATUS_STYLE = {
    "ok": "bold #98c379", "connecting": "bold #e5c07b", "waiting": "bold #e5c07b",
    "unreachable": "bold #e06c75", "unauthorized": "bold #e06c75", "malformed": "bold #d19a66",
    "error": "bold #e06c75",
}
STATUS_WORDS = {
    "ok": "● connected", "connecting": "… connecting", "unreachable": "✖ unreachable",
    "unauthorized": "✖ unauthorized", "malformed": "⚠ malformed answer", "error": "✖ cannot poll",
}

CSS = """
Screen { layout: vertical; }
#title { height: 1; background: $boost; padding: 0 1; }
#status { height: auto; max-height: 3; padding: 0 1; }
#body { height: 1fr; }
#side { width: 34%; min-width: 32; max-width: 52; border-right: solid $primary-darken-2; }
#main { width: 1fr; }
TrendRows { height: 4; }
MatrixHeatmap { height: 1fr; }
"""


class MatrixHeatmap(GridView):
    """A titled rows x columns share grid (0..1, NaN = no data) from ``provider()``, drawn with
    the replay heatmap's palette and fold rules. ``provider`` returns
    ``(version, matrix or None, header text, empty-message)``; rows are layers."""

    DEFAULT_CSS = "MatrixHeatmap { height: 1fr; }"

    def __init__(self, provider: Callable[[], tuple], title: str, **kw) -> None:
        super().__init__(None, None, **kw)
        self.provider = provider
        self.title_text = title

    def _frame(self) -> list[Strip]:
        width, height = self.scrollable_content_region.size
        version = self.provider.__self__.version if hasattr(self.provider, "__self__") else None
        key = (version, width, height, self.fold)
        if key != self._key or version is None:
            self._key = key
            self._lines = self.build(width, height)
            if self._lines:
                self._lines[0] = self._lines[0].crop(0, width)
            vw = max((ln.cell_length for ln in self._lines), default=0)
            self.virtual_size = Size(vw, len(self._lines))
        return self._lines

    def build(self, width: int, height: int) -> list[Strip]:
        _v, m, header, empty = self.provider()
        title = [Segment(self.title_text + " ", TITLE), *legend_segments(HIT_STYLES, "0%", "100%"),
                 Segment(f"  {NO_DATA_GLYPH} no lookups / not exported", DIM)]
        lines = [Strip(title)]
        if m is None or m.size == 0:
            lines.append(Strip([Segment("  " + empty, DIM)]))
            return lines
        cols = max(1, width - GUTTER)
        m = m[:, -cols:]
        n_layer = m.shape[0]
        f = self.layer_fold(n_layer, height - HEADER, self.fold)
        folded = fold_rows(m, f)
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "│", DIM),
                            Segment(header + (f", {f} layers/row" if f > 1 else ""), DIM)]))
        bins = hit_bin(folded)
        for i in range(folded.shape[0]):
            lines.append(Strip(_row_segments(self.layer_label(i, f, n_layer), bins[i], None, HIT_STYLES)))
        return lines


class TrendRows(Widget):
    """One sparkline row per series from ``provider()`` -> ``(version, [(label, values, unit,
    (lo, hi) or None)])``; ``values`` is a list with ``None`` for no data (drawn ``·``); a series
    given as ``None`` reads "not exported"."""

    DEFAULT_CSS = "TrendRows { height: 4; width: 1fr; }"
    RIGHT = 16

    def __init__(self, provider: Callable[[], tuple], **kw) -> None:
        super().__init__(**kw)
        self.provider = provider
        self._key = None
        self._lines: list[Strip] = []

    def build(self, width: int, height: int) -> list[Strip]:
        _v, rows = self.provider()
        cols = max(1, width - GUTTER - self.RIGHT)
        out = []
        for label, values, unit, rng in rows[:height]:
            head = Segment(label[: GUTTER - 1].rjust(GUTTER - 1) + "│", LABEL)
            if values is None:
                out.append(Strip([head, Segment(" not exported by this server", DIM)]))
                continue
            v = np.array([np.nan if x is None else float(x) for x in values[-cols:]], dtype=float)
            fin = v[np.isfinite(v)]
            if not fin.size:
                out.append(Strip([head, Segment(" no data yet", DIM)]))
                continue
            lo, hi = rng if rng else (float(fin.min()), float(fin.max()))
            span = hi - lo if hi > lo else 1.0
            segs = [head]
            for x in v:
                if math.isfinite(x):
                    k = 1 + int(round(min(max((x - lo) / span, 0.0), 1.0) * 7))
                    segs.append(Segment(EIGHTHS[k], TREND_STYLE))
                else:
                    segs.append(Segment(NO_DATA_GLYPH, NO_DATA_STYLE))
            segs.append(Segment(" " * (cols - len(v))))
            last = v[-1]
            segs.append(Segment(f" {fmt(float(last) if math.isfinite(last) else None, 1, unit)}"[: self.RIGHT], LABEL))
            out.append(Strip(segs))
        return out

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        version = self.provider.__self__.version if hasattr(self.provider, "__self__") else None
        key = (version, width, height)
        if key != self._key or version is None:
            self._key = key
            self._lines = self.build(width, height)
        if y < len(self._lines):
            return self._lines[y].crop(0, width).extend_cell_length(width)
        return Strip.blank(width)


class MetricsView:
    """Reads a :class:`MetricsState` for the widgets (``version`` + providers)."""

    def __init__(self, state: MetricsState):
        self.state = state

    @property
    def version(self) -> int:
        return self.state.version

    def heatmap(self) -> tuple:
        st = self.state
        with st.lock:
            deltas = list(st.deltas)
            n_layer = st.last.layer_count() if st.last else 0
        if not n_layer:
            return self.version, None, "", "this server exports no per-layer series (llamacpp:moe_cache_layer_*)"
        if not deltas:
            return self.version, None, "", "per-layer hit % appears after the second scrape"
        m = np.full((n_layer, len(deltas)), np.nan)
        for j, d in enumerate(deltas):
            row = np.array(d.layer_hit_pct[:n_layer], dtype=float)  # None -> NaN
            m[: len(row), j] = row / 100.0
        span = deltas[-1].t1 - deltas[0].t0
        return self.version, m, f"{len(deltas)} intervals, {span:.0f} s, newest right", ""

    def trends(self) -> tuple:
        st = self.state
        with st.lock:
            deltas = list(st.deltas)
            last = st.last
        exp = (lambda k: last is not None and last.exported(k))
        rows = [
            ("tok/s", [d.tok_s for d in deltas] if exp("tokens_predicted") else None, "", None),
            ("hit %", [d.hit_pct for d in deltas] if exp("hits") else None, "%", (0.0, 100.0)),
            ("MiB/s", [d.read_mib_s for d in deltas] if exp("upload_bytes") else None, "MiB/s", None),
            ("ms/tok", [d.token_ms.get("wall") for d in deltas] if exp("wall_s") else None, "ms", None),
        ]
        return self.version, rows


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


class MetricsAttachApp(App):
    """The metrics attach app over a poller (injected: tests pass one aimed at any server).

    ``start_poller``: start the thread on mount (tests may drive ``scrape_once`` themselves)."""

    CSS = CSS
    TITLE = "bmoe-top attach"
    BINDINGS = [
        Binding("f", "toggle_fold", "fold"),
        Binding("r", "scrape_now", "scrape now"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, poller: MetricsPoller, fps: float = 10.0, start_poller: bool = True) -> None:
        super().__init__()
        self.poller = poller
        self.state = poller.state
        self.view = MetricsView(self.state)
        self.fps = fps
        self.start_poller = start_poller
        self._drawn = None

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="status")
        with Horizontal(id="body"):
            with VerticalScroll(id="side"):
                yield Static(id="side-panel")
            with Vertical(id="main"):
                yield TrendRows(self.view.trends, id="trends")
                yield MatrixHeatmap(self.view.heatmap, "layer × interval hit %", id="layer-heatmap")
        yield Footer()

    def on_mount(self) -> None:
        # keep references: query_one searches the active screen, which is another one while the
        # command palette or a modal is open
        self._title = self.query_one("#title", Static)
        self._status = self.query_one("#status", Static)
        self._side = self.query_one("#side-panel", Static)
        self._charts = [*self.query(TrendRows), *self.query(MatrixHeatmap)]
        if self.start_poller and not self.poller.is_alive():
            self.poller.start()
        self.set_interval(1.0 / max(1.0, self.fps), self.refresh_views)
        self.refresh_views(force=True)

    def on_unmount(self) -> None:
        self.poller.stop()

    def status_text(self, s: dict) -> Text:
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
        if s.get("restarts"):
            t.append(f"  restarts seen: {s['restarts']}", style="#d19a66")
        if s.get("proxy_note"):
            t.append(f"  proxy: {s['proxy_note']}", style="#7f848e")
        return t

    def refresh_views(self, force: bool = False) -> None:
        if not hasattr(self, "_title") or not self._title.is_attached:
            return  # before mount / during teardown
        key = (self.state.version, int(time.time()))
        if key == self._drawn and not force:
            return
        self._drawn = key
        s = self.state.summary()
        title = Text(f"bmoe-top  attach {s['url']}  ", style="bold")
        title.append(f"scrapes {s['scrapes_ok']} ok / {s['scrapes_failed']} failed", style="#abb2bf")
        if s.get("json_quoted"):
            title.append("  body JSON-quoted (decoded)", style="#d19a66")
        self._title.update(title)
        self._status.update(self.status_text(s))
        self._side.update(side_table(s))
        for w in self._charts:
            w.refresh()

    def action_toggle_fold(self) -> None:
        for w in self._charts:
            if isinstance(w, MatrixHeatmap):
                w.fold = not w.fold

    def action_scrape_now(self) -> None:
        if not self.poller.is_alive():
            self.poller.scrape_once()
        self.refresh_views(force=True)


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
