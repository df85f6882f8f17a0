"""Poll a ``/metrics`` endpoint with httpx in a thread and keep the rates a screen shows.

:class:`MetricsPoller` (a daemon thread) scrapes ``url`` every ``interval`` seconds, one request
in flight at most (requests are made one after the other on the thread), with a ``timeout``,
an ``Authorization: Bearer`` header when ``api_key`` is given, and exponential backoff while the
server is unreachable. Bodies are parsed with :mod:`bmoe_top.parsers.prom` and fed to the one
:class:`~bmoe_top.tui.run.RunModel` every view renders from (``state.run``; see
:class:`MetricsState`): each completed scrape interval is one token row (per-token means over
the interval, ``run.row_unit == "interval"``) plus its per-layer hit/miss counts for the layer
x interval heatmap; the totals since the server started go to ``run.summary``. No Textual.

States (``run.status``, with the reason in ``run.status_detail``): ``connecting`` (nothing answered yet),
``ok``, ``unreachable``
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
import math
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from bmoe_top.parsers.prom import (
    MIB,
    TIME_KEYS,
    MetricsDelta,
    PromFormatError,
    PromSnapshot,
    compute_delta,
    hit_pct_total,
    parse_exposition,
)
from bmoe_top.tui.run import RunBackedState, RunModel, run_summary

__all__ = ["MetricsState", "MetricsPoller", "make_client", "is_loopback_host", "STATES", "interval_row",
           "layer_counts", "totals_summary"]

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
            client = httpx.Client(trust_env=False, timeout=to, headers=headers, proxy=proxy)
            return client, note + f"; using proxy {proxy}"
        except Exception as exc:
            note += f"; proxy {proxy!r} unusable ({exc}), connecting directly"
    return httpx.Client(trust_env=False, timeout=to, headers=headers), note + "; connecting directly"


class MetricsState(RunBackedState):
    """A metrics source's bookkeeping next to the :class:`RunModel` it feeds (``run``).

    The run model gets what every view draws: one row of ``run.tokens`` per completed scrape
    interval (:func:`interval_row`; ``run.row_unit`` is ``"interval"``), the interval's
    per-layer hits/misses (``run.add_layer_counts``), the totals since the server started in
    ``run.summary`` (:func:`totals_summary`), and the connection status in ``run.status`` /
    ``run.status_detail`` (one of :data:`STATES` and a one-line reason). A counter reset
    (server restart) starts a new baseline and adds no row, so no row is ever negative; a
    failed scrape changes only the status (the last picture stays).

    What only the attach screen's status line and the headless twin need stays here:
    ``http_status`` (last HTTP status, ``None`` before any answer), ``last``/``prev`` (the
    newest two snapshots), ``last_delta`` (the newest interval), ``n_ok``/``n_fail`` (scrapes
    that parsed / failed), ``n_resets`` (restarts seen), ``json_quoted`` (a body arrived
    JSON-quoted and was decoded once), ``bad_lines`` (of the newest scrape), ``proxy_note`` (see
    the module doc), ``last_ok_wall`` (``time.time()`` of the newest good scrape),
    ``next_retry_s``. ``lock``/``version`` are the run model's; ``status``/``detail`` read and
    write ``run.status``/``run.status_detail``.
    """

    def __init__(self, url: str = "", run: RunModel | None = None) -> None:
        self.url = url
        self.run = run if run is not None else RunModel()
        self.http_status: int | None = None
        self.last: PromSnapshot | None = None
        self.prev: PromSnapshot | None = None
        self.last_delta: MetricsDelta | None = None
        self.n_ok = 0
        self.n_fail = 0
        self.n_resets = 0
        self.json_quoted = False
        self.bad_lines: list = []
        self.proxy_note = ""
        self.last_ok_wall: float | None = None
        self.next_retry_s = 0.0
        with self.run.lock:
            self.run.row_unit = "interval"
            self.run.status, self.run.status_detail = "connecting", ""
            if url:
                self.run.sources.append(f"metrics: {url}")

    # -- writers (poller thread) ------------------------------------------------------------
    def apply(self, snap: PromSnapshot, wall_t: float | None = None) -> MetricsDelta | None:
        """Apply one parsed scrape (``wall_t``: unix seconds it arrived, default now): the
        interval against the previous scrape becomes a token row (a reset starts a new
        baseline and adds none). Returns the interval's delta (``None`` for the first scrape)."""
        wall_t = time.time() if wall_t is None else wall_t
        run = self.run
        with run.lock:
            delta = None
            if self.last is not None and snap.t > self.last.t:
                delta = compute_delta(self.last, snap)
                if delta.reset:
                    self.n_resets += 1
                    run.log.append(f"scrape {self.n_ok + 1}: a counter went down (server restart): new baseline")
                else:
                    i = run.tokens.append(interval_row(delta, snap, wall_t))
                    hits, misses = layer_counts(self.last, snap)
                    if hits is not None:
                        run.add_layer_counts(i, hits, misses)
                self.last_delta = delta
            self.prev, self.last = self.last, snap
            detail = "body was JSON-quoted; decoded once" if snap.json_quoted else ""
            if snap.bad_lines:
                n = len(snap.bad_lines)
                detail = (detail + "; " if detail else "") + \
                    f"{n} bad line{'s' if n > 1 else ''} (first: line {snap.bad_lines[0][0]})"
            run.status, run.status_detail = "ok", detail
            self.json_quoted = self.json_quoted or snap.json_quoted
            self.bad_lines = list(snap.bad_lines)
            self.n_ok += 1
            self.last_ok_wall = wall_t
            n_layer = snap.layer_count()
            if n_layer:
                run.n_layer = max(run.n_layer or 0, n_layer)
            run.summary.update(totals_summary(snap))
            if snap.exported("cache_bytes"):
                run.budget_mib = snap.values["cache_bytes"] / MIB
            run.touch()
            return delta

    def fail(self, status: str, detail: str, http_status: int | None = None) -> None:
        with self.run.lock:
            self.run.status, self.run.status_detail, self.http_status = status, detail, http_status
            self.n_fail += 1
            self.run.touch()

    # -- readers ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The numbers the attach screen shows, as a JSON-ready dict (``None`` = not exported /
        no rate yet): ``run`` is :func:`bmoe_top.tui.run.run_summary` of the run model;
        ``rates`` come from its newest interval row (``reset`` when the newest scrape started a
        new baseline), ``totals`` from the newest scrape."""
        with self.run.lock:
            s, d, run = self.last, self.last_delta, self.run
            out: dict[str, Any] = {
                "url": self.url, "status": run.status, "detail": run.status_detail,
                "http_status": self.http_status, "scrapes_ok": self.n_ok, "scrapes_failed": self.n_fail,
                "restarts": self.n_resets, "json_quoted": self.json_quoted,
                "bad_lines": [{"line": n, "error": m} for n, m in self.bad_lines],
                "proxy_note": self.proxy_note, "intervals": run.tokens.n,
            }
            out["run"] = run_summary(run)
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
            elif d.reset:
                out["rates"] = {"interval_s": d.dt_s, "reset": True}
            else:
                out["rates"] = newest_rates(run, n_layer)
            return out


#: Extra token columns an interval row carries besides the canonical per-token means.
INTERVAL_COLUMNS = ("interval_s", "tokens_in_interval", "tok_s", "prompt_tok_s", "interval_hit_pct",
                    "read_mib_s", "cpu_mib_s", "swaps")


def interval_row(d: MetricsDelta, cur: PromSnapshot, wall_t: float) -> dict[str, float | None]:
    """One ``run.tokens`` row for a completed scrape interval (not a reset): per generated
    token in the interval, ``wall_ms``/``io_ms``/``stall_ms``/``mgmt_ms``/``compute_ms`` (the
    ``bmoe:token_*_seconds_total`` sums / ``bmoe:timed_tokens_total``, else tokens predicted)
    and ``read_mib`` (upload bytes / tokens predicted, MiB); ``cache_hit_pct`` since the start
    (the ``hit_ratio`` gauge, else the counters), ``t`` (``wall_t``, unix s); and the
    :data:`INTERVAL_COLUMNS`. ``None`` (the row stays NaN) where the server does not export
    the series or the interval had no token to divide by."""
    tokens = d.d.get("tokens_predicted")
    up = d.d.get("upload_bytes")
    row: dict[str, float | None] = {f"{k}_ms": d.token_ms.get(k) for k in TIME_KEYS}
    row.update({
        "t": wall_t,
        "read_mib": up / MIB / tokens if up is not None and tokens else None,
        "cache_hit_pct": d.hit_pct_total,
        "interval_s": d.dt_s,
        "tokens_in_interval": tokens,
        "tok_s": d.tok_s,
        "prompt_tok_s": d.prompt_tok_s,
        "interval_hit_pct": d.hit_pct,
        "read_mib_s": d.read_mib_s,
        "cpu_mib_s": d.cpu_mib_s,
        "swaps": d.swaps,
    })
    return {k: (v if v is not None and math.isfinite(v) else None) for k, v in row.items()}


def layer_counts(prev: PromSnapshot, cur: PromSnapshot) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-layer (hits, misses) in the interval, float ``[n_layer]`` (NaN where a layer's
    series is missing on either side), or ``(None, None)`` when no per-layer series."""
    n_layer = cur.layer_count()
    lh0, lh1 = prev.layers.get("layer_hits"), cur.layers.get("layer_hits")
    lm0, lm1 = prev.layers.get("layer_misses"), cur.layers.get("layer_misses")
    if not n_layer or not (lh0 and lh1 and lm0 and lm1):
        return None, None
    hits = np.full(n_layer, np.nan)
    misses = np.full(n_layer, np.nan)
    for il in range(n_layer):
        a, b, c, e = lh0.get(il), lh1.get(il), lm0.get(il), lm1.get(il)
        if None in (a, b, c, e):
            continue
        hits[il], misses[il] = b - a, e - c
    return hits, misses


def totals_summary(s: PromSnapshot) -> dict[str, float]:
    """Run-summary keys (``bmoe_top.tui.run.SUMMARY_FIELDS``) from the totals since the
    server started; a key is left out when its series is not exported."""
    v = s.values
    out: dict[str, float | None] = {}
    tok = v.get("tokens_predicted")
    timed = v.get("timed_tokens", tok)
    out["tokens"] = tok
    out["n_prompt"] = v.get("prompt_tokens")
    if "upload_bytes" in v:
        out["read_mib"] = v["upload_bytes"] / MIB
        if tok:
            out["read_mib_per_tok"] = v["upload_bytes"] / MIB / tok
    out["cache_hit_pct"] = hit_pct_total(s)
    if "cache_bytes" in v:
        out["budget_mib"] = v["cache_bytes"] / MIB
    if "prompt_seconds" in v:
        out["prefill_s"] = v["prompt_seconds"]
        if v["prompt_seconds"] > 0 and v.get("prompt_tokens") is not None:
            out["prefill_tps"] = v["prompt_tokens"] / v["prompt_seconds"]
    wall = v.get("wall_s", v.get("tokens_predicted_seconds"))
    if wall and timed:
        out["s_per_tok"] = wall / timed
        out["tok_s"] = timed / wall
    if timed:
        for key, series in (("compute_s_tok", "compute_s"), ("io_s_tok", "io_s"), ("stall_s_tok", "stall_s"),
                            ("mgmt_s_tok", "mgmt_s")):
            if series in v:
                out[key] = v[series] / timed
    return {k: x for k, x in out.items() if x is not None and math.isfinite(x)}


def newest_rates(run: RunModel, n_layer: int) -> dict[str, Any] | None:
    """The newest interval row of ``run`` as the headless ``rates`` dict (under ``run.lock``)."""
    n = run.tokens.n
    if not n:
        return None
    last = run.tokens.last
    share = run.hit_matrix(n, start=n - 1) if n_layer else np.zeros((0, 1))
    return {
        "interval_s": _num(last("interval_s")), "reset": False, "tok_s": _num(last("tok_s")),
        "prompt_tok_s": _num(last("prompt_tok_s")), "hit_pct": _num(last("interval_hit_pct")),
        "read_mib_s": _num(last("read_mib_s")), "cpu_mib_s": _num(last("cpu_mib_s")),
        "swaps": _num(last("swaps")),
        "layer_hit_pct": [_num(100.0 * x) for x in share[:, 0]] if share.shape[0] else [],
        "token_ms": {k: _num(last(f"{k}_ms")) for k in TIME_KEYS},
    }


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
    """Daemon thread: scrape ``url`` every ``interval`` s into ``state`` (and so into
    ``state.run``, also ``run_model``; pass ``run`` to feed an existing run model).

    ``timeout``: seconds per request (connect+read). Backoff while unreachable: the wait doubles
    from ``interval`` up to ``max_backoff`` s. ``stop()`` ends the loop within one wait."""

    def __init__(self, url: str, state: MetricsState | None = None, interval: float = 1.0,
                 timeout: float = 2.0, api_key: str | None = None, max_backoff: float = 30.0,
                 run: RunModel | None = None):
        super().__init__(name="bmoe-metrics-poll", daemon=True)
        self.url = url
        self.state = state if state is not None else MetricsState(url=url, run=run)
        self.run_model = self.state.run
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
