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

Proxies: a loopback URL (``localhost``, ``127.0.0.0/8``, ``::1``) never goes through a proxy
(``trust_env=False``). Other hosts honour ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``; a
malformed ``NO_PROXY`` (which makes ``httpx.Client`` raise) does not stop start-up: the
entries that parse are applied by hand and ``state.proxy_note`` says what was ignored.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from bmoe_top.parsers.prom import MetricsDelta, PromFormatError, PromSnapshot, compute_delta, parse_exposition
from bmoe_top.tui.sources.events import Scraped, ScrapeFailed, ScrapeState, Sinks

__all__ = ["MetricsPoller", "PollState", "check_url", "is_loopback_host", "make_client"]


def check_url(url: str) -> str | None:
    """``None`` when ``url`` is a usable http(s) URL, else why not (one line)."""
    if not url or not url.strip():
        return "empty URL"
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        return f"not a valid URL ({exc})"
    if u.scheme not in ("http", "https"):
        return f"not an http(s) URL (scheme {u.scheme or 'missing'!r}); e.g. http://127.0.0.1:8080/metrics"
    if not u.host:
        return "URL has no host; e.g. http://127.0.0.1:8080/metrics"
    return None


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (and ``*.localhost``) and loopback IPv4/IPv6 literals."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _env(name: str) -> str | None:
    return os.environ.get(name) or os.environ.get(name.lower()) or None


def _no_proxy_match(host: str, no_proxy: str) -> tuple[bool, list[str]]:
    """Tolerant NO_PROXY matching: returns (bypass, entries that could not be understood)."""
    bad: list[str] = []
    h = host.strip("[]").lower()
    try:
        hip = ipaddress.ip_address(h)
    except ValueError:
        hip = None
    for raw in no_proxy.split(","):
        e = raw.strip().lower()
        if not e:
            continue
        if e == "*":
            return True, bad
        if "://" in e:
            e = e.split("://", 1)[1]
        e = e.strip("/")
        try:
            net = ipaddress.ip_network(e.strip("[]"), strict=False)
        except ValueError:
            net = None
        if net is not None:
            if hip is not None and hip in net:
                return True, bad
            continue
        if e.startswith("["):  # [v6]:port
            inner, _, _ = e[1:].partition("]")
            try:
                eip = ipaddress.ip_address(inner)
            except ValueError:
                bad.append(raw.strip())
                continue
            if hip is not None and hip == eip:
                return True, bad
            continue
        name, _, port = e.partition(":")
        if port and not port.isdigit():
            bad.append(raw.strip())
            continue
        name = name.lstrip("*").lstrip(".")
        if not name:
            bad.append(raw.strip())
            continue
        if h == name or h.endswith("." + name):
            return True, bad
    return False, bad


def make_client(url: str, timeout: float, api_key: str | None = None) -> tuple[httpx.Client, str]:
    """An ``httpx.Client`` for ``url`` and a note about the proxy decision (``""`` if none).

    Loopback never uses a proxy. A malformed proxy environment never raises."""
    headers = {"Accept": "text/plain;version=0.0.4, */*;q=0.1", "User-Agent": "bmoe-top"}
    if check_url(url):
        return httpx.Client(trust_env=False, timeout=httpx.Timeout(timeout), headers=headers), ""
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    to = httpx.Timeout(timeout)
    host = urlsplit(url).hostname or ""
    if is_loopback_host(host):
        return httpx.Client(trust_env=False, timeout=to, headers=headers), ""
    try:
        return httpx.Client(trust_env=True, timeout=to, headers=headers), ""
    except Exception as exc:  # httpx.InvalidURL / ValueError from a malformed proxy environment
        first = f"proxy environment not usable as is ({exc})"
    scheme = urlsplit(url).scheme or "http"
    proxy = _env(f"{scheme.upper()}_PROXY") or _env("ALL_PROXY")
    bypass, bad = _no_proxy_match(host, _env("NO_PROXY") or "")
    note = first
    if bad:
        note += f"; NO_PROXY entries ignored: {', '.join(bad)}"
    if proxy and not bypass:
        try:
            client = httpx.Client(trust_env=False, timeout=to, headers=headers, proxy=proxy)
            return client, note + f"; using proxy {proxy}"
        except Exception as exc:
            note += f"; proxy {proxy!r} unusable ({exc}), connecting directly"
    return httpx.Client(trust_env=False, timeout=to, headers=headers), note + "; connecting directly"


class PollState:
    """The poller's bookkeeping (read by the attach screen's status line and the headless
    document; written by the poller thread under :attr:`lock`).

    ``status`` (:class:`~bmoe_top.tui.sources.events.ScrapeState`) and ``detail`` (why, one
    line); ``http_status`` (last HTTP status, None before any answer); ``last``/``prev`` (the
    newest two snapshots); ``last_delta`` (the newest interval); ``n_ok``/``n_fail`` (scrapes that
    parsed / failed); ``n_resets`` (restarts seen: a counter went down); ``json_quoted`` (a body
    arrived JSON-quoted and was decoded once); ``bad_lines`` (of the newest scrape);
    ``proxy_note`` (see :func:`make_client`); ``last_ok_wall`` (``time.time()`` of the newest good
    scrape); ``next_retry_s`` (the wait before the next attempt while unreachable).
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
        self.next_retry_s = 0.0


class MetricsPoller(threading.Thread):
    """Daemon thread: scrape ``url`` every ``interval`` s; each result goes to ``on_event`` (set
    it with :meth:`connect`, or :func:`bmoe_top.tui.feed.bind` does). ``timeout``: seconds per
    request (connect + read). Backoff while unreachable: the wait doubles from ``interval`` up to
    ``max_backoff`` s. :meth:`stop` ends the loop within one wait."""

    def __init__(self, url: str, interval: float = 1.0, timeout: float = 2.0, api_key: str | None = None,
                 max_backoff: float = 30.0, on_event: Callable[[Any], None] | None = None) -> None:
        super().__init__(name="bmoe-metrics-poll", daemon=True)
        self.url = url
        self.state = PollState(url)
        self.sinks = Sinks("MetricsPoller")
        self.sinks.on_event = on_event
        self.interval = max(0.05, float(interval))
        self.timeout = float(timeout)
        self.api_key = api_key
        self.max_backoff = max_backoff
        self._stop_ev = threading.Event()
        self.client, note = make_client(url, self.timeout, api_key)
        self.state.proxy_note = note
        self.url_error = check_url(url)
        self.n_requests = 0
        self._failures = 0

    def connect(self, on_event: Callable[[Any], None]) -> None:
        """Set the event sink (before the first scrape); an unusable URL is reported at once."""
        self.sinks.on_event = on_event
        if self.url_error:
            self._failed(ScrapeState.ERROR, self.url_error)

    def describe(self) -> str:
        return f"metrics: {self.url}"

    def stop(self) -> None:
        self._stop_ev.set()

    def scrape_once(self) -> MetricsDelta | None:
        """One request, parsed; its result goes to the event sink. Returns the interval's delta
        (None for the first scrape and for a failure). Never raises for network, HTTP or format
        trouble: the state says what went wrong."""
        if self.url_error:
            if self.state.status != ScrapeState.ERROR:
                self._failed(ScrapeState.ERROR, self.url_error)
            return None
        self.n_requests += 1
        try:
            r = self.client.get(self.url)
        except httpx.TimeoutException as exc:
            self._failed(ScrapeState.UNREACHABLE, f"timeout after {self.timeout:g} s ({type(exc).__name__})")
            return None
        except (httpx.TransportError, OSError) as exc:
            self._failed(ScrapeState.UNREACHABLE, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return None
        except httpx.HTTPError as exc:
            self._failed(ScrapeState.UNREACHABLE, f"{type(exc).__name__}: {exc}")
            return None
        t = time.monotonic()
        if r.status_code in (401, 403):
            self._failed(ScrapeState.UNAUTHORIZED, f"HTTP {r.status_code}" + (
                " (no --api-key given)" if not self.api_key else " (api key refused)"), r.status_code)
            return None
        if r.status_code >= 500:
            self._failed(ScrapeState.UNREACHABLE, f"HTTP {r.status_code}: {_short(r.text)}", r.status_code)
            return None
        if r.status_code != 200:
            self._failed(ScrapeState.MALFORMED, f"HTTP {r.status_code}: {_short(r.text)}", r.status_code)
            return None
        try:
            snap = parse_exposition(r.content, t)
        except PromFormatError as exc:
            self._failed(ScrapeState.MALFORMED, str(exc), r.status_code)
            return None
        self._failures = 0
        return self.apply(snap, r.status_code)

    def apply(self, snap: PromSnapshot, http_status: int = 200, wall_t: float | None = None) -> MetricsDelta | None:
        """Take one parsed scrape (``wall_t``: unix seconds it arrived, default now): compare it
        with the previous one and send :class:`~bmoe_top.tui.sources.events.Scraped`. Returns the
        interval's delta (None for the first scrape)."""
        wall_t = time.time() if wall_t is None else wall_t
        st = self.state
        with st.lock:
            delta = None
            previous = st.last
            if st.last is not None and snap.t > st.last.t:
                delta = compute_delta(st.last, snap)
                st.n_resets += delta.reset
                st.last_delta = delta
            st.prev, st.last = st.last, snap
            detail = "body was JSON-quoted; decoded once" if snap.json_quoted else ""
            if snap.bad_lines:
                n = len(snap.bad_lines)
                detail = (detail + "; " if detail else "") + \
                    f"{n} bad line{'s' if n > 1 else ''} (first: line {snap.bad_lines[0][0]})"
            st.status, st.detail, st.http_status = ScrapeState.OK, detail, http_status
            st.json_quoted = st.json_quoted or snap.json_quoted
            st.bad_lines = list(snap.bad_lines)
            st.n_ok += 1
            st.last_ok_wall = wall_t
        self.sinks.event(Scraped(snap, previous, delta, wall_t))
        return delta

    def _failed(self, status: ScrapeState, detail: str, http_status: int | None = None) -> None:
        self._failures = self._failures + 1 if status == ScrapeState.UNREACHABLE else 0
        st = self.state
        with st.lock:
            st.status, st.detail, st.http_status = status, detail, http_status
            st.n_fail += 1
        self.sinks.event(ScrapeFailed(status, detail, http_status))

    def next_wait(self) -> float:
        if self._failures:
            return float(min(self.max_backoff, self.interval * (2 ** min(self._failures - 1, 16))))
        return self.interval

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set() and not self.url_error:
                t0 = time.monotonic()
                self.scrape_once()
                wait = self.next_wait()
                with self.state.lock:
                    self.state.next_retry_s = wait if self._failures else 0.0
                # keep the cadence: the request's own time counts toward the interval
                self._stop_ev.wait(max(0.0, wait - (time.monotonic() - t0)) if not self._failures else wait)
        finally:
            self.client.close()


def _short(text: str, n: int = 80) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"
