"""Poll a ``/metrics`` endpoint with httpx in a thread (docs/metrics.md).

:class:`MetricsPoller` (a daemon thread) scrapes ``url`` every ``interval`` seconds, one request
in flight at most, with a ``timeout``, an ``Authorization: Bearer`` header when ``api_key`` is
given, and exponential backoff while the server is unreachable. Each body is parsed with
:mod:`bmoe_top.parsers.prom` and compared with the previous scrape; the result goes to the event
sink as :class:`~bmoe_top.tui.sources.events.Scraped` or
:class:`~bmoe_top.tui.sources.events.ScrapeFailed` (``bmoe_top.tui.feed.metrics`` turns it into
run-model rows). :class:`PollState` keeps the poller's own bookkeeping (its
:class:`~bmoe_top.tui.sources.events.ScrapeState`, HTTP status, the newest two snapshots,
counts). No Textual.

The client (URL check, proxies, headers) is :func:`bmoe_top.tui.sources.http_client.make_client`'s,
shared with the Prometheus client; ``state.proxy_note`` says what it decided about proxies.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import httpx
import orjson

from bmoe_top.parsers.limits import MAX_METRICS_BODY_MB
from bmoe_top.parsers.prom import (
    TIME_KEYS,
    MetricsDelta,
    PromFormatError,
    PromSnapshot,
    compute_delta,
    hit_pct_total,
    parse_exposition,
)
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.sources.capped_get import DEADLINE, Answer, LimitHit, get_capped
from bmoe_top.tui.sources.events import Scraped, ScrapeFailed, ScrapeState, Sinks
from bmoe_top.tui.sources.http_client import check_url, make_client
from bmoe_top.tui.sources.slots import SlotsReading, parse_slots

__all__ = ["BACKOFF_STATES", "MetricsPoller", "PollState", "reset_delta"]


class PollState:
    """The poller's bookkeeping (read by the attach screen's status line and the headless
    document; written by the poller thread under :attr:`lock`).

    ``status`` (:class:`~bmoe_top.tui.sources.events.ScrapeState`) and ``detail`` (why, one
    line, safe to draw); ``http_status`` (last HTTP status, None before any answer); ``last``/``prev``
    (the newest two snapshots); ``last_delta`` (the newest interval); ``n_ok``/``n_fail`` (scrapes
    that parsed / failed); ``n_resets`` (restarts seen: a counter went down, the process start
    time changed); ``json_quoted`` (a body arrived JSON-quoted and was decoded once);
    ``bad_lines`` (of the newest scrape); ``proxy_note`` (see :func:`~bmoe_top.tui.sources.http_client.make_client`);
    ``last_ok_wall`` / ``last_ok_mono`` (``time.time()`` / ``time.monotonic()`` of the newest good
    scrape); ``next_retry_s`` (the wait before the next attempt after a failure) and
    ``next_attempt_mono`` (``time.monotonic()`` of that attempt: :meth:`retry_in` counts down to it);
    ``start_time`` (the server's process start as it says: llama-server's ``Process-Start-Time-Unix``
    header, a monotonic value, or bmoe-run's ``process_start_time_seconds``); ``slots`` (the newest
    ``/slots`` reading, with ``slots=True``) and ``slots_note`` (why there is none); ``limit``
    (the limit that ended the newest scrape: ``"deadline"`` or ``"body_size"``, else None).
    """

    def __init__(self, url: str = "") -> None:
        self.lock = threading.RLock()
        self.url = url
        self.status = ScrapeState.CONNECTING
        self.detail = ""
        self.http_status: int | None = None
        self.last: PromSnapshot | None = None
        self.prev: PromSnapshot | None = None
        self.last_delta: MetricsDelta | None = None
        self.n_ok = 0
        self.n_fail = 0
        self.n_resets = 0
        self.json_quoted = False
        self.bad_lines: list[tuple[int, str]] = []
        self.proxy_note = ""
        self.last_ok_wall: float | None = None
        self.last_ok_mono: float | None = None
        self.next_retry_s = 0.0
        self.next_attempt_mono: float | None = None
        self.start_time: str | None = None
        self.slots: SlotsReading | None = None
        self.slots_note = ""
        self.limit: str | None = None

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt after a failure (counting down to 0), None when the
        poller is not waiting to retry."""
        with self.lock:
            if self.status in (ScrapeState.OK, ScrapeState.CONNECTING) or self.next_attempt_mono is None:
                return None
            return max(0.0, self.next_attempt_mono - (time.monotonic() if now is None else now))

    def stale_s(self, now: float | None = None) -> float | None:
        """Seconds since the newest good scrape (None before one)."""
        with self.lock:
            if self.last_ok_mono is None:
                return None
            return max(0.0, (time.monotonic() if now is None else now) - self.last_ok_mono)


#: States after which the poller backs off (the server is down or failing): the wait doubles.
BACKOFF_STATES = frozenset({ScrapeState.REFUSED, ScrapeState.UNREACHABLE, ScrapeState.SERVER_ERROR})

#: The cap on a ``/health`` answer (bytes): a status document.
_HEALTH_MAX = 65536


class MetricsPoller(threading.Thread):
    """Daemon thread: scrape ``url`` every ``interval`` s; each result goes to ``on_event`` (set it
    with :meth:`connect`, or :func:`bmoe_top.tui.feed.bind` does). ``timeout``: the deadline of
    each request, seconds for the whole of it (connect, headers, body); ``max_body_mb``: the cap
    on a body, MiB (docs/metrics.md "Limits of a scrape"). ``slots``: also read llama-server's
    ``/slots`` after each scrape (the slots' decoded-token counts: live progress where the
    counters move only at a request's end). After a failure the wait doubles from ``interval``
    up to ``max_backoff`` s while the server is down (refused, unreachable) or failing (HTTP
    5xx); a busy server (``/metrics`` timed out, ``/health`` answered) or one without
    ``--metrics`` (HTTP 501) is asked again every ``interval``. :meth:`scrape_now` asks at once;
    :meth:`stop` ends the loop within one wait.

    States (docs/metrics.md "The poller"): a connection refused is ``refused``; a connect
    timeout, a DNS failure, or a ``/metrics`` timeout while ``/health`` does not answer either
    is ``unreachable``; a ``/metrics`` read timeout while ``/health`` answers is ``busy`` (the
    last values are kept and their age shown); HTTP 5xx is ``server_error``; HTTP 501
    (llama-server without ``--metrics``) is ``disabled`` with the server's hint whole; 401/403
    ``unauthorized``; another status ``http_error`` (``HTTP 404 Not Found``: the URL names no
    endpoint); a 200 whose body is no exposition ``malformed``; an unusable URL ``error``. A
    ``/metrics`` answer not whole by the deadline is ``busy`` or ``unreachable`` as a timeout is,
    a body over the cap ``malformed``; both say so in ``detail`` and set ``state.limit``."""

    def __init__(self, url: str, interval: float = 1.0, timeout: float = 2.0, api_key: str | None = None,
                 max_backoff: float = 30.0, on_event: Callable[[Any], None] | None = None,
                 slots: bool = False, max_body_mb: float = MAX_METRICS_BODY_MB) -> None:
        super().__init__(name="bmoe-metrics-poll", daemon=True)
        self.url = url
        self.state = PollState(url)
        self.sinks = Sinks("MetricsPoller")
        self.sinks.on_event = on_event
        self.interval = max(0.05, float(interval))
        self.timeout = float(timeout)
        self.max_body = max(1, int(max_body_mb * 1048576))
        self.api_key = api_key
        self.max_backoff = max_backoff
        self.read_slots = slots
        self._stop_ev = threading.Event()
        self._wake = threading.Event()
        self.client, note = make_client(url, self.timeout, api_key)
        self.state.proxy_note = sanitize(note)
        self.url_error = check_url(url)
        self.n_requests = 0
        self._failures = 0
        self._last_status = ScrapeState.CONNECTING
        self._lock = threading.Lock()  # one scrape at a time (the thread and scrape_now)

    def connect(self, on_event: Callable[[Any], None]) -> None:
        """Set the event sink (before the first scrape); an unusable URL is reported at once."""
        self.sinks.on_event = on_event
        if self.url_error:
            self._failed(ScrapeState.ERROR, self.url_error)

    def describe(self) -> str:
        return f"metrics: {self.url}"

    def stop(self) -> None:
        self._stop_ev.set()
        self._wake.set()

    def scrape_now(self) -> None:
        """Scrape at once: wake the poller thread when it runs, else scrape on this thread."""
        if self.is_alive():
            self._wake.set()
        else:
            self.scrape_once()

    def _sibling(self, path: str) -> str:
        """The URL of another endpoint of the same server (``/health``, ``/slots``)."""
        u = httpx.URL(self.url)
        return str(u.copy_with(path=path, query=None, fragment=None))

    def _health_answers(self) -> bool:
        """True when ``/health`` answers at all (200 ok or 503 loading: the process is there)."""
        try:
            r = get_capped(self.client, self._sibling("/health"), min(self.timeout, 2.0), _HEALTH_MAX)
        except (httpx.HTTPError, OSError, LimitHit):
            return False
        return r.status_code in (200, 503)

    def scrape_once(self) -> MetricsDelta | None:
        """One request, parsed; its result goes to the event sink. Returns the interval's delta
        (None for the first scrape and for a failure). Never raises for network, HTTP or format
        trouble: the state says what went wrong."""
        with self._lock:
            return self._scrape()

    def _scrape(self) -> MetricsDelta | None:
        if self.url_error:
            if self.state.status != ScrapeState.ERROR:
                self._failed(ScrapeState.ERROR, self.url_error)
            return None
        self.n_requests += 1
        try:
            r = get_capped(self.client, self.url, self.timeout, self.max_body)
        except LimitHit as exc:
            if exc.limit != DEADLINE:
                self._failed(ScrapeState.MALFORMED, f"/metrics {exc} (--max-body-mb)", limit=exc.limit)
            elif self._health_answers():
                self._failed(ScrapeState.BUSY, f"/metrics {exc} (--timeout); /health answers", limit=exc.limit)
            else:
                self._failed(ScrapeState.UNREACHABLE, f"/metrics {exc} (--timeout), and /health does not answer",
                             limit=exc.limit)
            return None
        except httpx.ConnectTimeout:
            self._failed(ScrapeState.UNREACHABLE, f"connect timeout after {self.timeout:g} s")
            return None
        except httpx.ConnectError as exc:
            if _refused(exc):
                self._failed(ScrapeState.REFUSED, "connection refused (nothing listens on that port)")
            else:
                self._failed(ScrapeState.UNREACHABLE, f"cannot connect: {_why(exc)}")
            return None
        except httpx.TimeoutException:
            if self._health_answers():
                self._failed(ScrapeState.BUSY, f"/metrics gave no answer within {self.timeout:g} s; /health answers")
            else:
                self._failed(ScrapeState.UNREACHABLE,
                             f"no answer within {self.timeout:g} s, and /health does not answer either")
            return None
        except (httpx.TransportError, OSError) as exc:
            if self._health_answers():
                self._failed(ScrapeState.SERVER_ERROR, f"/metrics answer broken off ({_why(exc)}); /health answers")
            else:
                self._failed(ScrapeState.UNREACHABLE, _why(exc))
            return None
        except httpx.HTTPError as exc:
            self._failed(ScrapeState.UNREACHABLE, _why(exc))
            return None
        t = time.monotonic()
        code = r.status_code
        if code in (401, 403):
            self._failed(ScrapeState.UNAUTHORIZED, f"HTTP {code}" + (
                " (no --api-key given)" if not self.api_key else " (api key refused)"), code)
            return None
        if code == 501:
            self._failed(ScrapeState.DISABLED, f"HTTP 501: {_error_message(r)}", code)
            return None
        if code >= 500:
            self._failed(ScrapeState.SERVER_ERROR, f"HTTP {code}: {_short(_error_message(r))}", code)
            return None
        if code != 200:
            said = _error_message(r)  # an HTML error page says no more than its status
            self._failed(ScrapeState.HTTP_ERROR, _status_line(code) + (
                f": {_short(said)}" if said and not said.startswith("<") else ""), code)
            return None
        try:
            snap = parse_exposition(r.content, t)
        except PromFormatError as exc:
            self._failed(ScrapeState.MALFORMED, str(exc), code)
            return None
        self._failures = 0
        start = r.headers.get("process-start-time-unix")
        slots = self._read_slots() if self.read_slots else None
        return self.apply(snap, code, start_time=sanitize(start) if start is not None else None, slots=slots)

    def _read_slots(self) -> SlotsReading | None:
        """llama-server's ``/slots`` (``--slots``): each slot's task and decoded-token count."""
        try:
            r = get_capped(self.client, self._sibling("/slots"), self.timeout, self.max_body)
        except LimitHit as exc:
            self._slots_note(f"/slots: {exc}")
            return None
        except (httpx.HTTPError, OSError) as exc:
            self._slots_note(f"/slots: {_why(exc)}")
            return None
        if r.status_code != 200:
            self._slots_note(f"/slots: HTTP {r.status_code}: {_short(_error_message(r))}")
            return None
        reading = parse_slots(r.content, time.monotonic())
        self._slots_note("" if reading is not None else "/slots: not a list of slots")
        return reading

    def _slots_note(self, note: str) -> None:
        with self.state.lock:
            self.state.slots_note = sanitize(note)

    def apply(self, snap: PromSnapshot, http_status: int = 200, wall_t: float | None = None,
              start_time: str | None = None, slots: SlotsReading | None = None) -> MetricsDelta | None:
        """Take one parsed scrape (``wall_t``: unix seconds it arrived, default now;
        ``start_time``: the server's process start when it says, e.g. llama-server's
        ``Process-Start-Time-Unix`` header; ``slots``: the ``/slots`` reading): compare it with the
        previous one and send :class:`~bmoe_top.tui.sources.events.Scraped`. A changed start time is
        a restart (a new baseline) even when the new counters are above the old ones. Returns the
        interval's delta (None for the first scrape)."""
        wall_t = time.time() if wall_t is None else wall_t
        st = self.state
        with st.lock:
            delta = None
            previous = st.last
            restarted = start_time is not None and st.start_time is not None and start_time != st.start_time
            if st.last is not None and snap.t > st.last.t:
                delta = reset_delta(st.last, snap) if restarted else compute_delta(st.last, snap)
                st.n_resets += delta.reset
                st.last_delta = delta
            elif restarted:
                st.n_resets += 1
            if start_time is not None:
                st.start_time = start_time
            elif snap.values.get("process_start") is not None:
                st.start_time = f"{snap.values['process_start']:.0f}"
            st.prev, st.last = st.last, snap
            st.status, st.detail, st.http_status = ScrapeState.OK, sanitize(snap.detail()), http_status
            st.limit = None
            st.json_quoted = st.json_quoted or snap.json_quoted
            st.bad_lines = [(n, sanitize(m)) for n, m in snap.bad_lines]
            st.n_ok += 1
            st.last_ok_wall = wall_t
            st.last_ok_mono = time.monotonic()
            st.next_attempt_mono = None
            previous_slots, st.slots = st.slots, slots
        self._last_status = ScrapeState.OK
        self.sinks.event(Scraped(snap, previous, delta, wall_t, slots=slots, previous_slots=previous_slots,
                                 restarted=bool(delta is not None and delta.reset) or restarted))
        return delta

    def _failed(self, status: ScrapeState, detail: str, http_status: int | None = None,
                limit: str | None = None) -> None:
        self._failures = self._failures + 1 if status in BACKOFF_STATES else 0
        detail = sanitize(detail)
        st = self.state
        with st.lock:
            st.status, st.detail, st.http_status = status, detail, http_status
            st.limit = limit
            st.n_fail += 1
            st.next_retry_s = self.next_wait()
            st.next_attempt_mono = time.monotonic() + st.next_retry_s
        self._last_status = status
        self.sinks.event(ScrapeFailed(status, detail, http_status))

    def next_wait(self) -> float:
        """Seconds before the next scrape: ``interval``, doubling after each failure of a
        :data:`BACKOFF_STATES` state up to ``max_backoff``."""
        if self._failures:
            return float(min(self.max_backoff, self.interval * (2 ** min(self._failures - 1, 16))))
        return self.interval

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set() and not self.url_error:
                t0 = time.monotonic()
                self._wake.clear()
                self.scrape_once()
                wait = self.next_wait()
                # keep the cadence: the request's own time counts toward the interval (not after a
                # failure: the whole backoff is waited)
                left = wait if self._last_status != ScrapeState.OK else max(0.0, wait - (time.monotonic() - t0))
                with self.state.lock:
                    self.state.next_retry_s = wait if self._last_status != ScrapeState.OK else 0.0
                    if self._last_status != ScrapeState.OK:
                        self.state.next_attempt_mono = time.monotonic() + left
                self._wake.wait(left)
        finally:
            self.client.close()


def reset_delta(prev: PromSnapshot, cur: PromSnapshot) -> MetricsDelta:
    """The delta of an interval across a restart: a new baseline, no rate (as
    :func:`~bmoe_top.parsers.prom.compute_delta` gives when a counter went down)."""
    return MetricsDelta(t0=prev.t, t1=cur.t, dt_s=cur.t - prev.t, reset=True, hit_pct_total=hit_pct_total(cur),
                        layer_hit_pct=[None] * cur.layer_count(), token_ms={k: None for k in TIME_KEYS})


def _refused(exc: BaseException) -> bool:
    """The connect error is ECONNREFUSED (nothing listens), looking through the causes."""
    e: BaseException | None = exc
    for _ in range(8):
        if e is None:
            break
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return True
        e = e.__cause__ or e.__context__
    return "refused" in str(exc).lower()


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _error_message(r: Answer) -> str:
    """The message of an error answer: llama-server's / OpenAI's ``{"error": {"message"}}``, else
    the body's text (one line; made safe later)."""
    try:
        doc = orjson.loads(r.content)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
        if isinstance(msg, str) and msg.strip():
            return " ".join(msg.split())
    return " ".join(r.content.decode("utf-8", "replace").split())


def _status_line(code: int) -> str:
    """``HTTP 404 Not Found``: the status and its standard reason phrase (none for a code outside
    the standard's)."""
    try:
        return f"HTTP {code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


def _short(text: str, n: int = 80) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"
