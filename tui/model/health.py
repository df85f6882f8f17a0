"""How a run's source is doing, as frozen snapshots the feeds publish into the run model
(``RunModel.set_scrape_health`` / ``set_tail_health`` / ``set_audit_index`` /
``set_session_health``) and the views read from it alone (docs/architecture.md "The run model").

A snapshot is built by the feed from what its source said (an event, the source's own
bookkeeping read under its lock) and never changes afterwards: a view reads one consistent
picture without touching the source's lock. Times that age (how stale the last scrape is, the
retry countdown) are kept as ``time.monotonic()`` instants and aged when read (``now``). Every
string in a snapshot is already safe to draw (the feeds pass outside text through
``bmoe_top.parsers.sanitize``). No Textual import.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bmoe_top.parsers.prom import MetricsDelta, PromSnapshot

__all__ = ["AuditIndex", "AuditRunView", "ScrapeHealth", "SessionHealth", "SlotView", "TailHealth"]


@dataclass(frozen=True, slots=True)
class SlotView:
    """One server slot as ``/slots`` said it: ``id``, ``processing``, ``task`` (None when idle or
    not sent), ``n_decoded`` (tokens generated so far for that task), ``n_prompt``."""

    id: int
    processing: bool
    task: int | None
    n_decoded: int | None
    n_prompt: int | None


@dataclass(frozen=True, slots=True)
class ScrapeHealth:
    """A ``/metrics`` poller as of its newest scrape or failure.

    ``url``; ``state`` (the poller's state word: ``ok``, ``connecting``, ``busy``, ``refused``,
    ``unreachable``, ``server_error``, ``disabled``, ``unauthorized``, ``http_error``, ``malformed``,
    ``error``)
    and ``detail`` (why, one line); ``http_status`` (the newest answer's, None before one);
    ``scrapes_ok`` / ``scrapes_failed``; ``restarts`` (restarts of the server seen); ``limit``
    (the limit that ended the newest scrape: ``"deadline"`` or ``"body_size"``, else None);
    ``start_time`` (the server's process start as it says it); ``last_ok_mono`` /
    ``retry_at_mono`` (``time.monotonic()`` of the newest good scrape / of the next attempt
    after a failure: :meth:`stale_s`, :meth:`retry_in`); ``json_quoted`` (a body arrived
    JSON-quoted and was decoded once); ``bad_lines`` (line, message) of the newest scrape;
    ``proxy_note``; ``slots`` (the newest ``/slots`` reading, None when not read) and
    ``slots_note`` (why there is none); ``snapshot`` (the newest good scrape: its series, the
    totals since the server started) and ``delta`` (the newest interval, None after one scrape;
    ``delta.reset`` on a restart). The two parsed objects are the poller's and are never
    changed after it published them."""

    url: str = ""
    state: str = "connecting"
    detail: str = ""
    http_status: int | None = None
    scrapes_ok: int = 0
    scrapes_failed: int = 0
    restarts: int = 0
    limit: str | None = None
    start_time: str | None = None
    last_ok_mono: float | None = None
    retry_at_mono: float | None = None
    json_quoted: bool = False
    bad_lines: tuple[tuple[int, str], ...] = ()
    proxy_note: str = ""
    slots: tuple[SlotView, ...] | None = None
    slots_note: str = ""
    snapshot: PromSnapshot | None = None
    delta: MetricsDelta | None = None

    def stale_s(self, now: float | None = None) -> float | None:
        """Seconds since the newest good scrape (None before one); ``now``: ``time.monotonic()``."""
        if self.last_ok_mono is None:
            return None
        return max(0.0, (time.monotonic() if now is None else now) - self.last_ok_mono)

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt after a failure (counting down to 0); None when the
        poller is not waiting to retry (it is fine, or still connecting)."""
        if self.state in ("ok", "connecting") or self.retry_at_mono is None:
            return None
        return max(0.0, self.retry_at_mono - (time.monotonic() if now is None else now))


@dataclass(frozen=True, slots=True)
class TailHealth:
    """A followed file: ``path``, ``state`` (``waiting``, ``ok``, ``error``) and ``detail``,
    ``rotations`` and ``truncations`` seen (each starts reading a new file from its start)."""

    path: str = ""
    state: str = "waiting"
    detail: str = ""
    rotations: int = 0
    truncations: int = 0


@dataclass(frozen=True, slots=True)
class AuditRunView:
    """One process run of an audit log (docs/metrics.md "Audit log"), as its records say it.

    ``pid``; ``state`` (``loading``, ``ready``, ``exited``); ``first_line``; ``model``,
    ``n_layer``; the cache: ``cache_slots``, ``cache_prefilled``, ``cache_bytes``; ``profile``
    (the load record's profile object, None without one); ``load_ms``; ``counters`` (the context
    counters of its newest record: hits, hits_profile, misses, bytes_upload, bytes_cpu, swaps);
    ``layer_hits`` (layer -> (hits, hits_profile, misses) of its newest ``exit`` or ``load``);
    ``resident`` (layer -> expert ids); ``perf`` (the ``exit`` record's perf object);
    ``exact_sum`` (the reference's property: the problems, empty when it holds; None before the
    run exited); ``requests`` (one row per ``request`` record, see ``AuditFeed``)."""

    pid: int
    state: str
    first_line: int
    model: str | None = None
    n_layer: int | None = None
    cache_slots: Any = None
    cache_prefilled: Any = None
    cache_bytes: int | None = None
    profile: Mapping[str, Any] | None = None
    load_ms: float | None = None
    counters: Mapping[str, int | None] = field(default_factory=dict)
    layer_hits: Mapping[int, tuple[int, int, int]] = field(default_factory=dict)
    resident: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    perf: Mapping[str, Any] | None = None
    exact_sum: tuple[str, ...] | None = None
    requests: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class AuditIndex:
    """An audit log's process runs and bad lines: ``records`` (good records), ``bad_lines``
    (corrupt lines, all counted), ``bad`` (the newest 20: file generation, line, message),
    ``pids`` (ascending), ``runs`` (:class:`AuditRunView`, in order of their first record)."""

    records: int = 0
    bad_lines: int = 0
    bad: tuple[tuple[int, int, str], ...] = ()
    pids: tuple[int, ...] = ()
    runs: tuple[AuditRunView, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionHealth:
    """A live session (child process, session socket, recording at its pace): ``kind``,
    ``state`` (the source's state word), ``message`` (one line about it), ``exit_code`` (the
    child's, negative = killed by that signal; None while running and for sockets), ``ready``
    (``load_s``, ``arch``, ``n_ctx`` of its ``BMOE_READY``; None before it), ``last_error``,
    ``turns_done``, ``problems`` (``line N: reason``), ``recording`` (the source replays a
    recording at its pace: nothing is live)."""

    kind: str = ""
    state: str = ""
    message: str = ""
    exit_code: int | None = None
    ready: Mapping[str, Any] | None = None
    last_error: str | None = None
    turns_done: int = 0
    problems: tuple[str, ...] = ()
    recording: bool = False
