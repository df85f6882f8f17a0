"""The live LRU curve: fed token by token it ends where the offline one-pass replay ends, and at
every step it equals the offline replay of the tokens so far."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.routing import random_routing
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.live import LiveLru
from bmoe_top.tui.analysis.lookups import from_routing


def test_live_curve_equals_the_offline_replay_at_every_token() -> None:
    rng = np.random.default_rng(21)
    n_layer, n_expert, k = 4, 12, 3
    lb = [3, 2, 3, 0]  # the last layer has no MoE
    dec = random_routing(rng, 80, n_layer, n_expert, k)
    dec[:, 3, :] = -1
    pre = random_routing(rng, 9, n_layer, n_expert, k)
    pre[:, 3, :] = -1
    live = LiveLru(n_layer, n_expert, lb, budgets=np.arange(0, 3 * 12 * 8 + 1))
    live.feed_prefill(pre)
    for t in range(dec.shape[0]):
        live.feed_token(dec[t])
        if t % 13 == 0 or t == dec.shape[0] - 1:
            off = C.lru_curve(from_routing(dec[: t + 1], lb, n_expert, pre), live.budgets)
            cur = live.curve()
            assert np.array_equal(cur.decode_hits, off.decode_hits)
            assert np.array_equal(cur.hit_bytes, off.hit_bytes)
            assert np.array_equal(cur.layer_hits, off.layer_hits)
            assert cur.decode_lookups == off.decode_lookups and cur.decode_tokens == t + 1
    assert live.hit_pct_at(1e9) == pytest.approx(float(off.decode_hit_pct[-1]))


def test_live_grows_past_its_first_capacity() -> None:
    rng = np.random.default_rng(2)
    dec = random_routing(rng, 1500, 2, 8, 2)  # more batches than the initial 1024
    live = LiveLru(2, 8, [1, 1], points=16)
    for t in range(dec.shape[0]):
        live.feed_token(dec[t])
    off = C.lru_curve(from_routing(dec, [1, 1], 8), live.budgets)
    assert np.array_equal(live.curve().decode_hits, off.decode_hits)


def test_live_grows_several_times_with_layers_of_different_bytes() -> None:
    """Each growth rebuilds the Fenwick tree of resident bytes from the items' last batches: after
    several doublings the curve is still the offline replay's, bytes and all."""
    rng = np.random.default_rng(5)
    dec = random_routing(rng, 2600, 3, 12, 3)  # 7,800 batches: the capacity doubles three times
    live = LiveLru(3, 12, [3, 7, 11], points=24)
    live.feed_tokens(dec[:40])
    for t in range(40, dec.shape[0], 97):
        live.feed_tokens(dec[t:t + 97])
    off = C.lru_curve(from_routing(dec, [3, 7, 11], 12), live.budgets)
    assert np.array_equal(live.curve().decode_hits, off.decode_hits)
    assert np.array_equal(live.curve().hit_bytes, off.hit_bytes)


def test_live_rejects_bad_input() -> None:
    live = LiveLru(2, 4, [1, 1])
    with pytest.raises(ValueError):
        live.feed_token([[1, 2]])
    with pytest.raises(ValueError):
        live.feed_token([[1, 9], [0, 1]])
    with pytest.raises(ValueError):
        LiveLru(2, 4, [1])
    assert live.curve().decode_lookups == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n_tok=st.integers(1, 40), n_layer=st.integers(1, 5), k=st.integers(1, 20),
       cuts=st.lists(st.integers(0, 40), max_size=4))
def test_tokens_fed_together_hit_as_fed_one_by_one(seed: int, n_tok: int, n_layer: int, k: int,
                                                   cuts: list[int]) -> None:
    """feed_tokens (one compiled call for many tokens) gives the same hits, bytes, per-layer hits
    and counts as feed_token on each token in turn: random routing with repeats and holes (-1),
    a layer without MoE, prompts in between, fed in random slices."""
    rng = np.random.default_rng(seed)
    n_expert = 6
    lb = rng.integers(0, 4, n_layer)
    dec = rng.integers(-1, n_expert, (n_tok, n_layer, k))  # repeats within a layer, -1 holes
    pre = rng.integers(-1, n_expert, (3, n_layer, k))
    one = LiveLru(n_layer, n_expert, lb, points=32)
    many = LiveLru(n_layer, n_expert, lb, points=32)
    one.feed_prefill(pre)
    many.feed_prefill(pre)
    bounds = sorted({0, n_tok, *(c for c in cuts if c < n_tok)})
    for lo, hi in zip(bounds, bounds[1:]):
        for t in range(lo, hi):
            one.feed_token(dec[t])
        many.feed_tokens(dec[lo:hi])
        one.feed_prefill(pre[:1])
        many.feed_prefill(pre[:1])
    a, b = one.curve(), many.curve()
    assert np.array_equal(a.decode_hits, b.decode_hits)
    assert np.array_equal(a.hit_bytes, b.hit_bytes)
    assert np.array_equal(a.layer_hits, b.layer_hits)
    assert (a.decode_lookups, a.decode_tokens) == (b.decode_lookups, b.decode_tokens)
    assert np.array_equal(one.layer_lookups, many.layer_lookups) and one.decode_bytes == many.decode_bytes


def test_feed_tokens_rejects_bad_input_and_feeds_nothing() -> None:
    live = LiveLru(2, 4, [1, 1])
    with pytest.raises(ValueError):
        live.feed_tokens([[1, 2]])
    with pytest.raises(ValueError):
        live.feed_tokens([[[0, 1], [1, 2]], [[1, 9], [0, 1]]])
    assert live.curve().decode_lookups == 0 and live.decode_tokens == 0


def test_live_state_stays_bounded_and_the_curve_exact_over_the_whole_run() -> None:
    """48 layers x top-8: 1,200 tokens are 460,800 lookups, seven times the log's room, so the
    log is compacted again and again. The memory the replay holds (numpy's allocations, traced)
    does not grow from token 300 to token 1,200, and the curve still equals the offline replay of
    every token fed since the start."""
    import gc
    import tracemalloc

    from helpers.routing import SCALE_LAYER_BYTES, zipf_routing

    routing = zipf_routing(1200, seed=3)
    live = LiveLru(48, 128, SCALE_LAYER_BYTES, points=64)
    live.feed_tokens(routing[:5])
    size0 = live.state_bytes()
    # what the replay's own code holds: another test's thread still alive in this worker may
    # allocate meanwhile, and the process-wide total would count it
    ours = [tracemalloc.Filter(True, "*/tui/analysis/*")]
    tracemalloc.start()
    try:
        live.feed_tokens(routing[5:300])
        gc.collect()
        held_300 = sum(s.size for s in tracemalloc.take_snapshot().filter_traces(ours).statistics("filename"))
        for t in range(300, 1200, 50):
            live.feed_tokens(routing[t:t + 50])
        gc.collect()
        held_1200 = sum(s.size for s in tracemalloc.take_snapshot().filter_traces(ours).statistics("filename"))
    finally:
        tracemalloc.stop()
    assert live.state_bytes() == size0
    assert live._state.compactions >= 5
    assert held_300 > 0 and held_1200 - held_300 < 64 * 1024, (held_300, held_1200)
    off = C.lru_curve(from_routing(routing, SCALE_LAYER_BYTES, 128), live.budgets)
    cur = live.curve()
    assert np.array_equal(cur.decode_hits, off.decode_hits)
    assert np.array_equal(cur.hit_bytes, off.hit_bytes)
    assert np.array_equal(cur.layer_hits, off.layer_hits)
    assert cur.decode_tokens == 1200
