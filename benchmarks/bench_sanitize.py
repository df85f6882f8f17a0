"""Terminal sanitizer: ``parsers.sanitize.sanitize`` against ``str.translate`` with the same
code-point table (the simplest implementation of the same character policy), on what a screen draws.

Workloads: short labels (model names, label values, file names: clean ASCII and UTF-8), a 2 KB
multi-line answer, and hostile strings (escape sequences, bidi overrides). Each round times both on
the same strings, interleaved; the ratio is the median over rounds (< 1 = faster than the baseline).
Goal: clean text costs no more than ``str.translate``.

Run: .venv/bin/python benchmarks/bench_sanitize.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bmoe_top.parsers.sanitize import SHOWN, sanitize

LABELS = ["Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf", "qwen35moe", "gpt-oss-120b", "/data/local/tmp/shardllm/x.gguf",
          "llamacpp:moe_cache_hits_total", "device=\"cuda:0\"", "Modèle-été-😀.gguf", "12.5 MiB/s"] * 250
ANSWER = ("A **mixture-of-experts (MoE)** model routes each token to a few experts.\n"
          "The router scores every expert; the top-k are run.\tCaches keep hot experts resident.\n") * 12
HOSTILE = ["model\x1b]0;pwned\x07.gguf", "a\x1b[2J\x1b[31mred", "x\u202egpj.exe", "osc52\x1b]52;c;SGVsbG8=\x07",
           "bell\x07\x07", "c1\x9b31m"] * 300

_TABLE = {i: chr(0x2400 + i) for i in range(32)}
_TABLE[0x7F] = "\u2421"
_TABLE.update({cp: f"<U+{cp:04X}>" for cp in SHOWN})
_TABLE_MULTI = {k: v for k, v in _TABLE.items() if k not in (0x0A, 0x09)}


def _run(fn, items) -> float:
    t0 = time.perf_counter()
    for s in items:
        fn(s)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    cases = [
        ("labels (2,000 short strings)", LABELS, lambda s: sanitize(s), lambda s: s.translate(_TABLE)),
        ("answer (2 KB, multi-line) x 200", [ANSWER] * 200, lambda s: sanitize(s, multiline=True),
         lambda s: s.translate(_TABLE_MULTI)),
        ("hostile (1,800 strings)", HOSTILE, lambda s: sanitize(s), lambda s: s.translate(_TABLE)),
        ("hostile, escapes='strip'", HOSTILE, lambda s: sanitize(s, escapes="strip"), lambda s: s.translate(_TABLE)),
    ]
    print("sanitize vs str.translate (same code-point table), interleaved rounds, median ratio")
    for name, items, ours, base in cases:
        to, tb, ratios = [], [], []
        for _ in range(a.rounds):
            b = _run(base, items)
            o = _run(ours, items)
            tb.append(b)
            to.append(o)
            ratios.append(o / b)
        per = min(to) / len(items) * 1e9
        print(f"  {name:34s} sanitize {per:8.0f} ns/string  translate {min(tb) / len(items) * 1e9:8.0f} ns  "
              f"RATIO {statistics.median(ratios):.2f}x (range {min(ratios):.2f}..{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
