"""Golden files for the headless JSON of the what-if report and the comparison (the documents
``bmoe-top whatif --json`` and ``bmoe-top compare --json`` print)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from helpers.golden import check_golden
from helpers.routing import random_lookups
from helpers.typed_json import check_typed

from bmoe_top.tui.analysis.compare import ArmInput, RunInput, compare
from bmoe_top.tui.analysis.whatif import whatif
from bmoe_top.tui.present.compare import ComparisonDoc
from bmoe_top.tui.present.whatif import WhatIfReportDoc

GOLDEN = Path(__file__).resolve().parent / "golden"


def test_whatif_json() -> None:
    lk = random_lookups(np.random.default_rng(42), n_tokens=40, n_layer=3, n_expert=8, k=2, prefill_tokens=5,
                        layer_bytes=[1 << 20, 1 << 20, 2 << 20])
    w = whatif(lk, budgets=np.arange(0, 33) * (1 << 20), run_budget=12 << 20, read_mib_s=500.0, dense_points=64)
    check_golden(GOLDEN / "whatif.json", w)
    check_typed(orjson.loads(orjson.dumps(w)), WhatIfReportDoc)


def test_compare_json() -> None:
    rng = np.random.default_rng(7)

    def run(name: str, mean: float) -> RunInput:
        wall = np.concatenate([np.linspace(3 * mean, mean, 10), mean + rng.normal(0, 5, 60)])
        return RunInput(name, {"wall_ms": wall, "io_ms": 0.4 * wall, "mgmt_ms": 0.05 * wall,
                               "read_mib": np.full(70, 20.0)},
                        {"hit_pct": 71.5, "prefill_s": 1.5, "load_s": 2.0}, {"temperature_c": 30.0})

    one = compare([ArmInput("base", [run("a", 100.0)]), ArmInput("new", [run("b", 90.0)])])
    check_golden(GOLDEN / "compare_one_run.json", one)
    check_typed(orjson.loads(orjson.dumps(one)), ComparisonDoc)
    many = compare([ArmInput("base", [run(f"a{i}", 100.0) for i in range(4)]),
                    ArmInput("new", [run(f"b{i}", 90.0) for i in range(4)])])
    check_golden(GOLDEN / "compare_runs.json", many)
    check_typed(orjson.loads(orjson.dumps(many)), ComparisonDoc)
