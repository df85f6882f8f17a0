"""Memory of a long live run: a synthetic live feed of N tokens (default 10,000,000) with routing for
48 layers (top-8 of 128 experts), through the live path without the pipe: each line parsed
(``parse_line``) and applied (``RecordFeed``) to a bounded run model (``RunModel(LIVE)``).

Measured: the process's RSS along the run (goal: under 250 MB, and flat over the last half: the
spread of the samples there under 16 MB), and the whole-run series the model serves against an
exact computation over the same feed (the values are a deterministic function of the token
index, so every bin's count, mean, min and max is recomputed from scratch: they must agree, as
must the per-layer hit share per bin). Baseline in the same run: the RSS before the feed, and the
bytes per token of a model that keeps every row (``KEEP_ALL``, a child process fed the first
``--keep-all-tokens`` tokens), so the ratio says what the bounded model saves.

Run: ``.venv/bin/python benchmarks/bench_memory.py [--tokens 10000000] [--layers 48]``. The default
takes a while (tens of minutes on a loaded machine); ``--tokens 1000000`` checks it in minutes.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time

import numpy as np
import orjson

from bmoe_top.parsers.bmoe_lines import parse_line
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import LIVE, RunModel

E, K, TURN = 128, 8, 512
P = 97  # routing patterns (the token index modulo P picks one)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wall_ms(i: np.ndarray) -> np.ndarray:
    return 100.0 + (i * 7919 % 1000) / 10.0 + 20.0 * np.sin(i / 5000.0)


def read_mb(i: np.ndarray) -> np.ndarray:
    return (i % 13) * 0.5


def hits_of(r: int, layer: int) -> list[int]:
    return [1 if (r + layer + j) % 4 else 0 for j in range(K)]


def route_tails(n_layer: int) -> list[str]:
    """The part of a ``BMOE_ROUTE`` line after its step, one per pattern."""
    out = []
    for r in range(P):
        experts = [[(r * 3 + il + j * 11) % E for j in range(K)] for il in range(n_layer)]
        hits = [hits_of(r, il) for il in range(n_layer)]
        out.append(',"turn":0,"phase":"decode","experts":' + orjson.dumps(experts).decode() + ',"hit":'
                   + orjson.dumps(hits).decode() + "}")
    return out


def feed(run: RunModel, n: int, n_layer: int, samples: int, quiet: bool = False) -> list[tuple[int, float, float]]:
    """Feed ``n`` tokens; returns (tokens so far, RSS MiB, seconds) ``samples`` times."""
    rf = RecordFeed(run, "bench")
    tails = route_tails(n_layer)
    every = max(1, n // samples)
    out: list[tuple[int, float, float]] = []
    t0 = time.monotonic()
    chunk = 4096
    for base in range(0, n, chunk):
        idx = np.arange(base, min(n, base + chunk))
        walls, reads = wall_ms(idx).tolist(), read_mb(idx).tolist()
        for i, w, rd in zip(idx.tolist(), walls, reads):
            step = i % TURN + 1
            if step == 1:
                turn = i // TURN
                run.note_request({"cmd": "generate", "id": turn + 1, "prompt": f"prompt {turn}", "n_predict": TURN})
                rf.apply(parse_line('BMOE_BEGIN {"id":%d}' % (turn + 1)))
            rf.apply(parse_line('BMOE_ROUTE {"step":%d' % step + tails[i % P]))
            rf.apply(parse_line(
                'BMOE_PROGRESS {"step":%d,"steps":%d,"wall_ms":%r,"io_ms":%r,"compute_ms":%r,"mgmt_ms":1.0,'
                '"stall_ms":0.0,"read_mb":%r,"cache_hit_pct":%r,"delta_text":"w%d "}'
                % (step, TURN, w, w * 0.3, w * 0.7 - 1.0, rd, (i % 1000) / 10.0, step)))
            if step == TURN or i == n - 1:
                done = '{"id":%d,"cancelled":false,"tokens":%d,"tok_s":8.0}' % (i // TURN + 1, step)
                rf.apply(parse_line("BMOE_DONE " + done))
            if (i + 1) % every == 0:
                out.append((i + 1, rss_mib(), time.monotonic() - t0))
                if not quiet:
                    print(f"  {i + 1:>11,} tokens  RSS {out[-1][1]:7.1f} MiB  {out[-1][2]:7.1f} s", flush=True)
    return out


def check_series(run: RunModel, n: int, n_layer: int, bins: int = 200) -> tuple[int, int]:
    """Bins checked against an exact recomputation; returns (bins, layer bins) that agree (asserted)."""
    s = run.series(["wall_ms", "read_mib"], bins=bins)
    e = s.edges
    assert e[0] == 0 and e[-1] == n
    for j in range(s.bins):
        idx = np.arange(e[j], e[j + 1])
        for name, values in (("wall_ms", wall_ms(idx)), ("read_mib", read_mb(idx))):
            assert s.count[name][j] == len(idx), (name, j)
            assert math.isclose(s.mean(name)[j], float(values.mean()), rel_tol=1e-9), (name, j)
            assert s.min[name][j] == values.min() and s.max[name][j] == values.max(), (name, j)
    ls = run.layer_series(bins=bins)
    le = ls.edges
    hit_table = np.array([[sum(hits_of(r, il)) for r in range(P)] for il in range(n_layer)], dtype=np.float64)
    for j in range(len(le) - 1):
        idx = np.arange(le[j], le[j + 1])
        per_r = np.bincount(idx % P, minlength=P).astype(np.float64)
        exact = hit_table @ per_r / (K * len(idx))
        assert np.allclose(ls.share[:, j], exact, rtol=1e-12), j
    return s.bins, len(le) - 1


def keep_all_bytes_per_token(n: int, n_layer: int) -> float:
    """A child process that keeps every row: RSS growth per token over its second half."""
    code = (f"import sys; sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r}); import bench_memory as b; "
            f"from bmoe_top.tui.model import KEEP_ALL, RunModel; "
            f"s = b.feed(RunModel(KEEP_ALL), {n}, {n_layer}, 4, quiet=True); "
            f"print((s[-1][1] - s[1][1]) * 1048576 / (s[-1][0] - s[1][0]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--keep-all-tokens", type=int, default=100_000)
    a = ap.parse_args()
    base = rss_mib()
    print(f"bench_memory: {a.tokens:,} tokens, routing for {a.layers} layers x top-{K} of {E} experts, "
          f"bounded run model (LIVE); RSS before the feed {base:.1f} MiB")
    run = RunModel(LIVE)
    samples = feed(run, a.tokens, a.layers, a.samples)
    secs = samples[-1][2]
    rss = [m for _, m, _ in samples]
    second = rss[len(rss) // 2:]
    peak, spread = max(rss), max(second) - min(second)
    bins, lbins = check_series(run, a.tokens, a.layers)
    keep = keep_all_bytes_per_token(a.keep_all_tokens, a.layers)
    mid, last = samples[len(samples) // 2], samples[-1]
    bounded = (last[1] - mid[1]) * 1048576 / max(1, last[0] - mid[0])
    ok = peak < 250 and spread < 16
    print(f"fed {a.tokens:,} tokens in {secs:.0f} s ({a.tokens / secs:,.0f} tokens/s, loaded machine)")
    print(f"RSS peak {peak:.1f} MiB (goal < 250), spread over the last half {spread:.1f} MiB (goal < 16): "
          f"{'OK' if ok else 'FAIL'}")
    print(f"whole-run series: {bins} bins x 2 columns and {lbins} bins x {a.layers} layers agree with the exact "
          f"computation (count, mean, min, max; hit share)")
    print(f"baseline KEEP_ALL model (first {a.keep_all_tokens:,} tokens, child process): {keep:,.0f} bytes/token; "
          f"bounded model over the last half: {bounded:,.1f} bytes/token "
          f"(a {a.tokens:,}-token run kept whole would need ~{keep * a.tokens / 2**30:.1f} GiB)")
    print("RESULT:", "OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
