"""The what-if views: which routing a set of files holds, the ``bmoe-top whatif --json``
document, the rows of the what-if screen's tables, and the live LRU curve of a streaming run.

Inputs (``bmoe-top whatif FILE...``): one routing source, a route-trace CSV (``--route-trace``),
a binary routing trace (moe-cache-reference.md "Routing trace format") or the BMOE_ROUTE lines of
a recording or transcript (``--route-telemetry``), plus any files of the same run (its CSV sink,
log, sidecar) for the run's budget, read bandwidth and hit %. The numbers are
:mod:`bmoe_top.tui.analysis.whatif`'s; docs/analysis.md explains them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson

from bmoe_top.parsers.limits import MAX_TOP_K
from bmoe_top.parsers.routing_bin import looks_like_routing_bin
from bmoe_top.parsers.sniff import sniff
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.tables import Column, Row, Table, number_key
from bmoe_top.tui.sources.files import ReplayError, read_path

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.cachesim import Curve
    from bmoe_top.tui.analysis.live import LiveLru
    from bmoe_top.tui.analysis.lookups import Lookups
    from bmoe_top.tui.analysis.whatif import Replay, WhatIf

__all__ = ["WhatIfError", "WhatIfInput", "load_whatif", "analyse_input", "whatif_document", "gguf_layer_bytes",
           "policy_table", "layer_table_rows", "skew_rows", "summary_rows", "write_profile", "LiveWhatIf",
           "LiveView", "HIT_DEFINITION", "POLICY_ORDER", "POLICY_SHORT", "profile_slots", "MIB"]

MIB = 1 << 20
#: what every hit figure of the what-if views counts
HIT_DEFINITION = ("decode hits / decode lookups: bmoe-run's hit % (its BMOE_DONE cache_hit_pct and moe-cache: "
                  "line); prefill lookups change the cache but are not counted. bmoe-cli's moe-cache: line and "
                  "CSV summary also count the prompt as misses: compare them with 'with the prompt'")
#: the order policies are listed and drawn in (the ceiling last)
POLICY_ORDER = ("lru", "lfu", "fifo", "sieve", "static", "lru_profile", "lru_layer_equal", "lru_layer_alloc",
                "belady")
#: short names for the tables and the chart legend
POLICY_SHORT = {
    "lru": "LRU", "lfu": "LFU", "fifo": "FIFO", "sieve": "SIEVE", "static": "static profile",
    "lru_profile": "LRU + profile", "lru_layer_equal": "LRU per layer (even)",
    "lru_layer_alloc": "LRU per layer (allocated)", "belady": "Belady (ceiling)",
}


class WhatIfError(ValueError):
    """Files a what-if cannot be made from; ``str()`` is one sentence for the user."""


@dataclass(frozen=True, slots=True, eq=False)
class WhatIfInput:
    """A routing trace and what the run's other files say about it.

    ``lookups`` the cache's lookups; ``trace`` the file the routing came from and
    ``routing_from`` its kind; ``files`` every file given; ``sizes`` how expert sizes are known
    (``budget_unit`` "MiB", or "expert slots" when they are not: every expert then counts as one
    unit); ``run_budget`` the run's cache budget (bytes, None when not known) and where it came
    from; ``read_mib_s`` the run's measured read bandwidth and where it came from;
    ``run_hit_pct`` the hit % the run reported; ``notes`` what was assumed or could not be read.
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


def gguf_layer_bytes(path: str) -> list[int]:
    """One expert's bytes per layer of a GGUF model (0 for a layer without experts), read with
    the layout reader the runtime streams by (parsers/gguf_layout.py). Raises WhatIfError when
    the file is not a MoE GGUF."""
    from bmoe_top.parsers.gguf_layout import ModelError, read_layout

    try:
        lay = read_layout(path)
    except (ModelError, OSError, ValueError) as e:
        raise WhatIfError(f"{path}: cannot read the expert sizes ({e})") from None
    return [int(b) for b in lay.expert_bytes]


def _resident_estimate(run: RunModel) -> float | None:
    """MiB per expert from the newest BMOE_RESIDENT: resident MiB / resident experts."""
    res = run.resident
    mib = run.resident_mib
    if res is None or mib is None or not math.isfinite(mib) or mib <= 0:
        return None
    n = int(np.count_nonzero(res))
    return mib / n if n else None


def _summary_number(run: RunModel, *keys: str) -> tuple[float | None, str]:
    for k in keys:
        v = run.summary.get(k)
        if v is not None and math.isfinite(float(v)):
            return float(v), f"run summary {k}"
    return None, ""


def _meta_int(run: RunModel, key: str) -> int | None:
    """A positive integer of the run header (BMOE_READY extras, CSV header), or None."""
    v = run.meta.get(key)
    try:
        n = int(str(v)) if v is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


def _run_budget(run: RunModel) -> tuple[float | None, str]:
    v, where = _summary_number(run, "budget_mib")
    if v is not None:
        return v, where
    if run.budget_mib is not None and math.isfinite(run.budget_mib):
        return float(run.budget_mib), "BMOE_RESIDENT budget_mib"
    ready = run.ready or {}
    rb = ready.get("cache_budget_mib")
    if isinstance(rb, (int, float)) and not isinstance(rb, bool) and math.isfinite(rb):
        return float(rb), "BMOE_READY cache_budget_mib"
    mb = run.meta.get("cache_mb")
    try:
        f = float(mb) if mb is not None else math.nan
    except ValueError:
        f = math.nan
    if math.isfinite(f):
        return f, "run header cache_mb"
    return None, ""


def _lookups_from_run(run: RunModel, layer_bytes: Sequence[int] | None, notes: list[str]) -> tuple[Lookups, str]:
    from bmoe_top.tui.analysis.lookups import from_route_rows

    with run.lock:
        ro = run.routes
        if ro.n == 0:
            raise WhatIfError("no routing in these files: give a route trace (bmoe-run --route-trace), a binary "
                              "routing trace, or a recording/transcript with BMOE_ROUTE lines (--route-telemetry)")
        tok, lay, ex, hit = (np.array(a) for a in (ro.tok, ro.layer, ro.expert, ro.hit))
        n_layer = max(run.n_layer or 0, int(lay.max()) + 1)
        n_expert = max(run.n_expert or 0, int(ex.max()) + 1)
        top_k = run.top_k or 1
        est = _resident_estimate(run)
    if layer_bytes is not None:
        lb = np.zeros(n_layer, dtype=np.int64)
        given = np.asarray(layer_bytes, dtype=np.int64)[:n_layer]
        lb[: given.shape[0]] = given
        sizes, known = "from the model file (GGUF)", True
    elif est is not None:
        lb = np.full(n_layer, int(round(est * MIB)), dtype=np.int64)
        sizes, known = (f"estimated: {fmt(est, 3)} MiB per expert (BMOE_RESIDENT resident MiB / resident experts), "
                        "the same for every layer"), True
        notes.append("expert sizes estimated from BMOE_RESIDENT; give --model GGUF for exact ones")
    else:
        lb = np.full(n_layer, MIB, dtype=np.int64)
        sizes, known = "not known: budgets are expert slots (give --model GGUF)", False
    lk = from_route_rows(tok, lay, ex, hit, n_layer, n_expert, lb, top_k, sizes_known=known)
    return lk, sizes


def load_whatif(paths: Sequence[str], *, n_expert: int | None = None, prefill_batch: int | None = None,
                layer_bytes: Sequence[int] | None = None, run_budget_mib: float | None = None,
                read_mib_s: float | None = None) -> WhatIfInput:
    """Read ``paths``: one routing source and the run's other files (see the module docstring).

    ``n_expert``: experts per layer of a binary routing trace (default: the largest id + 1);
    ``prefill_batch``: the run's prefill ubatch (``bmoe-run -b``; default: the prompt was one
    batch); ``layer_bytes``: one expert's bytes per layer (``--model``: the GGUF's, for a binary
    trace or BMOE_ROUTE lines, which carry no sizes); ``run_budget_mib`` / ``read_mib_s``
    override what the files say. Raises WhatIfError (one sentence) for unreadable files, no or
    several routing sources, or routing without decode tokens."""
    from bmoe_top.tui.analysis.lookups import Lookups, from_bytes
    from bmoe_top.tui.feed.files import open_paths

    if not paths:
        raise WhatIfError("no files given")
    try:
        datas = [(str(p), read_path(p)) for p in paths]
    except ReplayError as e:
        raise WhatIfError(str(e)) from None
    traces = [(p, d) for p, d in datas if sniff(d, p) == "route_trace"
              or (sniff(d, p) in ("unknown", "transcript") and looks_like_routing_bin(d))]
    if len(traces) > 1:
        raise WhatIfError(f"one routing trace at a time ({traces[0][0]} and {traces[1][0]}): run whatif once per trace")
    others = [p for p, _ in datas if all(p != t for t, _ in traces)]
    try:
        run = open_paths(others) if others else RunModel()
    except ReplayError as e:
        raise WhatIfError(str(e)) from None
    notes: list[str] = []
    lk: Lookups
    if traces:
        name, data = traces[0]
        kind = sniff(data, name)
        try:
            lk, more = from_bytes(data, name, n_expert=n_expert,
                                  layer_bytes=None if layer_bytes is None else list(layer_bytes),
                                  prefill_batch=prefill_batch)
        except ValueError as e:
            raise WhatIfError(f"{name}: {e}") from None
        notes += [f"{name}: {m}" for m in more if "budgets are expert slots" not in m]
        routing_from = "route trace CSV" if kind == "route_trace" else "binary routing trace"
        if lk.sizes_known:
            sizes = ("the trace's expert_bytes" if kind == "route_trace" else "from the model file (GGUF)")
        else:
            sizes = "not known: budgets are expert slots" + ("" if kind == "route_trace" else " (give --model GGUF)")
    else:
        name = next((p for p in others if run.routes.n), others[0])
        lk, sizes = _lookups_from_run(run, layer_bytes, notes)
        routing_from = "BMOE_ROUTE lines"
        if prefill_batch is not None:
            notes.append("BMOE_ROUTE gives a prompt's routing as one union: --prefill-batch is not applied")
    if not lk.sizes_known:
        # one unit per expert: the report's MiB figures are then expert slots
        lk = Lookups(lk.item, lk.batch, lk.decode, lk.token, lk.recorded_hit, np.full_like(lk.item_bytes, MIB),
                     lk.n_layer, lk.n_expert, lk.top_k, lk.n_decode_tokens, False)
    if lk.n_decode_lookups == 0:
        raise WhatIfError(f"{name}: the routing has no decode tokens: nothing to score")
    unit = "MiB" if lk.sizes_known else "expert slots"
    budget_mib, budget_from = (run_budget_mib, "--run-budget") if run_budget_mib is not None else _run_budget(run)
    run_budget: int | None = None
    if budget_mib is not None and budget_mib <= 0:
        notes.append(f"the run had no cache (budget {fmt(budget_mib)} MiB, from {budget_from})")
    elif budget_mib is not None and not lk.sizes_known and run_budget_mib is None:
        notes.append(f"the run's budget ({fmt(budget_mib)} MiB) cannot be placed on an axis of expert slots")
    elif budget_mib is not None:
        run_budget = int(budget_mib * MIB)
    bw, bw_from = (read_mib_s, "--read-mib-s") if read_mib_s is not None else _summary_number(run, "read_mib_s")
    if bw is not None and not bw > 0:
        bw, bw_from = None, ""
    if not lk.sizes_known:
        bw, bw_from = None, ""
    hit, hit_from = _summary_number(run, "cache_hit_pct")
    if hit is not None and hit < 0:
        hit, hit_from = None, ""
    if run_budget is None and budget_mib is None:
        notes.append("no run budget: give the run's CSV or log beside the trace, or --run-budget MiB")
    return WhatIfInput(lk, name, routing_from, [p for p, _ in datas], sizes, unit, run_budget, budget_from, bw,
                       bw_from, hit, hit_from, notes)


def analyse_input(inp: WhatIfInput, budgets_mib: Sequence[float] | None = None) -> tuple[WhatIf, Replay]:
    """The what-if report of ``inp`` at ``budgets_mib`` (in the input's ``budget_unit``; default
    the sweep from T to the whole bank). Raises WhatIfError for bad budgets."""
    from bmoe_top.tui.analysis.whatif import analyse

    b = None if budgets_mib is None else np.asarray(budgets_mib, dtype=np.float64) * MIB
    try:
        return analyse(inp.lookups, b, run_budget=inp.run_budget, read_mib_s=inp.read_mib_s)
    except ValueError as e:
        raise WhatIfError(str(e)) from None


def whatif_document(inp: WhatIfInput, report: WhatIf) -> dict[str, Any]:
    """``bmoe-top whatif --json``: the report (docs/analysis.md "The what-if report") under the
    input it was made from and the definition of its hit figures."""
    doc: dict[str, Any] = {
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
    }
    doc.update(orjson.loads(orjson.dumps(report)))
    return doc


def profile_slots(inp: WhatIfInput, report: WhatIf) -> int:
    """Experts a profile is made for: what the run's budget (else the recommended one) holds of
    the largest experts."""
    budget = inp.run_budget if inp.run_budget is not None else int(report.recommended_budget_mib * MIB)
    big = int(inp.lookups.layer_bytes()[inp.lookups.moe_layers()].max())
    return int(budget // big) if big else 0


def write_profile(inp: WhatIfInput, report: WhatIf, path: str, force: bool = False) -> tuple[int, int]:
    """Write an STRP profile of ``inp``'s routing (experts ranked by lookups, hottest first) to
    ``path`` through bmoe_top.outfile (a symbolic link is refused; an existing file only with
    ``force``). Returns (ranked experts, slots). Raises ``OutputFileError`` (an OSError)."""
    from bmoe_top.parsers.strp import write_strp
    from bmoe_top.tui.analysis.cachesim import strp_from_lookups

    slots = profile_slots(inp, report)
    prof = strp_from_lookups(inp.lookups, slots)
    write_strp(path, prof, force=force)
    return prof.n_ranked, slots


# ------------------------------------------------------------------------------- screen rows
def _at(values: Sequence[float], budgets: Sequence[float], budget_mib: float) -> float:
    """The value at the largest budget <= ``budget_mib`` (NaN below the first)."""
    j = int(np.searchsorted(np.asarray(budgets), budget_mib + 1e-9, side="right")) - 1
    return float(values[j]) if 0 <= j < len(values) else math.nan


def _pct(v: float) -> str:
    return fmt(v, 2, "%")


def policy_table(report: WhatIf, budget_mib: float) -> Table:
    """Every policy at the sweep budget ``budget_mib`` (or the largest below it): decode hit %,
    MiB read per token, flash I/O s/token (when the bandwidth is known), the gap to Belady."""
    unit = "slots" if not report.sizes_known else "MiB"
    by = {c.policy: c for c in report.curves}
    bel = by.get("belady")
    bel_hit = _at(bel.decode_hit_pct, bel.budgets_mib, budget_mib) if bel else math.nan
    cols = [Column("policy", "policy", False), Column("hit", "decode hit %", short="hit %"),
            Column("read", f"{'slots' if unit == 'slots' else 'MiB'} read/token", short=f"{unit}/token"),
            Column("io", "flash I/O s/token", short="I/O s/tok"), Column("gap", "Belady − policy", short="to Belady"),
            Column("what", "what it models", False)]
    rows = []
    for p in POLICY_ORDER:
        c = by.get(p)
        if c is None:
            continue
        h = _at(c.decode_hit_pct, c.budgets_mib, budget_mib)
        r = _at(c.read_mib_per_token, c.budgets_mib, budget_mib)
        io = _at(c.io_s_per_token, c.budgets_mib, budget_mib) if c.io_s_per_token else math.nan
        gap = bel_hit - h
        label = c.label + (f" ({c.note})" if c.note else "")
        rows.append(Row((POLICY_SHORT.get(p, p), _pct(h), fmt(r, 1), fmt(io, 3), fmt(gap, 2, "pt"), label),
                        (POLICY_SHORT.get(p, p), number_key(h), number_key(r), number_key(io), number_key(gap), label),
                        "good" if p == "belady" else ""))
    where = f"at {fmt(budget_mib, 0)} {unit}; "
    note = where + (f"flash I/O at {fmt(report.read_mib_s, 0)} MiB/s (the run's read bandwidth, serial reads)"
                    if report.read_mib_s else "flash I/O: no read bandwidth known (the run's log, or --read-mib-s)")
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


SizeResolver = Callable[[RunModel], "Sequence[int] | None"]


def model_file_sizes(run: RunModel) -> Sequence[int] | None:
    """Exact expert sizes of a live run from its model file (BMOE_READY ``model``), when that
    file is readable here; None otherwise."""
    path = run.meta.get("model") or (run.ready or {}).get("model")
    if not isinstance(path, str) or not path:
        return None
    try:
        return gguf_layer_bytes(path)
    except WhatIfError:
        return None


#: Cells of the routing grid :meth:`LiveWhatIf.update` builds at once (int64: 16 MiB), so a long
#: backlog or a hostile width never sizes one allocation.
GRID_CELLS = 1 << 21


class LiveWhatIf:
    """The LRU curve over every budget of a run whose routing streams in (BMOE_ROUTE), fed from
    the routing the run model holds: each :meth:`update` replays the routing rows added since the
    last one (:class:`bmoe_top.tui.analysis.live.LiveLru`, one compiled call per run of decode tokens), so a view
    can show what a bigger or smaller cache would give right now.

    ``sizes``: one expert's bytes per layer for a run (default: the model file named by
    BMOE_READY, :func:`model_file_sizes`); without them the replay counts expert slots, and MiB
    are shown as slots x (BMOE_RESIDENT resident MiB / resident experts). Not thread-safe: call
    :meth:`update` and :meth:`view` from one thread (a worker; the run model is read under its
    lock). Importing the analysis core (numba) happens on the first update, not at construction.
    """

    def __init__(self, run: RunModel, sizes: SizeResolver | None = model_file_sizes, max_tokens: int = 4096) -> None:
        self.run = run
        self._sizes = sizes
        self.max_tokens = max_tokens
        self._row = 0  # routing rows (global count) already replayed
        self._lru: LiveLru | None = None
        self._bytes = False  # True: the replay is in bytes (sizes known); False: in expert slots
        self._top_k = 1
        self.skipped_rows = 0
        self.problems = 0
        self.last_error = ""
        self.version = 0  # bumps when the curve changed
        # decode hits per budget, lookups and tokens when the newest turn's prompt arrived
        self._turn_base: tuple[npt.NDArray[np.int64], int, int] | None = None

    def _start(self, n_layer: int, n_expert: int, moe: npt.NDArray[np.bool_]) -> None:
        from bmoe_top.tui.analysis.live import LiveLru

        lb: npt.NDArray[np.int64] | None = None
        if self._sizes is not None:
            got = self._sizes(self.run)
            if got is not None and len(got) >= n_layer:
                lb = np.asarray(list(got)[:n_layer], dtype=np.int64)
        self._bytes = lb is not None
        if lb is None:
            lb = moe.astype(np.int64)
        extra = []
        with self.run.lock:
            budget_mib = _run_budget(self.run)[0]
        if budget_mib is not None and budget_mib > 0 and self._bytes:
            extra.append(int(budget_mib * MIB))  # the run's own budget is replayed exactly
        self._lru = LiveLru(n_layer, n_expert, lb, extra=extra)

    def lagging(self) -> bool:
        """Whether the routing rows not replayed yet span over half of the tokens the run model
        keeps (rows older than its window are dropped before a replay sees them: replay now)."""
        run = self.run
        with run.lock:
            ro = run.routes
            window, total, first = ro.window_tokens, ro.total, ro.total - ro.n
            if window is None or self._row >= total:
                return False
            return self._row < first or ro.max_tok - int(ro.tok[self._row - first]) > window // 2

    def update(self) -> bool:
        """Replay the routing rows added since the last call (at most ``max_tokens`` tokens).
        Returns True when the curve changed."""
        run = self.run
        with run.lock:
            ro = run.routes
            total, held = ro.total, ro.n
            first = total - held
            if self._row < first:
                self.skipped_rows += first - self._row
                self._row = first
            if self._row >= total:
                return False
            lo = self._row - first
            tok = np.array(ro.tok[lo:])
            lay = np.array(ro.layer[lo:])
            exp_ = np.array(ro.expert[lo:])
            n_layer = max(run.n_layer or 0, int(lay.max()) + 1)
            n_expert = _meta_int(run, "n_expert") or run.n_expert or 0
            self._top_k = run.top_k or self._top_k
        if n_expert <= 0:
            return False  # the model's expert count (BMOE_READY n_expert) is not known yet
        # tokens: runs of one ``tok`` value in arrival order
        cuts = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
        ends = np.r_[cuts[1:], tok.shape[0]]
        if cuts.shape[0] > self.max_tokens:
            cuts, ends = cuts[: self.max_tokens], ends[: self.max_tokens]
        if self._lru is None:  # the dimensions are the model's (BMOE_READY) from here on
            moe = np.zeros(n_layer, dtype=bool)
            moe[lay] = True
            self._start(n_layer, n_expert, moe)
        lru = self._lru
        assert lru is not None
        self._replay(lru, lay[: ends[-1]], exp_[: ends[-1]], tok[cuts], ends - cuts)
        self._row += int(ends[-1])
        self.version += 1
        return True

    def _replay(self, lru: LiveLru, lay: npt.NDArray[np.integer[Any]], exp_: npt.NDArray[np.integer[Any]],
                tok: npt.NDArray[np.int64], lens: npt.NDArray[np.int64]) -> None:
        """Feed tokens whose routing rows (``lay``, ``exp_``, in arrival order) come in runs of
        ``lens`` rows, one run per token (``tok`` its index; < 0: a prompt): the decode tokens
        between two prompts in one compiled call (:meth:`LiveLru.feed_tokens`) per chunk of at
        most :data:`GRID_CELLS` cells, each prompt on its own; a token with a layer or an expert id
        out of range, or more than :data:`~bmoe_top.parsers.limits.MAX_TOP_K` experts at one
        layer, is counted and left out."""
        n_layer, n_expert = lru.n_layer, lru.n_expert
        n_tok = tok.shape[0]
        tid = np.repeat(np.arange(n_tok), lens)
        bad = np.zeros(n_tok, dtype=bool)  # a layer out of range, or too wide
        bad[tid[lay >= n_layer]] = True
        ok = ~bad[tid]
        tid, lay, exp_ = tid[ok], lay[ok], exp_[ok]
        # each row's place among its token's rows of the same layer, in arrival order
        key = tid * n_layer + lay
        order = np.argsort(key, kind="stable")
        key_s = key[order]
        group = np.flatnonzero(np.r_[True, key_s[1:] != key_s[:-1]])
        pos = np.arange(key_s.shape[0]) - np.repeat(group, np.diff(np.r_[group, key_s.shape[0]]))
        wide = np.zeros(n_tok, dtype=bool)
        wide[tid[order][pos >= MAX_TOP_K]] = True
        keep = ~wide[tid[order]]
        tid_o, lay_o, exp_o, pos = tid[order][keep], lay[order][keep], exp_[order][keep], pos[keep]
        width = max(1, int(pos.max()) + 1) if pos.shape[0] else 1
        moe = lru.layer_bytes > 0
        step = max(1, GRID_CELLS // (n_layer * width))
        for c0 in range(0, n_tok, step):
            c1 = min(n_tok, c0 + step)
            a, b = np.searchsorted(tid_o, [c0, c1])  # tid_o ascends (sorted by token, then layer)
            grid = np.full((c1 - c0, n_layer, width), -1, dtype=np.int64)
            grid[tid_o[a:b] - c0, lay_o[a:b], pos[a:b]] = exp_o[a:b]
            bad_c, wide_c = bad[c0:c1], wide[c0:c1]
            bad_expert = ((grid >= n_expert) & moe[None, :, None]).any(axis=(1, 2)) & ~bad_c & ~wide_c
            for j in np.flatnonzero(bad_c | wide_c | bad_expert).tolist():
                self.problems += 1
                self.last_error = (f"a layer >= {n_layer} (the model's layers)" if bad_c[j] else
                                   f"more than {MAX_TOP_K} experts at one layer" if wide_c[j] else
                                   f"an expert id is >= n_expert {n_expert}")
            good = ~(bad_c | wide_c | bad_expert)
            tok_c = tok[c0:c1]
            start = 0
            for p in [*np.flatnonzero(tok_c < 0).tolist(), c1 - c0]:
                run = np.flatnonzero(good[start:p]) + start
                if run.shape[0]:
                    lru.feed_tokens(grid[run])
                if p < c1 - c0 and not bad_c[p]:  # a prompt: a new turn starts here
                    self._turn_base = (lru.curve().decode_hits.copy(), lru.decode_lookups, lru.decode_tokens)
                    if good[p]:
                        lru.feed_prefill(grid[p][None, :, :])
                start = p + 1

    def view(self) -> LiveView | None:
        """The curve now, or None before the first decode token."""
        lru = self._lru
        if lru is None or lru.decode_tokens == 0:
            return None
        c: Curve = lru.curve()
        run = self.run
        with run.lock:
            budget_mib = _run_budget(run)[0]
            hit = run.summary.get("cache_hit_pct")
            last = run.tokens.last("cache_hit_pct") if run.tokens.has("cache_hit_pct") else math.nan
            est = _resident_estimate(run)
        runtime_hit = float(last) if math.isfinite(last) else (float(hit) if hit is not None else None)
        if runtime_hit is not None and runtime_hit < 0:
            runtime_hit = None
        lb = lru.layer_bytes
        moe = lb > 0
        cycle_units = float(lb[moe].sum() * max(1, self._top_k))
        bank_units = float(lb.sum() * lru.n_expert)
        if self._bytes:
            scale, unit, sizes = 1.0 / MIB, "MiB", "from the model file"
        elif est is not None:
            scale, unit = est, "MiB"
            sizes = f"estimated: {fmt(est, 3)} MiB per expert (resident MiB / resident experts)"
        else:
            scale, unit, sizes = 1.0, "expert slots", "not known: expert slots"
        budgets = c.budgets.astype(np.float64) * scale
        turn_pct: npt.NDArray[np.float64] | None = None
        turn_tokens = 0
        if self._turn_base is not None:
            h0, l0, t0 = self._turn_base
            dl = lru.decode_lookups - l0
            turn_tokens = lru.decode_tokens - t0
            if dl > 0:
                turn_pct = 100.0 * (c.decode_hits - h0) / dl
        rb: float | None = None
        at: float | None = None
        turn_at: float | None = None
        if budget_mib is not None and budget_mib > 0 and unit == "MiB":
            rb = float(budget_mib)
            # the runtime's capacity: whole experts within the budget
            units = rb * MIB if self._bytes else math.floor(rb / scale + 1e-9)
            j = int(np.searchsorted(c.budgets, units, side="right")) - 1
            at = float(c.decode_hit_pct[j]) if j >= 0 else None
            turn_at = float(turn_pct[j]) if j >= 0 and turn_pct is not None else None
        read = (c.read_mib_per_token * MIB * scale if not self._bytes else c.read_mib_per_token.astype(np.float64))
        return LiveView(unit, budgets, c.decode_hit_pct.astype(np.float64), read, lru.decode_tokens,
                        lru.decode_lookups, rb, cycle_units * scale, bank_units * scale, at, runtime_hit, sizes,
                        self.skipped_rows, self.problems, turn_pct, turn_at, turn_tokens)
