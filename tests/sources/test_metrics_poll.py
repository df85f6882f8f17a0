"""tui/sources/metrics_poll.py against real HTTP servers on loopback (stdlib http.server):
states, backoff, api key, JSON-quoted bodies, proxies and a malformed NO_PROXY."""

from __future__ import annotations

import socket
import time

import orjson
import pytest
from helpers.scripted_http import Scripted, exposition

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.metrics import metrics_document
from bmoe_top.tui.sources.metrics_poll import MetricsPoller, _no_proxy_match, is_loopback_host, make_client


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
    assert p.state.status == "ok" and metrics_document(p.state, run)["rates"] is None
    time.sleep(0.05)
    d = p.scrape_once()
    assert d.hit_pct == pytest.approx(90.0) and d.tok_s > 0 and not d.reset
    d = p.scrape_once()
    assert d.reset and d.tok_s is None  # restart: new baseline, no negative rate
    d = p.scrape_once()
    assert not d.reset and d.hit_pct == pytest.approx(75.0)
    s = metrics_document(p.state, run)
    assert s["restarts"] == 1 and s["totals"]["hits"] == 35
    assert "llamacpp:moe_cache_swaps_total" in s["not_exported"]
    assert s["totals"].get("swaps") is None
    p.client.close()


def test_three_failure_states_are_distinct(srv):
    srv.answers = [(401, b"unauthorized", 0), (403, b"forbidden", 0), (404, b"not found", 0),
                   (200, b"<html>oops</html>", 0), (503, b"loading model", 0)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=2)
    p.scrape_once()
    assert p.state.status == "unauthorized" and p.state.http_status == 401
    p.scrape_once()
    assert p.state.status == "unauthorized" and p.state.http_status == 403
    p.scrape_once()
    assert p.state.status == "malformed" and "404" in p.state.detail
    p.scrape_once()
    assert p.state.status == "malformed" and "no sample line" in p.state.detail
    p.scrape_once()
    assert p.state.status == "unreachable" and "503" in p.state.detail
    p.client.close()
    dead = MetricsPoller(f"http://127.0.0.1:{free_port()}/metrics", interval=0.05, timeout=1)
    dead.scrape_once()
    assert dead.state.status == "unreachable"
    dead.scrape_once()
    dead.scrape_once()
    assert dead.next_wait() == pytest.approx(0.2)  # backoff doubles while unreachable
    dead.client.close()


def test_timeout_is_unreachable(srv):
    srv.answers = [(200, exposition(1, 1, 1).encode(), 1.5)]
    p = MetricsPoller(srv.url, interval=0.05, timeout=0.3)
    p.scrape_once()
    assert p.state.status == "unreachable" and "timeout" in p.state.detail
    p.client.close()


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
    assert metrics_document(p.state, run)["totals"]["hits"] == 7
    p.client.close()


def test_thread_one_request_in_flight_and_stops(srv):
    # slow answers and a short interval: the poller never overlaps requests
    srv.default = (200, exposition(1, 1, 1).encode(), 0.15)
    p = MetricsPoller(srv.url, interval=0.01, timeout=2)
    st = p.state
    p.start()
    time.sleep(0.8)
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


def test_helpers():
    assert is_loopback_host("127.0.0.5") and is_loopback_host("::1") and is_loopback_host("[::1]")
    assert is_loopback_host("LocalHost") and not is_loopback_host("10.0.0.1")
    assert _no_proxy_match("a.b.example", ".example")[0]
    assert _no_proxy_match("10.1.2.3", "10.0.0.0/8")[0]
    assert _no_proxy_match("x", "*")[0]
    hit, bad = _no_proxy_match("x.org", "foo:bar, ,[zz]:1")
    assert not hit and bad == ["foo:bar", "[zz]:1"]
    c, note = make_client("http://127.0.0.1:1/metrics", 1.0)
    assert note == ""
    c.close()


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
