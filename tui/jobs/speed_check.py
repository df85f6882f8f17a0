"""The tok/s model checked against the run it is made from: at the run's own budget, the
predicted tok/s (tui/analysis/speed.py, with the what-if's LRU curve and the costs the run
measured) beside the tok/s the run measured, flagged past :data:`TOLERANCE`
(docs/analysis.md "Predicted speed", "The check against the run"). No Textual."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bmoe_top.tui.analysis.speed import MIB, Prediction, TokenCosts, predict
from bmoe_top.tui.jobs.whatif import WhatIfError, analyse_input, load_whatif, meta_int, summary_number
from bmoe_top.tui.model import RunModel

__all__ = ["TOLERANCE", "SpeedCheck", "speed_check"]

#: A prediction further than this from the measured tok/s (a share of it) is flagged.
TOLERANCE = 0.15


@dataclass(frozen=True)
class SpeedCheck:
    """``prediction`` at ``budget_mib`` (the run's) beside ``measured_tok_s``; ``overlap`` the
    mode the run ran in; ``error`` (predicted - measured) / measured; ``flagged`` past
    :data:`TOLERANCE`. ``costs`` the inputs used; ``read_mib_per_token`` the what-if's LRU read
    at the budget beside ``measured_read_mib_per_token``; ``lanes`` the run's read lanes."""

    budget_mib: float
    overlap: bool
    costs: TokenCosts
    lanes: int
    prediction: Prediction
    predicted_tok_s: float
    measured_tok_s: float
    error: float
    flagged: bool
    read_mib_per_token: float
    measured_read_mib_per_token: float | None


def _need(run: RunModel, key: str) -> float:
    v, _ = summary_number(run, key)
    if v is None:
        raise WhatIfError(f"the run's summary has no {key}: the speed check needs the run's CSV or log")
    return v


def speed_check(paths: Sequence[str]) -> SpeedCheck:
    """Predict the run of ``paths`` (a routing trace and the run's CSV or log) at its own budget.

    The read bandwidth is the run's: its read MiB over its flash time (``read_mib_s``), which
    is lane-busy time summed over its ``io_threads`` lanes, times the lanes; the flash wait is the
    what-if's LRU read per token at that bandwidth. Raises WhatIfError (one sentence) for files
    without routing, a budget, or the summary's compute, mgmt and tok/s."""
    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.sources.files import ReplayError

    inp = load_whatif(paths)
    if inp.run_budget is None or inp.read_mib_s is None:
        raise WhatIfError("the speed check needs the run's budget and read bandwidth (its CSV or log)")
    try:
        run = open_paths([p for p in inp.files if p != inp.trace])
    except ReplayError as e:
        raise WhatIfError(str(e)) from None
    budget_mib = inp.run_budget / MIB
    report, _ = analyse_input(inp, [budget_mib])
    lru = next(c for c in report.curves if c.policy == "lru")
    read_mib = float(lru.read_mib_per_token[0])
    stall_s, _ = summary_number(run, "stall_s_tok")
    lanes = meta_int(run, "io_threads") or 1
    lookups = report.n_layer * report.top_k
    moe = [m for m in report.layer_mib if m > 0]
    miss_bytes = sum(moe) / len(moe) * MIB
    costs = TokenCosts(compute_ms=_need(run, "compute_s_tok") * 1e3, mgmt_ms=_need(run, "mgmt_s_tok") * 1e3,
                       lookups=lookups, miss_bytes=miss_bytes, read_mb_s=inp.read_mib_s * MIB / 1e6 * lanes,
                       stall_ms=(stall_s or 0.0) * 1e3)
    hit = min(1.0, max(0.0, 1.0 - read_mib * MIB / (lookups * miss_bytes)))
    p = predict(budget_mib, hit, costs)
    overlap = stall_s is not None
    measured = _need(run, "tok_s")
    got = p.tok_s(overlap)
    err = (got - measured) / measured if measured > 0 else math.inf
    mread, _ = summary_number(run, "read_mib_per_tok")
    return SpeedCheck(budget_mib, overlap, costs, lanes, p, got, measured, err, abs(err) > TOLERANCE, read_mib, mread)
