"""The what-if views: the ``bmoe-top whatif --json`` document, the rows of the what-if screen's
tables, and the shapes they are drawn from: :class:`WhatIfInput` (what a set of files holds,
filled by :func:`bmoe_top.tui.jobs.whatif.load_whatif`) and :class:`LiveView` (the live LRU curve
of a streaming run, made by :class:`bmoe_top.tui.jobs.live_whatif.LiveWhatIf`). The numbers are
:mod:`bmoe_top.tui.analysis.whatif`'s; docs/analysis.md explains them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt
import orjson

from bmoe_top.tui.analysis.policies import POLICIES
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.numbers import fmt, show, size
from bmoe_top.tui.present.tables import Column, Row, Table, number_key

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.lookups import Lookups
    from bmoe_top.tui.analysis.speed import Prediction, SizingReport
    from bmoe_top.tui.analysis.whatif import Replay, WhatIf

__all__ = ["WhatIfInput", "RunCosts", "SpeedInputs", "SpeedView", "SpeedDoc", "speed_document", "speed_rows",
           "whatif_document", "policy_table", "layer_table_rows", "skew_rows", "summary_rows",
           "LiveView", "HIT_DEFINITION", "MIB", "WhatIfDocument", "WhatIfReportDoc",
           "WhatIfInputDoc", "ProfileDoc", "WhatIfProfileDocument"]

MIB = 1 << 20
#: what every hit figure of the what-if views counts
HIT_DEFINITION = ("decode hits / decode lookups: bmoe-run's hit % (its BMOE_DONE cache_hit_pct and moe-cache: "
                  "line); prefill lookups change the cache but are not counted. bmoe-cli's moe-cache: line and "
                  "CSV summary also count the prompt as misses: compare them with 'with the prompt'")


@dataclass(frozen=True, slots=True)
class RunCosts:
    """What one decode token of the run cost besides its reads, from its summary (ms per token):
    ``compute_ms``, ``mgmt_ms``, ``stall_ms`` (the flash wait compute did not hide; 0 serial);
    ``overlap`` the run's mode (its header's ``overlap``, else whether it reported a stall);
    ``lanes`` its read lanes (``io_threads``); ``measured_tok_s`` its decode tok/s and
    ``read_mib_per_tok`` its MiB read per token (None: not reported); ``miss_ms`` the compute an
    expert-cache miss adds (0: not known, ``compute_ms`` then holds it at the run's own misses; a
    sweep fits it on its reference arm); ``evict_ms`` the mgmt one evicting miss adds (0: not
    known, ``mgmt_ms`` then holds it at the run's own evictions; a sweep fits it likewise)."""

    compute_ms: float
    mgmt_ms: float
    stall_ms: float
    overlap: bool
    lanes: int
    measured_tok_s: float | None
    read_mib_per_tok: float | None = None
    miss_ms: float = 0.0
    evict_ms: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class WhatIfInput:
    """A routing trace and what the run's other files say about it.

    ``lookups`` the cache's lookups; ``trace`` the file the routing came from and
    ``routing_from`` its kind; ``files`` every file given; ``sizes`` how expert sizes are known
    (``budget_unit`` "MiB", or "expert slots" when they are not: every expert then counts as one
    unit); ``run_budget`` the run's cache budget (bytes, None when not known) and where it came
    from; ``read_mib_s`` the run's measured read bandwidth and where it came from;
    ``run_hit_pct`` the hit % the run reported; ``notes`` what was assumed or could not be read;
    ``run_costs`` what a token of the run cost besides its reads (None: no CSV or log with them).
    """

    lookups: Lookups
    trace: str
    routing_from: str
    files: list[str]
    sizes: str
    budget_unit: str
    run_budget: int | None
    run_budget_from: str
    read_mib_s: float | None
    read_mib_s_from: str
    run_hit_pct: float | None
    run_hit_pct_from: str
    notes: list[str] = field(default_factory=list)
    run_costs: RunCosts | None = None


# ------------------------------------------------------------------------------- documents
#: a float of the report; JSON null where it is NaN (orjson writes NaN as null)
Num = float | None


class PolicyPointsDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.whatif.PolicyPoints` as JSON."""

    policy: str
    label: str
    budgets_mib: list[Num]
    decode_hit_pct: list[Num]
    read_mib_per_token: list[Num]
    io_s_per_token: list[Num]
    note: str


class LayerRowDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.layers.LayerRow` as JSON."""

    layer: int
    lookups: int
    hits: int
    misses: int
    hit_pct: Num
    miss_share_pct: Num


class AllocationDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.whatif.AllocationSummary` as JSON."""

    budget_mib: Num
    equal_hit_pct: Num
    allocated_hit_pct: Num
    global_lru_hit_pct: Num
    slots: list[int]


class SkewDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.skew.Skew` as JSON."""

    unique_experts: int
    unique_per_layer: Num
    top8_share_pct: Num
    entropy_bits: Num
    entropy_max_bits: Num
    reuse_tokens_p50: Num
    reuse_tokens_p90: Num
    never_reused_pct: Num


class RecordedDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.whatif.RecordedCheck` as JSON."""

    budget_mib: Num
    recorded_hit_pct: Num
    replay_hit_pct: Num
    agreement_pct: Num
    differ: int
    replay_hit_pct_with_prompt: Num


class WhatIfReportDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.whatif.WhatIf` as JSON (docs/analysis.md "The what-if
    report")."""

    n_layer: int
    n_expert: int
    top_k: int
    decode_tokens: int
    decode_lookups: int
    prefill_lookups: int
    sizes_known: bool
    layer_mib: list[Num]
    token_cycle_mib: Num
    zero_hit_below_mib: Num
    bank_mib: Num
    compulsory_ceiling_pct: Num
    run_budget_mib: Num
    read_mib_s: Num
    curves: list[PolicyPointsDoc]
    lru_all: PolicyPointsDoc
    belady_gap_pct: list[Num]
    recommended_budget_mib: Num
    recommend_rule: str
    focus_budget_mib: Num
    layers: list[LayerRowDoc]
    allocation: AllocationDoc
    skew: SkewDoc
    recorded: RecordedDoc | None
    static_train_tokens: int


class WhatIfInputDoc(TypedDict):
    """The ``input`` block: :class:`WhatIfInput` as JSON (a budget in MiB; ``None`` for a
    source not known)."""

    trace: str
    routing_from: str
    files: list[str]
    sizes: str
    budget_unit: str
    run_budget_mib: float | None
    run_budget_from: str | None
    read_mib_s: float | None
    read_mib_s_from: str | None
    run_hit_pct: float | None
    run_hit_pct_from: str | None
    notes: list[str]


class ProfileDoc(TypedDict):
    """The ``profile`` block of ``whatif --json --strp OUT``: the file written, experts ranked,
    slots it was made for."""

    path: str
    ranked: int
    slots: int


class WhatIfDocument(WhatIfReportDoc):
    """``bmoe-top whatif --json``: the report under ``input`` and ``hit_definition``, and the
    tok/s model over it (``speed``)."""

    input: WhatIfInputDoc
    hit_definition: str
    speed: SpeedDoc


class WhatIfProfileDocument(WhatIfDocument):
    """``bmoe-top whatif --json --strp OUT``: the document and the profile written."""

    profile: ProfileDoc


def whatif_document(inp: WhatIfInput, report: WhatIf, speed: SpeedView) -> WhatIfDocument:
    """``bmoe-top whatif --json``: the report (docs/analysis.md "The what-if report") under the
    input it was made from and the definition of its hit figures, with the tok/s model over it
    (``speed``: :func:`speed_document`)."""
    body: WhatIfReportDoc = orjson.loads(orjson.dumps(report))
    return {
        "input": {
            "trace": inp.trace, "routing_from": inp.routing_from, "files": inp.files, "sizes": inp.sizes,
            "budget_unit": inp.budget_unit,
            "run_budget_mib": None if inp.run_budget is None else inp.run_budget / MIB,
            "run_budget_from": inp.run_budget_from or None,
            "read_mib_s": inp.read_mib_s, "read_mib_s_from": inp.read_mib_s_from or None,
            "run_hit_pct": inp.run_hit_pct, "run_hit_pct_from": inp.run_hit_pct_from or None,
            "notes": inp.notes,
        },
        "hit_definition": HIT_DEFINITION,
        **body,
        "speed": speed_document(speed),
    }


# ------------------------------------------------------------------------------- screen rows
def _at(values: Sequence[float], budgets: Sequence[float], budget_mib: float) -> float:
    """The value at the largest budget <= ``budget_mib`` (NaN below the first)."""
    j = int(np.searchsorted(np.asarray(budgets), budget_mib + 1e-9, side="right")) - 1
    return float(values[j]) if 0 <= j < len(values) else math.nan


def _pct(v: float) -> str:
    return fmt(v, 2, "%")


def policy_table(report: WhatIf, budget_mib: float, speed: SpeedView | None = None) -> Table:
    """Every policy at the sweep budget ``budget_mib`` (or the largest below it): decode hit %,
    MiB read per token, flash I/O s/token (when the bandwidth is known), predicted tok/s (with
    ``speed``; "absent" when an input is missing), the gap to Belady."""
    unit = "slots" if not report.sizes_known else "MiB"
    by = {c.policy: c for c in report.curves}
    bel = next((by[p.name] for p in POLICIES if p.ceiling and p.name in by), None)
    bel_hit = _at(bel.decode_hit_pct, bel.budgets_mib, budget_mib) if bel else math.nan
    cols = [Column("policy", "policy", False), Column("hit", "decode hit %", short="hit %"),
            Column("read", f"{'slots' if unit == 'slots' else 'MiB'} read/token", short=f"{unit}/token"),
            Column("io", "flash I/O s/token", short="I/O s/tok")]
    tq = q("predict.tok_s")
    if speed is not None:
        cols.append(Column("tok_s", tq.scoped(), short=tq.label))
    cols += [Column("gap", "Belady − policy", short="to Belady"), Column("what", "what it models", False)]
    rows = []
    for pol in POLICIES:
        c = by.get(pol.name)
        if c is None:
            continue
        h = _at(c.decode_hit_pct, c.budgets_mib, budget_mib)
        r = _at(c.read_mib_per_token, c.budgets_mib, budget_mib)
        io = _at(c.io_s_per_token, c.budgets_mib, budget_mib) if c.io_s_per_token else math.nan
        gap = bel_hit - h
        label = c.label + (f" ({c.note})" if c.note else "")
        cells: list[str] = [pol.label, _pct(h), fmt(r, 1), fmt(io, 3)]
        keys: list[float | str] = [pol.label, number_key(h), number_key(r), number_key(io)]
        if speed is not None:
            sr = speed.reports.get(pol.name)
            t = _at([p.tok_s(speed.overlap) for p in sr.points], [p.budget_mib for p in sr.points], budget_mib) \
                if sr is not None else math.nan
            cells.append(show(tq, t) if sr is not None else "absent")
            keys.append(number_key(t))
        rows.append(Row((*cells, fmt(gap, 2, "pt"), label), (*keys, number_key(gap), label),
                        "good" if pol.ceiling else ""))
    where = f"at {fmt(budget_mib, 0)} {unit}; "
    note = where + (f"flash I/O at {fmt(report.read_mib_s, 0)} MiB/s (the run's read bandwidth, serial reads)"
                    if report.read_mib_s else "flash I/O: no read bandwidth known (the run's log, or --read-mib-s)")
    if speed is not None and not speed.reports:
        note += "; tok/s absent: " + "; ".join(speed.inputs.missing)
    return Table("policies", tuple(cols), tuple(rows), note)


def layer_table_rows(replay: Replay, budget_mib: float, allocate_slots: Sequence[int] | None = None) -> Table:
    """Layers at ``budget_mib`` under the global LRU (most misses first): decode lookups, hits,
    misses, hit %, share of all misses, and with ``allocate_slots`` the slots an allocation
    across layers would give each layer."""
    from bmoe_top.tui.analysis.layers import layer_table

    curve = replay.lru_all
    j = int(np.searchsorted(curve.budgets, int(budget_mib * MIB), side="right")) - 1
    rows_ = layer_table(curve, int(curve.budgets[max(0, j)]))
    cols = [Column("layer", "layer"), Column("lookups", "decode lookups"), Column("hits", "hits"),
            Column("misses", "misses"), Column("hit", "hit %"), Column("share", "share of misses")]
    if allocate_slots is not None:
        cols.append(Column("slots", "allocated experts"))
    rows = []
    for r in rows_:
        cells = [str(r.layer), fmt(r.lookups, 0), fmt(r.hits, 0), fmt(r.misses, 0), _pct(r.hit_pct),
                 _pct(r.miss_share_pct)]
        keys: list[float | str] = [float(r.layer), float(r.lookups), float(r.hits), float(r.misses),
                                   number_key(r.hit_pct), number_key(r.miss_share_pct)]
        if allocate_slots is not None:
            s = int(allocate_slots[r.layer]) if r.layer < len(allocate_slots) else 0
            cells.append(str(s))
            keys.append(float(s))
        rows.append(Row(tuple(cells), tuple(keys)))
    return Table("layers", tuple(cols), tuple(rows),
                 f"global LRU at {fmt(float(curve.budgets[max(0, j)]) / MIB, 0)} MiB, most misses first")


def skew_rows(report: WhatIf) -> list[tuple[str, str]]:
    """The routing-skew panel: (label, value)."""
    s = report.skew
    return [
        ("unique experts routed", f"{fmt(s.unique_experts, 0)} of {fmt(report.n_layer * report.n_expert, 0)}"),
        ("per MoE layer (mean)", f"{fmt(s.unique_per_layer, 1)} of {report.n_expert}"),
        ("top-8 share", _pct(s.top8_share_pct)),
        ("entropy", f"{fmt(s.entropy_bits, 2)} of {fmt(s.entropy_max_bits, 2)} bits"),
        ("reuse distance p50", f"{fmt(s.reuse_tokens_p50, 0)} tokens"),
        ("reuse distance p90", f"{fmt(s.reuse_tokens_p90, 0)} tokens"),
        ("never reused", _pct(s.never_reused_pct)),
    ]


def summary_rows(inp: WhatIfInput, report: WhatIf, budget_mib: float) -> list[tuple[str, str, str]]:
    """The what-if panel: (label, value, kind), the cursor's budget first."""
    unit = inp.budget_unit if inp.budget_unit != "MiB" else "MiB"
    by = {c.policy: c for c in report.curves}
    lru, bel = by.get("lru"), by.get("belady")
    rows: list[tuple[str, str, str]] = [("trace", Path(inp.trace).name, "name"),
                                        ("routing", f"{inp.routing_from}, {report.decode_tokens:,} decode tokens", ""),
                                        ("layers x experts", f"{report.n_layer} x {report.n_expert}, "
                                                             f"top-{report.top_k}", ""),
                                        ("expert sizes", inp.sizes, "" if inp.lookups.sizes_known else "missing")]
    rows.append(("at the cursor", f"{fmt(budget_mib, 0)} {unit}", "section"))
    if lru is not None:
        rows.append(("LRU decode hit", _pct(_at(lru.decode_hit_pct, lru.budgets_mib, budget_mib)), ""))
        rows.append(("read per token", f"{fmt(_at(lru.read_mib_per_token, lru.budgets_mib, budget_mib), 1)} {unit}",
                     ""))
        if lru.io_s_per_token:
            rows.append(("flash I/O (est.)", f"{fmt(_at(lru.io_s_per_token, lru.budgets_mib, budget_mib), 3)} s/token",
                         "derived"))
    if bel is not None and lru is not None:
        gap = _at(bel.decode_hit_pct, bel.budgets_mib, budget_mib) - _at(lru.decode_hit_pct, lru.budgets_mib,
                                                                          budget_mib)
        rows.append(("Belady − LRU", f"{fmt(gap, 2)} pt: the most a policy could buy", "derived"))
    rows.append(("the run", "", "section"))
    if inp.run_budget is not None:
        rows.append(("budget", f"{fmt(inp.run_budget / MIB, 0)} MiB ({inp.run_budget_from})", ""))
    else:
        rows.append(("budget", "not known", "missing"))
    if inp.run_hit_pct is not None:
        rows.append(("reported hit", f"{_pct(inp.run_hit_pct)} ({inp.run_hit_pct_from})", ""))
    rec = report.recorded
    if rec is not None:
        rows.append(("replay at budget", f"{_pct(rec.replay_hit_pct)} over decode lookups", "derived"))
        rows.append(("recorded residency", f"{_pct(rec.recorded_hit_pct)}; {rec.differ:,} lookups differ",
                     "good" if rec.agreement_pct > 99.9 else "bad"))
        rows.append(("with the prompt", f"{_pct(rec.replay_hit_pct_with_prompt)} (prompt counted as misses)",
                     "derived"))
    if inp.read_mib_s is not None:
        rows.append(("read bandwidth", f"{fmt(inp.read_mib_s, 0)} MiB/s ({inp.read_mib_s_from})", ""))
    rows.append(("bounds", "", "section"))
    rows.append(("T (token cycle)", f"{fmt(report.token_cycle_mib, 1)} {unit}", ""))
    rows.append(("LRU hits 0 below", f"{fmt(report.zero_hit_below_mib, 1)} {unit}: cache off is better", "bad"))
    rows.append(("whole bank", f"{fmt(report.bank_mib, 0)} {unit}", ""))
    rows.append(("compulsory ceiling", f"{_pct(report.compulsory_ceiling_pct)} (first lookups always miss)", ""))
    rows.append(("recommended", f"{fmt(report.recommended_budget_mib, 0)} {unit}", "good"))
    rows.append(("", report.recommend_rule, "missing"))
    return rows


# ---------------------------------------------------------------------------- predicted speed
@dataclass(frozen=True, slots=True)
class SpeedInputs:
    """Every input of the tok/s model (docs/analysis.md "Predicted speed") and where it came from
    (``*_from``, one phrase). ``costs`` the run's (None: not known); ``lookups`` per decode token
    and ``miss_bytes`` bytes a miss reads (the trace's); ``read_mb_s`` the read bandwidth, all
    lanes together (10^6 bytes/s; None: not known); ``ram``, ``dense``, ``runtime``,
    ``readahead`` bytes (``ram`` / ``dense`` None: not known, one level only); ``missing``: each
    input that is absent, with the flag that gives it; ``mmap_read_per_token`` the bytes a decode
    token of plain mmap reads as the page cache's replay found them (None: the readahead rule
    predicts plain mmap) and ``mmap_from`` which of the two and why; ``mmap_read_mb_s`` the rate
    plain mmap's faults read at (10^6 bytes/s; None: the read bandwidth) and
    ``mmap_read_mb_s_from`` where it came from."""

    costs: RunCosts | None
    costs_from: str
    lookups: float
    miss_bytes: float
    read_mb_s: float | None
    read_mb_s_from: str
    ram: float | None
    ram_from: str
    dense: float | None
    dense_from: str
    runtime: float
    runtime_from: str
    readahead: float
    readahead_from: str
    missing: tuple[str, ...] = ()
    mmap_read_per_token: float | None = None
    mmap_from: str = ""
    mmap_read_mb_s: float | None = None
    mmap_read_mb_s_from: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class SpeedView:
    """The tok/s model over the what-if's curves: ``inputs``; ``reports`` per policy name its
    :class:`~bmoe_top.tui.analysis.speed.SizingReport` at the curve's budgets (empty when an
    input is missing); ``levels`` 2 with a RAM and the dense weights (the page cache behind the
    expert cache, plain mmap beside it), else 1; ``at_run`` the one-level LRU prediction at the
    run's budget, beside ``inputs.costs.measured_tok_s`` (None without a run budget);
    ``tolerance`` the share past which it is flagged."""

    inputs: SpeedInputs
    reports: dict[str, SizingReport]
    levels: int
    at_run: Prediction | None
    tolerance: float

    @property
    def overlap(self) -> bool:
        return bool(self.inputs.costs and self.inputs.costs.overlap)

    def run_error(self) -> float | None:
        """(predicted - measured) / measured at the run's budget (None: either is absent)."""
        c = self.inputs.costs
        if self.at_run is None or c is None or not c.measured_tok_s:
            return None
        return (self.at_run.tok_s(c.overlap) - c.measured_tok_s) / c.measured_tok_s


class SpeedPolicyDoc(TypedDict):
    """One policy's predictions (``speed.policies``)."""

    policy: str
    budgets_mib: list[Num]
    hit_pct: list[Num]
    flash_ms: list[Num]
    serial_tok_s: list[Num]
    overlap_tok_s: list[Num]
    tok_s: list[Num]
    fits: list[bool]
    cache_to_demand: list[Num]
    best_mib: Num
    larger_is_slower: bool
    knee_mib: Num
    knee_share: Num
    break_even_mib: Num


class SpeedPointDoc(TypedDict):
    """One prediction: plain mmap (``speed.mmap``) or the run's budget (``speed.run_check``)."""

    budget_mib: Num
    hit_pct: Num
    compute_ms: Num
    flash_ms: Num
    mgmt_ms: Num
    stall_ms: Num
    tok_s: Num
    fits: bool


class RunCheckDoc(SpeedPointDoc):
    """``speed.run_check``: the prediction at the run's budget beside what the run measured."""

    measured_tok_s: Num
    error_pct: Num
    flagged: bool | None


class SpeedInputsDoc(TypedDict):
    """``speed.inputs``: :class:`SpeedInputs` as JSON (ms per token, bytes, 10^6 bytes/s)."""

    compute_ms: Num
    mgmt_ms: Num
    stall_ms: Num
    overlap: bool | None
    lanes: int | None
    costs_from: str
    lookups: Num
    miss_bytes: Num
    read_mb_s: Num
    read_mb_s_from: str
    ram_bytes: Num
    ram_from: str
    dense_bytes: Num
    dense_from: str
    runtime_bytes: Num
    runtime_from: str
    readahead_bytes: Num
    readahead_from: str
    missing: list[str]
    mmap_read_per_token: Num
    mmap_from: str
    mmap_read_mb_s: Num
    mmap_read_mb_s_from: str


class SpeedDoc(TypedDict):
    """The ``speed`` block of ``bmoe-top whatif --json`` (docs/analysis.md "Predicted speed")."""

    inputs: SpeedInputsDoc
    levels: int
    mode: str
    formula: str
    policies: list[SpeedPolicyDoc]
    mmap: SpeedPointDoc | None
    run_check: RunCheckDoc | None


#: the formula the ``speed`` block and the screen state
SPEED_FORMULA = ("flash_ms = lookups x (1 - hit) x miss_bytes / read_mb_s / 1000; serial = compute + flash + mgmt; "
                 "overlap = max(compute, flash) + mgmt + stall; tok/s = 1000 / ms; two levels: hit = h(max(B, "
                 "ram - dense - runtime - B))")


def _num(v: float | None) -> Num:
    return None if v is None or not math.isfinite(v) else float(v)


def _point(p: Prediction, overlap: bool) -> SpeedPointDoc:
    return {"budget_mib": p.budget_mib, "hit_pct": 100.0 * p.hit, "compute_ms": p.compute_ms,
            "flash_ms": p.flash_ms, "mgmt_ms": p.mgmt_ms, "stall_ms": p.stall_ms, "tok_s": _num(p.tok_s(overlap)),
            "fits": p.fits}


def speed_document(view: SpeedView) -> SpeedDoc:
    """The ``speed`` block: every input and its source, each policy's predicted tok/s per budget
    with the best budget, knee and break-even, plain mmap, and the check at the run's budget."""
    i, c, ov = view.inputs, view.inputs.costs, view.overlap
    pols: list[SpeedPolicyDoc] = []
    for name, r in view.reports.items():
        pols.append({
            "policy": name, "budgets_mib": [p.budget_mib for p in r.points],
            "hit_pct": [100.0 * p.hit for p in r.points], "flash_ms": [p.flash_ms for p in r.points],
            "serial_tok_s": [_num(p.serial_tok_s) for p in r.points],
            "overlap_tok_s": [_num(p.overlap_tok_s) for p in r.points],
            "tok_s": [_num(p.tok_s(ov)) for p in r.points], "fits": [p.fits for p in r.points],
            "cache_to_demand": [_num(x) for x in r.cache_to_demand], "best_mib": r.best_mib,
            "larger_is_slower": r.larger_is_slower, "knee_mib": r.knee_mib, "knee_share": r.knee_share,
            "break_even_mib": r.break_even_mib})
    first = next(iter(view.reports.values()), None)
    check: RunCheckDoc | None = None
    if view.at_run is not None and c is not None:
        err = view.run_error()
        check = {**_point(view.at_run, ov), "measured_tok_s": c.measured_tok_s,
                 "error_pct": None if err is None else 100.0 * err,
                 "flagged": None if err is None else abs(err) > view.tolerance}
    return {
        "inputs": {
            "compute_ms": c.compute_ms if c else None, "mgmt_ms": c.mgmt_ms if c else None,
            "stall_ms": c.stall_ms if c else None, "overlap": c.overlap if c else None,
            "lanes": c.lanes if c else None, "costs_from": i.costs_from, "lookups": i.lookups,
            "miss_bytes": i.miss_bytes, "read_mb_s": i.read_mb_s, "read_mb_s_from": i.read_mb_s_from,
            "ram_bytes": i.ram, "ram_from": i.ram_from, "dense_bytes": i.dense, "dense_from": i.dense_from,
            "runtime_bytes": i.runtime, "runtime_from": i.runtime_from, "readahead_bytes": i.readahead,
            "readahead_from": i.readahead_from, "missing": list(i.missing),
            "mmap_read_per_token": i.mmap_read_per_token, "mmap_from": i.mmap_from,
            "mmap_read_mb_s": i.mmap_read_mb_s, "mmap_read_mb_s_from": i.mmap_read_mb_s_from},
        "levels": view.levels if view.reports else 0,
        "mode": "overlap" if ov else "serial",
        "formula": SPEED_FORMULA,
        "policies": pols,
        "mmap": _point(first.mmap, ov) if first is not None and first.mmap is not None else None,
        "run_check": check,
    }


def speed_rows(view: SpeedView, policy: str, budget_mib: float) -> list[tuple[str, str, str]]:
    """The what-if panel's "predicted speed" rows at the cursor's ``budget_mib`` for ``policy``:
    (label, value, kind); an absent input is shown with the flag that gives it."""
    i = view.inputs
    rows: list[tuple[str, str, str]] = [("predicted speed", "", "section")]
    rows.append(("read bandwidth", f"{fmt(i.read_mb_s, 0)} MB/s ({i.read_mb_s_from})" if i.read_mb_s is not None
                 else "absent (--bandwidth MB/s, or bmoe-top probe MODEL --remember)",
                 "" if i.read_mb_s is not None else "missing"))
    rows.append(("RAM", f"{size(i.ram)} ({i.ram_from})" if i.ram is not None else "absent (--ram SIZE)",
                 "" if i.ram is not None else "missing"))
    if not view.reports:
        return rows + [("tok/s", "absent: " + "; ".join(i.missing), "missing")]
    r = view.reports.get(policy) or next(iter(view.reports.values()))
    ov = view.overlap
    p = min(r.points, key=lambda x: abs(x.budget_mib - budget_mib))
    tq = q("predict.tok_s")
    rows.append((tq.screen_label(), f"{show(tq, p.tok_s(ov))} ({'overlap' if ov else 'serial'}; "
                                    f"{show(q('predict.flash_ms'), p.flash_ms)} flash)", "derived"))
    if view.levels == 2:
        rows.append((q("predict.hit_pct").label, show(q("predict.hit_pct"), 100.0 * p.hit), "derived"))
        if r.mmap is not None:
            rows.append((q("predict.mmap_tok_s").label, show(q("predict.mmap_tok_s"), r.mmap.tok_s(ov)), ""))
        be = r.break_even_mib
        rows.append((q("predict.break_even_mib").label,
                     show(q("predict.break_even_mib"), be) if be is not None else "none: mmap is as fast or faster",
                     "good" if be is not None else "bad"))
    rows.append((q("predict.best_mib").label, show(q("predict.best_mib"), r.best_mib)
                 + ("; larger budgets are slower" if r.larger_is_slower else ""), "good"))
    rows.append((q("predict.knee_mib").label, show(q("predict.knee_mib"), r.knee_mib) if r.knee_mib is not None
                 else f"none (every GiB buys {fmt(100 * r.knee_share, 0)} % or more)", ""))
    err = view.run_error()
    if view.at_run is not None and err is not None and view.inputs.costs is not None:
        rows.append(("at the run's budget", f"{show(tq, view.at_run.tok_s(ov))} predicted, "
                                            f"{show(tq, view.inputs.costs.measured_tok_s)} measured "
                                            f"({fmt(100 * err, 1, '%')})",
                     "bad" if abs(err) > view.tolerance else "good"))
    return rows


# ------------------------------------------------------------------------------------ live
@dataclass(frozen=True, slots=True)
class LiveView:
    """The live LRU curve now: ``budgets`` in ``unit`` ("MiB", or "expert slots" when sizes are
    not known), ``decode_hit_pct`` and ``read_per_token`` (in ``unit`` per decode token) per
    budget; ``tokens`` decode tokens replayed, ``lookups`` decode lookups; marks in ``unit``:
    ``run_budget`` (None when not known), ``token_cycle`` (T), ``bank``; ``replay_at_budget`` the
    replay's hit % at the run's budget and ``runtime_hit_pct`` what the runtime reports;
    ``sizes`` how sizes are known; ``skipped_rows`` routing rows the model dropped before they
    were replayed; ``problems`` tokens that could not be replayed. The curve covers the whole
    session (the cache carries over between turns); ``turn_hit_pct`` / ``turn_at_budget`` the
    newest turn's decode tokens only, as the runtime's BMOE_DONE ``cache_hit_pct`` counts them
    (None before a turn began with a prompt)."""

    unit: str
    budgets: npt.NDArray[np.float64]
    decode_hit_pct: npt.NDArray[np.float64]
    read_per_token: npt.NDArray[np.float64]
    tokens: int
    lookups: int
    run_budget: float | None
    token_cycle: float
    bank: float
    replay_at_budget: float | None
    runtime_hit_pct: float | None
    sizes: str
    skipped_rows: int
    problems: int
    turn_hit_pct: npt.NDArray[np.float64] | None = None
    turn_at_budget: float | None = None
    turn_tokens: int = 0

    def hit_at(self, budget: float) -> float:
        """Decode hit % at the largest replayed budget <= ``budget`` (NaN below the first)."""
        return _at(list(self.decode_hit_pct), list(self.budgets), budget)
