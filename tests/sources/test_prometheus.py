"""The Prometheus API client against a real Prometheus on loopback: instant and range queries,
targets and scrape intervals, every error class kept distinct (each from a real cause), and the
refresh thread's floor at the scrape interval."""

from __future__ import annotations

import math
import socket
import threading
import time

import numpy as np
import pytest
from helpers.exporters import StrataMoeExporter
from helpers.prometheus import Prometheus, free_port

from bmoe_top.tui.present.fleet import error_document
from bmoe_top.tui.sources.prometheus import (
    PromError,
    PromErrorKind,
    PrometheusClient,
    RefreshThread,
    require_series,
)


@pytest.fixture(scope="module")
def exporter():
    e = StrataMoeExporter(n_layer=3)
    yield e
    e.close()


@pytest.fixture(scope="module")
def prom(exporter, tmp_path_factory):
    # Two jobs over one target: "sim" every 1 s (global), "slow" every 2 s (its own interval).
    p = Prometheus(tmp_path_factory.mktemp("prom"), {"sim": [exporter.target], "slow": [exporter.target]},
                   job_intervals={"slow": "2s"}, args=["--query.max-samples=5000000"])
    yield p
    p.stop()


@pytest.fixture
def client(prom):
    c = PrometheusClient(prom.url, timeout=30)
    yield c
    c.close()


def test_instant_query_reads_what_the_exporter_serves(prom, exporter, client):
    exporter.generate(40, hits=30, misses=10)
    sel = f'llamacpp:tokens_predicted_total{{job="sim", instance="{exporter.target}"}}'
    prom.wait_value(sel, exporter.values["llamacpp:tokens_predicted_total"])
    res = client.query(sel)
    assert len(res.samples) == 1
    s = res.samples[0]
    assert s.labels["job"] == "sim" and s.labels["instance"] == exporter.target
    assert s.labels["__name__"] == "llamacpp:tokens_predicted_total"
    assert s.v == exporter.values["llamacpp:tokens_predicted_total"]
    assert abs(s.t - time.time()) < 600
    assert client.n_requests == 1 and client.n_bytes > 0


def test_scalar_nan_and_inf_are_values_not_absence(client):
    assert [x.v for x in client.query("1 + 1").samples] == [2.0]
    nan = client.query("vector(0) / 0").samples
    assert len(nan) == 1 and math.isnan(nan[0].v)
    assert client.query("vector(1) / 0").samples[0].v == math.inf
    assert client.query("vector(-1) / 0").samples[0].v == -math.inf


def test_evaluation_time_is_the_one_asked(client):
    at = time.time() - 3.25
    res = client.query("time()", at=at)
    assert res.samples[0].v == pytest.approx(at, abs=0.002)


def test_range_query_on_the_asked_grid(prom, exporter, client):
    sel = f'up{{job="sim", instance="{exporter.target}"}}'
    prom.wait_for(f"count_over_time({sel}[1m])", lambda r: bool(r) and r[0][1] >= 6, "6 scrapes")
    end = prom.wait_sample_after(sel, time.time())
    start = end - 4.0
    res = client.query_range(sel, start, end, 1.0)
    assert len(res.series) == 1
    s = res.series[0]
    assert s.t.dtype == np.float64 and s.v.dtype == np.float64
    np.testing.assert_allclose(s.t, start + np.arange(s.t.size), atol=1e-3)
    assert s.t.size == 5 and set(s.v.tolist()) == {1.0}
    # a step that is not a whole second lands exactly on the asked grid too
    odd = client.query_range(sel, start, end, 1.009).series[0]
    np.testing.assert_allclose(odd.t, start + 1.009 * np.arange(odd.t.size), atol=1e-3)


def test_targets_and_scrape_intervals(prom, exporter, client):
    targets = client.targets()
    by_job = {t.labels["job"]: t for t in targets}
    assert set(by_job) == {"sim", "slow"}
    assert by_job["sim"].scrape_interval == 1.0 and by_job["slow"].scrape_interval == 2.0
    assert by_job["sim"].scrape_url == f"http://{exporter.target}/metrics"
    assert by_job["sim"].health in ("up", "unknown")
    glob, per_job = client.config_scrape_intervals()
    assert glob == 1.0 and per_job == {"sim": 1.0, "slow": 2.0}
    assert client.scrape_interval({("sim", exporter.target)}) == 1.0
    assert client.scrape_interval({("slow", exporter.target)}) == 2.0
    assert client.scrape_interval() == 2.0  # all targets: the longest
    # a job no target belongs to (federated series, say): its configured interval, else the global one
    assert client.scrape_interval({("slow", "elsewhere:1")}) == 2.0
    assert client.scrape_interval({("nobody", "elsewhere:1")}) == 1.0


def _err(fn, *a, **kw) -> PromError:
    with pytest.raises(PromError) as ei:
        fn(*a, **kw)
    return ei.value


def test_bad_selector_is_bad_data_with_the_query(client):
    q = "up{job=bmoe}"
    e = _err(client.query, q)
    assert e.kind is PromErrorKind.BAD_DATA and e.error_type == "bad_data" and e.http_status == 400
    assert e.query == q and "parse error" in e.message


def test_too_fine_a_resolution_is_bad_data(client):
    now = time.time()
    e = _err(client.query_range, "up", now - 3600, now, 0.1)
    assert e.kind is PromErrorKind.BAD_DATA and "11,000 points" in e.message


def test_many_to_many_match_is_an_execution_error(client):
    e = _err(client.query, "up / on() up")  # two up series (two jobs) on one side
    assert e.kind is PromErrorKind.EXECUTION and e.http_status == 422 and "many-to-many" in e.message


def test_too_many_samples_is_its_own_kind(client):
    e = _err(client.query, "count_over_time(vector(1)[3h:1ms])")  # 10.8 M > --query.max-samples
    assert e.kind is PromErrorKind.TOO_MANY_SAMPLES and e.error_type == "execution"
    assert "too many samples" in e.message


def test_prometheus_timeout_is_timeout(prom):
    with PrometheusClient(prom.url, timeout=60, eval_timeout=0.001) as c:
        now = time.time()
        e = _err(c.query_range, "sum_over_time(vector(1)[10s:1ms])", now - 3000, now, 1)
    assert e.kind is PromErrorKind.TIMEOUT and e.error_type == "timeout" and e.http_status == 503


def test_client_timeout_is_timeout():
    # a real listening socket that never answers
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        with PrometheusClient(f"http://127.0.0.1:{s.getsockname()[1]}", timeout=0.5) as c:
            e = _err(c.query, "up")
    assert e.kind is PromErrorKind.TIMEOUT and e.error_type is None and e.query == "up"


def test_closed_port_is_unreachable():
    with PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=5) as c:
        e = _err(c.query, "up")
    assert e.kind is PromErrorKind.UNREACHABLE and "Connect" in e.message


def test_wrong_path_is_http_with_its_body(prom):
    with PrometheusClient(prom.url + "/not-prometheus", timeout=10) as c:
        e = _err(c.query, "up")
    assert e.kind is PromErrorKind.HTTP and e.http_status == 404 and "404 page not found" in (e.body or "")


def test_an_exporter_is_not_a_prometheus(exporter):
    with PrometheusClient(exporter.url, timeout=10) as c:
        e = _err(c.query, "up")
    assert e.kind is PromErrorKind.MALFORMED and e.http_status == 200
    assert "llamacpp:tokens_predicted_total" in (e.body or "")


def test_empty_result_is_empty_when_a_series_is_required(client):
    res = client.query('up{job="no-such-job"}')
    assert res.samples == []
    e = _err(require_series, res)
    assert e.kind is PromErrorKind.EMPTY and e.query == 'up{job="no-such-job"}'
    now = time.time()
    e = _err(require_series, client.query_range('up{job="no-such-job"}', now - 10, now, 1))
    assert e.kind is PromErrorKind.EMPTY


def test_error_kinds_as_json(client):
    d = error_document(_err(client.query, "up{"))
    assert d["kind"] == "bad_data" and d["query"] == "up{" and d["http_status"] == 400


def test_unusable_url_is_refused_at_construction():
    with pytest.raises(ValueError, match="scheme"):
        PrometheusClient("ftp://x")
    with pytest.raises(ValueError):
        PrometheusClient("http://127.0.0.1:9", timeout=0)


def test_refresh_thread_never_faster_than_the_scrape_interval(prom, exporter):
    client = PrometheusClient(prom.url, timeout=30)
    interval = client.scrape_interval({("sim", exporter.target)})
    assert interval == 1.0
    results: list[float] = []
    errors: list[PromError] = []
    done = threading.Event()

    def refresh() -> float:
        return client.query("up").samples[0].v

    def on_result(v: float) -> None:
        results.append(v)
        if len(results) >= 4:
            done.set()

    th = RefreshThread(refresh, on_result, errors.append, every=0.0, min_interval=lambda: interval)
    th.start()
    try:
        while not done.wait(0.05):
            th.refresh_now()  # asking for more never beats the floor
            assert th.is_alive()
    finally:
        th.stop()
        th.join(30)
        client.close()
    assert not errors and results
    gaps = np.diff(th.starts)
    assert gaps.size >= 3 and gaps.min() >= interval - 1e-3


def test_refresh_thread_hands_over_every_failure():
    got: list[PromError] = []
    done = threading.Event()
    calls = iter([PromError(PromErrorKind.UNREACHABLE, "gone"), RuntimeError("bug")])

    def refresh() -> None:
        raise next(calls)

    def on_error(e: PromError) -> None:
        got.append(e)
        if len(got) == 2:
            done.set()

    th = RefreshThread(refresh, lambda _r: None, on_error, every=0.0, min_interval=lambda: 0.01)
    th.start()
    assert done.wait(60)
    th.stop()
    th.join(30)
    assert [e.kind for e in got[:2]] == [PromErrorKind.UNREACHABLE, PromErrorKind.ERROR]
    assert "RuntimeError: bug" in got[1].message


def test_refresh_thread_pauses_resumes_and_refreshes_on_request():
    entered = threading.Semaphore(0)
    go = threading.Semaphore(0)
    exited = threading.Event()

    def refresh() -> int:
        entered.release()
        assert go.acquire(timeout=60)
        return 1

    th = RefreshThread(refresh, lambda _r: None, lambda _e: None, every=0.0, min_interval=lambda: 0.0,
                       on_exit=exited.set)
    th.start()
    assert entered.acquire(timeout=60)  # the first refresh is in progress
    th.pause()
    assert th.paused
    go.release()
    assert not entered.acquire(timeout=0.5)  # paused: no other refresh starts
    th.refresh_now()  # one refresh on request, still paused after it
    assert entered.acquire(timeout=60)
    go.release()
    assert not entered.acquire(timeout=0.5) and th.n_refreshes == 2
    th.resume()
    assert entered.acquire(timeout=60)
    th.stop()
    go.release()
    assert exited.wait(60)  # on_exit runs when the loop ends
    th.join(30)
    assert not th.is_alive() and th.n_refreshes == 3
