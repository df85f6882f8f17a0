"""Snapshots (pytest-textual-snapshot) of every mode's screen on deterministic inputs: the replay
screen; the live screen ready, generating and aborted; the metrics attach screen connected and
unreachable; the audit attach screen following and waiting; each at 80x24, 120x40 and 200x60,
in colour and under NO_COLOR; the replay screen also in each look (colour, 16 colours, ASCII,
mono). The live ones run a real child (the emitter) or a real session socket; the attach ones a real poller
and a real followed file, driven step by step so nothing depends on timing.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from helpers import EMITTER, synth
from textual.widgets import Input

from bmoe_top.parsers.prom import parse_exposition
from bmoe_top.runtime.session_socket import SessionSocketServer
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.screens.live import LiveScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.session_socket import SessionSocketClient
from bmoe_top.tui.sources.tail import FileTail
from bmoe_top.tui.widgets.palette import Look

SIZES = {"narrow": (80, 24), "mid": (120, 40), "wide": (200, 60)}
#: The looks a terminal can ask for: 24-bit colour, 16 colours (TERM=linux, screen), ASCII
#: (--ascii, a locale without UTF-8) and monochrome (NO_COLOR).
LOOKS = {"colour": Look(), "16": Look(colors="16"), "ascii": Look(colors="16", ascii=True),
         "mono": Look(colors="mono")}
#: A port nobody listens on (discard): the poller gets "connection refused".
DEAD_URL = "http://127.0.0.1:9/metrics"


def _run() -> RunModel:
    run = RunModel()
    load_data(run, synth.token_csv(96, seed=3), "synthetic.csv")
    load_data(run, synth.route_trace(96, n_layer=12, n_expert=48, seed=4), "synthetic.route.csv")
    return run


def replay_app(look: Look | None = None) -> BmoeTopApp:
    return BmoeTopApp(ReplayScreen(_run(), title="replay synthetic.csv"), look=look)



@pytest.fixture(params=["colour", "no-color"])
def colours(request, monkeypatch) -> str:
    """Each screen in colour and under NO_COLOR (no-color.org: the environment variable, read when
    the app is made)."""
    if request.param == "no-color":
        monkeypatch.setenv("NO_COLOR", "1")
    return str(request.param)

@pytest.mark.parametrize("look", LOOKS)
@pytest.mark.parametrize("size", SIZES)
def test_main_screen(snap_compare, size, look):
    async def select(pilot):  # a token selected mid-run: its readout, the window held
        await pilot.press("home", *["right"] * 40)

    assert snap_compare(replay_app(LOOKS[look]), terminal_size=SIZES[size], run_before=select)


def test_main_screen_narrow_mid_run(snap_compare):
    async def seek(pilot):
        await pilot.press("home")
        await pilot.press(*["right"] * 30)

    assert snap_compare(replay_app(), terminal_size=(100, 36), run_before=seek)


async def until(pilot, cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        await pilot.pause(0.05)


async def settle(pilot, screen) -> None:
    """Everything received is drawn, and no cursor blinks."""
    for box in screen.query(Input):
        box.cursor_blink = False
    await pilot.pause(0.2)
    screen.refresh_views(force=True)
    await pilot.pause(0.1)


def live_screen(source, title: str) -> LiveScreen:
    screen = LiveScreen(source, title=title, n_predict=32)
    screen.quiet_after_s = 1e9  # a loaded machine's pause is not "no telemetry"
    return screen


@pytest.mark.parametrize("size", SIZES)
def test_live_ready(snap_compare, colours, size):
    src = ChildSession([sys.executable, EMITTER, "--rate", "500"])
    screen = live_screen(src, "launch emitter")

    async def ready(pilot):
        await until(pilot, lambda: src.state == "ready")
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=ready)
    finally:
        src.close()


@pytest.mark.parametrize("size", SIZES)
def test_live_generating(snap_compare, colours, size, tmp_path):
    sock = f"/tmp/bmoe-snap-{os.getpid()}-{size}.sock"
    server = SessionSocketServer(sock, lambda req, client: None).start()
    src = SessionSocketClient(sock, stall_after_s=1e9)
    screen = live_screen(src, "attach session")

    async def generating(pilot):
        await until(pilot, lambda: src.status().connects == 1)
        server.broadcast('BMOE_READY {"load_s":0.5,"arch":"qwen3moe","n_ctx":512}')
        server.broadcast('BMOE_BEGIN {"id":1}')
        text = ""
        for step in range(1, 13):
            text += f"w{step} "
            server.broadcast('BMOE_ROUTE {"step":%d,"turn":0,"phase":"decode","experts":[[%d,%d],[%d,%d]],'
                             '"hit":[[%d,1],[0,1]]}' % (step, step % 8, (step + 3) % 8, step % 5, 7, step % 2))
            server.broadcast('BMOE_PROGRESS {"step":%d,"steps":32,"wall_ms":%.1f,"io_ms":4.0,"compute_ms":%.1f,'
                             '"mgmt_ms":1.0,"stall_ms":0.0,"read_mb":1.5,"cache_hit_pct":%.1f,"text":"%s"}'
                             % (step, 20.0 + step, 15.0 + step, 40.0 + step, text))
        await until(pilot, lambda: screen.run_model.n_tokens == 12 and src.state == "generating")
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=generating)
    finally:
        src.close()
        server.close()


@pytest.mark.parametrize("size", SIZES)
def test_live_aborted(snap_compare, colours, size):
    src = ChildSession([sys.executable, EMITTER, "--die-mid-line", "3", "--rate", "200"])
    screen = live_screen(src, "launch emitter")

    async def aborted(pilot):
        await until(pilot, lambda: src.state == "ready")
        src.generate("tell me", 20)
        await until(pilot, lambda: src.state == "aborted")
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=aborted)
    finally:
        src.close()


def exposition_with_layers(k: int) -> bytes:
    lines = [
        "# TYPE llamacpp:moe_cache_hits_total counter", f"llamacpp:moe_cache_hits_total {300 * k}",
        "# TYPE llamacpp:moe_cache_misses_total counter", f"llamacpp:moe_cache_misses_total {100 * k}",
        "# TYPE llamacpp:moe_cache_upload_bytes_total counter", f"llamacpp:moe_cache_upload_bytes_total {k << 22}",
        "# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {10 * k}",
        "# TYPE bmoe:timed_tokens_total counter", f"bmoe:timed_tokens_total {10 * k}",
        "# TYPE bmoe:token_wall_seconds_total counter", f"bmoe:token_wall_seconds_total {0.2 * k}",
        "# TYPE bmoe:token_io_seconds_total counter", f"bmoe:token_io_seconds_total {0.05 * k}",
        "# TYPE llamacpp:moe_cache_layer_hits_total counter",
        *[f'llamacpp:moe_cache_layer_hits_total{{layer="{i}"}} {(i + 1) * 10 * k}' for i in range(4)],
        "# TYPE llamacpp:moe_cache_layer_misses_total counter",
        *[f'llamacpp:moe_cache_layer_misses_total{{layer="{i}"}} {(4 - i) * 5 * k}' for i in range(4)],
    ]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("size", SIZES)
def test_attach_metrics_connected(snap_compare, colours, size):
    poller = MetricsPoller(DEAD_URL)
    screen = MetricsAttachScreen(poller, start_poller=False)

    async def connected(pilot):
        for k in (1, 2, 3, 5):  # scrapes 1 s apart, as the parser saw them
            poller.apply(parse_exposition(exposition_with_layers(k), float(k)), wall_t=1_800_000_000.0 + k)
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=connected)
    finally:
        poller.client.close()


@pytest.mark.parametrize("size", SIZES)
def test_attach_metrics_unreachable(snap_compare, colours, size):
    poller = MetricsPoller(DEAD_URL, timeout=2)
    screen = MetricsAttachScreen(poller, start_poller=False)

    async def unreachable(pilot):
        poller.scrape_once()
        poller.state.next_attempt_mono = None  # the retry countdown counts down with the clock: not drawn here
        screen.binding.publish()  # the poller's state into the run model the screen reads
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=unreachable)
    finally:
        poller.client.close()


def audit_lines() -> bytes:
    import orjson

    def rec(event, n, **extra):
        r = {"event": event, "time": f"2026-11-29T12:00:{n:02d}.000Z", "pid": 5, "hybrid": False, "hits": 3 * n,
             "hits_profile": 0, "misses": n, "bytes_upload": n << 20, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0,
             "swaps": 0}
        r.update(extra)
        return orjson.dumps(r) + b"\n"

    lay = [{"il": il, "slots": 2, "hits": 3 + il, "hits_profile": 0, "misses": 1, "resident": [il, il + 3]}
           for il in range(3)]
    out = rec("load", 1, model={"name": "tiny", "n_layer": 3}, cache={"slots": 6, "bytes": 1 << 20}, load_ms=250.0,
              layers=lay) + rec("ready", 2)
    for i in range(3):
        out += rec("request", 3 + i, slot=0, task=i + 1, n_prompt=4, n_gen=10 + i, t_prompt_ms=8.0,
                   t_gen_ms=40.0 + 5 * i, req_hits=3, req_hits_profile=0, req_misses=1, req_bytes_upload=1 << 20,
                   req_bytes_cpu=0)
    return out + b"not json\n" + rec("exit", 7, layers=lay, perf={"n_gen": 33, "gen_tps": 240.0})


@pytest.mark.parametrize("size", SIZES)
def test_attach_audit_following(snap_compare, colours, size, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative path: the title is the same on every machine
    (tmp_path / "audit.jsonl").write_bytes(audit_lines())
    tail = FileTail("audit.jsonl")
    screen = AuditAttachScreen(tail, start_tail=False)

    async def following(pilot):
        tail.poll_once()
        await settle(pilot, screen)

    try:
        assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=following)
    finally:
        tail.close()


@pytest.mark.parametrize("size", SIZES)
def test_attach_audit_waiting(snap_compare, colours, size):
    tail = FileTail("/nonexistent/bmoe-top-snapshot/audit.jsonl")
    screen = AuditAttachScreen(tail, start_tail=False)

    async def waiting(pilot):
        tail.poll_once()
        await settle(pilot, screen)

    assert snap_compare(BmoeTopApp(screen), terminal_size=SIZES[size], run_before=waiting)
