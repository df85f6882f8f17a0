"""The what-if use case: read a routing trace and the files of its run into a
:class:`~bmoe_top.tui.present.whatif.WhatIfInput`, analyse it, write an STRP profile of it.

Inputs (``bmoe-top whatif FILE...``): one routing source, a route-trace CSV (``--route-trace``),
a binary routing trace (moe-cache-reference.md "Routing trace format") or the BMOE_ROUTE lines of
a recording or transcript (``--route-telemetry``), plus any files of the same run (its CSV sink,
log, sidecar) for the run's budget, read bandwidth and hit %. The numbers are
:mod:`bmoe_top.tui.analysis.whatif`'s (docs/analysis.md); the views of them are
:mod:`bmoe_top.tui.present.whatif`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from bmoe_top.parsers.routing_bin import looks_like_routing_bin
from bmoe_top.parsers.sniff import sniff
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.whatif import MIB, RunCosts, WhatIfInput
from bmoe_top.tui.sources.files import ReplayError, read_path

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.lookups import Lookups
    from bmoe_top.tui.analysis.whatif import Replay, WhatIf

__all__ = ["WhatIfError", "load_whatif", "analyse_input", "gguf_layer_bytes", "write_profile", "profile_slots",
           "run_cache_budget", "gguf_dense_bytes", "gguf_pieces", "summary_number", "meta_int", "resident_estimate",
           "run_costs"]


class WhatIfError(ValueError):
    """Files a what-if cannot be made from; ``str()`` is one sentence for the user."""


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


def gguf_pieces(path: str) -> list[list[tuple[int, int]]]:
    """Each expert's slices in a GGUF model (file offset, bytes; ``pagecache.layout_pieces``), for
    the page cache's replay. Raises WhatIfError when the file is not a MoE GGUF."""
    from bmoe_top.parsers.gguf_layout import ModelError, read_layout
    from bmoe_top.tui.analysis.pagecache import layout_pieces

    try:
        lay = read_layout(path)
    except (ModelError, OSError, ValueError) as e:
        raise WhatIfError(f"{path}: cannot read the expert offsets ({e})") from None
    return layout_pieces(lay)


def gguf_dense_bytes(path: str) -> float:
    """Bytes of a GGUF model that are not experts (attention, shared experts, embeddings: always
    resident): the file's bytes minus its expert bank. Raises WhatIfError when the file is not a
    MoE GGUF."""
    from bmoe_top.parsers.gguf_layout import ModelError, read_layout

    try:
        lay = read_layout(path)
    except (ModelError, OSError, ValueError) as e:
        raise WhatIfError(f"{path}: cannot read the model's sizes ({e})") from None
    return float(max(0, lay.file_size - lay.expert_bank_bytes))


def resident_estimate(run: RunModel) -> float | None:
    """MiB per expert from the newest BMOE_RESIDENT: resident MiB / resident experts."""
    res = run.resident
    mib = run.resident_mib
    if res is None or mib is None or not math.isfinite(mib) or mib <= 0:
        return None
    n = int(np.count_nonzero(res))
    return mib / n if n else None


def summary_number(run: RunModel, *keys: str) -> tuple[float | None, str]:
    """The first finite summary number among ``keys`` and where it came from, or (None, "")."""
    for k in keys:
        v = run.summary.get(k)
        if v is not None and math.isfinite(float(v)):
            return float(v), f"run summary {k}"
    return None, ""


def meta_int(run: RunModel, key: str) -> int | None:
    """A positive integer of the run header (BMOE_READY extras, CSV header), or None."""
    v = run.meta.get(key)
    try:
        n = int(str(v)) if v is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


def run_costs(run: RunModel) -> RunCosts | None:
    """What a decode token of ``run`` cost besides its reads, from its summary (``compute_s_tok``,
    ``mgmt_s_tok``, ``stall_s_tok``, ``tok_s``) and header (``overlap``, ``io_threads``); None
    when the summary has no compute or mgmt per token. The mode is the header's ``overlap``, else
    whether the summary has a stall."""
    compute, _ = summary_number(run, "compute_s_tok")
    mgmt, _ = summary_number(run, "mgmt_s_tok")
    if compute is None or mgmt is None:
        return None
    stall, _ = summary_number(run, "stall_s_tok")
    tok_s, _ = summary_number(run, "tok_s")
    read, _ = summary_number(run, "read_mib_per_tok")
    flag = str(run.meta.get("overlap", "")).strip()
    overlap = flag == "1" if flag in ("0", "1") else stall is not None
    return RunCosts(compute * 1e3, mgmt * 1e3, (stall or 0.0) * 1e3 if overlap else 0.0, overlap,
                    meta_int(run, "io_threads") or 1, tok_s if tok_s and tok_s > 0 else None, read)


def run_cache_budget(run: RunModel) -> tuple[float | None, str]:
    """The run's cache budget in MiB and where it came from (its summary, BMOE_RESIDENT,
    BMOE_READY, the run header), or (None, "")."""
    v, where = summary_number(run, "budget_mib")
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
        est = resident_estimate(run)
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
    budget_mib, budget_from = (run_budget_mib, "--run-budget") if run_budget_mib is not None else run_cache_budget(run)
    run_budget: int | None = None
    if budget_mib is not None and budget_mib <= 0:
        notes.append(f"the run had no cache (budget {fmt(budget_mib)} MiB, from {budget_from})")
    elif budget_mib is not None and not lk.sizes_known and run_budget_mib is None:
        notes.append(f"the run's budget ({fmt(budget_mib)} MiB) cannot be placed on an axis of expert slots")
    elif budget_mib is not None:
        run_budget = int(budget_mib * MIB)
    bw, bw_from = (read_mib_s, "--read-mib-s") if read_mib_s is not None else summary_number(run, "read_mib_s")
    if bw is not None and not bw > 0:
        bw, bw_from = None, ""
    if not lk.sizes_known:
        bw, bw_from = None, ""
    hit, hit_from = summary_number(run, "cache_hit_pct")
    if hit is not None and hit < 0:
        hit, hit_from = None, ""
    if run_budget is None and budget_mib is None:
        notes.append("no run budget: give the run's CSV or log beside the trace, or --run-budget MiB")
    return WhatIfInput(lk, name, routing_from, [p for p, _ in datas], sizes, unit, run_budget, budget_from, bw,
                       bw_from, hit, hit_from, notes, run_costs(run))


def analyse_input(inp: WhatIfInput, budgets_mib: Sequence[float] | None = None) -> tuple[WhatIf, Replay]:
    """The what-if report of ``inp`` at ``budgets_mib`` (in the input's ``budget_unit``; default
    the sweep from T to the whole bank). Raises WhatIfError for bad budgets."""
    from bmoe_top.tui.analysis.whatif import analyse

    b = None if budgets_mib is None else np.asarray(budgets_mib, dtype=np.float64) * MIB
    try:
        return analyse(inp.lookups, b, run_budget=inp.run_budget, read_mib_s=inp.read_mib_s)
    except ValueError as e:
        raise WhatIfError(str(e)) from None


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
