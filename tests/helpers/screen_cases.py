"""Every screen of the app started over real sources (a child emitter, a scripted HTTP server and
Prometheus, files a test writes), for the tests that walk every screen: each case gives the app,
a close that ends what it started, and a predicate true once the screen has its first data."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bmoe_top.tui.analysis.compare import compare
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.screens.attach_memory import MemoryScreen
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.screens.sweep import sweep_app
from bmoe_top.tui.screens.whatif import whatif_app
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.memory import MemoryWatcher
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.tail import FileTail
from helpers import EMITTER, synth
from helpers.pagecache import private_model
from helpers.scripted_http import Scripted
from helpers.scripted_prometheus import ScriptedPrometheus
from helpers.sweep_data import synth_sweep

__all__ = ["SCREENS", "Case"]

#: (the app, a close that ends what the case started, a predicate true once it shows data)
Case = tuple[BmoeTopApp, Callable[[], None], Callable[[Any], bool]]


def _replay(tmp: Path) -> Case:
    (tmp / "run.csv").write_bytes(synth.token_csv(64))
    (tmp / "run.route.csv").write_bytes(synth.route_trace(64))
    app = BmoeTopApp(ReplayScreen(open_paths([str(tmp / "run.csv"), str(tmp / "run.route.csv")]), title="r"))
    return app, lambda: None, lambda app: True


def _live(tmp: Path) -> Case:
    src = ChildSession([sys.executable, EMITTER, "--rate", "50", "--route-layers", "4", "--route-experts", "16",
                        "--route-k", "2", "--route-slots", "8"], stall_after_s=5.0)
    app = live_app(src, title="emitter")
    return app, lambda: src.close(3), lambda app: src.state == "ready"


def _metrics(tmp: Path) -> Case:
    srv = Scripted()
    poller = MetricsPoller(srv.url, interval=0.2, timeout=2)
    app = BmoeTopApp(MetricsAttachScreen(poller))
    return app, srv.close, lambda app: app.main.model.version > 0


def _audit(tmp: Path) -> Case:
    p = tmp / "a.jsonl"
    base = {"hybrid": False, "hits_profile": 0, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0, "swaps": 0}
    layers = [{"il": i, "slots": 2, "hits": 4, "hits_profile": 0, "misses": 1, "resident": [0, 1]} for i in (0, 1)]
    lines = [dict(base, event=e, pid=3, time=f"2026-11-29T12:00:{i:02d}.000Z", hits=1, misses=1, bytes_upload=0,
                  **({"layers": layers} if e == "load" else {})) for i, e in enumerate(("load", "ready"))]
    p.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    tail = FileTail(p, poll_s=0.05)
    app = BmoeTopApp(AuditAttachScreen(tail))
    return app, lambda: None, lambda app: app.main.feed.runs.n_records >= 2


def _memory(tmp: Path) -> Case:
    watcher = MemoryWatcher(gguf=str(private_model(tmp, "tiny")), interval=0.05)
    app = BmoeTopApp(MemoryScreen(watcher, fps=20))
    return app, lambda: watcher.join(10), lambda app: app.screen.model.residency is not None


def _whatif(tmp: Path) -> Case:
    (tmp / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp / "run.route.csv"), str(tmp / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif"), lambda: None, lambda app: True


def _compare(tmp: Path) -> Case:
    files = []
    for i in range(2):
        p = tmp / f"r{i}.csv"
        p.write_bytes(synth.token_csv(50 + 5 * i, seed=20 + i))
        files.append(str(p))
    loaded = J.load_arms(J.parse_arms(files, []))
    return compare_app(loaded, compare(J.arm_inputs(loaded)), "compare"), lambda: None, lambda app: True


def _sweep(tmp: Path) -> Case:
    app = sweep_app(synth_sweep(tmp / "sweep", differs={(2, 1)}))
    return app, lambda: app.main.close(), lambda app: app.main.result is not None


def _fleet(tmp: Path) -> Case:
    prom = ScriptedPrometheus(instances=("127.0.0.1:1", "127.0.0.1:2"))
    screen = FleetScreen(prom.url, "", 60)
    return BmoeTopApp(screen), prom.close, lambda app: len(screen.shown) == 2


def _drill(tmp: Path) -> Case:
    prom = ScriptedPrometheus(instances=("127.0.0.1:1",))
    return BmoeTopApp(FleetDrillScreen(prom.url, "", 60, "127.0.0.1:1", "bmoe")), prom.close, lambda app: True


#: Every screen by name: a factory of its case over files in a temporary folder.
SCREENS: dict[str, Callable[[Path], Case]] = {
    "replay": _replay, "live": _live, "attach-metrics": _metrics, "attach-audit": _audit,
    "attach-memory": _memory, "whatif": _whatif, "compare": _compare, "sweep": _sweep, "fleet": _fleet,
    "fleet-drill": _drill}
