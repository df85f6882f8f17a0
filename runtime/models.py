"""The GGUF maker of bmoe-run: synthetic MoE GGUF files (``bmoe-run make-model``).

A synthetic model is a deterministic qwen3moe GGUF with random weights, written in f32 with the
``gguf`` package and then quantized by llama.cpp's own quantizer (``llama_model_quantize``).
Same preset, qtype and seed give the same bytes.

Layout (llama.cpp ``qwen3moe``; numpy shapes are row-major, ggml ``ne`` is the reverse):

========================  =============================  ===========================
tensor                    numpy shape                    role
========================  =============================  ===========================
token_embd.weight         (n_vocab, n_embd)              byte embeddings
output_norm.weight        (n_embd,)                      final RMSNorm
output.weight             (n_vocab, n_embd)              LM head
blk.L.attn_norm.weight    (n_embd,)                      RMSNorm before attention
blk.L.attn_q.weight       (n_head*head_dim, n_embd)
blk.L.attn_k.weight       (n_head_kv*head_dim, n_embd)   GQA
blk.L.attn_v.weight       (n_head_kv*head_dim, n_embd)
blk.L.attn_output.weight  (n_embd, n_head*head_dim)
blk.L.attn_q_norm.weight  (head_dim,)                    per-head RMSNorm on q
blk.L.attn_k_norm.weight  (head_dim,)                    per-head RMSNorm on k
blk.L.ffn_norm.weight     (n_embd,)                      RMSNorm before the MoE
blk.L.ffn_gate_inp.weight (n_expert, n_embd)             router (kept f32 by the quantizer)
blk.L.ffn_gate_exps.weight (n_expert, n_ff_exp, n_embd)  expert e is slice e (SwiGLU gate)
blk.L.ffn_up_exps.weight   (n_expert, n_ff_exp, n_embd)  SwiGLU up
blk.L.ffn_down_exps.weight (n_expert, n_embd, n_ff_exp)  down projection
========================  =============================  ===========================

Tokenizer: byte level (:mod:`bmoe_top.runtime.vocab`, shared with ``--arch`` models): token id
``b`` (0..255) is byte ``b``, id 256 is ``<|endoftext|>``, no BOS.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bmoe_top.outfile import check_output, output_error, place_file, temp_beside

from .vocab import EOS_ID, N_VOCAB, byte_vocab

__all__ = [
    "ARCH",
    "DEFAULT_QTYPE",
    "POOLED_PRESETS",
    "POOLED_QTYPES",
    "PRESETS",
    "QTYPES",
    "ModelShape",
    "expert_bank_bytes",
    "make_model",
    "models_main",
    "quantize_gguf",
    "split_gguf",
    "tensor_layout",
    "write_f32_gguf",
    "write_pooled_gguf",
]

ARCH = "qwen3moe"
#: Bumped whenever the synthetic generator changes, so cached demo files are regenerated.
GENERATOR_VERSION = 2
DEFAULT_QTYPE = "q8_0"

# name -> llama_ftype value (llama.h enum llama_ftype). None means "no quantization".
QTYPES: dict[str, int | None] = {
    "f32": None,
    "f16": 1,
    "bf16": 32,
    "q8_0": 7,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k": 12,  # Q3_K_M
    "q4_k": 15,  # Q4_K_M
    "q4_k_s": 14,
    "q5_k": 17,  # Q5_K_M
    "q6_k": 18,
}


@dataclass(frozen=True)
class ModelShape:
    """Hyper-parameters of a qwen3moe model (every count is a plain int; eps and base are floats)."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ctx_train: int = 2048
    n_vocab: int = N_VOCAB
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-6

    def expert_params(self) -> int:
        """Parameters of one expert (gate + up + down), all layers alike."""
        return 3 * self.n_embd * self.n_ff_exp


PRESETS: dict[str, ModelShape] = {
    # tests: 2 layers x 8 experts, a few MiB, loads and generates in well under a second.
    "tiny": ModelShape(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                       n_expert=8, n_expert_used=2, n_ff_exp=128, n_ctx_train=1024),
    # the random-weight twin of the trained demo model: 6 layers x 128 experts, top-4.
    "demo": ModelShape(n_embd=256, n_layer=6, n_head=4, n_head_kv=2, head_dim=64,
                       n_expert=128, n_expert_used=4, n_ff_exp=32, n_ctx_train=2048),
    # I/O benchmarks: 8 layers x 64 experts of 1.5 MiB f32 each (~300 MiB of q8_0 experts).
    "bench": ModelShape(n_embd=768, n_layer=8, n_head=8, n_head_kv=4, head_dim=96,
                        n_expert=64, n_expert_used=4, n_ff_exp=256, n_ctx_train=2048),
    # the runtime benchmark at the size users run: 16 layers x 128 experts, top-8, 2.36 M weights
    # an expert (a 2.5 GiB Q4_K expert bank, 4.7 GiB in q8_0); written by the pooled writer.
    "large": ModelShape(n_embd=1024, n_layer=16, n_head=8, n_head_kv=4, head_dim=128,
                        n_expert=128, n_expert_used=8, n_ff_exp=768, n_ctx_train=4096),
}

#: presets written by :func:`write_pooled_gguf` (quantized rows drawn from a pool) rather than as
#: f32 quantized by llama.cpp: an f32 file of "large" would be 19 GiB and take tens of minutes
POOLED_PRESETS = frozenset({"large"})


def tensor_layout(shape: ModelShape) -> list[tuple[str, tuple[int, ...]]]:
    """``[(tensor name, numpy shape), ...]`` in file order for ``shape`` (see module docstring)."""
    s = shape
    q_dim, kv_dim = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [
        ("token_embd.weight", (s.n_vocab, s.n_embd)),
        ("output_norm.weight", (s.n_embd,)),
        ("output.weight", (s.n_vocab, s.n_embd)),
    ]
    for il in range(s.n_layer):
        p = f"blk.{il}."
        out += [
            (p + "attn_norm.weight", (s.n_embd,)),
            (p + "attn_q.weight", (q_dim, s.n_embd)),
            (p + "attn_k.weight", (kv_dim, s.n_embd)),
            (p + "attn_v.weight", (kv_dim, s.n_embd)),
            (p + "attn_output.weight", (s.n_embd, q_dim)),
            (p + "attn_q_norm.weight", (s.head_dim,)),
            (p + "attn_k_norm.weight", (s.head_dim,)),
            (p + "ffn_norm.weight", (s.n_embd,)),
            (p + "ffn_gate_inp.weight", (s.n_expert, s.n_embd)),
            (p + "ffn_gate_exps.weight", (s.n_expert, s.n_ff_exp, s.n_embd)),
            (p + "ffn_up_exps.weight", (s.n_expert, s.n_ff_exp, s.n_embd)),
            (p + "ffn_down_exps.weight", (s.n_expert, s.n_embd, s.n_ff_exp)),
        ]
    return out


def _gguf_writer(path: Path, shape: ModelShape, name: str, extra_kv: dict[str, str] | None, file_type: int):
    """A ``gguf.GGUFWriter`` at ``path`` with every key of a qwen3moe model of ``shape`` and the
    byte tokenizer written (the tensors are the caller's)."""
    import gguf

    s = shape
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    w.add_file_type(file_type)
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff_exp * s.n_expert_used)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_freq_base(s.rope_freq_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    tokens, types, merges = byte_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(EOS_ID)  # never added (add_bos_token false); set so no byte is taken for BOS
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)
    for key, value in (extra_kv or {}).items():
        w.add_string(key, value)
    return w


def write_f32_gguf(path: str | os.PathLike[str], shape: ModelShape,
                   tensor_fn: Callable[[str, tuple[int, ...]], np.ndarray], *,
                   name: str = "bmoe synthetic moe", extra_kv: dict[str, str] | None = None) -> Path:
    """Write an f32 qwen3moe GGUF at ``path`` (overwritten), one tensor at a time.

    ``tensor_fn(name, numpy_shape)`` returns each tensor (converted to contiguous float32; its
    shape must equal the layout's). Peak memory is one tensor. Keys written: ``general.*``, every
    ``qwen3moe.*`` hyper-parameter llama.cpp reads (incl. ``expert_count``,
    ``expert_used_count``, ``expert_feed_forward_length``) and the byte tokenizer.
    Raises ValueError when a tensor has the wrong shape.
    """
    import gguf

    path = Path(path)
    w = _gguf_writer(path, shape, name, extra_kv, int(gguf.LlamaFileType.ALL_F32))
    layout = tensor_layout(shape)
    for tname, tshape in layout:
        n = int(np.prod(tshape))
        w.add_tensor_info(tname, tshape, np.dtype(np.float32), n * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tname, tshape in layout:
        arr = np.ascontiguousarray(tensor_fn(tname, tshape), dtype=np.float32)
        if arr.shape != tshape:
            w.close()
            raise ValueError(f"tensor {tname}: shape {arr.shape}, expected {tshape}")
        w.write_tensor_data(arr)
    w.close()
    return path


#: qtypes the pooled writer takes: ggml_type of the quantized tensors, GGUF general.file_type
POOLED_QTYPES: dict[str, tuple[int, int]] = {
    "q8_0": (8, 7), "q4_0": (2, 2), "q4_k": (12, 15), "q5_k": (13, 17), "q6_k": (14, 18),
}
#: rows of each pool (per row length): an expert's rows are drawn from it
POOL_ROWS = 8192


def write_pooled_gguf(path: str | os.PathLike[str], shape: ModelShape, qtype: str, seed: int, *,
                      name: str = "bmoe synthetic moe", extra_kv: dict[str, str] | None = None) -> Path:
    """Write a quantized qwen3moe GGUF at ``path`` (overwritten) without an f32 copy.

    Every weight matrix but the router is ``qtype`` (one ggml type for all of them, quantized by
    ggml's own ``ggml_quantize_chunk``): the small ones (token embeddings, output head) from f32
    random weights as :func:`make_model`'s; the large ones (attention, experts) row by row from a
    pool of :data:`POOL_ROWS` quantized random rows per row length, each row of each tensor drawn
    at random (experts share rows but no two are alike). The router and norms stay f32. Peak
    memory is one tensor; a multi-GiB model takes the time of writing it. Same arguments, same
    bytes. Raises ValueError for a qtype not in :data:`POOLED_QTYPES` or rows not a multiple of
    the type's block size.
    """
    from .ggml_struct import GGMLLib

    if qtype not in POOLED_QTYPES:
        raise ValueError(f"the pooled writer takes {', '.join(POOLED_QTYPES)}, not {qtype!r}")
    gtype, ftype = POOLED_QTYPES[qtype]
    ggml = GGMLLib()
    path = Path(path)
    f32 = _random_tensor_fn(shape, seed)
    index = {n: i for i, (n, _) in enumerate(tensor_layout(shape))}
    pools: dict[int, np.ndarray] = {}

    def quantize(arr: np.ndarray) -> np.ndarray:
        rows, n_per_row = int(np.prod(arr.shape[:-1])), int(arr.shape[-1])
        out = np.empty((rows, ggml.row_size(gtype, n_per_row)), dtype=np.uint8)
        ggml.quantize(gtype, np.ascontiguousarray(arr, dtype=np.float32), out, rows, n_per_row)
        return out

    def pool(n_per_row: int) -> np.ndarray:
        if n_per_row not in pools:
            rng = np.random.default_rng([seed, 1 << 20, n_per_row])
            pools[n_per_row] = quantize(rng.standard_normal((POOL_ROWS, n_per_row), dtype=np.float32)
                                        * np.float32(1.0 / np.sqrt(n_per_row)))
        return pools[n_per_row]

    def tensor(tname: str, tshape: tuple[int, ...]) -> tuple[np.ndarray, int | None]:
        if len(tshape) == 1 or tname.endswith("ffn_gate_inp.weight"):
            return f32(tname, tshape), None
        if tname in ("token_embd.weight", "output.weight"):
            return quantize(f32(tname, tshape)).reshape(*tshape[:-1], -1), gtype
        rows = pool(tshape[-1])
        pick = np.random.default_rng([seed, index[tname]]).integers(0, POOL_ROWS, int(np.prod(tshape[:-1])))
        return rows[pick].reshape(*tshape[:-1], -1), gtype

    import gguf

    w = _gguf_writer(path, shape, name, extra_kv, ftype)
    layout = tensor_layout(shape)
    for tname, tshape in layout:
        if len(tshape) == 1 or tname.endswith("ffn_gate_inp.weight"):
            w.add_tensor_info(tname, tshape, np.dtype(np.float32), int(np.prod(tshape)) * 4)
            continue
        if tshape[-1] % ggml.block_size(gtype):
            w.close()
            raise ValueError(f"tensor {tname}: rows of {tshape[-1]} are not a multiple of the {qtype} block")
        row = ggml.row_size(gtype, tshape[-1])
        w.add_tensor_info(tname, (*tshape[:-1], row), np.dtype(np.uint8), int(np.prod(tshape[:-1])) * row,
                          raw_dtype=gguf.GGMLQuantizationType(gtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tname, tshape in layout:
        arr, _ = tensor(tname, tshape)
        w.write_tensor_data(np.ascontiguousarray(arr))
    w.close()
    return path


def _random_tensor_fn(shape: ModelShape, seed: int) -> Callable[[str, tuple[int, ...]], np.ndarray]:
    """Deterministic random weights: tensor i of the layout draws from ``default_rng([seed, i])``."""
    index = {name: i for i, (name, _) in enumerate(tensor_layout(shape))}

    def fn(name: str, tshape: tuple[int, ...]) -> np.ndarray:
        if len(tshape) == 1:  # RMSNorm weights
            return np.ones(tshape, dtype=np.float32)
        rng = np.random.default_rng([seed, index[name]])
        fan_in = tshape[-1]
        scale = 1.0 / np.sqrt(fan_in)
        if name == "token_embd.weight":
            scale = 1.0
        elif name.endswith("ffn_gate_inp.weight"):
            scale = 2.0 / np.sqrt(fan_in)  # router logits with std ~2: peaked, not one-hot
        elif name == "output.weight":
            scale = 4.0 / np.sqrt(fan_in)
        arr = rng.standard_normal(tshape, dtype=np.float32)
        arr *= np.float32(scale)
        return arr

    return fn


@contextlib.contextmanager
def _stderr_silenced(enabled: bool) -> Iterator[None]:
    """Point fd 2 at /dev/null while llama.cpp's quantizer logs (it writes to fd 2 directly)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quantize_gguf(src: str | os.PathLike[str], dst: str | os.PathLike[str], qtype: str, *,
                  nthread: int = 0, quiet: bool = True) -> Path:
    """Quantize GGUF ``src`` into ``dst`` with llama.cpp's ``llama_model_quantize``.

    ``qtype`` is a key of :data:`QTYPES` (not ``"f32"``); params start from
    ``llama_model_quantize_default_params()``. The router (``ffn_gate_inp``) and 1-D tensors stay
    f32, and llama.cpp falls back to another type for a tensor whose rows do not fit the block
    size (e.g. k-quants need rows that are multiples of 256). Raises ValueError for an unknown
    qtype and RuntimeError when llama.cpp reports a failure.
    """
    ftype = QTYPES.get(qtype)
    if ftype is None:
        raise ValueError(f"cannot quantize to {qtype!r}; choose one of "
                         f"{', '.join(k for k, v in QTYPES.items() if v is not None)}")
    from .llama_lib import L as llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthread
    with _stderr_silenced(quiet):
        rc = llama_cpp.llama_model_quantize(os.fsencode(src), os.fsencode(dst), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({qtype}) failed with code {rc}")
    return Path(dst)


def make_model(out_path: str | os.PathLike[str], preset: str = "demo", qtype: str = DEFAULT_QTYPE,
               seed: int = 0, *, quiet: bool = True, force: bool = True) -> Path:
    """Write a deterministic random-weight qwen3moe GGUF to ``out_path`` and return its path.

    ``preset``: ``tiny`` | ``demo`` | ``bench`` | ``large`` (:data:`PRESETS`); ``qtype``: a key of
    :data:`QTYPES` (of :data:`POOLED_QTYPES` for ``large``). The f32 file is written next to
    ``out_path`` and quantized by llama.cpp (``large``: written quantized by
    :func:`write_pooled_gguf`, a few seconds a GiB); the result is moved to ``out_path`` in one
    rename (``bmoe_top.outfile.place_file``), so a reader never sees a partial file. ``force``
    (the default for a caller that chose the path) replaces an existing file, False refuses it
    (``make-model`` without ``--force``); a symbolic link at
    ``out_path`` is always refused. Same arguments => same bytes. Raises ValueError for an unknown
    preset/qtype, ``OutputFileError`` (an OSError) when the file cannot be written.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if qtype not in QTYPES:
        raise ValueError(f"unknown qtype {qtype!r}; choose one of {', '.join(QTYPES)}")
    if preset in POOLED_PRESETS and qtype not in POOLED_QTYPES:
        raise ValueError(f"the {preset} preset takes --qtype {', '.join(POOLED_QTYPES)}, not {qtype!r}")
    out = Path(out_path)
    shape = PRESETS[preset]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_f32 = temp_beside(out, force=force, suffix=".f32.tmp")
    os.close(fd)
    tmp_final = tmp_f32
    name = f"bmoe synthetic moe {preset} seed {seed}"
    kv = {"bmoe.preset": preset, "bmoe.generator": f"make-model v{GENERATOR_VERSION}"}
    try:
        if preset in POOLED_PRESETS:
            write_pooled_gguf(tmp_f32, shape, qtype, seed, name=name, extra_kv=kv)
        else:
            write_f32_gguf(tmp_f32, shape, _random_tensor_fn(shape, seed), name=name, extra_kv=kv)
        if QTYPES[qtype] is not None and preset not in POOLED_PRESETS:
            fd, tmp_final = temp_beside(out, force=force, suffix=f".{qtype}.tmp")
            os.close(fd)
            quantize_gguf(tmp_f32, tmp_final, qtype, quiet=quiet)
        place_file(tmp_final, out, force=force)
    finally:
        for p in {tmp_f32, tmp_final}:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
    return out


def expert_bank_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of all routed-expert tensors (``ffn_{gate,up,down,gate_up}_exps``) in the GGUF at ``path``."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return sum(int(t.n_bytes) for t in reader.tensors
               if t.name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                                   "ffn_gate_up_exps.weight")))


def llama_greedy(path: str | os.PathLike[str], prompt: Sequence[int], n_predict: int, *,
                 n_ctx: int = 512, n_threads: int = 2, stop_at_eos: bool = True,
                 kv_f32: bool = False) -> list[int]:
    """Greedy-decode ``n_predict`` tokens after ``prompt`` (token ids) with llama.cpp, fully resident.

    A reference decode for tests and for the trained-model conversion proof: low-level API,
    mmap, weight repacking off (``use_extra_bufts=False``; llama-cpp-python 0.3.36's AMX repack of
    q8_0/q4_0 crashes on AVX512-AMX CPUs), the whole prompt in one batch, then one token per
    decode; argmax over the logits. Returns the generated ids (stops early at EOS when
    ``stop_at_eos``). ``kv_f32`` keeps the KV cache in f32 instead of llama.cpp's default f16
    (for comparisons against an f32 reference). Raises RuntimeError when the model cannot be loaded or a decode fails,
    ValueError when prompt + n_predict exceeds ``n_ctx``.
    """
    from .llama_lib import L

    if len(prompt) + n_predict > n_ctx:
        raise ValueError(f"prompt ({len(prompt)}) + n_predict ({n_predict}) > n_ctx ({n_ctx})")
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = False
    model = L.llama_model_load_from_file(os.fsencode(path), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    try:
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = max(len(prompt), 1)
        cp.n_ubatch = max(len(prompt), 1)
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        if kv_f32:
            cp.type_k = L.GGML_TYPE_F32
            cp.type_v = L.GGML_TYPE_F32
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not create a context")
        try:
            n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
            out: list[int] = []
            pending = list(prompt)
            for _ in range(n_predict):
                arr = (L.llama_token * len(pending))(*pending)
                rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(pending)))
                if rc != 0:
                    raise RuntimeError(f"llama_decode failed with code {rc}")
                logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                tok = int(np.argmax(logits))
                out.append(tok)
                if stop_at_eos and tok == EOS_ID:
                    break
                pending = [tok]
            return out
        finally:
            L.llama_free(ctx)
    finally:
        L.llama_model_free(model)


def split_gguf(src: str | os.PathLike[str], out: str | os.PathLike[str], max_tensors: int,
               small_first_shard: bool = False, *, force: bool = True) -> list[Path]:
    """Write GGUF ``src`` again as a split model, llama.cpp's layout: ``<out stem>-0000i-of-0000N.gguf``
    shards of at most ``max_tensors`` tensors, with the metadata (and ``split.*`` keys) in the first;
    ``small_first_shard``: the first shard holds metadata only. Tensor bytes are copied unchanged.
    The shards are written in a temporary folder beside ``out``, all checked, then each moved into
    place (``bmoe_top.outfile``: never onto a symbolic link; an existing shard replaced only with
    ``force``). Returns the shard paths, first first. Raises ValueError for ``max_tensors`` < 1,
    ``OutputFileError`` when a shard cannot be written."""
    import gguf

    if max_tensors < 1:
        raise ValueError("max_tensors must be >= 1")
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    out = Path(out)
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".split", dir=out.parent))
    except OSError as exc:
        raise output_error(out, exc) from None
    try:
        w = gguf.GGUFWriter(work / out.name, arch, split_max_tensors=max_tensors, small_first_shard=small_first_shard)
        for name, f in reader.fields.items():
            if name.startswith(("GGUF.", "split.")) or name == "general.architecture":
                continue
            vtype = f.types[0]
            sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(name, f.contents(), vtype, sub)
        for t in reader.tensors:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=np.asarray(t.data).shape, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        n = len(w.tensors)
        names = [f"{out.stem}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)] if n > 1 else [out.name]
        shards = [out.with_name(x) for x in names]
        for p in shards:  # every shard checked before the first is placed
            check_output(p, force=force)
        for x, p in zip(names, shards):
            place_file(work / x, p, force=force)
    except OSError as exc:
        raise output_error(out, exc) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return shards


def models_main(argv: Sequence[str] | None = None) -> int:
    """``bmoe-run make-model [--preset demo|bench|tiny|large | --arch NAME [--fused]] [--qtype Q] [--seed N] OUT.gguf``.

    Writes the model, prints one summary line on stdout and returns 0; on bad input prints one
    ``bmoe-run make-model: error: ...`` line on stderr and returns 2 (argparse usage errors) or 1.
    """
    ap = argparse.ArgumentParser(prog="bmoe-run make-model",
                                 description="Write a deterministic random-weight MoE GGUF (qwen3moe, byte tokenizer).")
    ap.add_argument("out", metavar="OUT.gguf", help="output file (a new file; see --force)")
    ap.add_argument("--force", action="store_true",
                    help="replace an existing OUT (and its shards); never written through a symbolic link")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="demo")
    ap.add_argument("--arch", default=None, metavar="NAME",
                    help="a synthetic model of this llama.cpp MoE architecture instead of a preset "
                    "(runtime/arch_specs.json; docs/runtime.md 'Architectures')")
    ap.add_argument("--fused", action="store_true", help="with --arch: fused ffn_gate_up_exps where the arch has it")
    ap.add_argument("--qtype", choices=list(QTYPES), default=DEFAULT_QTYPE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", type=int, default=0, metavar="N",
                    help="also write OUT as a split model of at most N tensors per shard (OUT-0000i-of-0000M.gguf)")
    ap.add_argument("--small-first-shard", action="store_true",
                    help="with --split: the first shard holds metadata only")
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's quantizer log on stderr")
    args = ap.parse_args(list(argv) if argv is not None else None)
    if args.arch:
        from .arch_models import make_arch_model

        try:
            out = make_arch_model(args.out, args.arch, seed=args.seed, fused=args.fused, force=args.force)
        except (OSError, ValueError) as exc:
            print(f"bmoe-run make-model: error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {out} arch={args.arch} seed={args.seed} size_mib={out.stat().st_size / 2**20:.2f} "
              f"expert_bank_mib={expert_bank_bytes(out) / 2**20:.2f}", flush=True)
        return 0
    try:
        out = make_model(args.out, preset=args.preset, qtype=args.qtype, seed=args.seed, quiet=not args.verbose,
                         force=args.force)
        if args.split:
            shards = split_gguf(out, out, args.split, small_first_shard=args.small_first_shard, force=args.force)
            print(f"wrote {len(shards)} shards: {shards[0]} ...", flush=True)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"bmoe-run make-model: error: {exc}", file=sys.stderr)
        return 1
    shape = PRESETS[args.preset]
    size = out.stat().st_size
    bank = expert_bank_bytes(out)
    n_slices = shape.n_layer * shape.n_expert
    print(f"wrote {out} preset={args.preset} qtype={args.qtype} seed={args.seed} "
          f"size_mib={size / 2**20:.2f} experts={shape.n_layer}x{shape.n_expert} top_k={shape.n_expert_used} "
          f"expert_bank_mib={bank / 2**20:.2f} expert_slice_kib={bank / n_slices / 1024:.1f}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(models_main())
