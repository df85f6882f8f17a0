"""The what-if at 10^5, 10^6 and 10^7 lookups (tui/analysis/whatif.py ``analyse``).

Traces: 48 layers x 128 experts, top-8, two expert sizes (tests/helpers/routing.py ``zipf_routing``:
Zipf popularity per layer, integer-only, so every run of this benchmark replays the same lookups),
each written once as a binary routing trace (moe-cache-reference.md "Routing trace format") into a
temporary folder.

1. The whole report as ``bmoe-top whatif --json`` makes it: a child process per size reads the file
   (``lookups.from_bytes`` with the layer sizes), replays every policy at the default sweep (52
   budgets) and LRU over the dense axis, builds the report and serialises it. Printed: wall time,
   CPU time (all threads) and the child's peak RSS, and the growth of each per 10x of lookups.
   Goal at 10^7: under 15 s and 1 GiB.
2. In the same run, interleaved, several rounds: the multi-budget kernels (LFU, FIFO, SIEVE,
   Belady; every budget of a group in one pass over the trace, the groups the what-if makes)
   against the compiled per-budget reference they replaced (tests/helpers/policy_per_budget.py:
   one kernel call per budget), on the same budgets (the whole sweep, or ``--budgets`` of it; one
   thread each side), the same hits required, and each side's growth per 10x of lookups; and the
   one-pass LRU over the dense axis against the compiled per-budget LRU
   (``_kernels.lru_direct_hits``, the runtime's rules at one budget) on 3 sweep budgets, scaled
   to the dense axis's budgets.

The machine this runs on is shared: compare the ratios (measured in the same rounds), not the
times. Run: .venv/bin/python benchmarks/bench_whatif.py [--sizes 1e5,1e6,1e7] [--rounds 3]
[--budgets 0 (the whole sweep)]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the trace generator and the reference kernels (tests/helpers)

from helpers.policy_per_budget import replay_per_budget  # noqa: E402
from helpers.routing import SCALE_LAYER_BYTES, zipf_routing  # noqa: E402

from bmoe_top.parsers.routing_bin import routing_bin_bytes  # noqa: E402
from bmoe_top.tui.analysis import _kernels as K  # noqa: E402
from bmoe_top.tui.analysis import cachesim as C  # noqa: E402
from bmoe_top.tui.analysis.lookups import Lookups, from_bytes  # noqa: E402

N_LAYER, N_EXPERT, TOP_K = 48, 128, 8
POLICIES = ("belady", "lfu", "fifo", "sieve")


def write_trace(path: Path, n_lookups: int) -> None:
    """A binary routing trace of about ``n_lookups`` lookups, written token by token in chunks."""
    n_tok = n_lookups // (N_LAYER * TOP_K)
    with path.open("wb") as f:
        for t0 in range(0, n_tok, 4096):
            r = zipf_routing(min(4096, n_tok - t0), first_token=t0).astype(np.int64)
            lay = np.tile(np.arange(N_LAYER), r.shape[0])
            f.write(routing_bin_bytes(lay, r.reshape(-1, TOP_K)))


def load(path: Path) -> Lookups:
    lk, _notes = from_bytes(path.read_bytes(), path.name, n_expert=N_EXPERT, layer_bytes=SCALE_LAYER_BYTES)
    return lk


def child(path: str) -> int:
    """One report, timed: prints JSON (wall, cpu, peak RSS MiB, lookups, report bytes)."""
    from bmoe_top.tui.analysis.whatif import analyse

    t0, c0 = time.perf_counter(), time.process_time()
    lk = load(Path(path))
    t_load = time.perf_counter() - t0
    report, _replay = analyse(lk)
    doc = orjson.dumps(report, option=orjson.OPT_SERIALIZE_NUMPY)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(orjson.dumps({"wall": wall, "cpu": cpu, "load": t_load, "lookups": lk.n, "bytes": len(doc),
                        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                        "loadavg": os.getloadavg()[0]}).decode())
    return 0


def run_child(path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True, check=True)
    return dict(orjson.loads(out.stdout.strip().splitlines()[-1]))


def kernels(lk: Lookups, budgets: np.ndarray, rounds: int) -> dict[str, tuple[float, float]]:
    """Our multi-budget kernels against the compiled per-budget reference on ``budgets`` (each
    given its inputs ready, one thread), interleaved, the same hits required. Returns policy ->
    (ours, reference) CPU seconds, the median of the rounds."""
    bf = lk.batch_first()
    nu = C._next_use(lk)
    item = C._compact_items(lk)  # what the what-if hands its kernels
    item_layer = np.repeat(np.arange(lk.n_layer, dtype=np.int64), lk.n_expert)
    nb = budgets.shape[0]
    out = {}
    for p in POLICIES:
        ours, ref = [], []
        for _ in range(rounds):
            hd, hb, hl = np.zeros(nb, np.int64), np.zeros(nb, np.int64), np.zeros((lk.n_layer, nb), np.int64)
            t = time.process_time()
            replay_per_budget(p, item, bf, lk.decode, item_layer, lk.item_bytes, budgets, nu, hd, hb, hl)
            ref.append(time.process_time() - t)
            t = time.process_time()
            got = C.policy_curves(lk, (p,), budgets, threads=1)[p]
            ours.append(time.process_time() - t)
            if not (np.array_equal(got.decode_hits, hd) and np.array_equal(got.hit_bytes, hb)
                    and np.array_equal(got.layer_hits, hl)):
                sys.exit(f"MISMATCH {p}: the kernel and the reference disagree")
        o, r = statistics.median(ours), statistics.median(ref)
        out[p] = (o, r)
        print(f"    {p:6s} {nb} budgets: multi-budget {o:7.2f} s, compiled per-budget reference {r:7.2f} s -> "
              f"ratio {r / o:4.1f}x (CPU time, same hits)")
    pick = budgets[np.linspace(0, nb - 1, 5).astype(int)[1:-1]]
    dense = C.dense_budgets(lk)
    ours, ref = [], []
    for _ in range(rounds):
        t = time.process_time()
        C.lru_curve(lk, dense)
        ours.append(time.process_time() - t)
        t = time.process_time()
        for b in pick.tolist():
            hits = np.zeros(lk.n, dtype=np.uint8)
            K.lru_direct_hits(lk.item, bf, lk.item_bytes, int(b), hits)
        ref.append((time.process_time() - t) / pick.shape[0] * dense.shape[0])
    o, r = statistics.median(ours), statistics.median(ref)
    print(f"    LRU over {dense.shape[0]} dense budgets: one pass {o:.2f} s, compiled per-budget LRU {r:.1f} s "
          f"(measured on {pick.shape[0]} budgets, scaled) -> ratio {r / o:.0f}x")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budgets", type=int, default=0,
                    help="sweep budgets the kernels are compared on (0: the whole sweep, as the what-if runs)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work on the machine slows "
          "every time here; the ratios are measured in the same rounds)")
    small = Path(tempfile.mkdtemp()) / "warm.bin"
    write_trace(small, 20_000)
    run_child(small)  # numba compiles or loads its cache once
    rows = []
    kern: list[dict[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"trace-{n}.bin"
            write_trace(path, n)
            reps = [run_child(path) for _ in range(1 if n >= 10**7 else a.rounds)]
            best = min(reps, key=lambda r: r["wall"])
            rows.append((n, best))
            goal = ""
            if n >= 10**7:
                met = best["wall"] < 15 and best["rss_mib"] < 1024
                goal = (f"; goal < 15 s and < 1024 MiB: {'met' if met else 'NOT met'} "
                        f"(load average {best['loadavg']:.1f})")
            print(f"{n:>10,} lookups ({path.stat().st_size / 2**20:.0f} MiB file): report in {best['wall']:.2f} s "
                  f"(CPU {best['cpu']:.2f} s, reading the file {best['load']:.2f} s), peak RSS "
                  f"{best['rss_mib']:.0f} MiB{goal}")
            lk = load(path)
            b = C.sweep_budgets(lk)
            pick = b if a.budgets <= 0 else b[np.linspace(0, b.shape[0] - 1, a.budgets + 2).astype(int)[1:-1]]
            kern.append(kernels(lk, pick, a.rounds if n < 10**7 else 1))
            del lk
    for (n0, r0), (n1, r1) in zip(rows, rows[1:]):
        f = n1 / n0
        print(f"growth {n0:,} -> {n1:,} lookups ({f:.0f}x): time {r1['wall'] / r0['wall']:.1f}x (CPU "
              f"{r1['cpu'] / r0['cpu']:.1f}x), peak RSS {r1['rss_mib'] / r0['rss_mib']:.1f}x")
    for (n0, k0), (n1, k1) in zip(zip(sizes, kern), zip(sizes[1:], kern[1:])):
        print(f"kernels' growth {n0:,} -> {n1:,} lookups: " + ", ".join(
            f"{p} {k1[p][0] / k0[p][0]:.1f}x (reference {k1[p][1] / k0[p][1]:.1f}x)" for p in POLICIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
