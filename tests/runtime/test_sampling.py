"""Seeded sampling: reproducible, and streamed == fully resident under sampling too."""

from __future__ import annotations

import numpy as np
import pytest

from bmoe_top.runtime.engine import Engine
from bmoe_top.runtime.models import make_model
from bmoe_top.runtime.sampling import GREEDY, Sampling

SAMPLED = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.2, seed=7)


def test_greedy_is_argmax_and_sampling_is_seeded():
    rng_logits = np.random.default_rng(0).normal(size=257).astype(np.float32)
    assert GREEDY.pick(rng_logits, [1, 2], GREEDY.rng()) == int(np.argmax(rng_logits))
    a = [SAMPLED.pick(rng_logits, [3], r) for r in [SAMPLED.rng()] for _ in range(20)]
    b = [SAMPLED.pick(rng_logits, [3], r) for r in [SAMPLED.rng()] for _ in range(20)]
    assert a == b and len(set(a)) > 1
    # top-k 1 is greedy whatever the temperature; a huge repeat penalty avoids the repeated token
    top = int(np.argmax(rng_logits))
    assert Sampling(temperature=2.0, top_k=1).pick(rng_logits, None, np.random.default_rng(1)) == top
    assert Sampling(repeat_penalty=1e9).pick(np.abs(rng_logits), [top], np.random.default_rng(1)) != top


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-2),
                                 dict(repeat_penalty=0)])
def test_out_of_range_is_a_value_error(bad):
    with pytest.raises(ValueError):
        Sampling(**bad)


def test_streamed_equals_resident_when_sampling(tmp_path):
    path = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=3)
    kw = dict(n_ctx=256, n_batch=64, n_threads=2, flash_attn=False, sampling=SAMPLED)
    with Engine(path, stream=False, **kw) as e:
        want = [e.generate("sampling test", 16).tokens, e.generate("again", 16).tokens]
    with Engine(path, cache_mb=0.01, force_cache=True, **kw) as e:
        got = [e.generate("sampling test", 16).tokens, e.generate("again", 16).tokens]
        assert e.cache_stats().evictions > 0
    assert got == want
    with Engine(path, stream=False, n_ctx=256, n_batch=64, n_threads=2, flash_attn=False) as e:
        greedy = e.generate("sampling test", 16).tokens
    assert greedy != want[0]  # sampling really changed the choice
