"""The live sources against the REAL runtime: `bmoe-run --session` on the tiny generated model,
driven over pipes (ChildSession) and over its session socket (SessionSocketClient), feeding
the run model."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers.waits import alive, until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.session_socket import SessionSocketClient

BMOE_RUN = Path(sys.executable).with_name("bmoe-run")
pytestmark = pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "tiny.gguf", preset="tiny"))


def test_session_over_pipes(tiny):
    recs: list = []
    model = RunModel()
    feed = RecordFeed(model)

    def sink(r, t):
        recs.append(r)
        feed.apply(r, t)

    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "--session", "--route-telemetry", "--quiet", "-c", "512"],
                     on_record=sink, ready_timeout_s=60)
    s.start()
    try:
        assert s.status().state == "loading"
        assert s.wait_state("ready", 60), s.status()
        st = s.status()
        assert st.ready.arch == "qwen3moe" and st.ready.n_ctx == 512
        # turn 1: streaming text, routes, resident map
        r1 = s.generate("Hello", 6)
        assert s.wait_state("ready", 60)
        d1 = [r for r in recs if isinstance(r, bl.Done)][-1]
        assert d1.id == r1 and d1.tokens == 6 and not d1.cancelled
        prog = [r for r in recs if isinstance(r, bl.Progress)]
        assert [p.step for p in prog] == [1, 2, 3, 4, 5, 6]
        texts = [p.text for p in prog]
        assert all(texts[i + 1].startswith(texts[i]) for i in range(5)) and d1.text.startswith(texts[-1])
        assert any(isinstance(r, bl.Route) for r in recs) and any(isinstance(r, bl.Resident) for r in recs)
        # turn 2 continues the chat: the KV prefix is reused
        r2 = s.generate(" world", 4, clear_kv=False)
        assert s.wait_state("ready", 60)
        d2 = [r for r in recs if isinstance(r, bl.Done)][-1]
        assert d2.id == r2 and d2.n_past > d1.n_past and d2.n_prompt < d2.n_past
        # cancel mid-turn
        r3 = s.generate("Once upon a time", 400, clear_kv=True)
        n0 = len([r for r in recs if isinstance(r, bl.Progress)])
        assert until(lambda: len([r for r in recs if isinstance(r, bl.Progress)]) >= n0 + 2)
        assert s.cancel()
        assert s.wait_state("ready", 30)
        d3 = [r for r in recs if isinstance(r, bl.Done)][-1]
        assert d3.id == r3 and d3.cancelled and d3.tokens < 400
        # a rejected request leaves the session usable
        s.generate("x", 100000)
        assert until(lambda: s.status().last_error is not None)
        assert "n_ctx" in s.status().last_error and s.status().state == "ready"
        r5 = s.generate("again", 2)
        assert s.wait_state("ready", 60) and [r for r in recs if isinstance(r, bl.Done)][-1].id == r5
        assert model.n_tokens >= 12 and len(model.turns) >= 4
    finally:
        code = s.close(timeout=10)
    assert code == 0 and s.status().state == "exited"
    assert s.status().bad_lines == 0
    assert not alive(s.pid)


def test_attach_over_session_socket(tiny, tmp_path):
    sock = f"/tmp/bmoe-l-rt-{os.getpid()}.sock"
    recs: list = []
    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "--session", "--quiet", "-c", "256",
                      "--session-socket", sock], on_record=lambda r, t: recs.append(r))
    s.start()
    try:
        assert s.wait_state("ready", 60), s.status()
        assert until(lambda: os.path.exists(sock))
        got: list = []
        cl = SessionSocketClient(sock, on_record=lambda r, t: got.append(r)).start()
        try:
            assert cl.wait_state("ready", 10), cl.status()
            assert isinstance(got[0], bl.Ready) and got[0].arch == "qwen3moe"
            rid = cl.generate("Hi", 3)
            assert until(lambda: any(isinstance(r, bl.Done) for r in got))
            d = [r for r in got if isinstance(r, bl.Done)][0]
            assert d.id == rid and d.tokens == 3
            # the pipe side saw the same turn
            assert until(lambda: any(isinstance(r, bl.Done) and r.id == rid for r in recs))
        finally:
            cl.close()
    finally:
        assert s.close(timeout=10) == 0
    assert not os.path.exists(sock)


def test_close_during_a_generation_cancels_then_closes_cleanly(tiny):
    recs: list = []
    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "--session", "--quiet", "-c", "1024"],
                     on_record=lambda r, t: recs.append(r), ready_timeout_s=60).start()
    assert s.wait_state("ready", 60)
    s.generate("Once upon a time", 900)
    assert until(lambda: sum(isinstance(r, bl.Progress) for r in recs) >= 2)
    # closing mid-turn: cancel + close, so the runtime ends by itself (exit 0), no SIGTERM needed
    assert s.close(timeout=15) == 0
    d = [r for r in recs if isinstance(r, bl.Done)]
    assert d and d[-1].cancelled
    assert s.status().state == "exited" and not alive(s.pid)


def test_one_shot_progress_run_ends_as_exited_not_aborted(tiny):
    recs: list = []
    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "-p", "Hi", "-n", "4", "--progress", "--quiet"],
                     on_record=lambda r, t: recs.append(r)).start()
    assert s.wait_state({"exited", "aborted"}, 60)
    st = s.status()
    assert st.state == "exited" and st.exit_code == 0, st
    assert sum(isinstance(r, bl.Progress) for r in recs) == 4 and st.turns_done == 1
    s.close()
