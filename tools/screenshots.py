"""Regenerate the documentation screenshots (SVG, saved by Textual) from real runs of bmoe-run.

    .venv/bin/python tools/screenshots.py              # every image below
    .venv/bin/python tools/screenshots.py analysis     # only the analysis screens

live.svg: the live demo (bmoe-top with no arguments: the bundled runtime, the trained demo model,
its prompt and 1024-token turn) in slow motion, 160 tokens into its first turn (200x60).
replay.svg: a replay of the CSV sink + route trace bmoe-run wrote for a longer generation (200x60),
with a token selected mid-run (its readout). compact.svg: the same replay at 80x24 (the compact
layout). ascii.svg: at 120x40 in the ASCII look (``--ascii``, 16 colours).
whatif.svg, whatif-80x24.svg: bmoe-top whatif on the real 48-layer route trace
(../shared/data/real-runs/bigmoeonedge-2026-07-15) with its CSV and log.
compare.svg, compare-tokens.svg, compare-80x24.svg: bmoe-top compare on two real CSVs of
../shared/data/real-runs (summary, per-token view).
live-whatif.svg: the live screen's What-if tab (ctrl+o) on the bundled runtime after two turns.
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
SIZE = (170, 48)
#: The main screen's images: the wide size the snapshots use.
VIEW_SIZE = (200, 60)
REAL = ROOT.parent / "shared" / "data" / "real-runs"


async def live_shot(path: Path) -> None:
    """The demo a bare bmoe-top starts: its prompt sent with Enter, the 1024-token turn watched in
    slow motion, taken when the view has shown 160 tokens of the warm-up (or the turn is done)."""
    from bmoe_top.tui.cli import DEMO_N_PREDICT, DEMO_PROMPT, DEMO_SPEED, runtime_command
    from bmoe_top.tui.screens.live import live_app
    from bmoe_top.tui.sources.child_session import ChildSession

    src = ChildSession(runtime_command())
    app = live_app(src, title="launch bmoe-run", n_predict=DEMO_N_PREDICT, prompt=DEMO_PROMPT, speed=DEMO_SPEED)
    run = app.main.model
    try:
        async with app.run_test(size=VIEW_SIZE) as pilot:
            from bmoe_top.tui.widgets.palette import Look

            app.look = Look()  # a 24-bit terminal, not the headless default
            for _ in range(600):
                await pilot.pause(0.1)
                if run.status == "ready":
                    break
            await pilot.press("enter")  # the demo's prompt waits in the box
            pb = app.main.playback
            for _ in range(6000):
                await pilot.pause(0.1)
                if pb.cursor >= 160 or (run.turns and run.turns[-1].done and pb.cursor >= pb.n):
                    break
            await pilot.pause(0.2)
            app.save_screenshot(str(path))
    finally:
        src.close()


async def replay_shot(path: Path, files: list[str], size: tuple[int, int] = VIEW_SIZE, ascii: bool = False) -> None:
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


async def _shoot(app, path: Path, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        for k in keys:
            await pilot.press(k)
        await pilot.pause(0.5)
        app.save_screenshot(str(path))


def analysis_shots() -> None:
    """The what-if and compare screens on real runs (skipped when ../shared is absent)."""
    from bmoe_top.tui.analysis.compare import compare
    from bmoe_top.tui.jobs import compare as J
    from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
    from bmoe_top.tui.screens.compare import compare_app
    from bmoe_top.tui.screens.whatif import whatif_app

    if not REAL.is_dir():
        print(f"{REAL} is absent: no what-if and compare screenshots")
        return
    d = REAL / "bigmoeonedge-2026-07-15"
    inp = load_whatif([str(d / "qwen.route.csv"), str(d / "qwen.metrics"), str(d / "qwen.log")])
    report, replay = analyse_input(inp)
    title = "whatif qwen.route.csv + qwen.metrics + qwen.log"
    asyncio.run(_shoot(whatif_app(inp, report, replay, title), OUT / "whatif.svg", SIZE))
    asyncio.run(_shoot(whatif_app(inp, report, replay, title), OUT / "whatif-80x24.svg", (80, 24)))
    a = REAL / "bigmoeonedge-2026-07-12" / "qwen_c4000_l4_ov"
    b = REAL / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    arms = J.load_arms(J.parse_arms([], [f"07-12={a}.csv+{a}.log+{a}.metrics", f"07-22={b}"]))
    c = compare(J.arm_inputs(arms))
    ctitle = "compare 07-12 vs 07-22"
    asyncio.run(_shoot(compare_app(arms, c, ctitle), OUT / "compare.svg", SIZE))
    asyncio.run(_shoot(compare_app(arms, c, ctitle), OUT / "compare-tokens.svg", SIZE, ("2",)))
    asyncio.run(_shoot(compare_app(arms, c, ctitle), OUT / "compare-80x24.svg", (80, 24)))


async def live_whatif_shot(path: Path) -> None:
    from bmoe_top.tui.cli import runtime_command
    from bmoe_top.tui.screens.live import live_app
    from bmoe_top.tui.sources.child_session import ChildSession
    from bmoe_top.tui.widgets.live_whatif import LiveWhatIfPanel

    src = ChildSession(runtime_command())
    app = live_app(src, title="launch bmoe-run", n_predict=200)
    run = app.main.model
    try:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(600):
                await pilot.pause(0.1)
                if run.status == "ready":
                    break
            for turn, prompt in enumerate(("class Cache:\n    def __init__(self", "\n    def get(self, key")):
                src.generate(prompt, n_predict=200, clear_kv=turn == 0)
                for _ in range(900):
                    await pilot.pause(0.1)
                    if len([t for t in run.turns if t.done]) > turn:
                        break
            await pilot.press("ctrl+o")
            panel = app.main.query_one(LiveWhatIfPanel)
            for _ in range(100):
                await pilot.pause(0.1)
                if panel.view is not None and panel.view.tokens >= 400:
                    break
            await pilot.pause(0.5)
            app.save_screenshot(str(path))
    finally:
        src.close()


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["analysis"]:
        analysis_shots()
        asyncio.run(live_whatif_shot(OUT / "live-whatif.svg"))
        return 0
    analysis_shots()
    asyncio.run(live_whatif_shot(OUT / "live-whatif.svg"))
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
    print(f"wrote the images in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
