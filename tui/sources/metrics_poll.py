"""Poll a ``/metrics`` endpoint with httpx in a thread and keep the rates a screen shows.

:class:`MetricsPoller` (a daemon thread) scrapes ``url`` every ``interval`` seconds, one request
in flight at most (requests are made one after the other on the thread), with a ``timeout``,
an ``Authorization: Bearer`` header when ``api_key`` is given, and exponential backoff while the
server is unreachable. Bodies are parsed with :mod:`bmoe_top.parsers.prom` and applied to a
:class:`MetricsState`, a plain-Python object (no Textual) the attach screen and the headless
twin read under ``state.lock``; ``state.version`` bumps on every change.

States (``state.status``): ``connecting`` (nothing answered yet), ``ok``, ``unreachable``
(connection refused/reset, timeout, DNS, HTTP 5xx), ``unauthorized`` (HTTP 401/403),
``malformed`` (any other HTTP status, or a body that is not an exposition), ``error`` (the URL
itself is unusable: nothing is requested).

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
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from bmoe_top.parsers.prom import (
    TIME_KEYS,
    MetricsDelta,
    PromFormatError,
    PromSnapshot,
    compute_delta,
    hit_pct_total,
    parse_exposition,
)

__all__ = ["MetricsState", "MetricsPoller", "make_client", "is_loopback_host", "STATES"]

STATES = ("connecting", "ok", "unreachable", "unauthorized", "malformed", "error")


def check_url(url: str) -> str | None:
    """``None`` when ``url`` is a usable http(s) URL, else why not (one line)."""
    if not url or not url.strip():
        return "empty URL"
    try:
        u = httpx.URL(url)
    except Exception as exc:  # httpx.InvalidURL, ValueError from urllib
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
            return httpx.Client(trust_env=False, timeout=to, headers=headers, proxy=proxy), note + f"; using proxy {proxy}"
        except Exception as exc:
            note += f"; proxy {proxy!r} unusable ({exc}), connecting directly"
    return httpx.Client(trust_env=False, timeout=to, headers=headers), note + "; connecting directly"


@dataclass
class MetricsState:
    """What the metrics attach screen shows; every field is read under ``lock``.

    ``status``/``detail``: one of :data:`STATES` and a one-line reason. ``http_status``: last
    HTTP status (``None`` before any answer). ``last``/``prev``: the newest two snapshots
    (since the newest baseline). ``deltas``: the rates of each interval, oldest first
    (bounded by ``history``). ``n_ok``/``n_fail``: scrapes that parsed / failed. ``n_resets``:
    restarts seen (counter went down). ``json_quoted``: a body arrived JSON-quoted (decoded
    once). ``bad_lines``: bad lines of the newest scrape. ``proxy_note``: see module doc.
    ``last_ok_wall``: ``time.time()`` of the newest good scrape.
    """

    url: str = ""
    history: int = 600
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    version: int = 0
    status: str = "connecting"
    detail: str = ""
    http_status: int | None = None
    last: PromSnapshot | None = None
    prev: PromSnapshot | None = None
    deltas: deque = field(default_factory=deque)
    n_ok: int = 0
    n_fail: int = 0
    n_resets: int = 0
    json_quoted: bool = False
    bad_lines: list = field(default_factory=list)
    proxy_note: str = ""
    last_ok_wall: float | None = None
    next_retry_s: float = 0.0

    def __post_init__(self) -> None:
        self.deltas = deque(self.deltas, maxlen=self.history)

    # -- writers (poller thread) ------------------------------------------------------------
    def apply(self, snap: PromSnapshot) -> MetricsDelta | None:
        """Apply one parsed scrape: rates against the previous one (a reset starts a new
        baseline). Returns the interval's delta (``None`` for the first scrape)."""
        with self.lock:
            delta = None
            if self.last is not None and snap.t > self.last.t:
                delta = compute_delta(self.last, snap)
                if delta.reset:
                    self.n_resets += 1
                self.deltas.append(delta)
            self.prev, self.last = self.last, snap
            self.status, self.detail = "ok", ("body was JSON-quoted; decoded once" if snap.json_quoted else "")
            if snap.bad_lines:
                n = len(snap.bad_lines)
                self.detail = (self.detail + "; " if self.detail else "") + \
                    f"{n} bad line{'s' if n > 1 else ''} (first: line {snap.bad_lines[0][0]})"
            self.json_quoted = self.json_quoted or snap.json_quoted
            self.bad_lines = list(snap.bad_lines)
            self.n_ok += 1
            self.last_ok_wall = time.time()
            self.version += 1
            return delta

    def fail(self, status: str, detail: str, http_status: int | None = None) -> None:
        with self.lock:
            self.status, self.detail, self.http_status = status, detail, http_status
            self.n_fail += 1
            self.version += 1

    # -- readers ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The numbers the screen shows, as a JSON-ready dict (``None`` = not exported / no
        rate yet). Totals come from the newest scrape; rates from the newest interval."""
        with self.lock:
            s, d = self.last, (self.deltas[-1] if self.deltas else None)
            out: dict[str, Any] = {
                "url": self.url, "status": self.status, "detail": self.detail,
                "http_status": self.http_status, "scrapes_ok": self.n_ok, "scrapes_failed": self.n_fail,
                "restarts": self.n_resets, "json_quoted": self.json_quoted,
                "bad_lines": [{"line": n, "error": m} for n, m in self.bad_lines],
                "proxy_note": self.proxy_note,
            }
            if s is None:
                out["totals"] = None
                out["rates"] = None
                return out
            tot: dict[str, Any] = {k: _num(v) for k, v in sorted(s.values.items())}
            tot["hit_pct"] = _num(hit_pct_total(s))
            lh, lm = s.layers.get("layer_hits"), s.layers.get("layer_misses")
            n_layer = s.layer_count()
            if lh is not None and lm is not None:
                per = []
                for il in range(n_layer):
                    h, m = lh.get(il), lm.get(il)
                    per.append(None if h is None or m is None or h + m <= 0 else _num(100.0 * h / (h + m)))
                tot["layer_hit_pct"] = per
            else:
                tot["layer_hit_pct"] = None
            out["n_layer"] = n_layer
            out["totals"] = tot
            out["not_exported"] = _not_exported(s)
            if d is None:
                out["rates"] = None
            else:
                out["rates"] = {
                    "interval_s": d.dt_s, "reset": d.reset, "tok_s": _num(d.tok_s),
                    "prompt_tok_s": _num(d.prompt_tok_s), "hit_pct": _num(d.hit_pct),
                    "read_mib_s": _num(d.read_mib_s), "cpu_mib_s": _num(d.cpu_mib_s),
                    "swaps": _num(d.swaps), "layer_hit_pct": [_num(x) for x in d.layer_hit_pct],
                    "token_ms": {k: _num(d.token_ms.get(k)) for k in TIME_KEYS},
                }
            return out


def _num(v: float | None) -> float | None:
    """JSON-safe number: NaN/inf become ``None`` (the JSON has no bare NaN)."""
    if v is None:
        return None
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _not_exported(s: PromSnapshot) -> list[str]:
    from bmoe_top.parsers.prom import SERIES
    return [sp.name for sp in SERIES if not s.exported(sp.key)]


class MetricsPoller(threading.Thread):
    """Daemon thread: scrape ``url`` every ``interval`` s into ``state``.

    ``timeout``: seconds per request (connect+read). Backoff while unreachable: the wait doubles
    from ``interval`` up to ``max_backoff`` s. ``stop()`` ends the loop within one wait."""

    def __init__(self, url: str, state: MetricsState | None = None, interval: float = 1.0,
                 timeout: float = 2.0, api_key: str | None = None, max_backoff: float = 30.0):
        super().__init__(name="bmoe-metrics-poll", daemon=True)
        self.url = url
        self.state = state if state is not None else MetricsState(url=url)
        if not self.state.url:
            self.state.url = url
        self.interval = max(0.05, float(interval))
        self.timeout = float(timeout)
        self.api_key = api_key
        self.max_backoff = max_backoff
        self._stop_ev = threading.Event()
        self.client, note = make_client(url, self.timeout, api_key)
        self.state.proxy_note = note
        self.url_error = check_url(url)
        if self.url_error:
            self.state.fail("error", self.url_error)
        self.n_requests = 0
        self._failures = 0

    def stop(self) -> None:
        self._stop_ev.set()

    def scrape_once(self) -> MetricsDelta | None:
        """One request, parsed and applied. Never raises for network/HTTP/format trouble:
        the state says what went wrong."""
        if self.url_error:
            return None
        self.n_requests += 1
        try:
            r = self.client.get(self.url)
        except httpx.TimeoutException as exc:
            self._failed("unreachable", f"timeout after {self.timeout:g} s ({type(exc).__name__})")
            return None
        except (httpx.TransportError, OSError) as exc:
            self._failed("unreachable", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return None
        except httpx.HTTPError as exc:
            self._failed("unreachable", f"{type(exc).__name__}: {exc}")
            return None
        t = time.monotonic()
        if r.status_code in (401, 403):
            self._failed("unauthorized", f"HTTP {r.status_code}" + (
                " (no --api-key given)" if not self.api_key else " (api key refused)"), r.status_code)
            return None
        if r.status_code >= 500:
            self._failed("unreachable", f"HTTP {r.status_code}: {_short(r.text)}", r.status_code)
            return None
        if r.status_code != 200:
            self._failed("malformed", f"HTTP {r.status_code}: {_short(r.text)}", r.status_code)
            return None
        try:
            snap = parse_exposition(r.content, t)
        except PromFormatError as exc:
            self._failed("malformed", str(exc), r.status_code)
            return None
        self._failures = 0
        with self.state.lock:
            self.state.http_status = r.status_code
        return self.state.apply(snap)

    def _failed(self, status: str, detail: str, http_status: int | None = None) -> None:
        self._failures += 1 if status == "unreachable" else 0
        if status != "unreachable":
            self._failures = 0
        self.state.fail(status, detail, http_status)

    def next_wait(self) -> float:
        if self._failures:
            return min(self.max_backoff, self.interval * (2 ** min(self._failures - 1, 16)))
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
