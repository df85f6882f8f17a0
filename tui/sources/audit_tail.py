"""Follow an audit log like ``tail -F`` in a thread (moe-cache-reference.md "Audit log").

:class:`AuditTail` reads ``path`` from its start and then every ``poll_s`` seconds:

* only complete lines count: a last line without its newline waits for the rest;
* rotation (the path now names another file: inode/device changed, or it was deleted and
  re-created) is detected: the old file is read to its end first, then the new one from its
  start, so no record is lost or repeated;
* truncation (the file got shorter than what was read, or its first line changed: truncated and
  refilled between two polls) restarts from the file's new start;
* a missing file is waited for (state ``waiting``);
* records go through :class:`bmoe_top.parsers.audit.AuditRuns`: several pids are told apart,
  a corrupt line is counted with its line number and skipped.

:class:`AuditState` is the plain-Python state (no Textual) the screen renders under ``lock``.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bmoe_top.parsers.audit import COUNTERS, AuditRecord, AuditRuns

__all__ = ["AuditState", "AuditTail"]

_CHUNK = 1 << 20


@dataclass
class AuditState:
    """What the audit attach screen shows. Read under ``lock``; ``version`` bumps on change.

    ``runs``: the records grouped by process run. ``timeline``: one entry per record, oldest
    first: ``(epoch seconds or None, pid, event, counters dict)`` for the counters-over-time
    view. ``status``: ``waiting`` (no file yet), ``ok``, ``error``; ``detail`` one line.
    ``n_rotations``/``n_truncations``: how often the file was replaced / cut.
    ``bad``: (file generation, line number, message) of corrupt lines (all counted in
    ``n_bad``; the newest 200 kept)."""

    path: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    version: int = 0
    status: str = "waiting"
    detail: str = ""
    runs: AuditRuns = field(default_factory=AuditRuns)
    timeline: list = field(default_factory=list)
    n_rotations: int = 0
    n_truncations: int = 0
    n_bad: int = 0
    bad: list = field(default_factory=list)
    generation: int = 0
    bytes_read: int = 0

    def summary(self) -> dict[str, Any]:
        """The numbers the screen shows, JSON-ready: per run its pid, model, status, counters,
        hit %, requests table, per-layer hit % and resident experts."""
        with self.lock:
            runs = []
            for run in self.runs.runs:
                c = run.counters()
                h, m = c.get("hits"), c.get("misses")
                load = run.load.data if run.load else {}
                model = load.get("model") if isinstance(load.get("model"), dict) else {}
                cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
                per_layer = {}
                for il, (lh, lhp, lm) in sorted(run.layer_hits().items()):
                    per_layer[str(il)] = None if lh + lm == 0 else 100.0 * lh / (lh + lm)
                runs.append({
                    "pid": run.pid,
                    "state": "exited" if run.exited else ("ready" if run.ready else "loading"),
                    "first_line": run.first_lineno,
                    "model": model.get("name") or model.get("path"),
                    "n_layer": model.get("n_layer"),
                    "cache_slots": cache.get("slots"), "cache_prefilled": cache.get("prefilled"),
                    "counters": c,
                    "hit_pct": None if h is None or m is None or h + m == 0 else 100.0 * h / (h + m),
                    "requests": [_req_row(r) for r in run.requests],
                    "layer_hit_pct": per_layer,
                    "resident": {str(k): v for k, v in sorted(run.resident().items())},
                    "perf": run.exit.data.get("perf") if run.exit else None,
                })
            status, detail = self.status, self.detail
            if status == "ok" and self.runs.n_records == 0 and self.n_bad:
                status = "malformed"
                detail = (f"no audit record in {self.n_bad} line{'s' if self.n_bad > 1 else ''}: "
                          "not an audit log (moe-cache-reference.md \"Audit log\")?")
            return {
                "path": self.path, "status": status, "detail": detail,
                "records": self.runs.n_records, "bad_lines": self.n_bad,
                "bad": [{"generation": g, "line": n, "error": m} for g, n, m in self.bad[-20:]],
                "rotations": self.n_rotations, "truncations": self.n_truncations,
                "pids": self.runs.pids(), "runs": runs,
            }


def _req_row(r: AuditRecord) -> dict[str, Any]:
    d = r.data
    hits, misses = d.get("req_hits"), d.get("req_misses")
    return {
        "line": r.lineno, "time": r.time, "slot": d.get("slot"), "task": d.get("task"),
        "n_prompt": d.get("n_prompt"), "n_gen": d.get("n_gen"),
        "t_prompt_ms": d.get("t_prompt_ms"), "t_gen_ms": d.get("t_gen_ms"),
        "gen_tok_s": (1000.0 * d["n_gen"] / d["t_gen_ms"]
                      if isinstance(d.get("n_gen"), int) and isinstance(d.get("t_gen_ms"), (int, float))
                      and d["t_gen_ms"] > 0 else None),
        "req_hits": hits, "req_hits_profile": d.get("req_hits_profile"), "req_misses": misses,
        "req_bytes_upload": d.get("req_bytes_upload"), "req_bytes_cpu": d.get("req_bytes_cpu"),
        "hit_pct": (100.0 * hits / (hits + misses) if isinstance(hits, int) and isinstance(misses, int)
                    and hits + misses > 0 else None),
    }


class AuditTail(threading.Thread):
    """Daemon thread following ``path`` into ``state`` every ``poll_s`` seconds.

    :meth:`poll_once` does one round synchronously (read to the current end, handle rotation
    and truncation) and returns the number of records added; the headless twin and tests use
    it directly without starting the thread."""

    def __init__(self, path: str | os.PathLike, state: AuditState | None = None, poll_s: float = 0.2):
        super().__init__(name="bmoe-audit-tail", daemon=True)
        self.path = os.fspath(path)
        self.state = state if state is not None else AuditState(path=self.path)
        if not self.state.path:
            self.state.path = self.path
        self.poll_s = poll_s
        self._stop_ev = threading.Event()
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._lineno = 0
        self._head = b""  # first complete line of the current file (truncate-and-refill check)

    def stop(self) -> None:
        self._stop_ev.set()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ------------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._set_status("error", f"cannot open {self.path}: {exc.strerror or exc}")
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            self._set_status("error", f"{self.path} is {kind}")
            return False
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        with self.state.lock:
            self.state.generation += 1
        return True

    def _read_available(self) -> int:
        """Read from the open file to its current end; returns records added."""
        added = 0
        assert self._fd is not None
        while True:
            chunk = os.pread(self._fd, _CHUNK, self._offset)
            if not chunk:
                break
            self._offset += len(chunk)
            with self.state.lock:
                self.state.bytes_read += len(chunk)
            data = self._partial + chunk
            end = data.rfind(b"\n")
            if end < 0:
                self._partial = data
                continue
            self._partial = data[end + 1:]
            added += self._feed(data[: end + 1].split(b"\n")[:-1])
            if len(chunk) < _CHUNK:
                break
        return added

    def _feed(self, lines: list[bytes]) -> int:
        added = 0
        st = self.state
        with st.lock:
            for line in lines:
                self._lineno += 1
                if self._lineno == 1:
                    self._head = line
                rec = st.runs.feed_line(line, self._lineno)
                if rec is not None:
                    added += 1
                    st.timeline.append((rec.ts, rec.pid, rec.event, {k: rec.counters.get(k) for k in COUNTERS}))
                elif line.strip():
                    st.n_bad += 1
                    ln, msg = st.runs.bad[-1]
                    st.bad.append((st.generation, ln, msg))
                    del st.bad[:-200]
            if added or lines:
                st.version += 1
        return added

    def _replaced_or_truncated(self) -> str | None:
        """``rotated``, ``truncated`` or ``None``, comparing the path and the open file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # deleted, not yet re-created: keep reading the old file
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != self._ident:
            return "rotated"
        size = os.fstat(self._fd).st_size
        if size < self._offset:
            return "truncated"
        if self._head:
            first = os.pread(self._fd, len(self._head) + 1, 0)
            if first != self._head + b"\n":
                return "truncated"
        return None

    def poll_once(self) -> int:
        """One round; returns the number of records added."""
        if self._fd is None:
            if not self._open():
                with self.state.lock:
                    if self.state.status != "error":
                        self.state.status, self.state.detail = "waiting", f"waiting for {self.path}"
                return 0
            self._set_status("ok", "")
        added = 0
        change = self._replaced_or_truncated()
        if change == "rotated":
            added += self._read_available()  # the old file's last records first
            if self._partial:
                self._count_partial_lost("rotation")
            self.close()
            with self.state.lock:
                self.state.n_rotations += 1
            if not self._open():
                return added
        elif change == "truncated":
            if self._partial:
                self._count_partial_lost("truncation")
            with self.state.lock:
                self.state.n_truncations += 1
                self.state.generation += 1
            self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        added += self._read_available()
        return added

    def _count_partial_lost(self, why: str) -> None:
        with self.state.lock:
            self.state.n_bad += 1
            self.state.bad.append((self.state.generation, self._lineno + 1,
                                   f"incomplete last line dropped at {why} ({len(self._partial)} bytes)"))
            self.state.version += 1
        self._partial = b""

    def _set_status(self, status: str, detail: str) -> None:
        with self.state.lock:
            if (self.state.status, self.state.detail) != (status, detail):
                self.state.status, self.state.detail = status, detail
                self.state.version += 1

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set():
                try:
                    self.poll_once()
                except OSError as exc:
                    self._set_status("error", f"{self.path}: {exc.strerror or exc}")
                    self.close()
                self._stop_ev.wait(self.poll_s)
        finally:
            self.close()


def read_to_end(path: str | os.PathLike) -> AuditState:
    """Read an audit file to its current end (complete lines only) and return the state
    (``status`` ``error`` with the reason when it cannot be read; never raises OSError)."""
    tail = AuditTail(path)
    try:
        tail.poll_once()
    except OSError as exc:
        tail._set_status("error", f"{tail.path}: {exc.strerror or exc}")
    finally:
        tail.close()
    return tail.state


# -- replay: an audit log or an STRP profile into the run model ---------------------------------
# (``bmoe-top replay FILE``: tui/sources/file_replay.py calls these for sniffed "audit"/"strp")

def load_audit_into_run(run, data: bytes, source: str = "") -> None:
    """Load a whole audit log (bytes) into a :class:`bmoe_top.tui.run.RunModel`.

    Each ``request`` record becomes a finished turn (``done``: tokens, tok_s, prefill_s,
    n_prompt, cache_hit_pct, read_mib of that request); the run summary comes from the newest
    run (its ``exit`` perf when it exited, else the sums of its requests); ``resident`` is the
    newest ``load``/``exit`` record's resident experts; corrupt lines are problems with their
    line numbers; every record is also one line in the log pane. There are no per-token rows in
    an audit log (the breakdown and trends say so)."""
    from bmoe_top.parsers.audit import AuditRuns, iter_records

    runs = AuditRuns()
    end = data.rfind(b"\n")
    body = data[: end + 1] if end >= 0 else data
    for i, line in enumerate(body.split(b"\n"), start=1):
        if line.strip():
            runs.feed_line(line, i)
    tail = data[end + 1:] if end >= 0 else b""
    with run.lock:
        run.sources.append(source)
        for ln, msg in runs.bad:
            run.add_problem(source, ln, "", msg)
        if tail.strip():
            run.add_problem(source, body.count(b"\n") + 1, tail[:120].decode("utf-8", "replace"),
                            "incomplete last line (no newline): left out")
        for rec in iter_records(runs):
            c = rec.counters
            run.log.append(f"{rec.time} pid {rec.pid} {rec.event}: hits {c.get('hits')} misses {c.get('misses')} "
                           f"read {c.get('bytes_upload')} B swaps {c.get('swaps')}")
        from bmoe_top.tui.run import Turn

        for r in runs.runs:
            for q in r.requests:
                d = q.data
                n, tg, tp = d.get("n_gen"), d.get("t_gen_ms"), d.get("t_prompt_ms")
                h, m, b = d.get("req_hits"), d.get("req_misses"), d.get("req_bytes_upload")
                done = {
                    "tokens": n, "n_prompt": d.get("n_prompt"),
                    "tok_s": 1000.0 * n / tg if isinstance(n, int) and isinstance(tg, (int, float)) and tg > 0 else None,
                    "prefill_s": tp / 1000.0 if isinstance(tp, (int, float)) else None,
                    "cache_hit_pct": 100.0 * h / (h + m) if isinstance(h, int) and isinstance(m, int) and h + m else None,
                    "read_mib": b / 1048576 if isinstance(b, int) else None,
                    "pid": r.pid, "task": d.get("task"), "slot": d.get("slot"), "time": q.time,
                }
                run.turns.append(Turn(index=len(run.turns), id=d.get("task"), first_token=run.tokens.n, done=done))
        last = runs.runs[-1] if runs.runs else None
        if last is not None:
            load = last.load.data if last.load else {}
            model = load.get("model") if isinstance(load.get("model"), dict) else {}
            params = load.get("params") if isinstance(load.get("params"), dict) else {}
            if model.get("path") or model.get("name"):
                run.meta["model"] = str(model.get("path") or model.get("name"))
            if isinstance(model.get("n_layer"), int):
                run.meta["n_layer"] = str(model["n_layer"])
            for k in ("moe_cache_mib", "n_ctx", "n_threads", "moe_cache_adaptive"):
                if k in params:
                    run.meta[k] = str(params[k])
            run.meta["audit_pids"] = ",".join(map(str, runs.pids()))
            run._apply_dims()
            if isinstance(load.get("load_ms"), (int, float)):
                run.summary["load_s"] = load["load_ms"] / 1000.0
            c = last.counters()
            h, m, b = c.get("hits"), c.get("misses"), c.get("bytes_upload")
            if h is not None and m is not None and h + m:
                run.summary["cache_hit_pct"] = 100.0 * h / (h + m)
            if b is not None:
                run.summary["read_mib"] = b / 1048576
            perf = last.exit.data.get("perf") if last.exit else None
            reqs = [q.data for q in last.requests]
            n_gen = perf.get("n_gen") if isinstance(perf, dict) else sum(int(q.get("n_gen") or 0) for q in reqs)
            t_gen = perf.get("t_gen_ms") if isinstance(perf, dict) else sum(float(q.get("t_gen_ms") or 0) for q in reqs)
            n_prompt = perf.get("n_prompt") if isinstance(perf, dict) else sum(int(q.get("n_prompt") or 0) for q in reqs)
            t_prompt = perf.get("t_prompt_ms") if isinstance(perf, dict) else sum(float(q.get("t_prompt_ms") or 0) for q in reqs)
            if n_gen:
                run.summary["tokens"] = float(n_gen)
                if t_gen:
                    run.summary["tok_s"] = 1000.0 * n_gen / t_gen
                    run.summary["s_per_tok"] = t_gen / 1000.0 / n_gen
                if b is not None:
                    run.summary["read_mib_per_tok"] = b / 1048576 / n_gen
            if n_prompt:
                run.summary["n_prompt"] = float(n_prompt)
                run.summary["prefill_s"] = (t_prompt or 0) / 1000.0
                if t_prompt:
                    run.summary["prefill_tps"] = 1000.0 * n_prompt / t_prompt
            res = last.resident()
            if res:
                n_layer = max(run.n_layer or 0, max(res) + 1)
                n_expert = run.n_expert or (1 + max((max(v) for v in res.values() if v), default=0))
                mat = np.zeros((n_layer, n_expert), dtype=bool)
                for il, ids in res.items():
                    ok = [e for e in ids if 0 <= e < n_expert]
                    mat[il, ok] = True
                run.n_layer, run.n_expert, run.resident = n_layer, n_expert, mat
            cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
            if isinstance(cache.get("bytes"), int):
                run.budget_mib = cache["bytes"] / 1048576
                run.summary["budget_mib"] = run.budget_mib
            run.status_detail = (f"audit log: {len(runs.runs)} run(s), pids {run.meta['audit_pids']}, "
                                 f"{sum(len(x.requests) for x in runs.runs)} requests")
        if run.status == "empty":
            run.status = "replay"
        run.touch()


def load_strp_into_run(run, data: bytes, source: str = "") -> None:
    """Load an STRP profile (bytes) into a :class:`bmoe_top.tui.run.RunModel`: dimensions, the
    experts the profile would put in the cache (``resident``: the first ``slots`` pairs, or all
    ranked pairs when slots is 0), ``expert_rank`` (int32 [n_layer, n_expert], 0 = hottest,
    -1 unranked: a layer x expert rank map for the views), and per layer the ranked experts,
    hottest first, in the log pane. A bad profile is one problem with the reason."""
    from bmoe_top.parsers.strp import StrpError, parse_strp

    with run.lock:
        run.sources.append(source)
        try:
            prof = parse_strp(data, source or "profile")
        except StrpError as exc:
            run.add_problem(source, 0, data[:24].hex(), str(exc))
            if run.status == "empty":
                run.status = "replay"
            run.touch()
            return
        run.n_layer = prof.n_layers
        run.n_expert = prof.n_expert
        run.meta.setdefault("n_layer", str(prof.n_layers))
        run.meta.setdefault("n_expert", str(prof.n_expert))
        run.meta["profile"] = source
        run.meta["profile_slots"] = str(prof.slots)
        run.meta["profile_ranked"] = str(prof.n_ranked)
        run.expert_rank = prof.rank_map()
        take = prof.pairs if not prof.slots else prof.pairs[: prof.slots]
        mat = np.zeros((prof.n_layers, prof.n_expert), dtype=bool)
        if len(take):
            mat[take[:, 0], take[:, 1]] = True
        run.resident = mat
        for w in prof.warnings:
            run.log.append(f"{source}: {w}")
        run.log.append(f"{source}: STRP v{prof.version}, {prof.n_layers} layers x {prof.n_expert} experts, "
                       f"{prof.n_ranked} ranked, made for {prof.slots} slots")
        for il, experts in sorted(prof.per_layer().items()):
            run.log.append(f"L{il}: " + " ".join(map(str, experts[:64])) + (" ..." if len(experts) > 64 else ""))
        run.status_detail = f"STRP profile: {prof.n_ranked} ranked experts, {prof.slots} slots"
        if run.status == "empty":
            run.status = "replay"
        run.touch()
