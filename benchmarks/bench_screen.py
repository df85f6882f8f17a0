"""Screen render benchmark: the main screen with a 48 x 128 expert map and a 4,096-token run.

Measures, headless at 200 x 60, the median time to re-render every line of the main screen after
the run model changed (frame caches invalidated), through Textual's own compositor. Baseline in
the same run: the same screen over an empty run (every widget draws its "no data" lines), so
the ratio is the cost our data adds. Goal: median under 25 ms.

    .venv/bin/python benchmarks/bench_screen.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen

N_TOK, N_LAYER, N_EXPERT, K = 4096, 48, 128, 8


def big_run() -> RunModel:
    rng = np.random.default_rng(0)
    run = RunModel()
    run.update_meta({"model": "bench.gguf", "arch": "qwen3moe", "n_layer": N_LAYER, "n_expert": N_EXPERT})
    wall = rng.uniform(100, 300, N_TOK)
    io = wall * rng.uniform(0.2, 0.6, N_TOK)
    mgmt = wall * 0.05
    run.add_token_rows({"step": np.arange(1, N_TOK + 1, dtype=float), "wall_ms": wall, "io_ms": io,
                       "mgmt_ms": mgmt, "compute_ms": wall - io - mgmt, "stall_ms": np.zeros(N_TOK),
                       "read_mib": io / 2, "cache_hit_pct": np.linspace(5, 80, N_TOK)}, N_TOK)
    tok = np.repeat(np.arange(N_TOK), N_LAYER * K)
    layer = np.tile(np.repeat(np.arange(N_LAYER), K), N_TOK)
    expert = (rng.zipf(1.5, tok.size) % N_EXPERT).astype(np.int32)
    hit = (rng.random(tok.size) < 0.7).astype(np.int32)
    run.add_routes(tok, layer, expert, hit)
    run.set_dims(top_k=K)
    return run


async def measure(run: RunModel, reps: int = 30) -> list[float]:
    screen = ReplayScreen(run, title="bench", fps=1)
    app = BmoeTopApp(screen)
    times = []
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        for _ in range(reps):
            run.add_log("frame")  # new data: every frame cache is stale
            t0 = time.perf_counter()
            screen.refresh_views(force=True)
            screen._compositor.render_update(full=True)
            times.append((time.perf_counter() - t0) * 1000.0)
    return times


def main() -> None:
    full = asyncio.run(measure(big_run()))
    empty = asyncio.run(measure(RunModel()))
    m_full, m_empty = statistics.median(full), statistics.median(empty)
    print(f"main screen, {N_TOK} tokens + {N_LAYER}x{N_EXPERT} map, 200x60: median {m_full:.1f} ms "
          f"(min {min(full):.1f}, max {max(full):.1f})")
    print(f"baseline, same screen over an empty run:        median {m_empty:.1f} ms")
    print(f"ratio full/empty: {m_full / m_empty:.2f}x   goal: median < 25 ms -> {'OK' if m_full < 25 else 'MISSED'}")


if __name__ == "__main__":
    main()
