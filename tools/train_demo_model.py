"""Train the bmoe-top demo MoE (issue #6): a small byte-level qwen3moe LM on the Python stdlib sources.

Development tool only: it needs PyTorch, which is not a bmoe-top dependency. Run it in its own venv:

    python3 -m venv /work/torchenv && /work/torchenv/bin/pip install torch==2.13.0 numpy gguf
    nice /work/torchenv/bin/python tools/train_demo_model.py train  --out build/demo-moe
    nice /work/torchenv/bin/python tools/train_demo_model.py reference --out build/demo-moe
    .venv/bin/python tools/convert_demo_model.py --run build/demo-moe           # GGUF + proof
    .venv/bin/python tools/convert_demo_model.py --run build/demo-moe --windows  # held-out windows
    nice /work/torchenv/bin/python tools/train_demo_model.py routes --out build/demo-moe \\
        --random-gguf build/demo-random-f32.gguf                                # PyTorch routing
    .venv/bin/python tools/convert_demo_model.py --run build/demo-moe --routing  # docs numbers

Model (math identical to llama.cpp's ``qwen3moe`` graph so the GGUF conversion is exact):
token embedding -> n_layer x [RMSNorm -> attention (q/k/v, per-head RMSNorm on q and k, NEOX rope,
GQA, causal softmax, output proj) + residual -> RMSNorm -> MoE + residual] -> RMSNorm -> LM head.
MoE: router logits = W_r x; p = softmax(logits); top-k of p; weights renormalised over the top-k
(qwen3moe's norm_topk_prob, llama.cpp ``norm_w=true``); expert e = W_down[e] (silu(W_gate[e] x) *
W_up[e] x). Training loss = next-byte cross-entropy + ``aux_coef`` x Switch load-balancing loss
(n_expert * sum_e f_e * P_e, f_e = share of the top-k routings, P_e = mean router probability)
+ ``z_coef`` x router z-loss.

The committed model (bmoe_top/data/demo-moe-pystdlib.q8_0.gguf) is ``train`` with these defaults:
seed 1234, 6 layers x 128 experts (top-4, 32-wide SwiGLU experts), n_embd 256, 4 heads of 64
(2 KV heads), 20.4 M parameters (2.1 M active per token), AdamW lr 3e-3 (betas 0.9/0.95, wd 0.05,
40 warm-up steps, cosine to 10% over 800 steps), batch 12 x 256 bytes, aux 0.003, z-loss 0.001,
training capacity 3x, fp32, 2 threads: 800 steps (2.46 M tokens) in 1490 s (25 min) on the shared
2-core machine; validation loss 1.223 nats/byte. Its per-step lr list, loss log and corpus file
list are in docs/demo-model-run.json (``--replay`` re-runs that schedule).

Data: the CPython standard library sources of the interpreter running this script (``sysconfig``
stdlib path): top-level ``*.py`` plus pure-Python packages (no tests, idlelib, lib2to3, tkinter,
turtledemo, ensurepip, pydoc_data, encodings), sorted by relative path; file i is held out for
validation when ``i % 20 == 10``. Files are joined as UTF-8 bytes with the EOS token (256) after
each file. Tokens are bytes (ids 0..255), see ``bmoe_top.runtime.vocab.byte_vocab``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

EOS_ID = 256
N_VOCAB = 257
EXCLUDED_PACKAGES = {"test", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip", "pydoc_data",
                     "encodings", "__phello__"}


@dataclass
class Config:
    n_embd: int = 256
    n_layer: int = 6
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_expert: int = 128
    n_expert_used: int = 4
    n_ff_exp: int = 32
    n_vocab: int = N_VOCAB
    n_ctx_train: int = 2048
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-6
    # training
    seq_len: int = 256
    batch_size: int = 12
    steps: int = 100000  # upper bound of the batch stream; ``--steps`` (or ``--budget-s``) ends training
    budget_s: float = 1680.0
    warmup: int = 40
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    weight_decay: float = 0.05
    aux_coef: float = 0.003  # 128 experts: 0.001 collapsed a short run, 0.01 made 32 experts flat (docs/demo-model.md)
    capacity_factor: float = 3.0
    z_coef: float = 1e-3
    grad_clip: float = 1.0
    seed: int = 1234
    eval_every: int = 50
    eval_batches: int = 8
    threads: int = 2
    autocast_bf16: bool = False  # bf16 autocast measured slower than fp32 here (AMX not used by bmm)


# ---------------------------------------------------------------------------------------------- data

def stdlib_files() -> tuple[Path, list[str]]:
    """(stdlib root, sorted relative paths of the corpus files)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    rel = [p.name for p in sorted(root.glob("*.py"))]
    for d in sorted(root.iterdir()):
        if d.is_dir() and (d / "__init__.py").exists() and d.name not in EXCLUDED_PACKAGES:
            for p in sorted(d.rglob("*.py")):
                r = p.relative_to(root)
                if not any(part in ("test", "tests") for part in r.parts):
                    rel.append(str(r))
    return root, rel


def load_corpus() -> dict[str, object]:
    """Train/validation token arrays (uint16) and provenance (file counts, bytes, sha256)."""
    root, rel = stdlib_files()
    train, val = [], []
    h = hashlib.sha256()
    for i, r in enumerate(rel):
        data = (root / r).read_bytes()
        h.update(r.encode() + b"\0" + data)
        arr = np.frombuffer(data, dtype=np.uint8).astype(np.uint16)
        arr = np.concatenate([arr, np.array([EOS_ID], dtype=np.uint16)])
        (val if i % 20 == 10 else train).append(arr)
    return {
        "root": str(root), "python": sys.version.split()[0], "files": rel,
        "n_train_files": len(train), "n_val_files": len(val),
        "train": np.concatenate(train), "val": np.concatenate(val), "sha256": h.hexdigest(),
        "val_files": [r for i, r in enumerate(rel) if i % 20 == 10],
    }


# --------------------------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_neox(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x: (B, H, T, D); NEOX layout: dims i and i + D/2 rotate together with theta_i = base^(-2i/D)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float32) * 2.0 / d)
    ang = pos.float()[:, None] * inv[None, :]  # (T, half)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        c = self.c
        b, t, _ = x.shape
        q = self.q_norm(self.wq(x).view(b, t, c.n_head, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(b, t, c.n_head_kv, c.head_dim)).transpose(1, 2)
        v = self.wv(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        q, k = rope_neox(q, pos, c.rope_freq_base), rope_neox(k, pos, c.rope_freq_base)
        rep = c.n_head // c.n_head_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(c.head_dim))
        return self.wo(y.transpose(1, 2).reshape(b, t, c.n_head * c.head_dim))


class MoE(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        e, d, f = c.n_expert, c.n_embd, c.n_ff_exp
        self.router = nn.Linear(d, e, bias=False)
        self.w_gate = nn.Parameter(torch.randn(e, f, d) / math.sqrt(d))
        self.w_up = nn.Parameter(torch.randn(e, f, d) / math.sqrt(d))
        self.w_down = nn.Parameter(torch.randn(e, d, f) / math.sqrt(f) / math.sqrt(2 * c.n_layer))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (N, D) -> (y (N, D), top-k ids (N, k), aux loss, z loss)."""
        c = self.c
        n, d = x.shape
        logits = self.router(x).float()
        probs = logits.softmax(-1)
        topv, topi = probs.topk(c.n_expert_used, dim=-1)
        w = topv / topv.sum(-1, keepdim=True)
        # Switch load balancing: f_e (share of routings) . P_e (mean prob), scaled by n_expert
        counts = torch.bincount(topi.flatten(), minlength=c.n_expert)
        frac = counts.float() / (n * c.n_expert_used)
        aux = c.n_expert * (frac.detach() * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).pow(2).mean()
        # group routings by expert, pad to the busiest expert, 3 batched matmuls (no token dropped)
        flat_e = topi.flatten()
        order = torch.argsort(flat_e, stable=True)
        e_sorted = flat_e[order]
        tok_sorted = order // c.n_expert_used
        w_sorted = w.flatten()[order]
        cap = int(counts.max())
        offsets = torch.cumsum(counts, 0) - counts
        pos = torch.arange(n * c.n_expert_used) - offsets[e_sorted]
        if self.training and c.capacity_factor > 0:
            # Switch-style expert capacity in training only: routings past it are dropped (the
            # token keeps its residual). Inference (and llama.cpp) never drops.
            cap = min(cap, math.ceil(c.capacity_factor * n * c.n_expert_used / c.n_expert))
            keep = pos < cap
            pos, e_sorted, tok_sorted, w_sorted = pos[keep], e_sorted[keep], tok_sorted[keep], w_sorted[keep]
        slot = e_sorted * cap + pos
        xbuf = x.new_zeros(c.n_expert * cap, d)
        xbuf[slot] = x[tok_sorted]
        xbuf = xbuf.view(c.n_expert, cap, d)
        h = F.silu(torch.bmm(xbuf, self.w_gate.transpose(1, 2).to(xbuf.dtype))) * torch.bmm(
            xbuf, self.w_up.transpose(1, 2).to(xbuf.dtype))
        ybuf = torch.bmm(h, self.w_down.transpose(1, 2).to(h.dtype)).reshape(c.n_expert * cap, d)
        y = ybuf[slot] * w_sorted[:, None].to(ybuf.dtype)
        out = x.new_zeros(n, d, dtype=y.dtype).index_add_(0, tok_sorted, y)
        return out, topi, aux, z


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.moe = MoE(c)

    def forward(self, x, pos):
        x = x + self.attn(self.attn_norm(x), pos)
        b, t, d = x.shape
        y, topi, aux, z = self.moe(self.ffn_norm(x).reshape(b * t, d))
        return x + y.view(b, t, d).to(x.dtype), topi.view(b, t, -1), aux, z


class MoELM(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embd = nn.Embedding(c.n_vocab, c.n_embd)
        nn.init.normal_(self.embd.weight, std=1.0)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.out = nn.Linear(c.n_embd, c.n_vocab, bias=False)
        for blk in self.blocks:
            for lin in (blk.attn.wq, blk.attn.wk, blk.attn.wv):
                nn.init.normal_(lin.weight, std=1.0 / math.sqrt(c.n_embd))
            nn.init.normal_(blk.attn.wo.weight, std=1.0 / math.sqrt(c.n_embd) / math.sqrt(2 * c.n_layer))
            nn.init.normal_(blk.moe.router.weight, std=0.02)
        nn.init.normal_(self.out.weight, std=1.0 / math.sqrt(c.n_embd))

    def forward(self, idx: torch.Tensor, pos0: int = 0):
        """idx (B, T) -> logits (B, T, V), routes (n_layer, B, T, k), aux, z (summed over layers)."""
        t = idx.shape[1]
        pos = torch.arange(pos0, pos0 + t)
        x = self.embd(idx)
        routes, aux, z = [], 0.0, 0.0
        for blk in self.blocks:
            x, topi, a, zz = blk(x, pos)
            routes.append(topi)
            aux, z = aux + a, z + zz
        return self.out(self.out_norm(x)), torch.stack(routes), aux, z


# ------------------------------------------------------------------------------------ GGUF mapping

def gguf_tensors(model: MoELM) -> dict[str, np.ndarray]:
    """State dict under llama.cpp qwen3moe names, numpy float32 in the layout of runtime/models.py."""
    def a(t: torch.Tensor) -> np.ndarray:
        return t.detach().float().cpu().numpy().copy()

    out = {"token_embd.weight": a(model.embd.weight), "output_norm.weight": a(model.out_norm.weight),
           "output.weight": a(model.out.weight)}
    for il, blk in enumerate(model.blocks):
        p = f"blk.{il}."
        out.update({
            p + "attn_norm.weight": a(blk.attn_norm.weight),
            p + "attn_q.weight": a(blk.attn.wq.weight), p + "attn_k.weight": a(blk.attn.wk.weight),
            p + "attn_v.weight": a(blk.attn.wv.weight), p + "attn_output.weight": a(blk.attn.wo.weight),
            p + "attn_q_norm.weight": a(blk.attn.q_norm.weight), p + "attn_k_norm.weight": a(blk.attn.k_norm.weight),
            p + "ffn_norm.weight": a(blk.ffn_norm.weight), p + "ffn_gate_inp.weight": a(blk.moe.router.weight),
            p + "ffn_gate_exps.weight": a(blk.moe.w_gate), p + "ffn_up_exps.weight": a(blk.moe.w_up),
            p + "ffn_down_exps.weight": a(blk.moe.w_down),
        })
    return out


def load_gguf_into(model: MoELM, path: str) -> None:
    """Load (dequantized) weights of a qwen3moe GGUF written by runtime/models.py into ``model``."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    names = gguf_tensors(model)
    params = {}
    for name, ref in names.items():
        t = by_name[name]
        arr = dequantize(t.data, t.tensor_type).reshape(ref.shape).astype(np.float32)
        params[name] = torch.from_numpy(arr)
    with torch.no_grad():
        model.embd.weight.copy_(params["token_embd.weight"])
        model.out_norm.weight.copy_(params["output_norm.weight"])
        model.out.weight.copy_(params["output.weight"])
        for il, blk in enumerate(model.blocks):
            p = f"blk.{il}."
            blk.attn_norm.weight.copy_(params[p + "attn_norm.weight"])
            blk.attn.wq.weight.copy_(params[p + "attn_q.weight"])
            blk.attn.wk.weight.copy_(params[p + "attn_k.weight"])
            blk.attn.wv.weight.copy_(params[p + "attn_v.weight"])
            blk.attn.wo.weight.copy_(params[p + "attn_output.weight"])
            blk.attn.q_norm.weight.copy_(params[p + "attn_q_norm.weight"])
            blk.attn.k_norm.weight.copy_(params[p + "attn_k_norm.weight"])
            blk.ffn_norm.weight.copy_(params[p + "ffn_norm.weight"])
            blk.moe.router.weight.copy_(params[p + "ffn_gate_inp.weight"])
            blk.moe.w_gate.copy_(params[p + "ffn_gate_exps.weight"])
            blk.moe.w_up.copy_(params[p + "ffn_up_exps.weight"])
            blk.moe.w_down.copy_(params[p + "ffn_down_exps.weight"])


# -------------------------------------------------------------------------------------------- train

def lr_at(step: int, frac: float, c: Config) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine to ``min_lr_frac`` over the run: ``frac``
    is step / ``--steps``, or elapsed / budget_s without it (the machine is shared, so steps per
    second vary; the lr actually used at every step is recorded in train_meta.json so a run can be
    replayed)."""
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    prog = min(1.0, frac)
    return c.lr * (c.min_lr_frac + (1 - c.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def batches(tokens: np.ndarray, c: Config, rng: np.random.Generator, n: int):
    starts = rng.integers(0, len(tokens) - c.seq_len - 1, size=(n, c.batch_size))
    for row in starts:
        chunk = np.stack([tokens[s:s + c.seq_len + 1] for s in row]).astype(np.int64)
        yield torch.from_numpy(chunk[:, :-1]), torch.from_numpy(chunk[:, 1:])


@torch.no_grad()
def evaluate(model: MoELM, val: np.ndarray, c: Config) -> float:
    model.eval()
    rng = np.random.default_rng(999)  # the same validation windows every time
    losses = []
    for x, y in batches(val, c, rng, c.eval_batches):
        logits, _, _, _ = model(x)
        losses.append(F.cross_entropy(logits.reshape(-1, c.n_vocab).float(), y.reshape(-1)).item())
    model.train()
    return float(np.mean(losses))


def cmd_train(args) -> None:
    c = Config(budget_s=args.budget_s, autocast_bf16=args.bf16, aux_coef=args.aux_coef,
               capacity_factor=args.capacity_factor, n_layer=args.n_layer, n_expert=args.n_expert,
               n_expert_used=args.n_expert_used, n_ff_exp=args.n_ff_exp)
    torch.manual_seed(c.seed)
    torch.set_num_threads(c.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus()
    train, val = corpus["train"], corpus["val"]
    print(f"corpus: python {corpus['python']} {corpus['root']}: {len(corpus['files'])} files, "
          f"train {len(train)} bytes, val {len(val)} bytes, sha256 {corpus['sha256'][:16]}", flush=True)
    model = MoELM(c)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embd" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embd" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(c.seed)
    log = []
    t0 = time.time()
    step = 0
    lrs = []
    replay = json.loads(Path(args.replay).read_text())["lrs"] if args.replay else None
    for x, y in batches(train, c, rng, c.steps):
        if replay is not None:
            if step >= len(replay):
                break
            lr = replay[step]
        else:
            frac = step / args.steps if args.steps else (time.time() - t0) / c.budget_s
            if frac >= 1.0:
                break
            lr = lr_at(step, frac, c)
        lrs.append(lr)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=c.autocast_bf16):
            logits, routes, aux, z = model(x)
        ce = F.cross_entropy(logits.reshape(-1, c.n_vocab).float(), y.reshape(-1))
        loss = ce + c.aux_coef * aux / c.n_layer + c.z_coef * z / c.n_layer
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
        opt.step()
        step += 1
        if step % 10 == 0 or step == 1:
            el = time.time() - t0
            print(f"step {step} ce {ce.item():.4f} aux {aux.item() / c.n_layer:.4f} "
                  f"lr {lr:.2e} {el:.0f}s ({el / step:.2f}s/step)", flush=True)
        if step % c.eval_every == 0:
            vl = evaluate(model, val, c)
            log.append({"step": step, "train_ce": ce.item(), "val_loss": vl, "elapsed_s": time.time() - t0})
            print(f"  eval step {step}: val loss {vl:.4f} nats/byte ({vl / math.log(2):.3f} bits/byte)", flush=True)
    wall = time.time() - t0
    vl = evaluate(model, val, c)
    log.append({"step": step, "train_ce": ce.item(), "val_loss": vl, "elapsed_s": wall})
    print(f"  final eval step {step}: val loss {vl:.4f} nats/byte ({vl / math.log(2):.3f} bits/byte)", flush=True)
    torch.save({"config": asdict(c), "state_dict": model.state_dict()}, out / "model.pt")
    np.savez(out / "weights.npz", **gguf_tensors(model))
    meta = {
        "config": asdict(c), "n_params": n_params, "train_wall_s": wall, "torch": torch.__version__,
        "threads": c.threads, "corpus": {k: corpus[k] for k in ("root", "python", "sha256", "n_train_files",
                                                                   "n_val_files", "val_files")},
        "corpus_files": corpus["files"], "train_bytes": int(len(train)), "val_bytes": int(len(val)),
        "steps": step, "tokens_seen": step * c.batch_size * c.seq_len, "log": log, "lrs": lrs,
        "final_val_loss": log[-1]["val_loss"] if log else None,
    }
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1))
    print(f"done: {step} steps in {wall:.0f}s, {n_params} params, val loss {meta['final_val_loss']:.4f}")


def load_model(out: Path) -> MoELM:
    ck = torch.load(out / "model.pt", weights_only=True)
    c = Config(**ck["config"])
    model = MoELM(c)
    model.load_state_dict(ck["state_dict"])
    model.eval()
    return model


# ------------------------------------------------------------------------------- reference greedy

PROMPTS = ["def ", "import os\nimport sys\n\n", "class Cache:\n    def __init__(self, size):\n        self.",
           "    for i in range(len(", '"""Return the ', "    raise ValueError("]


@torch.no_grad()
def greedy(model: MoELM, prompt: list[int], n: int, margins: list[float] | None = None) -> list[int]:
    """fp32 greedy decode, the full sequence recomputed each step (no KV-cache shortcuts).
    ``margins`` (if given) receives top-1 minus top-2 logit at every step."""
    ids = list(prompt)
    out = []
    for _ in range(n):
        logits, _, _, _ = model(torch.tensor([ids]))
        top = logits[0, -1].topk(2)
        tok = int(top.indices[0])
        if margins is not None:
            margins.append(round(float(top.values[0] - top.values[1]), 5))
        out.append(tok)
        if tok == EOS_ID:
            break
        ids.append(tok)
    return out


def cmd_reference(args) -> None:
    torch.set_num_threads(2)
    out = Path(args.out)
    model = load_model(out)
    if args.gguf:  # the same math on the weights stored in a (quantized) GGUF, dequantized to fp32
        load_gguf_into(model, args.gguf)
    refs = []
    for p in PROMPTS:
        margins: list[float] = []
        toks = greedy(model, list(p.encode()), args.n, margins)
        refs.append({"prompt": p, "tokens": toks, "margins": margins})
        print(repr(p + bytes(t for t in toks if t < 256).decode("utf-8", "replace")), flush=True)
    name = "reference_greedy.json" if not args.gguf else f"reference_greedy.{Path(args.gguf).stem}.json"
    (out / name).write_text(json.dumps(refs, indent=1))


# ------------------------------------------------------------------------------------------ analyze

@torch.no_grad()
def route_trace(model: MoELM, tokens: list[int]) -> np.ndarray:
    """Top-k expert ids of one fresh context: (n_tokens, n_layer, k) int16, slots by falling weight."""
    _, routes, _, _ = model(torch.tensor([tokens]))
    return routes[:, 0].permute(1, 0, 2).numpy().astype(np.int16)


def cmd_routes(args) -> None:
    """PyTorch routing of the held-out windows (tools/convert_demo_model.py --routing writes
    windows.json) for the trained model and, with --random-gguf, the random-weight demo preset."""
    torch.set_num_threads(2)
    out = Path(args.out)
    trained = load_model(out)
    windows = json.loads((out / "windows.json").read_text())["windows"]
    todo = {"trained": trained}
    if args.random_gguf:
        rnd = MoELM(trained.c)
        load_gguf_into(rnd, args.random_gguf)
        rnd.eval()
        todo["random"] = rnd
    for name, m in todo.items():
        t0 = time.time()
        tr = np.concatenate([route_trace(m, list(w.encode())) for w in windows])
        np.save(out / f"routes_torch_{name}.npy", tr)
        print(f"{name}: {tr.shape} routed in {time.time() - t0:.1f}s", flush=True)


def cmd_bench(args) -> None:
    """Seconds per training step of each shape (``LAYERSxEXPERTSxTOPKxWIDTH``, default the committed
    model's), fp32; with ``--bf16`` also the first shape under bf16 autocast."""
    torch.set_num_threads(2)
    torch.manual_seed(0)
    shapes = [dict(n_layer=a, n_expert=b, n_expert_used=k, n_ff_exp=f)
              for a, b, k, f in (tuple(int(v) for v in s.split("x")) for s in args.shapes)]
    for bf16, shape in [(False, s) for s in shapes] + ([(True, shapes[0])] if args.bf16 else []):
        c = Config(**shape)
        model = MoELM(c)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, 256, (c.batch_size, c.seq_len))
        ts = []
        for _ in range(4):
            t = time.time()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits, _, aux, _ = model(x)
            loss = F.cross_entropy(logits.reshape(-1, c.n_vocab).float(), x.reshape(-1)) + 0.01 * aux
            opt.zero_grad()
            loss.backward()
            opt.step()
            ts.append(time.time() - t)
        print(f"{shape} bf16={bf16}: {np.median(ts[1:]):.2f}s/step", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--out", default="build/demo-moe")
    t.add_argument("--budget-s", type=float, default=Config.budget_s, help="training wall-clock budget")
    t.add_argument("--steps", type=int, default=800,
                   help="train this many steps, the lr schedule over steps (0: until --budget-s of wall clock)")
    t.add_argument("--aux-coef", type=float, default=Config.aux_coef, help="load-balancing loss weight")
    t.add_argument("--capacity-factor", type=float, default=Config.capacity_factor,
                   help="training-only expert capacity, x the mean load (0 = unlimited)")
    t.add_argument("--n-layer", type=int, default=Config.n_layer)
    t.add_argument("--n-expert", type=int, default=Config.n_expert, help="experts per layer")
    t.add_argument("--n-expert-used", type=int, default=Config.n_expert_used, help="top-k")
    t.add_argument("--n-ff-exp", type=int, default=Config.n_ff_exp, help="SwiGLU width of one expert")
    t.add_argument("--replay", default=None, help="train_meta.json of a run: replay its per-step lr list")
    t.add_argument("--bf16", action="store_true", help="bf16 autocast (slower than fp32 on this machine)")
    r = sub.add_parser("reference")
    r.add_argument("--out", default="build/demo-moe")
    r.add_argument("--n", type=int, default=64)
    r.add_argument("--gguf", default=None, help="load the weights from this GGUF (dequantized) instead")
    a = sub.add_parser("routes")
    a.add_argument("--out", default="build/demo-moe")
    a.add_argument("--random-gguf", default=None, help="f32 GGUF of the random `demo` preset")
    b = sub.add_parser("bench")
    b.add_argument("shapes", nargs="*", default=[f"{Config.n_layer}x{Config.n_expert}x{Config.n_expert_used}x"
                                                 f"{Config.n_ff_exp}"], help="LAYERSxEXPERTSxTOPKxWIDTH")
    b.add_argument("--bf16", action="store_true", help="also the first shape with bf16 autocast")
    args = ap.parse_args(argv)
    {"train": cmd_train, "reference": cmd_reference, "routes": cmd_routes, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
