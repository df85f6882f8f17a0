"""The tok/s model against the real 48-layer run (../shared/data/real-runs, skipped when absent):
at the run's own 4,000 MiB, overlap mode, the prediction lands within 15 % of the 5.66 tok/s it
measured, and files without what the check needs are one sentence."""

from __future__ import annotations

import pytest
from helpers import REAL_RUNS

from bmoe_top.tui.jobs.speed_check import TOLERANCE, speed_check
from bmoe_top.tui.jobs.whatif import WhatIfError

RUN = REAL_RUNS / "bigmoeonedge-2026-07-15"


@pytest.fixture(scope="module")
def qwen() -> list[str]:
    if not RUN.is_dir():
        pytest.skip("../shared/data/real-runs is absent")
    return [str(RUN / "qwen.route.csv"), str(RUN / "qwen.metrics"), str(RUN / "qwen.log")]


def test_the_real_run_is_predicted_within_tolerance_at_its_own_budget(qwen):
    c = speed_check(qwen)
    assert c.budget_mib == 4000.0 and c.overlap and c.lanes == 4
    assert c.measured_tok_s == pytest.approx(5.657)
    # the summary's compute 0.114, mgmt 0.021, stall 0.042 s/token; 753 MiB/s per lane x 4 lanes (the
    # log's moe-stream line states it: it replaces the CSV's read / io time, 752.5, when they merge)
    assert (c.costs.compute_ms, c.costs.mgmt_ms, c.costs.stall_ms) == pytest.approx((114.0, 21.0, 42.0))
    assert c.costs.read_mb_s == pytest.approx(753 * 1.048576 * 4, rel=1e-4)
    assert c.costs.lookups == 48 * 6
    # the what-if's LRU read at 4,000 MiB is the run's own read per token, within 1 %
    assert c.measured_read_mib_per_token is not None
    assert c.read_mib_per_token == pytest.approx(c.measured_read_mib_per_token, rel=0.01)
    # the reads (52 ms a token over 4 lanes) hide under compute (114 ms): 114 + 21 + 42 = 177 ms
    assert c.prediction.flash_ms < c.costs.compute_ms
    assert c.prediction.overlap_ms == pytest.approx(177.0)
    assert abs(c.error) <= TOLERANCE and not c.flagged
    assert c.predicted_tok_s == pytest.approx(5.65, abs=0.01)


def test_a_trace_without_the_run_s_files_is_one_sentence(qwen):
    with pytest.raises(WhatIfError, match="needs the run's budget and read bandwidth"):
        speed_check(qwen[:1])
