"""A sink that raises is reported, never swallowed: logged, kept, and sent on as a ProblemFound,
which the bound feed turns into a problem entry and a log line; the source keeps reading."""

from __future__ import annotations

import logging
import sys

from helpers import EMITTER

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.events import ProblemFound, Sinks


def test_a_failing_sink_is_logged_kept_and_reported(caplog):
    events: list = []
    sinks = Sinks("test")
    sinks.on_event = events.append

    def boom(x: int) -> None:
        raise ValueError(f"bad {x}")

    with caplog.at_level(logging.ERROR, logger="bmoe_top.sources"):
        sinks.call("record", boom, 7)
    assert [type(e) for e in events] == [ProblemFound]
    assert events[0].where == "record" and "ValueError: bad 7" in events[0].problem.reason
    assert list(sinks.errors) == [events[0].problem]
    assert "the record sink failed" in caplog.text and "ValueError: bad 7" in caplog.text


def test_a_failing_event_sink_does_not_loop():
    calls = []
    sinks = Sinks("test")

    def bad_event(ev) -> None:
        calls.append(ev)
        raise RuntimeError("event sink down")

    sinks.on_event = bad_event
    sinks.event("something")
    assert len(calls) == 2 and isinstance(calls[1], ProblemFound)  # the event, then its report once
    assert len(sinks.errors) == 1


def test_bound_run_gets_a_problem_and_a_log_line_and_the_source_goes_on():
    src = ChildSession([sys.executable, EMITTER, "--rate", "500"])
    run = bind(src, RunModel()).run

    def broken_record_sink(rec, t) -> None:
        raise KeyError("request")  # the kind of slip that used to vanish in a reader thread

    src.connect(broken_record_sink)
    src.start()
    try:
        assert src.wait_state("ready", 10), src.status()
        src.generate("hi", 3)
        assert src.wait_state("ready", 10)
    finally:
        assert src.close() == 0
    assert run.problem_count >= 5 and "record sink failed: KeyError" in run.problems[0].reason
    assert any("record sink failed" in line for line in run.log)
    assert src.status().turns_done == 1  # the reader went on
