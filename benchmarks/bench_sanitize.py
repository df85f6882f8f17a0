"""Terminal sanitizer: ``parsers.sanitize.sanitize`` against the usual fast way to do the same: a
string that is ASCII and printable is returned as is (two C-level checks), other ASCII text (a
multi-line answer) is searched with a precompiled class of the policy's ASCII characters, any
other string with one precompiled regular expression of every character the policy replaces, and
only a string where a search finds one is rewritten (``re.sub`` with the same code-point table),
on what a screen draws.

Workloads: short labels (model names, label values, file names: clean ASCII and UTF-8), a 2 KB
multi-line answer, and hostile strings (escape sequences, bidi overrides). Each round times both on
the same strings (``--passes`` over them each), interleaved; the ratio is the median over rounds
(< 1 = faster than the baseline); both must give the same text.
Goal: clean text costs no more than the baseline.

Run: .venv/bin/python benchmarks/bench_sanitize.py [--rounds 9] [--passes 20]
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
import time

from bmoe_top.parsers.sanitize import _SEQUENCE, SHOWN, sanitize

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


def _baseline(table: dict[int, str]):  # type: ignore[no-untyped-def]
    """ASCII text: printable as is, else searched for the table's ASCII code points only (a
    small class: a multi-line answer keeps its line breaks and is not printable); other text:
    searched for every code point of the table; rewritten only where a search finds one."""
    bad = _class(table)
    bad_ascii = _class({k: v for k, v in table.items() if k < 0x80})

    def clean(s: str) -> str:
        if s.isascii():
            if s.isprintable() or bad_ascii.search(s) is None:
                return s
            return bad_ascii.sub(lambda m: table[ord(m.group())], s)
        if bad.search(s) is None:
            return s
        return bad.sub(lambda m: table[ord(m.group())], s)

    return clean


BASE, BASE_MULTI = _baseline(_TABLE), _baseline(_TABLE_MULTI)


def BASE_STRIP(s: str) -> str:  # noqa: N802 - a baseline, named as the others
    """The baseline after removing escape sequences with the same precompiled expression."""
    return BASE(_SEQUENCE.sub("", s))


def _run(fn, items, passes: int) -> float:
    t0 = time.perf_counter()
    for _ in range(passes):
        for s in items:
            fn(s)
    return (time.perf_counter() - t0) / passes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--passes", type=int, default=20, help="passes over a workload's strings per timing")
    a = ap.parse_args(argv)
    cases = [
        # each side one Python call a string (a partial adds none; a lambda would add one to ours)
        ("labels (2,000 short strings)", LABELS, sanitize, BASE),
        ("answer (2 KB, multi-line) x 200", [ANSWER] * 200, functools.partial(sanitize, multiline=True), BASE_MULTI),
        ("hostile (1,800 strings)", HOSTILE, sanitize, BASE),
        ("hostile, escapes='strip'", HOSTILE, functools.partial(sanitize, escapes="strip"), BASE_STRIP),
    ]
    print("sanitize vs an ASCII-printable fast path + one precompiled regex search (same code-point table), "
          "interleaved rounds, median ratio")
    for name, items, ours, base in cases:
        if any(ours(x) != base(x) for x in set(items)):
            sys.exit(f"MISMATCH {name}: sanitize and the baseline give different text")
        to, tb, ratios = [], [], []
        for _ in range(a.rounds):
            b = _run(base, items, a.passes)
            o = _run(ours, items, a.passes)
            tb.append(b)
            to.append(o)
            ratios.append(o / b)
        per = min(to) / len(items) * 1e9
        print(f"  {name:34s} sanitize {per:8.0f} ns/string  regex baseline {min(tb) / len(items) * 1e9:8.0f} ns  "
              f"RATIO {statistics.median(ratios):.2f}x (range {min(ratios):.2f}..{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
