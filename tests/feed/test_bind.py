"""bind(source, run): one table from source class to its feed, and the run's status derived from
the source's state in one place (every state has a status)."""

from __future__ import annotations

import sys

import pytest
from helpers import EMITTER

from bmoe_top.tui.feed.bind import BINDERS, TAIL_STATUS, MetricsBinding, TailBinding, bind
from bmoe_top.tui.feed.live import LIVE_STATUS, LiveFeed
from bmoe_top.tui.feed.metrics import SCRAPE_STATUS
from bmoe_top.tui.model import LIVE, RowUnit, RunModel, Status
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.events import LiveState, ScrapeState, TailState
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.session_socket import SessionSocketClient
from bmoe_top.tui.sources.tail import FileTail


def test_every_source_state_has_a_run_status():
    assert set(LIVE_STATUS) == set(LiveState) and set(SCRAPE_STATUS) == set(ScrapeState)
    assert set(TAIL_STATUS) == set(TailState)
    assert all(isinstance(s, Status) for s in (*LIVE_STATUS.values(), *SCRAPE_STATUS.values(), *TAIL_STATUS.values()))


def test_bind_picks_the_feed_from_the_table(tmp_path):
    child = ChildSession([sys.executable, EMITTER])
    sock = SessionSocketClient(tmp_path / "none.sock")
    poller = MetricsPoller("http://127.0.0.1:9/metrics")
    tail = FileTail(tmp_path / "a.jsonl")
    try:
        for src, kind in ((child, LiveFeed), (sock, LiveFeed), (poller, MetricsBinding), (tail, TailBinding)):
            b = bind(src)
            assert isinstance(b, kind) and b.run.retention == LIVE  # a live model is bounded
        assert bind(poller, RunModel()).run.row_unit == RowUnit.INTERVAL
        assert bind(tail, RunModel()).run.status == Status.WAITING
        assert set(BINDERS) == {type(child).__mro__[1], MetricsPoller, FileTail}
        with pytest.raises(TypeError, match="no binder"):
            bind(object())
    finally:
        poller.client.close()


def test_a_child_run_follows_the_state_machine():
    src = ChildSession([sys.executable, EMITTER, "--die-mid-line", "2", "--rate", "200"])
    run = bind(src, RunModel()).run
    assert run.status == Status.LOADING and run.sources == ("child: " + " ".join(src.argv),)
    src.start()
    assert src.wait_state("ready", 10)
    assert run.status == Status.READY
    src.generate("x", 20)
    assert src.wait_state("aborted", 10)
    src.close()
    assert run.status == Status.ABORTED and "SIGKILL" in run.status_detail
    assert run.requests[0]["prompt"] == "x" and run.turns[0].prompt == "x"


def test_a_poller_with_an_unusable_url_says_so_at_once():
    p = MetricsPoller("ftp://x/metrics")
    run = bind(p, RunModel()).run
    assert run.status == Status.ERROR and "ftp" in run.status_detail
    p.client.close()
