"""The what-if report of a routing trace: every policy at every budget, the token cycle T, the
compulsory-miss ceiling, the gap to Belady, the per-layer table and allocation, the routing
skew, a recommended budget and (when the trace recorded residency) the check against the run.

The result is a tree of plain dataclasses with lists and floats (``orjson.dumps`` serialises it;
NaN becomes null): what ``bmoe-top whatif --json`` prints. docs/analysis.md.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import cachesim as C
from . import policies as P
from .layers import LayerRow, allocate, layer_partitioned_curve, layer_table
from .lookups import Lookups, split_decode
from .skew import Skew, routing_skew

__all__ = ["PolicyPoints", "RecordedCheck", "AllocationSummary", "WhatIf", "Replay", "whatif", "analyse",
           "recommend_budget", "DEFAULT_POLICIES"]

MIB = C.MIB
#: every policy of the registry (tui/analysis/policies.py), in its order
DEFAULT_POLICIES = P.NAMES


def _floats(a: npt.ArrayLike) -> list[float]:
    return [float(x) for x in np.asarray(a, dtype=np.float64).reshape(-1)]


@dataclass(frozen=True, slots=True)
class PolicyPoints:
    """One policy over budgets: ``budgets_mib``, ``decode_hit_pct`` (hits per 100 decode
    lookups: the runtime's hit %), ``read_mib_per_token``, ``io_s_per_token`` (at the given read
    bandwidth, else empty), ``label`` what it models, ``note`` caveats."""

    policy: str
    label: str
    budgets_mib: list[float]
    decode_hit_pct: list[float]
    read_mib_per_token: list[float]
    io_s_per_token: list[float]
    note: str


def _points(curve: C.Curve, read_mib_s: float | None) -> PolicyPoints:
    io = _floats(curve.io_s_per_token(read_mib_s)) if read_mib_s else []
    return PolicyPoints(curve.policy, C.POLICIES.get(curve.policy, curve.policy), _floats(curve.budgets_mib),
                        _floats(curve.decode_hit_pct), _floats(curve.read_mib_per_token), io, curve.note)


@dataclass(frozen=True, slots=True)
class RecordedCheck:
    """The replay against what the run recorded (the trace's ``residency`` column), at the run's
    budget: ``recorded_hit_pct`` and ``replay_hit_pct`` over decode lookups, ``agreement_pct``
    decode lookups where both say the same, ``differ`` how many do not;
    ``replay_hit_pct_with_prompt`` decode hits over decode lookups plus the prompt's lookups
    (BigMoeOnEdge's cumulative ``cache_hit_pct`` counts the prompt as one batch of misses)."""

    budget_mib: float
    recorded_hit_pct: float
    replay_hit_pct: float
    agreement_pct: float
    differ: int
    replay_hit_pct_with_prompt: float


@dataclass(frozen=True, slots=True)
class AllocationSummary:
    """At ``budget_mib``: one LRU per layer with the budget split evenly versus allocated by each
    layer's curve (``slots`` per layer), as decode hit %."""

    budget_mib: float
    equal_hit_pct: float
    allocated_hit_pct: float
    global_lru_hit_pct: float
    slots: list[int]


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The report. Budgets in MiB (2^20 bytes); hit figures are decode hit %.

    ``token_cycle_mib`` T (all MoE layers x top-k experts); ``zero_hit_below_mib`` the budget
    below which LRU cannot hit at all (T minus k-1 of the largest experts); ``bank_mib`` every
    expert; ``compulsory_ceiling_pct`` the hit % of an infinite cache (first lookups always miss);
    ``curves`` every policy at the sweep budgets; ``lru_all`` LRU over the dense budget axis and
    the sweep budgets;
    ``belady_gap_pct`` Belady minus LRU at the sweep budgets ("the most a policy could buy");
    ``focus_budget_mib`` the budget the per-layer parts describe (the run's, else the
    recommended one); ``recommended_budget_mib`` the smallest budget reaching ``recommend_rule``.
    """

    n_layer: int
    n_expert: int
    top_k: int
    decode_tokens: int
    decode_lookups: int
    prefill_lookups: int
    sizes_known: bool
    layer_mib: list[float]
    token_cycle_mib: float
    zero_hit_below_mib: float
    bank_mib: float
    compulsory_ceiling_pct: float
    run_budget_mib: float | None
    read_mib_s: float | None
    curves: list[PolicyPoints]
    lru_all: PolicyPoints
    belady_gap_pct: list[float]
    recommended_budget_mib: float
    recommend_rule: str
    focus_budget_mib: float
    layers: list[LayerRow]
    allocation: AllocationSummary
    skew: Skew
    recorded: RecordedCheck | None
    static_train_tokens: int


@dataclass(frozen=True, slots=True, eq=False)
class Replay:
    """The curves a :class:`WhatIf` summarises, for views that look at other budgets: ``curves``
    policy -> curve at the sweep budgets, ``lru_all`` LRU over the dense axis and every sweep
    budget (so :func:`~bmoe_top.tui.analysis.layers.layer_table` works at each of them),
    ``layer_curves`` each layer's own LRU (for :func:`~bmoe_top.tui.analysis.layers.allocate`)."""

    lookups: Lookups
    curves: dict[str, C.Curve]
    lru_all: C.Curve
    layer_curves: C.LayerCurves


def recommend_budget(curve: C.Curve, fraction: float = 0.95) -> int:
    """Smallest budget (bytes) of ``curve`` whose decode hits reach ``fraction`` of the hits at
    its largest budget (with hits rising slowly past the knee, this is where more RAM stops
    paying)."""
    top = int(curve.decode_hits[-1])
    j = int(np.flatnonzero(curve.decode_hits >= fraction * top)[0]) if top > 0 else curve.budgets.shape[0] - 1
    return int(curve.budgets[j])


def whatif(lk: Lookups, budgets: npt.ArrayLike | None = None, run_budget: int | None = None,
           read_mib_s: float | None = None, policies: tuple[str, ...] = DEFAULT_POLICIES,
           train_fraction: float = 0.5, dense_points: int = 512, threads: int | None = None) -> WhatIf:
    """The what-if report of ``lk``: :func:`analyse` without the curves behind it."""
    return analyse(lk, budgets, run_budget, read_mib_s, policies, train_fraction, dense_points, threads)[0]


def analyse(lk: Lookups, budgets: npt.ArrayLike | None = None, run_budget: int | None = None,
            read_mib_s: float | None = None, policies: tuple[str, ...] = DEFAULT_POLICIES,
            train_fraction: float = 0.5, dense_points: int = 512,
            threads: int | None = None) -> tuple[WhatIf, Replay]:
    """Replay ``lk`` through ``policies`` at ``budgets`` (bytes; default
    :func:`~bmoe_top.tui.analysis.cachesim.sweep_budgets` and the recommended budget; plus
    ``run_budget``) and summarise.

    ``run_budget``: the run's cache budget in bytes (marks the curves, focuses the per-layer
    table, enables the recorded-residency check); ``read_mib_s``: measured read bandwidth for
    the I/O estimate; ``train_fraction``: the static profile's train part (the rest is scored);
    ``threads``: the replays' threads (default
    :func:`~bmoe_top.tui.analysis.cachesim.workers`; the same report on any number).
    Raises ValueError for an unknown policy, bad budgets, or a trace without decode lookups.
    """
    if lk.n_decode_lookups == 0:
        raise ValueError("the trace has no decode lookups: nothing to score")
    kinds = {p: P.policy(p).replay for p in policies}  # raises ValueError for an unknown one
    extra = [run_budget] if run_budget is not None else []
    b = C.sweep_budgets(lk) if budgets is None else np.asarray(budgets, dtype=np.float64)
    b = C._check_budgets(np.concatenate([np.asarray(b, dtype=np.float64).reshape(-1),
                                         np.asarray(extra, dtype=np.float64)]))
    dense = np.unique(np.concatenate([C.dense_budgets(lk, dense_points), b]))
    # one round of tasks on every CPU: LRU over the dense axis first (it picks the recommended
    # budget, which the sweep holds); when it is done, every policy at the sweep is queued ahead
    # of what still waits (the per-layer curves, the profile's split, the skew), which keeps the
    # other threads busy meanwhile and fills the end
    box: dict[str, Any] = {}
    sweep: dict[str, Any] = {"b": b}
    per_budget = [p for p in policies if kinds[p] == "per_budget"]
    profiles = any(k == "profile" for k in kinds.values())

    gate = threading.Lock()
    done = [0]

    def profile_tasks() -> list[C.Task]:
        """The profile curves once both the split and the sweep are there (the second to finish
        queues them)."""
        with gate:
            done[0] += 1
            if done[0] < 2 or "split" not in box:
                return []
        train, test = box["split"]
        sb = sweep["b"]
        tasks: list[C.Task] = []
        if "lru_profile" in policies:
            tasks.append(lambda: box.__setitem__("lru_profile", C.lru_profile_curve(train, test, sb)))
        if "static" in policies:
            tasks.append(lambda: box.__setitem__("static", C.static_curve(train, test, sb)))
        return tasks

    def lru_all_then_sweep() -> list[C.Task]:
        box["lru_all"] = lru_all = C.lru_curve(lk, dense)
        box["rec"] = rec = recommend_budget(lru_all)
        if budgets is None:  # the default sweep also holds the recommended budget
            sweep["b"] = np.unique(np.append(sweep["b"], rec))
        box["plan"] = plan = C.plan_policy_curves(lk, per_budget, sweep["b"])
        return [*(profile_tasks() if profiles else []), *plan.tasks]

    def split() -> list[C.Task]:
        try:
            box["split"] = split_decode(lk, train_fraction)
        except ValueError:
            pass  # too few tokens to split: no profile curves
        return profile_tasks()

    layer_plan = C.plan_layer_curves(lk)  # partitioned policies and the allocation
    first: list[C.Task] = [lru_all_then_sweep]
    if profiles:
        first.append(split)  # before the sweep is queued: the dense LRU takes longer
    first += [*layer_plan.tasks, lambda: box.__setitem__("skew", routing_skew(lk)),
              lambda: box.__setitem__("compulsory", C.compulsory_decode_misses(lk))]
    if run_budget is not None and (lk.recorded_hit[lk.decode] >= 0).all():
        first.append(lambda: box.__setitem__("flags", C.lru_hit_flags(lk, [run_budget])[:, 0]))
    C.run_tasks(first, threads)
    lru_all: C.Curve = box["lru_all"]
    rec: int = box["rec"]
    b = sweep["b"]
    lc = layer_plan.finish()
    lru = lru_all.select(b)  # the dense axis holds every sweep budget
    replayed = box["plan"].finish()
    train_tokens = box["split"][0].n_decode_tokens if "split" in box else 0
    curves: list[C.Curve] = []
    for p in policies:
        if kinds[p] == "one_pass":
            curves.append(lru)
        elif kinds[p] == "per_budget":
            curves.append(replayed[p])
        elif kinds[p] == "profile":
            if p in box:
                curves.append(box[p])
        else:
            curves.append(layer_partitioned_curve(lk, b, lc, by_allocation=p == "lru_layer_alloc"))
    by = {c.policy: c for c in curves}
    bel = by.get("belady")
    gap = _floats(bel.decode_hit_pct - lru.decode_hit_pct) if bel is not None else []
    focus = run_budget if run_budget is not None else rec
    jf = lru_all.at(focus)
    rows = layer_table(lru_all, focus)
    alloc = allocate(lc, focus)
    eq = layer_partitioned_curve(lk, [focus], lc)
    dl = lk.n_decode_lookups
    alloc_sum = AllocationSummary(focus / MIB, 100.0 * int(eq.decode_hits[0]) / dl, 100.0 * alloc.decode_hits / dl,
                                  float(lru_all.decode_hit_pct[jf]), [int(x) for x in alloc.slots])
    recorded = None
    if run_budget is not None and "flags" in box:
        flags = box["flags"]
        d = lk.decode
        r = lk.recorded_hit[d]
        f = flags[d]
        recorded = RecordedCheck(run_budget / MIB, 100.0 * float((r > 0).mean()), 100.0 * float(f.mean()),
                                 100.0 * float((r == f).mean()), int((r != f).sum()),
                                 100.0 * float(f.sum()) / lk.n)
    lb = lk.layer_bytes()
    moe = lk.moe_layers()
    comp: int = box["compulsory"]
    report = WhatIf(
        n_layer=lk.n_layer, n_expert=lk.n_expert, top_k=lk.top_k, decode_tokens=lk.n_decode_tokens,
        decode_lookups=dl, prefill_lookups=lk.n - dl, sizes_known=lk.sizes_known,
        layer_mib=_floats(lb / MIB),
        token_cycle_mib=lk.token_cycle_bytes / MIB,
        zero_hit_below_mib=(lk.token_cycle_bytes - (lk.top_k - 1) * int(lb[moe].max())) / MIB if moe.size else 0.0,
        bank_mib=lk.bank_bytes / MIB,
        compulsory_ceiling_pct=100.0 * (dl - comp) / dl,
        run_budget_mib=run_budget / MIB if run_budget is not None else None,
        read_mib_s=read_mib_s,
        curves=[_points(c, read_mib_s) for c in curves],
        lru_all=_points(lru_all, read_mib_s),
        belady_gap_pct=gap,
        recommended_budget_mib=rec / MIB,
        recommend_rule="the smallest budget whose LRU decode hits reach 95% of the whole bank's",
        focus_budget_mib=focus / MIB,
        layers=rows,
        allocation=alloc_sum,
        skew=box["skew"],
        recorded=recorded,
        static_train_tokens=train_tokens,
    )
    return report, Replay(lk, by, lru_all, lc)
