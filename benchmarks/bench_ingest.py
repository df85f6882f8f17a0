"""BMOE_PROGRESS ingest: lines/s of the full parser vs bare ``orjson.loads`` of the same payloads.

Payloads are realistic: a 512-token answer whose cumulative ``text`` grows every token (as the
contract's ``text`` field does), with the real runtime's extra fields, and a ``BMOE_LOAD`` line
on most tokens. Goal (issue #2): parser throughput >= 0.5x bare orjson. Prints the ratio.

Run: .venv/bin/python benchmarks/bench_ingest.py [--tokens 512] [--rounds 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import orjson

from bmoe_top.parsers.bmoe_lines import Progress, TextAccumulator, parse_line

WORDS = ("the router picks six experts per layer; misses are read from flash while "
         "compute waits. Ça coûte 12 ms — cache hits are free 🙂 and résumé").split()


def make_lines(n_tokens: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    text = ""
    lines = []
    for step in range(1, n_tokens + 1):
        text += (" " if text else "") + rng.choice(WORDS)
        if rng.random() < 0.8:
            lines.append("BMOE_LOAD " + orjson.dumps({"mb": round(rng.uniform(10, 400), 3),
                                                      "ms": round(rng.uniform(5, 300), 3)}).decode())
        rec = {
            "step": step, "steps": n_tokens,
            "wall_ms": round(rng.uniform(100, 600), 3), "io_ms": round(rng.uniform(50, 800), 3),
            "compute_ms": round(rng.uniform(80, 400), 3), "mgmt_ms": round(rng.uniform(0, 60), 3),
            "stall_ms": round(rng.uniform(0, 100), 3), "read_mb": round(rng.uniform(0, 900), 3),
            "cache_hit_pct": round(min(99.0, step / 5), 2), "majflt": rng.randint(0, 50),
            "cpu_ms": round(rng.uniform(300, 2000), 3), "text": text,
        }
        lines.append("BMOE_PROGRESS " + orjson.dumps(rec).decode())
    return lines


def fresh(items: list[str]) -> list[str]:
    """New string objects with the same content. A live stream parses every line once: reusing
    the same str objects across rounds would let orjson reuse the UTF-8 form CPython caches
    inside a str after the first encode, which no real line ever has."""
    return [s.encode().decode() for s in items]


def bench(fn, items, rounds: int, copy: bool = True) -> float:
    times = []
    for _ in range(rounds):
        batch = fresh(items) if copy else items
        t0 = time.perf_counter()
        fn(batch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_orjson(payloads):
    loads = orjson.loads
    for p in payloads:
        loads(p)


def run_parser(lines):
    for ln in lines:
        parse_line(ln)


def run_parser_acc(lines):
    acc = TextAccumulator()
    for ln in lines:
        r = parse_line(ln)
        if type(r) is Progress:
            acc.feed(r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    lines = make_lines(a.tokens) * 4  # 4 answers back to back
    payloads = [ln[ln.index("{"):] for ln in lines]
    nbytes = sum(len(p) for p in payloads)
    # correctness before speed: every line parses to a record
    assert all(type(parse_line(ln)).__name__ in ("Load", "Progress") for ln in lines)
    t_or = bench(run_orjson, payloads, a.rounds)
    t_p = bench(run_parser, lines, a.rounds)
    t_pa = bench(run_parser_acc, lines, a.rounds)
    t_or_cached = bench(run_orjson, payloads, a.rounds, copy=False)
    n = len(lines)
    print(f"lines: {n}  payload bytes: {nbytes/1e6:.1f} MB  (avg {nbytes/n:.0f} B/line)")
    print(f"bare orjson.loads      : {n/t_or:12,.0f} lines/s")
    print(f"parse_line             : {n/t_p:12,.0f} lines/s   ratio {t_or/t_p:.2f}x of orjson (goal >= 0.5x)")
    print(f"(bare orjson on reused str objects, UTF-8 cached: {n/t_or_cached:,.0f} lines/s; "
          f"parse_line is {t_or_cached/t_p:.2f}x of that)")
    print(f"parse_line + accumulate: {n/t_pa:12,.0f} lines/s   ratio {t_or/t_pa:.2f}x of orjson")
    return 0 if t_or / t_p >= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
