"""The plain-mmap line of the tok/s model against stock llama.cpp: the stock ``llama-server`` this
project builds (``make llama-server``; mmap, no repacking, one slot, greedy) on a generated model in
a memory cgroup at several RAM sizes, at the device's readahead and at 128 KiB (a loop-device copy
of the model), against ``mmap_prediction`` at each (docs/analysis.md "Plain mmap against stock
llama.cpp").

The model's inputs come from the same run where they can:

* the routing: a ``bmoe-run`` reference run at 50 % of the expert bank (its route trace and CSV,
  O_DIRECT, one lane, the same prompt and tokens as the server's runs), replayed through the LRU
  at every whole MiB (``analyse_input``) for the readahead-piece rule, and through the page cache
  (``replay_mmap``, two lists, read-ahead marks) for the bytes a token reads;
* the compute: the server's own, ``1000 / tok/s`` of its unlimited run from a warm page cache (no
  read waits), median over the rounds: the server is built without ``-march=native``, so its
  compute per token is not bmoe-run's;
* the runtime memory: what the server's cgroup was charged at the end of that run, median (its
  ``RssAnon``: KV cache and buffers; its kernel memory: page tables, stacks, slab; none of the
  model's pages, which were read outside it); the dense weights: the file less its expert bank;
  the page cache's room for experts: the RAM less both;
* the read bandwidth, two ways: O_DIRECT at queue depth 1 in reads of what one miss reads at
  that readahead (``ceil(miss_bytes / R) x R``, ``bmoe-top probe``'s reader), and the rate the
  page cache reads at when a process in a 64 MiB cgroup faults on random bytes of the mapping
  advised sequential as llama.cpp advises it (each read-around window after the cgroup reclaimed
  room for it), on the model's device and on the loop device;
* the RAM: each cgroup limit. Default sizes: bmoe-run's peak RSS at 50 % and at 100 % of the
  bank (round 1's), and the whole file plus 30 MiB.

Rounds are interleaved: each round runs bmoe-run at 50 % and 100 % (cold), the unlimited server
(warm), then every RAM x readahead cell cold (the model's pages dropped first), the cells' order
rotating from round to round. Printed per cell: the measured tok/s (median, spread), the tok/s
of the readahead-piece rule and of the replay and their errors ((predicted - measured) /
measured), the disk MiB a token read (``/proc/PID/io`` after the first token) against the
replay's, the model's pages resident when the server ended and the replay's bytes at that room,
what the cgroup was charged beside them, the disk MiB a token of the trace's own page touches
played in the room the server left the model (``play_trace``), as it comes (median and range: the
kernel takes one of two states by chance) and with the cgroup's statistics flushed at every token
(fresh: one state), and the
read rate the measured token implies (its bytes over its time less the compute); then the
predicted crossing: the smallest RAM from which plain mmap (the replay at the faults' rate) beats
bmoe-run streaming the share of the bank that fits beside its own memory (one level, its
reference run's costs and O_DIRECT rate), with the server's compute and with bmoe-run's.

The model file must be this benchmark's own: ``posix_fadvise(DONTNEED)`` cannot drop pages another
process maps, and those are not charged to the server's cgroup (the share still cached after the
drops is printed). Every run uses ``--threads`` threads (default 1: on a shared machine a second
thread waits for a core and the compute per token moves tenfold). The machine may be shared: the
load average is printed before and after. The mmap rows thrash when the RAM is short, so they run
``--tokens`` tokens (default 32) with a timeout. Needs root (the cgroup and the loop device).
Run: .venv/bin/python benchmarks/bench_mmap_line.py [--dir DIR] [--model bench-q4_k] [--rounds 3]
[--tokens 32] [--ram 50,100,file] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from mmap_machine import (
    MIB,
    PROMPT,
    MemoryCgroup,
    Run,
    drop_cache,
    ensure_model,
    fault_rate,
    llama_server_binary,
    loop_copy,
    play_trace,
    readahead_kb,
    run_cli,
    run_mmap,
    warm_cache,
)

#: the cgroup limit the faults' read rate is measured in (MiB): far below the file, so every fault reclaims
FAULT_RAM_MIB = 64


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return 100 * (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 and statistics.median(xs) else 0.0


def bmoe_run(model: Path, cache_mib: float, tokens: int, threads: int, ctx: int, out: Path | None) -> Run:
    drop_cache(model)
    cmd = [sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "-p", PROMPT, "-n", str(tokens),
           "-t", str(threads), "-c", str(ctx), "--cache-mb", f"{cache_mib:.1f}", "--force-cache", "--io-threads", "1",
           "--quiet"]
    if out is not None:
        cmd += ["--csv", str(out / "run.csv"), "--route-trace", str(out / "run.route.csv"), "--force"]
    return run_cli(cmd)


def read_bytes(miss_bytes: float, ra_bytes: float) -> float:
    """What the page cache reads for one miss at readahead ``ra_bytes`` (speed.py's rule)."""
    return math.ceil(miss_bytes / ra_bytes) * ra_bytes


def touch_ranges(lookups, pieces: list[list[tuple[int, int]]],
                 file_size: int) -> tuple[list[tuple[int, int]], int, list[int]]:
    """The byte ranges a token of the trace touches, in order, for :func:`mmap_machine.play_trace`: at
    each token's start (and the prefill's) every dense range of the file (what is not an expert
    slice), then per layer batch the lookups' slices, tensor by tensor in compute order (up, gate,
    down of every looked-up expert in turn, as ``mul_mat_id`` runs them); the index of the
    second decode token's first range (the server's disk bytes are counted from its first token on);
    and the index of every token's first range."""
    page = 4096
    expert = np.zeros(file_size // page + 1, dtype=bool)
    for p in pieces:
        for off, n in p:
            expert[off // page:(off + n + page - 1) // page] = True
    edges = np.flatnonzero(np.diff(np.r_[0, (~expert).astype(np.int8), 0]))
    dense = [(int(a) * page, int(b - a) * page) for a, b in zip(edges[::2], edges[1::2])]
    first = lookups.batch_first()
    out: list[tuple[int, int]] = []
    firsts: list[int] = []
    start, token = -1, -2
    for b in range(lookups.n_batches):
        lo, hi = int(first[b]), int(first[b + 1])
        t = int(lookups.token[lo])
        if t != token:
            token = t
            if t == 1:
                start = len(out)
            firsts.append(len(out))
            out += dense
        items = [int(i) for i in lookups.item[lo:hi]]
        for k in range(max((len(pieces[i]) for i in items), default=0)):
            out += [pieces[i][k] for i in items if k < len(pieces[i])]
    return out, start, firsts


def bandwidth(path: Path, block: float) -> float:
    """O_DIRECT queue depth 1 MB/s in reads of ``block`` bytes over ``path``."""
    from bmoe_top.tui.jobs.probe import probe

    res = probe(str(path), int(block), only_depth=1, buffered=False, seconds=2.0)
    return (res.direct or res.buffered)[0].mb_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bench-q4_k", help="PRESET-QTYPE of bmoe-run make-model")
    ap.add_argument("--dir", default=None, help="where the model and its loop image are kept")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per run (bmoe-run's and the server's)")
    ap.add_argument("--ram", default="50,100,file",
                    help="cgroup limits: 50/100 bmoe-run's peak RSS at that %% of the bank, 'file' the file + 30 MiB, "
                         "or MiB as a number with an M suffix (e.g. 400M)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of every run (1: a shared machine's load moves its compute least)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--timeout", type=float, default=300, help="seconds a server run may take")
    args = ap.parse_args()
    from bmoe_top.parsers.gguf_layout import read_layout
    from bmoe_top.tui.analysis.pagecache import LLAMA_SEQUENTIAL, layout_pieces, replay_mmap
    from bmoe_top.tui.analysis.speed import Memory, TokenCosts, hit_at, mmap_prediction, predict
    from bmoe_top.tui.jobs.sizing import demand, policy_hits, token_costs
    from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif

    server = llama_server_binary()
    cg = MemoryCgroup()
    if server is None or cg.base is None:
        print(f"needs the stock llama-server (make llama-server): {server or 'not built'}, and a memory cgroup: "
              f"{cg.base or cg.why}")
        return 1
    d = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / "bmoe-bench-models"
    d.mkdir(parents=True, exist_ok=True)
    model = ensure_model(d, args.model)
    lay = read_layout(model)
    bank, file_mib = lay.expert_bank_bytes / MIB, lay.file_size / MIB
    dense = lay.file_size - lay.expert_bank_bytes
    ra_dev = readahead_kb(model)
    load0 = os.getloadavg()
    print(f"{model.stem}: {lay.n_layer} layers x {lay.n_expert} experts, top-{lay.n_expert_used}, expert bank "
          f"{bank:.1f} MiB, file {file_mib:.1f} MiB; device read_ahead_kb {ra_dev}; {args.rounds} rounds of "
          f"{args.tokens} tokens, interleaved; {os.cpu_count()} cores, load average {load0[0]:.1f} {load0[1]:.1f} "
          f"{load0[2]:.1f}", flush=True)
    if ra_dev is None:
        print("cannot read the device's readahead")
        return 1
    ref_dir = d / f"mmap-line-{args.model}"
    ref_dir.mkdir(exist_ok=True)
    runs: dict[str, list[Run]] = {}
    played: dict[str, list[float]] = {}
    cached: list[float] = []
    with contextlib.ExitStack() as stack:
        loop = stack.enter_context(loop_copy(model, d))
        sources = [(f"{ra_dev} KiB", model, ra_dev * 1024.0)] + ([("128 KiB", loop, 128 * 1024.0)] if loop else [])
        rams: list[tuple[str, float]] = []
        for rnd in range(args.rounds):
            for share in (50, 100):
                r = bmoe_run(model, bank * share / 100, args.tokens, args.threads, args.ctx,
                             ref_dir if rnd == 0 and share == 50 else None)
                runs.setdefault(f"run{share}", []).append(r)
            warm_cache(model)
            cgd = cg.make(None)
            try:
                r = run_mmap(server, model, args.tokens, args.threads, args.ctx, procs=str(cgd / "cgroup.procs"),
                             timeout=args.timeout)
            finally:
                cg.drop(cgd)
            runs.setdefault("unlimited", []).append(r)
            if rnd == 0:
                for spec in args.ram.split(","):
                    if spec == "file":
                        rams.append(("file + 30 MiB", file_mib + 30))
                    elif spec.upper().endswith("M"):
                        rams.append((spec, float(spec[:-1])))
                    else:
                        rams.append((f"bmoe-run at {spec} %", runs[f"run{spec}"][0].peak_rss_mib))
            if rnd == 0:
                ref = load_whatif([str(ref_dir / "run.route.csv"), str(ref_dir / "run.csv")])
                touches, touch_start, token_firsts = touch_ranges(ref.lookups, layout_pieces(lay), lay.file_size)
            beside = runs["unlimited"][-1].charged_mib
            cells = [(ram, src) for ram in rams for src in sources]
            k = rnd % len(cells)
            for (label, ram), (ra_label, path, _) in cells[k:] + cells[:k]:
                cached.append(drop_cache(path))
                cgd = cg.make(int(ram * MIB))
                try:
                    r = run_mmap(server, path, args.tokens, args.threads, args.ctx, procs=str(cgd / "cgroup.procs"),
                                 timeout=args.timeout)
                finally:
                    cg.drop(cgd)
                runs.setdefault(f"{label}|{ra_label}", []).append(r)
                # the trace's own page touches in the room the server left the model's pages, as they
                # come (the cgroup's statistics as old as their last periodic flush) and with them
                # flushed at every token
                for kind, flush in (("", ()), ("fresh|", token_firsts)):
                    if beside != beside:
                        break
                    drop_cache(path)
                    pcg = cg.make(int((ram - beside) * MIB))
                    try:
                        got = play_trace(path, touches, touch_start, str(pcg / "cgroup.procs"), d, flush_at=flush)
                    finally:
                        cg.drop(pcg)
                    n_dec = ref.lookups.n_decode_tokens - 1
                    played.setdefault(f"{kind}{label}|{ra_label}", []).append(
                        got / MIB / n_dec if n_dec > 0 else math.nan)
            print(f"round {rnd + 1}: " + "; ".join(
                f"{k} {v[-1].dec_tok_s:.1f} tok/s" + (f" [{v[-1].error}]" if v[-1].error else "")
                for k, v in runs.items()), flush=True)
        # the model's inputs
        inp = load_whatif([str(ref_dir / "run.route.csv"), str(ref_dir / "run.csv")])
        grid = list(np.arange(1.0, math.ceil(bank) + 1.0))
        report, _ = analyse_input(inp, grid)
        lookups, miss = demand(report)
        lru = next(c for c in report.curves if c.policy == "lru")
        hits = policy_hits(lru, lookups, miss)
        server_ms = 1000 / med([r.dec_tok_s for r in runs["unlimited"]])
        anon = med([r.anon_mib for r in runs["unlimited"]]) * MIB
        charged = med([r.charged_mib for r in runs["unlimited"]]) * MIB
        runtime = charged if charged == charged else anon
        bw = {ra_label: bandwidth(path, read_bytes(miss, ra)) for ra_label, path, ra in sources}
        faulted = {}
        for ra_label, path, _ in sources:
            drop_cache(path)
            cgd = cg.make(FAULT_RAM_MIB * MIB)
            try:
                faulted[ra_label] = fault_rate(path, str(cgd / "cgroup.procs"))
            finally:
                cg.drop(cgd)
    load1 = os.getloadavg()
    print(f"page cache after each drop: at most {100 * max(cached):.1f} % of the file still cached (more: another "
          "process maps the file, and its pages are not this cgroup's: give the benchmark a copy of its own)")
    print(f"\ninputs: {lookups:.0f} lookups a token, {miss / MIB:.3f} MiB a miss; the server's compute "
          f"{server_ms:.2f} ms a token (its unlimited warm run, median {len(runs['unlimited'])} runs: "
          f"{', '.join(f'{r.dec_tok_s:.0f}' for r in runs['unlimited'])} tok/s); its RssAnon {anon / MIB:.1f} MiB, its "
          f"cgroup charged {charged / MIB:.1f} MiB (the runtime memory); "
          f"dense {dense / MIB:.1f} MiB; O_DIRECT qd 1 at a miss's read: "
          + ", ".join(f"{k}: {read_bytes(miss, ra) / MIB:.2f} MiB reads {bw[k]:.0f} MB/s" for k, _, ra in sources)
          + f"; faults on random bytes of the mapping in a {FAULT_RAM_MIB} MiB cgroup: "
          + ", ".join(f"{k} {v:.0f} MB/s" for k, v in faulted.items()))
    for share in (50, 100):
        rr = runs[f"run{share}"]
        print(f"bmoe-run at {share} % of the bank: {med([r.dec_tok_s for r in rr]):.1f} tok/s (spread "
              f"{spread([r.dec_tok_s for r in rr]):.0f} %), peak RSS {med([r.peak_rss_mib for r in rr]):.1f} MiB")
    pieces = layout_pieces(lay)

    def replayed(room_mib: float, ra: float) -> float:
        return replay_mmap(inp.lookups, pieces, room_mib * MIB, ra, sequential=LLAMA_SEQUENTIAL).read_per_token

    print("\nper RAM and readahead: tok/s measured (median, spread) and predicted, from the readahead-piece rule "
          "and from the page cache's replay (two lists, windows of 2 x readahead, room = RAM - dense - the runtime "
          "memory); disk MiB a token measured and replayed; the model's pages resident at the end (MiB) and the "
          "replay's bytes at that room; what the cgroup was charged beside them at the end (MiB); the disk MiB a "
          "token of a process touching the trace's own pages in that room (played: median, and its range; fresh: "
          "with the cgroup's statistics flushed at every token); the read rate the measured "
          "token implies (its disk bytes over its time less the compute)")
    print(f"{'RAM':>26} {'ra':>5} {'measured':>8} {'spread':>6} {'rule':>6} {'err':>6} {'replay':>6} {'err':>6} "
          f"{'faults':>6} {'err':>6} "
          f"{'disk/tok':>8} {'replay':>7} {'held':>6} {'at held':>7} {'beside':>6} {'played':>6} {'range':>13} "
          f"{'fresh':>6} {'MB/s':>6}")
    errs: dict[str, list[float]] = {"rule": [], "replay": [], "replay, fault rate": []}
    byte_errs: dict[str, list[float]] = {"the server's": [], "the played trace's": [],
                                         "the played trace's with fresh statistics": []}
    for label, ram in rams:
        for ra_label, _, ra in sources:
            key = f"{label}|{ra_label}"
            rr = runs[key]
            m = med([r.dec_tok_s for r in rr])
            tc = TokenCosts(server_ms, 0.0, lookups, miss, bw[ra_label])
            mem = Memory(ram * MIB, dense, runtime, ra)
            room = (ram * MIB - dense - runtime) / MIB
            rule = mmap_prediction(lru.budgets_mib, hits, tc, mem)
            rep_bytes = replayed(room, ra)
            rep = mmap_prediction(lru.budgets_mib, hits, tc, mem, read_per_token=rep_bytes)
            at_fault = mmap_prediction(lru.budgets_mib, hits, replace(tc, read_mb_s=faulted[ra_label]), mem,
                                       read_per_token=rep_bytes)
            out = []
            for name, p in (("rule", rule), ("replay", rep), ("replay, fault rate", at_fault)):
                e = 100 * (p.serial_tok_s - m) / m if m == m and m > 0 else float("nan")
                if e == e:
                    errs[name].append(abs(e))
                out.append((p.serial_tok_s, e))
            held_mib = med([r.model_mib for r in rr])
            h = held_mib - dense / MIB
            beside = med([r.charged_mib - r.model_mib for r in rr])
            play = med(played.get(key, []))
            fresh = med(played.get(f"fresh|{key}", []))
            span = [x for x in played.get(key, []) if x == x]
            span_s = f"{min(span):.2f}-{max(span):.2f}" if span else "nan"
            for name, want in (("the server's", med([r.disk_mib_tok for r in rr])), ("the played trace's", play),
                               ("the played trace's with fresh statistics", fresh)):
                if want == want and want > 0:
                    byte_errs[name].append(abs(rep_bytes / MIB - want) / want * 100)
            disk = med([r.disk_mib_tok for r in rr])
            wait = 1 / m - server_ms / 1000 if m == m and m > 0 else float("nan")
            rate = disk * MIB / 1e6 / wait if disk > 0 and wait > 0 else float("nan")
            errors = [r.error for r in rr if r.error]
            print(f"{label + f' {ram:.0f} MiB':>26} {ra_label.split()[0]:>5} {m:>8.2f} "
                  f"{spread([r.dec_tok_s for r in rr]):>5.0f}% {out[0][0]:>6.2f} {out[0][1]:>+5.0f}% {out[1][0]:>6.2f} "
                  f"{out[1][1]:>+5.0f}% {out[2][0]:>6.2f} {out[2][1]:>+5.0f}% "
                  f"{disk:>8.2f} {rep_bytes / MIB:>7.2f} {held_mib:>6.1f} "
                  f"{replayed(h, ra) / MIB if h == h else float('nan'):>7.2f} {beside:>6.1f} {play:>6.2f} "
                  f"{span_s:>13} {fresh:>6.2f} {rate:>6.0f}"
                  + (f"  [{errors[0]}]" if errors else ""))
    for name, e in errs.items():
        if e:
            print(f"{name}: median |error| {statistics.median(e):.0f} %, largest {max(e):.0f} %")
    for name, e in byte_errs.items():
        if e:
            print(f"the replay's bytes a token against {name} (where it read any): median |error| "
                  f"{statistics.median(e):.0f} %, largest {max(e):.0f} %")
    # the crossing: mmap against bmoe-run streaming the share of the bank that fits beside its own memory
    ref_costs = inp.run_costs
    assert ref_costs is not None and inp.read_mib_s is not None
    own = med([r.peak_rss_mib for r in runs["run50"]]) - bank * 0.5
    stream_tc = token_costs(ref_costs, lookups, miss, inp.read_mib_s * MIB / 1e6)
    for who, compute in (("the server's compute", server_ms), ("bmoe-run's compute", ref_costs.compute_ms)):
        for ra_label, _, ra in sources:
            cross = None
            for ram in np.arange(max(own, dense / MIB + runtime / MIB), file_mib + 200, 2.0):
                b = min(bank, ram - own)
                s = predict(b, hit_at(lru.budgets_mib, hits, b), stream_tc).tok_s(ref_costs.overlap)
                tc = TokenCosts(compute, 0.0, lookups, miss, faulted[ra_label])
                room = (ram * MIB - dense - runtime) / MIB
                p = mmap_prediction(lru.budgets_mib, hits, tc, Memory(ram * MIB, dense, runtime, ra),
                                    read_per_token=replayed(room, ra))
                if p.serial_tok_s >= s:
                    cross = float(ram)
                    break
            print(f"predicted crossing (replay, faults' rate), {who} ({compute:.1f} ms), readahead {ra_label}: "
                  + (f"mmap beats bmoe-run streaming from {cross:.0f} MiB of RAM (the file {file_mib:.0f} MiB "
                     f"{cross - file_mib:+.0f} MiB)" if cross is not None
                     else f"mmap never beats streaming up to {file_mib + 200:.0f} MiB"))
    print(f"load average before {load0[0]:.1f}, after {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
