"""The run's event log (tui/model/events.py) and what the run model records in it itself:
its source's state changes and restarts, and its turn boundaries (live models only)."""

from __future__ import annotations

import tracemalloc

import pytest

from bmoe_top.tui.model.events import EventLog
from bmoe_top.tui.model.run import KEEP_ALL, LIVE, RunModel
from bmoe_top.tui.model.status import Status


def test_record_keeps_a_safe_event_and_tells_the_listeners() -> None:
    log = EventLog(clock=lambda: 100.0)
    log.source = "metrics: http://127.0.0.1:1/metrics"
    seen = []
    log.listen(seen.append)
    ev = log.record("alert", "hit rate low\x1b[2J", "pending", "firing", "hit rate 12 % < 30 % for 60 s")
    assert ev.subject == "hit rate low␛[2J" and ev.t == 100.0 and ev.run == log.run and ev.source == log.source
    assert seen == [ev] and log.snapshot() == (ev,) and log.total == 1 and log.version == 1
    log.unlisten(seen.append)
    log.record("diagnosis", "diagnosis", ev.new, "no problem found")
    assert len(seen) == 1 and len(log) == 2


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="one of alert, diagnosis, source, turn"):
        EventLog().record("weather", "x", None, "y")


def test_a_failing_listener_never_stops_the_recording_thread() -> None:
    log = EventLog()
    got = []

    def broken(ev: object) -> None:
        raise OSError("disk gone")

    log.listen(broken)
    log.listen(got.append)
    log.record("turn", "turn 1", None, "started")
    assert len(got) == 1 and log.total == 1


def test_memory_is_flat_over_a_long_session() -> None:
    log = EventLog(capacity=1000)
    tracemalloc.start()
    for i in range(2000):
        log.record("turn", f"turn {i}", None, "started", "x" * 50)
    before = tracemalloc.take_snapshot()
    for i in range(20_000):
        log.record("turn", f"turn {i}", "started", "done", "x" * 50)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(log) == 1000 and log.total == 22_000
    assert grown < 16 * 1024, grown  # 20,000 more events: the 1,000 kept still take what they took
    assert log.snapshot()[-1].subject == "turn 19999"


def test_preload_keeps_older_events_first_and_tells_no_listener() -> None:
    old = EventLog(clock=lambda: 1.0)
    for i in range(3):
        old.record("turn", f"turn {i + 1}", None, "started")
    log = EventLog(capacity=4, clock=lambda: 2.0)
    seen = []
    log.listen(seen.append)
    log.record("source", "source", "empty", "connecting")
    log.preload(old.snapshot())
    assert [e.t for e in log.snapshot()] == [1.0, 1.0, 1.0, 2.0]
    assert len(seen) == 1


def test_a_live_run_records_its_source_states_restarts_and_turns() -> None:
    run = RunModel(LIVE)
    run.add_source("metrics: http://127.0.0.1:9/metrics")
    run.set_status(Status.CONNECTING)
    run.set_status(Status.OK, "3 series")
    run.set_status(Status.OK, "4 series")  # the detail alone: no event
    run.set_status(Status.BUSY, "no answer in 2 s")
    run.new_epoch("counters went down")
    t = run.begin_turn(id=7)
    run.finish_turn({"tokens": 12, "tok_s": 8.5}, turn=t)
    run.finish_turn({"tokens": 12}, turn=t)  # a second end record of the same turn: no second event
    run.begin_turn()
    run.finish_turn({}, cancelled=True)
    got = [(e.kind, e.subject, e.old, e.new, e.detail) for e in run.events.snapshot()]
    assert got == [
        ("source", "source", "empty", "connecting", ""),
        ("source", "source", "connecting", "ok", "3 series"),
        ("source", "source", "ok", "busy", "no answer in 2 s"),
        ("source", "source", "busy", "restarted", "counters went down"),
        ("turn", "turn 1", None, "started", "request 7"),
        ("turn", "turn 1", "started", "done", "12 tokens, 8.5 tok/s"),
        ("turn", "turn 2", None, "started", ""),
        ("turn", "turn 2", "started", "cancelled", ""),
    ]
    assert {e.source for e in run.events.snapshot()} == {"metrics: http://127.0.0.1:9/metrics"}


def test_a_file_records_no_turn_or_status_of_its_own() -> None:
    run = RunModel(KEEP_ALL)
    run.set_status(Status.REPLAY)
    t = run.begin_turn()
    run.finish_turn({"tokens": 3}, turn=t)
    assert run.events.snapshot() == ()
