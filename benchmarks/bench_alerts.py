"""Alert evaluation benchmark: what evaluating every alert rule costs a live screen's refresh at
30 tokens/s with routing for 48 layers (docs/alerts.md "Speed").

A live run model (``LIVE`` retention) holds ``--tokens`` rows already (three sizes, so growth
shows) and receives, per refresh, 30 token rows (one second of a 30 tok/s run: the default
``--refresh`` of 1 s) with their 48-layer top-8 routing. Per refresh it times
``AlertEngine.advance_run`` over the new rows (every default rule, and the ones the settings file
can add), and, as the baseline in the same run, interleaved round by round, the title's numbers
(``header_parts``: what each refresh already computes from the same rows). Printed: the median
evaluation time, its share of the frame budget (the refresh period: one evaluation per repaint of
the views) and of one 100 ms frame at ``fps`` 10, and the ratio to the baseline. Goal: under 2 %
of the frame budget.

    .venv/bin/python benchmarks/bench_alerts.py [--rounds 5] [--refreshes 40] [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.model.alerts import AlertEngine
from bmoe_top.tui.settings import Settings
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import header_parts

RATE = 30  # tokens a second
LAYERS, TOP_K, EXPERTS = 48, 8, 128
REFRESH_S = 1.0
FRAME_S = 0.1


def rows(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    wall = rng.normal(33.0, 3.0, n)
    io = wall * rng.uniform(0.2, 0.5, n)
    return {"wall_ms": wall, "io_ms": io, "stall_ms": np.zeros(n), "mgmt_ms": np.full(n, 0.5),
            "compute_ms": wall - io - 0.5, "read_mib": rng.uniform(5, 20, n),
            "cache_hit_pct": rng.uniform(40, 90, n), "mem_available_mib": np.full(n, 2048.0),
            "rss_mib": np.full(n, 3000.0)}


def feed(run: RunModel, rng: np.random.Generator, n: int) -> None:
    run.add_token_rows(rows(rng, n), n)
    first = run.tokens.n - n
    for k in range(n):
        experts = rng.integers(0, EXPERTS, (LAYERS, TOP_K)).tolist()
        hits = (rng.random((LAYERS, TOP_K)) < 0.7).astype(int).tolist()
        run.add_route_lists(first + k, experts, hits)


def timed(f: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--refreshes", type=int, default=40)
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    rules = Settings().with_value("alerts.tok_s_below", 5.0).with_value("alerts.rss_mib_above", 8192.0).rules()
    look = Look(colors="16")
    print(f"{len(rules)} rules, {RATE} tok/s, {LAYERS} layers x top-{TOP_K}, refresh {REFRESH_S:g} s")
    print(f"{'rows held':>10} {'eval ms':>9} {'% of refresh':>13} {'% of frame':>11} {'title ms':>9} {'ratio':>7}")
    for size in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        run = RunModel(LIVE)
        feed(run, rng, size)
        engine = AlertEngine(rules)
        engine.advance_run(run)  # the rows already there: evaluated once, at the first repaint
        evaluate, title = partial(engine.advance_run, run), partial(header_parts, run, look)
        evals: list[float] = []
        base: list[float] = []
        for r in range(args.rounds):
            for _ in range(args.refreshes):
                feed(run, rng, RATE)
                if r % 2 == 0:  # interleaved: which one runs first alternates per round
                    e, b = timed(evaluate), timed(title)
                else:
                    b, e = timed(title), timed(evaluate)
                evals.append(e)
                base.append(b)
        e, b = statistics.median(evals), statistics.median(base)
        print(f"{size:>10,} {e * 1e3:>9.3f} {100 * e / REFRESH_S:>12.3f}% {100 * e / FRAME_S:>10.3f}% "
              f"{b * 1e3:>9.3f} {e / b:>7.2f}")


if __name__ == "__main__":
    main()
