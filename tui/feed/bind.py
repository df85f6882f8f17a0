"""``bind(source, run)``: the one wiring of a source to a run model, for the screens and for every
headless ``--once`` path alike (docs/architecture.md "The data path").

:data:`BINDERS` maps each source class to the feed that reads it:

* a live session (child process, session socket, recording at its pace) -> :class:`LiveFeed`;
* a ``/metrics`` poller -> :class:`MetricsBinding` (scrape -> rows, state -> status);
* a followed file -> :class:`TailBinding` with the feed for its ``kind`` (:data:`TAIL_FEEDS`).

``bind`` connects the source's sinks and returns the binding (start the source afterwards).
A new source type (a Prometheus query client for the fleet) adds one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from bmoe_top.tui.feed.audit import AuditFeed
from bmoe_top.tui.feed.live import SINK_WHERE, LiveFeed
from bmoe_top.tui.feed.metrics import MetricsFeed, scrape_health
from bmoe_top.tui.model import LIVE, RunModel, Status
from bmoe_top.tui.model.health import TailHealth
from bmoe_top.tui.sources.events import (
    PartialLost,
    ProblemFound,
    Rotated,
    Scraped,
    ScrapeFailed,
    TailState,
    TailStateChanged,
    Truncated,
)
from bmoe_top.tui.sources.live import LiveBase
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.tail import FileTail

__all__ = ["BINDERS", "TAIL_FEEDS", "TAIL_STATUS", "Binding", "LiveFeed", "MetricsBinding", "TailBinding", "bind"]

#: A followed file's state -> the run's status.
TAIL_STATUS: dict[TailState, Status] = {
    TailState.WAITING: Status.WAITING,
    TailState.OK: Status.OK,
    TailState.ERROR: Status.ERROR,
}


class MetricsBinding:
    """A poller's events -> :class:`~bmoe_top.tui.feed.metrics.MetricsFeed`."""

    def __init__(self, poller: MetricsPoller, run: RunModel) -> None:
        self.poller = poller
        self.run = run
        self.feed = MetricsFeed(run, poller.url)
        self.events: dict[type, Callable[[Any], None]] = {
            Scraped: self.feed.scraped,
            ScrapeFailed: self.feed.failed,
            ProblemFound: self._problem,
        }
        self.publish()
        poller.connect(self.event)

    def event(self, ev: Any) -> None:
        with self.run.lock:  # the rows and the poller's state change together for a reader
            self.events[type(ev)](ev)
            self.publish()

    def publish(self) -> None:
        """The poller's state into the run model (``RunModel.scrape_health``)."""
        self.run.set_scrape_health(scrape_health(self.poller.state))

    def _problem(self, ev: ProblemFound) -> None:
        p = ev.problem
        self.run.add_problem("metrics", p.lineno, p.text, p.reason)
        self.run.add_log(f"bmoe-top: {p.reason}")


class TailBinding:
    """A followed file's lines -> its feed (:data:`TAIL_FEEDS` by the tail's ``kind``), its state ->
    the run's status (through the feed, which knows when a file holds no record at all)."""

    def __init__(self, tail: FileTail, run: RunModel) -> None:
        self.tail = tail
        self.run = run
        self.feed = TAIL_FEEDS[tail.kind](run, f"{tail.kind}: {tail.path}")
        self.events: dict[type, Callable[[Any], None]] = {
            TailStateChanged: self._state,
            PartialLost: self._partial,
            Rotated: self._changed,
            Truncated: self._changed,
            ProblemFound: self._problem,
        }
        tail.connect(self.lines, self.event)
        self._status()

    def lines(self, lines: list[bytes], first_lineno: int, generation: int) -> None:
        self.feed.feed_lines(lines, first_lineno, generation)
        self._status()

    def event(self, ev: Any) -> None:
        self.events[type(ev)](ev)
        self._status()

    def _status(self) -> None:
        """The run's status and the file's health (``RunModel.tail_health``) from the follower."""
        t = self.tail
        with t.lock:
            health = TailHealth(path=str(t.path), state=str(t.status), detail=t.detail, rotations=t.n_rotations,
                                truncations=t.n_truncations)
        with self.run.lock:
            self.run.set_status(*self.feed.status(TAIL_STATUS[t.status], health.detail))
            self.run.set_tail_health(health)

    def _state(self, ev: TailStateChanged) -> None:
        self._status()

    def _partial(self, ev: PartialLost) -> None:
        self.feed.lost_partial(ev.lineno, ev.partial, ev.why)

    def _changed(self, ev: Rotated | Truncated) -> None:
        what = "rotated" if isinstance(ev, Rotated) else "truncated"
        self.run.add_log(f"bmoe-top: {self.tail.path} was {what}; reading file {ev.generation} from its start")

    def _problem(self, ev: ProblemFound) -> None:
        p = ev.problem
        self.run.add_problem(self.tail.kind, p.lineno, p.text, p.reason)
        if ev.where in SINK_WHERE:
            self.run.add_log(f"bmoe-top: {p.reason}")


#: A followed file's ``kind`` -> the feed for its lines.
TAIL_FEEDS: dict[str, Callable[[RunModel, str], AuditFeed]] = {
    "audit": AuditFeed,
}

Binding = LiveFeed | MetricsBinding | TailBinding

#: Source class -> its binding.
BINDERS: dict[type, Callable[[Any, RunModel], Binding]] = {
    LiveBase: LiveFeed,
    MetricsPoller: MetricsBinding,
    FileTail: TailBinding,
}


@overload
def bind(source: LiveBase, run: RunModel | None = None) -> LiveFeed: ...
@overload
def bind(source: MetricsPoller, run: RunModel | None = None) -> MetricsBinding: ...
@overload
def bind(source: FileTail, run: RunModel | None = None) -> TailBinding: ...


def bind(source: Any, run: RunModel | None = None) -> Binding:
    """Wire ``source`` to ``run`` (a new bounded live model when None: see
    :data:`~bmoe_top.tui.model.LIVE`) and return the binding; ``binding.run`` is the model.
    Raises ``TypeError`` for a source no binder knows."""
    model = run if run is not None else RunModel(LIVE)
    for klass in type(source).__mro__:
        binder = BINDERS.get(klass)
        if binder is not None:
            return binder(source, model)
    raise TypeError(f"no binder for {type(source).__name__}")

