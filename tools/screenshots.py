"""Regenerate the documentation screenshots (SVG, saved by Textual) from real runs of bmoe-run.

    .venv/bin/python tools/screenshots.py          # writes docs/images/*.svg

live.svg: bmoe-top live on the bundled runtime and the trained demo model, after one turn.
replay.svg: a replay of the CSV sink + route trace bmoe-run wrote for a longer generation (200x60),
with a token selected mid-run (its readout) and the layer maps' cell cursors.
compact.svg: the same replay at 80x24 (the compact layout). ascii.svg: at 120x40 in the ASCII
look (``--ascii``, 16 colours).
Nothing here is used by the tests; the screens it shows are the ones the pilot tests drive.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
SIZE = (200, 60)


async def live_shot(path: Path) -> None:
    from bmoe_top.tui.cli import runtime_command
    from bmoe_top.tui.screens.live import live_app
    from bmoe_top.tui.sources.child_session import ChildSession

    src = ChildSession(runtime_command())
    app = live_app(src, title="launch bmoe-run", n_predict=200)
    run = app.main.model
    try:
        async with app.run_test(size=SIZE) as pilot:
            from bmoe_top.tui.widgets.palette import Look

            app.look = Look()  # a 24-bit terminal, not the headless default
            for _ in range(600):
                await pilot.pause(0.1)
                if run.status == "ready":
                    break
            src.generate("class Cache:\n    def __init__(self", n_predict=200)
            for _ in range(900):
                await pilot.pause(0.1)
                if run.turns and run.turns[-1].done:
                    break
            await pilot.pause(0.5)
            app.save_screenshot(str(path))
    finally:
        src.close()


async def replay_shot(path: Path, files: list[str], size: tuple[int, int] = SIZE, ascii: bool = False) -> None:
    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.screens.replay import ReplayScreen
    from bmoe_top.tui.widgets.palette import Look

    look = Look(colors="16", ascii=True) if ascii else Look()  # a 24-bit terminal, not the headless default
    app = BmoeTopApp(ReplayScreen(open_paths(files), title="replay demo.csv + demo.route.csv"), look=look)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        await pilot.press("0")  # the whole run in the window
        screen = app.main
        screen.playback.seek(max(1, screen.playback.n * 2 // 3))
        await pilot.pause(0.5)
        app.save_screenshot(str(path))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    asyncio.run(live_shot(OUT / "live.svg"))
    with tempfile.TemporaryDirectory() as d:
        csv, trace = f"{d}/demo.csv", f"{d}/demo.route.csv"
        run = Path(sys.executable).with_name("bmoe-run")
        subprocess.run([str(run), "-p", "def parse(self, text):", "-n", "400", "--temp", "0.7", "--top-p", "0.95",
                        "--repeat-penalty", "1.1", "--csv", csv, "--route-trace", trace, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        asyncio.run(replay_shot(OUT / "replay.svg", [csv, trace]))
        asyncio.run(replay_shot(OUT / "compact.svg", [csv, trace], size=(80, 24)))
        asyncio.run(replay_shot(OUT / "ascii.svg", [csv, trace], size=(120, 40), ascii=True))
    print(f"wrote live.svg, replay.svg, compact.svg and ascii.svg in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
