"""The event log on disk (tui/jobs/event_file.py): real files in a temporary state folder,
rotation by size, a symbolic link refused, a write error loud once and the session kept, and a
restart that keeps the earlier session's events."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bmoe_top.parsers.events import event_line
from bmoe_top.tui.jobs.event_file import EventFile, default_path, log_files, read_events, record_to_file
from bmoe_top.tui.model.events import EventLog
from bmoe_top.tui.model.run import LIVE, RunModel
from bmoe_top.tui.model.status import Status


def test_the_default_file_is_in_the_state_folder() -> None:
    assert default_path() == Path(os.environ["XDG_STATE_HOME"]) / "bmoe-top" / "events.jsonl"


def test_events_are_appended_one_line_each(tmp_path: Path) -> None:
    log = EventLog()
    out = EventFile(tmp_path / "state" / "events.jsonl")
    log.listen(out.write)
    for i in range(5):
        log.record("turn", f"turn {i + 1}", None, "started")
    read, unread = read_events(log_files(out.path))
    assert unread == [] and read.bad_lines == 0
    assert [e.subject for e in read.events] == [f"turn {i + 1}" for i in range(5)]
    assert oct((out.path.stat().st_mode) & 0o777) == oct(0o600 & ~_umask())
    out.close()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_rotation_keeps_n_files_and_every_newest_event(tmp_path: Path) -> None:
    log = EventLog()
    line = len(event_line(log.record("turn", "turn 0", None, "started")))
    path = tmp_path / "events.jsonl"
    out = EventFile(path, max_bytes=10 * line, keep=2)
    log.listen(out.write)
    for i in range(1, 61):
        log.record("turn", f"turn {i:>4}", None, "started")  # the same length as "turn    0"...
    files = log_files(path, keep=2)
    assert [f.name for f in files] == ["events.jsonl.2", "events.jsonl.1", "events.jsonl"]
    assert not (tmp_path / "events.jsonl.3").exists()
    assert all(f.stat().st_size <= 10 * line + line for f in files)
    read, _ = read_events(files)
    subjects = [e.subject for e in read.events]
    assert subjects == [f"turn {i:>4}" for i in range(61 - len(subjects), 61)]  # the newest, in order, none lost
    assert len(subjects) >= 20 and out.rotations >= 5
    out.close()


def test_a_symbolic_link_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "events.jsonl"
    path.symlink_to(victim)
    errors: list[str] = []
    out = EventFile(path, on_error=errors.append)
    log = EventLog()
    log.listen(out.write)
    log.record("source", "source", "ok", "refused")
    log.record("source", "source", "refused", "ok")  # after the error: nothing more, nothing said
    assert victim.read_text() == "keep me\n"
    assert len(errors) == 1 and "symbolic link" in errors[0] and "event log stopped" in errors[0]
    assert out.error == errors[0] and log.total == 2


def test_rotation_renames_a_planted_link_and_never_follows_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "events.jsonl"
    (tmp_path / "events.jsonl.1").symlink_to(victim)
    log = EventLog()
    out = EventFile(path, max_bytes=200, keep=3)
    log.listen(out.write)
    for i in range(10):
        log.record("turn", f"turn {i}", None, "started", "x" * 60)
    assert victim.read_text() == "keep me\n" and out.error is None
    out.close()


def test_a_full_disk_is_loud_once_and_the_session_goes_on() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    run = RunModel(LIVE)
    errors: list[str] = []
    record_to_file(run.events, "/dev/full", on_error=errors.append, preload=False)
    run.set_status(Status.CONNECTING)
    run.set_status(Status.OK)
    run.begin_turn()
    assert len(errors) == 1 and "disk is full (ENOSPC)" in errors[0]
    assert run.status == Status.OK and run.events.total == 3 and run.turn_count == 1


def test_a_restart_keeps_the_earlier_session_events(tmp_path: Path) -> None:
    path = tmp_path / "state" / "events.jsonl"
    first = RunModel(LIVE)
    first.set_status(Status.CONNECTING)  # recorded before the file is attached: written at attach
    w1 = record_to_file(first.events, path)
    first.set_status(Status.OK)
    first.set_status(Status.REFUSED, "connection refused")
    w1.close()
    first.events.unlisten(w1.write)

    second = RunModel(LIVE)
    w2 = record_to_file(second.events, path)
    second.set_status(Status.CONNECTING)
    shown = [(e.run, e.new) for e in second.events.snapshot()]
    assert shown == [(first.events.run, "connecting"), (first.events.run, "ok"), (first.events.run, "refused"),
                     (second.events.run, "connecting")]
    w2.close()
    read, _ = read_events(log_files(path))
    assert [(e.run, e.new) for e in read.events] == shown  # the file holds each event once


def test_a_missing_log_reads_as_empty(tmp_path: Path) -> None:
    read, unread = read_events(log_files(tmp_path / "none.jsonl"))
    assert read.events == [] and unread == [] and read.bad_lines == 0


def test_newest_reads_the_newest_files_first(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog()
    out = EventFile(path, max_bytes=300, keep=3)
    log.listen(out.write)
    for i in range(40):
        log.record("turn", f"turn {i:02}", None, "started")
    read, _ = read_events(log_files(path), newest=7)
    assert [e.subject for e in read.events] == [f"turn {i:02}" for i in range(33, 40)]
    out.close()
