"""A client of the Prometheus HTTP API (``/api/v1``), and the thread that refreshes from it.

bmoe-top never scrapes a fleet itself: it reads what a Prometheus server already collected,
through PromQL ``query`` and ``query_range`` (docs/fleet.md). This module is the I/O of that:
requests, answers decoded into small typed results, and every failure classified. What to ask
and how to read the answers is :mod:`bmoe_top.tui.fleet`. No Textual, no Rich.

* :class:`PrometheusClient`: ``query(expr, at)`` -> :class:`QueryResult` (instant vector;
  ``query_keyed(expr, at, by)`` -> :class:`KeyedResult`, its values by some labels' values),
  ``query_range(expr, start, end, step)`` -> :class:`RangeResult` (one :class:`RangeSeries`
  per label set, times and values as float64 arrays), ``targets()`` -> :class:`Target` list,
  ``config_scrape_intervals()`` -> the configured intervals, ``scrape_interval(...)``.
* Every failure raises :class:`PromError` with a :class:`PromErrorKind`, kept distinct:
  ``unreachable`` (refused, reset, DNS), ``timeout`` (the client's own timeout, or Prometheus'
  ``errorType: timeout``), ``bad_data`` (Prometheus refused the query; ``query`` says which),
  ``execution`` (it failed evaluating it), ``too_many_samples`` (an ``execution`` error that says
  the query would load too many samples: ``--query.max-samples``), ``empty`` (the answer holds
  no series where one was required: :func:`require_series`), ``http`` (an HTTP error without a
  Prometheus error document, e.g. a proxy's 502 or a wrong path prefix: status and body kept),
  ``malformed`` (a 200 that is not a Prometheus API answer), ``error`` (any other Prometheus
  ``errorType``: ``internal``, ``unavailable``, ``canceled``, ``not_found``). Bodies and messages
  are kept as received, cut to :data:`BODY_MAX` characters; whoever prints them sanitises them.
* :class:`RefreshThread` calls a refresh function in a daemon thread, never more often than a
  minimum interval it asks for before every wait (the scrape interval: refreshing faster only
  re-reads the same samples), and hands each result or :class:`PromError` to a callback; it can
  be paused, resumed and asked for a refresh now.

Values: Prometheus sends sample values as strings; ``"NaN"``, ``"+Inf"`` and ``"-Inf"`` become
the floats they name (a NaN is a value Prometheus computed, e.g. 0/0, not an absent sample:
absent samples are absent from the answer). Times are Unix seconds (float).
"""

from __future__ import annotations

import datetime
import enum
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import httpx
import numpy as np
import orjson

from bmoe_top.tui.sources.http_client import check_url, make_client

__all__ = [
    "BODY_MAX",
    "PromAlert",
    "decode_alerts",
    "PromErrorKind",
    "PromError",
    "Sample",
    "QueryResult",
    "KeyedResult",
    "RangeSeries",
    "RangeResult",
    "Target",
    "PrometheusClient",
    "RefreshThread",
    "require_series",
    "decode_answer",
    "decode_vector",
    "decode_keyed",
    "decode_matrix",
    "parse_duration",
    "format_duration",
]

#: Longest error body or message kept (characters).
BODY_MAX = 2000


class PromErrorKind(enum.StrEnum):
    """What went wrong talking to Prometheus (module docstring)."""

    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    BAD_DATA = "bad_data"
    EXECUTION = "execution"
    TOO_MANY_SAMPLES = "too_many_samples"
    EMPTY = "empty"
    HTTP = "http"
    MALFORMED = "malformed"
    ERROR = "error"


class PromError(Exception):
    """A failed request or an unusable answer.

    ``kind`` (:class:`PromErrorKind`), ``message`` (one line: Prometheus' ``error`` text, or
    the transport's), ``query`` (the PromQL, when the request carried one), ``http_status``,
    ``error_type`` (Prometheus' ``errorType`` as sent), ``body`` (the raw answer for ``http`` and
    ``malformed``, cut to :data:`BODY_MAX`). Nothing here is sanitised for a terminal."""

    def __init__(self, kind: PromErrorKind, message: str, *, query: str | None = None,
                 http_status: int | None = None, error_type: str | None = None, body: str | None = None):
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind
        self.message = message
        self.query = query
        self.http_status = http_status
        self.error_type = error_type
        self.body = body


class Sample(NamedTuple):
    """One element of an instant vector: its labels (``__name__`` included when Prometheus keeps
    it), the evaluation time ``t`` (Unix s) and the value ``v``. A named tuple: a fleet's answer
    holds one per instance and column, made at the cost of a tuple."""

    labels: Mapping[str, str]
    t: float
    v: float


@dataclass(frozen=True, slots=True)
class QueryResult:
    """An instant query's answer: ``samples`` (a vector; a scalar answer is one sample with no
    labels), ``at`` (the evaluation time asked for, ``None`` = Prometheus' now), ``warnings``."""

    query: str
    at: float | None
    samples: list[Sample]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class KeyedResult:
    """An instant query's answer by key (:meth:`PrometheusClient.query_keyed`): ``values`` (the
    values of the grouping labels -> the sample's value), ``at``, ``warnings``."""

    query: str
    at: float | None
    values: dict[tuple[str, ...], float]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range query: ``labels``, ``t`` and ``v`` (float64 arrays of one length,
    only the steps at which the series had a value; a step without one is missing, not NaN)."""

    labels: Mapping[str, str]
    t: np.ndarray
    v: np.ndarray


@dataclass(frozen=True, slots=True)
class RangeResult:
    """A range query's answer: ``series`` over ``start`` .. ``end`` every ``step`` s."""

    query: str
    start: float
    end: float
    step: float
    series: list[RangeSeries]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Target:
    """An active scrape target (``/api/v1/targets``): its ``labels`` (job, instance, ...),
    ``health`` (``up``/``down``/``unknown``), ``scrape_interval`` and ``scrape_timeout`` (s;
    ``None`` when this Prometheus does not report them), ``last_error``, ``scrape_url``,
    ``scrape_pool``."""

    labels: Mapping[str, str]
    health: str
    scrape_interval: float | None
    scrape_timeout: float | None
    last_error: str
    scrape_url: str
    scrape_pool: str


@dataclass(frozen=True, slots=True)
class PromAlert:
    """A pending or firing alert of Prometheus's rules (``/api/v1/alerts``): ``name`` (its
    ``alertname``), ``state`` (``pending`` / ``firing``), ``labels`` (``alertname`` left out; job,
    instance, severity, ...), ``annotations``, ``value`` (the expression's value when it was last
    evaluated; NaN when not a number) and ``active_at`` (Unix s since the condition holds; None when
    not said). Label values and annotations are as received (a screen sanitises them)."""

    name: str
    state: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    value: float
    active_at: float | None


def decode_alerts(data: Any) -> list[PromAlert]:
    """``/api/v1/alerts``'s ``data`` -> the alerts; :class:`PromError` (``malformed``) for an
    answer of another shape."""
    out = []
    try:
        for e in data["alerts"]:
            labels = {str(k): str(v) for k, v in e.get("labels", {}).items()}
            name = labels.pop("alertname", "")
            active = e.get("activeAt")
            notes = {str(k): str(v) for k, v in e.get("annotations", {}).items()}
            out.append(PromAlert(name, str(e.get("state", "")), labels, notes, _float(e.get("value", "NaN")),
                                 _timestamp(active) if isinstance(active, str) else None))
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise PromError(PromErrorKind.MALFORMED, f"unexpected alerts answer ({type(exc).__name__}: {exc})") from exc
    return out


def _timestamp(text: str) -> float | None:
    """An RFC 3339 time (``2026-12-05T06:01:02.123456789Z``) as Unix s (None when it is not one)."""
    try:
        head, _, frac = text.rstrip("Z").partition(".")
        t = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp()
        return t + (float("0." + frac[:9]) if frac.isdigit() else 0.0)
    except ValueError:
        return None


_DURATION_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: str) -> float:
    """A Prometheus duration (``"1s"``, ``"1m30s"``, ``"500ms"``, ``"2h"``) in seconds.
    Raises ``ValueError`` for anything else (an empty string, a bare number, ``"1.5s"``)."""
    s = text.strip()
    pos = 0
    total = 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return total


def format_duration(seconds: float) -> str:
    """Seconds as a PromQL range duration, rounded up to the millisecond: ``6.0`` -> ``"6s"``,
    ``90`` -> ``"1m30s"``, ``2.5`` -> ``"2s500ms"``. Raises ``ValueError`` unless > 0."""
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"a range duration must be > 0 s, got {seconds!r}")
    ms = math.ceil(round(seconds * 1000.0, 6))
    out = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        n, ms = divmod(ms, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def _cut(text: str) -> str:
    return text if len(text) <= BODY_MAX else text[: BODY_MAX - 1] + "…"


def _float(v: Any) -> float:
    # Prometheus encodes every sample value as a string: "1.5", "NaN", "+Inf", "-Inf".
    if not isinstance(v, str):
        raise TypeError(f"sample value {v!r} is not a string")
    return float(v)


def require_series(result: QueryResult | RangeResult) -> QueryResult | RangeResult:
    """``result`` unchanged when it holds at least one sample or series; else raise
    :class:`PromError` ``empty`` naming the query."""
    n = len(result.samples) if isinstance(result, QueryResult) else len(result.series)
    if n == 0:
        raise PromError(PromErrorKind.EMPTY, "no series match", query=result.query)
    return result


def decode_answer(status_code: int, body: bytes, query: str | None = None) -> tuple[Any, list[str]]:
    """An API answer (HTTP status, body) -> (its ``data``, its ``warnings``), or raise the
    :class:`PromError` it stands for (module docstring: the kinds)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        text = _cut(body.decode("utf-8", "replace"))
        if status_code != 200:
            raise PromError(PromErrorKind.HTTP, f"HTTP {status_code}", query=query, http_status=status_code, body=text)
        raise PromError(PromErrorKind.MALFORMED, "the answer is not a Prometheus API document", query=query,
                        http_status=status_code, body=text)
    if doc["status"] == "error":
        etype = str(doc.get("errorType", ""))
        msg = _cut(str(doc.get("error", "")))
        kind = {"bad_data": PromErrorKind.BAD_DATA, "timeout": PromErrorKind.TIMEOUT,
                "execution": PromErrorKind.EXECUTION}.get(etype, PromErrorKind.ERROR)
        if kind is PromErrorKind.EXECUTION and "too many samples" in msg:
            kind = PromErrorKind.TOO_MANY_SAMPLES
        raise PromError(kind, msg or etype or "error", query=query, http_status=status_code, error_type=etype or None)
    if "data" not in doc:
        raise PromError(PromErrorKind.MALFORMED, "success without data", query=query, http_status=status_code,
                        body=_cut(body.decode("utf-8", "replace")))
    warnings = doc.get("warnings")
    return doc["data"], [str(w) for w in warnings] if isinstance(warnings, list) else []


def _labels(m: Any) -> dict[str, str]:
    # a JSON object's keys are strings: its values are what to check (join refuses a non-string)
    if type(m) is not dict:
        raise TypeError("labels are not a string map")
    "".join(m.values())
    return m


def _malformed(exc: Exception, expr: str) -> PromError:
    return PromError(PromErrorKind.MALFORMED, f"unexpected answer shape ({type(exc).__name__}: {exc})", query=expr)


def decode_vector(data: Any, expr: str = "") -> list[Sample]:
    """An instant query's ``data`` (``vector`` or ``scalar``) -> samples; raises
    :class:`PromError` ``malformed`` for any other shape."""
    try:
        rtype = data["resultType"]
        res = data["result"]
        if rtype == "vector":
            return [Sample(labels=_labels(e["metric"]), t=float(e["value"][0]), v=_float(e["value"][1]))
                    for e in res]
        if rtype == "scalar":
            return [Sample(labels={}, t=float(res[0]), v=_float(res[1]))]
    except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
        raise _malformed(exc, expr) from exc
    raise PromError(PromErrorKind.MALFORMED, f"instant query answered with a {rtype!r}", query=expr)


def decode_keyed(data: Any, by: tuple[str, ...], expr: str = "") -> dict[tuple[str, ...], float]:
    """An instant query's ``data`` (a ``vector``) -> its values by the values of the labels
    ``by`` (``""`` for a label a sample lacks; two samples of one key: the first); raises
    :class:`PromError` ``malformed`` for any other shape."""
    out: dict[tuple[str, ...], float] = {}
    try:
        if data["resultType"] != "vector":
            raise PromError(PromErrorKind.MALFORMED, f"instant query answered with a {data['resultType']!r}",
                            query=expr)
        pair = by == ("job", "instance")
        for e in data["result"]:
            m = e["metric"]
            k = (m.get("job", ""), m.get("instance", "")) if pair else tuple([m.get(b, "") for b in by])
            "".join(k)  # every label value a string
            if k not in out:
                out[k] = _float(e["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise _malformed(exc, expr) from exc
    return out


def decode_matrix(data: Any, expr: str = "") -> list[RangeSeries]:
    """A range query's ``data`` (``matrix``) -> series (times and values as float64 arrays);
    raises :class:`PromError` ``malformed`` for any other shape."""
    try:
        if data["resultType"] != "matrix":
            raise PromError(PromErrorKind.MALFORMED, f"range query answered with a {data['resultType']!r}",
                            query=expr)
        series = []
        for e in data["result"]:
            vals = e["values"]
            if not isinstance(vals, list):
                raise TypeError("values are not a list")
            if vals:
                ts, vs = zip(*vals)  # ValueError unless every point is a [time, value] pair
                t = np.array(ts, dtype=np.float64)
                v = np.array(vs, dtype=np.float64)  # numpy parses "1.5", "NaN", "+Inf", "-Inf"
                if t.ndim != 1 or v.ndim != 1:
                    raise TypeError("values are not [time, value] pairs")
            else:
                t = v = np.empty(0, dtype=np.float64)
            series.append(RangeSeries(labels=_labels(e["metric"]), t=t, v=v))
        return series
    except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
        raise _malformed(exc, expr) from exc


def require_url(url: str) -> None:
    """Raise ``ValueError("Prometheus URL ...: why")`` for a URL :func:`check_url` refuses."""
    problem = check_url(url)
    if problem:
        raise ValueError(f"Prometheus URL {url!r}: {problem}")


class PrometheusClient:
    """Blocking client of one Prometheus server's HTTP API.

    ``url``: the server's base URL (``http://127.0.0.1:9090``, or with a path prefix when it runs
    under ``--web.route-prefix``). ``timeout``: seconds per request (connect + read); it is also
    sent as the query's evaluation ``timeout``, so Prometheus gives up first and says so.
    ``eval_timeout``: the evaluation timeout sent instead (s; default 0.9 x ``timeout``).
    ``api_key``: a bearer token, for a Prometheus behind an authenticating proxy. A loopback URL
    never goes through a proxy; elsewhere the proxy environment is honoured (as the ``/metrics``
    poller does: :func:`~bmoe_top.tui.sources.http_client.make_client`).

    Counters: ``n_requests`` (requests made), ``n_bytes`` (answer bytes received). Not
    thread-safe: one thread talks to one client. Raises :class:`PromError` only; ``ValueError``
    for a URL that cannot be used at all (checked at construction)."""

    def __init__(self, url: str, timeout: float = 10.0, api_key: str | None = None,
                 eval_timeout: float | None = None):
        require_url(url)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 s, got {timeout!r}")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.eval_timeout = float(eval_timeout) if eval_timeout is not None else 0.9 * self.timeout
        self._http, self.proxy_note = make_client(self.url, self.timeout, api_key)
        self._http.headers["Accept"] = "application/json"
        self.n_requests = 0
        self.n_bytes = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------------

    def _request(self, path: str, form: dict[str, str] | None = None, query: str | None = None,
                 params: dict[str, str] | None = None) -> tuple[Any, list[str]]:
        """POST ``form`` (or GET with ``params``) to ``/api/v1/<path>``: the decoded ``data`` and
        the answer's ``warnings``."""
        url = f"{self.url}/api/v1/{path}"
        self.n_requests += 1
        try:
            if form is None:
                r = self._http.get(url, params=params)
            else:
                r = self._http.post(url, data=form)
        except httpx.TimeoutException as exc:
            raise PromError(PromErrorKind.TIMEOUT, f"no answer within {self.timeout:g} s ({type(exc).__name__})",
                            query=query) from exc
        except (httpx.HTTPError, OSError) as exc:
            raise PromError(PromErrorKind.UNREACHABLE, _cut(f"{type(exc).__name__}: {exc}" if str(exc)
                                                            else type(exc).__name__), query=query) from exc
        self.n_bytes += len(r.content)
        return decode_answer(r.status_code, r.content, query)

    def _eval_timeout(self) -> str:
        return format_duration(max(0.001, self.eval_timeout))

    def query(self, expr: str, at: float | None = None) -> QueryResult:
        """Instant query ``expr`` evaluated at ``at`` (Unix s; ``None`` = now).
        Raises :class:`PromError`."""
        form = {"query": expr, "timeout": self._eval_timeout()}
        if at is not None:
            form["time"] = f"{at:.3f}"
        data, warnings = self._request("query", form, query=expr)
        return QueryResult(query=expr, at=at, samples=decode_vector(data, expr), warnings=warnings)

    def query_keyed(self, expr: str, at: float | None, by: tuple[str, ...]) -> KeyedResult:
        """Instant query ``expr`` at ``at``, its values by the values of the labels ``by`` (a
        fleet's column: one value per instance, without a sample object each). Raises
        :class:`PromError`."""
        form = {"query": expr, "timeout": self._eval_timeout()}
        if at is not None:
            form["time"] = f"{at:.3f}"
        data, warnings = self._request("query", form, query=expr)
        return KeyedResult(query=expr, at=at, values=decode_keyed(data, by, expr), warnings=warnings)

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeResult:
        """Range query ``expr`` from ``start`` to ``end`` (Unix s) every ``step`` s, on exactly
        that grid (an ``end`` off the step's multiples asks a store that would round it not to:
        VictoriaMetrics' ``nocache=1``). Raises :class:`PromError` (``bad_data`` when Prometheus
        refuses the resolution)."""
        # the step as a duration: Prometheus truncates a float step to whole milliseconds
        # ("1.009" -> 1008 ms), which would put its points off the grid asked for
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": format_duration(step),
                "timeout": self._eval_timeout()}
        if not _on_step(end, step):
            # VictoriaMetrics moves a range of 50 points or more onto multiples of the step (for
            # its cache) unless told not to; Prometheus ignores the parameter
            form["nocache"] = "1"
        data, warnings = self._request("query_range", form, query=expr)
        return RangeResult(query=expr, start=start, end=end, step=step, series=decode_matrix(data, expr),
                           warnings=warnings)

    def targets(self) -> list[Target]:
        """The active scrape targets. Raises :class:`PromError`."""
        data, _ = self._request("targets", params={"state": "active"})
        out = []
        try:
            for e in data.get("activeTargets", ()):
                out.append(Target(labels=e.get("labels", {}), health=str(e.get("health", "unknown")),
                                  scrape_interval=_opt_duration(e.get("scrapeInterval")),
                                  scrape_timeout=_opt_duration(e.get("scrapeTimeout")),
                                  last_error=str(e.get("lastError", "")), scrape_url=str(e.get("scrapeUrl", "")),
                                  scrape_pool=str(e.get("scrapePool", ""))))
        except (AttributeError, TypeError) as exc:
            raise PromError(PromErrorKind.MALFORMED, f"unexpected targets answer ({exc})") from exc
        return out

    def alerts(self) -> list[PromAlert]:
        """The pending and firing alerts of this Prometheus's rules (``/api/v1/alerts``). Raises
        :class:`PromError` (a store without rules, such as VictoriaMetrics, answers ``http``)."""
        data, _ = self._request("alerts", params={})
        return decode_alerts(data)

    def config_scrape_intervals(self) -> tuple[float | None, dict[str, float]]:
        """The configured scrape intervals from ``/api/v1/status/config``: (global, per job
        name). Prometheus renders its loaded configuration with every job's interval spelled
        out, which is what this reads (a line-based read of that canonical YAML)."""
        data, _ = self._request("status/config")
        yaml = data.get("yaml", "") if isinstance(data, dict) else ""
        if not isinstance(yaml, str):
            raise PromError(PromErrorKind.MALFORMED, "status/config without yaml")
        return _config_intervals(yaml)

    def scrape_interval(self, keys: Iterable[tuple[str, str]] = ()) -> float | None:
        """The longest scrape interval (s) among the active targets whose (job, instance) is in
        ``keys`` (all targets when empty); when none of them reports one, the longest configured
        interval of their jobs, else the global one. ``None`` when nothing says."""
        want = set(keys)
        ivs: list[float] = []
        jobs: set[str] = {j for j, _ in want}
        for t in self.targets():
            key = (t.labels.get("job", ""), t.labels.get("instance", ""))
            if want and key not in want:
                continue
            jobs.add(key[0])
            if t.scrape_interval is not None:
                ivs.append(t.scrape_interval)
        if ivs:
            return max(ivs)
        glob, per_job = self.config_scrape_intervals()
        job_ivs = [per_job[j] for j in jobs if j in per_job]
        return max(job_ivs) if job_ivs else glob


def _on_step(t: float, step: float) -> bool:
    """Whether ``t`` is a multiple of ``step`` (to the millisecond)."""
    ms, step_ms = round(t * 1000.0), math.ceil(round(step * 1000.0, 6))
    return step_ms > 0 and ms % step_ms == 0


def _opt_duration(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        return parse_duration(v)
    except ValueError:
        return None


def _config_intervals(yaml: str) -> tuple[float | None, dict[str, float]]:
    glob: float | None = None
    per_job: dict[str, float] = {}
    section = ""
    job: str | None = None
    for raw in yaml.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if not raw.startswith((" ", "-")):
            section = raw.split(":", 1)[0].strip()
            job = None
            continue
        line = raw.strip().removeprefix("- ").strip()
        key, _, val = line.partition(":")
        val = val.strip().strip("'\"")
        if section == "global" and key == "scrape_interval" and raw.startswith("  ") and not raw.startswith("   "):
            glob = _opt_duration(val)
        elif section == "scrape_configs":
            if key == "job_name" and raw.startswith("- "):
                job = val
            elif key == "scrape_interval" and job is not None and raw.startswith("  ") \
                    and not raw.startswith("   "):
                iv = _opt_duration(val)
                if iv is not None:
                    per_job[job] = iv
    return glob, per_job


T = TypeVar("T")


class RefreshThread(threading.Thread, Generic[T]):
    """Daemon thread: ``on_result(refresh())`` in a loop, or ``on_error(PromError)`` when the
    refresh raised one; any other exception is handed to ``on_error`` too (as
    :class:`PromError` ``error`` naming the exception), never swallowed.

    The wait between the starts of two refreshes is ``max(every, min_interval())`` s, asked
    anew while waiting: ``min_interval`` returns the scrape interval the last refresh learned
    (refreshing faster would only re-read the same samples). ``refresh_now()`` wakes the thread
    for an immediate refresh, still no sooner than ``min_interval()`` after the previous one
    started. ``pause()`` stops the refreshes after the one in progress (``refresh_now()`` still
    makes one), ``resume()`` starts them again; ``paused`` says which. ``stop()`` ends the loop
    within one wait, then ``on_exit()`` runs on the thread (e.g. closing the client the
    refreshes used). ``n_refreshes`` counts refreshes started and ``starts`` keeps their
    monotonic start times (the newest 1,000)."""

    def __init__(self, refresh: Callable[[], T], on_result: Callable[[T], None],
                 on_error: Callable[[PromError], None], every: float = 1.0,
                 min_interval: Callable[[], float | None] = lambda: None,
                 on_exit: Callable[[], None] | None = None):
        super().__init__(name="bmoe-prometheus-refresh", daemon=True)
        self._refresh = refresh
        self._on_result = on_result
        self._on_error = on_error
        self._on_exit = on_exit
        self.every = float(every)
        self._min_interval = min_interval
        self._stop_ev = threading.Event()
        self._wake = threading.Event()
        self._now = False
        self._paused = False
        self.n_refreshes = 0
        self.starts: list[float] = []

    def stop(self) -> None:
        self._stop_ev.set()
        self._wake.set()

    def refresh_now(self) -> None:
        self._now = True
        self._wake.set()

    def pause(self) -> None:
        self._paused = True
        self._wake.set()

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    def _gap(self) -> float:
        floor = self._min_interval() or 0.0
        return max(self.every, floor)

    def _one(self) -> None:
        try:
            res = self._refresh()
        except PromError as exc:
            self._on_error(exc)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, not swallowed
            self._on_error(PromError(PromErrorKind.ERROR, _cut(f"{type(exc).__name__}: {exc}")))
        else:
            self._on_result(res)

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set():
                t0 = time.monotonic()
                self.n_refreshes += 1
                self.starts.append(t0)
                del self.starts[:-1000]
                self._one()
                forced = False
                while not self._stop_ev.is_set():
                    if self._now:
                        self._now = False
                        forced = True  # refresh now, but never faster than the scrape interval
                    if forced:
                        deadline: float | None = t0 + (self._min_interval() or 0.0)
                    else:
                        deadline = None if self._paused else t0 + self._gap()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    if self._wake.wait(left):
                        self._wake.clear()
        finally:
            if self._on_exit is not None:
                self._on_exit()
