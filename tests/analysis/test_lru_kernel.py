"""The one-pass LRU kernel (tui/analysis/_kernels.py ``lru_feed``) decides most budgets from the
depth range of a lookup; it gives exactly the outputs of the kernel that walked every budget for
every lookup (tests/helpers/lru_reference.py): hit difference arrays, per-lookup flags, the
oversized-batch state, and the per-budget miss flags its ranges stand for."""

from __future__ import annotations

from typing import Any

import numpy as np
from helpers.lru_reference import lru_feed_reference
from helpers.routing import random_routing
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis.cachesim import LruState
from bmoe_top.tui.analysis.lookups import from_routing


def _trace(rng: np.random.Generator, n_items: int, n_batches: int, max_batch: int, repeats: bool,
           ) -> tuple[np.ndarray, np.ndarray]:
    """(item, bfirst): batches of 1..max_batch lookups, distinct within a batch unless ``repeats``."""
    items, bfirst = [], [0]
    for _ in range(n_batches):
        m = int(rng.integers(1, max_batch + 1))
        if repeats:
            batch = rng.integers(0, n_items, m)
        else:
            batch = rng.choice(n_items, size=min(m, n_items), replace=False)
        items.extend(batch.tolist())
        bfirst.append(len(items))
    return np.asarray(items, dtype=np.int64), np.asarray(bfirst, dtype=np.int64)


def _ref_state(n_items: int, n_layer: int, nb: int, n_batches: int, max_batch: int) -> dict[str, Any]:
    return {"last_batch": np.full(n_items, -1, dtype=np.int64), "last_rpos": np.zeros(n_items, dtype=np.int64),
            "status": np.ones((n_items, nb), dtype=np.uint8), "fen": np.zeros(n_batches + 1, dtype=np.int64),
            "over": np.zeros(nb, dtype=np.uint8), "bover": np.zeros(nb, dtype=np.int64),
            "scal": np.zeros(K.N_SCALARS, dtype=np.int64), "stage": np.zeros((max_batch, nb), dtype=np.uint8),
            "hit_dec": np.zeros(nb + 1, dtype=np.int64), "hit_pre": np.zeros(nb + 1, dtype=np.int64),
            "hitb_dec": np.zeros(nb + 1, dtype=np.int64), "hit_layer": np.zeros((n_layer, nb + 1), dtype=np.int64)}


def _miss_flags(st_: LruState) -> np.ndarray:
    """uint8 [n_items, n_budgets]: the per-budget miss flags that ``status`` and ``srange`` stand for."""
    nb = st_.budgets.shape[0]
    j = np.arange(nb)[None, :]
    jl, lo, hi = (st_.srange[:, c][:, None] for c in range(3))
    explicit = (j < jl) | ((j >= lo) & (j < hi))
    ranged = np.where(j < lo, 1, np.where(st_.budgets[None, :] > 0, 0, 1)).astype(np.uint8)
    return np.where(explicit, st_.status, ranged)


def _compare(item: np.ndarray, bfirst: np.ndarray, size: np.ndarray, budgets: np.ndarray, decode: np.ndarray,
             n_layer: int, cuts: list[int], flags: bool) -> None:
    n_items, nb, n_batches = size.shape[0], budgets.shape[0], bfirst.shape[0] - 1
    max_batch = int(np.diff(bfirst).max())
    ref = _ref_state(n_items, n_layer, nb, n_batches, max_batch)
    new = LruState(n_items, n_layer, size, budgets)
    layer = new.lay[item]  # the state knows an item's layer: item // (n_items // n_layer)
    rows = item.shape[0] if flags else 0
    out_ref = np.zeros((rows, nb), dtype=np.uint8)
    out_new = np.zeros((rows, nb), dtype=np.uint8)
    bounds = sorted({0, n_batches, *(c for c in cuts if c < n_batches)})
    for b0, b1 in zip(bounds, bounds[1:]):
        lru_feed_reference(item, bfirst, b0, b1, decode, layer, size, budgets, ref["last_batch"], ref["last_rpos"],
                           ref["status"], ref["fen"], ref["over"], ref["bover"], ref["scal"], ref["stage"],
                           ref["hit_dec"], ref["hit_pre"], ref["hitb_dec"], ref["hit_layer"], out_ref)
        new.feed(item, bfirst, decode, b0, b1, out_new if flags else None)
        seen = ref["last_batch"] >= 0
        assert np.array_equal(_miss_flags(new)[seen], ref["status"][seen])
    assert new.compactions == 0  # the log's batch ids are the reference's
    assert np.array_equal(new.fen[: n_batches + 1], ref["fen"])  # a node's sum does not depend on the capacity
    for name in ("hit_dec", "hit_pre", "hitb_dec", "hit_layer", "last_batch", "last_rpos", "scal"):
        assert np.array_equal(getattr(new, name), ref[name]), name
    assert np.array_equal(new.over, ref["over"])
    over = ref["over"] == 1
    assert np.array_equal(new.bover[over], ref["bover"][over])
    assert np.array_equal(out_new, out_ref)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31), n_items=st.integers(1, 14), n_batches=st.integers(1, 40),
       max_batch=st.integers(1, 12), repeats=st.booleans(), zero_sizes=st.booleans(), n_budgets=st.integers(1, 30),
       budget_top=st.integers(0, 60), cuts=st.lists(st.integers(0, 40), max_size=5), flags=st.booleans())
def test_range_kernel_equals_the_per_budget_kernel(seed: int, n_items: int, n_batches: int, max_batch: int,
                                                   repeats: bool, zero_sizes: bool, n_budgets: int,
                                                   budget_top: int, cuts: list[int], flags: bool) -> None:
    """Random traces: batches larger than some budgets (oversized), budget 0, zero-byte items,
    an item repeated in its batch, budgets closer than one item's bytes (wide bands), fed in
    random slices, with and without per-lookup flags."""
    rng = np.random.default_rng(seed)
    item, bfirst = _trace(rng, n_items, n_batches, max_batch, repeats)
    size = rng.integers(0 if zero_sizes else 1, 6, n_items).astype(np.int64)
    budgets = np.unique(np.append(rng.integers(0, budget_top + 1, n_budgets), 0 if rng.random() < 0.7 else 1))
    decode = rng.random(item.shape[0]) < 0.7
    _compare(item, bfirst, size, budgets.astype(np.int64), decode, 3, cuts, flags)


def test_range_kernel_equals_the_per_budget_kernel_at_the_live_shape() -> None:
    """48 layers x top-8 of 128 experts, a prompt, 257 budgets from 0 to the whole bank, fed a
    token at a time as the live screen feeds it."""
    rng = np.random.default_rng(11)
    n_layer, n_expert, k = 48, 128, 8
    lb = np.where(np.arange(n_layer) % 3 == 0, 3, 2)
    lk = from_routing(random_routing(rng, 120, n_layer, n_expert, k, 0.3), lb.tolist(), n_expert,
                      random_routing(rng, 6, n_layer, n_expert, k, 0.3))
    bank = int(lb.sum()) * n_expert
    budgets = np.unique(np.append(np.linspace(0, bank, 257).astype(np.int64), bank))
    bf = lk.batch_first()
    _compare(lk.item, bf, lk.item_bytes, budgets, lk.decode, n_layer, list(range(n_layer, lk.n_batches, n_layer)),
             False)
