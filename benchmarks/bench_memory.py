"""Memory of a long live run, in two parts.

The run model: a synthetic live feed of N tokens (default 10,000,000) with routing for 48 layers
(top-8 of 128 experts), through the live path without the pipe: each line parsed
(``parse_line``) and applied (``RecordFeed``) to a bounded run model (``RunModel(LIVE)``).
Measured: the process's RSS along the run (goal: under 250 MB, and flat over the last half: the
spread of the samples there under 16 MB), and the whole-run series the model serves against an
exact computation over the same feed (the values are a deterministic function of the token
index, so every bin's count, mean, min and max is recomputed from scratch: they must agree, as
must the per-layer hit share per bin). Baseline in the same run: the RSS before the feed, and the
bytes per token of a model that keeps every row (``KEEP_ALL``, a child process fed the first
``--keep-all-tokens`` tokens), so the ratio says what the bounded model saves.

The whole live app (``--app``): the real ``bmoe-top launch`` in a 200 x 60 pseudo-terminal over
the emitter (tests/helpers/emitter.py in ``--auto`` mode: a ``BMOE_ROUTE`` line of 48 layers x
top-8 of 128 experts and a ``BMOE_PROGRESS`` line per token, its text as deltas, ``BMOE_RESIDENT``
every 8 tokens; 20,000-token turns), the What-if tab shown, at each of ``--rates`` (default 30 and
300 tokens/s). The first ``--warm`` tokens (default 20,000: past the run model's windows of
16,384 token rows and 2,048 routing tokens) come unpaced, then the rate holds for
``--app-seconds`` (default 120) or up to ``--app-tokens`` tokens (10^6 for a long session). The
bmoe-top process's RSS (and CPU, all its threads) is sampled every 2 s against the tokens its
title shows. Goal: RSS flat over the second half (its spread under 16 MiB and its slope near 0
bytes per token). Then ``--fast-rate`` (default 3,000) tokens/s for ``--fast-seconds``: the
screen keeps up (the title's tokens per second near the rate) and bmoe-top stays under one core.

Run: ``.venv/bin/python benchmarks/bench_memory.py [--tokens 10000000] [--layers 48] [--rates 30,300]
[--app-seconds 120] [--app-tokens N] [--warm 20000] [--fast-rate 3000] [--fast-seconds 30]``: both
parts (the model's default takes tens of minutes on a loaded machine; ``--tokens 1000000`` checks
it in minutes); ``--model`` or ``--app`` runs one.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import orjson
from bench_live_cpu import BMOE_TOP, EMITTER, Terminal, cpu_s

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


@dataclass
class AppRun:
    """One rate of the whole app: samples of (tokens shown, RSS MiB, CPU s of bmoe-top, s)."""

    rate: float
    samples: list[tuple[int, float, float, float]]

    def half(self) -> list[tuple[int, float, float, float]]:
        """The samples of the second half of the tokens shown."""
        top = self.samples[-1][0]
        return [x for x in self.samples if x[0] >= top / 2]

    def slope(self) -> float:
        """RSS growth over the second half, bytes per token (least squares)."""
        h = self.half()
        if len(h) < 3 or h[-1][0] == h[0][0]:
            return float("nan")
        n = np.array([x[0] for x in h], dtype=float)
        m = np.array([x[1] for x in h]) * 1048576
        return float(np.polyfit(n, m, 1)[0])

    def spread(self) -> float:
        h = [x[1] for x in self.half()]
        return max(h) - min(h) if h else float("nan")


TITLE_TOKENS = re.compile(rb"\xc2\xb7 [a-z]+  tokens ([0-9,]+)")  # "· generating  tokens 1,234": the title
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def tokens_shown(term: Terminal) -> int:
    """The newest whole-run token count the title drew (0 before any)."""
    got = TITLE_TOKENS.findall(ESCAPES.sub(b"", term.tail[-(1 << 16):]))
    return int(got[-1].replace(b",", b"")) if got else 0


def proc_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def app_argv(rate: float, tokens: int, warm: int, layers: int) -> list[str]:
    return [BMOE_TOP, "launch", "-n", "20000", "--", sys.executable, EMITTER, "--auto", str(tokens),
            "--turn-len", "20000", "--rate", str(rate), "--route-layers", str(layers), "--route-experts", str(E),
            "--route-k", str(K), "--route-cycle", str(P), "--delta-text", "--warm", str(warm)]


def run_app(rate: float, tokens: int, warm: int, layers: int, every: float = 2.0) -> AppRun:
    """The app over ``tokens`` tokens (the first ``warm`` unpaced, then ``rate`` a second), What-if
    tab shown; samples until the title shows every token (or it stops moving for 60 s)."""
    term = Terminal(app_argv(rate, tokens, warm, layers), 200, 60)
    out = AppRun(rate, [])
    try:
        term.wait_for("· generating".encode(), timeout=120.0)
        term.type(b"\x0f")  # ctrl+o: the What-if tab
        t0, still, last = time.monotonic(), time.monotonic(), -1
        while True:
            term.drain(every)
            n = tokens_shown(term)
            now = time.monotonic()
            out.samples.append((n, proc_rss_mib(term.pid), cpu_s(term.pid), now - t0))
            if n != last:
                still, last = now, n
            if n >= tokens or now - still > 60:
                break
            if len(out.samples) % 15 == 0:
                print(f"    {rate:g} tokens/s: {n:,} tokens, RSS {out.samples[-1][1]:.0f} MiB, {now - t0:.0f} s",
                      flush=True)
    finally:
        term.close()
    return out


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def fast_app(rate: float, seconds: float, warm: int, layers: int) -> tuple[float, float, float]:
    """(tokens per second the title showed, % of one core bmoe-top used, % the emitter used) over
    ``seconds`` at ``rate``."""
    term = Terminal(app_argv(rate, warm + int(rate * (seconds + 30)), warm, layers), 200, 60)
    try:
        term.wait_for("· generating".encode(), timeout=120.0)
        term.type(b"\x0f")
        while tokens_shown(term) < warm + rate * 5:  # past the warm-up, the rate holding
            term.drain(1.0)
        emitter = children(term.pid)
        n0, c0, t0 = tokens_shown(term), cpu_s(term.pid), time.monotonic()
        e0 = sum(cpu_s(p) for p in emitter)
        term.drain(seconds)
        dt = time.monotonic() - t0
        e1 = sum(cpu_s(p) for p in emitter)
        return (tokens_shown(term) - n0) / dt, 100.0 * (cpu_s(term.pid) - c0) / dt, 100.0 * (e1 - e0) / dt
    finally:
        term.close()


def app_main(a: argparse.Namespace) -> bool:
    rates = [float(x) for x in a.rates.split(",") if x]
    print(f"bench_memory --app: bmoe-top launch in a 200x60 pty, What-if tab shown, routing for {a.layers} layers "
          f"x top-{K} of {E}; {a.warm:,} tokens unpaced first; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} (a shared machine)")
    ok = True
    for rate in rates:
        tokens = a.app_tokens or a.warm + int(rate * a.app_seconds)
        r = run_app(rate, tokens, a.warm, a.layers)
        first, last = r.samples[0], r.samples[-1]
        peak = max(x[1] for x in r.samples)
        h = r.half()
        cpu = 100.0 * (h[-1][2] - h[0][2]) / max(1e-9, h[-1][3] - h[0][3])
        shown = (h[-1][0] - h[0][0]) / max(1e-9, h[-1][3] - h[0][3])
        flat = r.spread() < 16 and abs(r.slope()) < 200
        ok &= flat
        print(f"  {rate:g} tokens/s: {last[0]:,} of {tokens:,} tokens in {last[3]:.0f} s; RSS {first[1]:.0f} MiB at "
              f"{first[0]:,} tokens, peak {peak:.0f}, last {last[1]:.0f}; second half ({h[0][0]:,} to {h[-1][0]:,} "
              f"tokens): spread {r.spread():.1f} MiB, slope {r.slope():,.0f} bytes/token, {shown:,.0f} tokens/s shown, "
              f"bmoe-top {cpu:.0f} % of a core: {'FLAT' if flat else 'GROWS'}")
    if a.fast_rate:
        shown, cpu, emitter = fast_app(a.fast_rate, a.fast_seconds, a.warm, a.layers)
        keeps = shown >= 0.9 * a.fast_rate
        per_token = cpu / 100.0 / max(shown, 1e-9)  # CPU seconds per token shown
        need = 100.0 * per_token * a.fast_rate
        ok &= keeps and cpu < 100
        print(f"  {a.fast_rate:g} tokens/s for {a.fast_seconds:g} s: the title showed {shown:,.0f} tokens/s "
              f"({'keeps up' if keeps else 'FALLS BEHIND'}); bmoe-top {cpu:.0f} % of a core "
              f"({'under one core' if cpu < 100 else 'OVER one core'}), {per_token * 1e3:.2f} ms of CPU a token: "
              f"{need:.0f} % of a core at {a.fast_rate:g} tokens/s where it gets the CPU (the emitter used "
              f"{emitter:.0f} %; load average {os.getloadavg()[0]:.1f})")
    return ok


def model_main(a: argparse.Namespace) -> bool:
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
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--keep-all-tokens", type=int, default=100_000)
    ap.add_argument("--model", action="store_true", help="only the run model")
    ap.add_argument("--app", action="store_true", help="only the whole live app")
    ap.add_argument("--rates", default="30,300")
    ap.add_argument("--warm", type=int, default=20_000)
    ap.add_argument("--app-seconds", type=float, default=120.0)
    ap.add_argument("--app-tokens", type=int, default=0, help="tokens per rate (default: warm + rate x seconds)")
    ap.add_argument("--fast-rate", type=float, default=3000.0)
    ap.add_argument("--fast-seconds", type=float, default=30.0)
    a = ap.parse_args()
    ok = True
    if not a.app:
        ok &= model_main(a)
    if not a.model:
        ok &= app_main(a)
    print("RESULT:", "OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
