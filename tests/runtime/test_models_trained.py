"""The trained demo MoE shipped in bmoe_top/data (tools/train_demo_model.py, docs/demo-model.md).

llama.cpp must reproduce the PyTorch model's greedy continuations committed next to the GGUF
(``*.reference.json``, written by tools/convert_demo_model.py from the PyTorch fp32 model): that
is the conversion proof, re-checked here without torch."""

from __future__ import annotations

import json

import gguf
import pytest

from bmoe_top.runtime import demo_model
from bmoe_top.runtime.demo_model import DEFAULT_DEMO_CACHE_MB
from bmoe_top.runtime.models import expert_bank_bytes, llama_greedy
from bmoe_top.runtime.vocab import EOS_ID

TRAINED = demo_model.trained_demo_path()
pytestmark = pytest.mark.skipif(TRAINED is None, reason="trained demo model not in bmoe_top/data")


def test_trained_model_is_the_default_and_small() -> None:
    assert demo_model.default_model_path() == TRAINED
    assert TRAINED.stat().st_size < 30 * 2**20


def test_trained_model_layout() -> None:
    reader = gguf.GGUFReader(str(TRAINED))
    assert reader.fields["general.architecture"].contents() == "qwen3moe"
    n_layer = reader.fields["qwen3moe.block_count"].contents()
    n_expert = reader.fields["qwen3moe.expert_count"].contents()
    assert 4 <= n_layer <= 8 and 64 <= n_expert <= 256
    assert reader.fields["qwen3moe.expert_used_count"].contents() == 4
    types = {t.name: t.tensor_type for t in reader.tensors}
    for il in range(n_layer):
        for kind in ("gate", "up", "down"):
            assert types[f"blk.{il}.ffn_{kind}_exps.weight"] == gguf.GGMLQuantizationType.Q8_0
        assert types[f"blk.{il}.ffn_gate_inp.weight"] == gguf.GGMLQuantizationType.F32
    # the default budget leaves most of the bank on flash, so misses and evictions show
    assert expert_bank_bytes(TRAINED) / 2**20 >= 3 * DEFAULT_DEMO_CACHE_MB


#: top-1 minus top-2 logit below which two implementations may rightly pick different tokens:
#: llama.cpp's q8_0 matmuls also quantize the activations to 8 bits, PyTorch computes in fp32.
NEAR_TIE = 0.1


@pytest.mark.parametrize("which", ["references", "references_dequantized"])
def test_llama_cpp_reproduces_pytorch_greedy(which: str) -> None:
    ref = json.loads(TRAINED.with_name(TRAINED.name.replace(".gguf", ".reference.json")).read_text())
    refs = ref[which]
    assert len(refs) >= 3
    identical = 0
    for r in refs:
        want = r["tokens"]
        got = llama_greedy(TRAINED, list(r["prompt"].encode()), len(want), n_ctx=512)
        if got == want:
            identical += 1
            continue
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        # the paths may only part at a near-tie of the PyTorch model, never at a clear choice
        assert r["margins"][i] < NEAR_TIE, (r["prompt"], i, r["margins"][i])
        assert i >= 8, (r["prompt"], i)
    assert identical >= len(refs) // 2


def test_continuation_is_readable_python() -> None:
    out = llama_greedy(TRAINED, list(b"import os\nimport sys\n\n\ndef main("), 120)
    text = bytes(t for t in out if t != EOS_ID).decode("utf-8")  # valid UTF-8
    printable = sum(ch.isprintable() or ch in "\n\t" for ch in text)
    assert printable / max(1, len(text)) > 0.95
    assert any(word in text for word in ("self", "return", "def ", "if ", "for ", "None", "print"))
