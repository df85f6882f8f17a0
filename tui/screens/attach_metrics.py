"""``bmoe-top attach --metrics URL``: a ``/metrics`` endpoint (bmoe-run serve or a patched
llama-server) live, on the shared views.

The :class:`~bmoe_top.tui.sources.metrics_poll.MetricsPoller` is bound to the run model with
:func:`bmoe_top.tui.feed.bind.bind` (one row per scrape interval), so the breakdown (ms per
token, mean over each interval), the trends (tok/s, cumulative hit %, MiB per token), the layer x
interval hit heatmap and the run panel (totals since the server started) are the shared widgets.
The attach adds a status line (ok / connecting / unreachable / unauthorized / HTTP error / malformed / error,
with the reason; when the server goes away the last picture stays under the banner) and a panel
with the newest interval's rates, the counters since start and the per-token times; ``r`` scrapes
now. A value the server does not export reads "not exported" / "missing", never 0.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import BindingType

from bmoe_top.parsers.limits import MAX_METRICS_BODY_MB
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.present.metrics import STATUS_WORDS, metrics_document, metrics_panel_rows, status_parts
from bmoe_top.tui.screens.attach import AttachScreen
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.keymap import Key, bindings, footer_first, merged

__all__ = ["MetricsAttachOptions", "MetricsAttachScreen", "STATUS_WORDS", "run_metrics_attach"]

#: Styles of the status line's parts (``bmoe_top.tui.present.metrics.status_parts``).

class MetricsAttachScreen(AttachScreen):
    """The shared views over a poller's run model (the poller is given: tests aim it at any
    server). ``start_poller``: start its thread on mount (tests may drive ``scrape_once``)."""

    KEYS: ClassVar[tuple[Key, ...]] = merged((
        Key("r", "scrape_now", "scrape the metrics now", footer="scrape now", title="Scrape now"),
    ), RunScreen.KEYS)
    BINDINGS: ClassVar[list[BindingType]] = bindings(footer_first(KEYS, 1))

    def __init__(self, poller: MetricsPoller, fps: float = 10.0, start_poller: bool = True,
                 run: RunModel | None = None) -> None:
        self.binding = bind(poller, run if run is not None else RunModel(LIVE))
        self.poller = poller
        self.start_poller = start_poller
        super().__init__(self.binding.run, title=f"attach {poller.url}", fps=fps)

    def start_source(self) -> None:
        if self.start_poller and not self.poller.is_alive():
            self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    def attach_key(self) -> Hashable:
        return (self.model.version, int(time.time()))

    def status_text(self) -> Text:
        look = look_of(self)
        part_style = {"detail": look.label, "alert": look.alert, "dim": look.dim, "warn": look.warn}
        t = Text()
        doc = metrics_document(self.model)
        for text, kind in status_parts(doc):
            t.append(text, style=look.status_style(str(doc["status"])) if kind == "status" else part_style[kind])
        return t

    def panel_rows(self) -> Sequence[tuple[str, str, str]]:
        return metrics_panel_rows(metrics_document(self.model))

    def action_scrape_now(self) -> None:
        self.poller.scrape_now()
        self.refresh_views(force=True)


@dataclass(frozen=True, slots=True)
class MetricsAttachOptions:
    """``bmoe-top attach --metrics URL``'s options: the scrape ``interval_s`` and ``timeout_s``
    (None: twice the interval, between 2 and 10 s), the ``api_key``, whether to scrape ``/slots``,
    the body cap in MiB and the screen's ``fps``."""

    url: str
    interval_s: float = 1.0
    timeout_s: float | None = None
    api_key: str | None = None
    slots: bool = False
    max_body_mb: float = MAX_METRICS_BODY_MB
    fps: float = 10.0


def run_metrics_attach(opts: MetricsAttachOptions) -> int:
    """``bmoe-top attach --metrics URL [--interval S] [--timeout S] [--slots] [--api-key KEY]``. Returns
    the exit status."""
    interval = opts.interval_s
    timeout = opts.timeout_s if opts.timeout_s else max(2.0, min(10.0, 2 * interval))
    poller = MetricsPoller(opts.url, interval=interval, timeout=timeout, api_key=opts.api_key,
                           slots=opts.slots, max_body_mb=opts.max_body_mb)
    app = BmoeTopApp(MetricsAttachScreen(poller, fps=opts.fps))
    try:
        app.run()
    finally:
        poller.stop()
        if poller.is_alive():
            poller.join(timeout + 1)
    return app.return_code or 0
