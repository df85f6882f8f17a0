"""The headless commands as real processes: `replay --summary`, `launch --once`, `attach --session
--once`, and their clear errors (missing file, command not found, unwritable --record, no session)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from helpers import EMITTER, synth
from helpers.readonly import read_only_prefix

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
    run = out["run"]
    assert out["live"]["turns"][0]["tokens"] == 7 and run["derived"]["token_rows"] == 7
    assert run["tokens"] == 7 and run["meta"]["arch"] == "emitter"
    assert run["meta"]["n_ctx"] == 4096  # a number, not the text "4096"
    assert run["turns"] == 1 and run["status"] == "done"
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
    assert r.returncode == 1 and "cannot write /nonexistent/dir/x.jsonl" in r.stderr and "Traceback" not in r.stderr
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


def test_launch_once_ready_timeout_is_in_the_document_whichever_timer_runs_out_first():
    # the document's status detail said "loading (pid N)" when launch_once's own wait for
    # BMOE_READY ran out before the source's watchdog looked (1 run in 8 on a loaded machine);
    # the watchdog here never looks before the end: the document must still say why
    from bmoe_top.tui.headless import launch_once
    from bmoe_top.tui.sources.child_session import ChildSession

    src = ChildSession([sys.executable, EMITTER, "--no-ready"], ready_timeout_s=1e6)
    out = launch_once(src, "hi", 2, 0.3, 10.0)
    assert out.status == 1 and out.document["status"] == "failed"
    assert out.document["run"]["status_detail"] == "no BMOE_READY after 0.3 s", out.document["run"]


def test_cli_missing_file_exits_1_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(tmp_path / "x.csv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
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


def test_attach_session_once_json_without_a_socket_prints_json(tmp_path):
    r = top("attach", "--session", str(tmp_path / "absent.sock"), "--once", "--json", "--timeout", "0.5")
    assert r.returncode == 1 and "no session" in r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "failed" and "no session" in out["error"] and out["live"]["state"] == "connecting"


def test_attach_session_once_without_timeout_does_not_wait_for_a_path_with_no_socket(tmp_path):
    # before, it waited the default 30 s for a socket that was never there
    r = top("attach", "--session", str(tmp_path / "absent.sock"), "--once", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["status"] == "failed"
    assert out["error"].startswith(f"no session on {tmp_path / 'absent.sock'} (") and " after " not in out["error"]


def test_record_to_a_full_disk_fails_loudly(tmp_path):
    # /dev/full: every write is ENOSPC. Before, the recording failed silently and the command exited 0.
    r = top("launch", "--once", "--json", "-p", "x", "-n", "3", "--record", "/dev/full", "--force",
            "--", sys.executable, EMITTER, "--rate", "500")
    assert r.returncode == 1
    assert "/dev/full" in r.stderr and "disk is full" in r.stderr and "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert out["live"]["turns"][0]["tokens"] == 3  # the run itself went on
    assert any("disk is full" in a for a in out["run"]["alerts"]) and out["run"]["problems"] >= 1


def test_record_never_overwrites_or_follows_a_link(tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_text("earlier\n")
    r = top("launch", "--once", "-p", "x", "-n", "2", "--record", str(old), "--", sys.executable, EMITTER)
    assert r.returncode == 1 and "already exists" in r.stderr and "--force" in r.stderr
    assert old.read_text() == "earlier\n"
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    r = top("launch", "--once", "-p", "x", "-n", "2", "--record", str(link), "--force", "--", sys.executable, EMITTER)
    assert r.returncode == 1 and "symbolic link" in r.stderr
    assert target.read_text() == "precious\n"
    r = top("launch", "--once", "--json", "-p", "x", "-n", "2", "--record", str(old), "--force",
            "--", sys.executable, EMITTER)
    assert r.returncode == 0, r.stderr
    assert "BMOE_PROGRESS" in old.read_text() and "earlier" not in old.read_text()


def test_record_into_a_read_only_folder_fails_before_the_run(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    prefix = read_only_prefix(ro)
    if prefix is None:
        pytest.skip("cannot mount a read-only tmpfs in a private mount namespace here")
    r = subprocess.run([*prefix, str(BMOE_TOP), "launch", "--once", "-p", "x", "-n", "2", "--record",
                        str(ro / "s.jsonl"), "--", sys.executable, EMITTER], capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(ro / "s.jsonl") in lines[0] and "read-only (EROFS)" in lines[0]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_a_once_command_closes_its_child(sig):
    # a turn that cannot end by itself (100,000 tokens at 20 lines/s): only the signal ends it
    p = subprocess.Popen([str(BMOE_TOP), "launch", "--once", "--json", "-p", "x", "-n", "100000",
                          "--", sys.executable, EMITTER, "--rate", "20"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        kids: list[int] = []
        while time.monotonic() < end and not kids:
            kids = _children(p.pid)
            time.sleep(0.05)
        assert kids, "the child never started"
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig, err
    end = time.monotonic() + 30
    while time.monotonic() < end and not all(_gone(k) for k in kids):
        time.sleep(0.05)
    assert all(_gone(k) for k in kids), f"child {kids} left running"
    assert "Traceback" not in err


def test_attach_metrics_once_honours_its_timeout(srv):
    from helpers.scripted_http import exposition

    # an answer slower than the 5 s default arrives within a longer --timeout
    srv.answers = [(200, exposition(10, 5, 3).encode(), 6.0)]
    r = top("attach", "--metrics", srv.url, "--once", "--json", "--timeout", "60", timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "ok"
    # a shorter one gives up long before the answer comes: busy (/health answers), N named
    srv.answers = [(200, exposition(10, 5, 3).encode(), 600.0)]
    r = top("attach", "--metrics", srv.url, "--once", "--json", "--timeout", "0.5", timeout=120)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["status"] == "busy" and "within 0.5 s" in doc["detail"], doc


@pytest.mark.parametrize("form", [["--json"], []])
def test_attach_metrics_once_names_an_http_status_that_is_not_200(tmp_path, form):
    """A 404 (the URL names no endpoint) read "malformed" with the error page's HTML; it is
    ``http_error`` with the status and its reason phrase. Python's own file server, on an empty
    folder: every path is its real 404 page."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/nothing"
        r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "attach", "--metrics", url, "--once", *form],
                           capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"bmoe-top: attach {url}: http_error: HTTP 404 Not Found"], r.stderr
    if form:
        doc = json.loads(r.stdout)
        assert (doc["status"], doc["detail"], doc["http_status"]) == ("http_error", "HTTP 404 Not Found", 404)
    else:
        assert r.stdout == f"{url}: http_error HTTP 404 Not Found\n"
    assert "malformed" not in r.stdout + r.stderr and "<" not in r.stdout + r.stderr


BMOE_RUN = BMOE_TOP.with_name("bmoe-run")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "tiny.gguf", preset="tiny"))


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
def test_launch_once_of_bmoe_run_shows_every_figure_it_sends(tiny):
    """A real bmoe-run child: its additive BMOE_READY / BMOE_PROGRESS / BMOE_DONE fields
    (docs/telemetry.md "Additive fields") reach ``launch --once --json`` and the text rows."""
    child = ["--", str(BMOE_RUN), "-m", str(tiny), "--session", "--quiet", "-c", "256"]
    r = top("launch", "--once", "--json", "-p", "hi", "-n", "4", *child, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["run"]
    for key in ("ttft_s", "prefill_tps", "compute_s_tok", "io_s_tok", "resident_mib", "budget_mib"):
        assert isinstance(doc[key], float) and doc[key] >= 0, (key, doc[key])
    extra = doc["extra"]
    assert 0 <= extra["hit_pct_decode"] <= 100 and 0 <= extra["hit_pct_since_load"] <= 100
    assert extra["xfer_mib"] >= doc["read_mib"] > 0  # page-aligned transfers hold the payload
    assert extra["xfer_mib_tok"] >= doc["read_mib_per_tok"] > 0
    assert extra["decode_tok_s"] > 0 and extra["cpu_s/tok"] >= 0 and extra["majflt/tok"] >= 0
    assert isinstance(extra["cache_evictions"], int) and isinstance(extra["cache_rereads"], int)
    assert extra["peak_rss_mib"] >= extra["rss_mib"] > 0
    meta = doc["meta"]
    assert meta["io_threads"] == 1 and meta["threads"] >= 1 and meta["o_direct"] in ("True", "False")
    assert meta["expert_bank_MiB"] > 0 and meta["n_ctx"] > 0  # numbers, not their text
    r = top("launch", "--once", "-p", "hi", "-n", "4", *child, timeout=120)
    assert r.returncode == 0, r.stderr
    labels = {re.split(r"\s{2,}", ln.strip())[0] for ln in r.stdout.splitlines() if ln.startswith("  ")}
    assert {"TTFT/turn", "hit decode", "hit since load", "aligned/tok", "evictions", "re-reads", "peak RSS",
            "cpu/token", "majflt/token", "decode tok/s"} <= labels, r.stdout


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


@pytest.mark.parametrize("args, hint", [
    (["compare", "CSV", "CSV2"], "compare --json"),
    (["whatif", "TRACE"], "whatif --json"),
    (["fleet", "--prometheus", "http://127.0.0.1:9"], "fleet --once --json"),
])
def test_analysis_and_fleet_screens_into_a_pipe_are_refused_pointing_to_their_text_forms(tmp_path, args, hint):
    csv, csv2, trace = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "t.route.csv"
    csv.write_bytes(synth.token_csv(8))
    csv2.write_bytes(synth.token_csv(8, seed=2))
    trace.write_bytes(synth.route_trace(16))
    names = {"CSV": csv, "CSV2": csv2, "TRACE": trace}
    r = top(*[str(names[a]) if a in names else a for a in args])  # stdout is a pipe here
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200])
    assert "not a terminal" in r.stderr and hint in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, status, says", [
    (["replay", "EMPTY"], 1, "the file is empty"),  # off a terminal: the bad input first, not the pipe
    (["replay", "GARBAGE"], 1, "not a recorded run"),
    (["replay", "--summary", "ZEROS"], 1, "only NUL bytes: not a recorded run"),  # it said "the file is empty"
    (["replay", "--summary", "BIGZEROS"], 1, "only NUL bytes: not a recorded run"),  # past the sniffed sample
    (["replay", "DIR"], 1, "is a directory"),  # it said 2 while an empty file said 1
    (["replay", "--summary", "DIR"], 1, "is a directory"),
    (["replay", "--summary", "MISSING"], 1, "no such file"),
    (["compare", "CSV", "MISSING"], 1, "no such file"),
    (["whatif", "MISSING"], 1, "no such file"),
    (["play", "DIR"], 1, "is a directory, not a recorded run"),
    (["play", "EMPTY"], 1, "holds no recorded lines"),
    (["launch", "--record", "CSV", "--", "true"], 1, "already exists"),
    (["compare", "CSV"], 2, "at least two arms"),  # the command line itself: 2, before any file is read
    (["play", "--speed", "-1", "MISSING"], 2, "--speed: must be a number 0 or more"),
])
def test_exit_status_one_scheme_and_inputs_before_the_terminal(tmp_path, args, status, says):
    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(8))
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "garbage.bin").write_bytes(bytes(range(1, 256)) * 4)
    (tmp_path / "zeros.bin").write_bytes(bytes(4096))
    (tmp_path / "bigzeros.csv").write_bytes(bytes(3 << 20))
    names = {"CSV": csv, "EMPTY": tmp_path / "empty.csv", "GARBAGE": tmp_path / "garbage.bin", "DIR": tmp_path,
             "MISSING": tmp_path / "missing.csv", "ZEROS": tmp_path / "zeros.bin",
             "BIGZEROS": tmp_path / "bigzeros.csv"}
    r = top(*[str(names[a]) if a in names else a for a in args])  # stdout is a pipe here
    assert r.returncode == status and says in r.stderr, (r.returncode, r.stderr)
    assert "not a terminal" not in r.stderr and "Traceback" not in r.stderr and r.stdout == ""
    assert csv.read_bytes() == synth.token_csv(8)  # --record refused before anything was written


@pytest.mark.parametrize("argv, says", [
    (["--fps", "0", "replay", "x.csv"], "--fps: must be between 1 and 100"),  # 0 was accepted
    (["replay", "--fps", "0", "x.csv"], "--fps: must be between 1 and 100"),
    (["replay", "--fps", "-3", "x.csv"], "--fps"),
    (["compare", "--fps", "nan", "a", "b"], "--fps: must be between 1 and 100"),
    (["whatif", "--json", "--budgets", "-5,0", "x.route.csv"], "--budgets: '-5' must be a finite number from 0"),
    (["whatif", "--json", "--budgets", "10,-5", "x.route.csv"], "--budgets: '-5' must be a finite number from 0"),
    # a finite budget past what a replay counts in bytes: a numpy warning, then exit 1
    (["whatif", "--json", "--budgets", "0,99999999999999999999", "x.route.csv"],
     "--budgets: '99999999999999999999' must be a finite number from 0 to 1,073,741,824 MiB"),
    # --json of a command with a screen needs --once: it opened the screen without a word
    (["attach", "--metrics", "http://127.0.0.1:9/metrics", "--json"], "attach: --json needs --once"),
    (["launch", "--json", "--", "true"], "launch: --json needs --once"),
])
def test_argument_values_are_checked_as_usage_errors(capsys, argv, says):
    from bmoe_top.tui.cli import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("args", [
    ["fleet", "--prometheus", "http://127.0.0.1:9", "--once", "--json", "--timeout", "5"],
    ["attach", "--metrics", "http://127.0.0.1:9/metrics", "--once", "--json", "--timeout", "5"],
])
def test_a_once_json_document_that_failed_says_so_on_stderr(args):
    """A failed ``--once --json`` prints its document and one line on stderr: a script that sends
    stdout elsewhere still learns why the status is 1 (it learnt nothing)."""
    r = top(*args)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["status"] != "ok", (r.returncode, r.stdout[:300])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bmoe-top: ") and doc["status"] in lines[0], r.stderr


@pytest.mark.parametrize("argv, prints", [
    (["replay", "x.csv"], False), (["replay", "--summary", "x.csv"], True), (["replay", "--json", "x.csv"], True),
    (["compare", "a", "b"], False), (["compare", "--md", "a", "b"], True), (["compare", "--csv", "a", "b"], True),
    (["whatif", "t.route.csv"], False), (["whatif", "--strp", "o.strp", "t.route.csv"], True),
    (["probe", "f"], True), (["attach", "--audit", "a.jsonl"], False),
    (["attach", "--audit", "a.jsonl", "--once"], True),
    (["fleet", "--prometheus", "http://x", "--once", "--json"], True),
])
def test_one_predicate_says_whether_a_command_prints_or_opens_a_screen(tmp_path, argv, prints):
    """What loads the app and what reads the settings file follow the same definition: a text form
    (``--md``, ``--csv``, ``--strp`` too) reads no settings, a screen reads them."""
    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.cli import _apply_settings, _prints, build_parser

    config = tmp_path / "s.toml"
    config.write_text("[view]\nfold_maps = false\n")
    args = build_parser().parse_args([*argv, "--config", str(config)])
    assert _prints(args) is prints
    BmoeTopApp.settings_store = None
    assert _apply_settings(args) is None
    assert (BmoeTopApp.settings_store is None) is prints


def deep_transcript(depth: int = 1100) -> str:
    nest = "[" * depth + "]" * depth
    return "\n".join([
        'BMOE_READY {"load_s":1,"arch":"x"}',
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10,"text":"a"}',
        'BMOE_ROUTE {"step":1,"experts":%s}' % nest,
        'BMOE_FUTURE {"x":%s}' % nest,
        'BMOE_PROGRESS {"step":2,"steps":2,"wall_ms":10,"text":"ab"}',
        'BMOE_DONE {"id":1,"tokens":2,"text":"ab"}',
    ]) + "\n"


def test_replay_summary_of_a_line_nested_1100_deep(tmp_path):
    f = tmp_path / "deep.txt"
    f.write_text(deep_transcript())
    r = top("replay", "--summary", str(f))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert "token rows: 2  turns: 1  routing rows: 0  problems: 2" in r.stdout


def test_launch_once_past_a_line_nested_1100_deep():
    # the reader thread used to die on it: the DONE after it never came and --once waited forever
    r = top("launch", "--once", "--json", "-p", "x", "-n", "5", "--", sys.executable, EMITTER, "--deep", "1100",
            timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    live = json.loads(r.stdout)["live"]
    assert live["turns"][0]["tokens"] == 5 and live["state"] == "exited"
    assert sum("depth limit exceeded" in p for p in live["problems"]) == 3


def test_launch_once_says_what_an_unflushed_child_holds_back():
    # BMOE_READY flushed, every later line held in the child's stdio buffer until it exits
    r = top("launch", "--once", "--json", "--turn-timeout", "2", "-p", "x", "-n", "5", "--", sys.executable, EMITTER,
            "--buffered-after-ready", timeout=120)
    assert r.returncode == 1
    err = json.loads(r.stdout)["error"]
    assert err.startswith("no BMOE_DONE within 2 s of the request (--turn-timeout): no line on stdout since then")
    assert "without fflush()" in err and "stdbuf -oL" in err
    assert r.stderr.strip() == f"bmoe-top: {err}"
    # READY itself held back: the READY wait says so
    r = top("launch", "--once", "--ready-timeout", "1", "--", sys.executable, EMITTER, "--block-buffered", timeout=120)
    assert r.returncode == 1 and "(--ready-timeout): no line on stdout yet (0 on stderr)" in r.stderr
    assert "without fflush()" in r.stderr and "Traceback" not in r.stderr


def test_launch_once_turn_timeout_counts_the_lines_that_came():
    # a slow child that does flush: 2 tokens a second, 60 asked, 5 s allowed
    r = top("launch", "--once", "--turn-timeout", "5", "-p", "x", "-n", "60", "--", sys.executable, EMITTER,
            "--rate", "2", timeout=120)
    assert r.returncode == 1 and "no BMOE_DONE within 5 s of the request (--turn-timeout): " in r.stderr
    assert re.search(r"\d+ lines? on stdout since then, the newest \d+ s ago", r.stderr), r.stderr
    r = top("launch", "--once", "--turn-timeout", "0", "--", sys.executable, EMITTER)
    assert r.returncode == 2 and "--turn-timeout: must be a number above 0" in r.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [["replay", "--summary"], ["replay", "--summary", "--json"]])
def test_a_full_standard_output_is_one_line_and_status_1(tmp_path, args):
    f = tmp_path / "run.csv"
    f.write_bytes(synth.token_csv(20))
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(BMOE_TOP), *args, str(f)], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert r.returncode == 1 and r.stderr == "bmoe-top: cannot write standard output: the disk is full (ENOSPC)\n"


BMOE_CLI_HELP = """usage: bmoe-cli [options]

  -m, --model FNAME        model path (default: models/7B/ggml-model-f16.gguf)
  -p, --prompt PROMPT      prompt to start generation with
  -n, --n-predict N        number of tokens to predict (default: -1, -1 = infinity)
  -c, --ctx-size N         size of the prompt context (default: 4096, 0 = loaded from model)
  --moe-stream             stream expert weights from flash
  --moe-cache-mb N         expert cache budget in MiB (default: 0 = off)
  --arm NAME=FILES         a named arm
"""


@pytest.mark.parametrize("what", ["bmoe-top --help", "bmoe-top --version", "bmoe-cli --help", "notes"])
@pytest.mark.parametrize("name", ["out.txt", "out.log"])
def test_replay_summary_refuses_text_that_is_not_a_run(tmp_path, what, name):
    if what.startswith("bmoe-top"):
        text = top(what.split()[1]).stdout
    elif what == "bmoe-cli --help":
        text = BMOE_CLI_HELP
    else:
        text = "Tried the demo today.\nThe cache warms up fast.\n"
    path = tmp_path / name
    path.write_text(text)
    for args in (["replay", "--summary", str(path)], ["replay", "--summary", "--json", str(path)]):
        r = top(*args)
        assert r.returncode == 1 and r.stdout == "", (what, r.stdout[:200])
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and "not a recorded run" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("extra", [["--once", "--json"], ["--once"], []])
@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1/metrics", "http://"])
def test_attach_metrics_with_a_value_that_is_not_a_url_is_a_usage_error(url, extra):
    r = top("attach", "--metrics", url, *extra)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bmoe-top: attach --metrics {url}: "), r.stderr


@pytest.mark.parametrize(("load", "own", "command", "want"), [
    ("9.00 9.00 9.00 10/300 1", None, False, "PASSIVE"),  # crowded: the demo child waits passively
    ("0.10 0.10 0.10 1/300 1", None, False, "unset"),  # the cores to itself: libgomp's default
    ("9.00 9.00 9.00 10/300 1", "ACTIVE", False, "ACTIVE"),  # the user's setting is kept
    ("9.00 9.00 9.00 10/300 1", None, True, "unset"),  # a command the user gives runs as it is
])
def test_the_demo_child_gets_passive_waiting_on_crowded_cores(monkeypatch, capsys, load, own, command, want):
    """``make run`` (the README's demo) decoded at about 1 tok/s on a loaded machine: the bundled
    runtime's OpenMP threads spun at their barriers while other processes held the cores."""
    from bmoe_top.tui import cli
    from bmoe_top.tui.sources import child_session

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # the suite's own setting (tests/conftest.py)
    if own:
        monkeypatch.setenv("OMP_WAIT_POLICY", own)
    child = [sys.executable, EMITTER, "--arch-from-env", "OMP_WAIT_POLICY"]
    monkeypatch.setattr(cli, "runtime_command", lambda model=None, extra=None: child)
    monkeypatch.setattr(child_session, "machine_load", lambda: (load, 2))
    argv = ["launch", "--once", "--json", "-p", "x", "-n", "3"] + (["--", *child] if command else [])
    assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["live"]["ready"]["arch"] == want


@pytest.mark.parametrize("argv", [["replay", "--summary"], ["play"], ["whatif", "--json"],
                                  ["compare", "--md", "other"]])
def test_a_pipe_or_a_device_is_refused_not_read(tmp_path, argv):
    # replay --summary of a FIFO waited forever for a writer; /dev/zero never ends
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        args = [a if a != "other" else path for a in argv]
        r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", *args, path], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert r.returncode == 1 and r.stdout == "", (args, r.returncode, r.stdout[:200], r.stderr)
        assert r.stderr.count("\n") == 1 and "is not a regular file (a pipe, socket or device)" in r.stderr, r.stderr
