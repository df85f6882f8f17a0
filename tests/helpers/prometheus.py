"""A real Prometheus server, and a real VictoriaMetrics, on loopback for the fleet tests
(Debian's ``prometheus`` and ``victoria-metrics`` packages).

:class:`Prometheus` writes a config that scrapes the given targets every ``interval`` (scrape
timeout = interval, no rule files; optionally ``external_labels``, labels per job's targets, and
a ``remote_write`` URL), starts ``prometheus`` on a free loopback port with a temporary TSDB
directory and a short retention, waits until its HTTP API answers and every target has its
first ``up`` sample (about 5-6 s after start even at 1 s: it is waited for on the API, never
slept), and stops it (``stop()``, or as a context manager). :class:`VictoriaMetrics` is a
single-node VictoriaMetrics (the long-term store several Prometheus servers ``remote_write``
into; it answers the same query API) with its ``/api/v1/import`` for generated data. The
``wait_*`` helpers poll ``/api/v1/query`` until a condition holds, with a generous overall
timeout: the fleet tests wait on what the store holds, never on a duration.

The queries here go through plain httpx, not through the code under test.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from .procs import stop_process

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
VICTORIA = shutil.which("victoria-metrics")

#: Overall limit of one wait (s): a loaded machine may be slow, a hang must still end.
WAIT_S = 120.0


def need_prometheus() -> str:
    """The prometheus binary, or skip the test."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    return PROMETHEUS


def need_victoria() -> str:
    """The victoria-metrics binary, or skip the test."""
    if VICTORIA is None:
        pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics; .ci/run does)")
    return VICTORIA


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, so a killed test run
    never leaves a Prometheus behind (Linux ``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flow(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in labels.items()) + "}"


def write_config(path: Path, jobs: Mapping[str, Sequence[str]], interval: str = "1s",
                 job_intervals: Mapping[str, str] | None = None, external_labels: Mapping[str, str] | None = None,
                 remote_write: str | None = None, target_labels: Mapping[str, Mapping[str, str]] | None = None,
                 rule_files: Sequence[Path] = ()) -> None:
    """A scrape config: one job per ``jobs`` key with static ``host:port`` targets, every
    ``interval`` unless ``job_intervals`` gives the job its own; ``external_labels`` (added to
    every sample it sends away), ``remote_write`` (a URL every sample is also sent to),
    ``target_labels`` (target -> labels of that target, e.g. its ``instance``), ``rule_files``
    (alerting rules, evaluated every ``interval``)."""
    lines = ["global:", f"  scrape_interval: {interval}", f"  scrape_timeout: {interval}",
             f"  evaluation_interval: {interval}"]
    if external_labels:
        lines += [f"  external_labels: {_flow(external_labels)}"]
    if rule_files:
        lines += ["rule_files:"] + [f"  - {str(f)!r}" for f in rule_files]
    if remote_write:
        # a small batch deadline: the store sees each sample within about a second
        lines += ["remote_write:", f"  - url: {remote_write!r}", "    queue_config: {batch_send_deadline: 500ms}"]
    lines += ["scrape_configs:"]
    for job, targets in jobs.items():
        lines += [f"  - job_name: {job!r}"]
        if job_intervals and job in job_intervals:
            lines += [f"    scrape_interval: {job_intervals[job]}", f"    scrape_timeout: {job_intervals[job]}"]
        lines += ["    static_configs:"]
        for t in targets:
            lines += [f"      - targets: [{t!r}]"]
            if target_labels and t in target_labels:
                lines += [f"        labels: {_flow(target_labels[t])}"]
    if not jobs:
        lines[-1] = "scrape_configs: []"
    path.write_text("\n".join(lines) + "\n")


class Store:
    """The query API of a running store (``url``, ``proc``, ``log``, ``http`` set by the
    subclass), independent of the code under test."""

    url: str
    proc: subprocess.Popen[bytes] | None
    log: Path
    http: httpx.Client

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float, float]]:
        """(labels, value, sample time) of an instant query's vector; raises on an error answer."""
        form = {"query": expr}
        if at is not None:
            form["time"] = f"{at:.3f}"
        r = self.http.post(self.url + "/api/v1/query", data=form)
        doc = r.json()
        if doc.get("status") != "success":
            raise AssertionError(f"{expr}: {doc}")
        res = doc["data"]["result"]
        if doc["data"]["resultType"] == "scalar":
            return [({}, float(res[1]), float(res[0]))]
        return [(e["metric"], float(e["value"][1]), float(e["value"][0])) for e in res]

    def raw(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """The stored samples of a range-vector selector (``metric{...}[30s]``) at ``at``."""
        r = self.http.post(self.url + "/api/v1/query", data={"query": expr, "time": f"{at:.3f}"})
        doc = r.json()
        assert doc.get("status") == "success", doc
        return [(e["metric"], [(float(t), float(v)) for t, v in e["values"]]) for e in doc["data"]["result"]]

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return res[0][1] if res else None

    def wait_for(self, expr: str, cond: Callable[[list[tuple[dict[str, str], float]]], bool],
                 what: str = "", timeout: float = WAIT_S) -> list[tuple[dict[str, str], float]]:
        """Poll ``expr`` until ``cond([(labels, value), ...])`` holds; the last answer."""
        t0 = time.monotonic()
        last: Any = None
        while time.monotonic() - t0 < timeout:
            assert self.proc is not None and self.proc.poll() is None, f"{type(self).__name__} exited:\n" + \
                self.log.read_text(errors="replace")[-2000:]
            try:
                last = [(m, v) for m, v, _t in self.query(expr)]
                if cond(last):
                    return last
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what or expr}; last answer {last}")

    def wait_value(self, expr: str, value: float, what: str = "") -> None:
        """Until ``expr`` (one series) equals ``value``."""
        self.wait_for(expr, lambda r: len(r) == 1 and r[0][1] == value, what or f"{expr} == {value}")

    def wait_sample_after(self, selector: str, t: float, what: str = "") -> float:
        """Until the newest stored sample of ``selector`` (one series) is later than ``t``
        (Unix s); its time."""
        r = self.wait_for(f"timestamp({selector})", lambda r: len(r) == 1 and r[0][1] > t,
                          what or f"a sample of {selector} after {t:.3f}")
        return r[0][1]

    def _wait_ready(self, path: str) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < WAIT_S:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                if self.http.get(self.url + path).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return False

    def _launch(self, cmd: Sequence[str]) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(list(cmd), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)

    def _kill(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def stop(self) -> None:
        self._kill()
        self.http.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Prometheus(Store):
    """``prometheus`` scraping ``jobs`` (job name -> ``host:port`` targets) every ``interval``.

    ``tmp``: a directory of its own (config, TSDB, log). ``job_intervals``: per-job scrape
    intervals. ``args``: extra flags
    (``--query.max-samples=...``). ``data``: an existing TSDB directory to serve instead
    (``promtool tsdb create-blocks-from``). ``external_labels``, ``remote_write``,
    ``target_labels``, ``rule_files``: as :func:`write_config`. ``url`` once started."""

    def __init__(self, tmp: Path, jobs: Mapping[str, Sequence[str]], interval: str = "1s",
                 args: Sequence[str] = (), data: Path | None = None, wait_up: bool = True,
                 job_intervals: Mapping[str, str] | None = None, external_labels: Mapping[str, str] | None = None,
                 remote_write: str | None = None, target_labels: Mapping[str, Mapping[str, str]] | None = None,
                 rule_files: Sequence[Path] = ()):
        self.binary = need_prometheus()
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.jobs = {k: list(v) for k, v in jobs.items()}
        self.config = self.tmp / "prometheus.yml"
        write_config(self.config, self.jobs, interval, job_intervals, external_labels, remote_write, target_labels,
                     rule_files)
        self.data = data if data is not None else self.tmp / "tsdb"
        self.log = self.tmp / "prometheus.log"
        self.proc = None
        self.http = httpx.Client(trust_env=False, timeout=30.0)
        for attempt in range(3):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._launch([self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
                          "--storage.tsdb.retention.time=2h", f"--web.listen-address=127.0.0.1:{self.port}",
                          "--log.level=warn", *args])
            if self._wait_ready("/-/ready"):
                break
            self._kill()
            if "address already in use" not in self.log.read_text(errors="replace") or attempt == 2:
                raise AssertionError("prometheus did not start:\n" + self.log.read_text(errors="replace")[-3000:])
        if wait_up:
            n = sum(len(t) for t in self.jobs.values())
            if n:
                self.wait_for("count(up)", lambda r: bool(r) and r[0][1] >= n, what=f"first up of {n} targets")


class VictoriaMetrics(Store):
    """A single-node ``victoria-metrics`` on a free loopback port (``tmp``: its data and log):
    the store several Prometheus servers ``remote_write`` into (:attr:`write_url`), answering
    the Prometheus query API at ``url``. Started with ``-search.latencyOffset=1s`` (by default
    it hides the newest 30 s of samples from range queries, for samples still in flight; with a
    1 s scrape remote-written within a second, 1 s is enough) and ``args`` (more flags)."""

    def __init__(self, tmp: Path, args: Sequence[str] = ()):
        self.binary = need_victoria()
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.log = self.tmp / "victoria-metrics.log"
        self.proc = None
        self.http = httpx.Client(trust_env=False, timeout=120.0)
        for attempt in range(3):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._launch([self.binary, f"-storageDataPath={self.tmp / 'data'}",
                          f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=100y",
                          "-search.latencyOffset=1s", "-loggerLevel=ERROR", *args])
            if self._wait_ready("/health"):
                break
            self._kill()
            if "address already in use" not in self.log.read_text(errors="replace") or attempt == 2:
                raise AssertionError("victoria-metrics did not start:\n" +
                                     self.log.read_text(errors="replace")[-3000:])

    @property
    def write_url(self) -> str:
        """Where Prometheus' ``remote_write`` sends samples."""
        return self.url + "/api/v1/write"

    def import_jsonl(self, body: bytes | Iterable[bytes]) -> None:
        """Samples in VictoriaMetrics' JSON line format (``{"metric": {...}, "values": [...],
        "timestamps": [ms...]}`` per line) into the store, searchable when this returns."""
        r = self.http.post(self.url + "/api/v1/import", content=body)
        assert r.status_code == 204, (r.status_code, r.text[:2000])
        r = self.http.get(self.url + "/internal/force_flush")
        assert r.status_code == 200, (r.status_code, r.text[:2000])


def need_promtool() -> str:
    """The promtool binary (Debian's prometheus package ships it), or skip the test."""
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (apt-get install prometheus ships it; .ci/run does)")
    return PROMTOOL


def wait_alert(store: Store, name: str, state: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Poll ``/api/v1/alerts`` until the alert ``name`` (with ``labels``) is in ``state``
    (``pending`` / ``firing``), within :data:`WAIT_S`; the alert as the API says it."""
    t0 = time.monotonic()
    last: Any = None
    while time.monotonic() - t0 < WAIT_S:
        assert store.proc is not None and store.proc.poll() is None, "the store exited"
        try:
            last = store.http.get(store.url + "/api/v1/alerts").json()["data"]["alerts"]
        except (httpx.HTTPError, ValueError, KeyError):
            last = None
        for a in last or ():
            if a["labels"].get("alertname") == name and a["state"] == state and \
                    all(a["labels"].get(k) == v for k, v in (labels or {}).items()):
                return dict(a)
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {name} {state}; last answer {last}")


def wait_table(session: Any, cond: Callable[[Any], bool], what: str) -> Any:
    """Refresh a ``FleetSession`` until ``cond(table)`` holds, within :data:`WAIT_S` (the machine
    may be loaded); AssertionError naming ``what`` and the last rows' keys and states."""
    t0 = time.monotonic()
    table = None
    while time.monotonic() - t0 < WAIT_S:
        table = session.refresh()
        if cond(table):
            return table
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last rows: "
                         f"{[(r.key, r.state.value) for r in table.rows] if table else None}")
