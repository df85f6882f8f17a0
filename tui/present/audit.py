"""What the audit attach screen shows, as data, from the run model alone (its ``audit_index`` and
``tail_health``, published by the feeds: docs/architecture.md "Source health"): the ``attach
--audit --once --json`` document, the selected process run's panel rows and the Requests table
rows (docs/metrics.md "Audit log")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.health import AuditIndex, AuditRunView, TailHealth
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.numbers import MISSING, count, fmt, safe_rows, show, sig, text_line
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.present.tables import Column, Row, SortKey, Table, number_key

__all__ = ["REQUEST_COLUMNS", "REQUEST_KEYS", "audit_document", "audit_run_rows", "request_row", "requests_table",
           "runs_index"]

#: The Requests table's columns: each number names its unit (and its scope: one request).
REQUEST_COLUMNS = ("pid", "task", "time", "prompt tok", "gen tok", q("request.tok_s").label,
                   f"{q('request.prompt_ms').label} ms", f"{q('request.gen_ms').label} ms",
                   f"{q('request.hit_pct').label} %", "hits", "misses", "from profile",
                   f"{q('request.read_mib').label} MiB")


def _run_doc(v: AuditRunView) -> dict[str, Any]:
    c = v.counters
    h, m = c.get("hits"), c.get("misses")
    return {
        "pid": v.pid, "state": v.state, "first_line": v.first_line, "model": v.model, "n_layer": v.n_layer,
        "cache_slots": v.cache_slots, "cache_prefilled": v.cache_prefilled,
        "counters": dict(c),
        "hit_pct": None if h is None or m is None or h + m == 0 else 100.0 * h / (h + m),
        "requests": [dict(r) for r in v.requests],
        "layer_hit_pct": {str(il): None if lh + lm == 0 else 100.0 * lh / (lh + lm)
                          for il, (lh, _lhp, lm) in sorted(v.layer_hits.items())},
        "resident": {str(k): list(x) for k, x in v.resident.items()},
        "perf": None if v.perf is None else dict(v.perf),
        "exact_sum": None if v.exact_sum is None else list(v.exact_sum),
    }


def audit_document(run: RunModel) -> dict[str, Any]:
    """``path``, ``status`` (``ok``; ``waiting`` when the file does not exist; ``malformed`` when
    it has lines but no audit record; ``error``) and ``detail``, ``records``, ``bad_lines`` (count)
    and ``bad`` (the newest 20: generation, line, error), ``rotations``, ``truncations``, ``pids``,
    ``runs`` (per process run: pid, state, model, counters, hit %, requests table, per-layer hit %,
    resident experts, perf, and ``exact_sum``: the reference's property, a list of problems that
    is empty when it holds, None before the run exited) and ``run`` (the run summary)."""
    with run.lock:
        tail = run.tail_health or TailHealth()
        idx = run.audit_index or AuditIndex()
        return {
            "path": tail.path, "status": run.status, "detail": run.status_detail,
            "records": idx.records, "bad_lines": idx.bad_lines,
            "bad": [{"generation": g, "line": n, "error": m} for g, n, m in idx.bad],
            "rotations": tail.rotations, "truncations": tail.truncations,
            "pids": list(idx.pids), "runs": [_run_doc(v) for v in idx.runs], "run": run_summary(run),
        }


def runs_index(n_runs: int, selected: int) -> int:
    """The index of the selected run (``selected`` -1 = newest; out of range = newest)."""
    i = selected if -n_runs <= selected < n_runs else -1
    return i % n_runs if n_runs else 0


def audit_run_rows(run: RunModel, selected: int) -> list[tuple[str, str, str]]:
    """The attach panel for the selected process run (``selected`` indexes the runs; -1 = newest):
    (label, value, kind) rows; kind ``section``, ``missing``, ``good``/``bad`` (the exact-sum check),
    or ``""``. The counters are the process run's since its load (the heading says so, and the
    labels another scope shares: ``hit (since load)``)."""
    out: list[tuple[str, str, str]] = []

    def sec(name: str) -> None:
        out.append((name, "", "section"))

    def row(label: str, value: Any) -> None:
        v = str(value)
        out.append((label, v, MISSING if v == MISSING else ""))

    with run.lock:
        idx = run.audit_index
    runs = idx.runs if idx is not None else ()
    if not runs:
        return [("run", "no records yet", MISSING)]
    i = runs_index(len(runs), selected)
    v = runs[i]
    c = v.counters
    prof = v.profile
    sec(f"run {i + 1}/{len(runs)}")
    row("pid", v.pid)
    row("state", v.state)
    row("model", v.model or MISSING)
    row("layers", v.n_layer if v.n_layer is not None else MISSING)
    row("cache slots", v.cache_slots if v.cache_slots is not None else MISSING)
    row("prefilled", v.cache_prefilled if v.cache_prefilled is not None else MISSING)
    cache = q("since_load.cache_bytes")
    row(cache.label, show(cache, v.cache_bytes))
    row("profile", (prof.get("error") or f"{prof.get('path')} ({prof.get('bytes')} B)") if prof is not None
        else "none")
    load = q("since_load.load_ms")
    row(load.label, show(load, v.load_ms))
    sec(f"counters {q('since_load.hit_pct').words()} (pid {v.pid})")
    h, m = c.get("hits"), c.get("misses")
    hit = q("since_load.hit_pct")
    row(hit.screen_label(), show(hit, 100.0 * h / (h + m)) if h is not None and m is not None and h + m > 0
        else MISSING)
    for k in ("hits", "hits_profile", "misses", "swaps"):
        row(k.replace("_", " "), count(c.get(k)))
    read = q("since_load.bytes_upload")
    row(read.screen_label(), show(read, c.get("bytes_upload")))
    reqs = q("since_load.requests")
    row(reqs.label, count(len(v.requests)))
    if v.perf is not None:
        for key in ("since_load.gen_tps", "since_load.prompt_tps"):
            qty = q(key)
            row(qty.screen_label(), show(qty, v.perf.get(qty.field)))
    if v.exact_sum is not None:
        out.append(("exact sum", "holds" if not v.exact_sum else "; ".join(v.exact_sum[:2]),
                    "good" if not v.exact_sum else "bad"))
    if v.layer_hits:
        layer = q("since_load.layer_hit_pct")
        sec(f"{layer.label} % (" + ("exit" if v.state == "exited" else "load") + ")")
        for il, (a, _p, b) in sorted(v.layer_hits.items()):
            row(f"L{il}", show(layer, 100.0 * a / (a + b)) if a + b else "no lookups")
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
    """One Requests-table row from a request turn's ``done`` (see ``AuditFeed``), each number at
    its catalogue precision (the header names the unit): counts thousands separated, tok/s, ms
    and MiB to 3 significant digits, hit % to one decimal, as the Turns tables and the panels
    show the same quantities."""
    h, m = done.get("req_hits"), done.get("req_misses")
    hp, b = done.get("req_hits_profile"), done.get("req_bytes_upload")
    tm = str(done.get("time") or "")
    return tuple(text_line(x) for x in (
        str(done.get("pid")), str(done.get("task", "")), tm[11:23] if len(tm) >= 23 else tm,
        count(done.get("n_prompt")), count(done.get("n_gen")),
        sig(done.get("tok_s")), sig(done.get("t_prompt_ms")), sig(done.get("t_gen_ms")),
        fmt(done.get("cache_hit_pct"), 1), count(h), count(m), count(hp),
        sig(b / 1048576) if isinstance(b, int) else MISSING,
    ))
