"""Which MoE architectures bmoe-run streams: for every architecture ``runtime/arch_specs.json`` can
build, write the synthetic model, decode it fully resident, then streamed with the cache off, a
small and a full budget, each in its own process (a llama.cpp assert only ends that process; a
model whose tokens do not change with other expert weights proves nothing and stays untested), and
record the outcome in the table (``stream``: ``streamed`` | ``resident only`` | ``refused`` |
``untested``, and ``stream_why``), then print the markdown table of docs/runtime.md
"Architectures" (``--docs docs/runtime.md`` writes it there in place of the old one).
``untested``: llama.cpp loads the architecture but no synthetic model of it decodes
(an assert in llama.cpp names what it needs): it takes a real model to say.

Usage: ``python tools/arch_table.py [--arch NAME ...] [--docs docs/runtime.md]``
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
p = make_arch_model(out, arch, seed=1, fused=fused, expert_seed=2 if mode == "other-experts" else None)
kw = dict(n_ctx=256, n_batch=64, n_threads=1, flash_attn=False)
budgets = {"resident": dict(stream=False), "other-experts": dict(stream=False), "off": dict(cache_mb=0),
           "small": dict(cache_mb=0.01, force_cache=True), "full": dict(cache_mb=1e6)}
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
    if run(arch, out, "other-experts", False).get("tokens") == ref["tokens"]:
        return "untested", "the synthetic model's tokens do not depend on its experts: identity would prove nothing"
    return "streamed", "fused gate/up too" if len(variants) > 1 else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", default=[])
    ap.add_argument("--docs", type=Path, default=None, help="rewrite the table in this file's Architectures section")
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
    rows = markdown_table(table)
    print("\n" + "\n".join(rows))
    if args.docs is not None:
        write_docs(args.docs, rows)
    return 0


HEADER = "| architecture | bmoe-run | why / notes |"


def markdown_table(table: dict) -> list[str]:
    """The rows of docs/runtime.md "Architectures", header first."""
    rows = [HEADER, "| --- | --- | --- |"]
    for arch in sorted(table):
        s = table[arch]
        notes = "; ".join(features(s)) if s.get("stream") == "streamed" else s.get("stream_why", "")
        rows.append(f"| `{arch}` | {s.get('stream', '?')} | {notes} |")
    return rows


def features(spec: dict) -> list[str]:
    """What of the MoE reference a synthetic model of ``spec`` exercises (shared experts, expert
    biases, expert-probability bias, expert groups, the fused gate/up variant)."""
    names = [n for n, _ in spec.get("tensors", [])]
    groups = [v for k, (_, v) in spec.get("kv", {}).items() if k.endswith(".expert_group_count")]
    out = []
    if any("_shexp." in n for n in names):
        out.append("shared experts")
    if any("_exps.bias" in n for n in names):
        out.append("expert biases")
    if any("exp_probs_b" in n for n in names):
        out.append("expert-probability bias")
    if any(isinstance(g, int) and g > 1 for g in groups):
        out.append("expert groups")
    if spec.get("fused_tensors"):
        out.append("fused gate/up variant")
    return out


def write_docs(path: Path, rows: list[str]) -> None:
    """Replace the table that starts with ``HEADER`` in ``path`` by ``rows`` (SystemExit when the
    file has no such table: nothing is written)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if HEADER not in lines:
        raise SystemExit(f"{path}: no architecture table ({HEADER!r}) to replace")
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    path.write_text("\n".join([*lines[:start], *rows, *lines[end:]]) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
