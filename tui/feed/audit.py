"""Audit-log records -> the run model (docs/metrics.md "Audit log"): one code path for a followed
file (``bmoe-top attach --audit``) and a replayed one (``bmoe-top replay a.jsonl``).

:class:`AuditFeed` takes complete lines, parses them (:mod:`bmoe_top.parsers.audit`) and writes:

* ``load``/``exit``: ``resident`` (bool ``[n_layer, n_expert]``, the record's resident experts),
  the dimensions (model fields, else the highest layer / expert id seen), ``meta`` (model,
  ``params`` of the newest ``load``);
* ``request``: a finished turn (``done``: ``tokens``, ``tok_s``, ``prefill_s``, ``cache_hit_pct``
  and ``read_mib`` of the request, ``pid``, ``task``, ``slot``, ``time``, the record's own
  ``n_prompt``, ``n_gen``, ``t_prompt_ms``, ``t_gen_ms``, ``req_*``) and one token row (the run's
  rows are requests): per generated token ``wall_ms`` (t_gen_ms / n_gen) and ``read_mib``,
  ``cache_hit_pct`` (the context counters since load), ``t``, ``turn``, ``pid``, ``n_gen``,
  ``t_gen_ms`` (beside ``n_gen``: the rows' tokens over their generation time), ``n_prompt``,
  ``prompt_ms``, ``tok_s``, ``req_hit_pct``;
* ``exit``: that pid's per-layer hits/misses since its ``load`` on its last request row (an audit
  log has per-layer counts only at load and exit);
* a bad line: a problem with its line number; every record: one log line.

It also keeps the records grouped by process run (``runs``) and the corrupt lines (``bad``), and
publishes them into the run model as a frozen :class:`~bmoe_top.tui.model.health.AuditIndex` (the
attach panel and the headless document read the model alone). :meth:`flush` refreshes the run
summary (the newest process run since its load: ``RunModel.summary_scope``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bmoe_top.parsers.audit import REQ_COUNTERS, AuditRecord, AuditRun, AuditRuns, check_exact_sum
from bmoe_top.parsers.prom import MIB
from bmoe_top.tui.model import RowUnit, RunModel, Status
from bmoe_top.tui.model.health import AuditIndex, AuditRunView
from bmoe_top.tui.model.quantities import Scope

__all__ = ["AuditFeed", "load_audit", "request_doc", "run_view"]

#: Corrupt lines kept in :attr:`AuditFeed.bad` (all are counted).
BAD_KEPT = 200
#: Corrupt lines the published index lists (the newest).
BAD_SHOWN = 20


class AuditFeed:
    """Audit lines -> ``run`` (see the module docstring). ``source`` names the file in problems."""

    def __init__(self, run: RunModel, source: str = "") -> None:
        self.run = run
        self.source = source
        self.runs = AuditRuns()
        self.n_bad = 0
        self.bad: list[tuple[int, int, str]] = []  # (file generation, line number, message)
        self._base: dict[int, dict[int, tuple[int, int]]] = {}  # pid -> layer -> (hits, misses) at load
        self._last_row: dict[int, int] = {}  # pid -> its newest request row
        # per process run (by its index in runs.runs): its request rows so far, what its view was
        # built from, and the view (a run that did not change keeps its view)
        self._views: list[tuple[list[dict[str, Any]], tuple[Any, ...], AuditRunView]] = []
        run.set_row_unit(RowUnit.REQUEST)
        run.set_summary_scope(Scope.SINCE_LOAD)
        if source:
            run.add_source(source)

    # -- lines ----------------------------------------------------------------------------------
    def feed_line(self, line: bytes, lineno: int, generation: int = 0) -> AuditRecord | None:
        """Parse one complete line (without its newline) and apply every record on it (records of
        concurrent writers may share a line); the last record, or None for a blank or a bad line.
        Each bad part and each capped size becomes a problem; a line without a record is counted."""
        n_bad, n_notes = len(self.runs.bad), len(self.runs.notes)
        recs = self.runs.feed(line, lineno)
        new_bad = self.runs.bad[n_bad:]
        src = self.source + (f" (file {generation})" if generation > 1 else "")
        for ln, msg in new_bad + self.runs.notes[n_notes:]:
            self.run.add_problem(src, ln, line[:200].decode("utf-8", "replace"), msg)
        if not recs:
            if new_bad:
                ln, msg = new_bad[-1]
                self.n_bad += 1
                self.bad.append((generation, ln, msg))
                del self.bad[:-BAD_KEPT]
            return None
        with self.run.lock:
            for rec in recs:
                self._apply(rec)
        return recs[-1]

    def feed_lines(self, lines: list[bytes], first_lineno: int, generation: int = 0) -> int:
        """Apply consecutive lines (line numbers from ``first_lineno``); returns records added.
        Refreshes the summary when any record was added."""
        added = 0
        with self.run.lock:
            for i, line in enumerate(lines):
                if self.feed_line(line, first_lineno + i, generation) is not None:
                    added += 1
            if added:
                self.flush()
            else:
                self.publish()
        return added

    def lost_partial(self, lineno: int, partial: bytes, why: str) -> None:
        """An incomplete last line was dropped (the file was rotated or cut before it ended)."""
        msg = f"incomplete last line dropped at {why} ({len(partial)} bytes)"
        self.n_bad += 1
        self.bad.append((0, lineno, msg))
        del self.bad[:-BAD_KEPT]
        self.run.add_problem(self.source, lineno, partial[:200].decode("utf-8", "replace"), msg)
        self.publish()

    def publish(self) -> None:
        """The process runs and the bad lines into the run model (``RunModel.audit_index``)."""
        runs = self.runs.runs
        views = self._views
        for i, r in enumerate(runs):
            key = (len(r.requests), r.load is not None, r.ready is not None, r.exit is not None)
            if i < len(views) and views[i][1] == key:
                continue
            rows = views[i][0] if i < len(views) else []
            rows.extend(request_doc(x) for x in r.requests[len(rows):])
            view = run_view(r, tuple(rows))
            if i < len(views):
                views[i] = (rows, key, view)
            else:
                views.append((rows, key, view))
        self.run.set_audit_index(AuditIndex(
            records=self.runs.n_records, bad_lines=self.n_bad, bad=tuple(self.bad[-BAD_SHOWN:]),
            pids=tuple(self.runs.pids()), runs=tuple(v for _rows, _key, v in views)))

    def status(self, tail_status: Status, detail: str) -> tuple[Status, str]:
        """The run's status from the follower's (``tail_status``): ``malformed`` when the file has
        lines but not one audit record."""
        if tail_status == Status.OK and self.runs.n_records == 0 and self.n_bad:
            s = "s" if self.n_bad > 1 else ""
            return Status.MALFORMED, (f"no audit record in {self.n_bad} line{s}: not an audit log "
                                      '(docs/metrics.md "Audit log")?')
        return tail_status, detail

    # -- records --------------------------------------------------------------------------------
    def _apply(self, rec: AuditRecord) -> None:
        c = rec.counters
        self.run.add_log(f"{rec.time} pid {rec.pid} {rec.event}: hits {c.get('hits')} misses {c.get('misses')} "
                         f"read {c.get('bytes_upload')} B swaps {c.get('swaps')}")
        if rec.event == "load":
            self._on_load(rec)
        if rec.event in ("load", "exit"):
            self._resident(rec)
        if rec.event == "exit":
            self._exit_layers(rec)
        elif rec.event == "request":
            self._request(rec)

    def _on_load(self, rec: AuditRecord) -> None:
        load = rec.data
        model = obj(load.get("model"))
        params = obj(load.get("params"))
        meta: dict[str, Any] = {}
        if model.get("path") or model.get("name"):
            meta["model"] = model.get("path") or model.get("name")
        for k in ("n_layer", "n_expert", "n_expert_used"):
            if isinstance(model.get(k), int):
                meta[k] = model[k]
        for k in ("moe_cache_mib", "n_ctx", "n_threads", "moe_cache_adaptive"):
            if k in params:
                meta[k] = params[k]
        self.run.update_meta(meta)
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
            run.set_dims(n_layer=n_layer)  # nothing resident and the expert count unknown: no map yet
            return
        n_expert = max(run.n_expert or 0, top + 1)
        mat = np.zeros((n_layer, n_expert), dtype=bool)
        for il, ids in res.items():
            mat[il, ids] = True
        run.set_resident(mat)
        run.update_meta({"resident_from": f"{rec.event} record of pid {rec.pid} (line {rec.lineno})"})

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
        n_raw, tg_raw, tp_raw = d.get("n_gen"), d.get("t_gen_ms"), d.get("t_prompt_ms")
        h, m, b_raw = d.get("req_hits"), d.get("req_misses"), d.get("req_bytes_upload")
        n = n_raw if isinstance(n_raw, int) and n_raw > 0 else None  # generated tokens to divide by
        tg = float(tg_raw) if isinstance(tg_raw, (int, float)) else None
        tp = float(tp_raw) if isinstance(tp_raw, (int, float)) else None
        b = b_raw if isinstance(b_raw, int) else None
        req_hit = 100.0 * h / (h + m) if isinstance(h, int) and isinstance(m, int) and h + m else None
        ch, cm = rec.counters.get("hits"), rec.counters.get("misses")
        tok_s = 1000.0 * n / tg if n is not None and tg is not None and tg > 0 else None
        done: dict[str, Any] = {
            "tokens": n_raw, "n_prompt": d.get("n_prompt"), "tok_s": tok_s,
            "prefill_s": tp / 1000.0 if tp is not None else None,
            "cache_hit_pct": req_hit, "read_mib": b / MIB if b is not None else None,
            "pid": rec.pid, "task": d.get("task"), "slot": d.get("slot"), "time": rec.time, "line": rec.lineno,
        }
        for k in ("n_gen", "t_prompt_ms", "t_gen_ms", *REQ_COUNTERS):
            done[k] = d.get(k)
        turn = run.begin_turn(id=d.get("task") if isinstance(d.get("task"), int) else None, done=done)
        i = run.add_token_row({
            "turn": turn.index, "t": rec.ts, "pid": rec.pid, "line": rec.lineno,
            "wall_ms": tg / n if n is not None and tg is not None else None,
            "read_mib": b / MIB / n if n is not None and b is not None else None,
            "cache_hit_pct": 100.0 * ch / (ch + cm) if ch is not None and cm is not None and ch + cm else None,
            "req_hit_pct": req_hit, "tok_s": tok_s, "n_gen": n_raw if isinstance(n_raw, int) else None,
            "t_gen_ms": tg if n is not None else None,
            "n_prompt": d.get("n_prompt") if isinstance(d.get("n_prompt"), int) else None,
            "prompt_ms": tp,
        })
        self._last_row[rec.pid] = i

    def flush(self) -> None:
        """Refresh the run summary (and the cache budget, ``meta["audit_pids"]``) from the newest
        process run: its ``exit`` perf, else the sums of its requests."""
        run = self.run
        with run.lock:
            last = self.runs.runs[-1] if self.runs.runs else None
            if last is None:
                return
            run.update_meta({"audit_pids": ",".join(map(str, self.runs.pids()))})
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

            def total(key: str) -> float:
                if perf is not None and isinstance(perf.get(key), (int, float)):
                    return float(perf[key])
                return float(sum(v for q in reqs if isinstance(v := q.get(key), (int, float))))

            n_gen, t_gen = total("n_gen"), total("t_gen_ms")
            n_prompt, t_prompt = total("n_prompt"), total("t_prompt_ms")
            if n_gen:
                summ["tokens"] = n_gen
                if t_gen:
                    summ["tok_s"] = 1000.0 * n_gen / t_gen
                    summ["s_per_tok"] = t_gen / 1000.0 / n_gen
                if b is not None:
                    summ["read_mib_per_tok"] = b / MIB / n_gen
            if n_prompt:
                summ["n_prompt"] = n_prompt
                summ["prefill_s"] = (t_prompt or 0) / 1000.0
                if t_prompt:
                    summ["prefill_tps"] = 1000.0 * n_prompt / t_prompt
            cache = obj(load.get("cache"))
            if isinstance(cache.get("bytes"), int):
                summ["budget_mib"] = cache["bytes"] / MIB
                run.set_cache_mib(budget_mib=summ["budget_mib"])
            run.update_summary(summ, replace=True)
            run.set_summary_scope(Scope.SINCE_LOAD, f"pid {last.pid}")
            self.publish()


def request_doc(r: AuditRecord) -> dict[str, Any]:
    """One ``request`` record as a row of the audit document: its line, time, slot, task, token
    counts and times, ``gen_tok_s`` (``1000 * n_gen / t_gen_ms``), the ``req_*`` counters and
    ``hit_pct`` (of the request's lookups)."""
    d = r.data
    hits, misses = d.get("req_hits"), d.get("req_misses")
    n, tg = d.get("n_gen"), d.get("t_gen_ms")
    return {
        "line": r.lineno, "time": r.time, "slot": d.get("slot"), "task": d.get("task"),
        "n_prompt": d.get("n_prompt"), "n_gen": n, "t_prompt_ms": d.get("t_prompt_ms"), "t_gen_ms": tg,
        "gen_tok_s": (1000.0 * n / tg if isinstance(n, int) and isinstance(tg, (int, float)) and tg > 0 else None),
        "req_hits": hits, "req_hits_profile": d.get("req_hits_profile"), "req_misses": misses,
        "req_bytes_upload": d.get("req_bytes_upload"), "req_bytes_cpu": d.get("req_bytes_cpu"),
        "hit_pct": (100.0 * hits / (hits + misses) if isinstance(hits, int) and isinstance(misses, int)
                    and hits + misses > 0 else None),
    }


def run_view(run: AuditRun, requests: tuple[dict[str, Any], ...]) -> AuditRunView:
    """One process run as the frozen view the run model keeps (``requests``: its rows)."""
    load = run.load.data if run.load else {}
    model = obj(load.get("model"))
    cache = obj(load.get("cache"))
    prof = load.get("profile")
    perf = run.exit.data.get("perf") if run.exit else None
    load_ms = load.get("load_ms")
    n_layer = model.get("n_layer")
    return AuditRunView(
        pid=run.pid, state="exited" if run.exit else ("ready" if run.ready else "loading"),
        first_line=run.first_lineno, model=model.get("name") or model.get("path"),
        n_layer=n_layer if isinstance(n_layer, int) else None,
        cache_slots=cache.get("slots"), cache_prefilled=cache.get("prefilled"),
        cache_bytes=cache["bytes"] if isinstance(cache.get("bytes"), int) else None,
        profile=dict(prof) if isinstance(prof, dict) else None,
        load_ms=float(load_ms) if isinstance(load_ms, (int, float)) else None,
        counters=run.counters(), layer_hits=run.layer_hits(),
        resident={k: tuple(v) for k, v in sorted(run.resident().items())},
        perf=dict(perf) if isinstance(perf, dict) else None,
        exact_sum=tuple(check_exact_sum(run)) if run.exit is not None and run.ready is not None else None,
        requests=requests)


def obj(v: Any) -> dict[str, Any]:
    """``v`` when it is a JSON object, else an empty one (a field an audit record may lack)."""
    return v if isinstance(v, dict) else {}


def _layer_counts(rec: AuditRecord) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for lay in rec.layers():
        if isinstance(lay, dict) and isinstance(lay.get("il"), int) and lay["il"] >= 0:
            h, m = lay.get("hits"), lay.get("misses")
            if isinstance(h, int) and isinstance(m, int):
                out[lay["il"]] = (h, m)
    return out


def load_audit(run: RunModel, data: bytes, source: str = "") -> AuditFeed:
    """A whole audit log (bytes) into ``run`` through :class:`AuditFeed`, the path the followed
    file takes: an incomplete last line (no newline) is a problem, the rest as described above."""
    feed = AuditFeed(run, source)
    end = data.rfind(b"\n")
    body = data[: end + 1] if end >= 0 else data + b"\n"  # one line without newline: a whole file
    tail = data[end + 1:] if end >= 0 else b""
    with run.lock:
        feed.feed_lines(body.split(b"\n")[:-1], 1)
        if tail.strip():
            run.add_problem(source, body.count(b"\n") + 1, tail[:120].decode("utf-8", "replace"),
                            "incomplete last line (no newline): left out")
        feed.flush()
        runs = feed.runs
        detail = ""
        if runs.runs:
            detail = (f"audit log: {len(runs.runs)} run(s), pids {run.meta['audit_pids']}, "
                      f"{sum(len(x.requests) for x in runs.runs)} requests")
        run.set_status(Status.REPLAY if run.status == Status.EMPTY else run.status, detail or run.status_detail)
    return feed
