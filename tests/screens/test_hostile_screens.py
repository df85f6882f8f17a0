"""Nothing from outside reaches the terminal raw (docs/telemetry.md "Terminal safety"): hostile
strings (OSC 52 clipboard writes, title sets, CSI, 8-bit C1, bidi overrides, C0 controls) in every
place an outside string enters, drawn on each screen in a Textual pilot, and no line the screen
draws carries a raw ESC, C1, control or bidi character, while the value is still shown (made
visible). Places: a CSV header's model and arch, a file name, a transcript's BMOE_READY model and
arch, its loader lines and an unparsed summary line, bad lines (problem texts), a /metrics
server's error bodies and unknown series' label values, an audit log's model path, a live child's
stderr, BMOE_READY and BMOE_ERROR. A file that is not a recorded run gets the banner."""

from __future__ import annotations

import sys
import textwrap
import time

import orjson
import pytest
from helpers import synth
from helpers.hostile import HOSTILE, raw_controls, screen_text
from helpers.scripted_http import Scripted, exposition

from bmoe_top.parsers.prom import parse_exposition
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.cli import replay_title
from bmoe_top.tui.feed.files import open_replay
from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.tail import FileTail

SIZE = (160, 48)
J = orjson.dumps(HOSTILE).decode()  # the hostile string as a JSON string literal


async def wait_for(pilot, cond, limit=60.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        await pilot.pause(0.05)
    return cond()


async def every_tab_is_inert(pilot, app, tabs=("overview", "log", "problems")) -> str:
    """Show each tab, repaint, and check the whole screen; returns all the text seen."""
    seen = []
    for tab in tabs:
        app.main.action_tab(tab)
        await pilot.pause()
        app.main.refresh_views(force=True)
        await pilot.pause()
        text = screen_text(app)
        assert raw_controls(text) == [], (tab, raw_controls(text))
        seen.append(text)
    return "\n".join(seen)


def hostile_csv() -> bytes:
    return synth.token_csv(30).replace(b"model=synthetic-moe.gguf arch=qwen3moe",
                                       b"model=" + HOSTILE.encode() + b" arch=" + HOSTILE.encode())


def hostile_transcript() -> bytes:
    lines = [
        f"print_info: general.name          = {HOSTILE}",
        f"llama_model_loader: loaded meta data with 3 key-value pairs and 9 tensors from /m/{HOSTILE}.gguf",
        f"bmoe: expert streaming ON  n_expert=16 model={HOSTILE}",
        "BMOE_READY " + '{"load_s":1.0,"arch":' + J + ',"n_ctx":64,"model":' + J + "}",
        "BMOE_BEGIN {\"id\":1}",
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10,"io_ms":2,"compute_ms":8,"text":"a"}',
        'BMOE_PROGRESS {"step":' + J + ',"steps":2}',  # a bad line: its text is a problem entry
        'BMOE_DONE {"id":1,"cancelled":false,"tokens":1,"tok_s":100,"msg":' + J + "}",
        f"moe-something: {HOSTILE} 12 MiB",  # a summary-like line of unknown shape: shown raw, unparsed
        f"generation: 1 tokens, 0.010 s/token (100.000 tok/s) {HOSTILE}",
    ]
    return ("\n".join(lines) + "\n").encode()


async def test_replay_of_hostile_files_is_inert_and_shown(tmp_path):
    name = f"run{HOSTILE}.csv".replace("/", "_").replace("\x00", "")
    csv = tmp_path / name
    csv.write_bytes(hostile_csv())
    tr = tmp_path / "console.log"
    tr.write_bytes(hostile_transcript())
    binary = tmp_path / "photo.bin"
    binary.write_bytes(bytes(range(256)) * 16)
    paths = [str(csv), str(tr), str(binary)]
    run, not_runs = open_replay(paths, allow_mixed=True)
    assert [p for p, _ in not_runs] == [str(binary)]
    app = BmoeTopApp(ReplayScreen(run, title=replay_title(paths)))
    async with app.run_test(size=SIZE) as pilot:
        seen = await every_tab_is_inert(pilot, app)
        assert "H0ST␛]52;c;" in seen  # the model name is drawn, made visible
        assert "photo.bin" in seen and "not a recorded run" in seen  # the banner
        banner = app.query_one("#banner")
        assert banner.display and "not a recorded run" in str(banner.render())
    assert raw_controls(" ".join([*run.meta.values(), *run.log, *run.sources])) == []


async def test_metrics_attach_with_hostile_error_bodies_and_labels_is_inert():
    srv = Scripted()
    try:
        other = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
        body = exposition(10, 5, 3) + f'# TYPE my_series gauge\nmy_series{{model="{other}"}} 1\n'
        srv.answers = [(500, HOSTILE.encode(), 0), (200, body.encode(), 0), (200, body.encode(), 0),
                       (404, HOSTILE.encode(), 0),
                       (501, orjson.dumps({"error": {"code": 501, "message": HOSTILE}}), 0)]
        poller = MetricsPoller(srv.url, timeout=5)
        app = BmoeTopApp(MetricsAttachScreen(poller, start_poller=False))
        async with app.run_test(size=SIZE) as pilot:
            seen = []
            for _ in range(5):
                poller.scrape_once()
                app.main.refresh_views(force=True)
                await pilot.pause()
                text = screen_text(app)
                assert raw_controls(text) == [], raw_controls(text)
                seen.append(text)
            all_text = "\n".join(seen)
            assert "H0ST␛]52" in all_text  # the error body is shown, inert
            assert 'my_series{model="H0ST' in all_text  # the unknown series is listed, its label inert
            seen = await every_tab_is_inert(pilot, app)
    finally:
        srv.close()
        poller.client.close()


async def test_audit_attach_with_a_hostile_model_path_is_inert(tmp_path):
    def rec(event, n, **extra):
        r = {"event": event, "time": f"2026-11-29T12:00:{n:02d}.000Z", "pid": 5, "hybrid": False, "hits": 3 * n,
             "hits_profile": 0, "misses": n, "bytes_upload": n << 20, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0,
             "swaps": 0}
        r.update(extra)
        return orjson.dumps(r) + b"\n"

    path = tmp_path / "audit.jsonl"
    path.write_bytes(rec("load", 1, model={"path": f"/m/{HOSTILE}.gguf", "n_layer": 2}, cache={"slots": 3})
                     + rec("ready", 2) + HOSTILE.encode() + b"\n"
                     + rec("request", 3, slot=0, task=1, n_prompt=4, n_gen=10, t_prompt_ms=8.0, t_gen_ms=40.0,
                           req_hits=3, req_hits_profile=0, req_misses=1, req_bytes_upload=1 << 20, req_bytes_cpu=0))
    tail = FileTail(path)
    app = BmoeTopApp(AuditAttachScreen(tail, start_tail=False))
    async with app.run_test(size=SIZE) as pilot:
        tail.read_to_end()
        app.main.refresh_views(force=True)
        await pilot.pause()
        seen = await every_tab_is_inert(pilot, app)
        assert "H0ST␛]52" in seen


CHILD = textwrap.dedent(f"""
    import json, sys
    H = json.loads({J!r})
    print("print_info: general.name = " + H, file=sys.stderr, flush=True)
    print("print_info: n_layer = 4", file=sys.stderr, flush=True)
    print("a plain stderr line " + H, file=sys.stderr, flush=True)
    print("BMOE_READY " + json.dumps({{"load_s": 0.1, "arch": H, "n_ctx": 64, "model": H}}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("cmd") == "generate":
            print("BMOE_ERROR " + json.dumps({{"id": req["id"], "fatal": False, "msg": H}}), flush=True)
        if req.get("cmd") == "close":
            break
""")


async def test_live_child_with_hostile_ready_stderr_and_errors_is_inert():
    src = ChildSession([sys.executable, "-c", CHILD])
    app = live_app(src, title="hostile")
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_for(pilot, lambda: src.state == "ready")
        src.generate("hello", 4)
        assert await wait_for(pilot, lambda: src.status().last_error is not None)
        assert await wait_for(pilot, lambda: any("plain stderr" in x for x in app.main.model.log))
        seen = await every_tab_is_inert(pilot, app)
        assert "H0ST␛]52" in seen
        model = app.main.model
        assert model.n_layer == 4 and "H0ST" in model.meta["model_name"]  # from the stderr loader lines
    src.close()


@pytest.mark.parametrize("kind", ["csv", "transcript"])
def test_summary_text_and_json_are_inert(tmp_path, capsys, kind):
    from bmoe_top.tui.cli import main

    path = tmp_path / ("run.csv" if kind == "csv" else "console.log")
    path.write_bytes(hostile_csv() if kind == "csv" else hostile_transcript())
    assert main(["replay", "--summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and "H0ST␛]52" in out
    assert main(["replay", "--summary", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []  # C0 escaped by JSON, C1/bidi as \\u escapes
    doc = orjson.loads(out)
    assert "H0ST" in doc["meta"]["model"]


def test_metrics_once_text_with_a_hostile_error_body_is_inert(capsys):
    from bmoe_top.tui.cli import main

    srv = Scripted()
    try:
        srv.answers = [(500, HOSTILE.encode(), 0), (500, HOSTILE.encode(), 0)]
        assert main(["attach", "--metrics", srv.url, "--once"]) == 1
        cap = capsys.readouterr()
        assert raw_controls(cap.out + cap.err) == [] and "H0ST␛]52" in cap.out
        assert main(["attach", "--metrics", srv.url, "--once", "--json"]) == 1
        out = capsys.readouterr().out
        assert raw_controls(out) == [] and "H0ST" in orjson.loads(out)["detail"]
    finally:
        srv.close()


def test_a_parsed_hostile_exposition_keeps_the_label_for_the_json():
    other = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
    snap = parse_exposition(f'my_series{{model="{other}"}} 1\n' + exposition(1, 1, 1), 1.0)
    assert any("H0ST" in k for k in snap.others)
