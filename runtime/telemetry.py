"""Telemetry writers of bmoe-run: the BMOE line protocol, the end-of-run lines, the ``--csv`` sink
and the ``--route-trace`` CSV.

Formats: the contract ("Per-token lines", "End-of-run lines", "CSV sink", "Session mode") and
every additive extension are in docs/telemetry.md; the route-trace CSV of BigMoeOnEdge
(``# route_trace v1``; columns ``turn,phase,step,layer,slot,expert,weight,residency,expert_bytes``;
phase 0 = prefill, 1 = decode; ``step`` = the token's position in the context;
``residency`` 1 = the expert was resident when routed; ``expert_bytes`` = bytes read for that
slot, 0 when it was a hit or already read for an earlier token of the same batch).

Every line goes out whole and flushed (``Emitter``), even when stdout is a pipe. The two files
are opened with ``bmoe_top.outfile.open_output`` (never through a symbolic link, an existing file
only with ``force``); a write error raises ``OutputFileError`` from the call that hit it, and
again at ``close()``.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from typing import IO

import orjson

from bmoe_top.outfile import OutputFile, open_output

from .engine import MIB, Engine, GenerationResult, TokenStats

CSV_COLUMNS = ("step", "steps", "wall_ms", "io_ms", "compute_ms", "read_bytes", "cache_hit_pct", "stall_ms", "mgmt_ms")
#: additive columns after the contract's nine (read by name; docs/telemetry.md)
CSV_EXTRA = ("decode_ms", "xfer_bytes", "hit_pct_since_load", "cache_resident_mib", "cache_budget_mib", "rss_mib",
             "majflt", "cpu_ms", "turn")
ROUTE_COLUMNS = "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes"


def _r(x: float, nd: int = 3) -> float:
    if x is None or not math.isfinite(x):
        return -1.0
    return round(float(x), nd)


class Emitter:
    """Thread-safe line writer: each line is written whole and flushed; ``also`` gets a copy
    (e.g. a session-socket broadcast). A failed write is remembered, never raised: ``broken``,
    and ``error`` the first exception (a ``BrokenPipeError`` when the reader went away, an
    ``OSError`` such as ENOSPC for a full disk behind ``> file``)."""

    def __init__(self, out: IO[str] | None = None, also: Callable[[str], None] | None = None):
        self.out = out if out is not None else sys.stdout
        self.also = also
        self.lock = threading.Lock()
        self.broken = False
        self.error: BaseException | None = None

    def _failed(self, exc: BaseException) -> None:
        self.broken = True
        if self.error is None:
            self.error = exc

    def line(self, s: str) -> None:
        with self.lock:
            if not self.broken:
                try:
                    self.out.write(s + "\n")
                    self.out.flush()
                except (ValueError, OSError) as exc:
                    self._failed(exc)
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
            except (ValueError, OSError) as exc:
                self._failed(exc)


def bmoe(tag: str, obj: dict) -> str:
    """``BMOE_<TAG> {json}`` (orjson: non-ASCII kept as UTF-8, control characters escaped)."""
    return f"BMOE_{tag} " + orjson.dumps(obj).decode()


def process_memory() -> tuple[float, float]:
    """(RSS now, peak RSS of this process so far), MiB, from ``/proc/self/status`` (``VmRSS``,
    ``VmHWM``: the peak of this program's own memory; ``getrusage`` would also count the parent's
    memory copied by the fork before ``exec``). (-1, -1) where /proc is absent."""
    rss = peak = -1.0
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) / 1024.0
                elif line.startswith(b"VmHWM:"):
                    peak = int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return rss, peak


def load_line(st: TokenStats) -> str | None:
    """``BMOE_LOAD`` for a token that read experts, else None. ``mb`` MiB read (payload), ``ms``
    read time; additive ``xfer_mb``: the page-aligned MiB the reads transferred."""
    if st.read_bytes <= 0:
        return None
    return bmoe("LOAD", {"mb": _r(st.read_mb, 4), "ms": _r(st.io_ms), "xfer_mb": _r(st.xfer_mb, 4)})


def progress_line(st: TokenStats) -> str:
    """``BMOE_PROGRESS``: the contract's fields, then the additive ones (docs/telemetry.md)."""
    obj: dict[str, object] = {
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
        "decode_ms": _r(st.decode_ms),
        "xfer_mb": _r(st.xfer_mb, 4),
        "hit_pct_decode": _r(st.cache_hit_pct, 2),
        "hit_pct_since_load": _r(st.hit_pct_since_load, 2),
        "resident_mib": _r(st.resident_mib),
        "budget_mib": _r(st.budget_mib),
    }
    if st.pagecache_bytes >= 0:  # the tiers of this token's routed experts (docs/memory.md)
        obj.update(pagecache_mb=_r(st.pagecache_mb, 4), hits=st.hits, misses=st.misses,
                   misses_pagecache=st.pagecache_misses)
    if st.rss_mib >= 0:
        obj.update(rss_mib=_r(st.rss_mib, 1), majflt=st.majflt, cpu_ms=_r(st.cpu_ms))
    return bmoe("PROGRESS", obj)


def route_line(step: int, turn: int, phase: str, route: list[tuple[list[int], list[int]]],
               tier: list[list[int]] | None = None) -> str:
    """``BMOE_ROUTE``; additive ``tier`` (decode, when the reads tell the tiers): per layer, aligned
    with ``experts``, 0 = the expert cache, 1 = the page cache, 2 = the disk served it."""
    obj: dict[str, object] = {"step": step, "turn": turn, "phase": phase,
                              "experts": [list(r[0]) for r in route], "hit": [list(r[1]) for r in route]}
    if tier is not None:
        obj["tier"] = tier
    return bmoe("ROUTE", obj)


def resident_line(eng: Engine, step: int) -> str:
    cs = eng.cache_stats()
    return bmoe(
        "RESIDENT",
        {"step": step, "n_expert": eng.n_expert, "resident": cs.resident,
         "resident_mib": _r(cs.resident_mib), "budget_mib": _r(cs.budget_mib)},
    )


def ready_line(eng: Engine) -> str:
    rss, peak = process_memory()
    return bmoe(
        "READY",
        {"load_s": _r(eng.load_s), "arch": eng.arch, "n_ctx": eng.n_ctx,
         # additive fields for the observatory
         "n_layer": eng.n_layer, "n_expert": eng.n_expert, "n_expert_used": eng.n_expert_used,
         "stream": eng.stream, "cache_budget_mib": _r(eng.budget_mib), "model": str(eng.model_path),
         "expert_bank_mib": _r(eng.layout.expert_bank_bytes / MIB), "n_threads": eng.n_threads,
         "io_threads": eng.io_threads, "o_direct": eng.o_direct, "rss_mib": _r(rss, 1), "peak_rss_mib": _r(peak, 1)},
    )


def _per_token(res: GenerationResult) -> dict[str, float]:
    """The per-generation figures every summary carries, with their unit in the name."""
    n = max(1, res.n_tokens)
    return {
        "prefill_tps": res.n_prompt / res.prefill_s if res.prefill_s > 0 else 0.0,
        "compute_s_tok": res.compute_s / n,
        "io_s_tok": res.io_s / n,
        "read_mib_tok": res.read_mib / n,
        "xfer_mib_tok": res.xfer_mib / n,
        "cpu_s_tok": res.cpu_s / n,
        "majflt_tok": res.majflt / n,
    }


def done_line(eng: Engine, gid: object, res: GenerationResult) -> str:
    n = max(1, res.n_tokens)
    cs = eng.cache_stats()
    pt = _per_token(res)
    rss, peak = process_memory()
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
            # additive (docs/telemetry.md)
            "read_mib": _r(res.read_mib, 4),
            "xfer_mib": _r(res.xfer_mib, 4),
            "tok_s_def": "token_wall",
            "decode_tok_s": _r(res.decode_tok_s),
            "ttft_s": _r(res.ttft_s, 4),
            "prefill_tps": _r(pt["prefill_tps"], 2),
            "compute_s_tok": _r(pt["compute_s_tok"], 5),
            "io_s_tok": _r(pt["io_s_tok"], 5),
            "read_mib_tok": _r(pt["read_mib_tok"], 4),
            "xfer_mib_tok": _r(pt["xfer_mib_tok"], 4),
            "hit_pct_decode": _r(res.hit_pct, 2),
            "hit_pct_since_load": _r(cs.hit_pct, 2),
            "cache_evictions": res.evictions,
            "cache_rereads": res.rereads,
            "majflt": res.majflt,
            "cpu_s": _r(res.cpu_s, 4),
            "rss_mib": _r(rss, 1),
            "peak_rss_mib": _r(peak, 1),
        },
    )


def error_line(gid: object, fatal: bool, msg: str) -> str:
    return bmoe("ERROR", {"id": gid, "fatal": bool(fatal), "msg": msg})


def summary_text_lines(eng: Engine, res: GenerationResult) -> list[str]:
    """The end-of-run lines (``generation:``, ``prefill:``, ``compute:``, and with streaming
    ``moe-stream:``, ``moe-cache:`` when a cache is active, ``moe-prefetch:`` with
    --prefetch/--overlap, or tagged ``[early-router]`` when the early prefetch read any expert).
    Each contract line keeps its shape; the extensions follow it on the same line
    (docs/telemetry.md)."""
    n = res.n_tokens
    nn = max(1, n)
    pt = _per_token(res)
    out = [f"generation: {n} tokens, {res.s_per_tok:.4f} s/token ({res.tok_s:.2f} tok/s) per-token wall; "
           f"{res.decode_tok_s:.2f} tok/s in llama_decode alone"]
    ttft = eng.load_s + res.ttft_s
    out.append(
        f"prefill: {res.n_prompt} tokens, {res.prefill_s:.4f} s ({pt['prefill_tps']:.1f} tok/s) | model load "
        f"{eng.load_s:.3f} s | TTFT {ttft:.4f} s"
        + ("" if eng.weights_read_mib is None else
           f" | weights read {eng.weights_read_mib:.0f} MiB into {eng.load_mem_mib:.0f} MiB, "
           f"{eng.load_huge_mib:.0f} MiB in 2 MiB pages")
    )
    if res.decode_s > 0 and eng.n_threads > 0:
        occ = 100.0 * res.cpu_s / (res.decode_s * eng.n_threads)
        out.append(f"compute: {occ:.1f}% CPU occupancy ({pt['cpu_s_tok']:.4f} cpu-s/token over {eng.n_threads} "
                   f"threads), {pt['majflt_tok']:.2f} major faults/token")
    if eng.stream and eng.cache is not None:
        read = res.read_mib
        bw = read / res.io_s if res.io_s > 0 else 0.0
        line = (
            f"moe-stream: read {read:.4f} MiB ({read / nn:.4f} MiB/token), decode {res.s_per_tok:.4f} s/token "
            f"(compute {pt['compute_s_tok']:.4f} + cache mgmt {res.mgmt_s / nn:.4f} + flash I/O "
            f"{pt['io_s_tok']:.4f} s/token, {bw:.0f} MiB/s)"
        )
        if eng.cache.overlap:
            line += f" stall_s/tok={res.stall_s / nn:.4f}"
        line += f" | payload; page-aligned {res.xfer_mib:.4f} MiB ({pt['xfer_mib_tok']:.4f} MiB/token)"
        out.append(line)
        if not eng.cache.no_cache:
            since = eng.cache_stats().hit_pct
            out.append(f"moe-cache: {res.hit_pct:.2f}% hit, resident {eng.cache.resident_mib:.3f} MiB "
                       f"| decode only; {since:.2f}% hit since load")
            out.append(f"moe-cache: {res.evictions} evictions, {res.rereads} re-reads ({res.rereads / nn:.2f}/token)"
                       + (f" | rest of the bank read after the prefill: {res.fill_bytes / MIB:.0f} MiB in "
                          f"{res.fill_s:.3f} s" if res.fill_bytes else ""))
        if eng.cache.prefetch or res.spec_experts:
            pct = 100.0 * res.spec_useful / res.spec_experts if res.spec_experts else 0.0
            mode = "" if eng.cache.prefetch else " [early-router]"
            out.append(
                f"moe-prefetch: {res.spec_bytes / MIB:.3f} MiB speculative, "
                f"{res.spec_useful}/{res.spec_experts} experts useful ({pct:.1f}%){mode}"
            )
    return out


def _pct(x: float) -> str:
    """A hit percentage as bmoe-cli writes it: ``-1.0`` for "no cache", else two decimals."""
    return "-1.0" if x < 0 else f"{x:.2f}"


#: Bytes the --csv and --route-trace files buffer before a write (what a text file did).
_SINK_BUFFER = 8192


def _close_quietly(fh: OutputFile) -> None:
    """Close ``fh`` while another error is on its way (that error says enough)."""
    try:
        fh.close()
    except OSError:
        pass


class CsvSink:
    """``--csv PATH``: ``# key=value`` header, the 9 documented columns and the additive ones
    (:data:`CSV_EXTRA`), a ``# summary`` per generation."""

    def __init__(self, path: str, eng: Engine, flags: dict[str, object], force: bool = False):
        self.eng = eng
        self.fh: OutputFile = open_output(path, force=force, buffer_size=_SINK_BUFFER)
        try:
            self._header(eng, flags)
        except BaseException:
            _close_quietly(self.fh)
            raise

    def _header(self, eng: Engine, flags: dict[str, object]) -> None:
        lay = eng.layout
        self.fh.write("# bmoe_metrics v1\n")
        self.fh.write(
            f"# model={eng.model_path.name} arch={eng.arch} n_layer={eng.n_layer} n_expert={eng.n_expert} "
            f"n_expert_used={eng.n_expert_used} threads={eng.n_threads} n_ctx={eng.n_ctx}\n"
        )
        self.fh.write("# " + " ".join(f"{k}={_fmt_flag(v)}" for k, v in flags.items()) + "\n")
        self.fh.write(f"# expert_bank_MiB={lay.expert_bank_bytes / MIB:.3f} path={eng.model_path}\n")
        self.fh.write(",".join(CSV_COLUMNS + CSV_EXTRA) + "\n")
        self.fh.flush()

    def row(self, st: TokenStats, turn: int | None = None) -> None:
        """One token's row; ``turn`` (default: the engine's turn) labels its generated turn."""
        self.fh.write(
            f"{st.step},{st.steps},{st.wall_ms:.3f},{st.io_ms:.3f},{st.compute_ms:.3f},{st.read_bytes},"
            f"{_pct(st.cache_hit_pct)},{st.stall_ms:.3f},{st.mgmt_ms:.3f},"
            f"{st.decode_ms:.3f},{st.xfer_bytes},{_pct(st.hit_pct_since_load)},{st.resident_mib:.3f},"
            f"{st.budget_mib:.3f},{_process_cells(st)},{self.eng.turn if turn is None else turn}\n"
        )

    def summary(self, eng: Engine, res: GenerationResult) -> None:
        nn = max(1, res.n_tokens)
        cs = eng.cache_stats()
        pt = _per_token(res)
        rss, peak = process_memory()
        kv = {
            "tokens": res.n_tokens,
            "s/tok": f"{res.s_per_tok:.4f}",
            "tok/s": f"{res.tok_s:.3f}",
            "read_MiB": f"{res.read_mib:.4f}",
            "io_s": f"{res.io_s:.4f}",
            "compute_s/tok": f"{pt['compute_s_tok']:.4f}",
            "io_s/tok": f"{pt['io_s_tok']:.4f}",
            "cache_hit_pct": _pct(res.hit_pct),
            "n_prompt": res.n_prompt,
            "load_s": f"{eng.load_s:.3f}",
            "prefill_s": f"{res.prefill_s:.4f}",
            "prefill_tps": f"{pt['prefill_tps']:.2f}",
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
            # additive (docs/telemetry.md): tok/s above is per-token wall, decode_tok/s the decode calls alone
            "decode_tok/s": f"{res.decode_tok_s:.3f}",
            "ttft_s": f"{eng.load_s + res.ttft_s:.4f}",
            "xfer_MiB": f"{res.xfer_mib:.4f}",
            "read_MiB/tok": f"{pt['read_mib_tok']:.4f}",
            "xfer_MiB/tok": f"{pt['xfer_mib_tok']:.4f}",
            "hit_pct_decode": _pct(res.hit_pct),
            "hit_pct_since_load": _pct(cs.hit_pct),
            "majflt/tok": f"{pt['majflt_tok']:.2f}",
            "cpu_s/tok": f"{pt['cpu_s_tok']:.4f}",
            "rss_MiB": f"{rss:.1f}",
            "peak_rss_MiB": f"{peak:.1f}",
        }
        if not eng.process_stats:  # not measured: absent, not 0
            del kv["majflt/tok"], kv["cpu_s/tok"]
        self.fh.write("# summary " + " ".join(f"{k}={v}" for k, v in kv.items()) + "\n")
        self.fh.flush()

    def close(self) -> None:
        """Write the rest out and close; a write error (now or earlier) raises
        :class:`~bmoe_top.outfile.OutputFileError`."""
        self.fh.close()


def _process_cells(st: TokenStats) -> str:
    """The ``rss_mib,majflt,cpu_ms`` cells: empty (absent, docs/telemetry.md) when not measured."""
    if st.rss_mib < 0:
        return ",,"
    return f"{st.rss_mib:.1f},{st.majflt},{st.cpu_ms:.3f}"


def _fmt_flag(v: object) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if v is None:
        return "auto"
    return str(v)


class RouteTraceSink:
    """``--route-trace PATH``: one row per (token, layer, slot). Installed as ``engine.route_sink``."""

    def __init__(self, path: str, eng: Engine, force: bool = False):
        self.eng = eng
        self.fh: OutputFile = open_output(path, force=force, buffer_size=_SINK_BUFFER)
        try:
            self._header(eng)
        except BaseException:
            _close_quietly(self.fh)
            raise
        eng.route_sink = self.on_batch

    def _header(self, eng: Engine) -> None:
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
        """Write the rest out and close; a write error (now or earlier) raises
        :class:`~bmoe_top.outfile.OutputFileError`."""
        self.fh.close()
