"""The headless commands as real processes: `replay --summary`, `launch --once`, `attach --session
--once`, and their clear errors (missing file, command not found, unwritable --record, no session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import EMITTER, synth

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")
pytestmark = pytest.mark.skipif(not BMOE_TOP.exists(), reason="bmoe-top not installed")


def top(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(BMOE_TOP), *args], capture_output=True, text=True, timeout=timeout)


def test_launch_once_json_on_an_emitter_and_record(tmp_path):
    rec = tmp_path / "rec.jsonl"
    r = top("launch", "--once", "--json", "-p", "hello", "-n", "7", "--record", str(rec),
            "--", sys.executable, EMITTER, "--rate", "500")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["live"]["state"] == "exited" and out["live"]["exit_code"] == 0
    assert out["live"]["turns"][0]["tokens"] == 7 and out["derived"]["token_rows"] == 7
    assert out["tokens"] == 7 and out["meta"]["arch"] == "emitter"
    assert out["turns"] == 1 and out["status"] == "done"
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    assert sum(x["src"] == "stdout" and "BMOE_PROGRESS" in x["line"] for x in lines) == 7
    # the recording replays with the same numbers
    r2 = top("replay", "--summary", "--json", str(rec))
    assert r2.returncode == 0, r2.stderr
    assert json.loads(r2.stdout)["derived"]["token_rows"] == 7


def test_launch_once_reports_aborted_child():
    r = top("launch", "--once", "--json", "-p", "x", "-n", "20", "--", sys.executable, EMITTER, "--die-mid-line", "3")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["live"]["state"] == "aborted" and out["live"]["exit_code"] == -9
    assert any("mid-line" in p for p in out["live"]["problems"])


def test_launch_errors_are_one_line():
    r = top("launch", "--once", "--", "/nonexistent/runtime")
    assert r.returncode == 1 and "cannot start /nonexistent/runtime" in r.stderr and "Traceback" not in r.stderr
    r = top("launch", "--once", "--record", "/nonexistent/dir/x.jsonl", "--", sys.executable, EMITTER)
    assert r.returncode == 2 and "cannot record" in r.stderr and "Traceback" not in r.stderr
    r = top("launch", "--once", "--ready-timeout", "0.5", "--", sys.executable, EMITTER, "--no-ready")
    assert r.returncode == 1 and "no BMOE_READY" in r.stderr


def test_attach_session_once(tmp_path):
    sock = f"/tmp/bmoe-l-cli-{os.getpid()}.sock"
    p = subprocess.Popen([sys.executable, EMITTER, "--socket", sock, "--rate", "500"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < end:
            time.sleep(0.05)
        r = top("attach", "--session", sock, "--once", "--json", "-p", "hi", "-n", "5")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["live"]["turns"][-1]["tokens"] == 5 and out["live"]["ready"]["arch"] == "emitter"
        # a second attach sees the finished turn in the replayed state
        r = top("attach", "--session", sock, "--once", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["live"]["turns"][-1]["tokens"] == 5
    finally:
        p.stdin.close()
        p.wait(10)
    r = top("attach", "--session", sock, "--once", "--timeout", "0.5")
    assert r.returncode == 1 and "no session" in r.stderr


def test_launch_runtime_that_cannot_load_says_why():
    bmoe_run = Path(sys.executable).with_name("bmoe-run")
    if not bmoe_run.exists():
        pytest.skip("bmoe-run not installed")
    r = top("launch", "--once", "--", str(bmoe_run), "-m", "/nonexistent/model.gguf", "--session")
    assert r.returncode == 1
    assert "before BMOE_READY" in r.stderr and "/nonexistent/model.gguf" in r.stderr and "Traceback" not in r.stderr


def test_launch_once_json_failure_still_prints_json(tmp_path):
    import json as _json
    import subprocess as _sp
    import sys as _sys
    from pathlib import Path as _P

    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"definitely not a model")
    run = _P(_sys.executable).with_name("bmoe-run")
    top = _P(_sys.executable).with_name("bmoe-top")
    r = _sp.run([str(top), "launch", "--once", "--json", "-p", "hi", "--", str(run), "--session", "-m", str(bad)],
                capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    out = _json.loads(r.stdout)
    assert out["status"] == "failed" and "not a GGUF" in out["error"] and out["live"]["exit_code"] == 2
    assert "Traceback" not in r.stderr


def test_cli_missing_file_exits_2_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(tmp_path / "x.csv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "no such file" in r.stderr and "Traceback" not in r.stderr


def test_cli_summary_json_matches_file(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(40))
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", "--json", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = orjson.loads(r.stdout)
    assert s["tokens"] == 40
    assert s["load_s"] == 1.5 and s["prefill_s"] == 0.4
    assert s["ttft_s"] is None or s["ttft_s"] > 0  # absent is None, never 0
    assert s["mode"] == "serial"


def test_version_and_help_say_what_bare_bmoe_top_does():
    r = top("--version")
    assert r.returncode == 0 and r.stdout.startswith("bmoe-top ") and r.stdout.split()[1][0].isdigit()
    h = top("--help")
    assert h.returncode == 0 and "live demo" in h.stdout and "--ascii" in h.stdout


@pytest.mark.parametrize("args", [["replay", "CSV"], ["play", "REC"], [], ["launch", "--", "true"],
                                  ["attach", "--audit", "CSV"]])
def test_a_screen_into_a_pipe_is_refused_pointing_to_the_text_forms(tmp_path, args):
    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(8))
    rec = tmp_path / "s.rec.jsonl"
    rec.write_bytes(synth.session_recording(turns=1, n=4))
    argv = [str(csv) if a == "CSV" else str(rec) if a == "REC" else a for a in args]
    r = top(*argv)  # stdout is a pipe here
    assert r.returncode == 2 and r.stdout == ""
    assert "not a terminal" in r.stderr and "--summary" in r.stderr and "Traceback" not in r.stderr
