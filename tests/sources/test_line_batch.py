"""Per-token lines held by a live reader (tui/sources/live.py ``LineBatch``): held until due or
until any other line comes, handed over in arrival order with each read's time; a real child
over the emitter and a real session socket lose no line and keep their order, and a control
line (READY, BEGIN, DONE) is never held. No test waits for the hold: it is 0, or longer than any
test, or the test waits on counts."""

from __future__ import annotations

import sys

from helpers import EMITTER
from helpers.waits import until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.events import LiveState
from bmoe_top.tui.sources.live import LineBatch

NEVER = 3600.0  # a hold no test outlives

P = 'BMOE_PROGRESS {"step": %d}'
R = 'BMOE_ROUTE {"step": %d, "experts": [[1]], "hit": [[0]]}'


def test_per_token_lines_wait_and_any_other_line_hands_over_everything_in_order():
    out: list = []
    batch = LineBatch(out.append, NEVER)
    assert batch.wait_s() is None  # nothing held: the reader waits as long as it takes
    batch.add([R % 1, P % 1], 10.0)
    batch.add(['BMOE_RESIDENT {"step": 1}', 'BMOE_LOAD {"mb": 1}'], 11.0)
    batch.add([], 12.0)
    assert out == [] and 0 < batch.wait_s() <= NEVER
    batch.add([P % 2, 'BMOE_DONE {"id": 1}'], 13.0)  # a control line: everything, now, in order
    assert out == [[([R % 1, P % 1], 10.0), (['BMOE_RESIDENT {"step": 1}', 'BMOE_LOAD {"mb": 1}'], 11.0),
                    ([P % 2, 'BMOE_DONE {"id": 1}'], 13.0)]]
    assert batch.wait_s() is None
    for other in ("some text", 'BMOE_READY {"load_s": 1}', "BMOE_PROGRESS{broken", "x BMOE_PROGRESS {}"):
        batch.add([P % 3], 14.0)
        batch.add([other], 15.0)
        assert out[-1] == [([P % 3], 14.0), ([other], 15.0)], other


def test_held_lines_go_when_due_or_flushed_and_a_zero_hold_holds_nothing():
    out: list = []
    batch = LineBatch(out.append, 0.0)
    batch.add([P % 1], 1.0)
    assert out == [[([P % 1], 1.0)]]
    out.clear()
    batch = LineBatch(out.append, NEVER)
    batch.add([P % 1], 1.0)
    batch.flush()
    batch.flush()
    assert out == [[([P % 1], 1.0)]]
    due = LineBatch(out.append, 1e-9)  # due at once: the reader hands it over at its next look
    due.add([P % 2], 2.0)
    assert due.wait_s() is not None and due.wait_s() < 0.5


class Sink:
    def __init__(self) -> None:
        self.records: list = []
        self.states: list = []

    def rec(self, r, t) -> None:
        self.records.append((r, t))

    def ev(self, e) -> None:
        if type(e).__name__ == "StateChanged":
            self.states.append((e.state, sum(isinstance(r, bl.Progress) for r, _ in self.records)))


def test_a_child_held_for_ever_delivers_a_whole_turn_at_its_done_in_order():
    sink = Sink()
    s = ChildSession([sys.executable, EMITTER, "--rate", "2000", "--route-layers", "4", "--route-experts", "16",
                      "--route-k", "2"], on_record=sink.rec, on_event=sink.ev, hold_s=NEVER)
    s.start()
    try:
        assert until(lambda: s.state == LiveState.READY, 30)  # READY is never held
        s.generate("hello", 300)
        # the turn's end is counted before its READY event reaches the sink: wait for both
        assert until(lambda: s.status().turns_done == 1 and (LiveState.READY, 300) in sink.states, 60)
        steps = [r.step for r, _t in sink.records if isinstance(r, bl.Progress)]
        assert steps == list(range(1, 301))
        routes = [r.step for r, _t in sink.records if isinstance(r, bl.Route)]
        assert routes == list(range(1, 301))
        times = [t for _r, t in sink.records]
        assert times == sorted(times)
        # the turn's tokens came with its DONE: generating was entered with none of them, and
        # ready again only after all of them
        assert (LiveState.GENERATING, 0) in sink.states and (LiveState.READY, 300) in sink.states
    finally:
        s.close()


def test_a_child_at_the_default_hold_delivers_tokens_while_it_generates():
    sink = Sink()
    s = ChildSession([sys.executable, EMITTER, "--rate", "200"], on_record=sink.rec, on_event=sink.ev)
    s.start()
    try:
        assert until(lambda: s.state == LiveState.READY, 30)
        s.generate("hello", 100_000)
        assert until(lambda: sum(isinstance(r, bl.Progress) for r, _ in sink.records) >= 20, 60)
        assert s.state == LiveState.GENERATING  # handed over while the turn runs, not at its end
    finally:
        s.close()


def test_a_session_socket_reader_holds_the_same_way_and_loses_no_line(tmp_path):
    from bmoe_top.runtime.session_socket import SessionSocketServer
    from bmoe_top.tui.sources.session_socket import SessionSocketClient

    path = str(tmp_path / "s.sock")
    srv = SessionSocketServer(path, lambda r, c: None).start()
    sink = Sink()
    cl = SessionSocketClient(path, on_record=sink.rec, on_event=sink.ev, hold_s=NEVER)
    try:
        cl.start()
        assert until(lambda: len(srv.clients) == 1, 30)
        srv.broadcast('BMOE_READY {"load_s": 0.1}')
        assert until(lambda: cl.status().state == LiveState.READY, 30)  # never held
        srv.broadcast('BMOE_BEGIN {"id": 1}')
        for i in range(1, 51):
            srv.broadcast(R % i)
            srv.broadcast(P % i)
        assert until(lambda: cl.status().state == LiveState.GENERATING, 30)
        srv.broadcast('BMOE_DONE {"id": 1, "cancelled": false, "tokens": 50}')
        assert until(lambda: any(isinstance(r, bl.Done) for r, _ in sink.records), 30)
        assert [r.step for r, _ in sink.records if isinstance(r, bl.Progress)] == list(range(1, 51))
        assert [r.step for r, _ in sink.records if isinstance(r, bl.Route)] == list(range(1, 51))
    finally:
        cl.close()
        srv.close()


def test_a_large_hand_over_lets_go_of_the_batch_between_tokens():
    """A whole turn held and handed over at once (here 1,000 tokens, over 2,000 lines) is written in
    ``batch()`` holds of at most BATCH_LINES lines and one token's, each ending after a token's
    progress line, so the screen reads the run between them: at 3,000 tokens/s one hand-over of
    0.25 s of lines held the run's lock for up to 1.4 s and the screen stood still."""
    from contextlib import contextmanager

    from bmoe_top.tui.sources.live import BATCH_LINES

    sink = Sink()
    holds: list[list] = []

    @contextmanager
    def batch():
        start = len(sink.records)
        yield
        holds.append([r for r, _t in sink.records[start:]])

    s = ChildSession([sys.executable, EMITTER, "--rate", "100000", "--route-layers", "2", "--route-experts", "8",
                      "--route-k", "2"], on_record=sink.rec, on_event=sink.ev, hold_s=NEVER)
    s.connect(batch=batch)
    s.start()
    try:
        assert until(lambda: s.state == LiveState.READY, 30)
        s.generate("hello", 1000)
        assert until(lambda: s.status().turns_done == 1, 60)
    finally:
        s.close()
    per_token = [h for h in holds if any(isinstance(r, bl.Progress) for r in h)]
    assert sum(isinstance(r, bl.Progress) for h in per_token for r in h) == 1000
    assert len(per_token) >= sum(map(len, per_token)) // (BATCH_LINES + 4) >= 8
    assert all(len(h) <= BATCH_LINES + 4 for h in per_token)
    # a hold ends after a token's progress line, except where a hand-over ends: the read that
    # carried BMOE_BEGIN is handed over at once, wherever that read ended (mid-token when the
    # child was between writes), and the turn's last
    short = [i for i, h in enumerate(per_token[:-1]) if not isinstance(h[-1], bl.Progress)]
    assert len(short) <= 1, short
    if short:
        assert any(isinstance(r, bl.Begin) for h in per_token[:short[0] + 1] for r in h)
