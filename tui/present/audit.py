"""What the audit attach screen shows, as data: the ``attach --audit --once --json`` document,
the selected process run's panel rows and the Requests table rows (docs/metrics.md "Audit log")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bmoe_top.parsers.audit import AuditRecord, AuditRun, check_exact_sum
from bmoe_top.tui.feed.audit import obj
from bmoe_top.tui.feed.bind import TailBinding
from bmoe_top.tui.present.numbers import MISSING, fmt, safe_rows, text_line
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.present.tables import Column, Row, SortKey, Table, number_key

__all__ = ["REQUEST_COLUMNS", "REQUEST_KEYS", "audit_document", "audit_run_rows", "request_row", "requests_table",
           "runs_index"]

REQUEST_COLUMNS = ("pid", "task", "time", "n_prompt", "n_gen", "gen tok/s", "prompt ms", "gen ms",
                   "hit %", "hits", "misses", "from profile", "read MiB")


def _req_row(r: AuditRecord) -> dict[str, Any]:
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


def _run_doc(run: AuditRun) -> dict[str, Any]:
    c = run.counters()
    h, m = c.get("hits"), c.get("misses")
    load = run.load.data if run.load else {}
    model = obj(load.get("model"))
    cache = obj(load.get("cache"))
    per_layer = {str(il): None if lh + lm == 0 else 100.0 * lh / (lh + lm)
                 for il, (lh, _lhp, lm) in sorted(run.layer_hits().items())}
    return {
        "pid": run.pid,
        "state": "exited" if run.exit else ("ready" if run.ready else "loading"),
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
        "exact_sum": check_exact_sum(run) if run.exit is not None and run.ready is not None else None,
    }


def audit_document(binding: TailBinding) -> dict[str, Any]:
    """``path``, ``status`` (``ok``; ``waiting`` when the file does not exist; ``malformed`` when
    it has lines but no audit record; ``error``) and ``detail``, ``records``, ``bad_lines`` (count)
    and ``bad`` (the newest 20: generation, line, error), ``rotations``, ``truncations``, ``pids``,
    ``runs`` (per process run: pid, state, model, counters, hit %, requests table, per-layer hit %,
    resident experts, perf, and ``exact_sum``: the reference's property, a list of problems that
    is empty when it holds, None before the run exited) and ``run`` (the run summary)."""
    tail, feed, run = binding.tail, binding.feed, binding.run
    with run.lock, tail.lock:
        return {
            "path": tail.path, "status": run.status, "detail": run.status_detail,
            "records": feed.runs.n_records, "bad_lines": feed.n_bad,
            "bad": [{"generation": g, "line": n, "error": m} for g, n, m in feed.bad[-20:]],
            "rotations": tail.n_rotations, "truncations": tail.n_truncations,
            "pids": feed.runs.pids(), "runs": [_run_doc(r) for r in feed.runs.runs], "run": run_summary(run),
        }


def runs_index(n_runs: int, selected: int) -> int:
    """The index of the selected run (``selected`` -1 = newest; out of range = newest)."""
    i = selected if -n_runs <= selected < n_runs else -1
    return i % n_runs if n_runs else 0


def audit_run_rows(binding: TailBinding, selected: int) -> list[tuple[str, str, str]]:
    """The attach panel for the selected process run (``selected`` indexes the runs; -1 = newest):
    (label, value, kind) rows; kind ``section``, ``missing``, ``good``/``bad`` (the exact-sum check),
    or ``""``."""
    out: list[tuple[str, str, str]] = []

    def sec(name: str) -> None:
        out.append((name, "", "section"))

    def row(label: str, value: Any) -> None:
        v = str(value)
        out.append((label, v, MISSING if v == MISSING else ""))

    with binding.run.lock:
        runs = binding.feed.runs.runs
        if not runs:
            return [("run", "no records yet", MISSING)]
        idx = runs_index(len(runs), selected)
        run = runs[idx]
        load = run.load.data if run.load else {}
        model = obj(load.get("model"))
        cache = obj(load.get("cache"))
        prof = load.get("profile")
        c = run.counters()
        lh = run.layer_hits()
        exact = check_exact_sum(run) if run.exit is not None and run.ready is not None else None
        perf = run.exit.data.get("perf") if run.exit else None
        n_runs, n_requests = len(runs), len(run.requests)
    sec(f"run {idx + 1}/{n_runs}")
    row("pid", run.pid)
    row("state", "exited" if run.exit else ("ready" if run.ready else "loading"))
    row("model", model.get("name") or model.get("path") or MISSING)
    row("layers", model.get("n_layer", MISSING))
    row("cache slots", cache.get("slots", MISSING))
    row("prefilled", cache.get("prefilled", MISSING))
    row("cache", fmt(cache["bytes"] / 1048576, 1, "MiB") if isinstance(cache.get("bytes"), int) else MISSING)
    row("profile", (prof.get("error") or f"{prof.get('path')} ({prof.get('bytes')} B)") if isinstance(prof, dict)
        else "none")
    row("load", fmt(load.get("load_ms"), 0, "ms") if load else MISSING)
    sec("counters since load")
    h, m = c.get("hits"), c.get("misses")
    row("hit %", fmt(100.0 * h / (h + m), 1, "%") if h is not None and m is not None and h + m > 0 else MISSING)
    for k in ("hits", "hits_profile", "misses", "swaps"):
        row(k.replace("_", " "), fmt(c.get(k), 0))
    up = c.get("bytes_upload")
    row("read", fmt(up / 1048576, 1, "MiB") if up is not None else MISSING)
    row("requests", n_requests)
    if isinstance(perf, Mapping):
        row("gen tok/s", fmt(perf.get("gen_tps"), 1))
        row("prompt tok/s", fmt(perf.get("prompt_tps"), 1))
    if exact is not None:
        out.append(("exact sum", "holds" if not exact else "; ".join(exact[:2]), "good" if not exact else "bad"))
    if lh:
        sec("layer hit % (" + ("exit" if run.exit else "load") + ")")
        for il, (a, _p, b) in sorted(lh.items()):
            row(f"L{il}", fmt(100.0 * a / (a + b), 1, "%") if a + b else "no lookups")
    return safe_rows(out)


#: The Requests table's column keys (kept sorts name them), beside :data:`REQUEST_COLUMNS`, and the
#: field of a request's ``done`` each sorts by (None: its text).
REQUEST_KEYS = ("pid", "task", "time", "n_prompt", "n_gen", "tok_s", "t_prompt_ms", "t_gen_ms", "cache_hit_pct",
                "req_hits", "req_misses", "req_hits_profile", "read_mib")


def requests_table(dones: Sequence[Mapping[str, Any]]) -> Table:
    """The Requests tab as a sortable table: one row per request (:func:`request_row`'s cells),
    each number sorted as a number, absent values last."""
    rows = []
    for d in dones:
        cells = request_row(d)
        keys: list[SortKey] = []
        for key, cell in zip(REQUEST_KEYS, cells):
            v = d.get("req_bytes_upload") if key == "read_mib" else d.get(key)
            keys.append(cell if key in ("task", "time") else number_key(v if isinstance(v, (int, float)) else None))
        rows.append(Row(cells, tuple(keys)))
    columns = tuple(Column(key, label, numeric=key not in ("task", "time"))
                    for key, label in zip(REQUEST_KEYS, REQUEST_COLUMNS))
    return Table("requests", columns, tuple(rows))


def request_row(done: Mapping[str, Any]) -> tuple[str, ...]:
    """One Requests-table row from a request turn's ``done`` (see ``AuditFeed``)."""
    h, m = done.get("req_hits"), done.get("req_misses")
    hp, b = done.get("req_hits_profile"), done.get("req_bytes_upload")
    n = done.get("n_gen")
    tm = str(done.get("time") or "")
    return tuple(text_line(x) for x in (
        str(done.get("pid")), str(done.get("task", "")), tm[11:23] if len(tm) >= 23 else tm,
        str(done.get("n_prompt", MISSING)), str(n if n is not None else MISSING),
        fmt(done.get("tok_s"), 1), fmt(done.get("t_prompt_ms"), 1), fmt(done.get("t_gen_ms"), 1),
        fmt(done.get("cache_hit_pct"), 1), fmt(h, 0), fmt(m, 0), fmt(hp, 0),
        fmt(b / 1048576, 2) if isinstance(b, int) else MISSING,
    ))
