"""Convert the trained demo MoE (tools/train_demo_model.py) to GGUF, quantize it, and prove the conversion.

Runs in the project venv (needs llama-cpp-python and gguf, not torch):

    .venv/bin/python tools/convert_demo_model.py --run /work/build/demo-moe

Reads ``weights.npz`` (float32 tensors already under llama.cpp qwen3moe names), ``train_meta.json``
and ``reference_greedy.json`` (PyTorch fp32 greedy continuations) from the run directory, then:

1. writes ``demo-moe-pystdlib.f32.gguf`` in the run directory with ``runtime.models.write_f32_gguf``
   (qwen3moe layout, byte tokenizer);
2. quantizes it with llama.cpp's quantizer to ``bmoe_top/data/demo-moe-pystdlib.q8_0.gguf``;
3. greedy-decodes every reference prompt with llama.cpp on both files and compares the tokens with
   PyTorch's: the f32 file with an f32 KV cache must match exactly (the conversion proof); the
   q8_0 file (default f16 KV cache) is reported token by token too;
4. copies the reference continuations next to the GGUF (``*.reference.json``), so the test suite
   can re-check llama.cpp against PyTorch without torch, and writes ``convert_report.json``.

Exit status 0 when the f32 proof holds on every prompt, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from bmoe_top.runtime import demo_model, models
from bmoe_top.runtime.models import ModelShape, llama_greedy

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bmoe_top" / "data"


def shape_from_config(cfg: dict) -> ModelShape:
    keys = ("n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_expert", "n_expert_used", "n_ff_exp",
            "n_ctx_train", "n_vocab", "rope_freq_base", "rms_eps")
    return ModelShape(**{k: cfg[k] for k in keys})


def compare(path: Path, refs: list[dict], *, kv_f32: bool) -> list[dict]:
    rows = []
    for ref in refs:
        prompt = list(ref["prompt"].encode())
        want = ref["tokens"]
        got = llama_greedy(path, prompt, len(want), n_ctx=512, kv_f32=kv_f32)
        first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                          None if len(got) == len(want) else min(len(got), len(want)))
        rows.append({"prompt": ref["prompt"], "n": len(want), "match": got == want, "first_diff": first_diff,
                     "llama_text": bytes(t for t in got if t < 256).decode("utf-8", "replace")})
    return rows


# ------------------------------------------------------------------------------ routing analysis

def make_windows(run: Path, n_windows: int, size: int) -> list[str]:
    """Held-out text windows: the validation files (train_meta.json) joined by newlines, cut into
    consecutive ``size``-byte windows ending on an ASCII byte (so every window is valid UTF-8)."""
    meta = json.loads((run / "train_meta.json").read_text())
    root = Path(meta["corpus"]["root"])
    data = b"\n".join((root / f).read_bytes() for f in meta["corpus"]["val_files"])
    out, pos = [], 0
    while len(out) < n_windows and pos + size <= len(data):
        end = pos + size
        while data[end - 1] >= 0x80:
            end -= 1
        out.append(data[pos:end].decode("utf-8"))
        pos = end
    return out


def llama_routes(model: Path, windows: list[str], tmp: Path) -> np.ndarray:
    """llama.cpp routing of each window from a real ``bmoe-run --no-moe-stream --route-trace`` run
    (the window as the prompt, prefill rows): (n_tokens, n_layer - 1, k) int16.

    The last layer is left out: in prefill llama.cpp runs the last layer's MoE only for the
    tokens whose logits are wanted (the final one), so it routes nothing for the others."""
    import csv
    import subprocess

    bmoe_run = Path(sys.executable).with_name("bmoe-run")
    per_window = []
    for i, w in enumerate(windows):
        prompt = tmp / f"w{i}.txt"
        prompt.write_bytes(w.encode())
        trace = tmp / f"w{i}.csv"
        subprocess.run([str(bmoe_run), "-m", str(model), "-f", str(prompt), "-n", "1", "-t", "2", "--quiet",
                        "--no-moe-stream", "--route-trace", str(trace)], check=True, capture_output=True)
        with open(trace, newline="") as fh:
            rows = [r for r in csv.reader(line for line in fh if not line.startswith("#"))][1:]
        a = np.array([[int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])] for r in rows])
        a = a[a[:, 0] == 0]  # prefill
        n_tok, n_layer, k = len(w.encode()), int(a[:, 2].max()) + 1, int(a[:, 3].max()) + 1
        a = a[a[:, 2] < n_layer - 1]
        arr = np.full((n_tok, n_layer - 1, k), -1, dtype=np.int16)
        arr[a[:, 1], a[:, 2], a[:, 3]] = a[:, 4]
        if (arr < 0).any():
            raise RuntimeError(f"window {i}: route trace has holes")
        per_window.append(arr)
    return np.concatenate(per_window)


def lru_hit_rate(trace: np.ndarray, capacity: int) -> float:
    """Decode-style LRU over (layer, expert) slots, one token at a time, ``capacity`` slots shared
    by all layers (as bmoe-run's --cache-mb with equal slices): share of routings that hit."""
    from collections import OrderedDict

    lru: OrderedDict[tuple[int, int], None] = OrderedDict()
    hits = total = 0
    for tok in trace:
        for il, experts in enumerate(tok):
            for e in experts:
                key = (il, int(e))
                total += 1
                if key in lru:
                    hits += 1
                    lru.move_to_end(key)
                else:
                    lru[key] = None
                    while len(lru) > capacity:
                        lru.popitem(last=False)
    return hits / total


def skew(trace: np.ndarray, n_expert: int) -> list[dict]:
    """Per layer: share of routings taken by the top 10% experts, entropy of the routing share
    against uniform (1.0 = uniform), busiest expert share, experts never routed."""
    rows = []
    top = max(1, round(0.1 * n_expert))
    for il in range(trace.shape[1]):
        counts = np.bincount(trace[:, il].ravel(), minlength=n_expert).astype(float)
        share = np.sort(counts)[::-1] / counts.sum()
        p = share[share > 0]
        ent = float(-(p * np.log2(p)).sum())
        rows.append({"layer": il, "top10pct_share": float(share[:top].sum()),
                     "entropy_vs_uniform": ent / np.log2(n_expert), "max_share": float(share[0]),
                     "unused": int((counts == 0).sum())})
    return rows


def repeat_rate(trace: np.ndarray) -> float:
    """Temporal locality: share of routings (token t, layer, expert) whose expert was also routed
    at token t-1 in the same layer (windows are concatenated; the first token counts as a miss)."""
    prev = np.sort(trace[:-1], -1)
    cur = trace[1:]
    same = (cur[..., :, None] == prev[..., None, :]).any(-1)
    return float(same.sum() / trace.size)


def routing_report(run: Path, random_model: Path) -> dict:
    meta = json.loads((run / "train_meta.json").read_text())
    n_expert = meta["config"]["n_expert"]
    windows = json.loads((run / "windows.json").read_text())["windows"]
    trained = DATA / demo_model.TRAINED_DEMO_FILE
    budgets = (10, 25, 50, 75)
    rep: dict = {"windows": len(windows), "tokens": sum(len(w.encode()) for w in windows), "budgets_pct": budgets}
    with tempfile.TemporaryDirectory() as td:
        (Path(td) / "trained").mkdir()
        (Path(td) / "random").mkdir()  # bmoe-run never overwrites a trace: one directory per model
        traces = {"trained/llama.cpp": llama_routes(trained, windows, Path(td) / "trained"),
                  "random/llama.cpp": llama_routes(random_model, windows, Path(td) / "random")}
    for name in ("trained", "random"):
        p = run / f"routes_torch_{name}.npy"
        if p.exists():
            traces[f"{name}/pytorch"] = np.load(p)
    for name, tr in traces.items():
        n_slots = tr.shape[1] * n_expert  # llama.cpp traces cover n_layer - 1 layers
        rep[name] = {"layers": tr.shape[1],
                     "lru_hit_rate": {f"{b}%": lru_hit_rate(tr, round(n_slots * b / 100)) for b in budgets},
                     "skew": skew(tr, n_expert), "repeat_rate": repeat_rate(tr)}
        print(name, {k: round(v, 3) for k, v in rep[name]["lru_hit_rate"].items()},
              f"repeat {rep[name]['repeat_rate']:.3f}", flush=True)
    for name in ("trained", "random"):
        a, b = traces.get(f"{name}/llama.cpp"), traces.get(f"{name}/pytorch")
        if a is not None and b is not None:
            b = b[:, : a.shape[1]]
            traces[f"{name}/pytorch-first-{a.shape[1]}-layers"] = b
            rep[f"{name}/pytorch-first-{a.shape[1]}-layers"] = {
                "lru_hit_rate": {f"{x}%": lru_hit_rate(b, round(a.shape[1] * n_expert * x / 100)) for x in budgets}}
            same = (np.sort(a, -1) == np.sort(b, -1)).all(-1)
            rep[f"{name}_agreement"] = float(same.mean())  # (token, layer) pairs with the same top-k set
            print(f"{name}: llama.cpp and PyTorch pick the same top-k set for {same.mean():.4f} of (token, layer)")
    (run / "routing_report.json").write_text(json.dumps(rep, indent=1))
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="training run directory (weights.npz, train_meta.json, ...)")
    ap.add_argument("--qtype", default="q8_0")
    ap.add_argument("--dest", default=str(DATA), help="directory of the quantized GGUF (default: bmoe_top/data)")
    ap.add_argument("--windows", action="store_true", help="only write windows.json (held-out text windows)")
    ap.add_argument("--routing", default=None, metavar="RANDOM_GGUF",
                    help="only the routing report: llama.cpp traces of the committed model and RANDOM_GGUF")
    ap.add_argument("--n-windows", type=int, default=24)
    ap.add_argument("--window-bytes", type=int, default=1024)
    args = ap.parse_args(argv)
    run = Path(args.run)
    if args.windows:
        w = make_windows(run, args.n_windows, args.window_bytes)
        (run / "windows.json").write_text(json.dumps({"windows": w}))
        print(f"{len(w)} windows, {sum(len(x.encode()) for x in w)} bytes")
        return 0
    if args.routing:
        routing_report(run, Path(args.routing))
        return 0
    meta = json.loads((run / "train_meta.json").read_text())
    refs = json.loads((run / "reference_greedy.json").read_text())
    shape = shape_from_config(meta["config"])
    weights = np.load(run / "weights.npz")

    f32 = run / "demo-moe-pystdlib.f32.gguf"
    corpus = meta["corpus"]
    models.write_f32_gguf(
        f32, shape, lambda name, _shape: weights[name],
        name="bmoe demo moe (trained on the CPython stdlib sources)",
        extra_kv={
            "bmoe.trained_on": f"CPython {corpus['python']} standard library sources "
                               f"({corpus['n_train_files']} train files, sha256 {corpus['sha256'][:16]})",
            "bmoe.train_script": "tools/train_demo_model.py",
            "bmoe.val_loss_nats_per_byte": f"{meta['final_val_loss']:.4f}",
        })
    dest = Path(args.dest)
    out = dest / demo_model.TRAINED_DEMO_FILE.replace("q8_0", args.qtype)
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".demo-", suffix=".tmp", dir=dest)
    os.close(fd)
    try:
        models.quantize_gguf(f32, tmp, args.qtype)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

    report = {"f32_kv_f32": compare(f32, refs, kv_f32=True), "f32_kv_f16": compare(f32, refs, kv_f32=False),
              f"{args.qtype}_kv_f16": compare(out, refs, kv_f32=False),
              "gguf_bytes": out.stat().st_size, "expert_bank_bytes": models.expert_bank_bytes(out)}
    (run / "convert_report.json").write_text(json.dumps(report, indent=1))
    deq = run / f"reference_greedy.{out.stem}.json"
    (out.with_name(out.name.replace(".gguf", ".reference.json"))).write_text(json.dumps(
        {"note": "PyTorch fp32 greedy continuations (tokens, and top-1 minus top-2 logit per step) of the "
                 "trained demo model (tools/train_demo_model.py reference): 'references' with the trained "
                 "fp32 weights, 'references_dequantized' with this file's weights dequantized. llama.cpp "
                 "must reproduce them, except after a step whose margin is a near-tie "
                 "(tools/convert_demo_model.py, tests/test_models_trained.py)",
         "references": refs,
         "references_dequantized": json.loads(deq.read_text()) if deq.exists() else None}, indent=1) + "\n")
    for key in ("f32_kv_f32", "f32_kv_f16", f"{args.qtype}_kv_f16"):
        rows = report[key]
        print(f"{key}: {sum(r['match'] for r in rows)}/{len(rows)} prompts identical "
              f"(first differences: {[r['first_diff'] for r in rows]})")
    print(f"wrote {out} ({out.stat().st_size / 2**20:.2f} MiB, experts {report['expert_bank_bytes'] / 2**20:.2f} MiB)")
    return 0 if all(r["match"] for r in report["f32_kv_f32"]) else 1


if __name__ == "__main__":
    sys.exit(main())
