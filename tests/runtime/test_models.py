"""Synthetic MoE GGUF models (runtime/models.py): determinism, llama.cpp loads and decodes them,
the byte tokenizer round-trips, and the requested quantization type is really in the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.runtime import demo_model, models
from bmoe_top.runtime.demo_model import DEFAULT_DEMO_CACHE_MB
from bmoe_top.runtime.models import PRESETS, expert_bank_bytes, llama_greedy, make_model
from bmoe_top.runtime.vocab import EOS_ID, N_VOCAB

PROMPT = list(b"def main(argv):\n    ")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def tiny_q8(model_dir: Path) -> Path:
    return make_model(model_dir / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def vocab_llama(tiny_q8: Path):
    from llama_cpp import Llama

    return Llama(str(tiny_q8), vocab_only=True, verbose=False)


def tensor_types(path: Path) -> dict[str, gguf.GGMLQuantizationType]:
    return {t.name: t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}


def test_same_seed_same_bytes_other_seed_other_bytes(model_dir: Path, tiny_q8: Path) -> None:
    again = make_model(model_dir / "again" / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)
    other = make_model(model_dir / "tiny-q8_0-seed1.gguf", preset="tiny", qtype="q8_0", seed=1)
    assert again.read_bytes() == tiny_q8.read_bytes()
    assert other.read_bytes() != tiny_q8.read_bytes()
    assert other.stat().st_size == tiny_q8.stat().st_size
    # no temp files are left next to the outputs
    assert sorted(p.name for p in (model_dir / "again").iterdir()) == ["tiny-q8_0.gguf"]


def test_file_carries_every_qwen3moe_key(tiny_q8: Path) -> None:
    reader = gguf.GGUFReader(str(tiny_q8))
    shape = PRESETS["tiny"]

    def val(key: str):
        field = reader.fields[key]
        return field.contents()

    assert val("general.architecture") == "qwen3moe"
    assert val("qwen3moe.block_count") == shape.n_layer
    assert val("qwen3moe.embedding_length") == shape.n_embd
    assert val("qwen3moe.expert_count") == shape.n_expert
    assert val("qwen3moe.expert_used_count") == shape.n_expert_used
    assert val("qwen3moe.expert_feed_forward_length") == shape.n_ff_exp
    assert val("qwen3moe.attention.head_count") == shape.n_head
    assert val("qwen3moe.attention.head_count_kv") == shape.n_head_kv
    assert val("qwen3moe.attention.key_length") == shape.head_dim
    assert val("tokenizer.ggml.model") == "gpt2"
    assert val("tokenizer.ggml.eos_token_id") == EOS_ID
    gate = next(t for t in reader.tensors if t.name == "blk.1.ffn_gate_exps.weight")
    # ggml order: ne = (n_embd, n_ff_exp, n_expert); expert e is bytes [e*nb2, (e+1)*nb2)
    assert [int(x) for x in gate.shape] == [shape.n_embd, shape.n_ff_exp, shape.n_expert]


@pytest.mark.parametrize("qtype,expect", [
    ("f32", {"exps": gguf.GGMLQuantizationType.F32}),
    ("f16", {"exps": gguf.GGMLQuantizationType.F16}),
    ("q8_0", {"exps": gguf.GGMLQuantizationType.Q8_0}),
    ("q4_0", {"exps": gguf.GGMLQuantizationType.Q4_0}),
    # rows of 256 take Q4_K; ffn_down rows are n_ff_exp=128 long, so llama.cpp falls back there
    ("q4_k", {"gate_up": gguf.GGMLQuantizationType.Q4_K}),
])
def test_quantized_type_really_applied(model_dir: Path, tiny_q8: Path, qtype: str, expect: dict) -> None:
    path = tiny_q8 if qtype == "q8_0" else make_model(model_dir / f"tiny-{qtype}.gguf", "tiny", qtype)
    types = tensor_types(path)
    for name, ttype in types.items():
        if name.endswith(("_norm.weight", "ffn_gate_inp.weight")):
            assert ttype == gguf.GGMLQuantizationType.F32, name  # norms and router stay f32
        elif "exps" in expect and "_exps." in name:
            assert ttype == expect["exps"], name
        elif "gate_up" in expect and name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            assert ttype == expect["gate_up"], name


def test_tokenizer_round_trips_through_llama_cpp(vocab_llama) -> None:
    for text in ["hello world", "def f(x):\n\treturn x  # é ü 漢字 🙂", "<|endoftext|> \x00\x01 ĀĀ Ā", ""]:
        raw = text.encode("utf-8")
        ids = vocab_llama.tokenize(raw, add_bos=True, special=False)
        assert ids == list(raw)  # one token per byte, no BOS added
        assert vocab_llama.detokenize(ids) == raw
    assert vocab_llama.token_eos() == EOS_ID
    assert vocab_llama.n_vocab() == N_VOCAB


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_tokenizer_round_trip_any_text(vocab_llama, text: str) -> None:
    raw = text.encode("utf-8")
    ids = vocab_llama.tokenize(raw, add_bos=False, special=False)
    assert ids == list(raw)
    assert vocab_llama.detokenize(ids) == raw


@pytest.mark.parametrize("preset,qtype", [("tiny", "f32"), ("tiny", "q8_0"), ("tiny", "q4_0"),
                                          ("demo", "q8_0"), ("bench", "q4_0")])
def test_llama_cpp_loads_and_greedy_decodes(model_dir: Path, tiny_q8: Path, preset: str, qtype: str) -> None:
    path = tiny_q8 if (preset, qtype) == ("tiny", "q8_0") else make_model(
        model_dir / f"{preset}-{qtype}.gguf", preset, qtype)
    first = llama_greedy(path, PROMPT, 24, stop_at_eos=False)
    second = llama_greedy(path, PROMPT, 24, stop_at_eos=False)
    assert len(first) == 24
    assert all(0 <= t < N_VOCAB for t in first)
    assert first == second  # greedy decoding is deterministic
    assert len(set(first)) > 1  # random weights still give varied tokens
    if preset == "bench":
        path.unlink()  # 160 MiB: do not keep it around for the rest of the module


def test_demo_bank_is_several_times_the_default_budget(model_dir: Path) -> None:
    path = make_model(model_dir / "demo-q8_0.gguf", "demo", "q8_0") if not (
        model_dir / "demo-q8_0.gguf").exists() else model_dir / "demo-q8_0.gguf"
    bank_mib = expert_bank_bytes(path) / 2**20
    assert bank_mib >= 3 * DEFAULT_DEMO_CACHE_MB


def test_synthetic_demo_created_once_in_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = demo_model.synthetic_demo_path()
    assert path.is_file() and path.is_relative_to(tmp_path / "cache")
    mtime = path.stat().st_mtime_ns
    assert demo_model.synthetic_demo_path() == path and path.stat().st_mtime_ns == mtime  # not rewritten
    default = demo_model.default_model_path()
    trained = demo_model.trained_demo_path()
    assert default == (trained if trained is not None else path)


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bmoe_top.runtime.models", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_writes_model_and_rejects_bad_input(tmp_path: Path) -> None:
    ok = _run_cli("--preset", "tiny", "--qtype", "q4_0", str(tmp_path / "m.gguf"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"wrote {tmp_path / 'm.gguf'} preset=tiny qtype=q4_0")
    assert gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors

    bad_preset = _run_cli("--preset", "huge", str(tmp_path / "x.gguf"))
    assert bad_preset.returncode == 2 and "invalid choice" in bad_preset.stderr
    assert "Traceback" not in bad_preset.stderr

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bad_dir = _run_cli("--preset", "tiny", str(blocker / "m.gguf"))
    assert bad_dir.returncode == 1
    assert bad_dir.stderr.startswith("bmoe-run make-model: error:")
    assert "Traceback" not in bad_dir.stderr


def test_write_f32_gguf_rejects_wrong_shape(tmp_path: Path) -> None:
    shape = PRESETS["tiny"]
    with pytest.raises(ValueError, match="token_embd.weight"):
        models.write_f32_gguf(tmp_path / "bad.gguf", shape, lambda name, s: np.zeros((3, 3), np.float32))


# -- the pooled writer (the large preset's: quantized rows drawn from a pool, no f32 file) ---------
def test_pooled_writer_is_deterministic_and_quantized(tmp_path: Path) -> None:
    shape = PRESETS["tiny"]
    a = models.write_pooled_gguf(tmp_path / "a.gguf", shape, "q8_0", seed=4)
    b = models.write_pooled_gguf(tmp_path / "b.gguf", shape, "q8_0", seed=4)
    c = models.write_pooled_gguf(tmp_path / "c.gguf", shape, "q8_0", seed=5)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    reader = gguf.GGUFReader(str(a))
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.ffn_up_exps.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.ffn_gate_inp.weight"] == gguf.GGMLQuantizationType.F32  # the router stays f32
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    up = next(t for t in reader.tensors if t.name == "blk.1.ffn_up_exps.weight")
    experts = np.asarray(up.data).reshape(shape.n_expert, -1)
    assert len({e.tobytes() for e in experts}) == shape.n_expert  # no two experts alike


def test_pooled_model_decodes_and_streams_like_resident(tmp_path: Path) -> None:
    from bmoe_top.runtime.engine import Engine

    path = models.write_pooled_gguf(tmp_path / "pooled.gguf", PRESETS["tiny"], "q8_0", seed=2)
    assert len(llama_greedy(path, PROMPT, 8, stop_at_eos=False)) == 8
    kw = dict(n_ctx=256, n_batch=64, n_threads=2)
    with Engine(path, stream=False, **kw) as e:
        want = e.generate("pooled rows", 12).tokens
    with Engine(path, cache_mb=0.2, force_cache=True, **kw) as e:
        assert e.generate("pooled rows", 12).tokens == want


def test_pooled_writer_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pooled writer takes"):
        models.write_pooled_gguf(tmp_path / "x.gguf", PRESETS["tiny"], "f16", seed=0)
    with pytest.raises(ValueError, match="not a multiple of the q4_k block"):  # tiny's 128-wide rows
        models.write_pooled_gguf(tmp_path / "y.gguf", PRESETS["tiny"], "q4_k", seed=0)
    bad = _run_cli("--preset", "large", "--qtype", "f16", str(tmp_path / "z.gguf"))
    assert bad.returncode == 1 and "the large preset takes --qtype" in bad.stderr
    assert not (tmp_path / "z.gguf").exists()


def test_the_large_preset_is_a_multi_gib_moe() -> None:
    s = PRESETS["large"]
    assert s.n_layer >= 16 and s.n_expert == 128 and s.n_expert_used in (4, 8)
    bank = s.n_layer * s.n_expert * s.expert_params() * 144 / 256  # Q4_K: 144 bytes per 256 weights
    assert bank >= 2 * 2**30
