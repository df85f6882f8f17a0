"""Benchmark of the fleet table over a real Prometheus (docs/fleet.md "Speed").

A fleet of 50 ``bmoe-run serve`` instances with 48 MoE layers each: every series docs/metrics.md
lists (per-layer ones included, ~175 per instance), one sample per second over the window plus
a minute, generated as OpenMetrics and turned into TSDB blocks by ``promtool tsdb
create-blocks-from openmetrics`` (Debian's prometheus package ships it). A real Prometheus
serves those blocks on loopback (its configuration says a 1 s scrape interval; it has no
targets, so the fleet reads the interval from ``/api/v1/status/config``).

Measured, interleaved over several rounds, in bmoe-top's process CPU time (``time.process_time``,
every thread) and wall time:

* ours: one table refresh (``FleetSession.refresh``: every query, decoding, the table with its
  sparklines and ranking) of the 50 instances, 5 min window, 120 sparkline points; and one
  drill-down of one instance (300 points, the 48-layer heatmap).
* baseline: the same HTTP requests, byte for byte, made with a bare ``httpx.Client`` and their
  bodies read but not decoded; and the same plus ``orjson.loads`` of every body.

Goal: a refresh costs bmoe-top < 1 s of CPU. Printed: the queries per refresh, the answer bytes,
medians, and the ratios ours / baseline.

Run: ``.venv/bin/python benchmarks/bench_fleet.py [--quick] [--instances 50] [--layers 48]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.prometheus import PROMETHEUS, PROMTOOL, Prometheus  # noqa: E402

from bmoe_top.parsers.prom import SERIES  # noqa: E402
from bmoe_top.tui.fleet.session import FleetSession  # noqa: E402
from bmoe_top.tui.sources.prometheus import PrometheusClient  # noqa: E402

WINDOW_S = 300.0
SCRAPE_S = 1


def write_openmetrics(path: Path, n_inst: int, n_layer: int, t0: int, n_t: int, seed: int = 0) -> int:
    """Every series of ``n_inst`` instances at ``n_t`` one-second samples from ``t0``; lines written."""
    rng = np.random.default_rng(seed)
    ts = t0 + np.arange(n_t)
    ts_txt = [str(int(t)) for t in ts]
    insts = [f'job="bmoe",instance="10.0.{i // 200}.{i % 200}:8080"' for i in range(n_inst)]
    # per instance: tokens/s, hit fraction, ms per token split
    tok_s = rng.uniform(5, 40, n_inst)
    hit = rng.uniform(0.4, 0.95, n_inst)
    lines = 0

    def counter(rate: float, jitter: float = 0.2) -> np.ndarray:
        steps = np.maximum(0.0, rate * (1 + jitter * rng.standard_normal(n_t)))
        return np.cumsum(steps)

    with open(path, "w") as f:
        for spec in SERIES:
            base = spec.name[:-6] if spec.type == "counter" else spec.name
            f.write(f"# TYPE {base} {spec.type}\n")
            for i, lab in enumerate(insts):
                labsets = [(f'{lab},layer="{il}"', il) for il in range(n_layer)] if spec.per_layer else [(lab, -1)]
                for labels, il in labsets:
                    tok = tok_s[i]
                    if spec.type == "counter":
                        lookups = tok * 8 / max(1, n_layer) if spec.per_layer else tok * 8
                        rate = {"hits": lookups * hit[i], "misses": lookups * (1 - hit[i]),
                                "hits_profile": lookups * hit[i] * 0.5, "upload_bytes": lookups * (1 - hit[i]) * 2e6,
                                "layer_hits": lookups * min(1.0, hit[i] + 0.02 * (il % 5)),
                                "layer_misses": lookups * max(0.0, 1 - hit[i] - 0.02 * (il % 5)),
                                "layer_hits_profile": lookups * hit[i] * 0.5,
                                "prompt_tokens": tok * 3, "prompt_seconds": 0.05, "tokens_predicted": tok,
                                "tokens_predicted_seconds": 0.9, "n_decode": tok + 1, "timed_tokens": tok,
                                "wall_s": 0.9, "io_s": 0.3 * (1 - hit[i]) * 2, "stall_s": 0.0,
                                "mgmt_s": 0.01, "compute_s": 0.9 - 0.01 - 0.6 * (1 - hit[i]),
                                "read_bytes": lookups * (1 - hit[i]) * 2e6}.get(spec.key, 0.0)
                        vals = counter(rate)
                    else:
                        v = {"hit_ratio": hit[i], "slots": 4000, "prefilled": 3000, "cache_bytes": 16 << 30,
                             "prompt_tokens_seconds": tok * 3, "predicted_tokens_seconds": tok,
                             "requests_processing": 1, "process_start": t0 - 3600}.get(spec.key, 0.0)
                        vals = np.full(n_t, float(v))
                    name = spec.name
                    f.write("".join(f"{name}{{{labels}}} {v:.6g} {t}\n" for v, t in zip(vals.tolist(), ts_txt)))
                    lines += n_t
        f.write("# TYPE up gauge\n")
        for lab in insts:
            f.write("".join(f"up{{{lab}}} 1 {t}\n" for t in ts_txt))
            lines += n_t
        f.write("# EOF\n")
    return lines


def replayer(session: FleetSession) -> list[tuple[str, str, bytes]]:
    """Record every request the session's client makes (method, URL, body)."""
    seen: list[tuple[str, str, bytes]] = []

    def hook(req: httpx.Request) -> None:
        seen.append((req.method, str(req.url), req.read()))

    session.client._http.event_hooks["request"].append(hook)  # the benchmark taps the client it measures
    return seen


def raw_requests(http: httpx.Client, reqs: list[tuple[str, str, bytes]], decode: bool) -> int:
    n = 0
    for method, url, body in reqs:
        r = http.request(method, url, content=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded"} if body else None)
        n += len(r.content)
        if decode:
            orjson.loads(r.content)
    return n


def timed(fn) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--layers", type=int, default=48)
    args = ap.parse_args()
    if PROMETHEUS is None or PROMTOOL is None:
        print("bench_fleet: prometheus/promtool not installed (apt-get install prometheus); skipped")
        return 0
    rounds = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as d:
        tmp = Path(d)
        n_t = int(WINDOW_S) + 60
        t_end = int(time.time()) - 120
        t0 = t_end - n_t + 1
        om = tmp / "fleet.om"
        w0 = time.perf_counter()
        lines = write_openmetrics(om, args.instances, args.layers, t0, n_t)
        w1 = time.perf_counter()
        data = tmp / "tsdb"
        subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(data)], check=True,
                       capture_output=True)
        om.unlink()
        w2 = time.perf_counter()
        print(f"data set: {args.instances} instances x {args.layers} layers, {lines:,} samples "
              f"({lines // n_t:,} series x {n_t} s); generated in {w1 - w0:.1f} s, promtool {w2 - w1:.1f} s")
        prom = Prometheus(tmp / "prom", {}, interval=f"{SCRAPE_S}s", data=data, wait_up=False)
        try:
            prom.wait_for("count(up)", lambda r: bool(r) and r[0][1] == args.instances, "the blocks loaded")
            return run(prom, t_end, rounds, args)
        finally:
            prom.stop()


def run(prom: Prometheus, at: float, rounds: int, args: argparse.Namespace) -> int:
    client = PrometheusClient(prom.url, timeout=120)
    session = FleetSession(client, selector='{job="bmoe"}', window_s=WINDOW_S)
    seen = replayer(session)
    table = session.refresh(at=at)  # warm: Prometheus' caches, the scrape interval
    assert len(table.rows) == args.instances, len(table.rows)
    assert all(r.cells["tok_s"].value for r in table.rows) and not table.errors, table.errors
    inst = table.rows[0].instance
    drill = session.drill(inst, at=at)
    assert len(drill.layers) == args.layers
    seen.clear()
    table = session.refresh(at=at)
    reqs_table = list(seen)
    seen.clear()
    session.drill(inst, at=at)
    reqs_drill = list(seen)
    http = httpx.Client(trust_env=False, timeout=120, headers={"Accept": "application/json"})
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in ("ours", "raw", "raw+json", "drill", "drill raw",
                                                                   "drill raw+json")}
    nbytes = {}
    for _ in range(rounds):
        res["ours"].append(timed(lambda: session.refresh(at=at)))
        res["raw"].append(timed(lambda: nbytes.__setitem__("table", raw_requests(http, reqs_table, False))))
        res["raw+json"].append(timed(lambda: raw_requests(http, reqs_table, True)))
        res["drill"].append(timed(lambda: session.drill(inst, at=at)))
        res["drill raw"].append(timed(lambda: nbytes.__setitem__("drill", raw_requests(http, reqs_drill, False))))
        res["drill raw+json"].append(timed(lambda: raw_requests(http, reqs_drill, True)))
    http.close()
    client.close()

    def med(k: str, i: int) -> float:
        return statistics.median(x[i] for x in res[k]) * 1000

    pts = table.t.size
    print(f"table refresh: {len(reqs_table)} queries, {nbytes['table']:,} answer bytes, {args.instances} rows x "
          f"{len(table.rows[0].spark)} sparklines x {pts} points ({rounds} rounds, medians)")
    print(f"  ours:          CPU {med('ours', 0):7.1f} ms   wall {med('ours', 1):7.1f} ms   "
          f"(goal: CPU < 1000 ms) {'OK' if med('ours', 0) < 1000 else 'MISSED'}")
    print(f"  raw HTTP:      CPU {med('raw', 0):7.1f} ms   wall {med('raw', 1):7.1f} ms   "
          f"ratio ours/raw CPU = {med('ours', 0) / med('raw', 0):.2f}")
    print(f"  raw + orjson:  CPU {med('raw+json', 0):7.1f} ms   wall {med('raw+json', 1):7.1f} ms   "
          f"ratio ours/(raw+orjson) CPU = {med('ours', 0) / med('raw+json', 0):.2f}")
    print(f"drill-down of one instance: {len(reqs_drill)} queries, {nbytes['drill']:,} answer bytes, "
          f"{args.layers} layers x {drill.t.size} points")
    print(f"  ours:          CPU {med('drill', 0):7.1f} ms   wall {med('drill', 1):7.1f} ms")
    print(f"  raw HTTP:      CPU {med('drill raw', 0):7.1f} ms   ratio ours/raw CPU = "
          f"{med('drill', 0) / med('drill raw', 0):.2f}")
    print(f"  raw + orjson:  CPU {med('drill raw+json', 0):7.1f} ms   ratio ours/(raw+orjson) CPU = "
          f"{med('drill', 0) / med('drill raw+json', 0):.2f}")
    return 0 if med("ours", 0) < 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
