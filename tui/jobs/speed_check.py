"""The tok/s model checked against the run it is made from: at the run's own budget, the
predicted tok/s (tui/analysis/speed.py, with the what-if's LRU curve and the costs the run
measured) beside the tok/s the run measured, flagged past :data:`TOLERANCE`
(docs/analysis.md "Predicted speed", "The check against the run"). No Textual."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bmoe_top.tui.analysis.speed import MIB, Prediction, TokenCosts
from bmoe_top.tui.jobs.sizing import TOLERANCE, speed_view, token_costs
from bmoe_top.tui.jobs.whatif import WhatIfError, analyse_input, load_whatif

__all__ = ["TOLERANCE", "SpeedCheck", "speed_check"]


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


def speed_check(paths: Sequence[str]) -> SpeedCheck:
    """Predict the run of ``paths`` (a routing trace and the run's CSV or log) at its own budget.

    The read bandwidth is the run's: its read MiB over its flash time (``read_mib_s``), which
    is lane-busy time summed over its ``io_threads`` lanes, times the lanes; the flash wait is the
    what-if's LRU read per token at that bandwidth (tui/jobs/sizing.py, the what-if's own
    prediction). Raises WhatIfError (one sentence) for files without routing, a budget, or the
    summary's compute, mgmt and tok/s."""
    inp = load_whatif(paths)
    if inp.run_budget is None or inp.read_mib_s is None:
        raise WhatIfError("the speed check needs the run's budget and read bandwidth (its CSV or log)")
    costs = inp.run_costs
    if costs is None or costs.measured_tok_s is None:
        raise WhatIfError("the run's summary has no compute_s_tok, mgmt_s_tok or tok_s: the speed check needs "
                          "the run's CSV or log")
    budget_mib = inp.run_budget / MIB
    report, _ = analyse_input(inp, [budget_mib])
    view = speed_view(inp, report, ram=None, machine_ram=(None, ""), policies=("lru",))
    p = view.at_run
    if p is None or view.inputs.read_mb_s is None:
        raise WhatIfError("the speed check could not predict the run's budget: " + "; ".join(view.inputs.missing))
    lru = next(c for c in report.curves if c.policy == "lru")
    tc = token_costs(costs, view.inputs.lookups, view.inputs.miss_bytes, view.inputs.read_mb_s)
    got = p.tok_s(costs.overlap)
    measured = costs.measured_tok_s
    err = (got - measured) / measured if measured > 0 else math.inf
    return SpeedCheck(budget_mib, costs.overlap, tc, costs.lanes, p, got, measured, err, abs(err) > TOLERANCE,
                      float(lru.read_mib_per_token[0]), costs.read_mib_per_tok)

