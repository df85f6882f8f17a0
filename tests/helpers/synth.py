"""Deterministic synthetic runs written by the project (not copies of ../shared), for TUI tests.

Every generator returns bytes in the real formats: the 9-column CSV sink with a ``# key=value``
header and ``# summary`` line (telemetry-contract.md "CSV sink"), a route trace, and a
``--progress`` transcript with BMOE_ROUTE / BMOE_RESIDENT extension lines.
"""

from __future__ import annotations

import numpy as np
import orjson


def token_csv(n: int = 64, seed: int = 1, overlap: bool = False, n_layer: int = 8, n_expert: int = 32) -> bytes:
    rng = np.random.default_rng(seed)
    lines = [
        "# bmoe_metrics v1",
        f"# model=synthetic-moe.gguf arch=qwen3moe n_layer={n_layer} n_expert={n_expert} n_expert_used=2 threads=2",
        f"# moe_stream=1 cache_mb=64 io_threads=2 o_direct=1 overlap={int(overlap)} prefetch=0",
        "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms",
    ]
    walls, reads = [], []
    for i in range(n):
        mgmt = float(rng.uniform(0.5, 3))
        io = float(rng.uniform(5, 40)) * (1.0 if i > 3 else 3.0)
        stall = io * 0.3 if overlap else 0.0
        comp = float(rng.uniform(20, 30))
        wall = comp + mgmt + (stall if overlap else io)
        if overlap:
            io = wall * 1.6  # lane-busy time exceeds wall under overlap
        read = int(io * 1e6)
        hit = min(95.0, 10 + i * 1.3)
        walls.append(wall)
        reads.append(read)
        lines.append(f"{i + 1},{n},{wall:.3f},{io:.3f},{comp:.3f},{read},{hit:.2f},{stall:.3f},{mgmt:.3f}")
    s_tok = sum(walls) / n / 1000
    lines.append(
        f"# summary tokens={n} s/tok={s_tok:.3f} tok/s={1 / s_tok:.3f} read_MiB={sum(reads) / 2**20:.1f} "
        f"io_s=1.0 compute_s/tok=0.025 io_s/tok=0.020 cache_hit_pct={hit:.1f} n_prompt=12 load_s=1.500 "
        f"prefill_s=0.400 prefill_tps=30.00 stall_s/tok=0.000 mgmt_s/tok=0.002"
    )
    return ("\n".join(lines) + "\n").encode()


def route_trace(n: int = 64, n_layer: int = 8, n_expert: int = 32, k: int = 2, seed: int = 2) -> bytes:
    rng = np.random.default_rng(seed)
    lines = ["# route_trace v1",
             f"# model=synthetic-moe.gguf arch=qwen3moe n_layer={n_layer} n_expert={n_expert} n_expert_used={k}"]
    lines += [f"# layer={il} expert_bytes=1048576 dense_bytes=4194304" for il in range(n_layer)]
    lines.append("turn,phase,step,layer,slot,expert,weight,residency,expert_bytes")
    resident: set[tuple[int, int]] = set()
    hot = rng.permutation(n_expert)[: n_expert // 4]
    for phase, steps in ((0, range(4)), (1, range(n))):
        for step in steps:
            for il in range(n_layer):
                picks = rng.choice(hot, size=k, replace=False) if rng.random() < 0.7 else rng.choice(
                    n_expert, size=k, replace=False)
                for slot, e in enumerate(picks):
                    hit = int((il, int(e)) in resident)
                    resident.add((il, int(e)))
                    lines.append(f"0,{phase},{step},{il},{slot},{int(e)},{0.5:.6f},{hit},{0 if hit else 1048576}")
    return ("\n".join(lines) + "\n").encode()


def progress_transcript(n: int = 24, n_layer: int = 4, n_expert: int = 16, text: str | None = None,
                        tiers: bool = False) -> bytes:
    """A --progress stdout with --route-telemetry extension lines, answer banners and summary.
    ``tiers``: each decode BMOE_ROUTE also names the tier of each routed expert as bmoe-run does
    (0 a hit; a miss of expert ``e`` at token ``i`` 1 the page cache when ``3 e < n_expert`` or
    ``(i + e) % 3 == 0``, else 2 the disk), the cache drops a quarter of the experts every 6
    tokens (so experts miss again), and one prefill line without tiers comes first (layer 0's
    expert ``n_expert - 1`` missed, then kept: that cell's one miss carries no tier)."""
    words = (text or "The router picks two experts per token and the cache keeps the hot ones. ").split(" ")
    out = ['BMOE_READY {"load_s":0.5,"arch":"qwen3moe","n_ctx":512}']
    answer = ""
    resident: set[tuple[int, int]] = set()
    if tiers:
        out.append("BMOE_ROUTE " + orjson.dumps({"step": 0, "turn": 0, "phase": "prefill",
                                                 "experts": [[n_expert - 1]] + [[]] * (n_layer - 1),
                                                 "hit": [[0]] + [[]] * (n_layer - 1)}).decode())
        resident.add((0, n_expert - 1))  # in the cache since the prompt: its decode routings hit
    for i in range(n):
        experts = [[(i + il) % n_expert, (i * 3 + il) % n_expert] for il in range(n_layer)]
        hits = [[int((il, e) in resident) for e in row] for il, row in enumerate(experts)]
        for il, row in enumerate(experts):
            resident.update((il, e) for e in row)
        route: dict[str, object] = {"step": i + 1, "turn": 0, "phase": "decode", "experts": experts, "hit": hits}
        if tiers:
            route["tier"] = [[0 if h else (1 if 3 * e < n_expert or (i + e) % 3 == 0 else 2)
                              for e, h in zip(row, hrow)] for row, hrow in zip(experts, hits)]
            if i % 6 == 5:
                resident = {(il, e) for il, e in resident if e % 4 != i % 4 or (il, e) == (0, n_expert - 1)}
        out.append("BMOE_ROUTE " + orjson.dumps(route).decode())
        answer += words[i % len(words)] + " "
        out.append('BMOE_LOAD {"mb":1.5,"ms":2.0}')
        out.append("BMOE_PROGRESS " + orjson.dumps({
            "step": i + 1, "steps": n, "wall_ms": 30.0 + i % 5, "io_ms": 4.0, "compute_ms": 25.0 + i % 5,
            "mgmt_ms": 1.0, "stall_ms": 0.0, "read_mb": 1.5, "cache_hit_pct": 50.0, "text": answer}).decode())
        if i % 8 == 7:
            res = [sorted(e for (l, e) in resident if l == il) for il in range(n_layer)]
            out.append("BMOE_RESIDENT " + orjson.dumps({"step": i + 1, "n_expert": n_expert, "resident": res,
                                                        "resident_mib": 12.0, "budget_mib": 16.0}).decode())
    out += ["=== answer ===", answer, "=== perf ===",
            f"generation: {n} tokens, 0.032 s/token (31.250 tok/s)",
            f"moe-stream: read {1.5 * n:.1f} MiB (1.50 MiB/token), decode 0.032 s/token (compute 0.027 + "
            f"cache mgmt 0.001 + flash I/O 0.004 s/token, 375 MiB/s)",
            "moe-cache: 50.0% hit, resident 12.0 MiB"]
    return ("\n".join(out) + "\n").encode()


def progress_recording(n: int = 24) -> bytes:
    """A --record file of :func:`progress_transcript`'s protocol lines (one timestamp for all)."""
    rows = [orjson.dumps({"t": 1.8e9, "src": "stdout", "line": ln}).decode()
            for ln in progress_transcript(n).decode().splitlines() if ln.startswith("BMOE_")]
    return ("\n".join(rows) + "\n").encode()


def session_recording(turns: int = 2, n: int = 10, t0: float = 1_800_000_000.0, additive: bool = False,
                      tiers: bool = False) -> bytes:
    """A --record file of a session: READY, then per turn a request, BEGIN, tokens 50 ms apart, DONE.
    ``additive``: the lines carry the additive fields bmoe-run sends (docs/telemetry.md "Additive
    fields of the contract's lines"), with the values of a turn of ``n`` tokens that read 0.5 MiB
    each; without it the contract's fields only (as bmoe-cli sends them). ``tiers``: each token
    also names the tier of its 8 routed experts (bmoe-run's ``pagecache_mb``, ``hits``,
    ``misses``, ``misses_pagecache``: 5 hits, then 2 page-cache misses on even steps, 1 on odd,
    the rest from disk; 0.25 MiB of the 0.5 read from the page cache on even steps, 0.125 on odd)."""
    ready: dict = {"load_s": 0.4, "arch": "qwen3moe", "n_ctx": 512}
    if additive:
        ready.update(n_layer=4, n_expert=16, n_expert_used=2, stream=True, cache_budget_mib=4.0,
                     model="/m/tiny.gguf", expert_bank_mib=12.0, n_threads=2, io_threads=1, o_direct=True,
                     rss_mib=210.5, peak_rss_mib=230.0)
    rows = [{"t": t0, "src": "stdout", "line": "BMOE_READY " + orjson.dumps(ready).decode()}]
    t = t0
    for k in range(turns):
        rows.append({"t": t, "src": "stdin", "line": orjson.dumps(
            {"cmd": "generate", "id": k, "prompt": f"question {k}", "n_predict": n, "clear_kv": k == 0}).decode()})
        rows.append({"t": t, "src": "stdout", "line": f'BMOE_BEGIN {{"id":{k}}}'})
        text = ""
        for i in range(n):
            t += 0.05
            text += f"w{i} "
            tok: dict = {"step": i + 1, "steps": n, "wall_ms": 50.0, "io_ms": 5.0, "compute_ms": 44.0, "mgmt_ms": 1.0,
                         "stall_ms": 0.0, "read_mb": 0.5, "cache_hit_pct": 60.0, "text": text}
            if additive:
                tok.update(decode_ms=45.0, xfer_mb=0.5625, hit_pct_decode=60.0, hit_pct_since_load=55.0 + k,
                           resident_mib=2.0 + 0.1 * i, budget_mib=4.0, rss_mib=220.0 + i, majflt=2, cpu_ms=90.0)
            if tiers:
                tok.update(pagecache_mb=0.25 if i % 2 == 0 else 0.125, hits=5, misses=3,
                           misses_pagecache=2 if i % 2 == 0 else 1)
            rows.append({"t": t, "src": "stdout", "line": "BMOE_PROGRESS " + orjson.dumps(tok).decode()})
        done: dict = {"id": k, "cancelled": False, "tokens": n, "tok_s": 20.0, "prefill_s": 0.1, "load_s": 0.4,
                      "cache_hit_pct": 60.0, "n_prompt": 5, "n_past": 5 + n * (k + 1), "cache_resident_mib": 3.0,
                      "cache_budget_mib": 4.0, "spec_recall_pct": -1, "stall_s_tok": 0.0, "mgmt_s_tok": 0.001,
                      "text": text}
        if additive:
            done.update(read_mib=0.5 * n, xfer_mib=0.5625 * n, tok_s_def="token_wall", decode_tok_s=22.2,
                        ttft_s=0.15, prefill_tps=50.0, compute_s_tok=0.044, io_s_tok=0.005, read_mib_tok=0.5,
                        xfer_mib_tok=0.5625, hit_pct_decode=60.0, hit_pct_since_load=55.0 + k, cache_evictions=7,
                        cache_rereads=3, majflt=2 * n, cpu_s=0.09 * n, rss_mib=230.0, peak_rss_mib=240.0)
        rows.append({"t": t, "src": "stdout", "line": "BMOE_DONE " + orjson.dumps(done).decode()})
        rows.append({"t": t, "src": "stderr", "line": f"turn {k} done"})
        t += 1.0
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"
