"""``compare`` of two runs at 10^5, 10^6 and 10^7 tokens (tui/analysis/compare.py ``compare``).

Runs: per-token columns of two synthetic runs (wall = compute + flash I/O + cache mgmt, an
autocorrelated noise, a warm-up ramp; the second arm 10% faster), one run per arm, so every
timing row gets its moving-block bootstrap intervals (2,000 resamples each: the run's mean, tok/s
and the wall p50/p95/p99, of each arm and of their difference).

1. The whole comparison: a child process per size builds the runs and calls ``compare``; wall
   time, CPU time (all threads) and the child's peak RSS, and the growth of each per 10x of
   tokens. Goal: two 10^6-token runs in under 10 s.
2. In the same run, interleaved, several rounds: the bootstrap of one series (the wall column of
   the first arm: its mean, tok/s and p95) against the bootstrap it replaced, which built every
   resample and reduced it (tests/helpers/bootstrap_reference.py), on ``--resamples`` resamples
   each (the reference at 2,000 resamples of 10^6 tokens takes minutes), the same intervals
   required; and the reference's time scaled to the comparison's 2,000 resamples of every row.

The machine this runs on is shared: compare the ratios, not the times. Run:
.venv/bin/python benchmarks/bench_compare.py [--sizes 1e5,1e6,1e7] [--rounds 3] [--resamples 40]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the bootstrap it replaced (tests/helpers/bootstrap_reference.py)

from helpers import bootstrap_reference as ref  # noqa: E402

from bmoe_top.tui.analysis import stats as S  # noqa: E402
from bmoe_top.tui.analysis.compare import ArmInput, RunInput, compare  # noqa: E402


def series(n: int, mean: float, seed: int) -> np.ndarray:
    """Per-token wall ms: an AR-like noise around ``mean`` (a 3-tap filter), a warm-up ramp."""
    rng = np.random.default_rng(seed)
    e = rng.normal(0, 0.05 * mean, n)
    wall = mean + np.convolve(e, [1.0, 0.5, 0.25], mode="same")
    ramp = min(n, 200)
    wall[:ramp] += np.linspace(2 * mean, 0, ramp)
    return wall


def run_input(name: str, n: int, mean: float, seed: int) -> RunInput:
    wall = series(n, mean, seed)
    rng = np.random.default_rng(seed + 1)
    io = 0.4 * wall * rng.uniform(0.9, 1.1, n)
    mgmt = 0.05 * wall
    return RunInput(name, {"wall_ms": wall, "compute_ms": wall - io - mgmt, "io_ms": io, "mgmt_ms": mgmt,
                           "read_mib": np.full(n, 20.0)}, {"hit_pct": 71.5, "prefill_s": 1.5, "load_s": 2.0})


def child(n: int) -> int:
    a, b = run_input("base", n, 100.0, 1), run_input("new", n, 90.0, 2)
    t0, c0 = time.perf_counter(), time.process_time()
    c = compare([ArmInput("base", [a]), ArmInput("new", [b])])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(orjson.dumps({"wall": wall, "cpu": cpu, "rows": len(c.metrics),
                        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}).decode())
    return 0


def run_child(n: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
    return dict(orjson.loads(out.stdout.strip().splitlines()[-1]))


def bootstrap_vs_reference(n: int, resamples: int, rounds: int) -> None:
    """One series' interval, ours at the comparison's 2,000 resamples against the gathered
    resamples at ``resamples`` scaled to 2,000 (its cost is linear in them); both at
    ``resamples`` for the same-interval check."""
    x = series(n, 100.0, 1)[200:]
    cases = (("mean", S.mean_stat, ref.mean_rows), ("tok/s", S.rate_stat, ref.rate_rows),
             ("p95", S.percentile_stat(95.0), ref.percentile_rows(95.0)))
    for name, stat, rstat in cases:
        ours, theirs = [], []
        for _ in range(rounds):
            t = time.process_time()
            want = ref.interval_mean(x, resamples=resamples, stat=rstat)
            theirs.append((time.process_time() - t) * 2000 / resamples)
            t = time.process_time()
            S.Bootstrap(2000, 0).interval_mean(x, stat=stat)
            ours.append(time.process_time() - t)
            iv = S.Bootstrap(resamples, 0).interval_mean(x, stat=stat)
            got = (iv.estimate, iv.low, iv.high)
            if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
                sys.exit(f"MISMATCH {name}: {got} != {want}")
        o, r = statistics.median(ours), statistics.median(theirs)
        print(f"    {name:6s} interval, 2,000 resamples: ours {o:7.2f} s, gathered resamples {r:8.1f} s (measured "
              f"on {resamples}, scaled) -> ratio {r / o:6.1f}x (CPU time; the same interval at {resamples})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=40, help="resamples of the bootstrap comparison")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work on the machine slows "
          "every time here; the ratios are measured in the same rounds)")
    run_child(1000)  # numba compiles or loads its cache once
    S.Bootstrap(20, 0).interval_mean(series(500, 100.0, 1), stat=S.percentile_stat(95.0))  # and in this process
    rows = []
    for n in (int(float(s)) for s in a.sizes.split(",")):
        reps = [run_child(n) for _ in range(1 if n >= 10**7 else a.rounds)]
        best = min(reps, key=lambda r: r["wall"])
        rows.append((n, best))
        print(f"{n:>10,} tokens a run, two runs: compare in {best['wall']:.2f} s (CPU {best['cpu']:.2f} s), peak RSS "
              f"{best['rss_mib']:.0f} MiB" + (f"; goal < 10 s: {'met' if best['wall'] < 10 else 'NOT met'}"
                                              if n == 10**6 else ""))
        big = n >= 10**7
        bootstrap_vs_reference(n, max(4, a.resamples // 10) if big else a.resamples, 1 if big else a.rounds)
    for (n0, r0), (n1, r1) in zip(rows, rows[1:]):
        print(f"growth {n0:,} -> {n1:,} tokens ({n1 / n0:.0f}x): time {r1['wall'] / r0['wall']:.1f}x (CPU "
              f"{r1['cpu'] / r0['cpu']:.1f}x), peak RSS {r1['rss_mib'] / r0['rss_mib']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
