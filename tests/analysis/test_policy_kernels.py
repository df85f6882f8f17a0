"""The multi-budget policy kernels against the kernels they replaced: the per-budget kernels
(tests/helpers/policy_per_budget.py, one call per budget) and, before those, buckets of linked
lists walked budget by budget (tests/helpers/policy_reference.py): the same decode hits, hit
bytes and per-layer hits at every budget, on random traces with prefill chunks, several expert
sizes and budgets from 0 past the bank, in groups of any size from 1 to 64 budgets, on one thread
and on several."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.policy_per_budget import replay_per_budget
from helpers.policy_reference import POLICY_BELADY, POLICY_FIFO, POLICY_LFU, POLICY_SIEVE, policy_run_reference
from helpers.routing import random_lookups
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.lookups import Lookups

CODES = {"lfu": POLICY_LFU, "sieve": POLICY_SIEVE, "belady": POLICY_BELADY, "fifo": POLICY_FIFO}


def _reference(lk: Lookups, policy: str, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nb = budgets.shape[0]
    hd, hb = np.zeros(nb, dtype=np.int64), np.zeros(nb, dtype=np.int64)
    hl = np.zeros((lk.n_layer, nb), dtype=np.int64)
    nu = C._next_use(lk).astype(np.int64)
    policy_run_reference(CODES[policy], lk.item, lk.batch_first(), lk.decode, lk.layer, lk.item_bytes, budgets, nu,
                         hd, hb, hl)
    return hd, hb, hl


@st.composite
def traces(draw: st.DrawFn, min_tokens: int = 1) -> Lookups:
    seed = draw(st.integers(0, 2**31))
    n_layer = draw(st.integers(1, 4))
    n_expert = draw(st.integers(2, 12))
    k = draw(st.integers(1, n_expert))
    sizes = draw(st.lists(st.integers(1, 5), min_size=n_layer, max_size=n_layer))
    n_tokens = draw(st.integers(min_tokens, 60 + min_tokens))
    return random_lookups(np.random.default_rng(seed), n_tokens=n_tokens, n_layer=n_layer, n_expert=n_expert, k=k,
                          prefill_tokens=draw(st.integers(0, 8)),
                          prefill_batch=draw(st.one_of(st.none(), st.integers(1, 4))), layer_bytes=sizes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lk=traces(), threads=st.sampled_from([1, 3]))
def test_policy_kernels_equal_the_replaced_kernel(lk: Lookups, threads: int) -> None:
    budgets = np.arange(0, lk.bank_bytes + 2, dtype=np.int64)
    curves = C.policy_curves(lk, tuple(CODES), budgets, threads=threads)
    for policy in CODES:
        hd, hb, hl = _reference(lk, policy, budgets)
        c = curves[policy]
        assert np.array_equal(c.decode_hits, hd), policy
        assert np.array_equal(c.hit_bytes, hb), policy
        assert np.array_equal(c.layer_hits, hl), policy


@pytest.mark.parametrize("policy", list(CODES))
def test_a_long_skewed_trace(policy: str) -> None:
    """Thousands of batches over few experts: heap keys refreshed many times, counts in the hundreds."""
    lk = random_lookups(np.random.default_rng(9), n_tokens=1500, n_layer=3, n_expert=24, k=4, prefill_tokens=30,
                        prefill_batch=8, layer_bytes=[2, 3, 2])
    budgets = np.unique(np.linspace(0, lk.bank_bytes, 40).astype(np.int64))
    hd, hb, hl = _reference(lk, policy, budgets)
    c = C.policy_curve(lk, policy, budgets)
    assert np.array_equal(c.decode_hits, hd) and np.array_equal(c.hit_bytes, hb) and np.array_equal(c.layer_hits, hl)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lk=traces(min_tokens=20), group=st.integers(1, K.GROUP_MAX))
def test_multi_budget_kernels_equal_one_call_per_budget(lk: Lookups, group: int) -> None:
    """Every budget from 1 byte past the bank, in kernel calls of ``group`` budgets each (the
    last one shorter): each budget gets exactly what the per-budget kernel gives it alone, in its
    own column and no other."""
    budgets = np.arange(1, lk.bank_bytes + 3, dtype=np.int64)
    nb = budgets.shape[0]
    lay = np.repeat(np.arange(lk.n_layer, dtype=np.int64), lk.n_expert)
    item, bf, nu = C._compact_items(lk), lk.batch_first(), C._next_use(lk)
    for policy in CODES:
        ref = np.zeros(nb, np.int64), np.zeros(nb, np.int64), np.zeros((lk.n_layer, nb), np.int64)
        replay_per_budget(policy, item, bf, lk.decode, lay, lk.item_bytes, budgets, nu, *ref)
        got = np.full(nb, -1, np.int64), np.full(nb, -1, np.int64), np.full((lk.n_layer, nb), -1, np.int64)
        for j0 in range(0, nb, group):
            args = (item, bf, lk.decode, lay, lk.item_bytes, budgets[j0:j0 + group], j0)
            if policy == "lfu":
                K.lfu_budgets(*args, *got)
            elif policy == "belady":
                K.belady_budgets(*args, nu, *got)
            else:
                K.queue_budgets(policy == "sieve", *args, *got)
        for r, g in zip(ref, got):
            assert np.array_equal(g, r), policy
