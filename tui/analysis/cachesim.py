"""Replay routing through expert-cache policies at every budget (the what-if core).

Semantics (runtime/expert_cache.py ``ExpertCache``; docs/analysis.md "Runtime semantics"): one
lookup per unique expert per layer batch, decided against the cache as the batch found it;
duplicates only promote; the batch's own entries are never evicted to make room for it; a
prompt chunk is one batch per layer; the budget is bytes of resident expert slices (no page
rounding: the runtime accounts whole slices, ``expert_bytes`` per layer); a budget of 0 is no
cache. Hit figures are the runtime's definition: hits over **decode** lookups (prefill lookups
change the cache but are not counted), named ``decode_hit_pct``.

Policies: ``lru`` (the runtime's, one pass for all budgets), ``lfu``, ``fifo``, ``sieve``,
``belady`` (offline: evict the expert needed farthest ahead: the ceiling), ``static`` (a profile
of the hottest experts from a train part, scored on a test part), ``lru_layer_equal`` and
``lru_layer_alloc`` (one LRU per layer: the budget split evenly, or by :mod:`.layers`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bmoe_top.parsers.strp import StrpProfile, profile_from_counts

from . import _kernels as K
from .lookups import Lookups, layer_lookups, with_profile

__all__ = ["Curve", "LruState", "POLICIES", "dense_budgets", "sweep_budgets", "lru_curve", "lru_hit_flags",
           "replay_lru", "policy_curve", "static_curve", "static_ranking", "layer_curves",
           "lru_profile_curve", "compulsory_decode_misses", "strp_from_lookups", "MIB"]

MIB = 1024 * 1024
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]

#: policy name -> what it models (docs/analysis.md "Policies")
POLICIES: dict[str, str] = {
    "lru": "least recently used: bmoe-run's cache",
    "lfu": "least frequently used (lookups since the start; ties: least recent)",
    "fifo": "first in, first out",
    "sieve": "SIEVE: FIFO with a visited bit and a moving hand",
    "belady": "Belady: evict the expert needed farthest ahead (offline ceiling)",
    "static": "static profile of the hottest experts (train part), nothing else kept",
    "lru_profile": "LRU filled at load from the train part's profile (bmoe-run --moe-cache-profile)",
    "lru_layer_equal": "one LRU per layer, budget split evenly",
    "lru_layer_alloc": "one LRU per layer, budget allocated greedily by each layer's curve",
}


@dataclass(frozen=True, slots=True, eq=False)
class Curve:
    """One policy's replay at each budget. Arrays over budgets have length ``n_budgets``.

    ``budgets`` int64 bytes (ascending); ``decode_hits`` int64 hits among the decode lookups;
    ``hit_bytes`` int64 bytes of those hits; ``layer_hits`` int64 [n_layer, n_budgets];
    ``decode_lookups``/``decode_bytes``/``layer_lookups`` the totals they are out of;
    ``decode_tokens`` tokens the decode lookups belong to. ``note``: what the numbers assume.
    """

    policy: str
    budgets: I64
    decode_hits: I64
    hit_bytes: I64
    layer_hits: I64
    decode_lookups: int
    decode_bytes: int
    layer_lookups: I64
    decode_tokens: int
    note: str = ""

    @property
    def budgets_mib(self) -> F64:
        return self.budgets / MIB

    @property
    def decode_hit_pct(self) -> F64:
        """Hits per 100 decode lookups (the runtime's hit %), NaN without decode lookups."""
        if self.decode_lookups == 0:
            return np.full(self.budgets.shape[0], np.nan)
        return 100.0 * self.decode_hits / self.decode_lookups

    @property
    def read_mib_per_token(self) -> F64:
        """MiB read from flash per decode token (the misses' bytes), NaN without decode tokens."""
        if self.decode_tokens == 0:
            return np.full(self.budgets.shape[0], np.nan)
        return (self.decode_bytes - self.hit_bytes) / MIB / self.decode_tokens

    def io_s_per_token(self, read_mib_s: float) -> F64:
        """Estimated flash read seconds per token at ``read_mib_s`` MiB/s (serial reads).
        Raises ValueError for a bandwidth <= 0."""
        if not read_mib_s > 0:
            raise ValueError(f"read bandwidth must be > 0 MiB/s (got {read_mib_s})")
        return self.read_mib_per_token / read_mib_s

    def at(self, budget: int) -> int:
        """Index of ``budget`` (bytes) in ``budgets``. Raises KeyError if it was not replayed."""
        j = int(np.searchsorted(self.budgets, budget))
        if j >= self.budgets.shape[0] or int(self.budgets[j]) != int(budget):
            raise KeyError(f"budget {budget} bytes was not replayed")
        return j


def _check_budgets(budgets: npt.ArrayLike) -> I64:
    b = np.asarray(budgets, dtype=np.float64).reshape(-1)
    if b.size == 0:
        raise ValueError("no budgets to replay")
    if not np.isfinite(b).all() or (b < 0).any():
        raise ValueError("budgets must be finite byte counts >= 0")
    return np.unique(np.floor(b).astype(np.int64))


def dense_budgets(lk: Lookups, max_points: int = 512) -> I64:
    """Budgets (bytes) from 0 to the whole bank in steps of whole smallest experts, at most
    about ``max_points`` of them: the x axis of a curve "over all budgets"."""
    moe = lk.moe_layers()
    if moe.size == 0:
        return np.zeros(1, dtype=np.int64)
    unit = int(lk.layer_bytes()[moe].min())
    bank = lk.bank_bytes
    steps = max(1, -(-bank // unit // max(1, max_points)))
    out = np.arange(0, bank + 1, unit * steps, dtype=np.int64)
    return np.unique(np.append(out, bank))


def sweep_budgets(lk: Lookups, n: int = 50, extra: npt.ArrayLike = ()) -> I64:
    """``n`` budgets (bytes) evenly spaced from the token cycle T to the whole bank, plus ``extra``
    (e.g. the run's own budget): the default what-if sweep."""
    lo, hi = lk.token_cycle_bytes, lk.bank_bytes
    pts = np.linspace(lo, max(lo, hi), max(2, n))
    return _check_budgets(np.concatenate([pts, np.asarray(extra, dtype=np.float64).reshape(-1)]))


def _totals(lk: Lookups) -> tuple[int, int, I64]:
    dec = lk.decode
    dl = int(dec.sum())
    db = int(lk.item_bytes[lk.item[dec]].sum())
    ll = np.bincount(lk.layer[dec], minlength=lk.n_layer).astype(np.int64)
    return dl, db, ll


class LruState:
    """The one-pass LRU replay at every budget of ``budgets``, resumable batch by batch.

    ``feed(lk_item, bfirst, ...)`` is internal; use :func:`lru_curve` (a whole trace) or
    :class:`bmoe_top.tui.analysis.live.LiveLru` (token by token). Memory: n_items x n_budgets bytes.
    """

    def __init__(self, n_items: int, n_layer: int, item_bytes: I64, budgets: I64, batch_capacity: int,
                 max_batch: int):
        nb = budgets.shape[0]
        self.budgets = budgets
        self.size = item_bytes
        self.last_batch = np.full(n_items, -1, dtype=np.int64)
        self.last_rpos = np.zeros(n_items, dtype=np.int64)
        self.status = np.ones((n_items, nb), dtype=np.uint8)
        self.srange = np.tile(np.array([0, nb, nb], dtype=np.int64), (n_items, 1))  # never looked up: all miss
        self.fen = np.zeros(max(1, batch_capacity) + 1, dtype=np.int64)
        self.over = np.zeros(nb, dtype=np.uint8)
        self.bover = np.zeros(nb, dtype=np.int64)
        self.scal = np.zeros(K.N_SCALARS, dtype=np.int64)
        self.stage = np.zeros((max(1, max_batch), nb), dtype=np.uint8)
        self.hit_dec = np.zeros(nb + 1, dtype=np.int64)
        self.hit_pre = np.zeros(nb + 1, dtype=np.int64)
        self.hitb_dec = np.zeros(nb + 1, dtype=np.int64)
        self.hit_layer = np.zeros((n_layer, nb + 1), dtype=np.int64)

    def grow(self, batch_capacity: int, max_batch: int) -> None:
        """Room for ``batch_capacity`` batches of up to ``max_batch`` lookups (keeps the state)."""
        if batch_capacity + 1 > self.fen.shape[0]:
            cap = max(batch_capacity, 2 * (self.fen.shape[0] - 1))
            # rebuild the Fenwick tree from the items' last batches: node i holds the bytes of
            # the batches (i - lowbit(i), i], a difference of two prefix sums
            seen = self.last_batch >= 0
            point = np.zeros(cap + 1, dtype=np.int64)
            np.add.at(point, self.last_batch[seen] + 1, self.size[seen])
            prefix = np.cumsum(point)
            i = np.arange(cap + 1, dtype=np.int64)
            fen = prefix - prefix[i - (i & -i)]
            fen[0] = 0
            self.fen = fen
        if max_batch > self.stage.shape[0]:
            self.stage = np.zeros((max_batch, self.budgets.shape[0]), dtype=np.uint8)

    def feed(self, item: I64, bfirst: I64, b0: int, b1: int, decode: npt.NDArray[np.bool_], layer: I64,
             hit_out: U8 | None = None) -> None:
        """Replay batches ``b0 .. b1-1`` of the lookup log ``item`` (``bfirst`` their starts)."""
        out = hit_out if hit_out is not None else np.zeros((0, self.budgets.shape[0]), dtype=np.uint8)
        K.lru_feed(item, bfirst, b0, b1, decode, layer, self.size, self.budgets, self.last_batch, self.last_rpos,
                   self.status, self.srange, self.fen, self.over, self.bover, self.scal, self.stage, self.hit_dec,
                   self.hit_pre, self.hitb_dec, self.hit_layer, out)

    def counts(self) -> tuple[I64, I64, I64, I64]:
        """(decode hits, prefill hits, decode hit bytes, per-layer decode hits) at each budget."""
        nb = self.budgets.shape[0]
        return (np.cumsum(self.hit_dec)[:nb], np.cumsum(self.hit_pre)[:nb], np.cumsum(self.hitb_dec)[:nb],
                np.cumsum(self.hit_layer, axis=1)[:, :nb])


def _max_batch(bfirst: I64) -> int:
    return int(np.diff(bfirst).max()) if bfirst.shape[0] > 1 else 1


def _lru_state(lk: Lookups, budgets: I64, hit_out: U8 | None = None) -> LruState:
    bf = lk.batch_first()
    st = LruState(lk.n_items, lk.n_layer, lk.item_bytes, budgets, lk.n_batches, _max_batch(bf))
    st.feed(lk.item, bf, 0, lk.n_batches, lk.decode, lk.layer, hit_out)
    return st


def lru_curve(lk: Lookups, budgets: npt.ArrayLike | None = None) -> Curve:
    """The runtime's LRU at every budget in one pass (default: :func:`dense_budgets`).

    Exact: the same hits as replaying each budget on its own (:func:`replay_lru`), proved by
    tests/analysis/test_cachesim.py; docs/analysis.md "One pass for every budget".
    Raises ValueError for negative or non-finite budgets.
    """
    b = dense_budgets(lk) if budgets is None else _check_budgets(budgets)
    st = _lru_state(lk, b)
    hd, _hp, hb, hl = st.counts()
    dl, db, ll = _totals(lk)
    return Curve("lru", b, hd, hb, hl, dl, db, ll, lk.n_decode_tokens)


def lru_hit_flags(lk: Lookups, budgets: npt.ArrayLike) -> U8:
    """uint8 [n, n_budgets]: 1 where the runtime's LRU hits that lookup at that budget (one pass);
    columns follow the sorted distinct budgets. Compare a column with ``lk.recorded_hit`` to check
    a run recorded at that budget."""
    b = _check_budgets(budgets)
    out = np.zeros((lk.n, b.shape[0]), dtype=np.uint8)
    _lru_state(lk, b, out)
    return out


def replay_lru(lk: Lookups, budget: int) -> U8:
    """The reference replay: bmoe-run's ``ExpertCache`` rules written out plainly (an
    ``OrderedDict`` LRU at one budget, bytes), slow and obvious. Returns uint8 [n] hit flags.
    ``budget`` 0 = no cache (no hits)."""
    hits = np.zeros(lk.n, dtype=np.uint8)
    lru: OrderedDict[int, int] = OrderedDict()
    resident = 0
    bf = lk.batch_first().tolist()
    items = lk.item.tolist()
    sizes = lk.item_bytes.tolist()
    for b in range(lk.n_batches):
        routed = items[bf[b]:bf[b + 1]]
        need = set(routed)
        missing = []
        for r, x in enumerate(routed):
            if budget > 0 and x in lru:
                hits[bf[b] + r] = 1
                lru.move_to_end(x)
            else:
                missing.append(x)
        if budget == 0 or not missing:
            continue
        nbytes = sum(sizes[x] for x in missing)
        if resident + nbytes > budget:
            for key in list(lru.keys()):
                if resident + nbytes <= budget:
                    break
                if key in need:
                    continue
                resident -= lru.pop(key)
        for x in missing:
            lru[x] = sizes[x]
            resident += sizes[x]
    return hits


def _next_use(lk: Lookups) -> I64:
    """int64 [n]: the batch of the next **decode** lookup of the same item (``n_batches`` if
    none). Only decode hits are scored, so a prefill lookup is no reason to keep an expert."""
    n = lk.n
    out = np.full(n, lk.n_batches, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort((np.arange(n), lk.item))  # by item, then lookup order
    it = lk.item[order]
    bt = lk.batch[order]
    dpos = np.flatnonzero(lk.decode[order])
    k = np.searchsorted(dpos, np.arange(n), side="right")
    has = k < dpos.shape[0]
    cand = dpos[np.minimum(k, max(0, dpos.shape[0] - 1))] if dpos.size else np.zeros(n, dtype=np.int64)
    ok = has & (it[cand] == it)
    out[order] = np.where(ok, bt[cand], lk.n_batches)
    return out


def policy_curve(lk: Lookups, policy: str, budgets: npt.ArrayLike) -> Curve:
    """Replay ``policy`` (``lfu``, ``fifo``, ``sieve``, ``belady``) at each budget (bytes).

    Belady evicts the expert whose next decode lookup is farthest ahead (prefill lookups are not
    scored, so they are no reason to keep an expert). With experts of one size this is the
    optimum under the runtime's rules (a batch's experts must all be cached); with several sizes
    it is the classic farthest-next-use ceiling estimate. Raises ValueError for an unknown policy or bad budgets.
    """
    codes = {"lfu": K.POLICY_LFU, "sieve": K.POLICY_SIEVE, "belady": K.POLICY_BELADY, "fifo": K.POLICY_FIFO}
    if policy == "lru":
        return lru_curve(lk, budgets)
    if policy not in codes:
        raise ValueError(f"unknown policy {policy!r}; choose one of lru, {', '.join(codes)}")
    b = _check_budgets(budgets)
    nb = b.shape[0]
    hd = np.zeros(nb, dtype=np.int64)
    hb = np.zeros(nb, dtype=np.int64)
    hl = np.zeros((lk.n_layer, nb), dtype=np.int64)
    nu = _next_use(lk) if policy == "belady" else np.zeros(lk.n, dtype=np.int64)
    K.policy_run(codes[policy], lk.item, lk.batch_first(), lk.decode, lk.layer, lk.item_bytes, b, nu, hd, hb, hl)
    dl, db, ll = _totals(lk)
    note = ""
    if policy == "belady" and np.unique(lk.layer_bytes()[lk.moe_layers()]).size > 1:
        note = "experts of several sizes: farthest-next-use is a ceiling estimate, not a proven optimum"
    return Curve(policy, b, hd, hb, hl, dl, db, ll, lk.n_decode_tokens, note)


def static_ranking(train: Lookups) -> I64:
    """int64 [n_ranked, 2] (layer, expert) pairs, hottest first: lookup counts over the whole
    train part (prefill and decode), ties by layer then expert (parsers/strp.py
    ``profile_from_counts``)."""
    counts = np.bincount(train.item, minlength=train.n_items).reshape(train.n_layer, train.n_expert)
    return profile_from_counts(counts).pairs


def static_curve(train: Lookups, test: Lookups, budgets: npt.ArrayLike) -> Curve:
    """A static profile built on ``train`` and scored on ``test``'s decode lookups: at each
    budget the profile's experts are loaded hottest first while they fit (as ``bmoe-run
    --moe-cache-profile`` fills the cache) and never evicted; nothing else is kept (the hybrid
    reading of moe-cache-reference.md). Raises ValueError if the two parts differ in shape."""
    if (train.n_layer, train.n_expert) != (test.n_layer, test.n_expert):
        raise ValueError("train and test traces have different n_layer x n_expert")
    b = _check_budgets(budgets)
    pairs = static_ranking(train)
    ids = pairs[:, 0] * test.n_expert + pairs[:, 1]
    rank_bytes = np.full(test.n_items, 1 << 62, dtype=np.int64)
    rank_bytes[ids] = np.cumsum(test.item_bytes[ids])
    nb = b.shape[0]
    hd = np.zeros(nb, dtype=np.int64)
    hb = np.zeros(nb, dtype=np.int64)
    hl = np.zeros((test.n_layer, nb), dtype=np.int64)
    # the fill stops at the first expert that does not fit (runtime/expert_cache.py ``preload``)
    K.static_hits(test.item, test.decode, test.layer, test.item_bytes, b, rank_bytes, hd, hb, hl)
    dl, db, ll = _totals(test)
    return Curve("static", b, hd, hb, hl, dl, db, ll, test.n_decode_tokens,
                 f"profile from {train.n_decode_tokens} train tokens, scored on {test.n_decode_tokens} test tokens")


def lru_profile_curve(train: Lookups, test: Lookups, budgets: npt.ArrayLike) -> Curve:
    """LRU on ``test`` after a fill from the profile of ``train`` (:func:`static_ranking`), as
    ``bmoe-run --moe-cache-profile`` runs: the profile decides the start, LRU the rest."""
    if (train.n_layer, train.n_expert) != (test.n_layer, test.n_expert):
        raise ValueError("train and test traces have different n_layer x n_expert")
    c = lru_curve(with_profile(test, static_ranking(train)), budgets)
    return Curve("lru_profile", c.budgets, c.decode_hits, c.hit_bytes, c.layer_hits, c.decode_lookups,
                 c.decode_bytes, c.layer_lookups, c.decode_tokens,
                 f"profile from {train.n_decode_tokens} train tokens, scored on {test.n_decode_tokens} test tokens")


@dataclass(frozen=True, slots=True, eq=False)
class LayerCurves:
    """Per-layer LRU curves, each layer its own cache: ``hits`` int64 [n_layer, n_expert + 1]
    decode hits with c = 0..n_expert expert slots; ``hit_bytes`` the same in bytes; ``lookups``
    int64 [n_layer] decode lookups; ``layer_bytes`` int64 [n_layer] one expert's bytes."""

    hits: I64
    hit_bytes: I64
    lookups: I64
    layer_bytes: I64
    moe_layers: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def layer_curves(lk: Lookups) -> LayerCurves:
    """One LRU per layer replayed at every slot count (one pass per layer)."""
    lb = lk.layer_bytes()
    hits = np.zeros((lk.n_layer, lk.n_expert + 1), dtype=np.int64)
    hbytes = np.zeros((lk.n_layer, lk.n_expert + 1), dtype=np.int64)
    moe = lk.moe_layers()
    for il in moe.tolist():
        sub = layer_lookups(lk, il)
        b = np.arange(lk.n_expert + 1, dtype=np.int64) * int(lb[il])
        st = _lru_state(sub, b)
        hd, _hp, hb, _hl = st.counts()
        hits[il] = hd
        hbytes[il] = hb
    _dl, _db, ll = _totals(lk)
    return LayerCurves(hits, hbytes, ll, lb, moe)


def compulsory_decode_misses(lk: Lookups) -> int:
    """Decode lookups of experts never looked up before (no cache can hit them): the
    compulsory-miss ceiling is ``100 * (1 - this / decode lookups)`` %."""
    _, first = np.unique(lk.item, return_index=True)
    return int(lk.decode[first].sum())


def strp_from_lookups(lk: Lookups, slots: int = 0) -> StrpProfile:
    """An STRP profile (parsers/strp.py) ranking experts by how often the trace looked them up,
    hottest first, for ``bmoe-run --moe-cache-profile``. ``slots`` is informational (the
    experts the intended budget holds)."""
    counts = np.bincount(lk.item, minlength=lk.n_items).reshape(lk.n_layer, lk.n_expert)
    prof = profile_from_counts(counts, slots=slots)
    return prof
