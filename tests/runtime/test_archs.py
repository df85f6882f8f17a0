"""Every MoE architecture llama.cpp 0.3.36 builds: a synthetic model of it (``make-model --arch``)
streams byte for byte as it runs fully resident, with the cache off, a small (evicting) and a
full budget, the fused gate/up variant too where the architecture has one (and the model's
tokens change when only its expert weights do, so the identity is not vacuous); an architecture
bmoe-run cannot stream is refused with a message that names the reason. The rows are
runtime/arch_specs.json (``stream``), which tools/arch_table.py writes and docs/runtime.md shows."""

from __future__ import annotations

import pytest

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.runtime.arch_models import arch_specs, make_arch_model
from bmoe_top.runtime.engine import Engine, EngineError

PROMPT = "The quick brown fox"
KW = dict(n_ctx=256, n_batch=64, n_threads=1, flash_attn=False)  # 1 thread: no barrier stalls on a busy machine
BUDGETS = {"nocache": dict(cache_mb=0), "small": dict(cache_mb=0.01, force_cache=True), "full": dict(cache_mb=1e6)}
SPECS = arch_specs()
STREAMED = sorted(a for a, s in SPECS.items() if s.get("stream") == "streamed")
RESIDENT_ONLY = sorted(a for a, s in SPECS.items() if s.get("stream") == "resident only")


@pytest.fixture(scope="module")
def arch_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("archs")


def _tokens(path, **kw):
    with Engine(path, **KW, **kw) as e:
        return e.generate(PROMPT, 8).tokens


@pytest.mark.parametrize("arch", STREAMED)
def test_streamed_equals_resident(arch_dir, arch):
    variants = [False] + ([True] if SPECS[arch].get("fused_tensors") else [])
    for fused in variants:
        path = make_arch_model(arch_dir / f"{arch}{'-fused' if fused else ''}.gguf", arch, seed=1, fused=fused)
        want = _tokens(path, stream=False)
        assert len(want) == 8
        if not fused:  # the tokens depend on the experts, so identity below means something
            other = make_arch_model(arch_dir / f"{arch}-other.gguf", arch, seed=1, expert_seed=2)
            assert _tokens(other, stream=False) != want, f"{arch}: tokens do not depend on the experts"
        for budget in BUDGETS.values():
            assert _tokens(path, **budget) == want, (arch, fused, budget)
        # three quarters of the bank: frame pools where the graph allows them
        # (docs/runtime.md "A budget below the bank: frames")
        bank_mb = read_layout(path).expert_bank_bytes / 2**20
        with Engine(path, **KW, cache_mb=0.75 * bank_mb) as e:
            assert e.generate(PROMPT, 8).tokens == want, (arch, fused, "frames")


@pytest.mark.parametrize(("arch", "frames"), [("qwen3moe", True), ("deepseek2", True), ("gpt-oss", False)])
def test_frames_where_only_expert_products_read_the_ids(arch_dir, arch, frames):
    """Frame pools need the routed ids read only by the weights' gather and the expert products;
    gpt-oss also adds per-expert biases indexed by them, so its experts stay in place."""
    path = make_arch_model(arch_dir / f"{arch}-frames.gguf", arch, seed=1)
    bank_mb = read_layout(path).expert_bank_bytes / 2**20
    with Engine(path, **KW, cache_mb=0.75 * bank_mb) as e:
        assert (e.cache is not None and e.cache.frames is not None) == frames


@pytest.mark.parametrize("arch", RESIDENT_ONLY)
def test_refused_with_the_reason(arch_dir, arch):
    path = make_arch_model(arch_dir / f"{arch}.gguf", arch, seed=1)
    assert len(_tokens(path, stream=False)) == 8  # fully resident works
    with pytest.raises(EngineError) as err:
        _tokens(path, cache_mb=0)
    msg = str(err.value)
    assert "\n" not in msg and any(w in msg for w in ("cannot stream", "refusing to stream", "nothing to stream"))


def test_every_architecture_has_a_row():
    """No architecture of the table is left without a verdict, and the unknown one is named."""
    assert all(s.get("stream") in ("streamed", "resident only", "refused", "untested") for s in SPECS.values())
    assert all(s.get("stream_why") for s in SPECS.values() if s.get("stream") != "streamed")
    assert {"qwen3moe", "qwen2moe", "gpt-oss", "llama4"} <= set(STREAMED)
    with pytest.raises(ValueError, match="unknown architecture"):
        make_arch_model("/nonexistent/x.gguf", "no-such-arch")
