"""The HTTP client policy (tui/sources/http_client.py): which URLs are usable, loopback never
through a proxy, a malformed proxy environment tolerated; the poller and the Prometheus client
decide alike because both ask it."""

from __future__ import annotations

import pytest

from bmoe_top.tui.sources.http_client import _no_proxy_match, check_url, is_loopback_host, make_client
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.prometheus import PrometheusClient


def test_loopback_hosts() -> None:
    assert is_loopback_host("127.0.0.5") and is_loopback_host("::1") and is_loopback_host("[::1]")
    assert is_loopback_host("LocalHost") and is_loopback_host("a.localhost")
    assert not is_loopback_host("10.0.0.1") and not is_loopback_host("example.org")


def test_no_proxy_matching_keeps_the_entries_it_understands() -> None:
    assert _no_proxy_match("a.b.example", ".example")[0]
    assert _no_proxy_match("10.1.2.3", "10.0.0.0/8")[0]
    assert _no_proxy_match("x", "*")[0]
    hit, bad = _no_proxy_match("x.org", "foo:bar, ,[zz]:1")
    assert not hit and bad == ["foo:bar", "[zz]:1"]


@pytest.mark.parametrize("url,needle", [("foo", "scheme"), ("http://[::1", "not a valid URL"),
                                        ("ftp://x/metrics", "ftp"), ("http:///metrics", "no host"), ("", "empty")])
def test_check_url_says_why(url: str, needle: str) -> None:
    problem = check_url(url)
    assert problem is not None and needle in problem and "\n" not in problem
    assert check_url("http://127.0.0.1:8080/metrics") is None and check_url("https://h.example:9090") is None


def test_loopback_client_has_no_proxy_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "http://[::1,foo:bar:baz")
    c, note = make_client("http://127.0.0.1:1/metrics", 1.0)
    try:
        assert note == "" and c.headers["User-Agent"] == "bmoe-top"
    finally:
        c.close()


def test_the_poller_and_the_prometheus_client_decide_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "foo:bar:baz,.internal.example")
    url = "http://prom.example.invalid:9090"
    _c, note = make_client(url, 1.0)
    _c.close()
    assert "NO_PROXY entries ignored: foo:bar:baz" in note and "using proxy http://127.0.0.1:9" in note
    p = MetricsPoller(url + "/metrics", timeout=1)
    p.client.close()
    with PrometheusClient(url, timeout=1) as prom:
        assert prom.proxy_note == note
    assert p.state.proxy_note == note
