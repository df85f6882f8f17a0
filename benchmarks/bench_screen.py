"""Screen render benchmark: the main screen over a 100,000-token run with routing for 94 layers x
512 experts: the overview strip, the breakdown with a selected token's readout, the trends, the
layer x token heatmap and the layer x expert map, both with a cell cursor.

Measures, headless at 200 x 60, the median time to re-render every line of the main screen after
the run model changed (frame caches invalidated), through Textual's own compositor. Baseline in
the same run, interleaved round by round: the same screen over an empty run (every widget draws
its "no data" lines) and a bare Textual screen of the same size (one ``Static`` filling the
200 x 60 screen, given a new 200 x 60 text each frame: what Textual alone spends to draw every cell
of a frame anew), so the ratios are the cost our data adds and the cost of our screen against
Textual's own floor. Goal: median under 25 ms.
Also printed: the thread's CPU time per frame (on a loaded machine the wall time includes waiting
for a core) and where a frame's time goes, per widget.

    .venv/bin/python benchmarks/bench_screen.py [--rounds 3] [--reps 20] [--tokens 100000] [--seek-stride 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from textual.app import App, ComposeResult
from textual.content import Content
from textual.widgets import Static

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.charts import BreakdownChart, OverviewStrip, TrendChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import AnswerTail, RunPanel

N_LAYER, N_EXPERT, K = 94, 512, 8
SIZE = (200, 60)  # the terminal's columns x lines every screen here is measured at
CHUNK = 2000  # tokens of routing added at a time (bounded memory while building)


def big_run(n_tok: int) -> RunModel:
    rng = np.random.default_rng(0)
    run = RunModel()
    run.update_meta({"model": "bench.gguf", "arch": "qwen3moe", "n_layer": N_LAYER, "n_expert": N_EXPERT})
    N_TOK = n_tok  # noqa: N806 - the run's length, as in the docstring
    wall = rng.uniform(100, 300, N_TOK)
    io = wall * rng.uniform(0.2, 0.6, N_TOK)
    mgmt = wall * 0.05
    run.add_token_rows({"step": np.arange(1, N_TOK + 1, dtype=float), "wall_ms": wall, "io_ms": io,
                       "mgmt_ms": mgmt, "compute_ms": wall - io - mgmt, "stall_ms": np.zeros(N_TOK),
                       "read_mib": io / 2, "cache_hit_pct": np.linspace(5, 80, N_TOK)}, N_TOK)
    run.set_dims(n_layer=N_LAYER, n_expert=N_EXPERT, top_k=K)
    for a in range(0, N_TOK, CHUNK):
        b = min(N_TOK, a + CHUNK)
        tok = np.repeat(np.arange(a, b), N_LAYER * K)
        layer = np.tile(np.repeat(np.arange(N_LAYER), K), b - a)
        expert = (rng.zipf(1.5, tok.size) % N_EXPERT).astype(np.int32)
        hit = (rng.random(tok.size) < 0.7).astype(np.int32)
        run.add_routes(tok, layer, expert, hit)
    return run


#: Where a frame's time goes: (class, method) timed per widget class (inclusive; the rest of a frame is
#: Textual's compositor, the title and the screen's own bookkeeping).
TIMED: tuple[tuple[type, str], ...] = (
    *((cls, "build") for cls in (OverviewStrip, BreakdownChart, TrendChart, LayerHeatmap, ExpertMap, RunPanel)),
    (AnswerTail, "update_from_run"), (AnswerTail, "render_line"))


@contextmanager
def widget_times(into: dict[str, list[float]]) -> Iterator[Callable[[], None]]:
    """Time the methods of :data:`TIMED` by widget class; the callable closes one frame (appends
    each class's total of that frame to ``into``)."""
    frame: dict[str, float] = defaultdict(float)
    saved = []
    for cls, name in TIMED:
        orig = getattr(cls, name)
        saved.append((cls, name, orig))

        def timed(obj: Any, *a: Any, _orig: Any = orig, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _orig(obj, *a, **kw)
            finally:
                frame[type(obj).__name__] += (time.perf_counter() - t0) * 1000.0

        setattr(cls, name, timed)

    def close() -> None:
        for k in set(frame) | set(into):
            into[k].append(frame.get(k, 0.0))
        frame.clear()

    try:
        yield close
    finally:
        for cls, name, orig in saved:
            setattr(cls, name, orig)


async def measure(run: RunModel, reps: int, parts: dict[str, list[float]] | None = None,
                  cpu: list[float] | None = None) -> list[float]:
    screen = ReplayScreen(run, title="bench", fps=1)
    app = BmoeTopApp(screen)
    times = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        if run.tokens.n:  # a token selected mid-run (its readout), cell cursors on both maps
            screen.playback.seek(run.tokens.n // 2)
            for grid in (screen.query_one("#heatmap"), screen.query_one("#expert-map")):
                grid.cursor.row, grid.cursor.col = 3, 40
            await pilot.pause()
        for _ in range(reps):
            run.add_log("frame")  # new data: every frame cache is stale
            t0, c0 = time.perf_counter(), time.thread_time()
            screen.refresh_views(force=True)
            screen._compositor.render_update(full=True)
            times.append((time.perf_counter() - t0) * 1000.0)
            if cpu is not None:
                cpu.append((time.thread_time() - c0) * 1000.0)
        if parts is not None:  # where the time goes: the same frames again, timed per widget
            with widget_times(parts) as close:
                for _ in range(reps):
                    run.add_log("frame")
                    screen.refresh_views(force=True)
                    screen._compositor.render_update(full=True)
                    close()
    return times


class BareApp(App[None]):
    """A bare Textual screen: one ``Static`` filling it, no CSS of ours, no widgets of ours."""

    CSS = "Static { width: 1fr; height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield Static(id="bare")


def bare_frame(i: int, width: int, height: int) -> Content:
    """A frame of ``height`` lines of ``width`` printable ASCII characters, different for every ``i``."""
    row = "".join(chr(33 + (c * 7 + i) % 94) for c in range(width + height))
    return Content("\n".join(row[r:r + width] for r in range(height)))


async def measure_bare(reps: int, size: tuple[int, int], cpu: list[float] | None = None) -> list[float]:
    """The frame time of :class:`BareApp` at ``size``: its text replaced, every line drawn anew."""
    app = BareApp()
    times = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        static = app.query_one("#bare", Static)
        frames = [bare_frame(i, *size) for i in range(reps)]
        for frame in frames:
            t0, c0 = time.perf_counter(), time.thread_time()
            static.update(frame)
            app.screen._compositor.render_update(full=True)
            times.append((time.perf_counter() - t0) * 1000.0)
            if cpu is not None:
                cpu.append((time.thread_time() - c0) * 1000.0)
    return times


async def measure_seeks(run: RunModel, reps: int, stride: int) -> tuple[list[float], list[float]]:
    """Frames right after a seek, alternating forward and backward by ``stride`` tokens around the
    middle of the run (a selected token's expert map counts the routing before it): (forward ms,
    backward ms). Forward costs the rows in between; backward used to recount from the run's start."""
    screen = ReplayScreen(run, title="bench", fps=1)
    app = BmoeTopApp(screen)
    fwd: list[float] = []
    back: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        mid = run.tokens.n // 2
        screen.playback.seek(run.tokens.n)  # the cursor at the end: seeks below select tokens
        screen.playback.seek(mid)
        screen.refresh_views(force=True)
        screen._compositor.render_update(full=True)
        for i in range(2 * reps):
            forward = i % 2 == 0
            screen.playback.seek(mid + stride if forward else mid)
            run.add_log("frame")
            t0 = time.perf_counter()
            screen.refresh_views(force=True)
            screen._compositor.render_update(full=True)
            (fwd if forward else back).append((time.perf_counter() - t0) * 1000.0)
    return fwd, back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20, help="frames measured per screen per round")
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--seek-stride", type=int, default=500, help="tokens per seek of the seek frames")
    a = ap.parse_args()
    t0 = time.perf_counter()
    run = big_run(a.tokens)
    print(f"built the run ({a.tokens:,} tokens, {N_LAYER}x{N_EXPERT} routing) in {time.perf_counter() - t0:.1f} s")
    full: list[float] = []
    empty: list[float] = []
    bare: list[float] = []
    cpu_bare: list[float] = []
    parts: dict[str, list[float]] = defaultdict(list)
    cpu_full: list[float] = []
    cpu_empty: list[float] = []
    for r in range(a.rounds):  # interleaved: the baseline shares the machine's state with the full screen
        b = asyncio.run(measure_bare(a.reps, SIZE, cpu=cpu_bare))
        e = asyncio.run(measure(RunModel(), a.reps, cpu=cpu_empty))
        f = asyncio.run(measure(run, a.reps, parts, cpu=cpu_full))
        bare += b
        empty += e
        full += f
        print(f"round {r + 1}: bare Textual {statistics.median(b):.1f} ms   empty {statistics.median(e):.1f} ms   "
              f"full {statistics.median(f):.1f} ms")
    m_full, m_empty, m_bare = statistics.median(full), statistics.median(empty), statistics.median(bare)
    print(f"main screen, {a.tokens:,} tokens + {N_LAYER}x{N_EXPERT} map, 200x60: median {m_full:.1f} ms "
          f"(min {min(full):.1f}, max {max(full):.1f})")
    print(f"baseline, a bare Textual screen of 200x60 (one Static, every cell new): median {m_bare:.1f} ms")
    print(f"the same main screen over an empty run:          median {m_empty:.1f} ms")
    print(f"CPU time of this thread per frame (what a frame costs without waiting for a core on a loaded machine): "
          f"full median {statistics.median(cpu_full):.1f} ms, empty {statistics.median(cpu_empty):.1f} ms, "
          f"bare Textual {statistics.median(cpu_bare):.1f} ms")
    print("per widget (median ms per frame, frames timed apart from the ones above): " + "  ".join(
        f"{k} {statistics.median(v):.1f}" for k, v in sorted(parts.items(), key=lambda kv: -statistics.median(kv[1]))))
    cpu_ratio = statistics.median(cpu_full) / statistics.median(cpu_bare)
    print(f"ratio full/bare Textual: {m_full / m_bare:.2f}x (CPU {cpu_ratio:.2f}x)"
          f"   full/empty: {m_full / m_empty:.2f}x   goal: median < 25 ms -> {'OK' if m_full < 25 else 'MISSED'}")
    fwd: list[float] = []
    back: list[float] = []
    for _ in range(a.rounds):
        f, b = asyncio.run(measure_seeks(run, max(2, a.reps // 4), a.seek_stride))
        fwd += f
        back += b
    print(f"seek frames (+/-{a.seek_stride} tokens around the middle, alternating; baseline: forward): "
          f"forward median {statistics.median(fwd):.1f} ms max {max(fwd):.1f} ms, "
          f"backward median {statistics.median(back):.1f} ms max {max(back):.1f} ms; "
          f"max backward/forward {max(back) / max(fwd):.2f}x")


if __name__ == "__main__":
    main()
