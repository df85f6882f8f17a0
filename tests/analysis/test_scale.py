"""The what-if report at scale: on 10^5- and 10^6-lookup traces (48 layers x 128 experts, top-8,
two expert sizes, tests/helpers/routing.py ``scale_lookups``) every curve, table and bound equals
the golden report, which was written by the per-budget replays the simulator had before its
policy kernels went to O(log n) steps (tests/analysis/golden/whatif_scale_*.json)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.golden import check_golden
from helpers.routing import scale_lookups

from bmoe_top.tui.analysis.whatif import whatif

GOLDEN = Path(__file__).resolve().parent / "golden"
MIB = 1 << 20


@pytest.mark.parametrize("n, name", [(100_000, "1e5"), (1_000_000, "1e6")])
def test_whatif_report_at_scale_equals_golden(n: int, name: str) -> None:
    lk = scale_lookups(n)
    w = whatif(lk, run_budget=4000 * MIB, read_mib_s=900.0)
    check_golden(GOLDEN / f"whatif_scale_{name}.json", w)
