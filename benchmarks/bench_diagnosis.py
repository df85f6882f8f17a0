"""Diagnosis benchmark: what one evaluation of every rule costs (``tui/model/diagnosis.py``
``diagnose``, docs/diagnosis.md) on a live run model of 48 layers x top-8 of 128 experts with a
profile loaded (the profile rule reads the routing too), against a baseline in the same run: the
run panel's own numbers (``present/summary.run_summary(run, turns=False)``), which every repaint
of the panels computes anyway.

Between two timed calls one token arrives (a token row and its routing, not timed), as at 30
tokens/s, so no call is answered from anything cached. Calls alternate rules / baseline, in
several rounds, at three run lengths so growth shows. The live screen evaluates the rules at most
once per repaint of its panels (every ``--refresh``, 1 s); the frame budget is one frame at the
screen's default 10 fps (100 ms), and the goal is under 2 % of it.

    .venv/bin/python benchmarks/bench_diagnosis.py [--rounds 5] [--calls 60] [--sizes 1000,10000,30000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.model.diagnosis import diagnose
from bmoe_top.tui.present.summary import run_summary

LAYERS, EXPERTS, TOP_K = 48, 128, 8
FRAME_S = 0.1  # one frame at the screen's default 10 fps
COLUMNS = ("wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms", "read_mib", "cache_hit_pct", "majflt",
           "mem_available_mib")


def add_tokens(run: RunModel, rng: np.random.Generator, first: int, n: int) -> None:
    """``n`` token rows from row ``first`` with their routing."""
    cols = {
        "wall_ms": rng.normal(33.0, 2.0, n), "io_ms": rng.normal(40.0, 3.0, n), "compute_ms": rng.normal(25.0, 1.0, n),
        "stall_ms": rng.normal(5.0, 1.0, n), "mgmt_ms": rng.normal(2.0, 0.2, n), "read_mib": rng.normal(90.0, 5.0, n),
        "cache_hit_pct": np.full(n, 70.0), "majflt": rng.poisson(3, n).astype(np.float64),
        "mem_available_mib": np.full(n, 2048.0),
    }
    run.add_token_rows(cols, n)
    tok = np.repeat(np.arange(first, first + n), LAYERS * TOP_K)
    layer = np.tile(np.repeat(np.arange(LAYERS), TOP_K), n)
    expert = rng.integers(0, EXPERTS, tok.size)
    run.add_routes(tok, layer, expert, (rng.random(tok.size) < 0.7).astype(np.int8))


def make_run(n: int, rng: np.random.Generator) -> RunModel:
    run = RunModel(LIVE)
    run.update_meta({"moe_stream": "1", "overlap": "1"})
    run.set_dims(n_layer=LAYERS, n_expert=EXPERTS, top_k=TOP_K)
    rank = np.full((LAYERS, EXPERTS), -1, dtype=np.int32)
    rank[:, :32] = np.arange(32)
    run.set_expert_rank(rank)
    run.set_cache_mib(budget_mib=4096.0)
    run.update_sidecar({"cpu_temp_max_mC": "61000", "mem_avail_floor_kb": "2000000"})
    for a in range(0, n, 1000):
        add_tokens(run, rng, a, min(1000, n - a))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=60, help="timed calls of each kind per round")
    ap.add_argument("--sizes", default="1000,10000,30000", help="run lengths in tokens")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    print(f"{'tokens':>8} {'rules ms':>9} {'baseline ms':>12} {'ratio':>6} {'% of frame':>11} {'findings':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        run = make_run(n, rng)
        rules: list[float] = []
        base: list[float] = []
        found = 0
        tok = n
        for _ in range(args.rounds):
            r_s = b_s = 0.0
            for _ in range(args.calls):
                add_tokens(run, rng, tok, 1)
                tok += 1
                t0 = time.process_time()
                _, findings = diagnose(run, probe_mb_s=3000.0)
                t1 = time.process_time()
                add_tokens(run, rng, tok, 1)
                tok += 1
                t2 = time.process_time()
                run_summary(run, turns=False)
                t3 = time.process_time()
                r_s += t1 - t0
                b_s += t3 - t2
                found = len(findings)
            rules.append(1000.0 * r_s / args.calls)
            base.append(1000.0 * b_s / args.calls)
        r, b = statistics.median(rules), statistics.median(base)
        print(f"{n:>8,} {r:>9.3f} {b:>12.3f} {r / b:>6.2f} {100.0 * r / 1000.0 / FRAME_S:>10.2f}% {found:>8}")
    print("CPU time (time.process_time), median of the rounds' means; goal: rules under 2 % of a 100 ms frame")


if __name__ == "__main__":
    main()
