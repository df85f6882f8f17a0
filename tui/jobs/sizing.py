"""Size the cache in tokens per second: the what-if's curves through the tok/s model
(tui/analysis/speed.py) with the run's costs, a read bandwidth and a RAM (docs/analysis.md
"Predicted speed", "For the commands"). No Textual.

Where each input comes from, first found wins:

- costs per token (compute, mgmt, stall, the mode, the lanes): the run's summary and header (its
  mgmt at every budget; costs with a fitted ``evict_ms``, a sweep's, add it per evicting miss of
  each policy's curve, :func:`~bmoe_top.tui.analysis.cachesim.decode_evictions`);
- read bandwidth (all lanes together): ``--bandwidth MB/s``; the run's own read MiB over its
  flash time times its lanes; the ``[probe]`` section ``bmoe-top probe --remember`` wrote
  (O_DIRECT at the run's lanes as queue depth, else buffered);
- RAM: ``--ram``; else this machine's (the smaller of ``MemTotal`` and the memory cgroup limit
  of this process, :func:`bmoe_top.tui.sources.procfs.ram_limit`);
- dense weights: ``--dense-mib``; else the model file (``--model``: its bytes minus the expert
  bank); runtime memory: ``--runtime-mib`` (else counted as 0, and said so); readahead:
  ``--readahead-kb``, else the model file's device (``read_ahead_kb``), else the kernel's 128 KiB;
- the rate plain mmap's faults read at: ``--mmap-bandwidth MB/s``; the ``[probe]`` section's
  faults' rate when it was measured at the same readahead; else the read bandwidth above.

An input that is absent is named with the flag that gives it, and what needs it is not predicted
(no bandwidth or costs: no tok/s; no RAM or dense weights: one level, no plain-mmap line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from bmoe_top.tui.analysis.cachesim import decode_evictions
from bmoe_top.tui.analysis.pagecache import LLAMA_SEQUENTIAL, replay_mmap
from bmoe_top.tui.analysis.speed import MIB, Memory, Prediction, TokenCosts, hit_at, predict, sizing_report
from bmoe_top.tui.present.whatif import RunCosts, SpeedInputs, SpeedView, WhatIfInput
from bmoe_top.tui.settings import ProbeSettings

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.lookups import Lookups
    from bmoe_top.tui.analysis.whatif import PolicyPoints, WhatIf

__all__ = ["TOLERANCE", "demand", "evictions_at", "policy_hits", "probe_bandwidth", "speed_view", "tok_s_curve",
           "token_costs"]

#: A prediction further than this from the measured tok/s (a share of it) is flagged.
TOLERANCE = 0.15
#: The kernel's default readahead (bytes) when neither ``--readahead-kb`` nor the device says.
DEFAULT_READAHEAD = 128 * 1024


def demand(report: WhatIf) -> tuple[float, float]:
    """(lookups per decode token, bytes a miss reads): MoE layers x top-k, and the mean bytes of
    one expert over the MoE layers."""
    moe = [m for m in report.layer_mib if m > 0]
    return float(len(moe) * report.top_k), (sum(moe) / len(moe) * MIB if moe else 0.0)


def policy_hits(curve: PolicyPoints, lookups: float, miss_bytes: float) -> list[float]:
    """The share of a token's expert bytes a policy's curve does not read, per budget (0..1):
    ``1 - read per token / (lookups x miss_bytes)``, so layers of different sizes weigh by bytes."""
    full = lookups * miss_bytes
    if full <= 0:
        return [0.0 for _ in curve.budgets_mib]
    return [min(1.0, max(0.0, 1.0 - float(r) * MIB / full)) for r in curve.read_mib_per_token]


def evictions_at(lookups: Lookups, curve: PolicyPoints, budget_mib: float) -> float:
    """The evicting misses per decode token at ``budget_mib`` on ``curve`` (its decode hit read
    between its budgets, :func:`~bmoe_top.tui.analysis.speed.hit_at`), as
    :func:`~bmoe_top.tui.analysis.cachesim.decode_evictions` counts them."""
    dh = hit_at(curve.budgets_mib, [x / 100.0 for x in curve.decode_hit_pct], budget_mib)
    return float(decode_evictions(lookups, [budget_mib], [100.0 * dh])[0])


def probe_bandwidth(probe: ProbeSettings, lanes: int) -> tuple[float | None, str]:
    """The remembered probe's MB/s at queue depth ``lanes`` (the deepest measured when fewer):
    O_DIRECT when it was measured, else buffered; (None, "") when nothing was remembered."""
    for mode, rates in (("O_DIRECT", probe.direct_mb_s), ("buffered", probe.buffered_mb_s)):
        if rates:
            depth = min(lanes, len(rates))
            return float(rates[depth - 1]), f"settings [probe] {mode} at queue depth {depth} ({probe.file})"
    return None, ""


def token_costs(costs: RunCosts, lookups: float, miss_bytes: float, read_mb_s: float) -> TokenCosts:
    """The tok/s model's costs of a run: its measured parts, the trace's demand, a bandwidth."""
    return TokenCosts(compute_ms=costs.compute_ms, mgmt_ms=costs.mgmt_ms, lookups=lookups, miss_bytes=miss_bytes,
                      read_mb_s=read_mb_s, stall_ms=costs.stall_ms, miss_ms=costs.miss_ms, evict_ms=costs.evict_ms)


def _bandwidth(inp: WhatIfInput, costs: RunCosts | None, flag: float | None,
               probe: ProbeSettings | None) -> tuple[float | None, str]:
    if flag is not None:
        return flag, "--bandwidth"
    lanes = costs.lanes if costs is not None else 1
    if inp.read_mib_s is not None and inp.read_mib_s_from != "--read-mib-s":
        return inp.read_mib_s * MIB / 1e6 * lanes, f"the run: {inp.read_mib_s_from} x {lanes} lane(s)"
    if inp.read_mib_s is not None:
        return inp.read_mib_s * MIB / 1e6 * lanes, f"--read-mib-s x {lanes} lane(s)"
    if probe is not None:
        return probe_bandwidth(probe, lanes)
    return None, ""


def _mmap_bandwidth(flag: float | None, probe: ProbeSettings | None, readahead: float, bw: float | None,
                    bw_from: str) -> tuple[float | None, str]:
    """The rate plain mmap's faults read at and where it came from: the flag, the remembered
    faults' rate at this readahead, else the read bandwidth (saying why)."""
    if flag is not None:
        return flag, "--mmap-bandwidth"
    why = "no faults' rate: bmoe-top probe MODEL --remember or --mmap-bandwidth"
    if probe is not None and probe.mmap_mb_s is not None:
        ra_kb = probe.mmap_readahead_kb
        if ra_kb is None or abs(ra_kb * 1024 - readahead) < 1:
            return probe.mmap_mb_s, f"settings [probe] mmap faults ({probe.file})"
        why = f"the remembered faults' rate was measured at {ra_kb:g} KiB readahead, not {readahead / 1024:g}"
    if bw is None:
        return None, ""
    return bw, f"the read bandwidth ({bw_from}; {why})"


def _mmap_read(inp: WhatIfInput, memory: Memory | None,
               pieces: Sequence[Sequence[tuple[int, int]]] | None) -> tuple[float | None, str]:
    """Plain mmap's bytes a decode token from the page cache's replay (None: the readahead rule)
    and which of the two predicts it, and why."""
    if memory is None:
        return None, ""
    if pieces is None:
        return None, "the readahead rule (--model GGUF replays the page cache over the trace)"
    if not inp.lookups.sizes_known:
        return None, "the readahead rule (the trace's expert sizes are not known)"
    try:
        replay = replay_mmap(inp.lookups, pieces, memory.page_cache(0.0), memory.readahead, sequential=LLAMA_SEQUENTIAL)
    except ValueError as e:
        return None, f"the readahead rule (the model's layout does not fit the trace: {e})"
    return replay.read_per_token, ("the page cache replayed over the trace (the model's expert offsets; windows of "
                                   "2 x readahead: llama.cpp advises the file sequential)")


def speed_view(inp: WhatIfInput, report: WhatIf, *, ram: float | None = None, bandwidth_mb_s: float | None = None,
               dense: float | None = None, dense_from: str = "", runtime: float | None = None,
               readahead: float | None = None, readahead_from: str = "", probe: ProbeSettings | None = None,
               machine_ram: tuple[float | None, str] | None = None, policies: Sequence[str] | None = None,
               mmap_pieces: Sequence[Sequence[tuple[int, int]]] | None = None,
               mmap_bandwidth_mb_s: float | None = None) -> SpeedView:
    """The tok/s model over ``report``'s curves (see the module docstring for where each input
    comes from). ``ram``, ``dense``, ``runtime``, ``readahead`` in bytes (``dense_from`` /
    ``readahead_from`` say where a given value came from); ``machine_ram`` the RAM read from
    the machine and where from (read now when None and ``ram`` is None); ``policies`` the
    policies to predict (default every curve of the report); ``mmap_bandwidth_mb_s`` the rate
    plain mmap's faults read at (``--mmap-bandwidth``)."""
    costs = inp.run_costs
    lookups, miss_bytes = demand(report)
    missing: list[str] = []
    if not inp.lookups.sizes_known:
        missing.append("expert sizes (--model GGUF)")
    if costs is None:
        missing.append("the run's compute and mgmt per token (its CSV or log beside the trace)")
    bw, bw_from = _bandwidth(inp, costs, bandwidth_mb_s, probe)
    if bw is None:
        missing.append("read bandwidth (--bandwidth MB/s, or bmoe-top probe MODEL --remember)")
    if ram is not None:
        ram_from = "--ram"
    else:
        if machine_ram is None:
            from bmoe_top.tui.sources.procfs import ram_limit

            machine_ram = ram_limit()
        ram, ram_from = machine_ram
        if ram is None:
            missing.append("RAM (--ram SIZE)")
    if dense is not None:
        dense_from = dense_from or "--dense-mib"
    else:
        missing.append("dense weights (--model GGUF or --dense-mib)")
    runtime_from = "--runtime-mib" if runtime is not None else "not given: counted as 0 (--runtime-mib)"
    ra = readahead if readahead is not None else DEFAULT_READAHEAD
    ra_from = (readahead_from or "--readahead-kb") if readahead is not None else "the kernel's default (--readahead-kb)"
    memory = Memory(ram, dense, runtime or 0.0, ra) if ram is not None and dense is not None else None
    mmap_read, mmap_from = _mmap_read(inp, memory, mmap_pieces)
    mm_bw, mm_bw_from = _mmap_bandwidth(mmap_bandwidth_mb_s, probe, ra, bw, bw_from) if memory else (None, "")
    inputs = SpeedInputs(costs, "run summary compute_s_tok, mgmt_s_tok, stall_s_tok" if costs else "", lookups,
                         miss_bytes, bw, bw_from, ram, ram_from, dense, dense_from or "", runtime or 0.0, runtime_from,
                         ra, ra_from, tuple(missing), mmap_read, mmap_from, mm_bw, mm_bw_from)
    if costs is None or bw is None or not inp.lookups.sizes_known or lookups <= 0 or miss_bytes <= 0:
        return SpeedView(inputs, {}, 0, None, TOLERANCE)
    tc = token_costs(costs, lookups, miss_bytes, bw)
    reports = {}
    wanted = set(policies) if policies is not None else None
    for c in report.curves:
        if wanted is not None and c.policy not in wanted:
            continue
        hits = policy_hits(c, lookups, miss_bytes)
        ev = decode_evictions(inp.lookups, c.budgets_mib, c.decode_hit_pct).tolist() if costs.evict_ms > 0 else None
        reports[c.policy] = sizing_report(c.budgets_mib, hits, tc, memory=memory, overlap=costs.overlap, evictions=ev,
                                          mmap_read_per_token=mmap_read, mmap_read_mb_s=mm_bw)
    at_run: Prediction | None = None
    lru = next((c for c in report.curves if c.policy == "lru"), None)
    if report.run_budget_mib is not None and lru is not None:
        h = hit_at(lru.budgets_mib, policy_hits(lru, lookups, miss_bytes), report.run_budget_mib)
        at_ev = evictions_at(inp.lookups, lru, report.run_budget_mib) if costs.evict_ms > 0 else 0.0
        at_run = predict(report.run_budget_mib, h, tc, evictions=at_ev)
    return SpeedView(inputs, reports, 2 if memory is not None else 1, at_run, TOLERANCE)


def tok_s_curve(view: SpeedView, policy: str) -> tuple[np.ndarray, np.ndarray]:
    """(budgets MiB, predicted tok/s) of ``policy`` in the run's mode; empty without a prediction."""
    r = view.reports.get(policy)
    if r is None:
        return np.zeros(0), np.zeros(0)
    ov = view.overlap
    return (np.array([p.budget_mib for p in r.points]),
            np.array([p.tok_s(ov) if math.isfinite(p.tok_s(ov)) else np.nan for p in r.points]))
