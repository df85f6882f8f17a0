"""Split GGUFs (``name-0000i-of-0000N.gguf``, llama.cpp's layout): every shard's experts are
streamed, in both shapes of split (a first shard with metadata only, and experts spread over
several shards), byte for byte as the same split model fully resident."""

from __future__ import annotations

import pytest

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.runtime.engine import Engine, ModelError
from bmoe_top.runtime.models import make_model, split_gguf

PROMPT = "Split models keep their experts in several files."
KW = dict(n_ctx=256, n_batch=64, n_threads=1, flash_attn=False)
BUDGETS = {"nocache": dict(cache_mb=0), "small": dict(cache_mb=0.01, force_cache=True), "full": dict(cache_mb=1e6)}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    single = make_model(d / "tiny.gguf", preset="tiny", qtype="q8_0", seed=5)
    return {
        "single": [single],
        "metadata-first": split_gguf(single, d / "meta.gguf", 100, small_first_shard=True),
        "spread": split_gguf(single, d / "spread.gguf", 8),
    }


@pytest.fixture(scope="module")
def reference(splits):
    with Engine(splits["single"][0], stream=False, **KW) as e:
        return e.generate(PROMPT, 12).tokens


def test_layout_reads_every_shard(splits):
    one = read_layout(splits["single"][0])
    meta = read_layout(splits["metadata-first"][0])
    spread = read_layout(splits["spread"][0])
    assert len(meta.paths) == 2 and len(spread.paths) == 4
    assert set(meta.tensors) == set(spread.tensors) == set(one.tensors)  # every expert tensor found
    assert {i.shard for i in meta.tensors.values()} == {1}  # none in the metadata-only shard
    assert len({i.shard for i in spread.tensors.values()}) >= 2  # experts spread over shards
    assert meta.expert_bank_bytes == spread.expert_bank_bytes == one.expert_bank_bytes


@pytest.mark.parametrize("shape", ["metadata-first", "spread"])
@pytest.mark.parametrize("budget", list(BUDGETS))
def test_split_streamed_equals_resident(splits, reference, shape, budget):
    first = splits[shape][0]
    with Engine(first, stream=False, **KW) as e:
        assert e.generate(PROMPT, 12).tokens == reference  # the split loads as the single file
    with Engine(first, **KW, **BUDGETS[budget]) as e:
        got = e.generate(PROMPT, 12).tokens
        cs = e.cache_stats()
        shards_read = {i.shard for i in e.layout.tensors.values()}
    assert got == reference
    assert cs.read_bytes > 0 and len(shards_read) >= 1


def test_later_or_missing_shard_is_refused(splits, tmp_path):
    with pytest.raises(ModelError, match="shard 2 of 4.*first shard"):
        read_layout(splits["spread"][1])
    lone = tmp_path / "lone-00001-of-00003.gguf"
    lone.write_bytes(splits["spread"][0].read_bytes())
    with pytest.raises(ModelError, match="missing"):
        read_layout(lone)
