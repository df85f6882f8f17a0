"""The three files of one bmoe-cli ``--session --csv`` run, written as BigMoeOnEdge writes them.

The forms are the peer's own (BigMoeOnEdge commit 2d4f2b1): stdout is ``run_session_loop`` in
``cli/main.cpp`` (``BMOE_READY``, then per request ``BMOE_BEGIN``, per token the optional
``BMOE_LOAD`` and ``BMOE_PROGRESS`` of ``emit_progress_line``, then ``BMOE_DONE`` or a
``BMOE_ERROR``; strings through its ``json_escape``); the CSV is the 22-column ``bmoe_metrics v1``
layout of ../shared/data/real-runs/bigmoeonedge-2026-07-22 (``CsvMetricsSink``: the preamble once,
one row per token labelled with ``turn``, one ``# summary`` per finished generation); the request
log is what its benchmark driver sends (``session-requests.jsonl`` there: ``json.dumps`` lines,
then ``{"cmd": "close"}``).

What the session does with a request (``core/src/engine/session.cpp``): a rejected one (an empty
prompt, or prompt + n_predict over n_ctx) fails before its first token, so it has a ``BMOE_BEGIN``
and a ``BMOE_ERROR`` and nothing in the CSV, and the CSV's ``turn`` counter does not move; a
generation that runs, cancelled or not, writes its rows under the current ``turn``, then its
``# summary``, and the counter moves on (``++im.turn``), so ``turn`` counts generated turns from 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

__all__ = ["N_CTX", "SessionRequest", "SessionRun", "cli_session", "json_escape", "six_requests"]

N_CTX = 4096
_MIB = 1024.0 * 1024.0
_LOAD_S = 38.755

_CSV_HEAD = (
    "# bmoe_metrics v1\n"
    "# model=Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf arch=qwen35moe n_layer=40 n_expert=256 n_expert_used=8 threads=4 "
    f"n_ctx={N_CTX}\n"
    "# moe_stream=1 cache_mb=3000 cache_auto=0 cache_ceil_mb=0 force_cache=0 io_threads=4 o_direct=1 overlap=1 "
    "prefetch=0 dense_weights=ahwb drop_cold_frac=0.75\n"
    "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,majflt,cpu_ms,"
    "dense_resident_frac,turn,majflt_mib,cache_budget_mib,rss_mib,rss_anon_mib,rss_file_mib,swap_mib,"
    "mem_available_mib,mem_free_mib,swap_free_mib\n"
)
_ROW = "%d,%d,%.3f,%.3f,%.3f,%d,%.2f,%.3f,%.3f,%d,%.3f,%.3f,%d,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n"
_SUMMARY = (
    "# summary tokens=%d s/tok=%.3f tok/s=%.3f read_MiB=%.1f io_s=%.2f compute_s/tok=%.3f io_s/tok=%.3f "
    "cache_hit_pct=%.1f n_prompt=%d load_s=%.3f prefill_s=%.3f prefill_tps=%.2f stall_s/tok=%.3f mgmt_s/tok=%.3f "
    "cache_resident_MiB=%.1f cache_budget_MiB=%.1f cache_resizes=0 spec_read_MiB=0.0 spec_experts=0 spec_useful=0 "
    "majflt/tok=%.2f cpu_s/tok=%.4f token_demand_MiB=%.1f layer_demand_MiB=%.1f experts_routed=%d "
    "experts_dropped=%d\n"
)
_READY = 'BMOE_READY {"load_s":%.3f,"arch":"%s","n_ctx":%d,"think_ctl":"%s","n_expert_used":%d}\n'
_BEGIN = 'BMOE_BEGIN {"id":%d}\n'
_LOAD = 'BMOE_LOAD {"mb":%.2f,"ms":%.1f}\n'
_PROGRESS = ('BMOE_PROGRESS {"step":%d,"steps":%d,"wall_ms":%.1f,"io_ms":%.1f,"compute_ms":%.1f,"mgmt_ms":%.1f,'
             '"stall_ms":%.1f,"read_mb":%.2f,"cache_hit_pct":%.1f,"majflt":%d,"cpu_ms":%.1f,'
             '"dense_resident_frac":%.3f,%s"delta_reasoning":"%s","delta_text":"%s"}\n')
_DONE = ('BMOE_DONE {"id":%d,"cancelled":%s,"tokens":%d,"tok_s":%.3f,"prefill_s":%.3f,'
         '"prefill_tps":%.2f,"load_s":%.3f,"cache_hit_pct":%.1f,"n_prompt":%d,"n_past":%d,'
         '"compute_s_tok":%.4f,"io_s_tok":%.4f,"cache_resident_mib":%.0f,"cache_budget_mib":%.0f,'
         '"read_mib":%.1f,"stall_s_tok":%.4f,"mgmt_s_tok":%.4f,"majflt_tok":%.2f,"cpu_s_tok":%.4f,'
         '"token_demand_mib":%.1f,"mtp_drafted":%d,"mtp_accepted":%d,"mtp_decodes":%d,'
         '"mtp_draft_s_tok":%.4f,"drafted_steps":%d,"loop_overhead_s_tok":%.4f,'
         '"reasoning":"%s","text":"%s"}\n')
_ERROR = 'BMOE_ERROR {"id":%d,"fatal":%s,"msg":"%s"}\n'
_TOO_LONG = f"prompt + n_predict exceeds the session n_ctx ({N_CTX}); open the session with a larger n_ctx"


def json_escape(s: str) -> str:
    """``json_escape`` of bmoe-cli: quote, backslash, \\n, \\r, \\t, other controls as \\u00xx."""
    out = []
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """One request and what the session does with it: ``outcome`` ``done``, ``cancelled`` (after
    ``tokens`` tokens, 0 allowed) or ``rejected`` (the prompt does not fit n_ctx)."""

    id: int
    prompt: str
    tokens: int = 8
    outcome: str = "done"
    n_predict: int = 400


@dataclass(slots=True)
class SessionRun:
    """The run's three files (bytes as written) and, per generated turn, what they say of it."""

    csv: bytes
    stdout: bytes
    requests: bytes
    #: one per request in order: id, prompt, status (done / cancelled / rejected), turn (0-based
    #: generated-turn counter, None when rejected), tokens, tok_s, cache_hit_pct (the printed figures)
    expected: list[dict] = field(default_factory=list)


def six_requests() -> list[SessionRequest]:
    """Six requests, ids 1-6, the fourth rejected (its prompt and n_predict do not fit n_ctx)."""
    ask = ("Solve this grade-school math problem. Use at most three short lines of working, plain text only. "
           "Then give the final answer on its own last line in exactly this form:\n#### <number>\n\nProblem: ")
    problems = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast. How many are left?",
                "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?",
                "James runs 3 sprints 3 times a week, 60 meters each. How many meters a week?",
                "Summarise \"the whole\" of this\tbook:\n" + "word " * 40,
                "Kylar buys 16 glasses; every second one costs 60% of $5. How much does he pay?",
                "Toulouse has twice as many sheep as Charleston, which has 4 times Seattle's 20. How many in all?")
    return [SessionRequest(i + 1, ask + p, tokens=(9, 6, 11, 0, 7, 5)[i],
                           outcome="rejected" if i == 3 else "done",
                           n_predict=N_CTX if i == 3 else 400)
            for i, p in enumerate(problems)]


def cli_session(requests: list[SessionRequest], seed: int = 7) -> SessionRun:
    """Run ``requests`` through a simulated bmoe-cli session; every number is drawn from ``seed``
    and printed in the peer's format (so the CSV and stdout agree as far as their digits go)."""
    rng = np.random.default_rng(seed)
    csv = [_CSV_HEAD]
    out = [_READY % (_LOAD_S, "qwen35moe", N_CTX, "template", 8)]
    reqs = []
    expected: list[dict] = []
    turn = 0
    lookups = hits = 0
    for r in requests:
        reqs.append(json.dumps({"cmd": "generate", "id": r.id, "prompt": r.prompt, "n_predict": r.n_predict,
                                "think": False, "clear_kv": True}) + "\n")
        out.append(_BEGIN % r.id)
        if r.outcome == "rejected":
            out.append(_ERROR % (r.id, "false", json_escape(_TOO_LONG)))
            expected.append({"id": r.id, "prompt": r.prompt, "status": "rejected", "turn": None, "tokens": None,
                             "tok_s": None, "cache_hit_pct": None, "reason": _TOO_LONG})
            continue
        text = ""
        walls, reads, ios, stalls, mgmts, cpus, faults = [], [], [], [], [], [], []
        for step in range(1, r.tokens + 1):
            wall = float(rng.uniform(150, 480))
            io = float(rng.uniform(60, 260))
            stall = float(rng.uniform(15, 45))
            mgmt = float(rng.uniform(5, 25))
            comp = wall - stall - mgmt
            read = int(rng.integers(20, 160)) * 1 << 20
            majflt = int(rng.integers(0, 12))
            cpu = wall * float(rng.uniform(2.5, 3.3))
            lookups += 320
            hits += int(rng.integers(120, 300))
            hit_pct = 100.0 * hits / lookups
            piece = f" w{step}" if step > 1 else f"#{r.id}"
            csv.append(_ROW % (step, r.n_predict, wall, io, comp, read, hit_pct, stall, mgmt, majflt, cpu, 1.0, turn,
                               majflt * 4096 / _MIB, 3000.0, 3350.0 + step, 3100.0, 250.0, 276.6, 1500.0, 200.0,
                               8260.0))
            if read or io > 0.0:
                out.append(_LOAD % (read / _MIB, io))
            out.append(_PROGRESS % (step, r.n_predict, wall, io, comp, mgmt, stall, read / _MIB, hit_pct, majflt, cpu,
                                    1.0, "", "", json_escape(piece)))
            text += piece
            walls.append(wall)
            reads.append(read)
            ios.append(io)
            stalls.append(stall)
            mgmts.append(mgmt)
            cpus.append(cpu)
            faults.append(majflt)
        n = r.tokens
        gen_s = sum(walls) / 1000.0
        s_tok = gen_s / n if n else 0.0
        tok_s = n / gen_s if gen_s else 0.0
        hit_now = 100.0 * hits / lookups if lookups else 0.0
        n_prompt = max(1, len(r.prompt) // 4)
        prefill_s = n_prompt * 0.09
        read_mib = sum(reads) / _MIB

        def per(xs: list[float], n: int = n) -> float:  # ms per token -> s per token
            return sum(xs) / 1000.0 / n if n else 0.0

        csv.append(_SUMMARY % (n, s_tok, tok_s, read_mib, sum(ios) / 1000.0, per(walls) - per(stalls) - per(mgmts),
                               per(ios), hit_now, n_prompt, _LOAD_S, prefill_s, n_prompt / prefill_s, per(stalls),
                               per(mgmts), 2998.5, 3000.0, (sum(faults) / n) if n else 0.0, per(cpus),
                               read_mib / n if n else 0.0, 15.6, 320 * n, 45 * n))
        cancelled = r.outcome == "cancelled"
        out.append(_DONE % (r.id, "true" if cancelled else "false", n, tok_s, prefill_s, n_prompt / prefill_s, _LOAD_S,
                            hit_now, n_prompt, n_prompt + n, per(walls) - per(stalls) - per(mgmts), per(ios), 2998.5,
                            3000.0, read_mib, per(stalls), per(mgmts), (sum(faults) / n) if n else 0.0, per(cpus),
                            read_mib / n if n else 0.0, 0, 0, 0, 0.0, 0, 0.0, "", json_escape(text)))
        expected.append({"id": r.id, "prompt": r.prompt, "status": r.outcome, "turn": turn, "tokens": n,
                         "tok_s": float("%.3f" % tok_s), "cache_hit_pct": float("%.1f" % hit_now), "reason": None})
        turn += 1
    reqs.append(json.dumps({"cmd": "close"}) + "\n")
    return SessionRun("".join(csv).encode(), "".join(out).encode(), "".join(reqs).encode(), expected)


def write_session(folder, run: SessionRun) -> list[str]:
    """Write ``run``'s three files (requests, stdout, CSV) into ``folder``; their paths, to open
    as one run."""
    paths = []
    for name, data in (("r.jsonl", run.requests), ("s.stdout", run.stdout), ("s.csv", run.csv)):
        (folder / name).write_bytes(data)
        paths.append(str(folder / name))
    return paths
