"""Routing ingest with memory tiers: what BMOE_ROUTE's ``tier`` costs on the live routing path,
from the line to the expert map's counts, against the same lines without it, in one run.

For three shapes (the bench model's 8 layers x 64 experts top-4, 48 x 128 top-8, 94 x 512
top-8), ``--tokens`` decode tokens of ``BMOE_ROUTE`` lines as bmoe-run writes them (ids skewed,
hits from an LRU of a third of each layer's experts, every miss named page cache or disk) with a
``BMOE_PROGRESS`` line each, are parsed (``parse_line``) and fed through ``RecordFeed`` into a
live ``RunModel``; every 60 tokens (2 s at 30 tok/s: the expert map's repaint interval) the map's
read runs (``expert_aggregates`` at the newest token). The baseline is the same lines with
``tier`` taken out (bmoe-cli's, or bmoe-run without tiers), measured in the same run,
interleaved round by round. Printed: microseconds per token of each, and the median of the
per-round ratio with / without. Also one frame of the expert map (200 columns x 40 rows) in the
tiers view against the routing heat view over the same model.

    .venv/bin/python benchmarks/bench_route_tiers.py [--rounds 7] [--tokens 600]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import orjson

from bmoe_top.parsers.bmoe_lines import parse_line
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.grids import ExpertMap

SHAPES = ((8, 64, 4), (48, 128, 8), (94, 512, 8))
#: Tokens between two reads of the expert map's counts (its 2 s repaint interval at 30 tok/s).
READ_EVERY = 60


def make_lines(n_layer: int, n_expert: int, k: int, n_tok: int, seed: int = 3) -> list[str]:
    """Per token a BMOE_ROUTE (with ``tier``) and a BMOE_PROGRESS line, as bmoe-run writes them."""
    rng = np.random.default_rng(seed)
    slots = max(k, n_expert // 3)
    lru: list[list[int]] = [[] for _ in range(n_layer)]
    lines = []
    for step in range(1, n_tok + 1):
        experts, hits, tiers = [], [], []
        for il in range(n_layer):
            ids = [int(x) for x in rng.choice(n_expert, size=k, replace=False,
                                               p=_skew(n_expert))]
            h = [int(e in lru[il]) for e in ids]
            for e in ids:
                if e in lru[il]:
                    lru[il].remove(e)
                lru[il].append(e)
            del lru[il][:-slots]
            experts.append(ids)
            hits.append(h)
            tiers.append([0 if x else int(1 + (rng.random() < 0.4)) for x in h])
        lines.append("BMOE_ROUTE " + orjson.dumps({"step": step, "turn": 0, "phase": "decode", "experts": experts,
                                                   "hit": hits, "tier": tiers}).decode())
        lines.append("BMOE_PROGRESS " + orjson.dumps({
            "step": step, "steps": n_tok, "wall_ms": 100.0, "io_ms": 40.0, "compute_ms": 55.0, "mgmt_ms": 5.0,
            "stall_ms": 0.0, "read_mb": 12.5, "cache_hit_pct": 60.0, "text": "x"}).decode())
    return lines


_SKEWS: dict[int, np.ndarray] = {}


def _skew(n: int) -> np.ndarray:
    if n not in _SKEWS:
        w = 1.0 / np.arange(1, n + 1) ** 0.8
        _SKEWS[n] = w / w.sum()
    return _SKEWS[n]


def without_tiers(lines: list[str]) -> list[str]:
    out = []
    for ln in lines:
        if ln.startswith("BMOE_ROUTE "):
            d = orjson.loads(ln[11:])
            del d["tier"]
            ln = "BMOE_ROUTE " + orjson.dumps(d).decode()
        out.append(ln)
    return out


def ingest(lines: list[str]) -> tuple[float, RunModel]:
    """Seconds to parse and feed ``lines`` (fresh str objects) into a live run model, reading the
    expert counts every :data:`READ_EVERY` tokens."""
    batch = [s.encode().decode() for s in lines]
    run = RunModel(LIVE)
    feed = RecordFeed(run)
    t0 = time.perf_counter()
    for i, ln in enumerate(batch):
        feed.apply(parse_line(ln), None)
        if i % (2 * READ_EVERY) == 2 * READ_EVERY - 1:
            run.expert_aggregates(run.tokens.n)
    run.expert_aggregates(run.tokens.n)
    return time.perf_counter() - t0, run


def frame_ms(run: RunModel, tiers: bool, reps: int = 5) -> float:
    pb = Playback(run)
    pb.end()
    em = ExpertMap(run, pb)
    em.tiers = tiers
    em.cursor.row, em.cursor.col = 3, 10
    t0 = time.perf_counter()
    for _ in range(reps):
        em.build(200, 40)
    return (time.perf_counter() - t0) / reps * 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=600)
    a = ap.parse_args(argv)
    print(f"{a.tokens} decode tokens per round, expert counts read every {READ_EVERY} tokens, "
          f"{a.rounds} interleaved rounds (median)")
    print(f"{'shape':>16} {'no tier us/tok':>15} {'tier us/tok':>12} {'ratio':>6} {'heat frame':>11} "
          f"{'tiers frame':>12} {'ratio':>6}")
    for n_layer, n_expert, k in SHAPES:
        tiered = make_lines(n_layer, n_expert, k, a.tokens)
        plain = without_tiers(tiered)
        t_plain, t_tier = [], []
        ingest(plain)  # warm-up: imports, first allocations
        run: RunModel | None = None
        for _ in range(a.rounds):
            tp, _r = ingest(plain)
            tt, run = ingest(tiered)
            t_plain.append(tp)
            t_tier.append(tt)
        assert run is not None and run.routes.tier_rows == a.tokens * n_layer * k
        ratio = statistics.median(t / p for t, p in zip(t_tier, t_plain))
        heat, tiers = [], []
        for _ in range(a.rounds):  # interleaved too
            heat.append(frame_ms(run, False))
            tiers.append(frame_ms(run, True))
        f_ratio = statistics.median(t / h for t, h in zip(tiers, heat))
        us = 1e6 / a.tokens
        print(f"{n_layer:>5} x {n_expert:>3} top-{k} {statistics.median(t_plain) * us:>15,.0f} "
              f"{statistics.median(t_tier) * us:>12,.0f} {ratio:>6.2f} {statistics.median(heat):>9.2f}ms "
              f"{statistics.median(tiers):>10.2f}ms {f_ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
