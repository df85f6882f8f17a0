"""bmoe-run benchmarks (issue #3), each a ratio against a baseline measured in the same run.

1. Steady state: decode tok/s streamed with the cache holding every expert / fully resident
   (same demo model, threads, n_batch, flash-attention). Goal >= 0.85.
2. Cold streaming: expert MiB/s read with --cache-mb 0, O_DIRECT, --io-threads 4 on the bench
   model / ``dd if=MODEL of=/dev/null iflag=direct bs=1M`` of the same file. Goal >= 0.7.
3. RAM: peak RSS with a 25% expert budget / with every expert resident (each in its own process,
   bench model). Goal < 0.5. Reported twice: over the whole process (VmHWM, includes llama.cpp's
   MAP_POPULATE of the whole file at load, file-backed clean pages) and from the first decode on
   (VmHWM reset through /proc/self/clear_refs after load).

Usage: ``python benchmarks/runtime_bench.py [--tokens N] [--reps R] [--dir DIR]``
(models are generated with ``bmoe_top.runtime.models.make_model`` into DIR, default a temp dir).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024
PROMPT = "Benchmarks measure what users feel: tokens per second and bytes per second."


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as fh:
        for ln in fh:
            k, _, v = ln.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) // 1024  # MiB
    return out


def rss_child(model: str, mode: str, tokens: int) -> None:
    """Child process: load, reset the peak, generate, print a JSON line of MiB figures."""
    from bmoe_top.runtime.engine import Engine
    from bmoe_top.runtime.gguf_layout import read_layout

    bank = read_layout(model).expert_bank_bytes
    if mode == "resident":
        eng = Engine(model, n_ctx=512, n_batch=64, stream=False)
    elif mode == "all":
        eng = Engine(model, n_ctx=512, n_batch=64, cache_mb=bank / MIB + 1)
        eng.preload()
    else:
        eng = Engine(model, n_ctx=512, n_batch=64, cache_mb=bank * float(mode) / 100 / MIB)
    load = _status()
    reset = False
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        reset = True
    except OSError:
        pass
    res = eng.generate(PROMPT, tokens)
    if mode == "resident":
        # every expert resident: touch the whole expert bank of llama's mapping too
        pass
    st = _status()
    print(json.dumps({"mode": mode, "load_hwm": load["VmHWM"], "hwm_total": max(load["VmHWM"], st["VmHWM"]),
                      "hwm_decode": st["VmHWM"] if reset else None, "rss": st["VmRSS"], "anon": st["RssAnon"],
                      "file": st["RssFile"], "tok_s": res.tok_s, "tokens": res.n_tokens}))
    eng.close()


def dd_direct(path: str) -> float:
    """MiB/s of ``dd iflag=direct bs=1M`` over the whole file (bytes and seconds from dd's report)."""
    p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "iflag=direct", "bs=1M"], capture_output=True,
                       text=True, check=True)
    m = re.search(r"(\d+) bytes .*? copied, ([\d.]+) s", p.stderr)
    if not m:
        raise RuntimeError(f"cannot parse dd output: {p.stderr!r}")
    return int(m.group(1)) / MIB / float(m.group(2))


def bench_steady(model: str, tokens: int, reps: int, threads: int = 1) -> dict:
    """Resident and streamed (every expert preloaded) engines side by side, runs interleaved;
    the ratio is the median of back-to-back pairs (robust to other load on a shared machine)."""
    from bmoe_top.runtime.engine import Engine
    from bmoe_top.runtime.gguf_layout import read_layout

    bank = read_layout(model).expert_bank_bytes
    kw = dict(n_ctx=512, n_batch=64, n_threads=threads, quiet=True)
    res_eng = Engine(model, stream=False, **kw)
    st_eng = Engine(model, cache_mb=bank / MIB + 1, **kw)
    st_eng.preload()
    assert st_eng.cache_stats().resident_mib >= bank / MIB - 1e-6
    st_eng.generate(PROMPT, 4)  # warm both once
    res_eng.generate(PROMPT, 4)
    r_tps, s_tps, pairs = [], [], []
    same = True
    for i in range(reps):
        first, second = (res_eng, st_eng) if i % 2 == 0 else (st_eng, res_eng)
        x = first.generate(PROMPT, tokens)
        y = second.generate(PROMPT, tokens)
        a, b = (x, y) if first is res_eng else (y, x)
        same &= a.tokens == b.tokens
        r_tps.append(a.tok_s)
        s_tps.append(b.tok_s)
        pairs.append(b.tok_s / a.tok_s)
    misses = st_eng.cache_stats().misses
    native = st_eng.hook.native
    res_eng.close()
    st_eng.close()
    return {"resident_tok_s": statistics.median(r_tps), "streamed_tok_s": statistics.median(s_tps),
            "ratio": statistics.median(pairs), "identical": same, "misses_after_preload": misses,
            "native_hook": native, "threads": threads, "resident_runs": r_tps, "streamed_runs": s_tps}


def bench_cold(model: str, tokens: int, reps: int = 3, threads: int = 1) -> dict:
    """--cache-mb 0 (every routed expert read for every token) with O_DIRECT; our MiB/s is bytes
    read / wall time blocked on reads. Runs alternate with dd; medians are compared."""
    from bmoe_top.runtime.engine import Engine

    out: dict = {}
    engines = {lanes: Engine(model, n_ctx=512, n_batch=64, n_threads=threads, cache_mb=0, io_threads=lanes,
                             o_direct=True, quiet=True)
               for lanes in (4, 1)}
    out["o_direct"] = engines[4].o_direct
    runs: dict[str, list[float]] = {"lanes4": [], "lanes1": [], "dd": []}
    for _ in range(reps):
        for lanes, eng in engines.items():
            res = eng.generate(PROMPT, tokens)
            runs[f"lanes{lanes}"].append(res.read_mib / res.io_s if res.io_s > 0 else 0.0)
            out[f"lanes{lanes}_read_mib"] = res.read_mib
        runs["dd"].append(dd_direct(model))
    for eng in engines.values():
        eng.close()
    for k, v in runs.items():
        out[f"{k}_mib_s"] = statistics.median(v)
        out[f"{k}_runs"] = v
    out["ratio"] = out["lanes4_mib_s"] / out["dd_mib_s"]
    return out


def bench_overlap(model: str, tokens: int, pct: float = 25.0, reps: int = 3) -> dict:
    """Informational: 25% budget, serial vs --overlap --prefetch 1 (4 lanes), same tokens."""
    from bmoe_top.runtime.engine import Engine
    from bmoe_top.runtime.gguf_layout import read_layout

    mb = read_layout(model).expert_bank_bytes * pct / 100 / MIB
    out: dict = {}
    toks = {}
    for name, kw in (("serial", dict(io_threads=4)), ("overlap", dict(io_threads=4, overlap=True, prefetch=1))):
        tps, stall, useful = [], [], []
        for _ in range(reps):
            eng = Engine(model, n_ctx=512, n_batch=64, n_threads=1, cache_mb=mb, quiet=True, **kw)
            r = eng.generate(PROMPT, tokens)
            eng.close()
            toks[name] = r.tokens
            tps.append(r.tok_s)
            stall.append(r.stall_s / max(1, r.n_tokens) * 1e3)
            useful.append(100.0 * r.spec_useful / r.spec_experts if r.spec_experts else 0.0)
        out[name] = {"tok_s": statistics.median(tps), "stall_ms_tok": statistics.median(stall),
                     "prefetch_useful_pct": statistics.median(useful)}
    out["identical"] = toks["serial"] == toks["overlap"]
    return out


def bench_rss(model: str, tokens: int) -> dict:
    res = {}
    for mode in ("all", "resident", "25"):
        p = subprocess.run([sys.executable, __file__, "--rss-child", mode, "--model", model, "--tokens", str(tokens)],
                           capture_output=True, text=True, check=True)
        res[mode] = json.loads(p.stdout.strip().splitlines()[-1])
    all_, q = res["all"], res["25"]
    res["ratio_total"] = q["hwm_total"] / all_["hwm_total"]
    if q["hwm_decode"] and all_["hwm_decode"]:
        res["ratio_decode"] = q["hwm_decode"] / all_["hwm_decode"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rss-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        rss_child(args.model, args.rss_child, args.tokens)
        return 0
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="bmoe-bench-") as td:  # models are ~360 MB: removed after
            return _bench(Path(td), args)
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    return _bench(d, args)


def _bench(d: Path, args) -> int:
    from bmoe_top.runtime.models import make_model

    demo = d / "demo-q8_0.gguf"
    bench = d / "bench-q8_0.gguf"
    t0 = time.perf_counter()
    if not demo.exists():
        make_model(demo, preset="demo", qtype="q8_0")
    if not bench.exists():
        make_model(bench, preset="bench", qtype="q8_0")
    print(f"models ready in {time.perf_counter() - t0:.1f} s: {demo} {bench}", flush=True)

    steady = {}
    for name, path in (("bench", bench), ("demo", demo)):
        st = steady[name] = bench_steady(str(path), args.tokens, args.reps)
        print(f"steady state ({name}, every expert cached, {st['threads']} thread, native hook={st['native_hook']}): "
              f"streamed {st['streamed_tok_s']:.1f} tok/s / resident {st['resident_tok_s']:.1f} tok/s, "
              f"median paired ratio {st['ratio']:.3f} (goal >= 0.85) identical={st['identical']} "
              f"misses={st['misses_after_preload']}", flush=True)
    cold = bench_cold(str(bench), max(8, args.tokens // 2))
    print(f"cold streaming (bench, --cache-mb 0, O_DIRECT={cold['o_direct']}): "
          f"4 lanes {cold['lanes4_mib_s']:.0f} MiB/s, "
          f"1 lane {cold['lanes1_mib_s']:.0f} MiB/s; dd iflag=direct bs=1M {cold['dd_mib_s']:.0f} MiB/s; "
          f"ratio {cold['ratio']:.3f} (goal >= 0.7)", flush=True)
    ov = bench_overlap(str(bench), args.tokens)
    print(f"overlap (bench, 25% budget, 4 lanes, 1 compute thread): serial {ov['serial']['tok_s']:.1f} tok/s, "
          f"--overlap --prefetch 1 {ov['overlap']['tok_s']:.1f} tok/s (stall {ov['overlap']['stall_ms_tok']:.2f} "
          f"ms/token, {ov['overlap']['prefetch_useful_pct']:.0f}% of prefetched experts used), "
          f"identical={ov['identical']}", flush=True)
    rss = bench_rss(str(bench), args.tokens)
    a, r, q = rss["all"], rss["resident"], rss["25"]
    print(f"RAM (bench): peak RSS whole process: 25% budget {q['hwm_total']} MiB / every expert cached "
          f"{a['hwm_total']} MiB = {rss['ratio_total']:.3f}; --no-moe-stream {r['hwm_total']} MiB "
          f"(load peaks: {q['load_hwm']}/{a['load_hwm']}/{r['load_hwm']} MiB, llama.cpp MAP_POPULATE)", flush=True)
    if "ratio_decode" in rss:
        print(f"RAM (bench): peak RSS from first decode on: 25% budget {q['hwm_decode']} MiB / every expert cached "
              f"{a['hwm_decode']} MiB = {rss['ratio_decode']:.3f} (goal < 0.5); --no-moe-stream {r['hwm_decode']} MiB",
              flush=True)
    print(json.dumps({"steady": steady, "cold": cold, "overlap": ov, "rss": rss}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
