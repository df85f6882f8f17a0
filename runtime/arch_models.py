"""Small synthetic GGUFs of every MoE architecture llama.cpp 0.3.36 builds (``bmoe-run make-model
--arch NAME``), from the table ``arch_specs.json`` next to this file.

The table was found from llama.cpp itself (``tools/probe_arch.py``): per architecture the GGUF
keys it needs and every tensor with its shape (ggml order), shared experts, expert biases and
expert groups included where the architecture reads them, and a fused gate/up variant where
llama.cpp takes ``ffn_gate_up_exps``. The weights are random (seeded, deterministic) and small;
1-D norm weights are ones, biases small, state-space decay terms negative, hash-routing tables
(``ffn_gate_tid2eid``) distinct int32 expert ids, the end-of-text token's output row zero (greedy
decoding never stops early). Routed-expert tensors
are f16, everything else f32: a model is a few MiB and decodes in milliseconds.

``status`` of an architecture in the table: ``loads`` (a model can be written), ``dense`` (llama.cpp
builds it without routed experts) or ``refused`` (``why``: what llama.cpp needs that a synthetic
model cannot give).
"""

from __future__ import annotations

import contextlib
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bmoe_top.outfile import place_file, temp_beside

from .vocab import EOS_ID, byte_vocab

__all__ = ["arch_specs", "make_arch_model", "ARCH_TYPES"]

#: the table's value types -> gguf value types (by name, resolved lazily)
ARCH_TYPES = {"u32": "UINT32", "i32": "INT32", "f32": "FLOAT32", "bool": "BOOL", "str": "STRING"}


@cache
def arch_specs() -> dict[str, dict[str, Any]]:
    """The architecture table (``arch_specs.json``): name -> {status, kv, tensors, ...}."""
    text = (resources.files("bmoe_top.runtime") / "arch_specs.json").read_text(encoding="utf-8")
    table: dict[str, dict[str, Any]] = json.loads(text)
    return table


def _tensor(name: str, ne: list[int], rng: np.random.Generator, n_expert: int) -> np.ndarray:
    shape = tuple(reversed([max(1, int(x)) for x in ne]))
    expert = "_exps." in name and len(ne) >= 3
    if "tid2eid" in name:  # hash routing: each token's n_expert_used distinct expert ids (int32)
        return np.stack([rng.permutation(n_expert)[:shape[-1]] for _ in range(shape[0])]).astype(np.int32)
    if name.endswith(".bias") or name.endswith("_b.bias"):
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)
    if len(ne) == 1:
        if "ssm_a" in name or name.endswith("a_log"):
            return (-np.exp(0.1 * rng.standard_normal(shape))).astype(np.float32)
        if "sinks" in name:
            return (0.1 * rng.standard_normal(shape)).astype(np.float32)
        return np.ones(shape, dtype=np.float32)
    fan_in = max(1, shape[-1])
    scale = 1.0 / np.sqrt(fan_in)
    if name == "token_embd.weight":
        scale = 1.0
    elif name.endswith("ffn_gate_inp.weight"):
        scale = 2.0 / np.sqrt(fan_in)  # router logits spread: routing is not uniform
    elif name == "output.weight":
        scale = 4.0 / np.sqrt(fan_in)
    arr = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    if name in ("output.weight", "token_embd.weight") and shape[0] > EOS_ID:
        arr[EOS_ID] = 0.0  # end-of-text never wins the argmax: every decode runs its full length
    return arr.astype(np.float16) if expert else arr


def make_arch_model(out_path: str | os.PathLike[str], arch: str, *, seed: int = 0, fused: bool = False,
                    force: bool = True, expert_seed: int | None = None) -> Path:
    """Write a synthetic GGUF of ``arch`` to ``out_path`` (atomically: ``bmoe_top.outfile``; a
    symbolic link there is refused, an existing file replaced only with ``force``) and return its path.

    ``fused``: the variant with ``ffn_gate_up_exps`` (only where the table has one). ``expert_seed``:
    draw the routed-expert tensors (``*_exps.*``) from this seed instead of ``seed``, every other
    tensor unchanged (a model that differs from ``seed``'s in its experts only). Raises
    ValueError for an architecture the table has no model for (unknown, dense, or refused: the
    message says why)."""
    import gguf

    specs = arch_specs()
    spec = specs.get(arch)
    if spec is None:
        raise ValueError(f"unknown architecture {arch!r}; one of: {', '.join(sorted(specs))}")
    if spec.get("status") != "loads":
        raise ValueError(f"no synthetic {arch} model: {spec.get('why', spec.get('status'))}")
    tensors = spec.get("fused_tensors") if fused else spec["tensors"]
    if tensors is None:
        raise ValueError(f"{arch} has no fused gate/up variant in llama.cpp")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(out, force=force)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, arch)
        w.add_name(f"bmoe synthetic {arch} seed {seed}")
        for key, (typ, val) in spec["kv"].items():
            if typ.startswith("arr_"):
                sub = getattr(gguf.GGUFValueType, ARCH_TYPES[typ[4:]])
                w.add_key_value(key, list(val), gguf.GGUFValueType.ARRAY, sub)
            else:
                w.add_key_value(key, val, getattr(gguf.GGUFValueType, ARCH_TYPES[typ]))
        toks, types, merges = byte_vocab()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(toks)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(EOS_ID)
        w.add_eos_token_id(EOS_ID)
        w.add_add_bos_token(False)
        n_expert = next((int(v) for k, (_, v) in spec["kv"].items() if k.endswith(".expert_count")), 1)
        for i, (name, ne) in enumerate(tensors):
            tseed = expert_seed if expert_seed is not None and "_exps." in name else seed
            w.add_tensor(name, _tensor(name, ne, np.random.default_rng([tseed, i]), n_expert))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        place_file(tmp, out, force=force)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return out
