"""Route trace CSV: per token, per MoE layer, the routed experts and whether each was resident.

Format (../shared/data/real-runs/README.md, "qwen.route.csv"; written by bmoe-cli's route
tracer; as implemented: docs/telemetry.md "Route trace CSV" and "Route trace"): comment header
lines ``# route_trace v1``, ``# model=... arch=... n_layer=N n_expert=E n_expert_used=K``, one
``# layer=N expert_bytes=B dense_bytes=D`` per layer, then the header
``turn,phase,step,layer,slot,expert,weight,residency,expert_bytes`` and one row per (token, layer,
top-k slot). The CSV is read by token_csv.read_numeric_csv, with its repairs of damaged files.

``phase`` 0 = prefill, 1 = decode (the strings "prefill"/"decode" are accepted too);
``residency`` 1 = the expert was resident when routed (cache hit), 0 = miss; ``weight`` the
router's gate weight; ``expert_bytes`` bytes read for this expert this token (0 on a hit).

Sizes are checked against parsers/limits.py: a header ``n_layer``/``n_expert``/``n_expert_used``
over its cap is ignored (a Problem), and a row whose layer, expert or slot is over the cap (or
whose integer cells do not fit 32 bits) is dropped and counted, so the [n_layer, n_expert] tables
below stay bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .limits import MAX_EXPERTS, MAX_LAYERS, MAX_TENSOR_BYTES, MAX_TOP_K, dims_problem, int_within
from .textio import Problem
from .token_csv import parse_kv_comment, read_numeric_csv

__all__ = ["RouteTrace", "load_route_trace", "hit_matrix", "expert_counts", "expert_hits",
           "PHASE_PREFILL", "PHASE_DECODE", "ROUTE_COLUMNS"]

PHASE_PREFILL = 0
PHASE_DECODE = 1
ROUTE_COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
                 "expert_bytes")
_INT_COLS = ("turn", "phase", "step", "layer", "slot", "expert", "residency")
_PHASES = {"prefill": 0.0, "decode": 1.0, "p": 0.0, "d": 1.0}
_CAPPED = {"n_layer": "n_layer", "n_expert": "n_expert", "n_expert_used": "top_k"}
# the largest value each integer column may hold (its int32 cast, or the cap of limits.py)
_INT_MAX = {"turn": 2**31 - 1, "phase": 1, "step": 2**31 - 1, "layer": MAX_LAYERS - 1, "slot": MAX_TOP_K - 1,
            "expert": MAX_EXPERTS - 1, "residency": 1}


@dataclass(slots=True)
class RouteTrace:
    """A loaded route trace. Columns (all the same length, one entry per routed slot):
    ``turn, phase, step, layer, slot, expert, residency`` int32 (residency -1 = not recorded),
    ``weight`` float32 (NaN = not recorded), ``expert_bytes`` int64 bytes (-1 = not recorded).
    ``layer_info`` {layer: {"expert_bytes": B, "dense_bytes": D}} from the header comments;
    ``n_layer``/``n_expert``/``top_k`` from the header (else inferred from the rows: max + 1);
    ``problems`` bad lines (a row with a bad layer/expert/step cell is dropped)."""

    meta: dict[str, str]
    layer_info: dict[int, dict[str, int]]
    turn: np.ndarray
    phase: np.ndarray
    step: np.ndarray
    layer: np.ndarray
    slot: np.ndarray
    expert: np.ndarray
    weight: np.ndarray
    residency: np.ndarray
    expert_bytes: np.ndarray
    n_layer: int
    n_expert: int
    top_k: int
    problems: list[Problem] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        """Routed slots (rows) kept."""
        return int(self.layer.shape[0])

    @property
    def identity(self) -> dict[str, str]:
        """The run this trace is from: ``model`` and ``arch`` when the header comments name them."""
        return {k: self.meta[k] for k in ("model", "arch") if k in self.meta}


def _int_meta(meta: dict[str, str], key: str) -> int | None:
    try:
        return int(meta[key])
    except (KeyError, ValueError):
        return None


def load_route_trace(data: bytes) -> RouteTrace:
    """Parse a route-trace CSV from its bytes. Never raises on bad content.

    Columns are read by name; a missing optional column (``weight``, ``residency``,
    ``expert_bytes``, ``turn``, ``slot``) is filled with its "not recorded" value; a file missing
    ``step``, ``layer`` or ``expert`` yields no rows and a Problem.
    """
    nc = read_numeric_csv(data, converters={"phase": lambda s: _PHASES[s.lower()]}, known=frozenset(ROUTE_COLUMNS),
                          default_header=lambda w: ROUTE_COLUMNS if w == len(ROUTE_COLUMNS) else None)
    problems = nc.problems
    meta: dict[str, str] = {}
    layer_info: dict[int, dict[str, int]] = {}
    for lineno, _row, text in nc.comments:
        kv = parse_kv_comment(text)
        if "layer" in kv and len(kv) > 1:
            kv_layer = kv.pop("layer")
            il = int_within(kv_layer, MAX_LAYERS - 1)
            sizes = {k: int_within(v, MAX_TENSOR_BYTES) for k, v in kv.items()}
            unsized = [k for k, v in sizes.items() if v is None]
            if il is None or unsized:
                refused = (f"layer={kv_layer[:40]} is not a layer from 0 to {MAX_LAYERS - 1}" if il is None else
                           f"{unsized[0]}={kv[unsized[0]][:40]} is not a size from 0 to 1 TiB (parsers/limits.py)")
                problems.append(Problem(lineno, "# " + text, f"layer header refused: {refused}"))
            else:
                layer_info[il] = {k: v for k, v in sizes.items() if v is not None}
            continue
        if kv:
            for k, v in kv.items():
                if k in _CAPPED and k not in meta:
                    why = dims_problem(**{_CAPPED[k]: v})
                    if why is not None:
                        problems.append(Problem(lineno, "# " + text, f"{why.replace(_CAPPED[k] + '=', k + '=', 1)}"
                                                                     ": ignored"))
                        continue
                meta.setdefault(k, v)
        elif text:
            meta.setdefault("format", text)
    names = nc.header
    n = nc.n_rows

    def col(name: str) -> np.ndarray | None:
        return nc.columns[names.index(name)] if name in names else None

    required = [c for c in ("step", "layer", "expert") if c not in names]
    if required:
        if names or n:
            problems.append(Problem(nc.header_lineno, ",".join(names),
                                    f"route trace header lacks column(s) {', '.join(required)}"))
        n = 0
    # a row with a bad integer cell in a key column cannot be placed: drop it
    keep = np.ones(n, dtype=bool)
    if n:
        for c in ("step", "layer", "expert", "turn", "phase", "slot"):
            cv = col(c)
            if cv is not None:
                keep &= np.isfinite(cv)
        dropped = int(n - keep.sum())
        if dropped:
            problems.append(Problem(0, "", f"{dropped} route row(s) dropped: step/layer/expert/turn/"
                                           "phase/slot not an integer"))
        # values no table may be sized from, and integers a 32-bit column cannot hold
        big = np.zeros(n, dtype=bool)
        for c, top in _INT_MAX.items():
            cv = col(c)
            if cv is not None:
                with np.errstate(invalid="ignore"):
                    big |= keep & np.isfinite(cv) & ((cv > top) | (cv < (-1 if c in ("slot", "residency") else 0)))
        eb = col("expert_bytes")
        if eb is not None:
            with np.errstate(invalid="ignore"):
                big |= keep & np.isfinite(eb) & ((eb > MAX_TENSOR_BYTES) | (eb < -1))
        nbig = int(big.sum())
        if nbig:
            keep &= ~big
            problems.append(Problem(0, "", f"{nbig} route row(s) dropped: a layer, expert or slot over the caps "
                                           f"({MAX_LAYERS} layers, {MAX_EXPERTS} experts, top-k {MAX_TOP_K}, "
                                           "expert_bytes 1 TiB; parsers/limits.py) or an integer out of range"))

    def ints(name: str, missing: int, dtype: type[np.integer[Any]] = np.int32) -> np.ndarray:
        cv = col(name) if n else None
        if cv is None:
            return np.full(int(keep.sum()), missing, dtype=dtype)
        cv = cv[keep]
        out = np.where(np.isfinite(cv), cv, missing)
        return out.astype(dtype)

    turn = ints("turn", 0)
    phase = ints("phase", PHASE_DECODE)
    step = ints("step", 0)
    layer = ints("layer", 0)
    slot = ints("slot", -1)
    expert = ints("expert", 0)
    residency = ints("residency", -1)
    expert_bytes = ints("expert_bytes", -1, np.int64)
    w = col("weight") if n else None
    weight = (w[keep].astype(np.float32) if w is not None
              else np.full(len(layer), np.nan, dtype=np.float32))

    n_layer = _int_meta(meta, "n_layer") or (int(layer.max()) + 1 if len(layer) else 0)
    n_expert = _int_meta(meta, "n_expert") or (int(expert.max()) + 1 if len(expert) else 0)
    top_k = _int_meta(meta, "n_expert_used") or (int(slot.max()) + 1 if len(slot) and slot.max() >= 0 else 0)
    # rows that name a layer/expert outside the declared shape are reported, not silently used
    if len(layer):
        bad = (layer < 0) | (layer >= n_layer) | (expert < 0) | (expert >= n_expert)
        nbad = int(bad.sum())
        if nbad:
            problems.append(Problem(0, "", f"{nbad} route row(s) dropped: layer/expert outside "
                                           f"{n_layer} layers x {n_expert} experts"))
            ok = ~bad
            turn, phase, step, layer, slot, expert, residency, expert_bytes, weight = (
                a[ok] for a in (turn, phase, step, layer, slot, expert, residency, expert_bytes, weight))
    return RouteTrace(meta, layer_info, turn, phase, step, layer, slot, expert, weight, residency,
                      expert_bytes, n_layer, n_expert, top_k, problems)


def _select(trace: RouteTrace, phase: int | None) -> np.ndarray:
    if phase is None:
        return np.ones(trace.n_rows, dtype=bool)
    sel: np.ndarray = trace.phase == phase
    return sel


def hit_matrix(trace: RouteTrace, phase: int | None = PHASE_DECODE) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer hit share per token.

    Returns ``(steps, share)``: ``steps`` int array [T] of the step number of each token column
    (tokens ordered by turn, then step; with several turns a step number can repeat),
    ``share`` float64 [n_layer, T] = hits / routed slots with a known residency for that layer
    and token, NaN where the layer had no routed slot (no MoE, or no data) for that token.
    ``phase`` 1 = decode (default), 0 = prefill, None = both.
    """
    sel = _select(trace, phase) & (trace.residency >= 0)
    turn, step = trace.turn[sel], trace.step[sel]
    layer, res = trace.layer[sel], trace.residency[sel]
    if not len(step):
        return np.empty(0, dtype=np.int64), np.full((trace.n_layer, 0), np.nan)
    key = turn.astype(np.int64) * (1 << 32) + step.astype(np.int64)
    ukeys, col = np.unique(key, return_inverse=True)
    T = len(ukeys)
    flat = layer.astype(np.int64) * T + col
    size = trace.n_layer * T
    total = np.bincount(flat, minlength=size).reshape(trace.n_layer, T)
    hits = np.bincount(flat, weights=(res > 0).astype(np.float64), minlength=size).reshape(trace.n_layer, T)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0, hits / np.maximum(total, 1), np.nan)
    steps = (ukeys & ((1 << 32) - 1)).astype(np.int64)
    return steps, share


def expert_counts(trace: RouteTrace, phase: int | None = None) -> np.ndarray:
    """How often each expert was routed: int64 [n_layer, n_expert]. ``phase`` None = all."""
    sel = _select(trace, phase)
    flat = trace.layer[sel].astype(np.int64) * trace.n_expert + trace.expert[sel]
    return np.bincount(flat, minlength=trace.n_layer * trace.n_expert).reshape(
        trace.n_layer, trace.n_expert)


def expert_hits(trace: RouteTrace, phase: int | None = None) -> np.ndarray:
    """How often each expert was routed while resident (cache hit): int64 [n_layer, n_expert]."""
    sel = _select(trace, phase) & (trace.residency > 0)
    flat = trace.layer[sel].astype(np.int64) * trace.n_expert + trace.expert[sel]
    return np.bincount(flat, minlength=trace.n_layer * trace.n_expert).reshape(
        trace.n_layer, trace.n_expert)
