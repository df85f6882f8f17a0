"""Find, from llama.cpp itself, what a small synthetic GGUF of a MoE architecture must contain, and
write it to ``runtime/arch_specs.json`` (the table ``bmoe-run make-model --arch NAME`` builds from).

For each architecture the tool writes a GGUF with the byte tokenizer and a few hyper-parameters,
asks llama.cpp 0.3.36 to load it (``no_alloc``: metadata and tensor shapes only) in a worker
process, and reads the loader's error: a missing key gets a value chosen by its name, a missing
tensor gets a placeholder whose "wrong shape; expected [...]" error then gives its shape. When the
load succeeds, optional tensors the MoE reference cares about (shared experts, expert biases,
expert-probability biases) are tried one by one and kept when llama.cpp uses them. A fused
gate/up variant is tried the same way. The result is then loaded for real and decoded: the
architecture's row says whether llama.cpp builds it, and the runtime's identity tests take over.

Usage: ``python tools/probe_arch.py [--arch NAME ...] [--out runtime/arch_specs.json]``
(default: every architecture whose llama.cpp source calls ``build_moe_ffn``; needs the llama.cpp
sources of the pinned wheel, ``--src DIR``, for that list).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

from bmoe_top.runtime.vocab import byte_vocab

WORKER = r"""
import re
import sys
import llama_cpp as L
msgs = []
def cb(level, text, ud):
    msgs.append(text.decode("utf-8", "replace"))
ref = L.llama_log_callback(cb)
L.llama_log_set(ref, None)
L.llama_backend_init()
for line in sys.stdin:
    path, mode = line.split()
    msgs.clear()
    mp = L.llama_model_default_params()
    mp.no_alloc = mode == "meta"
    if mp.no_alloc:
        mp.load_mode = L.LLAMA_LOAD_MODE_NONE  # no_alloc asserts with mmap
    mp.use_extra_bufts = False
    m = L.llama_model_load_from_file(path.encode(), mp)
    text = "".join(msgs)
    err = [x for x in text.splitlines() if "error loading model" in x or "failed" in x]
    if m:
        L.llama_model_free(m)
        part = re.search(r"partial load .{0,8}used (\d+) of (\d+) tensors", text)
        used = f" used={part.group(1)} total={part.group(2)}" if part else ""
        print("@@RESULT OK" + used, flush=True)
    else:
        print("@@RESULT FAIL " + (err[0] if err else text[-300:].replace("\n", " ")), flush=True)
"""

U32, I32, F32, BOOL, STR = "u32", "i32", "f32", "bool", "str"

N_LAYER = 4
N_EMBD = 256
HEAD = 64

#: a value for a missing key, by the key's ending (first match wins)
KEY_DEFAULTS: list[tuple[str, str, object]] = [
    ("leading_dense_block_count", U32, 1), ("context_length", U32, 512), ("embedding_length", U32, N_EMBD),
    ("block_count", U32, N_LAYER),
    ("expert_shared_feed_forward_length", U32, 128), ("expert_feed_forward_length", U32, 128),
    ("feed_forward_length", U32, 256), ("attention.head_count_kv", U32, 2), ("attention.head_count", U32, 4),
    ("attention.key_length_mla", U32, HEAD), ("attention.value_length_mla", U32, HEAD),
    ("attention.key_length", U32, HEAD), ("attention.value_length", U32, HEAD),
    ("rope.dimension_count", U32, HEAD), ("attention.layer_norm_rms_epsilon", F32, 1e-6),
    ("attention.layer_norm_epsilon", F32, 1e-5), ("rope.freq_base", F32, 10000.0),
    ("expert_used_count", U32, 2), ("expert_count", U32, 8), ("expert_shared_count", U32, 1),
    ("expert_weights_scale", F32, 1.0), ("expert_weights_norm", BOOL, True),
    ("expert_gating_func", U32, 1), ("attention.q_lora_rank", U32, 64), ("attention.kv_lora_rank", U32, 64),
    ("attention.sliding_window", U32, 64), ("expert_group_count", U32, 2), ("expert_group_used_count", U32, 1),
    ("ssm.conv_kernel", U32, 4), ("ssm.inner_size", U32, 512), ("ssm.state_size", U32, 16),
    ("ssm.time_step_rank", U32, 8), ("ssm.group_count", U32, 1), ("shortconv.l_cache", U32, 3),
    ("interleave_moe_layer_step", U32, 2), ("moe_every_n_layers", U32, 2), ("nextn_predict_layers", U32, 0),
    ("attention.temperature_length", U32, 0), ("logit_scale", F32, 1.0), ("attention.clamp_kqv", F32, 8.0),
    ("residual_scale", F32, 1.0), ("embedding_scale", F32, 1.0), ("attention.scale", F32, 0.125),
    ("attention.head_count_kv_swa", U32, 2), ("rope.freq_base_swa", F32, 10000.0),
    ("final_logit_softcapping", F32, 30.0), ("attn_logit_softcapping", F32, 50.0),
    ("decoder_start_token_id", U32, 0), ("moe_latent_size", U32, 128), ("expert_chunk_size", U32, 0),
]

#: per-architecture starting values (key without the arch prefix -> [type, value]): what the
#: name-based defaults cannot guess (an assert in llama.cpp names the constraint)
_MLA = {"rope.dimension_count": [U32, 32], "attention.kv_lora_rank": [U32, 64], "attention.q_lora_rank": [U32, 64],
        "attention.head_count_kv": [U32, 1],
        "attention.key_length": [U32, 96], "attention.value_length": [U32, 64],
        "attention.key_length_mla": [U32, 64], "attention.value_length_mla": [U32, 64],
        "attention.key_length_mla_swa": [U32, 64], "attention.value_length_mla_swa": [U32, 64]}
#: expert groups (group-limited routing, DeepSeek-V3 style): 8 experts in 2 groups, 1 group used
_GROUPS = {"expert_group_count": [U32, 2], "expert_group_used_count": [U32, 1]}
_INDEXER = {"attention.indexer.top_k": [U32, 4], "attention.indexer.kpool": [U32, 2],
            "attention.indexer.head_count": [U32, 2], "attention.indexer.key_length": [U32, 64]}
#: Kimi-delta-attention hybrids: layers with no KV heads are KDA (head 64), the others MLA
_KDA = {**_MLA, "kda.head_dim": [U32, HEAD], "attention.head_count_kv": ["arr_u32", [0, 1, 0, 1]]}
SEEDS: dict[str, dict[str, list]] = {
    "bailingmoe3": {**_KDA, "kda.gate_lower_bound": [F32, -5.0]},
    "bailingmoe2": _GROUPS,
    # default embedding multipliers (grok 78, minicpm 12) drown the layers' output in a small model
    "grok": {"embedding_scale": [F32, 1.0]},
    "minicpm": {"embedding_scale": [F32, 1.0], "residual_scale": [F32, 1.0]},
    # its loader sizes K and V by all heads; sigmoid routing
    "dots1": {"attention.head_count_kv": [U32, 4], "expert_gating_func": [U32, 2]},
    "afmoe": {"attention.sliding_window": [U32, 64]},  # its graph always builds both caches (pattern 4)
    # sliding-window layers have their own head size; no per-layer embeddings (the MoE sizes have none)
    "gemma4": {"attention.key_length_swa": [U32, HEAD], "attention.value_length_swa": [U32, HEAD],
               "embedding_length_per_layer_input": [U32, 0],
               "attention.sliding_window_pattern": ["arr_bool", [True, True, True, False]]},
    # gated delta net layers: value heads x state size = inner size
    "qwen4exp": {"hyper_connection.count": [U32, 2], "ssm.inner_size": [U32, 128]},
    "qwen3next": {"ssm.inner_size": [U32, 128]}, "qwen35moe": {"ssm.inner_size": [U32, 128]},
    "deepseek2": {**_MLA, **_GROUPS},
    "deepseek2-ocr": {"rope.dimension_count": [U32, 32], "attention.head_count_kv": [U32, 4]},
    "deepseek32": {**_MLA, **_INDEXER}, "glm-dsa": {**_MLA, **_INDEXER},
    "hy_v4": {**_MLA, "expert_gating_func": [U32, 2]}, "kimi-k3": _KDA,
    # sliding and DSA layers; latent + rope = indexer head = 128 (llama.cpp's Hadamard rotations of
    # the DSA caches take one head size, a multiple of 64)
    "dots3note": {**_MLA, **_INDEXER, "attention.kv_lora_rank_swa": [U32, 64],
                  "attention.sliding_window_pattern": ["arr_u32", [1, 0, 1, 0]], "rope.dimension_count": [U32, 64],
                  "attention.key_length": [U32, 128], "attention.key_length_mla": [U32, 128],
                  "attention.key_length_mla_swa": [U32, 128], "attention.indexer.key_length": [U32, 128]},
    "mimo2": _MLA, "kimi-linear": _KDA, "glm4moe": _GROUPS,
    # KDA and DSA layers; latent = indexer head = 128 (as dots3note), no rope
    "glm5-next": {**_KDA, **_INDEXER, "hyper_connection.count": [U32, 4], "rope.dimension_count": [U32, 0],
                  "hyper_connection.epsilon": [F32, 1e-6], "hyper_connection.sinkhorn_iterations": [U32, 3],
                  "attention.kv_lora_rank": [U32, 128], "attention.key_length": [U32, 128],
                  "attention.value_length": [U32, 128], "attention.indexer.key_length": [U32, 128]},
    # one KV head (MQA) of 128; indexer (64) and rope (64) heads narrower than it (llama.cpp's
    # Hadamard rotations take multiples of 64, and an indexer as wide as the head in every cache);
    # layers of each compression (none, 4, 128); 2 output groups of rank 64; layer 0 routes by
    # token hash (tid2eid), the others by score
    "deepseek4": {**_INDEXER, "attention.head_count_kv": [U32, 1], "attention.key_length": [U32, 128],
                  "attention.value_length": [U32, 128],
                  "expert_gating_func": [U32, 4], "attention.compress_ratios": ["arr_u32", [0, 4, 128, 4]],
                  "hyper_connection.count": [U32, 4], "hyper_connection.epsilon": [F32, 1e-6],
                  "hyper_connection.sinkhorn_iterations": [U32, 3], "rope.dimension_count": [U32, 64],
                  "attention.output_group_count": [U32, 2], "attention.output_lora_rank": [U32, 64],
                  "attention.compress_rope_freq_base": [F32, 10000.0], "swiglu_clamp_exp": [F32, 10.0],
                  "hash_layer_count": [U32, 1]},
    # hybrids: a layer with no KV heads is a recurrent / convolution layer
    "jamba": {"attention.head_count_kv": ["arr_u32", [0, 2, 0, 2]]},
    "granitehybrid": {"attention.head_count_kv": ["arr_u32", [0, 2, 0, 2]]},
    "lfm2moe": {"attention.head_count_kv": ["arr_u32", [0, 2, 0, 2]]},
    "minimax-01": {"full_attention_interval": [U32, 2]},  # layers 1 and 3 attention, 0 and 2 lightning
    "nemotron_h": {"attention.head_count_kv": ["arr_u32", [0, 2, 0, 0]],
                   "feed_forward_length": ["arr_u32", [0, 0, 256, 256]]},
    "nemotron_h_moe": {"attention.head_count_kv": ["arr_u32", [0, 2, 0, 0]],
                       "feed_forward_length": ["arr_u32", [0, 0, 256, 256]]},
    "olmoe": {"attention.head_count_kv": [U32, 4]},
    "minimax-m2": {"expert_gating_func": [U32, 2]}, "smallthinker": {"expert_gating_func": [U32, 1]},
}
#: tensors an architecture needs but marks optional, or checks outside the loader's shape test:
#: (name without blk.N., ne ([1]: learn it from the loader), layers)
_GDN = [("attn_qkv.weight", [1], [0, 1, 2]), ("attn_gate.weight", [1], [0, 1, 2])]  # linear-attention layers
TENSOR_SEEDS: dict[str, list[tuple[str, list[int], list[int]]]] = {
    "laguna": [("attn_gate.weight", [N_EMBD, 4], list(range(N_LAYER)))],
    "qwen3next": _GDN, "qwen35moe": _GDN,
    # the lightning indexer's tensors are optional to the loader, not to the graph
    "glm-dsa": [(f"indexer.{n}", [1], list(range(N_LAYER)))
                for n in ("k_norm.weight", "k_norm.bias", "proj.weight", "attn_k.weight", "attn_q_b.weight")],
    # mamba-2 layers add their conv bias unconditionally
    "nemotron_h": [("ssm_conv1d.bias", [1], [0])], "nemotron_h_moe": [("ssm_conv1d.bias", [1], [0])],
    "granitehybrid": [("ssm_conv1d.bias", [1], [0, 2])],
}

#: keys whose value must be an array from the start (the loader asks for it by shape)
ARRAY_DEFAULTS: dict[str, tuple[str, list]] = {
    "rope.dimension_sections": ("arr_i32", [16, 8, 8, 0]),
}


#: keys every probe starts with (most are optional in llama.cpp, and 0 when absent)
BASE_KEYS = ["context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
             "rope.freq_base", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "expert_count",
             "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"]


def _default(key: str) -> tuple[str, object]:
    for suffix, (atyp, aval) in ARRAY_DEFAULTS.items():
        if key.endswith(suffix):
            return atyp, list(aval)
    for suffix, typ, val in KEY_DEFAULTS:
        if key.endswith(suffix):
            return typ, val
    if "count" in key or "length" in key or "size" in key or "rank" in key:
        return U32, 1
    if key.endswith(("eps", "epsilon", "scale", "base", "factor")):
        return F32, 1.0
    return U32, 1


TYPES = {U32: gguf.GGUFValueType.UINT32, I32: gguf.GGUFValueType.INT32, F32: gguf.GGUFValueType.FLOAT32,
         BOOL: gguf.GGUFValueType.BOOL, STR: gguf.GGUFValueType.STRING}
CAST = {U32: int, I32: int, F32: float, BOOL: bool, STR: str}
#: the loader's type names (gguf_type_name) -> ours
LOADER_TYPES = {"u32": U32, "uint32": U32, "i32": I32, "int32": I32, "f32": F32, "float32": F32, "bool": BOOL,
                "str": STR, "string": STR}


def write_gguf(path: Path, arch: str, kv: dict[str, list], tensors: list[list]) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    tokens, types, merges = byte_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)
    w.add_add_bos_token(False)
    for key, (typ, val) in kv.items():
        if typ.startswith("arr_"):
            sub = TYPES[typ[4:]]
            w.add_key_value(key, [CAST[typ[4:]](v) for v in val], gguf.GGUFValueType.ARRAY, sub)
        else:
            w.add_key_value(key, CAST[typ](val), TYPES[typ])
    for name, ne in tensors:
        w.add_tensor(name, np.zeros(tuple(reversed(ne)), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class Worker:
    def __init__(self) -> None:
        self.p: subprocess.Popen[str] | None = None

    def ask(self, path: Path, mode: str) -> str:
        """``OK[ used=N total=M]``, ``FAIL <loader error>`` or ``CRASH <assert>`` (the worker died)."""
        if self.p is None or self.p.poll() is not None:
            env = {**os.environ, "GGML_NO_BACKTRACE": "1"}
            self.p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env)
        assert self.p.stdin and self.p.stdout
        try:
            self.p.stdin.write(f"{path} {mode}\n")
            self.p.stdin.flush()
            while True:
                line = self.p.stdout.readline()
                if not line or line.startswith("@@RESULT "):
                    break
        except BrokenPipeError:
            line = ""
        if line:
            return line[len("@@RESULT "):].strip()
        self.p.wait()
        err = self.p.stderr.read() if self.p.stderr else ""
        self.p = None
        asserts = [x for x in err.splitlines() if "GGML_ASSERT" in x or "error" in x.lower()]
        return "CRASH " + (asserts[-1].strip() if asserts else " ".join(err.split())[-300:])


RX_KEY = re.compile(r"key not found in model: (\S+)")
RX_ARR = re.compile(r"array key not found in model: (\S+)")
RX_ARRLEN = re.compile(r"key (\S+) has wrong array length; expected (\d+), got (\d+)")
RX_TYPE = re.compile(r"key (\S+) has wrong type (\S+) but expected type (\S+)")
RX_ELTYPE = re.compile(r"(\S+) has wrong array element type (\S+)")
RX_MISSING = re.compile(r"tensor '([^']+)' not found")
RX_SHAPE = re.compile(r"tensor '([^']+)' has wrong shape; expected\s+\[?([\d,\s]+?)\]?,?\s+got")


def probe(arch: str, w: Worker, d: Path, max_steps: int = 400, kv: dict | None = None,
          tensors: list[list] | None = None) -> dict:
    """Load-and-fix until llama.cpp takes the file; from ``kv``/``tensors`` when given."""
    if kv is None:
        kv = {f"{arch}.{k}": list(_default(k)) for k in BASE_KEYS}
        for k, v in SEEDS.get(arch, {}).items():
            kv[f"{arch}.{k}"] = list(v)
    if tensors is None:
        tensors = [[f"blk.{il}.{n}", list(ne)] for n, ne, layers in TENSOR_SEEDS.get(arch, []) for il in layers]
    log: list[str] = []
    path = d / f"{arch}.gguf"
    for _ in range(max_steps):
        write_gguf(path, arch, kv, tensors)
        r = w.ask(path, "meta")
        if r.startswith("OK"):
            return {"kv": kv, "tensors": tensors, "status": "loads", "log": log}
        log.append(r)
        if m := RX_ARRLEN.search(r):
            key, n = m.group(1), int(m.group(2))
            typ, val = kv[key]
            base = val[0] if isinstance(val, list) and val else val
            kv[key] = [typ if typ.startswith("arr") else "arr_" + typ, [base] * n]
        elif (m := RX_TYPE.search(r)) and m.group(3) == "arr":
            key = m.group(1)
            typ, val = kv[key]
            kv[key] = ["arr_" + typ, [val] * N_LAYER]
        elif m := RX_TYPE.search(r):
            key, want = m.group(1), m.group(3)
            typ, val = kv.get(key, list(_default(key)))
            conv = LOADER_TYPES.get(want, U32)
            kv[key] = ["arr_" + conv, val] if isinstance(val, list) else [conv, val]
        elif m := RX_ELTYPE.search(r):
            key = m.group(1)
            typ, val = kv[key]
            order = ["arr_i32", "arr_f32", "arr_u32", "arr_bool"]
            kv[key] = [order[(order.index(typ) + 1) % len(order)] if typ in order else "arr_i32", val]
        elif m := RX_ARR.search(r):
            key = m.group(1)
            typ, val = _default(key)
            kv[key] = ["arr_" + typ, [val] * N_LAYER]
        elif m := RX_KEY.search(r):
            key = m.group(1)
            kv[key] = list(_default(key))
        elif m := RX_SHAPE.search(r):
            name = m.group(1)
            ne = [int(x) for x in m.group(2).split(",") if x.strip()]
            for t in tensors:
                if t[0] == name:
                    t[1] = ne
        elif m := RX_MISSING.search(r):
            name = m.group(1)
            known = dict(tensors)
            like = re.sub(r"^blk\.\d+\.", "blk.0.", name)  # most layers have the tensors of layer 0
            tensors.append([name, list(known[like]) if like in known and like != name else [1]])
        else:
            return {"kv": kv, "tensors": tensors, "status": "refused", "why": r, "log": log}
    return {"kv": kv, "tensors": tensors, "status": "refused", "why": "probe did not converge", "log": log}


#: optional per-layer tensors worth having when the architecture reads them
OPTIONAL = ["ffn_gate_exps.weight", "ffn_gate_inp.bias", "exp_probs_b.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias",
            "ffn_down_exps.bias", "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
            "ffn_down_shexp.weight"]


MOE_CORE = ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"]
DENSE_FFN = ["ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]


def _learn(arch: str, kv: dict, trial: list[list], w: Worker, path: Path, steps: int = 64) -> str:
    """Load ``trial`` until no placeholder shape is left; the last worker answer."""
    r = ""
    for _ in range(steps):
        write_gguf(path, arch, kv, trial)
        r = w.ask(path, "meta")
        m = RX_SHAPE.search(r)
        if r.startswith("OK") or not m:
            return r
        ne = [int(x) for x in m.group(2).split(",") if x.strip()]
        for t in trial:
            if t[0] == m.group(1):
                t[1] = ne
    return r


def add_moe(arch: str, spec: dict, w: Worker, d: Path) -> bool:
    """An architecture whose expert tensors are all optional (MoE or dense per layer) loaded as
    dense: add the routed-expert set to every layer (dropping a dense FFN it replaces)."""
    if any("_exps.weight" in n for n, _ in spec["tensors"]):
        return True
    layers = sorted({int(n.split(".")[1]) for n, _ in spec["tensors"] if n.startswith("blk.")})
    for first in (0, 1):  # every layer, or after one leading dense layer
        moe = [il for il in layers if il >= first]
        for drop_dense in (False, True):
            trial = [list(t) for t in spec["tensors"] if not (
                drop_dense and int(t[0].split(".")[1] if t[0].startswith("blk.") else -1) in moe
                and any(t[0].endswith("." + x) for x in DENSE_FFN))]
            trial += [[f"blk.{il}.{n}", [1]] for il in moe for n in MOE_CORE]
            got = probe(arch, w, d, max_steps=200, kv={k: list(v) for k, v in spec["kv"].items()}, tensors=trial)
            if got["status"] == "loads" and any("_exps.weight" in n for n, _ in got["tensors"]):
                spec["tensors"] = got["tensors"]
                return True
    return False


def add_optional(arch: str, spec: dict, w: Worker, d: Path) -> list[str]:
    """Try the optional tensors on every MoE layer; keep those llama.cpp uses."""
    moe_layers = sorted({int(n.split(".")[1]) for n, _ in spec["tensors"] if "_exps.weight" in n})
    kept: list[str] = []
    path = d / f"{arch}-opt.gguf"
    write_gguf(path, arch, spec["kv"], spec["tensors"])
    base = w.ask(path, "meta")
    for suffix in OPTIONAL:
        if any(n.endswith(suffix) for n, _ in spec["tensors"]):
            continue
        trial = [list(t) for t in spec["tensors"]] + [[f"blk.{il}.{suffix}", [1]] for il in moe_layers]
        for _ in range(len(moe_layers) + 2):
            write_gguf(path, arch, spec["kv"], trial)
            r = w.ask(path, "meta")
            m = RX_SHAPE.search(r)
            if r.startswith("OK") or not m:
                break
            ne = [int(x) for x in m.group(2).split(",") if x.strip()]
            for t in trial:
                if t[0].endswith(suffix):
                    t[1] = ne
        if r.startswith("OK") and ("used=" not in r or _used(r) == _used(base) + len(moe_layers)):
            spec["tensors"] = trial
            base = r
            kept.append(suffix)
    return kept


def add_output(arch: str, spec: dict, w: Worker, d: Path) -> bool:
    """An untied ``output.weight`` where llama.cpp takes one (most architectures tie it to the token
    embedding when absent): with tied weights a small random model mostly predicts its input
    token back, whatever its experts compute, and an identity test of such output proves little."""
    if any(n == "output.weight" for n, _ in spec["tensors"]):
        return True
    path = d / f"{arch}-out.gguf"
    write_gguf(path, arch, spec["kv"], spec["tensors"])
    base = w.ask(path, "meta")
    trial = [list(t) for t in spec["tensors"]] + [["output.weight", [1]]]
    r = _learn(arch, spec["kv"], trial, w, path)
    if r.startswith("OK") and ("used=" not in r or _used(r) == _used(base) + 1):
        spec["tensors"] = trial
        return True
    return False


def _used(result: str) -> int:
    """Tensors llama.cpp used, from a worker's ``OK`` (every tensor of the file unless partial)."""
    m = re.search(r"used=(\d+)", result)
    return int(m.group(1)) if m else -1


def fused_variant(arch: str, spec: dict, w: Worker, d: Path) -> list[list] | None:
    """The tensor list with ``ffn_gate_up_exps`` in place of gate and up, when llama.cpp takes it."""
    out: list[list] = []
    for name, ne in spec["tensors"]:
        if name.endswith("ffn_gate_exps.weight"):
            out.append([name.replace("ffn_gate_exps", "ffn_gate_up_exps"), [ne[0], 2 * ne[1], *ne[2:]]])
        elif not name.endswith("ffn_up_exps.weight"):
            out.append([name, list(ne)])
    if out == spec["tensors"]:
        return None
    path = d / f"{arch}-fused.gguf"
    write_gguf(path, arch, spec["kv"], out)
    return out if w.ask(path, "meta").startswith("OK") else None


def moe_archs(src: Path) -> list[str]:
    """Architectures whose llama.cpp model class has routed expert tensors or builds its graph with
    build_moe_ffn (GGUF names): llama-model.cpp's factory maps each LLM_ARCH_* to a class; the
    class's source file says (a graph shared through a header is still found by its tensors)."""
    names = dict(re.findall(r'\{\s*LLM_ARCH_(\w+),\s*"([^"]+)"\s*\}', (src / "src/llama-arch.cpp").read_text()))
    factory = re.findall(r"case LLM_ARCH_(\w+):\s*return new llama_model_(\w+)\(",
                         (src / "src/llama-model.cpp").read_text())
    moe_classes = set()
    for f in (src / "src/models").glob("*.cpp"):
        text = f.read_text()
        if "build_moe_ffn" in text or "_EXPS," in text:
            moe_classes.update(re.findall(r"llama_model_(\w+)::", text))
    return sorted(names[enum] for enum, cls in factory if cls in moe_classes and enum in names)


#: architectures a synthetic model cannot stand for, and why
NOT_STANDALONE = {
    "bert": "an encoder (embeddings) architecture: bmoe-run generates text",
    "nomic-bert-moe": "an encoder (embeddings) architecture: bmoe-run generates text",
    "dflash": "a speculative-decoding draft head (it needs its target model's hidden states)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=[])
    ap.add_argument("--src", default=None, help="llama.cpp sources of the pinned llama-cpp-python (vendor/llama.cpp)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "runtime" / "arch_specs.json"))
    args = ap.parse_args(argv)
    archs = args.arch or moe_archs(Path(args.src or os.environ.get("LLAMA_CPP_SRC", ".")))
    out = Path(args.out)
    table = json.loads(out.read_text()) if out.exists() else {}
    w = Worker()
    with tempfile.TemporaryDirectory(prefix="bmoe-probe-") as td:
        d = Path(td)
        for arch in archs:
            if arch in NOT_STANDALONE:
                table[arch] = {"status": "refused", "why": NOT_STANDALONE[arch], "kv": {}, "tensors": []}
                out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
                continue
            spec = probe(arch, w, d)
            if spec["status"] == "loads" and not add_moe(arch, spec, w, d):
                spec.update(status="dense", why="llama.cpp builds this architecture without routed experts")
            if spec["status"] == "loads":
                spec["optional"] = add_optional(arch, spec, w, d)
                if add_output(arch, spec, w, d):
                    spec["optional"].append("output.weight")
                fused = fused_variant(arch, spec, w, d)
                if fused is not None:
                    spec["fused_tensors"] = fused
            spec.pop("log", None)
            table[arch] = spec
            print(f"{arch}: {spec['status']} {spec.get('why', '')[:160]} optional={spec.get('optional')}"
                  f" fused={'fused_tensors' in spec}", flush=True)
            out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
