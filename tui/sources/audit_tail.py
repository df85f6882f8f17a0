"""Follow an audit log like ``tail -F`` in a thread (moe-cache-reference.md "Audit log").

:class:`AuditTail` reads ``path`` from its start and then every ``poll_s`` seconds:

* only complete lines count: a last line without its newline waits for the rest;
* rotation (the path now names another file: inode/device changed, or it was deleted and
  re-created) is detected: the old file is read to its end first, then the new one from its
  start, so no record is lost or repeated;
* truncation (the file got shorter than what was read, or its first line changed: truncated and
  refilled between two polls) restarts from the file's new start;
* a missing file is waited for (state ``waiting``);
* records go through :class:`AuditIngest`, the one code path (shared with
  :func:`load_audit_into_run`, ``bmoe-top replay a.jsonl``) that feeds the
  :class:`~bmoe_top.tui.run.RunModel` every view renders from: several pids are told apart
  (``pid`` in each turn and row), a corrupt line is a run-model problem with its line number
  and its neighbours still count.

:class:`AuditState` holds the tail's own bookkeeping (rotations, truncations, corrupt lines,
the records grouped by process run for the exact-sum check) next to the run model. No Textual.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any

import numpy as np

from bmoe_top.parsers.audit import REQ_COUNTERS, AuditRecord, AuditRuns
from bmoe_top.parsers.prom import MIB
from bmoe_top.tui.run import RunBackedState, RunModel, Turn, run_summary

__all__ = ["AuditIngest", "AuditState", "AuditTail", "audit_status", "load_audit_into_run", "read_to_end"]

_CHUNK = 1 << 20


class AuditIngest:
    """Audit records -> a :class:`RunModel` (moe-cache-reference.md "Audit log").

    * ``load``/``exit``: ``run.resident`` (bool ``[n_layer, n_expert]``: the record's resident
      experts), ``n_layer``/``n_expert`` (model fields, else the highest layer / expert id
      seen), ``meta`` (model, ``params`` of the newest ``load``);
    * ``request``: a finished :class:`~bmoe_top.tui.run.Turn` (``done``: ``tokens``,
      ``tok_s``, ``prefill_s``, ``cache_hit_pct`` and ``read_mib`` of the request, ``pid``,
      ``task``, ``slot``, ``time``, and the record's own numbers ``n_prompt``, ``n_gen``,
      ``t_prompt_ms``, ``t_gen_ms``, ``req_*``) and one row of ``run.tokens``
      (``run.row_unit == "request"``): per generated token ``wall_ms`` (t_gen_ms / n_gen) and
      ``read_mib``, ``cache_hit_pct`` (the context counters since load), ``t`` (record time,
      unix s), and ``turn``, ``pid``, ``n_gen``, ``n_prompt``, ``prompt_ms``, ``tok_s``,
      ``req_hit_pct``;
    * ``exit``: the per-layer hits/misses since that pid's ``load`` (its ``layers`` minus the
      load's) go to the heatmap on the run's last request row (an audit log has per-layer
      counts only at load and exit);
    * a bad line: ``run.add_problem`` with its line number; every record: one log line.

    :meth:`flush` refreshes ``run.summary`` from the newest run (its ``exit`` perf, else the
    sums of its requests); call it after a batch of lines.
    """

    def __init__(self, run: RunModel | None = None, source: str = "") -> None:
        self.run = run if run is not None else RunModel()
        self.source = source
        self.runs = AuditRuns()
        self._base: dict[int, dict[int, tuple[int, int]]] = {}  # pid -> layer -> (hits, misses) at load
        self._last_row: dict[int, int] = {}  # pid -> its newest request row
        with self.run.lock:
            self.run.row_unit = "request"
            if source:
                self.run.sources.append(source)

    def feed_line(self, line: bytes, lineno: int, generation: int = 0) -> AuditRecord | None:
        """Parse one complete line (without its newline) and apply every record on it; the last
        record, or ``None`` for a blank or bad line (a bad part or a capped size becomes a problem)."""
        n_bad, n_notes = len(self.runs.bad), len(self.runs.notes)
        recs = self.runs.feed(line, lineno)  # records of concurrent writers may share a line
        src = self.source + (f" (file {generation})" if generation > 1 else "")
        for ln, msg in self.runs.bad[n_bad:] + self.runs.notes[n_notes:]:
            self.run.add_problem(src, ln, line[:200].decode("utf-8", "replace"), msg)
        if not recs:
            return None
        with self.run.lock:
            for rec in recs:
                self._apply(rec)
        return recs[-1]

    def _apply(self, rec: AuditRecord) -> None:
        run = self.run
        c = rec.counters
        run.log.append(f"{rec.time} pid {rec.pid} {rec.event}: hits {c.get('hits')} misses {c.get('misses')} "
                       f"read {c.get('bytes_upload')} B swaps {c.get('swaps')}")
        if rec.event == "load":
            self._on_load(rec)
        if rec.event in ("load", "exit"):
            self._resident(rec)
        if rec.event == "exit":
            self._exit_layers(rec)
        elif rec.event == "request":
            self._request(rec)
        run.touch()

    def _on_load(self, rec: AuditRecord) -> None:
        run, load = self.run, rec.data
        model = load.get("model") if isinstance(load.get("model"), dict) else {}
        params = load.get("params") if isinstance(load.get("params"), dict) else {}
        if model.get("path") or model.get("name"):
            run.meta["model"] = str(model.get("path") or model.get("name"))
        for k in ("n_layer", "n_expert", "n_expert_used"):
            if isinstance(model.get(k), int):
                run.meta[k] = str(model[k])
        for k in ("moe_cache_mib", "n_ctx", "n_threads", "moe_cache_adaptive"):
            if k in params:
                run.meta[k] = str(params[k])
        run._apply_dims()
        self._base[rec.pid] = _layer_counts(rec)
        self._last_row.pop(rec.pid, None)

    def _resident(self, rec: AuditRecord) -> None:
        run = self.run
        res: dict[int, list[int]] = {}
        for lay in rec.layers():
            if isinstance(lay, dict) and isinstance(lay.get("il"), int) and lay["il"] >= 0:
                ids = lay.get("resident")
                res[lay["il"]] = [int(e) for e in ids if isinstance(e, int) and e >= 0] if isinstance(ids, list) else []
        if not res:
            return
        n_layer = max(run.n_layer or 0, max(res) + 1)
        top = max((max(v) for v in res.values() if v), default=-1)
        if top < 0 and run.n_expert is None:
            run.n_layer = n_layer  # nothing resident and the expert count unknown: no map yet
            return
        n_expert = max(run.n_expert or 0, top + 1)
        mat = np.zeros((n_layer, n_expert), dtype=bool)
        for il, ids in res.items():
            mat[il, ids] = True
        run.n_layer, run.n_expert, run.resident = n_layer, n_expert, mat
        run.meta["resident_from"] = f"{rec.event} record of pid {rec.pid} (line {rec.lineno})"

    def _exit_layers(self, rec: AuditRecord) -> None:
        row = self._last_row.get(rec.pid)
        now = _layer_counts(rec)
        base = self._base.get(rec.pid, {})
        if row is None or not now:
            return
        n = max(now) + 1
        hits, misses = np.full(n, np.nan), np.full(n, np.nan)
        for il, (h, m) in now.items():
            h0, m0 = base.get(il, (0, 0))
            if h >= h0 and m >= m0:
                hits[il], misses[il] = h - h0, m - m0
        self.run.add_layer_counts(row, hits, misses)

    def _request(self, rec: AuditRecord) -> None:
        run, d = self.run, rec.data
        n, tg, tp = d.get("n_gen"), d.get("t_gen_ms"), d.get("t_prompt_ms")
        h, m, b = d.get("req_hits"), d.get("req_misses"), d.get("req_bytes_upload")
        n_ok = isinstance(n, int) and n > 0
        tg_ok = isinstance(tg, (int, float)) and tg > 0
        req_hit = 100.0 * h / (h + m) if isinstance(h, int) and isinstance(m, int) and h + m else None
        ch, cm = rec.counters.get("hits"), rec.counters.get("misses")
        tok_s = 1000.0 * n / tg if n_ok and tg_ok else None
        done = {
            "tokens": n, "n_prompt": d.get("n_prompt"), "tok_s": tok_s,
            "prefill_s": tp / 1000.0 if isinstance(tp, (int, float)) else None,
            "cache_hit_pct": req_hit, "read_mib": b / MIB if isinstance(b, int) else None,
            "pid": rec.pid, "task": d.get("task"), "slot": d.get("slot"), "time": rec.time, "line": rec.lineno,
        }
        for k in ("n_gen", "t_prompt_ms", "t_gen_ms", *REQ_COUNTERS):
            done[k] = d.get(k)
        turn = Turn(index=len(run.turns), id=d.get("task"), first_token=run.tokens.n, done=done)
        run.turns.append(turn)
        i = run.tokens.append({
            "turn": turn.index, "t": rec.ts, "pid": rec.pid, "line": rec.lineno,
            "wall_ms": tg / n if n_ok and isinstance(tg, (int, float)) else None,
            "read_mib": b / MIB / n if n_ok and isinstance(b, int) else None,
            "cache_hit_pct": 100.0 * ch / (ch + cm) if ch is not None and cm is not None and ch + cm else None,
            "req_hit_pct": req_hit, "tok_s": tok_s, "n_gen": n if isinstance(n, int) else None,
            "n_prompt": d.get("n_prompt") if isinstance(d.get("n_prompt"), int) else None,
            "prompt_ms": tp if isinstance(tp, (int, float)) else None,
        })
        self._last_row[rec.pid] = i

    def flush(self) -> None:
        """Refresh ``run.summary`` (and ``budget_mib``, ``meta["audit_pids"]``) from the newest run."""
        run = self.run
        with run.lock:
            last = self.runs.runs[-1] if self.runs.runs else None
            if last is None:
                return
            run.meta["audit_pids"] = ",".join(map(str, self.runs.pids()))
            load = last.load.data if last.load else {}
            summ: dict[str, float] = {}
            if isinstance(load.get("load_ms"), (int, float)):
                summ["load_s"] = load["load_ms"] / 1000.0
            c = last.counters()
            h, m, b = c.get("hits"), c.get("misses"), c.get("bytes_upload")
            if h is not None and m is not None and h + m:
                summ["cache_hit_pct"] = 100.0 * h / (h + m)
            if b is not None:
                summ["read_mib"] = b / MIB
            perf = last.exit.data.get("perf") if last.exit else None
            perf = perf if isinstance(perf, dict) else None
            reqs = [q.data for q in last.requests]

            def total(key: str, cast) -> float:
                if perf is not None and isinstance(perf.get(key), (int, float)):
                    return perf[key]
                return sum(cast(q.get(key) or 0) for q in reqs)

            n_gen, t_gen = total("n_gen", int), total("t_gen_ms", float)
            n_prompt, t_prompt = total("n_prompt", int), total("t_prompt_ms", float)
            if n_gen:
                summ["tokens"] = float(n_gen)
                if t_gen:
                    summ["tok_s"] = 1000.0 * n_gen / t_gen
                    summ["s_per_tok"] = t_gen / 1000.0 / n_gen
                if b is not None:
                    summ["read_mib_per_tok"] = b / MIB / n_gen
            if n_prompt:
                summ["n_prompt"] = float(n_prompt)
                summ["prefill_s"] = (t_prompt or 0) / 1000.0
                if t_prompt:
                    summ["prefill_tps"] = 1000.0 * n_prompt / t_prompt
            cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
            if isinstance(cache.get("bytes"), int):
                run.budget_mib = cache["bytes"] / MIB
                summ["budget_mib"] = run.budget_mib
            run.summary.clear()
            run.summary.update(summ)
            run.touch()


def _layer_counts(rec: AuditRecord) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for lay in rec.layers():
        if isinstance(lay, dict) and isinstance(lay.get("il"), int) and lay["il"] >= 0:
            h, m = lay.get("hits"), lay.get("misses")
            if isinstance(h, int) and isinstance(m, int):
                out[lay["il"]] = (h, m)
    return out


class AuditState(RunBackedState):
    """A followed audit file: the tail's bookkeeping next to the run model it feeds.

    ``ingest``: the :class:`AuditIngest` (``run``: the run model; ``runs``: the records grouped
    by process run). ``status`` / ``detail`` read and write ``run.status`` /
    ``run.status_detail``: ``waiting`` (no file yet), ``ok``, ``error``, with a one-line
    reason. ``n_rotations``/``n_truncations``: how often the file was replaced / cut.
    ``bad``: (file generation, line number, message) of corrupt lines (all counted in
    ``n_bad``; the newest 200 kept). ``lock``/``version``: the run model's."""

    def __init__(self, path: str = "", run: RunModel | None = None) -> None:
        self.path = path
        self.ingest = AuditIngest(run, source=f"audit: {path}" if path else "audit")
        self.n_rotations = 0
        self.n_truncations = 0
        self.n_bad = 0
        self.bad: list[tuple[int, int, str]] = []
        self.generation = 0
        self.bytes_read = 0
        self.set_status("waiting", "")

    @property
    def run(self) -> RunModel:
        return self.ingest.run

    @property
    def runs(self) -> AuditRuns:
        return self.ingest.runs

    def summary(self) -> dict[str, Any]:
        """The numbers the screen shows, JSON-ready: ``run`` (:func:`run_summary` of the run
        model) plus per audit run its pid, model, status, counters, hit %, requests table,
        per-layer hit % and resident experts."""
        with self.lock:
            runs = []
            for run in self.runs.runs:
                c = run.counters()
                h, m = c.get("hits"), c.get("misses")
                load = run.load.data if run.load else {}
                model = load.get("model") if isinstance(load.get("model"), dict) else {}
                cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
                per_layer = {}
                for il, (lh, _lhp, lm) in sorted(run.layer_hits().items()):
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
            status, detail = audit_status(self)
            return {
                "path": self.path, "status": status, "detail": detail,
                "records": self.runs.n_records, "bad_lines": self.n_bad,
                "bad": [{"generation": g, "line": n, "error": m} for g, n, m in self.bad[-20:]],
                "rotations": self.n_rotations, "truncations": self.n_truncations,
                "pids": self.runs.pids(), "runs": runs, "run": run_summary(self.run),
            }


def audit_status(state: AuditState) -> tuple[str, str]:
    """(status, detail) the screen and the headless twin show: ``malformed`` when the file
    has lines but not one audit record."""
    with state.lock:
        status, detail = state.status, state.detail
        if status == "ok" and state.runs.n_records == 0 and state.n_bad:
            status = "malformed"
            detail = (f"no audit record in {state.n_bad} line{'s' if state.n_bad > 1 else ''}: "
                      "not an audit log (moe-cache-reference.md \"Audit log\")?")
        return status, detail


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

    def __init__(self, path: str | os.PathLike, state: AuditState | None = None, poll_s: float = 0.2,
                 run: RunModel | None = None):
        super().__init__(name="bmoe-audit-tail", daemon=True)
        self.path = os.fspath(path)
        self.state = state if state is not None else AuditState(path=self.path, run=run)
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
                rec = st.ingest.feed_line(line, self._lineno, st.generation)
                if rec is not None:
                    added += 1
                elif line.strip():
                    st.n_bad += 1
                    ln, msg = st.runs.bad[-1]
                    st.bad.append((st.generation, ln, msg))
                    del st.bad[:-200]
            if added:
                st.ingest.flush()
            if lines:
                st.run.touch()
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
                        self.state.set_status("waiting", f"waiting for {self.path}")
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
        msg = f"incomplete last line dropped at {why} ({len(self._partial)} bytes)"
        with self.state.lock:
            self.state.n_bad += 1
            self.state.bad.append((self.state.generation, self._lineno + 1, msg))
            self.state.run.add_problem(self.state.ingest.source, self._lineno + 1,
                                       self._partial[:200].decode("utf-8", "replace"), msg)
        self._partial = b""

    def _set_status(self, status: str, detail: str) -> None:
        self.state.set_status(status, detail)

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
    """Load a whole audit log (bytes) into a :class:`bmoe_top.tui.run.RunModel` through
    :class:`AuditIngest`, the same code path the live tail uses: each ``request`` is a finished
    turn and a token row (``run.row_unit == "request"``), ``resident`` comes from the newest
    ``load``/``exit`` record, the per-layer counts of each ``exit`` feed the heatmap, the summary
    comes from the newest run, corrupt lines are problems with their line numbers, and every
    record is one line in the log pane. An incomplete last line (no newline) is a problem too."""
    ingest = AuditIngest(run, source)
    end = data.rfind(b"\n")
    body = data[: end + 1] if end >= 0 else data + b"\n"  # one line without newline: a whole file
    tail = data[end + 1:] if end >= 0 else b""
    with run.lock:
        for i, line in enumerate(body.split(b"\n")[:-1], start=1):
            ingest.feed_line(line, i)
        if tail.strip():
            run.add_problem(source, body.count(b"\n") + 1, tail[:120].decode("utf-8", "replace"),
                            "incomplete last line (no newline): left out")
        ingest.flush()
        runs = ingest.runs
        if runs.runs:
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
