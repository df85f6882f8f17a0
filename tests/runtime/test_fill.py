"""The fill (docs/runtime.md "Every expert fits: the fill"): with a budget that holds the whole
expert bank, the experts no prompt routed are read right after the first prefill, so every
decoded token finds the bank resident and reads nothing; the tokens stay the resident run's.
A budget below the bank, no cache and ``fill=False`` read nothing beyond what is routed. A read
that fails fails the generation; the layers read before it stay resident and counted, and the
next turn fills the rest.
"""

from __future__ import annotations

import pytest

from bmoe_top.runtime.engine import Engine, GenerationError
from bmoe_top.runtime.models import make_model
from bmoe_top.runtime.telemetry import summary_text_lines

SHORT = "a"  # BOS and one token: at most 2 x top-2 of the tiny preset's 8 experts a layer
PROMPT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("fill") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=5)


def _engine(path, **kw):
    return Engine(path, n_ctx=256, n_batch=64, n_threads=2, flash_attn=False, **kw)


def test_the_rest_of_the_bank_is_read_after_the_first_prefill(model):
    with _engine(model, cache_mb=1e6, fill=False) as lazy:
        lazy.generate(SHORT, 0)
        routed = lazy.cache.resident_bytes
        assert 0 < routed < lazy.cache.streamed_bytes
        lazy_tokens = lazy.generate(SHORT, 16).tokens
    with _engine(model, stream=False) as resident:
        resident_tokens = resident.generate(SHORT, 16).tokens
    with _engine(model, cache_mb=1e6) as e:
        c = e.cache
        assert c is not None and c.budget is None
        reads0 = c.read_bytes
        res = e.generate(SHORT, 16)
        assert res.fill_bytes == c.streamed_bytes - routed
        assert res.fill_s > 0
        assert c.resident_bytes == c.streamed_bytes
        assert res.prefill_read_bytes == routed + res.fill_bytes
        assert c.read_bytes - reads0 == c.streamed_bytes
        assert res.read_bytes == 0 and res.hit_pct == 100.0
        assert not c.observed  # the routing nodes are no longer materialized
        assert res.tokens == lazy_tokens == resident_tokens
        line = [ln for ln in summary_text_lines(e, res) if "evictions" in ln][0]
        assert line.endswith(f"| rest of the bank read after the prefill: {res.fill_bytes / 2**20:.0f} MiB in "
                             f"{res.fill_s:.3f} s")
        again = e.generate(PROMPT, 4)
        assert again.fill_bytes == 0 and again.prefill_read_bytes == 0
        assert "rest of the bank" not in "\n".join(summary_text_lines(e, again))


@pytest.mark.parametrize("kw", [dict(cache_mb=0.05, force_cache=True), dict(cache_mb=0),
                                dict(cache_mb=1e6, fill=False)], ids=["budget-below-the-bank", "no-cache", "fill-off"])
def test_nothing_beyond_the_routing_is_read(model, kw):
    with _engine(model, **kw) as e:
        res = e.generate(SHORT, 0)
        assert res.fill_bytes == 0
        assert res.prefill_read_bytes < e.cache.streamed_bytes


def _runs(experts: list[int]) -> int:
    """Reads of a batch of experts of one tensor: adjacent experts are one read."""
    return sum(1 for i, e in enumerate(experts) if i == 0 or experts[i - 1] != e - 1)


def test_a_failed_read_fails_the_generation_and_keeps_what_was_read(model, monkeypatch):
    monkeypatch.setenv("BMOE_INJECT_READ_ERROR", str(10**9))  # counts the reads, never fails
    with _engine(model, cache_mb=1e6, fill=False) as lazy:
        lazy.generate(SHORT, 0)
        prefill_reads = lazy.cache.reader._reads
        resident = lazy.cache.resident_ids()
        routed = lazy.cache.resident_bytes
    with _engine(model, stream=False) as e:
        reference = e.generate(SHORT, 16).tokens
    layer0, layer1 = lazy.layout.moe_layers[:2]
    missing0 = sorted(set(range(lazy.n_expert)) - set(resident[layer0]))
    fill0 = _runs(missing0) * len(lazy.cache.layer_bufs[layer0])
    monkeypatch.setenv("BMOE_INJECT_READ_ERROR", str(prefill_reads + fill0 + 1))  # the second layer's first
    with _engine(model, cache_mb=1e6) as e:
        c = e.cache
        with pytest.raises(GenerationError, match="reading the rest of the expert bank failed: .*injected"):
            e.generate(SHORT, 16)
        filled0 = len(missing0) * e.layout.expert_bytes[layer0]
        assert c.resident_bytes == routed + filled0 == c.read_bytes
        assert sorted(c.resident_ids()[layer1]) == sorted(resident[layer1])
        res = e.generate(SHORT, 16)  # the error fired once: the next turn fills the rest
        assert c.resident_bytes == c.streamed_bytes == c.read_bytes
        assert res.tokens == reference
