"""A ``/metrics`` scrape -> the run model (docs/metrics.md).

:class:`MetricsFeed` takes the poller's events: each completed scrape interval becomes one token
row (:func:`interval_row`: per-token means over the interval; the run's rows are intervals) with
its per-layer hits/misses (:func:`layer_counts`) for the layer x interval heatmap; the totals
since the server started become the run summary (:func:`totals_summary`); a counter reset
(restart) starts a new baseline and adds no row, so no row is ever negative; a failed scrape
changes only the status (the last picture stays).
"""

from __future__ import annotations

import math

import numpy as np

from bmoe_top.parsers.prom import MIB, TIME_KEYS, MetricsDelta, PromSnapshot, hit_pct_total
from bmoe_top.tui.model import RowUnit, RunModel, Status
from bmoe_top.tui.model.history import F64
from bmoe_top.tui.sources.events import Scraped, ScrapeFailed, ScrapeState

__all__ = ["INTERVAL_COLUMNS", "SCRAPE_STATUS", "MetricsFeed", "interval_row", "layer_counts", "totals_summary"]

#: The poller's state -> the run's status.
SCRAPE_STATUS: dict[ScrapeState, Status] = {
    ScrapeState.CONNECTING: Status.CONNECTING,
    ScrapeState.OK: Status.OK,
    ScrapeState.UNREACHABLE: Status.UNREACHABLE,
    ScrapeState.UNAUTHORIZED: Status.UNAUTHORIZED,
    ScrapeState.MALFORMED: Status.MALFORMED,
    ScrapeState.ERROR: Status.ERROR,
}

#: Extra token columns an interval row carries besides the canonical per-token means.
INTERVAL_COLUMNS = ("interval_s", "tokens_in_interval", "tok_s", "prompt_tok_s", "interval_hit_pct",
                    "read_mib_s", "cpu_mib_s", "swaps")


class MetricsFeed:
    """Scrapes of one endpoint -> ``run`` (see the module docstring)."""

    def __init__(self, run: RunModel, url: str = "") -> None:
        self.run = run
        self.url = url
        self.scrapes = 0
        run.set_row_unit(RowUnit.INTERVAL)
        run.set_status(Status.CONNECTING, "")
        if url:
            run.add_source(f"metrics: {url}")

    def scraped(self, ev: Scraped) -> None:
        run, snap, d = self.run, ev.snapshot, ev.delta
        with run.lock:
            self.scrapes += 1
            if d is not None:
                if d.reset:
                    run.add_log(f"scrape {self.scrapes}: a counter went down (server restart): new baseline")
                else:
                    i = run.add_token_row(interval_row(d, snap, ev.wall_t))
                    hits, misses = layer_counts(ev.previous, snap) if ev.previous is not None else (None, None)
                    if hits is not None and misses is not None:
                        run.add_layer_counts(i, hits, misses)
            detail = "body was JSON-quoted; decoded once" if snap.json_quoted else ""
            if snap.bad_lines:
                n = len(snap.bad_lines)
                detail = (detail + "; " if detail else "") + \
                    f"{n} bad line{'s' if n > 1 else ''} (first: line {snap.bad_lines[0][0]})"
            run.set_status(Status.OK, detail)
            n_layer = snap.layer_count()
            if n_layer:
                run.set_dims(n_layer=n_layer, grow=True)
            run.update_summary(totals_summary(snap))
            if snap.exported("cache_bytes"):
                run.set_cache_mib(budget_mib=snap.values["cache_bytes"] / MIB)

    def failed(self, ev: ScrapeFailed) -> None:
        self.run.set_status(SCRAPE_STATUS[ev.state], ev.detail)


def interval_row(d: MetricsDelta, cur: PromSnapshot, wall_t: float) -> dict[str, float | None]:
    """One token row for a completed scrape interval (not a reset): per generated token in the
    interval, ``wall_ms``/``io_ms``/``stall_ms``/``mgmt_ms``/``compute_ms`` (the
    ``bmoe:token_*_seconds_total`` sums / ``bmoe:timed_tokens_total``, else tokens predicted) and
    ``read_mib`` (upload bytes / tokens predicted, MiB); ``cache_hit_pct`` since the start (the
    ``hit_ratio`` gauge, else the counters), ``t`` (``wall_t``, unix s); and the
    :data:`INTERVAL_COLUMNS`. None (the row stays NaN) where the server does not export the
    series or the interval had no token to divide by."""
    tokens = d.d.get("tokens_predicted")
    up = d.d.get("upload_bytes")
    row: dict[str, float | None] = {f"{k}_ms": d.token_ms.get(k) for k in TIME_KEYS}
    row.update({
        "t": wall_t,
        "read_mib": up / MIB / tokens if up is not None and tokens else None,
        "cache_hit_pct": d.hit_pct_total,
        "interval_s": d.dt_s,
        "tokens_in_interval": tokens,
        "tok_s": d.tok_s,
        "prompt_tok_s": d.prompt_tok_s,
        "interval_hit_pct": d.hit_pct,
        "read_mib_s": d.read_mib_s,
        "cpu_mib_s": d.cpu_mib_s,
        "swaps": d.swaps,
    })
    return {k: (v if v is not None and math.isfinite(v) else None) for k, v in row.items()}


def layer_counts(prev: PromSnapshot, cur: PromSnapshot) -> tuple[F64 | None, F64 | None]:
    """Per-layer (hits, misses) in the interval, float ``[n_layer]`` (NaN where a layer's series
    is missing on either side), or ``(None, None)`` when there is no per-layer series."""
    n_layer = cur.layer_count()
    lh0, lh1 = prev.layers.get("layer_hits"), cur.layers.get("layer_hits")
    lm0, lm1 = prev.layers.get("layer_misses"), cur.layers.get("layer_misses")
    if not n_layer or not (lh0 and lh1 and lm0 and lm1):
        return None, None
    hits = np.full(n_layer, np.nan)
    misses = np.full(n_layer, np.nan)
    for il in range(n_layer):
        a, b, c, e = lh0.get(il), lh1.get(il), lm0.get(il), lm1.get(il)
        if a is None or b is None or c is None or e is None:
            continue
        hits[il], misses[il] = b - a, e - c
    return hits, misses


def totals_summary(s: PromSnapshot) -> dict[str, float]:
    """Run-summary keys from the totals since the server started; a key is left out when its
    series is not exported."""
    v = s.values
    out: dict[str, float | None] = {}
    tok = v.get("tokens_predicted")
    timed = v.get("timed_tokens", tok)
    out["tokens"] = tok
    out["n_prompt"] = v.get("prompt_tokens")
    if "upload_bytes" in v:
        out["read_mib"] = v["upload_bytes"] / MIB
        if tok:
            out["read_mib_per_tok"] = v["upload_bytes"] / MIB / tok
    out["cache_hit_pct"] = hit_pct_total(s)
    if "cache_bytes" in v:
        out["budget_mib"] = v["cache_bytes"] / MIB
    if "prompt_seconds" in v:
        out["prefill_s"] = v["prompt_seconds"]
        if v["prompt_seconds"] > 0 and v.get("prompt_tokens") is not None:
            out["prefill_tps"] = v["prompt_tokens"] / v["prompt_seconds"]
    wall = v.get("wall_s", v.get("tokens_predicted_seconds"))
    if wall and timed:
        out["s_per_tok"] = wall / timed
        out["tok_s"] = timed / wall
    if timed:
        for key, series in (("compute_s_tok", "compute_s"), ("io_s_tok", "io_s"), ("stall_s_tok", "stall_s"),
                            ("mgmt_s_tok", "mgmt_s")):
            if series in v:
                out[key] = v[series] / timed
    return {k: x for k, x in out.items() if x is not None and math.isfinite(x)}
