"""Headless twins of the two network attach screens, for scripts and CI
(``bmoe-top attach --metrics URL --once --json`` / ``bmoe-top attach --audit FILE --once --json``).

Both return a JSON-ready dict holding the numbers the screen shows (``None`` = not exported / no
value, never 0), and never raise for network, HTTP or format trouble: ``status`` says what went
wrong. They drive the same sources as the screens, which feed the same run model: ``run`` is
:func:`bmoe_top.tui.run.run_summary` of it (what the run panel shows), the other keys are the
attach-specific fields (the status line and the attach panel). No Textual import.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

from bmoe_top.parsers.audit import check_exact_sum
from bmoe_top.tui.sources.audit_tail import read_to_end
from bmoe_top.tui.sources.metrics_poll import MetricsPoller

__all__ = ["metrics_once", "audit_once", "to_json", "exit_code"]


def metrics_once(url: str, api_key: str | None = None, timeout: float = 5.0, interval: float = 0.0) -> dict[str, Any]:
    """One scrape of ``url`` (``interval`` > 0: two scrapes that far apart, so rates are filled).

    Keys: ``url``, ``status`` (``ok``/``unreachable``/``unauthorized``/``malformed``), ``detail``,
    ``http_status``, ``totals`` (every exported series by key, ``hit_pct`` since start,
    ``layer_hit_pct`` list), ``rates`` (``None`` after one scrape; else the newest interval row
    of the run model: tok/s, hit %, MiB/s read, per-layer hit %, per-token ms; ``{"reset":
    true}`` when the newest scrape started a new baseline), ``intervals`` (rows), ``run``
    (``run_summary``), ``not_exported`` (series names), ``json_quoted``, ``bad_lines``,
    ``proxy_note``, ``n_layer``."""
    poller = MetricsPoller(url, interval=max(interval, 0.05), timeout=timeout, api_key=api_key)
    try:
        poller.scrape_once()
        if interval > 0 and poller.state.status == "ok":
            time.sleep(interval)
            poller.scrape_once()
    finally:
        poller.client.close()
    return poller.state.summary()


def audit_once(path: str | os.PathLike) -> dict[str, Any]:
    """Read the audit log at ``path`` to its current end (complete lines only).

    Keys: ``path``, ``status`` (``ok``; ``waiting`` when the file does not exist; ``error``),
    ``records``, ``bad_lines`` (count) and ``bad`` (line, error), ``pids``, ``runs`` (per run:
    pid, state, model, counters, hit %, requests table, per-layer hit %, resident experts, perf,
    and ``exact_sum``: the reference's property checked for an exited run — a list of problems,
    empty when it holds, ``None`` while the run has not exited), ``run`` (``run_summary`` of
    the run model the tail fed: one row per request)."""
    state = read_to_end(path)
    out = state.summary()
    with state.lock:
        runs = list(state.runs.runs)
    for run, row in zip(runs, out["runs"]):
        row["exact_sum"] = check_exact_sum(run) if run.exit is not None and run.ready is not None else None
    return out


def to_json(d: dict[str, Any]) -> str:
    """Indented JSON (orjson; non-finite floats become null)."""
    return orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def exit_code(d: dict[str, Any]) -> int:
    """0 when the source answered (``ok``), 1 otherwise: for ``--once`` in scripts."""
    return 0 if d.get("status") == "ok" else 1
