"""Telemetry writers of bmoe-run: the BMOE line protocol, the end-of-run lines, the ``--csv`` sink
and the ``--route-trace`` CSV.

Formats: ../shared/seeds/telemetry-contract.md ("Per-token lines", "End-of-run lines",
"CSV sink", "Session mode"); the ``BMOE_ROUTE``/``BMOE_RESIDENT`` extensions of
docs/architecture.md "Telemetry extensions"; the route-trace CSV of BigMoeOnEdge
(``# route_trace v1``; columns ``turn,phase,step,layer,slot,expert,weight,residency,expert_bytes``;
phase 0 = prefill, 1 = decode; ``step`` = the token's position in the context;
``residency`` 1 = the expert was resident when routed; ``expert_bytes`` = bytes read for that
slot, 0 when it was a hit or already read for an earlier token of the same batch).

Every line goes out whole and flushed (``Emitter``), even when stdout is a pipe.
"""

from __future__ import annotations

import io
import math
import sys
import threading
from collections.abc import Callable
from typing import IO

import orjson

from .engine import MIB, Engine, GenerationResult, TokenStats

CSV_COLUMNS = ("step", "steps", "wall_ms", "io_ms", "compute_ms", "read_bytes", "cache_hit_pct", "stall_ms", "mgmt_ms")
ROUTE_COLUMNS = "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes"


def _r(x: float, nd: int = 3) -> float:
    if x is None or not math.isfinite(x):
        return -1.0
    return round(float(x), nd)


class Emitter:
    """Thread-safe line writer: each line is written whole and flushed; ``also`` gets a copy
    (e.g. a session-socket broadcast). Broken pipes are remembered (``broken``), never raised."""

    def __init__(self, out: IO[str] | None = None, also: Callable[[str], None] | None = None):
        self.out = out if out is not None else sys.stdout
        self.also = also
        self.lock = threading.Lock()
        self.broken = False

    def line(self, s: str) -> None:
        with self.lock:
            if not self.broken:
                try:
                    self.out.write(s + "\n")
                    self.out.flush()
                except (BrokenPipeError, ValueError, OSError):
                    self.broken = True
            if self.also is not None:
                try:
                    self.also(s)
                except Exception:  # noqa: BLE001 - a listener must not break the run
                    pass

    def raw(self, s: str) -> None:
        """Inline answer text (no newline added), flushed."""
        with self.lock:
            if self.broken:
                return
            try:
                self.out.write(s)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.broken = True


def bmoe(tag: str, obj: dict) -> str:
    """``BMOE_<TAG> {json}`` (orjson: non-ASCII kept as UTF-8, control characters escaped)."""
    return f"BMOE_{tag} " + orjson.dumps(obj).decode()


def load_line(st: TokenStats) -> str | None:
    """``BMOE_LOAD`` for a token that read experts, else None. ``mb`` MiB read, ``ms`` read time."""
    if st.read_bytes <= 0:
        return None
    return bmoe("LOAD", {"mb": _r(st.read_mb, 4), "ms": _r(st.io_ms)})


def progress_line(st: TokenStats) -> str:
    return bmoe(
        "PROGRESS",
        {
            "step": st.step,
            "steps": st.steps,
            "wall_ms": _r(st.wall_ms),
            "io_ms": _r(st.io_ms),
            "compute_ms": _r(st.compute_ms),
            "mgmt_ms": _r(st.mgmt_ms),
            "stall_ms": _r(st.stall_ms),
            "read_mb": _r(st.read_mb, 4),
            "cache_hit_pct": _r(st.cache_hit_pct, 2),
            "text": st.text,
        },
    )


def route_line(step: int, turn: int, phase: str, route: list[tuple[list[int], list[int]]]) -> str:
    return bmoe(
        "ROUTE",
        {"step": step, "turn": turn, "phase": phase,
         "experts": [list(r[0]) for r in route], "hit": [list(r[1]) for r in route]},
    )


def resident_line(eng: Engine, step: int) -> str:
    cs = eng.cache_stats()
    return bmoe(
        "RESIDENT",
        {"step": step, "n_expert": eng.n_expert, "resident": cs.resident,
         "resident_mib": _r(cs.resident_mib), "budget_mib": _r(cs.budget_mib)},
    )


def ready_line(eng: Engine) -> str:
    return bmoe(
        "READY",
        {"load_s": _r(eng.load_s), "arch": eng.arch, "n_ctx": eng.n_ctx,
         # additive fields for the observatory
         "n_layer": eng.n_layer, "n_expert": eng.n_expert, "n_expert_used": eng.n_expert_used,
         "stream": eng.stream, "cache_budget_mib": _r(eng.budget_mib), "model": str(eng.model_path)},
    )


def done_line(eng: Engine, gid, res: GenerationResult) -> str:
    n = max(1, res.n_tokens)
    cs = eng.cache_stats()
    return bmoe(
        "DONE",
        {
            "id": gid,
            "cancelled": bool(res.cancelled),
            "tokens": res.n_tokens,
            "tok_s": _r(res.tok_s),
            "prefill_s": _r(res.prefill_s, 4),
            "load_s": _r(eng.load_s),
            "cache_hit_pct": _r(res.hit_pct, 2),
            "n_prompt": res.n_prompt,
            "n_past": res.n_past,
            "cache_resident_mib": _r(cs.resident_mib),
            "cache_budget_mib": _r(cs.budget_mib),
            "spec_recall_pct": -1.0,
            "stall_s_tok": _r(res.stall_s / n, 5),
            "mgmt_s_tok": _r(res.mgmt_s / n, 5),
            "text": res.text,
            # additive: read MiB this generation (decode), so consumers can check their sums
            "read_mib": _r(res.read_mib, 4),
        },
    )


def error_line(gid, fatal: bool, msg: str) -> str:
    return bmoe("ERROR", {"id": gid, "fatal": bool(fatal), "msg": msg})


def summary_text_lines(eng: Engine, res: GenerationResult) -> list[str]:
    """The end-of-run lines (``generation:``, ``prefill:``, and with streaming ``moe-stream:``,
    ``moe-cache:`` when a cache is active, ``moe-prefetch:`` with --prefetch/--overlap)."""
    n = res.n_tokens
    nn = max(1, n)
    out = [f"generation: {n} tokens, {res.s_per_tok:.4f} s/token ({res.tok_s:.2f} tok/s)"]
    ptps = res.n_prompt / res.prefill_s if res.prefill_s > 0 else 0.0
    out.append(
        f"prefill: {res.n_prompt} tokens, {res.prefill_s:.4f} s ({ptps:.1f} tok/s) | model load {eng.load_s:.3f} s"
    )
    if eng.stream and eng.cache is not None:
        read = res.read_mib
        io_tok = res.io_s / nn
        comp_tok = res.compute_s / nn
        mgmt_tok = res.mgmt_s / nn
        bw = read / res.io_s if res.io_s > 0 else 0.0
        line = (
            f"moe-stream: read {read:.4f} MiB ({read / nn:.4f} MiB/token), decode {res.s_per_tok:.4f} s/token "
            f"(compute {comp_tok:.4f} + cache mgmt {mgmt_tok:.4f} + flash I/O {io_tok:.4f} s/token, {bw:.0f} MiB/s)"
        )
        if eng.cache.overlap:
            line += f" stall_s/tok={res.stall_s / nn:.4f}"
        out.append(line)
        if not eng.cache.no_cache:
            out.append(f"moe-cache: {res.hit_pct:.2f}% hit, resident {eng.cache.resident_mib:.3f} MiB")
            out.append(f"moe-cache: {res.evictions} evictions, {res.rereads} re-reads ({res.rereads / nn:.2f}/token)")
        if eng.cache.prefetch:
            pct = 100.0 * res.spec_useful / res.spec_experts if res.spec_experts else 0.0
            out.append(
                f"moe-prefetch: {res.spec_bytes / MIB:.3f} MiB speculative, "
                f"{res.spec_useful}/{res.spec_experts} experts useful ({pct:.1f}%)"
            )
    return out


class CsvSink:
    """``--csv PATH``: ``# key=value`` header, the 9 documented columns, a ``# summary`` per generation."""

    def __init__(self, path: str, eng: Engine, flags: dict[str, object]):
        self.fh = open(path, "w", encoding="utf-8", newline="\n")
        lay = eng.layout
        self.fh.write("# bmoe_metrics v1\n")
        self.fh.write(
            f"# model={eng.model_path.name} arch={eng.arch} n_layer={eng.n_layer} n_expert={eng.n_expert} "
            f"n_expert_used={eng.n_expert_used} threads={eng.n_threads} n_ctx={eng.n_ctx}\n"
        )
        self.fh.write("# " + " ".join(f"{k}={_fmt_flag(v)}" for k, v in flags.items()) + "\n")
        self.fh.write(f"# expert_bank_MiB={lay.expert_bank_bytes / MIB:.3f} path={eng.model_path}\n")
        self.fh.write(",".join(CSV_COLUMNS) + "\n")
        self.fh.flush()

    def row(self, st: TokenStats) -> None:
        self.fh.write(
            f"{st.step},{st.steps},{st.wall_ms:.3f},{st.io_ms:.3f},{st.compute_ms:.3f},{st.read_bytes},"
            f"{st.cache_hit_pct:.2f},{st.stall_ms:.3f},{st.mgmt_ms:.3f}\n"
        )

    def summary(self, eng: Engine, res: GenerationResult) -> None:
        nn = max(1, res.n_tokens)
        cs = eng.cache_stats()
        ptps = res.n_prompt / res.prefill_s if res.prefill_s > 0 else 0.0
        kv = {
            "tokens": res.n_tokens,
            "s/tok": f"{res.s_per_tok:.4f}",
            "tok/s": f"{res.tok_s:.3f}",
            "read_MiB": f"{res.read_mib:.4f}",
            "io_s": f"{res.io_s:.4f}",
            "compute_s/tok": f"{res.compute_s / nn:.4f}",
            "io_s/tok": f"{res.io_s / nn:.4f}",
            "cache_hit_pct": f"{res.hit_pct:.2f}",
            "n_prompt": res.n_prompt,
            "load_s": f"{eng.load_s:.3f}",
            "prefill_s": f"{res.prefill_s:.4f}",
            "prefill_tps": f"{ptps:.2f}",
            "stall_s/tok": f"{res.stall_s / nn:.4f}",
            "mgmt_s/tok": f"{res.mgmt_s / nn:.4f}",
            "cache_resident_MiB": f"{cs.resident_mib:.3f}",
            "cache_budget_MiB": f"{cs.budget_mib:.3f}",
            "spec_read_MiB": f"{res.spec_bytes / MIB:.3f}",
            "spec_experts": res.spec_experts,
            "spec_useful": res.spec_useful,
            "cache_evictions": res.evictions,
            "cache_rereads": res.rereads,
            "cancelled": int(res.cancelled),
        }
        self.fh.write("# summary " + " ".join(f"{k}={v}" for k, v in kv.items()) + "\n")
        self.fh.flush()

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass


def _fmt_flag(v: object) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if v is None:
        return "auto"
    return str(v)


class RouteTraceSink:
    """``--route-trace PATH``: one row per (token, layer, slot). Installed as ``engine.route_sink``."""

    def __init__(self, path: str, eng: Engine):
        self.eng = eng
        self.fh: io.TextIOBase = open(path, "w", encoding="utf-8", newline="\n")
        lay = eng.layout
        self.fh.write("# route_trace v1\n")
        self.fh.write(
            f"# model={eng.model_path} arch={eng.arch} n_layer={eng.n_layer} n_expert={eng.n_expert} "
            f"n_expert_used={eng.n_expert_used}\n"
        )
        for il in range(lay.n_layer):
            self.fh.write(f"# layer={il} expert_bytes={lay.expert_bytes[il]} dense_bytes={lay.dense_bytes[il]}\n")
        self.fh.write(ROUTE_COLUMNS + "\n")
        self.fh.flush()
        eng.route_sink = self.on_batch

    def on_batch(self, phase: str, turn: int, pos0: int, d: dict) -> None:
        ids: dict = d["ids"]
        ws: dict = d["w"]
        hits: dict = d["hits"]
        ph = 0 if phase == "prefill" else 1
        lay = self.eng.layout
        stream = self.eng.cache is not None
        out = []
        n_tokens = d["n_tokens"]
        charged: dict[int, set[int]] = {il: set() for il in ids}
        for ti in range(n_tokens):
            for il in sorted(ids):
                arr = ids[il]
                if ti >= arr.shape[0]:
                    continue
                w = ws.get(il)
                hmap = hits.get(il, {})
                for slot in range(arr.shape[1]):
                    e = int(arr[ti, slot])
                    res = hmap.get(e, 1) if stream else 1
                    nbytes = 0
                    if stream and not res and e not in charged[il]:
                        charged[il].add(e)
                        nbytes = lay.expert_bytes[il]
                    wt = f"{float(w[ti, slot]):.6g}" if w is not None and ti < w.shape[0] else ""
                    out.append(f"{turn},{ph},{pos0 + ti},{il},{slot},{e},{wt},{int(res)},{nbytes}\n")
        self.fh.write("".join(out))

    def close(self) -> None:
        try:
            self.fh.flush()
            self.fh.close()
        except OSError:
            pass
