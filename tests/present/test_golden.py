"""Golden files for every headless JSON document: ``replay --summary --json`` of each format,
``launch --once --json`` (a turn, and a child that never gets ready), ``attach --session --once
--json``, ``attach --metrics --once --json`` (one scrape, two scrapes, unreachable) and ``attach
--audit --once --json``. Each runs through the CLI's ``main`` as a user runs it.

Paths (temporary files, the interpreter, the emitter, ports) become placeholders and the few
timing-dependent values ``"<volatile>"`` (tests/helpers/documents.py). After an intended change of
a document, rewrite the files with ``BMOE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest
tests/present/test_golden.py`` and review the diff (docs/architecture.md "Tests").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import EMITTER, synth
from helpers.cli_session import cli_session, six_requests
from helpers.documents import masked
from helpers.golden import check_golden
from helpers.scripted_http import Scripted, exposition

from bmoe_top.parsers.strp import profile_from_counts, write_strp
from bmoe_top.tui.cli import main

GOLDEN = Path(__file__).resolve().parent / "golden"


def run_cli(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, orjson.loads(out)


def places(tmp_path: Path, **more: str) -> dict[str, str]:
    return {str(tmp_path): "<tmp>", sys.executable: "<python>", EMITTER: "<emitter>", **more}


def audit_log() -> bytes:
    def rec(event, pid, n, **extra):
        r = {"event": event, "time": f"2026-11-29T12:00:{n:02d}.000Z", "pid": pid, "hybrid": False, "hits": 3 * n,
             "hits_profile": 0, "misses": n, "bytes_upload": n << 20, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0,
             "swaps": 0}
        r.update(extra)
        return orjson.dumps(r) + b"\n"

    lay = [{"il": 0, "slots": 2, "hits": 3, "hits_profile": 0, "misses": 1, "resident": [1, 4]},
           {"il": 1, "slots": 1, "hits": 2, "hits_profile": 0, "misses": 2, "resident": [7]}]
    return (rec("load", 5, 1, model={"path": "/m/tiny.gguf", "n_layer": 2}, cache={"slots": 3, "bytes": 1 << 20},
                load_ms=250.0, layers=lay)
            + rec("ready", 5, 2)
            + rec("request", 5, 3, slot=0, task=1, n_prompt=4, n_gen=10, t_prompt_ms=8.0, t_gen_ms=40.0, req_hits=3,
                  req_hits_profile=0, req_misses=1, req_bytes_upload=1 << 20, req_bytes_cpu=0)
            + b"garbage\n"
            + rec("exit", 5, 4, layers=lay, perf={"n_prompt": 4, "n_gen": 10, "t_prompt_ms": 8.0, "t_gen_ms": 40.0}))


def test_replay_summary_of_every_format(tmp_path, capsys):
    import numpy as np

    session = cli_session(six_requests())

    files = {
        "csv_and_route": [("run.csv", synth.token_csv(40)), ("run.route.csv", synth.route_trace(40))],
        "overlap_csv": [("ov.csv", synth.token_csv(24, overlap=True))],
        "transcript": [("stdout.txt", synth.progress_transcript(16))],
        "recording": [("s.rec.jsonl", synth.session_recording(turns=3, n=8))],
        "recording_additive": [("r.rec.jsonl", synth.session_recording(turns=2, n=8, additive=True))],
        "recording_tiers": [("t.rec.jsonl", synth.session_recording(turns=2, n=8, additive=True, tiers=True))],
        "audit": [("a.jsonl", audit_log())],
        # a bmoe-cli --session run of six requests, the fourth refused: its three files, any order
        "cli_session": [("session-requests.jsonl", session.requests), ("bmoe-session.csv", session.csv),
                        ("session.stdout", session.stdout)],
    }
    counts = np.zeros((4, 16), dtype=np.int64)
    counts[:, :4] = np.arange(4, 0, -1)
    write_strp(tmp_path / "p.strp", profile_from_counts(counts, slots=6))
    for name, parts in files.items():
        paths = []
        for fname, data in parts:
            (tmp_path / fname).write_bytes(data)
            paths.append(str(tmp_path / fname))
        code, doc = run_cli(capsys, "replay", "--summary", "--json", *paths)
        assert code == 0
        check_golden(GOLDEN / f"replay_{name}.json", masked(doc, places(tmp_path)))
    code, doc = run_cli(capsys, "replay", "--summary", "--json", str(tmp_path / "p.strp"))
    check_golden(GOLDEN / "replay_strp.json", masked(doc, places(tmp_path)))
    # a session request log alone holds no measurements: no document, exit 1 with the reason
    reqs = b'{"cmd":"generate","id":1,"prompt":"x"}\n{"cmd":"close"}\n'
    (tmp_path / "reqs.jsonl").write_bytes(reqs)
    assert main(["replay", "--summary", "--json", str(tmp_path / "reqs.jsonl")]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "session requests only" in cap.err


def test_launch_once(tmp_path, capsys):
    code, doc = run_cli(capsys, "launch", "--once", "--json", "-p", "hello", "-n", "5", "--",
                        sys.executable, EMITTER, "--rate", "500")
    assert code == 0 and doc["live"]["state"] == "exited"
    # the run block every --once --json document carries, as replay --summary --json prints it
    assert set(doc) == {"run", "live"}
    (tmp_path / "run.csv").write_bytes(synth.token_csv(8))
    code, replayed = run_cli(capsys, "replay", "--summary", "--json", str(tmp_path / "run.csv"))
    assert code == 0 and set(doc["run"]) == set(replayed)
    assert doc["run"]["ttft_s"] > 0  # measured from the request to the first token: how long depends on the machine
    check_golden(GOLDEN / "launch_once.json", masked(doc, places(tmp_path), ["live.wall_s", "run.ttft_s"]))
    code, doc = run_cli(capsys, "launch", "--once", "--json", "--ready-timeout", "0.3", "--",
                        sys.executable, EMITTER, "--no-ready")
    assert code == 1 and doc["status"] == "failed" and doc["run"]["derived"]["token_rows"] == 0
    check_golden(GOLDEN / "launch_once_never_ready.json", masked(doc, places(tmp_path)))


def test_attach_session_once(tmp_path, capsys):
    sock = str(tmp_path / "s.sock")
    p = subprocess.Popen([sys.executable, EMITTER, "--socket", sock, "--rate", "500"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < end:
            time.sleep(0.05)
        code, doc = run_cli(capsys, "attach", "--session", sock, "--once", "--json", "-p", "hi", "-n", "4")
        assert code == 0 and doc["live"]["turns"][-1]["tokens"] == 4
        assert doc["run"]["ttft_s"] > 0
        # a socket client numbers its requests from its pid
        ids = ["live.request_id", "live.turns.*.id", "run.turn_list.*.id"]
        check_golden(GOLDEN / "attach_session_once.json", masked(doc, places(tmp_path), [*ids, "run.ttft_s"]))
    finally:
        p.stdin.close()
        p.wait(10)


@pytest.fixture
def scripted():
    s = Scripted()
    yield s
    s.close()


def test_attach_metrics_once(tmp_path, capsys, scripted):
    scripted.answers = [(200, exposition(100, 20, 10).encode(), 0)]
    code, doc = run_cli(capsys, "attach", "--metrics", scripted.url, "--once", "--json")
    assert code == 0 and doc["rates"] is None
    aged = ["stale_s", "retry_in_s"]
    check_golden(GOLDEN / "attach_metrics_once.json",
                 masked(doc, places(tmp_path, **{scripted.url: "<url>"}), aged))
    scripted.answers = [(200, exposition(100, 20, 10).encode(), 0), (200, exposition(190, 30, 30).encode(), 0)]
    code, doc = run_cli(capsys, "attach", "--metrics", scripted.url, "--once", "--json", "--interval", "0.2")
    assert code == 0 and doc["rates"]["hit_pct"] == 90.0
    by_time = ["rates.interval_s", "rates.tok_s", "rates.prompt_tok_s", "rates.read_mib_s", "rates.cpu_mib_s", *aged]
    check_golden(GOLDEN / "attach_metrics_two_scrapes.json",
                 masked(doc, places(tmp_path, **{scripted.url: "<url>"}), by_time))
    scripted.close()
    code, doc = run_cli(capsys, "attach", "--metrics", scripted.url, "--once", "--json")
    assert code == 1 and doc["status"] == "refused"  # nothing listens on the port any more
    check_golden(GOLDEN / "attach_metrics_unreachable.json",
                 masked(doc, places(tmp_path, **{scripted.url: "<url>"}), ["detail", "run.status_detail", *aged]))


def test_attach_audit_once(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_bytes(audit_log())
    code, doc = run_cli(capsys, "attach", "--audit", str(tmp_path / "a.jsonl"), "--once", "--json")
    assert code == 0 and doc["records"] == 4 and doc["bad_lines"] == 1
    check_golden(GOLDEN / "attach_audit_once.json", masked(doc, places(tmp_path)))
    code, doc = run_cli(capsys, "attach", "--audit", str(tmp_path / "none.jsonl"), "--once", "--json")
    assert code == 1 and doc["status"] == "waiting"
    check_golden(GOLDEN / "attach_audit_waiting.json", masked(doc, places(tmp_path)))
