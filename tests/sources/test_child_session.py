"""ChildSession against a real emitter process (tests/helpers/emitter.py): the normal session
flow and the fault cases (killed mid-line, 1 MB stderr before READY, no READY, block-buffered
stdout, SIGTERM ignored, grandchild, missing executable, parent killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import EMITTER
from helpers.waits import alive, until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.events import FINAL_STATES, ReadyTimeout, Rejected


def emitter(*args: str) -> list[str]:
    return [sys.executable, EMITTER, *args]


class Sink:
    def __init__(self) -> None:
        self.records: list = []
        self.stderr: list[str] = []
        self.events: list = []

    def rec(self, r, t) -> None:
        assert isinstance(t, float)
        self.records.append(r)

    def err(self, line, t) -> None:
        self.stderr.append(line)

    def ev(self, event) -> None:
        self.events.append(event)

    def of(self, cls):
        return [r for r in self.records if isinstance(r, cls)]


def launch(*args: str, **kw) -> tuple[ChildSession, Sink]:
    sink = Sink()
    s = ChildSession(emitter(*args), on_record=sink.rec, on_stderr=sink.err, on_event=sink.ev, **kw)
    s.start()
    return s, sink


def test_session_flow_ready_generate_reject_close():
    s, sink = launch("--noise-prefix", "--rate", "400")
    try:
        assert s.wait_state("ready", 10), s.status()
        st = s.status()
        assert st.ready.arch == "emitter" and st.ready.n_ctx == 4096
        assert st.ready.prefix.startswith("llama_model_load")  # record found after loader noise
        rid = s.generate("hello", 12)
        assert rid is not None
        assert s.status().state == "generating"
        assert s.wait_state("ready", 10)
        done = sink.of(bl.Done)
        assert len(done) == 1 and done[0].id == rid and done[0].tokens == 12
        prog = sink.of(bl.Progress)
        assert [p.step for p in prog] == list(range(1, 13))
        assert prog[-1].text == done[0].text
        # second turn continues the chat
        rid2 = s.generate("more", 5, clear_kv=False)
        assert s.wait_state("ready", 10) and s.status().turns_done == 2
        assert sink.of(bl.Done)[-1].n_past > done[0].n_past
        # rejected request: non-fatal error, session usable
        s.generate("REJECT me", 5)
        t0 = time.monotonic()
        while s.status().last_error is None and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        assert s.status().last_error == "prompt rejected"
        assert s.wait_state("ready", 5)
        assert any(isinstance(e, Rejected) for e in sink.events)
        assert rid2 != rid
        # the next request taken clears the refusal: it is no longer the news
        s.generate("fine", 3)
        assert until(lambda: s.status().turns_done == 3)
        assert s.status().last_error is None
    finally:
        code = s.close()
    assert code == 0
    st = s.status()
    assert st.state == "exited" and st.exit_code == 0 and st.bad_lines == 0
    assert not alive(s.pid)


def test_cancel_mid_turn():
    s, sink = launch("--rate", "50")
    try:
        assert s.wait_state("ready", 10)
        s.generate("long", 500)
        t0 = time.monotonic()
        while len(sink.of(bl.Progress)) < 3 and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        assert s.cancel()
        assert s.wait_state("ready", 5)
        d = sink.of(bl.Done)[-1]
        assert d.cancelled is True and 3 <= d.tokens < 500
    finally:
        s.close()


def test_killed_mid_line_is_aborted_with_exit_code_and_truncated_line_reported():
    s, sink = launch("--die-mid-line", "3", "--rate", "200")
    assert s.wait_state("ready", 10)
    s.generate("x", 50)
    assert s.wait_state({"aborted", "exited"}, 10)
    st = s.status()
    assert st.state == "aborted", st
    assert st.exit_code == -signal.SIGKILL
    assert "SIGKILL" in st.message and "no BMOE_DONE" in st.message
    assert [p.step for p in sink.of(bl.Progress)] == [1, 2, 3]  # the good lines still count
    assert any("ended mid-line" in p.reason for p in st.problems)
    assert st.bad_lines == 1  # the half line is a bad protocol line, reported, not silently lost
    assert s.close() == -signal.SIGKILL


@pytest.mark.parametrize("one_line", [False, True])
def test_one_megabyte_of_stderr_before_ready(one_line):
    args = ["--stderr-bytes", str(1 << 20)] + (["--stderr-one-line"] if one_line else [])
    s, sink = launch(*args)
    try:
        assert s.wait_state("ready", 20), s.status()
        st = s.status()
        if one_line:
            assert st.stderr_lines == 1 and len(sink.stderr[0]) == 1 << 20
            assert len(s.stderr_log[0]) < 5000  # the log pane keeps a bounded copy
        else:
            assert sum(len(x) + 1 for x in sink.stderr) >= 1 << 20
            assert len(s.stderr_log) == s.stderr_log.maxlen
        s.generate("x", 3)
        assert s.wait_state("ready", 10) and st.ready is not None
    finally:
        assert s.close() == 0


def test_never_ready_times_out_then_close_terminates():
    s, sink = launch("--no-ready", ready_timeout_s=0.4)
    try:
        t0 = time.monotonic()
        while not s.status().ready_timeout and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        st = s.status()
        assert st.ready_timeout and st.state == "loading"
        assert "no BMOE_READY" in st.message
        assert any(isinstance(e, ReadyTimeout) for e in sink.events)
    finally:
        code = s.close(timeout=0.3)
    # it ignores stdin, so close escalated to SIGTERM
    assert code == -signal.SIGTERM
    assert s.status().state == "exited"  # we asked it to close: not an abort
    assert not alive(s.pid)


def test_block_buffered_stdout_shows_no_telemetry_then_everything_at_exit():
    s, sink = launch("--block-buffered", stall_after_s=0.3)
    try:
        time.sleep(0.2)
        s.send({"cmd": "generate", "id": 7, "prompt": "p", "n_predict": 4})
        t0 = time.monotonic()
        while not s.status().stalled and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        st = s.status()
        assert st.stalled and "no telemetry" in st.message and st.lines == 0
    finally:
        code = s.close()
    assert code == 0
    st = s.status()
    # the buffer was flushed at exit: nothing lost
    assert [type(r).__name__ for r in sink.records if not isinstance(r, bl.Load)][:2] == ["Ready", "Begin"]
    assert len(sink.of(bl.Progress)) == 4 and len(sink.of(bl.Done)) == 1
    assert st.state == "exited" and not st.stalled


def test_sigterm_ignored_escalates_to_sigkill_and_grandchild_dies():
    s, sink = launch("--ignore-term", "--grandchild")
    assert s.wait_state("ready", 10)
    gc = None
    t0 = time.monotonic()
    while gc is None and time.monotonic() - t0 < 5:
        for line in sink.stderr:
            if line.startswith("grandchild pid "):
                gc = int(line.split()[-1])
        time.sleep(0.01)
    assert gc is not None and alive(gc)
    # the emitter's stdin reader ends the loop on close, so make it hang: cancel is harmless
    code = s.close(timeout=0.0, term_timeout=0.3)
    assert code in (0, -signal.SIGKILL)
    t0 = time.monotonic()
    while alive(gc) and time.monotonic() - t0 < 5:
        time.sleep(0.02)
    assert not alive(gc), "grandchild left behind"
    assert not alive(s.pid)


def test_missing_executable_fails_cleanly():
    sink = Sink()
    s = ChildSession(["/nonexistent/bmoe-run", "--session"], on_record=sink.rec)
    s.start()
    st = s.status()
    assert st.state == "failed" and "cannot start /nonexistent/bmoe-run" in st.message
    assert s.generate("x") is None
    assert s.close() is None


def test_parent_killed_child_exits_on_stdin_eof(tmp_path):
    script = tmp_path / "parent.py"
    # SIGQUIT's default action in the parent whatever started the suite: a shell's background job
    # starts with SIGINT and SIGQUIT ignored, and the parent then slept its 600 s out
    script.write_text(textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        from bmoe_top.tui.sources.child_session import ChildSession
        s = ChildSession([sys.executable, {EMITTER!r}]).start()
        s.wait_state("ready", 10)
        print(s.pid, flush=True)
        time.sleep(60)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        assert alive(child)
        p.kill()
        p.wait()
        t0 = time.monotonic()
        while alive(child) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert not alive(child), "the child outlived bmoe-top"
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGQUIT])
@pytest.mark.parametrize("child_args", [["--no-ready"], ["--no-ready", "--ignore-term"]])
def test_a_child_that_never_reads_stdin_dies_with_its_parent(tmp_path, sig, child_args):
    # the child loads (no READY, stdin never read): EOF on its stdin does not end it, and a parent
    # killed by SIGKILL or SIGQUIT runs no code; it was left running with PID 1 as its parent
    script = tmp_path / "parent.py"
    # SIGQUIT's default action in the parent whatever started the suite: a shell's background job
    # starts with SIGINT and SIGQUIT ignored, and the parent then slept its 600 s out
    script.write_text(textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        from bmoe_top.tui.sources.child_session import ChildSession
        s = ChildSession([sys.executable, {EMITTER!r}, *{child_args!r}]).start()
        print(s.pid, flush=True)
        time.sleep(600)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        assert alive(child)
        p.send_signal(sig)
        p.wait(timeout=60)
        assert until(lambda: not alive(child)), f"the child outlived its parent ({signal.Signals(sig).name})"
    finally:
        if p.poll() is None:
            p.kill()
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_lines_of_one_read_are_held_in_batches_and_a_failing_line_loses_no_neighbour():
    """A child that writes READY, three PROGRESS lines and a bad line in one write (under
    PIPE_BUF: one read): the record sink gets them inside ``batch()`` holds that end after whole
    tokens; the sink failing on one of them is reported and the others still arrive."""
    lines = ['BMOE_READY {"load_s": 0.1}'] + [f'BMOE_PROGRESS {{"step": {i}, "wall_ms": 5.0}}' for i in (1, 2, 3)]
    lines.append("BMOE_PROGRESS {broken")
    script = f"import sys; sys.stdout.write({chr(10).join(lines)!r} + '\\n'); sys.stdout.flush()"
    batches: list[list] = []
    current: list | None = None
    got: list = []

    class Batch:
        def __enter__(self):
            nonlocal current
            current = []
            return self

        def __exit__(self, *exc):
            nonlocal current
            batches.append(current)
            current = None

    def rec(r, t):
        assert current is not None, "a record outside a batch"
        current.append(r)
        if isinstance(r, bl.Progress) and r.step == 2:
            raise RuntimeError("this sink cannot take step 2")
        got.append(r)

    events: list = []
    s = ChildSession([sys.executable, "-c", script], on_record=rec, on_event=events.append)
    s.connect(batch=Batch)
    s.start()
    assert until(lambda: s.state in FINAL_STATES)  # progress without BMOE_DONE: aborted at exit
    s.close()
    # one read's lines go in one hold, or (when a hold outlasts BATCH_S on a busy machine) in
    # holds that each end after a token's progress line: never a record outside a hold
    held = [b for b in batches if b]
    assert [type(r).__name__ for b in held for r in b] == ["Ready", "Progress", "Progress", "Progress", "BadLine"]
    assert all(isinstance(b[-1], bl.Progress) for b in held[:-1]), [len(b) for b in held]
    assert [r.step for r in got if isinstance(r, bl.Progress)] == [1, 3]  # step 2 failed, its neighbours count
    assert any("record sink failed" in getattr(getattr(e, "problem", None), "reason", "") for e in events)


def test_crowded_cores_are_read_from_the_load_average_and_the_running_processes():
    from bmoe_top.tui.sources.child_session import crowded

    assert crowded("0.52 0.58 0.59 2/345 12345", 2) is None  # the reader and one other
    assert crowded("2.10 1.00 0.50 1/345 12345", 2) == "load 2.1 on 2 cores"
    assert crowded("0.10 0.10 0.10 4/345 12345", 2) == "3 other processes running on 2 cores"
    assert crowded("", 2) is None and crowded("garbage", 2) is None


def test_the_bundled_runtime_waits_passively_on_crowded_cores_unless_the_user_says_otherwise():
    from bmoe_top.tui.sources.child_session import runtime_wait_env

    busy, quiet = "6.00 5.00 4.00 7/345 1", "0.20 0.20 0.20 1/345 1"
    assert runtime_wait_env({}, busy, 2) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert runtime_wait_env({}, quiet, 2) == {}  # the cores to itself: libgomp's brief spin is faster
    assert runtime_wait_env({"OMP_WAIT_POLICY": "ACTIVE"}, busy, 2) == {}
    assert runtime_wait_env({"GOMP_SPINCOUNT": "300000"}, busy, 2) == {}
