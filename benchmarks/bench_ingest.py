"""BMOE_PROGRESS ingest: lines/s of the full parser vs bare ``orjson.loads`` of the same payloads.

Payloads are realistic: a 512-token answer whose cumulative ``text`` grows every token (as the
contract's ``text`` field does), with the real runtime's extra fields, and a ``BMOE_LOAD`` line
on most tokens. Goal: parser throughput >= 0.5x bare orjson. Prints the ratio.

Two answers are measured: one with accents and an emoji (CPython stores it as UCS-4, and orjson
must transcode it to UTF-8) and a plain-ASCII one.

Run: .venv/bin/python benchmarks/bench_ingest.py [--tokens 512] [--rounds 31]
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
ASCII_WORDS = ("the router picks six experts per layer; misses are read from flash while "
               "compute waits. It costs 12 ms - cache hits are free :) and **bold**").split()


def make_lines(n_tokens: int, seed: int = 7, words=WORDS) -> list[str]:
    rng = random.Random(seed)
    text = ""
    lines = []
    for step in range(1, n_tokens + 1):
        text += (" " if text else "") + rng.choice(words)
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


def timed(fn, items, copy: bool = True) -> float:
    batch = fresh(items) if copy else items
    t0 = time.perf_counter()
    fn(batch)
    return time.perf_counter() - t0


def interleaved(fns_items, rounds: int) -> list[list[float]]:
    """Run each (fn, items, copy) once per round, alternating, so background load on a shared
    machine hits baseline and parser alike; returns per-function lists of round times."""
    times: list[list[float]] = [[] for _ in fns_items]
    for _ in range(rounds):
        for k, (fn, items, copy) in enumerate(fns_items):
            times[k].append(timed(fn, items, copy))
    return times


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


def measure(label: str, lines: list[str], rounds: int) -> float:
    payloads = [ln[ln.index("{"):] for ln in lines]
    nbytes = sum(len(p.encode()) for p in payloads)
    # correctness before speed: every line parses to a record
    assert all(type(parse_line(ln)).__name__ in ("Load", "Progress") for ln in lines)
    t_or_l, t_p_l, t_pa_l, t_cached_l = interleaved(
        [(run_orjson, payloads, True), (run_parser, lines, True), (run_parser_acc, lines, True),
         (run_orjson, payloads, False)], rounds)
    # best-of-rounds: the least disturbed run of each (noise only ever adds time)
    t_or, t_p, t_pa, t_or_cached = min(t_or_l), min(t_p_l), min(t_pa_l), min(t_cached_l)
    per_round = sorted(o / p for o, p in zip(t_or_l, t_p_l))
    n = len(lines)
    ratio = statistics.median(per_round)
    acc_ratio = statistics.median(sorted(o / p for o, p in zip(t_or_l, t_pa_l)))
    print(f"== {label}: {n} lines, {nbytes/1e6:.1f} MB of JSON (avg {nbytes/n:.0f} B/line)")
    print(f"bare orjson.loads      : {n/t_or:12,.0f} lines/s (best round)")
    print(f"parse_line             : {n/t_p:12,.0f} lines/s (best round)")
    print(f"parse_line + accumulate: {n/t_pa:12,.0f} lines/s (best round)")
    print(f"RATIO parse_line / bare orjson: median {ratio:.2f}x (goal >= 0.5x), "
          f"range {per_round[0]:.2f}..{per_round[-1]:.2f}x over {rounds} interleaved rounds")
    print(f"RATIO parse_line + TextAccumulator / bare orjson: median {acc_ratio:.2f}x")
    print(f"(orjson on reused str objects, UTF-8 already cached inside them: {n/t_or_cached:,.0f} "
          f"lines/s; parse_line is {t_or_cached/t_p:.2f}x of that)")
    return ratio


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=31)
    a = ap.parse_args(argv)
    r1 = measure("answer with accents and emoji", make_lines(a.tokens) * 4, a.rounds)
    r2 = measure("ASCII answer", make_lines(a.tokens, words=ASCII_WORDS) * 4, a.rounds)
    for label, r in (("accents/emoji", r1), ("ASCII", r2)):
        print(f"goal >= 0.5x bare orjson, {label} answer: {'MET' if r >= 0.5 else 'MISSED'} ({r:.2f}x)")
    return 0  # a missed goal is reported above; a non-zero exit is kept for crashes (make bench)


if __name__ == "__main__":
    sys.exit(main())
