"""tui/sources/metrics_poll.py against real HTTP servers on loopback (stdlib http.server):
states (refused, unreachable, busy with /health answering, server error, 501 disabled with the
hint whole), backoff and the retry countdown, scrape now, api key, JSON-quoted bodies, proxies
and a malformed NO_PROXY."""

from __future__ import annotations

import socket
import time

import orjson
import pytest
from helpers.scripted_http import Scripted, exposition
from helpers.waits import until

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.metrics import metrics_document, status_parts
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def test_ok_rates_then_restart_baseline(srv):
    srv.answers = [(200, exposition(100, 100, 10).encode(), 0), (200, exposition(190, 110, 30).encode(), 0),
                   (200, exposition(5, 5, 1).encode(), 0), (200, exposition(35, 15, 11).encode(), 0)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=2)
    run = bind(p, RunModel()).run
    p.scrape_once()
    assert p.state.status == "ok" and metrics_document(run)["rates"] is None
    time.sleep(0.05)  # not a wait: the clock moves between two scrapes (a rate needs it)
    d = p.scrape_once()
    assert d.hit_pct == pytest.approx(90.0) and d.tok_s > 0 and not d.reset
    d = p.scrape_once()
    assert d.reset and d.tok_s is None  # restart: new baseline, no negative rate
    d = p.scrape_once()
    assert not d.reset and d.hit_pct == pytest.approx(75.0)
    s = metrics_document(run)
    assert s["restarts"] == 1 and s["totals"]["hits"] == 35
    assert "llamacpp:moe_cache_swaps_total" in s["not_exported"]
    assert s["totals"].get("swaps") is None
    p.client.close()


def test_failure_states_are_distinct(srv):
    srv.answers = [(401, b"unauthorized", 0), (403, b"forbidden", 0), (404, b"not found", 0),
                   (200, b"<html>oops</html>", 0), (503, b"loading model", 0)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=2)
    p.scrape_once()
    assert p.state.status == "unauthorized" and p.state.http_status == 401
    p.scrape_once()
    assert p.state.status == "unauthorized" and p.state.http_status == 403
    p.scrape_once()
    assert p.state.status == "http_error" and p.state.detail == "HTTP 404 Not Found: not found"
    p.scrape_once()
    assert p.state.status == "malformed" and "no sample line" in p.state.detail
    p.scrape_once()
    assert p.state.status == "server_error" and "503" in p.state.detail and "loading model" in p.state.detail
    assert p.next_wait() == pytest.approx(0.05)  # the first failure: the interval
    p.client.close()
    dead = MetricsPoller(f"http://127.0.0.1:{free_port()}/metrics", interval=0.05, timeout=1)
    dead.scrape_once()
    assert dead.state.status == "refused" and "refused" in dead.state.detail
    dead.scrape_once()
    dead.scrape_once()
    assert dead.next_wait() == pytest.approx(0.2)  # backoff doubles while down
    dead.client.close()


def test_unresolvable_host_is_unreachable():
    p = MetricsPoller("http://bmoe-top-no-such-host.invalid:9/metrics", interval=0.05, timeout=2)
    p.scrape_once()
    assert p.state.status == "unreachable" and "cannot connect" in p.state.detail
    p.client.close()


def test_read_timeout_while_health_answers_is_busy_and_keeps_the_values(srv):
    # the server sleeps 1.5 s on the second /metrics, longer than the 0.3 s timeout; /health answers
    srv.answers = [(200, exposition(10, 10, 5).encode(), 0), (200, exposition(1, 1, 1).encode(), 1.5)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=0.3)
    run = bind(p, RunModel()).run
    p.scrape_once()
    assert p.state.status == "ok"
    p.scrape_once()
    assert p.state.status == "busy" and "/health answers" in p.state.detail
    assert run.status == "busy" and run.status.live
    assert p.state.last is not None and p.state.last.values["hits"] == 10  # the last values stay
    assert p.state.stale_s() is not None and p.state.stale_s() >= 0.3  # aged from the last good scrape
    assert p.next_wait() == pytest.approx(0.05)  # a busy server is asked again every interval, no backoff
    doc = metrics_document(run)
    assert doc["status"] == "busy" and doc["totals"]["hits"] == 10 and doc["stale_s"] >= 0.3
    line = "".join(t for t, _k in status_parts(doc))  # the status line says it, not "unreachable"
    assert line.startswith("◔ busy  metrics stale for ") and " s (the last values are kept)" in line
    assert "/health answers" in line and "unreachable" not in line
    p.client.close()


def test_read_timeout_without_health_is_unreachable(srv):
    srv.health = None  # /health is scripted like /metrics: it too stalls past the timeout
    srv.answers = [(200, exposition(1, 1, 1).encode(), 1.5), (200, b"ok", 1.5)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=0.3)
    p.scrape_once()
    assert p.state.status == "unreachable" and "/health does not answer" in p.state.detail
    p.client.close()


def test_501_without_metrics_is_its_own_state_with_the_hint_whole(srv):
    hint = ("This server does not support metrics endpoint. Start it with `--metrics`. "
            "And here is a much longer explanation that goes past eighty characters of text.")
    body = orjson.dumps({"error": {"code": 501, "message": hint, "type": "not_supported_error"}})
    srv.answers = [(501, body, 0)] * 3
    p = MetricsPoller(srv.url, interval=0.05, timeout=2)
    run = bind(p, RunModel()).run
    for _ in range(3):
        p.scrape_once()
    assert p.state.status == "disabled" and p.state.http_status == 501
    assert p.state.detail == f"HTTP 501: {hint}"  # whole, not cut at 80 characters
    assert run.status == "disabled" and hint in run.status_detail
    assert p.next_wait() == pytest.approx(0.05)  # no 30 s backoff
    p.client.close()


def test_retry_countdown_counts_down():
    p = MetricsPoller(f"http://127.0.0.1:{free_port()}/metrics", interval=2.0, timeout=1)
    p.scrape_once()
    first = p.state.retry_in()
    assert first is not None and 0 < first <= 2.0
    later = p.state.retry_in(now=time.monotonic() + 1.5)
    assert later is not None and later < first and later <= 0.5
    assert p.state.retry_in(now=time.monotonic() + 10) == 0.0
    p.client.close()


def test_scrape_now_wakes_the_thread(srv):
    # a long interval: only scrape_now() can bring a second scrape
    p = MetricsPoller(srv.url, interval=600, timeout=2)
    p.start()
    try:
        assert until(lambda: p.state.n_ok >= 1)
        p.scrape_now()
        assert until(lambda: p.state.n_ok >= 2)
    finally:
        p.stop()
        p.join(5)
    assert not p.is_alive()

def test_api_key_sent_as_bearer(srv):
    p = MetricsPoller(srv.url, interval=0.05, api_key="s3cret")
    p.scrape_once()
    assert srv.seen[-1]["auth"] == "Bearer s3cret"
    p.client.close()


def test_json_quoted_body_flagged(srv):
    srv.answers = [(200, orjson.dumps(exposition(7, 3, 2)), 0)]
    p = MetricsPoller(srv.url)
    run = bind(p, RunModel()).run
    p.scrape_once()
    assert p.state.status == "ok" and p.state.json_quoted
    assert "JSON-quoted" in p.state.detail
    assert metrics_document(run)["totals"]["hits"] == 7
    p.client.close()


def test_thread_one_request_in_flight_and_stops(srv):
    # slow answers and a short interval: the poller never overlaps requests
    srv.default = (200, exposition(1, 1, 1).encode(), 0.15)
    p = MetricsPoller(srv.url, interval=0.01, timeout=10)
    st = p.state
    p.start()
    assert until(lambda: st.n_ok >= 3)
    p.stop()
    p.join(2)
    assert not p.is_alive()
    assert srv.max_inflight == 1 and st.n_ok >= 3


def test_loopback_never_uses_proxy_even_with_malformed_no_proxy(srv, monkeypatch):
    proxy = Scripted()  # a "proxy" that would answer anything; it must see no request
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "http://[::1,foo:bar:baz")
        srv.answers = [(200, exposition(2, 2, 2).encode(), 0)]
        for host in ("127.0.0.1", "localhost"):
            p = MetricsPoller(srv.url.replace("127.0.0.1", host))
            p.scrape_once()
            p.client.close()
            assert p.state.status == "ok", p.state.detail
        assert proxy.seen == []
    finally:
        proxy.close()


def test_remote_host_malformed_no_proxy_does_not_crash_and_uses_proxy(monkeypatch):
    proxy = Scripted()
    proxy.default = (200, exposition(9, 1, 4).encode(), 0)
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "foo:bar:baz,.internal.example")
        p = MetricsPoller("http://metrics.example.invalid:8080/metrics", timeout=2)
        assert "NO_PROXY entries ignored: foo:bar:baz" in p.state.proxy_note
        p.scrape_once()
        p.client.close()
        assert p.state.status == "ok", p.state.detail
        assert proxy.seen and proxy.seen[0]["path"] == "http://metrics.example.invalid:8080/metrics"
        # a host the valid entries exempt goes direct (and here fails: no such host)
        monkeypatch.setenv("NO_PROXY", "foo:bar:baz,.example.invalid")
        p2 = MetricsPoller("http://metrics.example.invalid:8080/metrics", timeout=1)
        assert "connecting directly" in p2.state.proxy_note
        n = len(proxy.seen)
        p2.scrape_once()
        p2.client.close()
        assert p2.state.status == "unreachable" and len(proxy.seen) == n
    finally:
        proxy.close()


@pytest.mark.parametrize("url,needle", [("foo", "scheme"), ("http://[::1", "not a valid URL"),
                                        ("ftp://x/metrics", "ftp"), ("http:///metrics", "no host"), ("", "empty")])
def test_bad_url_is_a_clear_error_and_no_request(url, needle):
    from bmoe_top.tui.headless import exit_code, metrics_once

    p = MetricsPoller(url)
    assert p.scrape_once() is None and p.n_requests == 0
    assert p.state.status == "error" and needle in p.state.detail
    p.start()
    p.join(2)
    assert not p.is_alive()  # the thread ends at once for an unusable URL
    d = metrics_once(url)
    assert d["status"] == "error" and exit_code(d) == 1
