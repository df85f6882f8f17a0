"""Several requests decoded together (``runtime/slots.SlotDecoder``, ``serve --parallel K``)
against the same requests run one after the other on a one-slot Engine, in the same run.

K requests (K = 2, 4, 8: three sizes, so growth shows) of ``--tokens`` greedy tokens each, with
distinct prompts, on a generated model (``--preset``, default ``demo`` in q8_0) streaming its
experts under a budget of ``--cache-pct`` % of the expert bank (each run starts from an empty
cache); rounds alternate which arm runs first. Per arm: all slots' tokens over the wall time from
the first prefill to the last token (tok/s, all slots), and the expert payload read per generated
token (a shared step reads the union of its rows' experts once). The ratio is together /
sequential, the median of the per-round ratios; ``differ`` counts the answers (of K) that are not
the same in the two arms (greedy: 0 expected, docs/runtime.md "Parallel slots" says when not).

Run: ``.venv/bin/python benchmarks/bench_slots.py [--rounds 3] [--tokens 48]``. On a machine
other jobs share, absolute figures are noisy; the ratios, measured side by side, are the guide.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bmoe_top.runtime.engine import Engine  # noqa: E402
from bmoe_top.runtime.models import make_model  # noqa: E402
from bmoe_top.runtime.results import MIB  # noqa: E402
from bmoe_top.runtime.slots import SlotDecoder  # noqa: E402

PROMPTS = ["The quick brown fox", "Experts stream from flash", "A cache of experts", "Two at once",
           "Mixture of experts on a phone", "Tokens per second", "One step, many rows", "Routing tables"]
SIZES = (2, 4, 8)
N_CTX_SLOT = 256


def _engine(model: Path, cache_mb: float, n_seq: int, threads: int) -> Engine:
    return Engine(model, n_ctx=N_CTX_SLOT * n_seq, n_seq=n_seq, cache_mb=cache_mb, n_threads=threads,
                  n_batch=64, force_cache=True)


def sequential(model: Path, cache_mb: float, k: int, n: int, threads: int) -> tuple[float, float, list]:
    """(tok/s, MiB read per token, answers) of k requests one after the other."""
    with _engine(model, cache_mb, 1, threads) as e:
        t0 = time.perf_counter()
        res = [e.generate(p, n) for p in PROMPTS[:k]]
        wall = time.perf_counter() - t0
        read = e.cache_stats().read_bytes if e.cache is not None else 0
    toks = sum(r.n_tokens for r in res)
    return toks / wall, read / MIB / toks, [r.tokens for r in res]


def together(model: Path, cache_mb: float, k: int, n: int, threads: int) -> tuple[float, float, list]:
    """(tok/s, MiB read per token, answers) of k requests decoded together."""
    with _engine(model, cache_mb, k, threads) as e:
        dec = SlotDecoder(e)
        out: dict[int, list[int]] = {}
        t0 = time.perf_counter()
        for q in range(k):
            dec.start(q, PROMPTS[q], n)
        while dec.running:
            for q, res, err in dec.step():
                if err is not None:
                    raise SystemExit(f"slot {q}: {err}")
                out[q] = res.tokens
        wall = time.perf_counter() - t0
        read = e.cache_stats().read_bytes if e.cache is not None else 0
    toks = sum(len(t) for t in out.values())
    return toks / wall, read / MIB / toks, [out[q] for q in range(k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--cache-pct", type=float, default=50.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        model = make_model(Path(d) / f"{args.preset}-q8_0.gguf", preset=args.preset, qtype="q8_0", seed=0)
        with Engine(model, n_ctx=N_CTX_SLOT, stream=False) as e:
            bank_mib = e.layout.expert_bank_bytes / MIB
        cache_mb = round(bank_mib * args.cache_pct / 100.0, 2)
        print(f"model {args.preset} q8_0, expert bank {bank_mib:.1f} MiB, cache {cache_mb} MiB, "
              f"{args.tokens} tokens a request, {args.threads} threads, {args.rounds} rounds")
        print(f"{'K':>3} {'seq tok/s':>10} {'tog tok/s':>10} {'ratio':>6} {'seq MiB/tok':>12} {'tog MiB/tok':>12}"
              f" {'differ':>6}")
        for k in SIZES:
            rows = []
            for r in range(args.rounds):
                arms = [sequential, together] if r % 2 == 0 else [together, sequential]
                got = {f.__name__: f(model, cache_mb, k, args.tokens, args.threads) for f in arms}
                s, t = got["sequential"], got["together"]
                differ = sum(a != b for a, b in zip(s[2], t[2]))
                rows.append((s[0], t[0], t[0] / s[0], s[1], t[1], differ))
            med = [statistics.median(x) for x in zip(*rows)]
            print(f"{k:>3} {med[0]:>10.1f} {med[1]:>10.1f} {med[2]:>6.2f} {med[3]:>12.3f} {med[4]:>12.3f}"
                  f" {max(r[5] for r in rows):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
