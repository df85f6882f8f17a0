"""A finished sweep's folder from synthetic runs (helpers/synth.py), for the sweep screen's tests:
every run recorded as ``bmoe-top sweep`` leaves it (``run.csv``, ``run.route.csv``, ``run.json``
with exit 0), so a sweep over the folder makes nothing and reads every number from the files.

    plan = synth_sweep(tmp_path / "sweep")                      # 3 budgets x 2 rounds, same routing
    plan = synth_sweep(out, cache_mb=(16, 64), differs={(2, 1)})  # round 2 of arm 1: other routing
"""

from __future__ import annotations

import json
from pathlib import Path

from bmoe_top.tui.jobs.sweep import SweepPlan, arm_dir
from helpers import synth

__all__ = ["synth_sweep"]


def synth_sweep(out: Path, cache_mb: tuple[float, ...] = (16, 64, 256), runs: int = 2,
                differs: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset(), n: int = 48) -> SweepPlan:
    """Write every run of a sweep of ``cache_mb`` x one lane x ``runs`` rounds into ``out`` and
    return its plan (the runtime a command that is never started). Each run's token CSV has its
    own seed (its own tok/s); the routing is one trace for all but the (round, arm index) pairs of
    ``differs``."""
    plan = SweepPlan(("bmoe-run",), "synthetic-moe.gguf", tuple(float(c) for c in cache_mb), runs=runs,
                     out=str(out), n_predict=n)
    for i, c in enumerate(plan.cache_mb):
        for r in range(1, runs + 1):
            d = arm_dir(plan.out, c, 1, r)
            d.mkdir(parents=True, exist_ok=True)
            (d / "run.csv").write_bytes(synth.token_csv(n, seed=100 + 10 * i + r))
            (d / "run.route.csv").write_bytes(synth.route_trace(n, seed=9 if (r, i) in differs else 5))
            (d / "run.json").write_text(json.dumps({"argv": [], "cache_mb": c, "io_threads": 1, "exit": 0}))
    return plan
