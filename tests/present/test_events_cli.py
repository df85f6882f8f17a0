"""``bmoe-top events`` as a user runs it (through the CLI's ``main``): the default log in the
state folder with its rotated files, an empty or missing log (no error), the filters, bad lines
counted and shown with their neighbours kept, escape sequences shown and not sent, and the
``--json`` document (a golden)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from helpers.golden import check_golden

from bmoe_top.tui.cli import main
from bmoe_top.tui.jobs.event_file import EventFile, default_path
from bmoe_top.tui.model.events import EventLog

GOLDEN = Path(__file__).resolve().parent / "golden"
T0 = 1_764_912_000.0  # 2025-12-05T05:20:00Z


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def write_log(path: Path, *, max_bytes: int = 1 << 20) -> EventLog:
    """A real log written by the writer: a source that connects, goes down and comes back, two
    turns, an alert and a diagnosis change, one event a second from T0."""
    ticks = iter(range(100))
    log = EventLog(clock=lambda: T0 + next(ticks))
    log.run = "0123456789ab"
    log.source = "metrics: http://127.0.0.1:8080/metrics"
    out = EventFile(path, max_bytes=max_bytes)
    log.listen(out.write)
    log.record("source", "source", "empty", "connecting")
    log.record("source", "source", "connecting", "ok", "3 series")
    log.record("turn", "turn 1", None, "started", "request 7")
    log.record("turn", "turn 1", "started", "done", "12 tokens, 8.5 tok/s")
    log.record("alert", "hit rate low", "pending", "firing", "hit rate 12 % < 30 % for 60 s")
    log.record("source", "source", "ok", "refused", "connection refused")
    log.record("diagnosis", "diagnosis", "no problem found", "flash wait 71 % of the token")
    log.record("source", "source", "refused", "restarted", "scrape 9: a counter went down")
    out.close()
    return log


def test_an_empty_or_missing_log_is_no_error(capsys, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "events")
    assert code == 0 and err == ""
    assert out.startswith(f"no events in {default_path()}")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    code, out, _ = cli(capsys, "events", str(tmp_path / "empty.jsonl"), "--json")
    doc = orjson.loads(out)
    assert code == 0 and doc["events"] == [] and doc["read"] == 0 and doc["bad_lines"] == 0
    # a log named that does not exist is named (it said "no events in no log file yet")
    code, out, _ = cli(capsys, "events", str(tmp_path / "none.jsonl"))
    assert code == 0 and out.startswith(f"no events in {tmp_path / 'none.jsonl'} ")


def test_the_default_log_includes_its_rotated_files(capsys) -> None:
    path = default_path()
    try:
        write_log(path, max_bytes=600)
        assert Path(f"{path}.1").exists()
        code, out, _ = cli(capsys, "events", "--json")
        doc = orjson.loads(out)
        assert code == 0 and len(doc["files"]) >= 2 and doc["files"][-1] == str(path)
        assert [e["t"] for e in doc["events"]] == [T0 + i for i in range(8)]
    finally:
        for f in path.parent.glob("events.jsonl*"):
            f.unlink()


def test_the_json_document(capsys, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_log(path)
    with open(path, "ab") as f:  # a torn last line and a foreign one, then a good line after them
        f.write(b'{"t": 1764912100, "kind": "source", "subj\n')
        f.write(b"not json at all\n")
        f.write(b'{"t": 1764912101, "kind": "turn", "subject": "turn 2", "old": null, "new": "started"}\n')
    code, out, err = cli(capsys, "events", str(path), "--json", "--kind", "source,turn", "--since", str(T0 + 1))
    assert code == 0 and err == ""
    doc = orjson.loads(out.replace(str(tmp_path), "TMP"))
    check_golden(GOLDEN / "events_cli.json", doc)
    assert doc["bad_lines"] == 2 and doc["read"] == 9
    assert [e["subject"] for e in doc["events"]][-1] == "turn 2"  # the line after the bad ones still counts


def test_text_filters_and_bad_lines(capsys, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_log(path)
    with open(path, "ab") as f:
        f.write(b"garbage\n")
    code, out, _ = cli(capsys, "events", str(path), "--grep", "REFUSED")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == ("2025-12-05T05:20:05.000Z  source    source: ok → refused  (connection refused)  "
                        "[metrics: http://127.0.0.1:8080/metrics]")
    assert "refused → restarted" in lines[1]
    assert lines[2] == f"2 of 8 events shown ({path}); 1 line not events, skipped"
    assert lines[3].startswith(f"  {path}:9: not JSON")
    code, out, _ = cli(capsys, "events", str(path), "--kind", "alert")
    assert out.splitlines()[0].endswith("hit rate low: pending → firing  (hit rate 12 % < 30 % for 60 s)  "
                                        "[metrics: http://127.0.0.1:8080/metrics]")


def test_escape_sequences_are_shown_not_sent(capsys, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(orjson.dumps({"t": T0, "kind": "source", "subject": "\x1b]0;owned\x07", "new": "ok\x1b[2J",
                                   "source": "\x9b31m"}) + b"\n")
    for argv in ((), ("--json",)):
        code, out, _ = cli(capsys, "events", str(path), *argv)
        assert code == 0 and "\x1b" not in out and "\x9b" not in out and "\\u001b" not in out
        assert "␛]0;owned␇" in out


def test_bad_options_say_why(capsys, tmp_path: Path) -> None:
    assert cli(capsys, "events", "--kind", "weather")[0] == 2
    with pytest.raises(SystemExit) as e:
        main(["events", "--since", "yesterday"])
    assert e.value.code == 2
    assert "a duration back from now" in capsys.readouterr().err


def test_an_unreadable_file_fails_loud(capsys, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        folder = tmp_path / "dir.jsonl"
        folder.mkdir()
        code, _, err = cli(capsys, "events", str(folder))
    else:
        p = tmp_path / "secret.jsonl"
        p.write_bytes(b"")
        p.chmod(0)
        code, _, err = cli(capsys, "events", str(p))
    assert code == 1 and err.startswith("bmoe-top: events: ")


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_a_directory_is_the_error_alone(tmp_path: Path, form) -> None:
    """``events DIR`` printed "no events ... (the log is empty or does not exist yet)" on stdout
    beside "is a directory" on stderr; a readable log beside it still lists its events."""
    run = [sys.executable, "-m", "bmoe_top.tui.cli", "events", *form]
    r = subprocess.run([*run, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert r.stderr.splitlines() == [f"bmoe-top: events: {tmp_path}: is a directory, not a recorded run"], r.stderr
    log = tmp_path / "events.jsonl"
    write_log(log)
    r = subprocess.run([*run, str(log), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "source" in r.stdout and len(r.stderr.splitlines()) == 1, (r.stdout, r.stderr)


def test_since_a_duration_back_from_now(capsys, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_log(path)  # events of 2025: none in the last ten minutes
    code, out, _ = cli(capsys, "events", str(path), "--since", "10m")
    assert code == 0 and out.splitlines()[0].startswith("0 of 8 events shown")
