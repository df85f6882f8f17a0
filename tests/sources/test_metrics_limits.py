"""The limits of a ``/metrics`` scrape against hostile servers on loopback (docs/metrics.md "Limits
of a scrape"): a body over the cap (declared, or a chunked body that never ends) is refused at the
cap, a body or a head that trickles in ends at the deadline of the whole request, and each says
which limit it hit: the state's detail, ``limit`` in the document, the status line, the
``--once`` line and its JSON."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
from helpers.scripted_http import Stream, exposition
from helpers.waits import wait_until

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.metrics import metrics_document, status_parts
from bmoe_top.tui.sources.metrics_poll import MetricsPoller

#: A bound on a scrape that must end by its limits (only a failure waits this long).
END_S = 60.0


def scrape(p: MetricsPoller) -> float:
    """One scrape on a thread; the seconds it took (AssertionError when it never ends)."""
    t0 = time.monotonic()
    th = threading.Thread(target=p.scrape_once, daemon=True)
    th.start()
    th.join(END_S)
    assert not th.is_alive(), f"the scrape did not end within {END_S:g} s"
    return time.monotonic() - t0


def test_a_declared_body_over_the_cap_is_refused_unread(srv):
    body = Stream(b"# HELP x y\n" * 6000, count=3000, length=3000 * 66000)  # 198 MB declared
    srv.answers = [(200, body, 0)]
    p = MetricsPoller(srv.url, timeout=30, max_body_mb=1)
    run = bind(p, RunModel()).run
    scrape(p)
    st = p.state
    assert st.status == "malformed" and st.limit == "body_size"
    assert "198,000,000 bytes (Content-Length)" in st.detail and "--max-body-mb" in st.detail
    wait_until(body.ended.is_set, what="the server sees the client go")
    assert body.broken and body.sent < 198_000_000
    doc = metrics_document(run)
    assert doc["limit"] == "body_size" and doc["totals"] is None
    line = "".join(t for t, _k in status_parts(doc))
    assert "limit hit: body size cap (--max-body-mb)" in line
    p.client.close()


def test_an_endless_chunked_body_stops_at_the_cap_and_the_last_values_stay(srv):
    endless = Stream(b"# HELP x y\n" * 6000)
    srv.answers = [(200, exposition(10, 10, 5).encode(), 0), (200, endless, 0)]
    p = MetricsPoller(srv.url, timeout=30, max_body_mb=1)
    run = bind(p, RunModel()).run
    p.scrape_once()
    assert p.state.status == "ok" and p.state.limit is None
    scrape(p)
    assert p.state.status == "malformed" and p.state.limit == "body_size"
    assert "over the 1 MiB body cap" in p.state.detail
    wait_until(endless.ended.is_set, what="the server sees the client go")
    assert endless.broken
    doc = metrics_document(run)
    assert doc["totals"]["hits"] == 10  # the last good scrape is kept
    srv.answers = [(200, exposition(20, 10, 6).encode(), 0)]
    p.scrape_once()  # the next good scrape clears the limit
    assert p.state.status == "ok" and p.state.limit is None and metrics_document(run)["limit"] is None
    p.client.close()


def test_a_trickled_body_ends_at_the_deadline_of_the_whole_scrape(srv):
    # a byte every 20 ms: every read is far inside the 1 s timeout, the whole never is
    trickle = Stream(b"l", every_s=0.02, length=1_000_000)
    srv.answers = [(200, trickle, 0)]
    p = MetricsPoller(srv.url, timeout=1.0)
    run = bind(p, RunModel()).run
    took = scrape(p)
    assert took >= 1.0
    assert p.state.status == "busy" and p.state.limit == "deadline"  # /health answers
    assert "answer not complete within 1 s (" in p.state.detail and "--timeout" in p.state.detail
    assert "/health answers" in p.state.detail
    wait_until(trickle.ended.is_set, what="the server sees the client go")
    assert trickle.broken and trickle.sent < 1_000_000
    line = "".join(t for t, _k in status_parts(metrics_document(run)))
    assert "limit hit: scrape deadline (--timeout)" in line
    p.client.close()


def test_a_trickled_head_ends_at_the_deadline(srv):
    srv.health = None  # /health is scripted too: it trickles as well
    slow = Stream(b"x", count=1, every_s=0.02, length=1, slow_head=True)
    srv.answers = [(200, slow, 0), (200, Stream(b"x", count=1, every_s=0.02, length=1, slow_head=True), 0)]
    p = MetricsPoller(srv.url, timeout=1.0)
    scrape(p)
    assert p.state.status == "unreachable" and p.state.limit == "deadline"
    assert "no body by then" in p.state.detail and "/health does not answer" in p.state.detail
    p.client.close()


def test_once_says_which_limit_it_hit(srv):
    srv.default = (200, Stream(b"# HELP x y\n" * 6000), 0)
    cmd = [str(Path(sys.executable).with_name("bmoe-top")), "attach", "--metrics", srv.url, "--once", "--timeout", "30",
           "--max-body-mb", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=END_S)
    # the failure is the document's line on stdout and one line on stderr (a non-zero exit says why)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "1 MiB body cap" in r.stderr
    assert r.stdout.startswith(f"{srv.url}: malformed /metrics answer over the 1 MiB body cap")
    assert "(--max-body-mb)" in r.stdout
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=END_S)
    doc = orjson.loads(r.stdout)
    assert r.returncode == 1 and doc["status"] == "malformed" and doc["limit"] == "body_size"
    bad = subprocess.run(cmd[:-1] + ["0"], capture_output=True, text=True, timeout=END_S)
    assert bad.returncode == 2 and "--max-body-mb: must be a number above 0" in bad.stderr
