"""What the metrics attach screen shows, as data: the ``attach --metrics --once --json`` document
and the attach panel's rows (docs/metrics.md). None = not exported / no value, never 0."""

from __future__ import annotations

from typing import Any

import numpy as np

from bmoe_top.parsers.prom import SERIES, SERIES_BY_KEY, TIME_KEYS, PromSnapshot, hit_pct_total
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.numbers import MISSING, fmt, num
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources.metrics_poll import PollState

__all__ = ["NOT_EXPORTED", "metrics_document", "metrics_panel_rows", "newest_rates", "not_exported"]

#: What a series the server does not export reads as.
NOT_EXPORTED = "not exported"


def not_exported(s: PromSnapshot) -> list[str]:
    """Names of the known series the snapshot lacks."""
    return [sp.name for sp in SERIES if not s.exported(sp.key)]


def newest_rates(run: RunModel, n_layer: int) -> dict[str, Any] | None:
    """The newest interval row of ``run`` as the ``rates`` block."""
    with run.lock:
        n = run.tokens.n
        if not n:
            return None
        last = run.tokens.last
        share = run.hit_matrix(n, start=n - 1) if n_layer else np.zeros((0, 1))
        return {
            "interval_s": num(last("interval_s")), "reset": False, "tok_s": num(last("tok_s")),
            "prompt_tok_s": num(last("prompt_tok_s")), "hit_pct": num(last("interval_hit_pct")),
            "read_mib_s": num(last("read_mib_s")), "cpu_mib_s": num(last("cpu_mib_s")),
            "swaps": num(last("swaps")),
            "layer_hit_pct": [num(100.0 * x) for x in share[:, 0]] if share.shape[0] else [],
            "token_ms": {k: num(last(f"{k}_ms")) for k in TIME_KEYS},
        }


def metrics_document(state: PollState, run: RunModel) -> dict[str, Any]:
    """The numbers the metrics attach screen shows: ``url``, ``status`` and ``detail``,
    ``http_status``, ``scrapes_ok``/``scrapes_failed``, ``restarts``, ``json_quoted``,
    ``bad_lines``, ``proxy_note``, ``intervals`` (rows); ``run`` (the run summary: totals since the
    server started); ``totals`` (every exported series by key, ``hit_pct`` since start,
    ``layer_hit_pct``), ``n_layer``, ``not_exported`` (series names); ``rates`` (None after one
    scrape; ``{"reset": true}`` when the newest scrape started a new baseline; else the newest
    interval row)."""
    with state.lock:
        s, d = state.last, state.last_delta
        out: dict[str, Any] = {
            "url": state.url, "status": state.status, "detail": state.detail, "http_status": state.http_status,
            "scrapes_ok": state.n_ok, "scrapes_failed": state.n_fail, "restarts": state.n_resets,
            "json_quoted": state.json_quoted, "bad_lines": [{"line": n, "error": m} for n, m in state.bad_lines],
            "proxy_note": state.proxy_note, "intervals": run.tokens.n, "run": run_summary(run),
        }
        if s is None:
            out["totals"] = None
            out["rates"] = None
            return out
        tot: dict[str, Any] = {k: num(v) for k, v in sorted(s.values.items())}
        tot["hit_pct"] = num(hit_pct_total(s))
        lh, lm = s.layers.get("layer_hits"), s.layers.get("layer_misses")
        n_layer = s.layer_count()
        if lh is not None and lm is not None:
            per: list[float | None] = []
            for il in range(n_layer):
                h, m = lh.get(il), lm.get(il)
                per.append(None if h is None or m is None or h + m <= 0 else num(100.0 * h / (h + m)))
            tot["layer_hit_pct"] = per
        else:
            tot["layer_hit_pct"] = None
        out["n_layer"] = n_layer
        out["totals"] = tot
        out["not_exported"] = not_exported(s)
        if d is None:
            out["rates"] = None
        elif d.reset:
            out["rates"] = {"interval_s": d.dt_s, "reset": True}
        else:
            out["rates"] = newest_rates(run, n_layer)
        return out


def metrics_panel_rows(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The attach panel from :func:`metrics_document`: (label, value, kind) rows; kind ``section``
    for a heading, ``missing`` for a value the server does not send or export, else ``""``."""
    ne = set(doc.get("not_exported") or [])
    tot = doc.get("totals")
    r = doc.get("rates")
    out: list[tuple[str, str, str]] = []

    def sec(name: str) -> None:
        out.append((name, "", "section"))

    def row(label: str, value: str) -> None:
        out.append((label, value, MISSING if value in (MISSING, NOT_EXPORTED) else ""))

    def rate(key: str, series_key: str, digits: int = 1, unit: str = "") -> str:
        if tot is not None and SERIES_BY_KEY[series_key].name in ne:
            return NOT_EXPORTED
        if r is None:
            return MISSING
        if r.get("reset"):
            return "restart: new baseline"
        if r.get(key) is None and key == "hit_pct" and tot is not None:
            return "idle (no lookups)"
        return fmt(r.get(key), digits, unit)

    def total(key: str, digits: int, unit: str, scale: float) -> str:
        if tot is None:
            return MISSING
        if SERIES_BY_KEY[key].name in ne:
            return NOT_EXPORTED
        v = tot.get(key)
        return fmt(None if v is None else v * scale, digits, unit)

    sec("interval")
    row("length", fmt(r["interval_s"], 1, "s") if r else MISSING)
    row("gen tok/s", rate("tok_s", "tokens_predicted"))
    row("prompt tok/s", rate("prompt_tok_s", "prompt_tokens"))
    row("hit %", rate("hit_pct", "hits", 1, "%"))
    row("read", rate("read_mib_s", "upload_bytes", 2, "MiB/s"))
    row("swaps", rate("swaps", "swaps", 0))
    sec("since start")
    row("hit %", fmt(tot.get("hit_pct"), 1, "%") if tot else MISSING)
    for key, label, digits, unit, scale in (
        ("tokens_predicted", "generated", 0, "tok", 1.0), ("prompt_tokens", "prompt", 0, "tok", 1.0),
        ("hits", "hits", 0, "", 1.0), ("hits_profile", "from profile", 0, "", 1.0), ("misses", "misses", 0, "", 1.0),
        ("upload_bytes", "read", 1, "MiB", 1 / 1048576), ("swaps", "swaps", 0, "", 1.0),
        ("slots", "slots", 0, "", 1.0), ("prefilled", "prefilled", 0, "", 1.0),
        ("cache_bytes", "cache", 1, "MiB", 1 / 1048576),
        ("requests_processing", "processing", 0, "", 1.0), ("requests_deferred", "queued", 0, "", 1.0),
    ):
        row(label, total(key, digits, unit, scale))
    sec("ms per token")
    tm = (r or {}).get("token_ms") or {}
    for k in TIME_KEYS:
        if tot is not None and SERIES_BY_KEY[k + "_s"].name in ne:
            row(k, NOT_EXPORTED)
        elif r is None or r.get("reset"):
            row(k, MISSING)
        else:
            row(k, fmt(tm.get(k), 2, "ms"))
    return out
