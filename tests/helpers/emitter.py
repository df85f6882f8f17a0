"""A synthetic session-protocol emitter: a real child process for live-source tests and benchmarks.

It behaves like ``bmoe-run --session --progress`` (telemetry-contract.md "Session mode")
without a model: after ``--ready-delay`` it prints ``BMOE_READY``, then reads JSON requests
from stdin (generate / cancel / close; EOF = close) and answers a ``generate`` with
``BMOE_BEGIN``, ``n_predict`` ``BMOE_PROGRESS`` lines (cumulative ``text``, ``t_emit`` = unix
time of writing) at ``--rate`` lines/s, and ``BMOE_DONE``. A prompt containing "REJECT" gets a
non-fatal ``BMOE_ERROR``. Fault switches reproduce the failure cases the live sources must
survive:

--no-ready               never print BMOE_READY (READY timeout)
--stderr-bytes N         write N bytes to stderr before READY (--stderr-one-line: as ONE line)
--block-buffered         stdout through a 64 KiB buffer, never flushed until exit
--buffered-after-ready   BMOE_READY flushed, every later line held in that buffer until exit
--die-mid-line K         after K progress lines of the first turn, write half a line and SIGKILL itself
--noise-prefix           put loader noise before BMOE_READY on the same line
--ignore-term            ignore SIGTERM (close must escalate to SIGKILL)
--grandchild             start a `sleep` grandchild in the same process group (no orphan test)
--auto N                 no stdin: emit N progress lines at --rate in turns of --turn-len, then exit
--socket PATH            also serve the session on a Unix socket (bmoe_top.runtime.session_socket)
--exit-code K            exit status after close/EOF
--deep N                 after the first turn's first progress line, a BMOE_ROUTE, an unknown record
                         and a BMOE_PROGRESS field each nested N lists deep
--enforce-ctx            reject a generate whose context (4 tokens a prompt, kept across turns unless
                         clear_kv) plus n_predict exceeds --n-ctx, in bmoe-run's words
--hide-ctx               READY does not say n_ctx
--arch-from-env NAME     READY's arch is environment variable NAME's value ("unset" without it)
--route-layers L         also BMOE_ROUTE per token for L layers (top --route-k of --route-experts,
                         skewed, hits from an LRU of --route-slots per layer) and BMOE_RESIDENT
                         every 8 tokens; the progress line's cache_hit_pct is that LRU's
--route-cycle P          route the first P tokens, then repeat those P lines (cheap at any rate)
--route-tiers            the BMOE_ROUTE lines also name each expert's tier as bmoe-run does (0 a
                         hit; a miss 1 the page cache, or 2 the disk for every third expert id)
--delta-text             progress lines carry this token's text (delta_text), not the answer so far
--warm N                 the first N progress lines of the session unpaced, then --rate

Run: ``python tests/helpers/emitter.py [options]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time


class Router:
    """Deterministic skewed routing with a per-layer LRU cache of ``slots`` experts."""

    def __init__(self, n_layer: int, n_expert: int, k: int, slots: int, tiers: bool = False) -> None:
        import random

        self.rng = random.Random(7)
        self.n_layer, self.n_expert, self.k, self.slots, self.tiers = n_layer, n_expert, k, slots, tiers
        self.lru: list[list[int]] = [[] for _ in range(n_layer)]
        self.hits = self.lookups = self.last_misses = 0
        self.weights = [1.0 / (1 + e) ** 1.1 for e in range(n_expert)]

    def route(self, step: int) -> dict:
        experts, hit = [], []
        self.last_misses = 0
        for il in range(self.n_layer):
            shift = (il * 7) % self.n_expert
            picked: list[int] = []
            while len(picked) < self.k:
                e = (self.rng.choices(range(self.n_expert), self.weights)[0] + shift) % self.n_expert
                if e not in picked:
                    picked.append(e)
            lru, row = self.lru[il], []
            for e in picked:
                h = e in lru
                if h:
                    lru.remove(e)
                lru.append(e)
                if len(lru) > self.slots:
                    lru.pop(0)
                row.append(int(h))
                self.hits += h
                self.last_misses += not h
            self.lookups += len(picked)
            experts.append(picked)
            hit.append(row)
        out = {"step": step, "turn": 0, "phase": "decode", "experts": experts, "hit": hit}
        if self.tiers:
            out["tier"] = [[0 if h else (2 if e % 3 == 0 else 1) for e, h in zip(es, hs)]
                           for es, hs in zip(experts, hit)]
        return out

    def hit_pct(self) -> float:
        return 100.0 * self.hits / max(1, self.lookups)

    def resident(self, step: int) -> dict:
        return {"step": step, "n_expert": self.n_expert, "resident": [sorted(x) for x in self.lru],
                "resident_mib": 0.1 * sum(map(len, self.lru)), "budget_mib": 0.1 * self.slots * self.n_layer}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready-delay", type=float, default=0.05)
    ap.add_argument("--no-ready", action="store_true")
    ap.add_argument("--stderr-bytes", type=int, default=0)
    ap.add_argument("--stderr-one-line", action="store_true")
    ap.add_argument("--block-buffered", action="store_true")
    ap.add_argument("--buffered-after-ready", action="store_true")
    ap.add_argument("--die-mid-line", type=int, default=-1)
    ap.add_argument("--noise-prefix", action="store_true")
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--grandchild", action="store_true")
    ap.add_argument("--auto", type=int, default=0)
    ap.add_argument("--turn-len", type=int, default=512)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--n-predict", type=int, default=16)
    ap.add_argument("--socket", default=None)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--deep", type=int, default=0)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--enforce-ctx", action="store_true")
    ap.add_argument("--hide-ctx", action="store_true")
    ap.add_argument("--route-layers", type=int, default=0)
    ap.add_argument("--route-experts", type=int, default=128)
    ap.add_argument("--route-k", type=int, default=8)
    ap.add_argument("--route-slots", type=int, default=40)
    ap.add_argument("--route-cycle", type=int, default=0)
    ap.add_argument("--route-tiers", action="store_true")
    ap.add_argument("--delta-text", action="store_true")
    ap.add_argument("--warm", type=int, default=0)
    ap.add_argument("--arch-from-env", default=None)
    a = ap.parse_args(argv)

    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.grandchild:
        gc = subprocess.Popen(["sleep", "300"])
        print(f"grandchild pid {gc.pid}", file=sys.stderr, flush=True)

    if a.block_buffered:
        out = os.fdopen(os.dup(1), "w", buffering=65536, encoding="utf-8")
        flush_each = False
    else:
        out = sys.stdout
        flush_each = True
    lock = threading.Lock()
    server = None

    def emit(line: str) -> None:
        with lock:
            out.write(line + "\n")
            if flush_each:
                out.flush()
            if server is not None:
                server.broadcast(line)

    cancel = threading.Event()
    requests: list[dict] = []
    req_cv = threading.Condition()

    def on_request(obj: dict, client=None) -> None:
        if obj.get("cmd") == "cancel":
            cancel.set()
        with req_cv:
            requests.append(obj)
            req_cv.notify()

    if a.socket:
        from bmoe_top.runtime.session_socket import SessionSocketServer

        server = SessionSocketServer(a.socket, on_request).start()

    if a.stderr_bytes:
        if a.stderr_one_line:
            sys.stderr.write("E" * a.stderr_bytes + "\n")
        else:
            line = "llama_model_loader: noise " + "x" * 100 + "\n"
            n = 0
            while n < a.stderr_bytes:
                sys.stderr.write(line)
                n += len(line)
        sys.stderr.flush()

    time.sleep(a.ready_delay)
    if a.no_ready:
        time.sleep(3600)
        return 1
    arch = os.environ.get(a.arch_from_env, "unset") if a.arch_from_env else "emitter"
    ready = json.dumps({"load_s": a.ready_delay, "arch": arch, **({} if a.hide_ctx else {"n_ctx": a.n_ctx})})
    emit(("llama_model_load: done " if a.noise_prefix else "") + "BMOE_READY " + ready)
    if a.buffered_after_ready:
        out.flush()
        out = os.fdopen(os.dup(1), "w", buffering=65536, encoding="utf-8")
        flush_each = False

    interval = 1.0 / a.rate if a.rate > 0 else 0.0
    router = Router(a.route_layers, a.route_experts, a.route_k, a.route_slots, a.route_tiers) if a.route_layers \
        else None
    routes: list[tuple[str, float, int]] = []  # --route-cycle: (line after the step, hit %, misses)
    pace = {"lines": 0}  # progress lines so far (the first --warm are unpaced)

    def route_line(step: int) -> tuple[str, float, int]:
        assert router is not None
        if a.route_cycle and len(routes) >= a.route_cycle:
            tail, pct, misses = routes[(step - 1) % a.route_cycle]
            return '{"step": %d' % step + tail, pct, misses
        r = router.route(step)
        line = json.dumps(r)
        if a.route_cycle:
            routes.append((line[line.index(","):], router.hit_pct(), router.last_misses))
        return line, router.hit_pct(), router.last_misses

    def turn(rid, n: int, first_turn: bool, n_past: int) -> int:
        emit("BMOE_BEGIN " + json.dumps({"id": rid}))
        text = ""
        t_start = time.monotonic()
        done = 0
        for step in range(1, n + 1):
            if cancel.is_set():
                break
            pace["lines"] += 1
            if pace["lines"] <= a.warm:
                t_start = time.monotonic() - step * interval  # unpaced; the rate holds from the last one
            else:
                due = t_start + step * interval
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
            text += f"w{step} "
            if step % 7 == 1:
                emit("BMOE_LOAD " + json.dumps({"mb": 1.5, "ms": 2.0}))
            rec = {"step": step, "steps": n, "wall_ms": 10.0, "io_ms": 2.0, "compute_ms": 7.5,
                   "mgmt_ms": 0.5, "stall_ms": 0.0, "read_mb": 1.5 if step % 7 == 1 else 0.0,
                   "cache_hit_pct": 90.0, "t_emit": time.time(),
                   **({"delta_text": f"w{step} "} if a.delta_text else {"text": text})}
            if router is not None:
                line, pct, misses = route_line(step)
                emit("BMOE_ROUTE " + line)
                rec["cache_hit_pct"] = pct
                rec.update(io_ms=0.4 * misses, wall_ms=8.0 + 0.4 * misses, read_mb=0.5 * misses)
                if step % 8 == 0:
                    emit("BMOE_RESIDENT " + json.dumps(router.resident(step)))
            if first_turn and a.die_mid_line >= 0 and step > a.die_mid_line:
                with lock:
                    out.write('BMOE_PROGRESS {"step":%d,"steps":%d,"wall_' % (step, n))
                    out.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            emit("BMOE_PROGRESS " + json.dumps(rec))
            if first_turn and a.deep and step == 1:
                nest = "[" * a.deep + "]" * a.deep
                emit('BMOE_ROUTE {"step":1,"turn":0,"phase":"decode","experts":%s,"hit":%s}' % (nest, nest))
                emit('BMOE_FUTURE {"x":%s}' % nest)
                emit('BMOE_PROGRESS {"step":1,"steps":%d,"wall_ms":10.0,"deep":%s}' % (n, nest))
            done = step
        cancelled = cancel.is_set()
        cancel.clear()
        n_past += 4 + done
        emit("BMOE_DONE " + json.dumps({
            "id": rid, "cancelled": cancelled, "tokens": done, "tok_s": a.rate, "prefill_s": 0.01,
            "load_s": a.ready_delay, "cache_hit_pct": 90.0, "n_prompt": 4, "n_past": n_past,
            "cache_resident_mib": 10.0, "cache_budget_mib": 64.0, "spec_recall_pct": -1,
            "stall_s_tok": 0.0, "mgmt_s_tok": 0.0005, "text": text}))
        return n_past

    if a.auto:
        left, rid, n_past = a.auto, 1, 0
        while left > 0:
            n = min(a.turn_len, left)
            n_past = turn(rid, n, rid == 1, 0)
            left -= n
            rid += 1
        out.flush()
        if server is not None:
            server.close()
        return a.exit_code

    def stdin_reader() -> None:
        for raw in sys.stdin:
            raw = raw.strip()
            if not raw:
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                emit("BMOE_ERROR " + json.dumps({"id": None, "fatal": False, "msg": "bad JSON"}))
                continue
            on_request(obj)
        on_request({"cmd": "close"})

    threading.Thread(target=stdin_reader, daemon=True).start()
    first, n_past = True, 0
    while True:
        with req_cv:
            while not requests:
                req_cv.wait()
            req = requests.pop(0)
        cmd = req.get("cmd")
        if cmd == "close":
            break
        if cmd == "generate":
            rid = req.get("id")
            if "REJECT" in str(req.get("prompt", "")):
                emit("BMOE_ERROR " + json.dumps({"id": rid, "fatal": False, "msg": "prompt rejected"}))
                continue
            cancel.clear()
            n = int(req.get("n_predict") or a.n_predict)
            held = 4 + (0 if req.get("clear_kv", True) else n_past)
            if a.enforce_ctx and held + n > a.n_ctx:
                msg = f"prompt ({held} tokens in context) plus n_predict ({n}) exceeds n_ctx ({a.n_ctx})"
                emit("BMOE_ERROR " + json.dumps({"id": rid, "fatal": False, "msg": msg}))
                continue
            if req.get("clear_kv", True):
                n_past = 0
            n_past = turn(rid, n, first, n_past)
            first = False
    out.flush()
    if server is not None:
        server.close()
    return a.exit_code


if __name__ == "__main__":
    sys.exit(main())
