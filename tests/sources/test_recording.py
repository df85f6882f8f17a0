"""--record: every line a live source receives, as JSONL, flushed per line (tui/sources/recorder.py);
the one recording reader (parsers/recording.py); playback at the original pace or faster, turn by
turn (tui/sources/replay.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest
from helpers import EMITTER
from helpers.waits import wait_until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.parsers.recording import load_recording, parse_recording
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.recorder import Recorder
from bmoe_top.tui.sources.replay import RecordingPlayer, RecordingSource


def record_session(path: Path, turns: int = 2, n: int = 6) -> list:
    recs: list = []
    rec = Recorder(path)
    s = ChildSession([sys.executable, EMITTER, "--stderr-bytes", "300", "--rate", "300"],
                     on_record=lambda r, t: recs.append(r), recorder=rec).start()
    assert s.wait_state("ready", 10)
    for i in range(turns):
        s.generate(f"turn {i}", n, clear_kv=(i == 0))
        time.sleep(0.02)
        assert s.wait_state("ready", 10)
    assert s.close() == 0
    rec.close()
    return recs


def test_recording_has_every_line_with_source_and_time(tmp_path):
    path = tmp_path / "run.jsonl"
    t0 = time.time()
    recs = record_session(path)
    raw = path.read_bytes().splitlines()
    objs = [orjson.loads(x) for x in raw]
    assert all(set(o) == {"t", "src", "line"} for o in objs)
    assert all(t0 - 1 <= o["t"] <= time.time() + 1 for o in objs)
    stdout = [o["line"] for o in objs if o["src"] == "stdout"]
    assert len(stdout) == len(recs)  # every stdout line, in order
    assert [type(bl.parse_line(x)).__name__ for x in stdout] == [type(r).__name__ for r in recs]
    assert sum(o["src"] == "stderr" for o in objs) >= 2
    reqs = [orjson.loads(o["line"]) for o in objs if o["src"] == "stdin"]
    assert [r["cmd"] for r in reqs] == ["generate", "generate", "close"]
    assert reqs[1]["clear_kv"] is False
    rec = parse_recording(path.read_bytes())
    assert not rec.problems and rec.n_turns == 2 and len(rec.entries) == len(objs)
    sniff = pytest.importorskip("bmoe_top.parsers.sniff")
    assert sniff.sniff(path.read_bytes(), path.name) == "recording"


def test_recording_survives_a_crash_of_bmoe_top(tmp_path):
    path = tmp_path / "crash.jsonl"
    script = tmp_path / "rec.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from bmoe_top.tui.sources.child_session import ChildSession
        from bmoe_top.tui.sources.recorder import Recorder
        s = ChildSession([sys.executable, {EMITTER!r}, "--rate", "2000"], recorder=Recorder({str(path)!r})).start()
        s.wait_state("ready", 10)
        s.generate("x", 100000)
        print("go", flush=True)
        time.sleep(60)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "go"
        wait_until(lambda: path.read_bytes().count(b"BMOE_PROGRESS") > 50, what="51 recorded tokens")
        p.send_signal(signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # one write per entry: no half-written entry even when killed
    objs = [orjson.loads(x) for x in lines[:-1]]
    steps = [bl.parse_line(o["line"]).step for o in objs if o["line"].startswith("BMOE_PROGRESS")]
    assert len(steps) > 50 and steps == list(range(1, len(steps) + 1))


def test_bad_recording_lines_are_counted_with_line_numbers():
    data = (b'{"t": 1.0, "src": "stdout", "line": "BMOE_READY {\\"n_ctx\\": 8}"}\n'
            b"garbage\n"
            b'{"t": "x", "src": "stdout", "line": "a"}\n'
            b"[1]\n"
            b'{"t": 2.0, "src": "stdout", "line": "BMOE_BEGIN {\\"id\\": 1}"}\n')
    rec = parse_recording(data)
    assert len(rec.entries) == 2 and rec.n_turns == 1
    assert [p.lineno for p in rec.problems] == [2, 3, 4]


def _synthetic(path: Path, gap: float) -> None:
    lines = [("stdout", 'BMOE_READY {"load_s":1,"arch":"a","n_ctx":64}'), ("stderr", "log line")]
    for turn in (1, 2):
        lines.append(("stdout", f'BMOE_BEGIN {{"id":{turn}}}'))
        for step in range(1, 4):
            lines.append(("stdout", f'BMOE_PROGRESS {{"step":{step},"steps":3,"text":"t{step}"}}'))
        lines.append(("stdout", f'BMOE_DONE {{"id":{turn},"cancelled":false,"tokens":3}}'))
    with Recorder(path) as r:
        for i, (src, line) in enumerate(lines):
            r.write(src, line, 1000.0 + i * gap)


def test_player_keeps_pace_or_goes_faster(tmp_path):
    path = tmp_path / "r.jsonl"
    _synthetic(path, 0.05)
    rec = load_recording(path)
    assert rec.duration_s == pytest.approx(0.05 * 11)
    got: list = []
    t0 = time.monotonic()
    RecordingPlayer(rec, got.append).play()
    assert time.monotonic() - t0 >= 0.9 * rec.duration_s  # original pace: never early
    assert [g.line for g in got] == [e.line for e in rec.entries]
    got.clear()
    t0 = time.monotonic()
    RecordingPlayer(rec, got.append, speed=float("inf")).play()
    assert len(got) == 12
    with pytest.raises(ValueError):
        RecordingPlayer(rec, print, speed=0)


def test_turn_by_turn_replay_through_the_live_state_machine(tmp_path):
    path = tmp_path / "r.jsonl"
    _synthetic(path, 0.001)
    recs: list = []
    logs: list = []
    src = RecordingSource(load_recording(path), on_record=lambda r, t: recs.append(r),
                           on_stderr=lambda l, t: logs.append(l), speed=float("inf"), turn_by_turn=True)
    src.start()
    assert src.player.paused_at_turn.wait(5)  # before the first turn: nothing of it played
    assert not any(isinstance(r, bl.Done) for r in recs) and src.player.turn == 0
    src.next_turn()
    assert wait_until(lambda: src.player.turn == 1 and src.player.paused_at_turn.is_set(), 5)
    assert sum(isinstance(r, bl.Done) for r in recs) == 1 and src.status().state == "ready"
    assert logs == ["log line"]
    assert src.generate("x") is None  # a recording cannot be driven
    src.next_turn()
    assert src.wait_state("exited", 5)
    assert src.status().turns_done == 2 and src.status().message == "end of recording"


def test_replay_of_a_recording_cut_mid_turn_is_aborted(tmp_path):
    path = tmp_path / "cut.jsonl"
    _synthetic(path, 0.001)
    data = path.read_bytes().splitlines()[:-2]
    rec = parse_recording(b"\n".join(data))
    src = RecordingSource(rec, speed=float("inf")).start()
    assert src.wait_state({"aborted", "exited"}, 5)
    assert src.status().state == "aborted"


def test_recorder_bad_path_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        Recorder(tmp_path / "no" / "such" / "dir.jsonl")


# --- the --record file: never through a link, never over a file, a write error is loud ----------

def test_recorder_refuses_a_symbolic_link_and_leaves_its_target(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "rec.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        Recorder(link)
    with pytest.raises(OSError, match="symbolic link"):
        Recorder(link, force=True)  # not even with force
    assert target.read_text() == "keep me"
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(OSError, match="symbolic link"):
        Recorder(dangling)
    assert not (tmp_path / "nowhere.jsonl").exists()  # nothing created where it points


def test_recorder_refuses_an_existing_file_unless_forced(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text("an earlier recording\n")
    with pytest.raises(OSError, match="already exists"):
        Recorder(path)
    assert path.read_text() == "an earlier recording\n"
    with Recorder(path, force=True) as r:
        assert r.write("stdout", "BMOE_READY {}", 1.0)
    assert orjson.loads(path.read_bytes()) == {"t": 1.0, "src": "stdout", "line": "BMOE_READY {}"}


def test_a_write_error_stops_recording_and_is_reported_at_once():
    from bmoe_top.tui.sources.events import RecordingFailed

    events: list = []
    rec = Recorder("/dev/full", force=True)  # a device: written as it is; every write is ENOSPC
    s = ChildSession([sys.executable, EMITTER, "--rate", "300"], recorder=rec, on_event=events.append).start()
    try:
        assert s.wait_state("ready", 30)
        failed = [e for e in events if isinstance(e, RecordingFailed)]
        assert len(failed) == 1 and "disk is full" in failed[0].message and failed[0].path == "/dev/full"
        assert rec.error is not None and "ENOSPC" in rec.error
        s.generate("x", 3)
        assert s.wait_state("ready", 30)
        assert len([e for e in events if isinstance(e, RecordingFailed)]) == 1  # reported once, the session goes on
    finally:
        s.close()
        rec.close()
    assert s.status().turns_done == 1
