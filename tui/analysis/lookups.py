"""A routing trace as the expert cache sees it: one lookup per unique expert per layer batch.

The runtime (runtime/expert_cache.py ``ExpertCache.ensure``) is called once per MoE layer per
llama.cpp ubatch with that layer's routed experts made unique in order of first appearance
(token-major, then top-k slot). A decode token is one ubatch, so a decode batch is one layer of
one token (top-k experts); a prompt is prefilled in ubatches of ``n_batch`` tokens (default: the
whole prompt), so a prefill batch is one layer of one chunk (the union of its tokens' experts).
Batches come in the order the runtime runs them: a turn's prefill chunks (layers ascending in
each), then its decode tokens (layers ascending in each), turn after turn.

An *item* is one expert of one layer, numbered ``layer * n_expert + expert``; its size is the
layer's expert bytes (the sum of its gate/up/down slices: runtime/gguf_layout.py
``expert_bytes``). docs/analysis.md "Lookups".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from bmoe_top.parsers.route_trace import PHASE_PREFILL, RouteTrace, load_route_trace
from bmoe_top.parsers.routing_bin import RoutingBin, looks_like_routing_bin, parse_routing_bin
from bmoe_top.parsers.sniff import sniff
from bmoe_top.tui.analysis import _kernels as K

__all__ = ["Lookups", "from_route_trace", "from_routing", "from_routing_bin", "from_route_rows", "layer_lookups",
           "split_decode", "with_profile", "profile_fill", "from_bytes"]

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
B1 = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, eq=False)
class Lookups:
    """Cache lookups in replay order. All per-lookup arrays have length ``n`` (lookups):

    ``item`` int64 ``layer * n_expert + expert``; ``batch`` int64 batch index (0-based,
    non-decreasing, no gaps; a batch is one layer of one phase: its lookups share a layer and
    ``decode``); ``decode`` bool (False = a prefill lookup); ``token`` int64 the
    decode token's ordinal 0..``n_decode_tokens``-1 (-1 for prefill lookups); ``recorded_hit``
    int8 the hit flag the run recorded (1 hit, 0 miss, -1 not recorded). ``item_bytes`` int64
    [n_layer * n_expert]: bytes of each item (1 per item when ``sizes_known`` is False: the
    budget is then in expert slots). ``top_k`` experts per token per layer. The arrays are
    never changed in place: what is derived from them is computed once (:meth:`batch_first`,
    :meth:`item_counts`).
    """

    item: I64
    batch: I64
    decode: B1
    token: I64
    recorded_hit: I8
    item_bytes: I64
    n_layer: int
    n_expert: int
    top_k: int
    n_decode_tokens: int
    sizes_known: bool = True
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n(self) -> int:
        """Number of lookups."""
        return int(self.item.shape[0])

    @property
    def n_batches(self) -> int:
        return int(self.batch[-1]) + 1 if self.n else 0

    @property
    def n_items(self) -> int:
        return self.n_layer * self.n_expert

    @property
    def layer(self) -> I64:
        return self.item // self.n_expert

    @property
    def expert(self) -> I64:
        return self.item % self.n_expert

    def batch_first(self) -> I64:
        """int64 [n_batches + 1]: index of each batch's first lookup, then ``n``."""
        out = self._memo.get("batch_first")
        if out is None:
            out = np.empty(self.n_batches + 1, dtype=np.int64)
            if self.n:
                out[:-1] = np.searchsorted(self.batch, np.arange(self.n_batches), side="left")
            out[-1] = self.n
            self._memo["batch_first"] = out
        return cast(I64, out)

    def item_counts(self) -> tuple[I64, I64]:
        """(decode lookups, all lookups) per item: int64 [n_items] each. Raises ValueError for an
        item id outside 0..n_items-1."""
        got = self._memo.get("item_counts")
        if got is None:
            dec = np.zeros(self.n_items, dtype=np.int64)
            every = np.zeros(self.n_items, dtype=np.int64)
            if K.item_lookups(self.item, self.decode, dec, every):
                raise ValueError(f"an item id outside 0..{self.n_items - 1}")
            got = self._memo["item_counts"] = (dec, every)
        return cast(tuple[I64, I64], got)

    def layer_bytes(self) -> I64:
        """int64 [n_layer]: one expert's bytes per layer."""
        return self.item_bytes.reshape(self.n_layer, self.n_expert)[:, 0].copy()

    def moe_layers(self) -> I64:
        """Layers that have at least one decode lookup (or any lookup when there is no decode)."""
        dec, every = self.item_counts()
        per = (dec if dec.any() else every).reshape(self.n_layer, self.n_expert).sum(axis=1)
        return np.flatnonzero(per).astype(np.int64)

    @property
    def bank_bytes(self) -> int:
        """Bytes of every expert of every MoE layer (the whole expert bank)."""
        lb = self.layer_bytes()
        return int(lb[self.moe_layers()].sum() * self.n_expert)

    @property
    def token_cycle_bytes(self) -> int:
        """T: bytes one decode token routes (top-k experts at every MoE layer). A budget below it
        cannot keep a token's experts until the next token needs them: docs/analysis.md "T"."""
        lb = self.layer_bytes()
        return int(lb[self.moe_layers()].sum() * self.top_k)

    @property
    def n_decode_lookups(self) -> int:
        return int(self.item_counts()[0].sum())


def _from_arrays(turn: I64, phase: I64, step: I64, layer: I64, expert: I64, recorded: I8,
                 item_bytes: I64, n_layer: int, n_expert: int, top_k: int, prefill_batch: int | None,
                 sizes_known: bool) -> Lookups:
    n = int(layer.shape[0])
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Lookups(z, z.copy(), np.zeros(0, dtype=bool), z.copy(), np.zeros(0, dtype=np.int8),
                       item_bytes, n_layer, n_expert, top_k, 0, sizes_known)
    order = np.arange(n, dtype=np.int64)
    is_pre = phase == PHASE_PREFILL
    # the sub-batch of each row: a prefill chunk (steps counted from the turn's first prefill
    # step) or a decode step
    sub = step.copy()
    if is_pre.any():
        ut, inv_t = np.unique(turn, return_inverse=True)
        big = np.iinfo(np.int64).max
        mins = np.full(ut.shape[0], big, dtype=np.int64)
        np.minimum.at(mins, inv_t.reshape(-1)[is_pre], step[is_pre])
        base = np.where(mins == big, 0, mins)[inv_t.reshape(-1)]
        chunk = (step - base) // prefill_batch if prefill_batch else np.zeros(n, dtype=np.int64)
        sub = np.where(is_pre, chunk, step)
    # blocks (turn, phase, sub) in order of first appearance in the trace
    _, tcode = np.unique(turn, return_inverse=True)
    bkey = (tcode.reshape(-1).astype(np.int64) << 41) | ((phase != PHASE_PREFILL).astype(np.int64) << 40) | (
        sub - sub.min())
    _, first_idx, inv = np.unique(bkey, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    block_rank = np.empty(first_idx.shape[0], dtype=np.int64)
    block_rank[np.argsort(first_idx, kind="stable")] = np.arange(first_idx.shape[0])
    rank = block_rank[inv]
    srt = np.lexsort((order, layer, rank))
    rank, lay, exp_, rec, ph = rank[srt], layer[srt], expert[srt], recorded[srt], phase[srt]
    item = lay * n_expert + exp_
    # batch = (block, layer); lookups are unique per batch, first appearance kept
    bnew = np.empty(n, dtype=bool)
    bnew[0] = True
    bnew[1:] = (rank[1:] != rank[:-1]) | (lay[1:] != lay[:-1])
    batch = np.cumsum(bnew) - 1
    key = batch * (n_layer * n_expert) + item
    _, keep = np.unique(key, return_index=True)
    keep.sort()
    batch, item, rec, ph, rank = batch[keep], item[keep], rec[keep], ph[keep], rank[keep]
    decode = ph != PHASE_PREFILL
    # decode token ordinal: the decode blocks in order
    token = np.full(item.shape[0], -1, dtype=np.int64)
    if decode.any():
        _, tok = np.unique(rank[decode], return_inverse=True)
        token[decode] = tok.reshape(-1)
    n_tok = int(token.max()) + 1 if decode.any() else 0
    return Lookups(item.astype(np.int64), batch.astype(np.int64), decode, token, rec.astype(np.int8),
                   item_bytes, n_layer, n_expert, top_k, n_tok, sizes_known)


def from_route_trace(trace: RouteTrace, prefill_batch: int | None = None) -> Lookups:
    """The lookups of a route trace (parsers/route_trace.py; docs/telemetry.md "Route trace CSV").

    ``prefill_batch``: the run's prefill ubatch in tokens (``bmoe-run -b``); None = each turn's
    prompt was one batch (bmoe-run's default when the prompt fits ``min(n_ctx, 2048)``).
    Expert sizes come from the ``# layer=N expert_bytes=B`` header lines, else from the largest
    ``expert_bytes`` a row of that layer recorded; with neither, every expert counts 1 and budgets
    are expert slots (``sizes_known`` False). ``recorded_hit`` is the ``residency`` column.
    Raises ValueError for a trace with no rows.
    """
    if trace.n_rows == 0:
        raise ValueError("the route trace has no rows")
    if prefill_batch is not None and prefill_batch < 1:
        raise ValueError(f"prefill batch must be >= 1 token (got {prefill_batch})")
    n_layer, n_expert = trace.n_layer, trace.n_expert
    lb = np.zeros(n_layer, dtype=np.int64)
    for il, info in trace.layer_info.items():
        if 0 <= il < n_layer and info.get("expert_bytes", 0) > 0:
            lb[il] = info["expert_bytes"]
    if not lb.any() and (trace.expert_bytes > 0).any():
        np.maximum.at(lb, trace.layer.astype(np.int64), np.maximum(trace.expert_bytes, 0))
    known = bool(lb[np.unique(trace.layer)].all())
    if not known:
        lb[:] = 1
    item_bytes = np.repeat(lb, n_expert).astype(np.int64)
    top_k = trace.top_k or int(np.bincount(trace.slot[trace.slot >= 0]).shape[0]) or 1
    rec = trace.residency.astype(np.int8)
    return _from_arrays(trace.turn.astype(np.int64), trace.phase.astype(np.int64), trace.step.astype(np.int64),
                        trace.layer.astype(np.int64), trace.expert.astype(np.int64), rec, item_bytes,
                        n_layer, n_expert, top_k, prefill_batch, known)


def _decode_lookups(dec: npt.NDArray[np.integer[Any]], n_expert: int, batch0: int) -> tuple[I64, I64, I64, int]:
    """The decode lookups of ``dec`` [tokens, n_layer, k] in replay order (token, then layer,
    then slot; each batch's experts unique in order of first appearance, ids < 0 dropped), one
    compiled pass (no temporary beyond the result): item, batch and token, and the decode
    tokens. Raises ValueError for an id >= ``n_expert``."""
    # room for every id >= 0: pages past the lookups (a repeated id) are never written, so never
    # resident, and the arrays are views of the first n
    room = int(np.count_nonzero(dec >= 0))
    item, batch, token = (np.empty(room, dtype=np.int64) for _ in range(3))
    n, _nb, nt, top = K.decode_lookups(dec, n_expert, batch0, item, batch, token)
    if top >= n_expert:
        raise ValueError(f"expert id {top} >= n_expert {n_expert}")
    return item[:n], batch[:n], token[:n], nt


def from_routing(decode_routing: npt.ArrayLike, layer_bytes: npt.ArrayLike, n_expert: int,
                 prefill_routing: npt.ArrayLike | None = None, prefill_batch: int | None = None,
                 sizes_known: bool = True) -> Lookups:
    """Lookups from routing arrays (synthetic traces, live feeds, the binary routing trace).

    ``decode_routing``: int array [n_tokens, n_layer, k] of expert ids (-1 = no expert: a layer
    without MoE); ``prefill_routing``: the same for the prompt's tokens (one batch, or chunks of
    ``prefill_batch`` tokens); ``layer_bytes``: int [n_layer] one expert's bytes per layer.
    The decode tokens are read by a compiled pass: no temporary beyond the lookups.
    Raises ValueError on a shape mismatch or an expert id >= ``n_expert``.
    """
    dec = np.asarray(decode_routing)
    if not np.issubdtype(dec.dtype, np.integer):
        dec = dec.astype(np.int64)
    if dec.ndim != 3:
        raise ValueError(f"decode routing must be [tokens, layers, k], got shape {dec.shape}")
    n_tok, n_layer, k = dec.shape
    lb = np.asarray(layer_bytes, dtype=np.int64).reshape(-1)
    if lb.shape[0] != n_layer:
        raise ValueError(f"{lb.shape[0]} layer sizes for {n_layer} layers")
    item_bytes = np.repeat(lb, n_expert).astype(np.int64)
    pre_lk: Lookups | None = None
    if prefill_routing is not None:
        pre = np.asarray(prefill_routing, dtype=np.int64)
        if pre.ndim != 3 or pre.shape[1] != n_layer:
            raise ValueError(f"prefill routing must be [tokens, {n_layer}, k], got shape {pre.shape}")
        t, l_, _s = np.meshgrid(np.arange(pre.shape[0]), np.arange(n_layer), np.arange(pre.shape[2]), indexing="ij")
        e = pre.reshape(-1)
        ok = e >= 0
        if ok.any() and int(e[ok].max()) >= n_expert:
            raise ValueError(f"expert id {int(e[ok].max())} >= n_expert {n_expert}")
        m = int(ok.sum())
        pre_lk = _from_arrays(np.zeros(m, dtype=np.int64), np.full(m, PHASE_PREFILL, dtype=np.int64),
                              t.reshape(-1)[ok].astype(np.int64), l_.reshape(-1)[ok].astype(np.int64), e[ok],
                              np.full(m, -1, dtype=np.int8), item_bytes, n_layer, n_expert, k, prefill_batch,
                              sizes_known)
    b0 = pre_lk.n_batches if pre_lk is not None else 0
    item, batch, token, n_dec = _decode_lookups(dec, n_expert, b0)
    if pre_lk is not None and pre_lk.n:
        item = np.concatenate([pre_lk.item, item])
        batch = np.concatenate([pre_lk.batch, batch])
        token = np.concatenate([pre_lk.token, token])
    decode = token >= 0
    return Lookups(item, batch, decode, token, np.full(item.shape[0], -1, dtype=np.int8), item_bytes, n_layer,
                   n_expert, k, n_dec, sizes_known)


def from_routing_bin(rb: RoutingBin, n_expert: int, layer_bytes: npt.ArrayLike | None = None,
                     n_layer: int | None = None) -> Lookups:
    """Lookups of a binary routing trace (parsers/routing_bin.py): every token is replayed as a
    decode token, one batch per layer (``routing_trace`` routes a text token by token, as
    extended-strata-moe's sim_cache.py replays it). The file carries no sizes: give the model's
    ``layer_bytes`` (int [n_layer]), else every expert counts 1 and budgets are expert slots.
    Raises ValueError for a trace without records or an id >= ``n_expert``."""
    if rb.n_records == 0:
        raise ValueError("the routing trace has no records")
    nl = max(rb.n_layer, n_layer or 0)
    if rb.n_records == rb.n_tokens * nl and (rb.layer.reshape(rb.n_tokens, nl) == np.arange(nl)).all():
        # written token by token, every layer in order: the records are the routing already
        routing = rb.experts.reshape(rb.n_tokens, nl, rb.k_max)
    else:
        routing = np.full((rb.n_tokens, nl, rb.k_max), -1, dtype=np.int32)  # int32: half of rb.routing()'s bytes
        routing[rb.token, rb.layer, :] = rb.experts
    known = layer_bytes is not None
    lb = np.asarray(layer_bytes, dtype=np.int64) if known else np.ones(nl, dtype=np.int64)
    return from_routing(routing, lb, n_expert, sizes_known=known)


def from_route_rows(tok: npt.ArrayLike, layer: npt.ArrayLike, expert: npt.ArrayLike, hit: npt.ArrayLike,
                    n_layer: int, n_expert: int, layer_bytes: npt.ArrayLike, top_k: int,
                    sizes_known: bool = True) -> Lookups:
    """Lookups from routing rows in arrival order, as a run model holds them (the BMOE_ROUTE
    lines of a recording, a transcript or a live run: docs/telemetry.md "Telemetry extensions").

    ``tok`` int [n]: the decode token's row (>= 0; one batch per layer per token) or ``-1 - turn``
    for a turn's prefill rows (the union over the prompt: one batch per layer); ``layer``,
    ``expert`` int [n]; ``hit`` int [n] the residency the run recorded (1, 0, -1 unknown);
    ``layer_bytes`` int [n_layer] one expert's bytes per layer. Raises ValueError without rows,
    on arrays of different lengths, or an id outside the model's dimensions."""
    t = np.asarray(tok, dtype=np.int64).reshape(-1)
    lay = np.asarray(layer, dtype=np.int64).reshape(-1)
    exp_ = np.asarray(expert, dtype=np.int64).reshape(-1)
    rec = np.asarray(hit, dtype=np.int64).reshape(-1)
    if not t.size:
        raise ValueError("no routing rows")
    if not (t.size == lay.size == exp_.size == rec.size):
        raise ValueError("routing row arrays of different lengths")
    if lay.min() < 0 or lay.max() >= n_layer or exp_.min() < 0 or exp_.max() >= n_expert:
        raise ValueError(f"a routed layer or expert outside {n_layer} layers x {n_expert} experts")
    lb = np.asarray(layer_bytes, dtype=np.int64).reshape(-1)
    if lb.shape[0] != n_layer:
        raise ValueError(f"{lb.shape[0]} layer sizes for {n_layer} layers")
    pre = t < 0
    turn = np.where(pre, -1 - t, 0)
    phase = np.where(pre, PHASE_PREFILL, 1).astype(np.int64)
    step = np.where(pre, 0, t)
    recorded = np.where(rec > 0, 1, np.where(rec == 0, 0, -1)).astype(np.int8)
    return _from_arrays(turn, phase, step, lay, exp_, recorded, np.repeat(lb, n_expert).astype(np.int64),
                        n_layer, n_expert, max(1, top_k), None, sizes_known)


def _take(lk: Lookups, sel: B1) -> Lookups:
    batch = lk.batch[sel]
    if batch.size:
        _, batch = np.unique(batch, return_inverse=True)
    tok = lk.token[sel]
    n_tok = lk.n_decode_tokens
    return Lookups(lk.item[sel], batch.reshape(-1).astype(np.int64), lk.decode[sel], tok, lk.recorded_hit[sel],
                   lk.item_bytes, lk.n_layer, lk.n_expert, lk.top_k, n_tok, lk.sizes_known)


def layer_lookups(lk: Lookups, layer: int) -> Lookups:
    """The lookups of one layer (a layer-partitioned cache sees only these); item ids unchanged."""
    return _take(lk, lk.layer == layer)


def split_decode(lk: Lookups, train_fraction: float) -> tuple[Lookups, Lookups]:
    """(train, test): the prefill and the first ``train_fraction`` of the decode tokens, and the
    remaining decode tokens (token ordinals renumbered from 0). The parts are slices of ``lk``'s
    arrays (a batch never straddles the cut: the test part starts at a token's first lookup).
    Raises ValueError unless 0 < train_fraction < 1 and both parts get at least one decode token."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train fraction must be between 0 and 1 (got {train_fraction})")
    cut = int(round(lk.n_decode_tokens * train_fraction))
    if cut < 1 or cut >= lk.n_decode_tokens:
        raise ValueError(f"{lk.n_decode_tokens} decode tokens cannot be split at {train_fraction:g}")
    f = int(np.argmax(lk.token == cut))  # the test part's first lookup
    b_cut = int(lk.batch[f])
    tr = Lookups(lk.item[:f], lk.batch[:f], lk.decode[:f], lk.token[:f], lk.recorded_hit[:f], lk.item_bytes,
                 lk.n_layer, lk.n_expert, lk.top_k, cut, lk.sizes_known)
    tok = lk.token[f:]
    te = Lookups(lk.item[f:], lk.batch[f:] - b_cut, lk.decode[f:], np.where(tok >= 0, tok - cut, -1),
                 lk.recorded_hit[f:], lk.item_bytes, lk.n_layer, lk.n_expert, lk.top_k, lk.n_decode_tokens - cut,
                 lk.sizes_known)
    return tr, te


def profile_fill(lk: Lookups, pairs: npt.ArrayLike) -> I64:
    """The items a cache fill from a profile looks up (``pairs`` int [n, 2] (layer, expert),
    hottest first), coldest first, as ``bmoe-run --moe-cache-profile`` fills it
    (runtime/moe_cache.py ``prefill_from``): pairs outside the model or of layers without experts
    are skipped, as the runtime skips them."""
    p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ok = (p[:, 0] >= 0) & (p[:, 0] < lk.n_layer) & (p[:, 1] >= 0) & (p[:, 1] < lk.n_expert)
    p = p[ok]
    ids: I64 = p[:, 0] * lk.n_expert + p[:, 1]
    out: I64 = ids[lk.item_bytes[ids] > 0][::-1].copy()
    return out


def with_profile(lk: Lookups, pairs: npt.ArrayLike) -> Lookups:
    """``lk`` preceded by a cache fill from a profile (:func:`profile_fill`): one uncounted
    lookup per pair, coldest first, so that under LRU at any budget the cache starts with the
    hottest pairs that fit, the hottest most recent."""
    ids = profile_fill(lk, pairs)
    m = int(ids.shape[0])
    return Lookups(np.concatenate([ids, lk.item]), np.concatenate([np.arange(m, dtype=np.int64), lk.batch + m]),
                   np.concatenate([np.zeros(m, dtype=bool), lk.decode]),
                   np.concatenate([np.full(m, -1, dtype=np.int64), lk.token]),
                   np.concatenate([np.full(m, -1, dtype=np.int8), lk.recorded_hit]),
                   lk.item_bytes, lk.n_layer, lk.n_expert, lk.top_k, lk.n_decode_tokens, lk.sizes_known)


def from_bytes(data: bytes, name: str = "", n_expert: int | None = None, layer_bytes: npt.ArrayLike | None = None,
               prefill_batch: int | None = None) -> tuple[Lookups, list[str]]:
    """Lookups from a file's bytes: a route-trace CSV (parsers/route_trace.py) or a binary
    routing trace (parsers/routing_bin.py; its ``n_expert`` is the largest id + 1 unless given).
    Returns (lookups, notes: the parsers' problems and what was assumed, one sentence each).
    Raises ValueError (one sentence) for anything else or a trace without lookups."""
    notes: list[str] = []
    kind = sniff(data, name)
    if kind == "route_trace":
        tr = load_route_trace(data)
        notes += [f"line {p.lineno}: {p.reason}" if p.lineno else p.reason for p in tr.problems]
        lk = from_route_trace(tr, prefill_batch)
    elif kind in ("unknown", "transcript") and looks_like_routing_bin(data):
        rb = parse_routing_bin(data, n_expert=n_expert)
        notes += [f"{p.text}: {p.reason}" for p in rb.problems]
        ne = n_expert or int(rb.experts.max()) + 1
        if n_expert is None:
            notes.append(f"binary routing trace: n_expert taken as {ne} (the largest id + 1)")
        lk = from_routing_bin(rb, ne, layer_bytes)
    else:
        raise ValueError(f"{name or 'input'}: not a route trace (it looks like {kind})")
    if not lk.sizes_known:
        notes.append("no expert sizes in the trace: budgets are expert slots")
    return lk, notes
