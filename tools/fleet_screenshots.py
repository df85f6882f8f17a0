"""Regenerate the fleet screenshots of docs/fleet.md (SVG, saved by Textual) from a real fleet on
loopback: three ``bmoe-run serve`` on the trained demo model (two with an expert cache of
different sizes, one without: its MoE columns say "not exported"), a real Prometheus scraping
them every second (Debian's ``prometheus``), completions sent to them for a while, then one of
them stopped.

    .venv/bin/python tools/fleet_screenshots.py     # writes docs/images/fleet.svg, fleet-drill.svg

fleet.svg: the instances table (the stopped one down and first); fleet-drill.svg: the drill-down
of the slowest instance, its history from before bmoe-top started. Nothing here is used by the
tests; the screens it shows are the ones tests/fleet/test_fleet_screen.py drives.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.prometheus import Prometheus  # noqa: E402
from helpers.serve import Serve, complete  # noqa: E402

OUT = ROOT / "docs" / "images"
SIZE = (170, 48)
MODEL = sorted((ROOT / "bmoe_top" / "data").glob("*.gguf"))[0]
PROMPTS = ["def parse(self, text):", "import os\n\ndef walk(path):", "class Cache:\n    def __init__(self",
           "for line in open(path):", "def fibonacci(n):"]
#: Seconds of traffic before bmoe-top starts (the drill-down shows them).
HISTORY_S = 90


def traffic(url: str, stop: threading.Event, n: int) -> None:
    i = 0
    while not stop.is_set():
        try:
            complete(url, PROMPTS[i % len(PROMPTS)], n)
        except Exception:  # noqa: BLE001 - the instance was stopped: its traffic ends
            return
        i += 1


async def shots(prom_url: str, drill: str) -> None:
    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen

    screen = FleetScreen(prom_url, '{job="bmoe"}', 120)
    app = BmoeTopApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        while not (screen.n_applied and screen.state.table and len(screen.state.table.rows) == 3):
            await pilot.pause(0.1)
        await pilot.pause(1.0)
        app.save_screenshot(str(OUT / "fleet.svg"))
        screen.open_drill("bmoe", drill)
        while not (isinstance(app.screen, FleetDrillScreen) and app.screen.model.tokens.n):
            await pilot.pause(0.1)
        await pilot.pause(1.0)
        app.screen.refresh_views(force=True)
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "fleet-drill.svg"))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    serves = {"big": Serve(MODEL, "--cache-mb", "12"), "small": Serve(MODEL, "--cache-mb", "3"),
              "none": Serve(MODEL, "--no-moe-stream")}
    threads = []
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-shots-") as d:
            prom = Prometheus(Path(d), {"bmoe": [f"127.0.0.1:{s.port}" for s in serves.values()]})
            try:
                for s in serves.values():
                    t = threading.Thread(target=traffic, args=(s.url, stop, 48), daemon=True)
                    t.start()
                    threads.append(t)
                time.sleep(HISTORY_S)  # a tool, not a test: traffic for a while, then the pictures
                serves["none"].stop()
                prom.wait_value(f'up{{instance="127.0.0.1:{serves["none"].port}"}}', 0)
                asyncio.run(shots(prom.url, f"127.0.0.1:{serves['small'].port}"))
            finally:
                prom.stop()
    finally:
        stop.set()
        for s in serves.values():
            s.stop()
        for t in threads:
            t.join(60)
    print(f"wrote {OUT / 'fleet.svg'} and {OUT / 'fleet-drill.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
