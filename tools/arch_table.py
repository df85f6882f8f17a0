"""Which MoE architectures bmoe-run streams: for every architecture ``runtime/arch_specs.json`` can
build, write the synthetic model, decode it fully resident, then streamed with the cache off, a
small and a full budget, each in its own process (a llama.cpp assert only ends that process), and
record the outcome in the table (``stream``: ``streamed`` | ``resident only`` | ``refused`` |
``untested``, and ``stream_why``), then print the markdown table of docs/runtime.md
"Architectures". ``untested``: llama.cpp loads the architecture but no synthetic model of it
decodes (an assert in llama.cpp names what it needs): it takes a real model to say.

Usage: ``python tools/arch_table.py [--arch NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SPECS = Path(__file__).resolve().parents[1] / "runtime" / "arch_specs.json"

CHILD = r"""
import json, sys
from bmoe_top.runtime.arch_models import make_arch_model
from bmoe_top.runtime.engine import Engine, EngineError
arch, out, mode, fused = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
p = make_arch_model(out, arch, seed=1, fused=fused)
kw = dict(n_ctx=256, n_batch=64, n_threads=1, flash_attn=False)
budgets = {"resident": dict(stream=False), "off": dict(cache_mb=0), "small": dict(cache_mb=0.01, force_cache=True),
           "full": dict(cache_mb=1e6)}
try:
    with Engine(p, **kw, **budgets[mode]) as e:
        toks = e.generate("The quick brown fox", 8).tokens
        n_moe = len(e.layout.moe_layers)
    print(json.dumps({"tokens": toks, "moe_layers": n_moe}))
except EngineError as ex:
    print(json.dumps({"refused": str(ex)}))
"""


def run(arch: str, out: Path, mode: str, fused: bool) -> dict:
    env = {**os.environ, "GGML_NO_BACKTRACE": "1"}
    p = subprocess.run([sys.executable, "-c", CHILD, arch, str(out), mode, "1" if fused else "0"],
                       capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if "GGML_ASSERT" in ln or "error" in ln.lower()]
        why = lines[-1].split("llama.cpp/")[-1].strip() if lines else f"exit {p.returncode}"
        return {"crash": why}
    return json.loads(p.stdout.strip().splitlines()[-1])


def classify(arch: str, spec: dict, d: Path) -> tuple[str, str]:
    out = d / f"{arch}.gguf"
    ref = run(arch, out, "resident", False)
    if "crash" in ref:
        return "untested", f"no synthetic model decodes on llama.cpp 0.3.36 ({ref['crash']})"
    if "refused" in ref:
        return "refused", ref["refused"]
    variants = [False] + ([True] if spec.get("fused_tensors") else [])
    for fused in variants:
        want = run(arch, out, "resident", fused)["tokens"] if fused else ref["tokens"]
        for mode in ("off", "small", "full"):
            got = run(arch, out, mode, fused)
            if "refused" in got:
                return "resident only", got["refused"]
            if "crash" in got:
                return "resident only", f"streaming crashed llama.cpp: {got['crash']}"
            if got["tokens"] != want:
                return "differs", f"streamed tokens differ from resident ({mode}{', fused' if fused else ''})"
    return "streamed", "fused gate/up too" if len(variants) > 1 else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=[])
    args = ap.parse_args(argv)
    table = json.loads(SPECS.read_text())
    with tempfile.TemporaryDirectory(prefix="bmoe-archs-") as td:
        for arch in args.arch or sorted(table):
            spec = table[arch]
            if spec["status"] != "loads":
                spec["stream"], spec["stream_why"] = "refused", spec.get("why", spec["status"])
            else:
                spec["stream"], spec["stream_why"] = classify(arch, spec, Path(td))
            print(f"{arch}: {spec['stream']} {spec['stream_why'][:200]}", flush=True)
            SPECS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print("\n| architecture | bmoe-run | why / notes |\n| --- | --- | --- |")
    for arch in sorted(table):
        s = table[arch]
        print(f"| `{arch}` | {s.get('stream', '?')} | {s.get('stream_why', '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
