"""Terminal sanitizer: ``parsers.sanitize.sanitize`` against the usual fast way to do the same: a
string that is ASCII and printable is returned as is (two C-level checks), any other is searched
with one precompiled regular expression of every character the policy replaces, and only a string
where it finds one is rewritten (``re.sub`` with the same code-point table), on what a screen draws.

Workloads: short labels (model names, label values, file names: clean ASCII and UTF-8), a 2 KB
multi-line answer, and hostile strings (escape sequences, bidi overrides). Each round times both on
the same strings, interleaved; the ratio is the median over rounds (< 1 = faster than the baseline).
Goal: clean text costs no more than the baseline.

Run: .venv/bin/python benchmarks/bench_sanitize.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import re
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


def _class(table: dict[int, str]) -> re.Pattern[str]:
    """One character class of the table's code points, consecutive ones as ranges."""
    cps = sorted(table)
    parts, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = re.escape(chr(cps[i])), re.escape(chr(cps[j]))
        parts.append(lo if i == j else f"{lo}-{hi}")
        i = j + 1
    return re.compile("[" + "".join(parts) + "]")


_BAD, _BAD_MULTI = _class(_TABLE), _class(_TABLE_MULTI)


def _baseline(table: dict[int, str], bad: re.Pattern[str]):  # type: ignore[no-untyped-def]
    def clean(s: str) -> str:
        if s.isascii() and s.isprintable():
            return s
        if bad.search(s) is None:
            return s
        return bad.sub(lambda m: table[ord(m.group())], s)

    return clean


BASE, BASE_MULTI = _baseline(_TABLE, _BAD), _baseline(_TABLE_MULTI, _BAD_MULTI)


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
        ("labels (2,000 short strings)", LABELS, lambda s: sanitize(s), BASE),
        ("answer (2 KB, multi-line) x 200", [ANSWER] * 200, lambda s: sanitize(s, multiline=True), BASE_MULTI),
        ("hostile (1,800 strings)", HOSTILE, lambda s: sanitize(s), BASE),
        ("hostile, escapes='strip'", HOSTILE, lambda s: sanitize(s, escapes="strip"), BASE),
    ]
    print("sanitize vs an ASCII-printable fast path + one precompiled regex search (same code-point table), "
          "interleaved rounds, median ratio")
    for name, items, ours, base in cases:
        to, tb, ratios = [], [], []
        for _ in range(a.rounds):
            b = _run(base, items)
            o = _run(ours, items)
            tb.append(b)
            to.append(o)
            ratios.append(o / b)
        per = min(to) / len(items) * 1e9
        print(f"  {name:34s} sanitize {per:8.0f} ns/string  regex baseline {min(tb) / len(items) * 1e9:8.0f} ns  "
              f"RATIO {statistics.median(ratios):.2f}x (range {min(ratios):.2f}..{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
