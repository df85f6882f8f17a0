"""Cache replay speed (tui/analysis/cachesim.py, live.py).

On the 48-layer real route trace (../shared/data/real-runs/bigmoeonedge-2026-07-15/qwen.route.csv,
48 layers x 128 experts, top-6; a synthetic trace of the same shape when ../shared is absent):

1. "what-if set": the full LRU curve over every budget of the dense axis in one pass, plus
   Belady, LFU, static and SIEVE at 50 budgets. Goal: under 1 s.
2. One-pass LRU at 50 budgets against the baseline, the compiled per-budget LRU with the
   runtime's batch rules (``_kernels.lru_direct_hits``: a linked list, one budget a pass),
   measured interleaved in the same rounds (on a subset of the budgets, scaled to 50), the same
   hits required.
3. 10^6 lookups (synthetic, 48 layers x top-8): the same what-if set. Goal: under 10 s.
4. The live curve: LiveLru.feed_token at 48 layers x top-8, 128 experts, 256 budgets. Goal:
   under 1 ms per token.
5. The live what-if as the live screen runs it: LiveWhatIf reads the routing rows a live run model
   holds and replays them (grouping per token, then LiveLru), per token, against feed_token alone
   on the same tokens in the same rounds (the overhead of following the model).
6. The live replay's kernel at that rate (48 x top-8, 257 budgets, a token's 48 batches a call):
   the one-pass kernel against the per-budget kernel it replaced (tests/helpers/lru_reference.py,
   every budget walked for every lookup), interleaved in the same rounds, same hits required.

Numba compiles the kernels on first use and caches them on disk; the first call's time is
printed apart. Run: .venv/bin/python benchmarks/bench_cachesim.py [--rounds 5] [--live-only] (4-6 only)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bmoe_top.parsers.route_trace import load_route_trace
from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.live import LiveLru
from bmoe_top.tui.analysis.lookups import Lookups, from_route_trace, from_routing, split_decode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the per-budget reference kernel (tests/helpers/lru_reference.py)
TRACE = REPO.parent / "shared" / "data" / "real-runs" / "bigmoeonedge-2026-07-15" / "qwen.route.csv"


def baseline_lru(lk: Lookups, budget: int) -> int:
    """The compiled per-budget LRU (the runtime's rules at one budget): decode hits."""
    out = np.zeros(lk.n, dtype=np.uint8)
    K.lru_direct_hits(lk.item, lk.batch_first(), lk.item_bytes, budget, out)
    return int(out[lk.decode].sum())


def synthetic(n_tokens: int, n_layer: int = 48, n_expert: int = 128, k: int = 8, seed: int = 0) -> Lookups:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_expert, 0.3), size=n_layer)
    # top-k without replacement per (token, layer): Gumbel top-k on log p
    g = rng.gumbel(size=(n_tokens, n_layer, n_expert)) + np.log(p)[None, :, :]
    dec = np.argsort(-g, axis=2)[:, :, :k]
    pre = dec[:32]
    lb = np.where(np.arange(n_layer) % 3 == 0, 3059712, 2654208)
    return from_routing(dec[32:], lb, n_expert, pre)


def whatif_set(lk: Lookups, b50: np.ndarray) -> dict[str, float]:
    """The timed set: LRU over the dense axis + Belady, LFU, static, SIEVE at 50 budgets."""
    out = {}
    t0 = time.perf_counter()
    C.lru_curve(lk)
    out["lru_dense"] = time.perf_counter() - t0
    for p in ("belady", "lfu", "sieve"):
        t1 = time.perf_counter()
        C.policy_curve(lk, p, b50)
        out[p] = time.perf_counter() - t1
    t1 = time.perf_counter()
    tr, te = split_decode(lk, 0.5)
    C.static_curve(tr, te, b50)
    out["static"] = time.perf_counter() - t1
    out["total"] = time.perf_counter() - t0
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-budgets", type=int, default=3, help="budgets the baseline replays per round")
    ap.add_argument("--live-only", action="store_true", help="only the live cases (4-6)")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work on the machine "
          "slows every number here; the ratios are measured in the same rounds)")
    if not args.live_only:
        offline(args)
    live_cases(args.rounds)
    return 0


def offline(args: argparse.Namespace) -> None:
    if TRACE.is_file():
        lk = from_route_trace(load_route_trace(TRACE.read_bytes()))
        src = f"real trace {TRACE.name}"
    else:
        lk = synthetic(128, k=6)
        src = "synthetic trace (../shared absent)"
    b50 = C.sweep_budgets(lk, 50)
    dense = C.dense_budgets(lk)
    print(f"{src}: {lk.n} lookups ({lk.n_decode_lookups} decode) in {lk.n_batches} batches, "
          f"{lk.n_layer} layers x {lk.n_expert} experts, top-{lk.top_k}; 50 sweep budgets, {dense.size} dense")

    t0 = time.perf_counter()
    whatif_set(lk, b50)
    first = time.perf_counter() - t0
    print(f"first call (numba compiles or loads its cache): {first:.2f} s")

    sets, ours50, base_per = [], [], []
    rng = np.random.default_rng(1)
    for _ in range(args.rounds):
        sets.append(whatif_set(lk, b50))
        t1 = time.perf_counter()
        c = C.lru_curve(lk, b50)
        ours50.append(time.perf_counter() - t1)
        pick = rng.choice(b50.size, size=args.baseline_budgets, replace=False)
        t1 = time.perf_counter()
        for j in pick:
            h = baseline_lru(lk, int(b50[j]))
            if h != int(c.decode_hits[j]):
                sys.exit(f"MISMATCH at {b50[j]}: baseline {h}, one pass {int(c.decode_hits[j])}")
        base_per.append((time.perf_counter() - t1) / args.baseline_budgets)
    med = {k: statistics.median(s[k] for s in sets) for k in sets[0]}
    print("what-if set, median of rounds: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in med.items()))
    print(f"  goal < 1 s: {'met' if med['total'] < 1.0 else 'NOT met'} ({med['total']:.3f} s)")
    o, bp = statistics.median(ours50), statistics.median(base_per)
    print(f"LRU at 50 budgets: one pass {o * 1e3:.1f} ms; compiled per-budget LRU {bp * 1e3:.2f} ms per budget = "
          f"{50 * bp:.2f} s for 50 -> ratio {50 * bp / o:.1f}x (baseline / one pass, same hits)")

    big = synthetic(2604 + 32)
    print(f"10^6 lookups: {big.n} lookups, {big.n_batches} batches")
    tb = [whatif_set(big, C.sweep_budgets(big, 50)) for _ in range(max(1, args.rounds // 2))]
    mb = {k: statistics.median(s[k] for s in tb) for k in tb[0]}
    print("  " + ", ".join(f"{k} {v:.2f} s" for k, v in mb.items()))
    print(f"  goal < 10 s: {'met' if mb['total'] < 10.0 else 'NOT met'} ({mb['total']:.2f} s)")


def live_cases(rounds: int) -> None:
    rng2 = np.random.default_rng(2)
    n_layer, n_expert, k = 48, 128, 8
    p = rng2.dirichlet(np.full(n_expert, 0.3), size=n_layer)
    lb = np.where(np.arange(n_layer) % 3 == 0, 3059712, 2654208)
    live = LiveLru(n_layer, n_expert, lb, points=256)
    toks = []
    for _ in range(600):
        g = rng2.gumbel(size=(n_layer, n_expert)) + np.log(p)
        toks.append(np.argsort(-g, axis=1)[:, :k])
    for t in toks[:50]:
        live.feed_token(t)  # warm: compile, first growth
    per = []
    for t in toks[50:]:
        t1 = time.perf_counter()
        live.feed_token(t)
        per.append(time.perf_counter() - t1)
    t1 = time.perf_counter()
    live.curve()
    read = time.perf_counter() - t1
    per_ms = np.array(per) * 1e3
    print(f"live LRU, 48 x top-8, {live.budgets.size} budgets: feed_token median {np.median(per_ms):.3f} ms, "
          f"p95 {np.percentile(per_ms, 95):.3f} ms; curve() {read * 1e3:.3f} ms; goal < 1 ms: "
          f"{'met' if np.median(per_ms) < 1.0 else 'NOT met'}")
    live_follower(toks, lb, n_layer, n_expert, k, rounds)
    live_kernels(toks, lb, n_layer, n_expert, rounds)


def live_follower(toks: list[np.ndarray], lb: np.ndarray, n_layer: int, n_expert: int, k: int, rounds: int) -> None:
    from bmoe_top.tui.jobs.live_whatif import LiveWhatIf
    from bmoe_top.tui.model import LIVE, RunModel

    follow, alone = [], []
    n = len(toks)
    for _ in range(rounds):
        run = RunModel(LIVE)
        run.update_meta({"n_layer": n_layer, "n_expert": n_expert, "n_expert_used": k})
        for i, t in enumerate(toks):  # what RecordFeed writes for each BMOE_ROUTE line (not timed)
            run.add_routes(np.full(n_layer * k, i, dtype=np.int64), np.repeat(np.arange(n_layer), k),
                           np.asarray(t, dtype=np.int64).reshape(-1), np.zeros(n_layer * k, dtype=np.int64))
        lw = LiveWhatIf(run, sizes=lambda r: lb.tolist(), max_tokens=n)
        t1 = time.perf_counter()
        lw.update()
        lw.view()
        follow.append((time.perf_counter() - t1) / n)
        ll = LiveLru(n_layer, n_expert, lb, points=256)
        t1 = time.perf_counter()
        for t in toks:
            ll.feed_token(t)
        ll.curve()
        alone.append((time.perf_counter() - t1) / n)
    f, a = statistics.median(follow) * 1e3, statistics.median(alone) * 1e3
    print(f"live what-if (LiveWhatIf over a live run model, {n} tokens a round): {f:.3f} ms per token; "
          f"feed_token alone {a:.3f} ms -> ratio {f / a:.2f}x; goal < 1 ms: {'met' if f < 1.0 else 'NOT met'}")


def live_kernels(toks: list[np.ndarray], lb: np.ndarray, n_layer: int, n_expert: int, rounds: int) -> None:
    """The one-pass kernel (through LruState, as LiveLru calls it) against the per-budget
    reference kernel, each fed one token's batches a call, interleaved rounds."""
    from helpers.lru_reference import lru_feed_reference

    lk = from_routing(np.asarray(toks, dtype=np.int64), lb, n_expert)
    budgets = LiveLru(n_layer, n_expert, lb, points=256).budgets
    item, bf, size, dec, lay = lk.item, lk.batch_first(), lk.item_bytes, lk.decode, lk.layer
    n_items, nb, n_batches = size.shape[0], budgets.shape[0], lk.n_batches
    max_batch = int(np.diff(bf).max())
    cuts = list(range(0, n_batches + 1, n_layer))

    def new() -> tuple[float, np.ndarray]:
        st = C.LruState(n_items, n_layer, size, budgets)
        per = []
        for b0, b1 in zip(cuts, cuts[1:]):
            t1 = time.perf_counter()
            st.feed(item, bf, dec, b0, b1)
            per.append(time.perf_counter() - t1)
        return statistics.median(per), st.counts()[0]

    def old() -> tuple[float, np.ndarray]:
        z = np.zeros
        lb_, lr = np.full(n_items, -1, dtype=np.int64), z(n_items, dtype=np.int64)
        status, fen = np.ones((n_items, nb), dtype=np.uint8), z(n_batches + 1, dtype=np.int64)
        over, bover, scal = z(nb, dtype=np.uint8), z(nb, dtype=np.int64), z(K.N_SCALARS, dtype=np.int64)
        stage, hd, hp, hb = z((max_batch, nb), dtype=np.uint8), z(nb + 1, np.int64), z(nb + 1, np.int64), \
            z(nb + 1, np.int64)
        hl, out = z((n_layer, nb + 1), dtype=np.int64), z((0, nb), dtype=np.uint8)
        per = []
        for b0, b1 in zip(cuts, cuts[1:]):
            t1 = time.perf_counter()
            lru_feed_reference(item, bf, b0, b1, dec, lay, size, budgets, lb_, lr, status, fen, over,
                               bover, scal, stage, hd, hp, hb, hl, out)
            per.append(time.perf_counter() - t1)
        return statistics.median(per), np.cumsum(hd)[:nb]

    new()
    old()  # compile (the reference is not cached on disk)
    tn, to = [], []
    for _ in range(rounds):
        a, ha = new()
        b, hb_ = old()
        if not np.array_equal(ha, hb_):
            sys.exit("MISMATCH: the one-pass kernel and the per-budget reference disagree")
        tn.append(a)
        to.append(b)
    n_, o_ = statistics.median(tn) * 1e6, statistics.median(to) * 1e6
    print(f"live kernel, {len(toks)} tokens x {n_layer} layers, {nb} budgets, a token a call, median per "
          f"token: one-pass {n_:.0f} us, per-budget reference {o_:.0f} us -> ratio {o_ / n_:.1f}x "
          "(reference / one-pass, same hits)")


if __name__ == "__main__":
    sys.exit(main())
