"""runtime/cache_policy.py in-process on a real Engine (tiny generated model): profile fill hottest
first, hits_profile only for never-evicted profile experts, adaptive swaps with the hysteresis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bmoe_top.parsers.strp import StrpProfile
from bmoe_top.runtime.cache_policy import HYSTERESIS, HYSTERESIS_PICKS, ROUND_TOKENS, MoeCacheExt


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("m") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture
def engine(tiny):
    from bmoe_top.runtime.engine import Engine

    eng = Engine(tiny, n_ctx=256, n_threads=1, cache_mb=0.5)
    yield eng
    eng.close()


def test_profile_fill_and_profile_hits(engine):
    pairs = np.array([[1, 3], [0, 2], [0, 5], [1, 0], [1, 6], [0, 0], [0, 1]])
    ext = MoeCacheExt(engine, profile=StrpProfile(2, 8, 4, pairs))
    slots = ext.slots
    assert ext.prefilled == min(slots, len(pairs)) > 0
    chosen = {tuple(p) for p in pairs[: ext.prefilled].tolist()}
    assert set(engine.cache.lru.keys()) == chosen == ext.profile_keys
    # hottest is most recently used: evicted last
    assert list(engine.cache.lru.keys())[-1] == (1, 3)
    assert engine.cache.hits == 0 and engine.cache.misses == 0  # a fill is not a lookup
    c0 = ext.counters()
    assert c0.prefilled == ext.prefilled and c0.extra_read_bytes > 0 and c0.upload_bytes == 0
    hp = []
    for i in range(6):
        engine.generate(f"turn {i} of a profile test", 12)
        assert ext.profile_keys <= set(engine.cache.lru.keys())  # evicted ones left the set
        c = ext.counters()
        assert c.hits_profile <= c.hits
        assert all(a <= b for a, b in zip(c.layer_hits_profile, c.layer_hits))
        assert sum(c.layer_hits_profile) == c.hits_profile
        hp.append(c.hits_profile)
        # upload bytes are exactly the misses' reads; the profile fill is counted apart
        assert c.upload_bytes == sum(m * b for m, b in zip(c.layer_misses, engine.layout.expert_bytes))
        assert c.extra_read_bytes == c0.extra_read_bytes
    # once every profile expert was evicted, profile hits stop growing
    if not ext.profile_keys:
        engine.generate("one more", 8)
        assert ext.counters().hits_profile == hp[-1]


def test_adaptive_rebalance_hysteresis(engine):
    ext = MoeCacheExt(engine, adaptive=True)
    engine.generate("fill the cache a little", 4)
    c = engine.cache
    res = list(c.lru.keys())
    assert res
    missing = [(il, e) for il in range(2) for e in range(8) if (il, e) not in c.lru]
    # make the cache full so every swap needs a victim
    while ext._room() >= ext.max_expert_bytes and missing:
        il, e = missing.pop()
        ext._admit(il, e)
    res = list(c.lru.keys())
    ext.heat[:] = 0.0
    ext._g = 1.0
    for il, e in res:
        ext.heat[il, e] = 10.0
    (il_a, e_a), (il_b, e_b) = missing[0], missing[1]
    ext.heat[il_a, e_a] = HYSTERESIS * 10.0 + HYSTERESIS_PICKS - 0.5  # not enough
    assert ext.rebalance() == 0
    ext.heat[il_a, e_a] = HYSTERESIS * 10.0 + HYSTERESIS_PICKS + 0.5  # enough
    ext.heat[il_b, e_b] = 5.0
    swaps0 = ext.swaps
    assert ext.rebalance() == 1 and ext.swaps == swaps0 + 1
    assert (il_a, e_a) in c.lru and (il_b, e_b) not in c.lru
    assert len(c.lru) == len(res)
    assert c.resident_bytes <= c.budget


def test_adaptive_rounds_during_generation(engine):
    ext = MoeCacheExt(engine, adaptive=True)
    n = 0
    i = 0
    while n < 3 * ROUND_TOKENS:  # the random model may end a generation early (end of generation token)
        n += engine.generate(f"the adaptive cache follows the text {i}", 3 * ROUND_TOKENS,
                             on_token=lambda st: ext.after_token()).n_tokens
        i += 1
    assert ext.n_gen == n and ext.swap_rounds == n // ROUND_TOKENS
    assert ext.counters().swaps == ext.swaps >= 0
    assert engine.cache.resident_bytes <= engine.cache.budget
    # decayed heat: half-life 350 tokens -> the clock scale grew by 2^(n/350)
    assert ext._g == pytest.approx(2 ** (n / 350.0))


def test_trace_counts_every_token_every_layer(tiny):
    from bmoe_top.runtime.engine import Engine
    from bmoe_top.runtime.strp import make_profile, trace_counts

    eng = Engine(tiny, n_ctx=128, n_threads=1, cache_mb=64)
    try:
        text = "Experts are routed per token; " * 12  # longer than one window: several chunks
        routed = np.zeros(eng.n_layer, dtype=np.int64)
        counts, n = trace_counts(eng, text, routed=routed)
        n_text = len(eng.tokenize(text, add_special=False))
        assert n == n_text and routed[0] == n_text
        # each routed token picked n_expert_used distinct experts at each MoE layer
        assert (counts.sum(axis=1) == routed * eng.n_expert_used).all()
        # llama.cpp computes the last layer only for each batch's output token
        assert 0 < routed[-1] < routed[0]
        prof, n2 = make_profile(eng, text, slots=4)
        assert n2 == n and prof.slots == 4
        freq = (counts / routed[:, None]).reshape(-1)
        ranked = [il * eng.n_expert + e for il, e in prof.pairs.tolist()]
        assert all(freq[a] >= freq[b] for a, b in zip(ranked, ranked[1:]))  # hottest first, by frequency
        assert any(il == eng.n_layer - 1 for il, _ in prof.pairs.tolist()[:8])  # the last layer is not starved
    finally:
        eng.close()
