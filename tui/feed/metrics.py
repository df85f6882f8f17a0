"""A ``/metrics`` scrape -> the run model (docs/metrics.md).

:class:`MetricsFeed` takes the poller's events: each completed scrape interval becomes one token
row (:func:`interval_row`: per-token means over the interval; the run's rows are intervals) with
its per-layer hits/misses (:func:`layer_counts`) for the layer x interval heatmap; the totals
since the server started become the run summary (:func:`totals_summary`, replaced at every
scrape: always the process answering now), with the keys the server cannot give
(:func:`absent_keys`: "not exported") and how tok/s is counted (:func:`summary_notes`); a restart
(a counter went down, or the server's process start time changed) starts a new baseline and a
new epoch of the run model, adds no row, so no row is ever negative and no rate of the dead
process sits beside the new one's tokens; a failed scrape changes only the status (the last
picture stays).
"""

from __future__ import annotations

import math

import numpy as np

from bmoe_top.parsers.prom import MIB, PROMPT_CACHED, TIME_KEYS, MetricsDelta, PromSnapshot, hit_pct_total
from bmoe_top.tui.model import RowUnit, RunModel, Status
from bmoe_top.tui.model.health import ScrapeHealth, SlotView
from bmoe_top.tui.model.history import F64
from bmoe_top.tui.model.quantities import NOT_EXPORTED, Scope
from bmoe_top.tui.sources.events import Scraped, ScrapeFailed, ScrapeState
from bmoe_top.tui.sources.metrics_poll import PollState
from bmoe_top.tui.sources.slots import SlotsReading

__all__ = ["INTERVAL_COLUMNS", "NOT_EXPORTED", "PROMPT_CACHED", "SCRAPE_STATUS", "SUMMARY_SERIES", "MetricsFeed",
           "absent_keys", "interval_row", "layer_counts", "scrape_health", "summary_notes", "totals_summary"]

#: The poller's state -> the run's status.
SCRAPE_STATUS: dict[ScrapeState, Status] = {
    ScrapeState.CONNECTING: Status.CONNECTING,
    ScrapeState.OK: Status.OK,
    ScrapeState.BUSY: Status.BUSY,
    ScrapeState.REFUSED: Status.REFUSED,
    ScrapeState.UNREACHABLE: Status.UNREACHABLE,
    ScrapeState.SERVER_ERROR: Status.SERVER_ERROR,
    ScrapeState.DISABLED: Status.DISABLED,
    ScrapeState.UNAUTHORIZED: Status.UNAUTHORIZED,
    ScrapeState.HTTP_ERROR: Status.HTTP_ERROR,
    ScrapeState.MALFORMED: Status.MALFORMED,
    ScrapeState.ERROR: Status.ERROR,
}

#: Extra token columns an interval row carries besides the canonical per-token means.
INTERVAL_COLUMNS = ("interval_s", "tokens_in_interval", "tok_s", "prompt_tok_s", "interval_hit_pct",
                    "read_mib_s", "cpu_mib_s", "swaps", "processing", "deferred", "counted_at_end",
                    "slot_tokens", "slot_tok_s", "prompt_cached")


#: Run-summary key -> the series it needs (any one of them): a key whose series the server does
#: not export reads "not exported" on the run panel. Keys no ``/metrics`` carries map to ().
SUMMARY_SERIES: dict[str, tuple[str, ...]] = {
    "tokens": ("tokens_predicted",), "n_prompt": ("prompt_tokens",),
    "tok_s": ("wall_s", "tokens_predicted_seconds"), "s_per_tok": ("wall_s", "tokens_predicted_seconds"),
    "read_mib": ("upload_bytes",), "read_mib_per_tok": ("upload_bytes",),
    "cache_hit_pct": ("hit_ratio", "hits"), "budget_mib": ("cache_bytes",),
    "prefill_s": ("prompt_seconds",), "prefill_tps": ("prompt_seconds",),
    "compute_s_tok": ("compute_s",), "io_s_tok": ("io_s",), "stall_s_tok": ("stall_s",), "mgmt_s_tok": ("mgmt_s",),
    "resident_mib": ("resident_bytes",), "load_s": (), "ttft_s": (),
}

#: How the run panel's tok/s is counted, by the series it comes from (``RunModel.summary_notes``).
TOK_S_PER_TOKEN_WALL = "per stream: tokens over the sum of their own wall time (bmoe:token_wall_seconds_total)"
TOK_S_PROMPT_INCLUDED = ("per stream: tokens over generation + prompt time (the server times a request's first "
                         "token with its prompt, so generation time alone is one step short per request)")


class MetricsFeed:
    """Scrapes of one endpoint -> ``run`` (see the module docstring)."""

    def __init__(self, run: RunModel, url: str = "") -> None:
        self.run = run
        self.url = url
        self.scrapes = 0
        self.restarts = 0
        run.set_row_unit(RowUnit.INTERVAL)
        run.set_summary_scope(Scope.SINCE_START)
        if url:
            run.add_source(f"metrics: {url}")  # first: the events of its states name it
        run.set_status(Status.CONNECTING, "")

    def scraped(self, ev: Scraped) -> None:
        run, snap, d = self.run, ev.snapshot, ev.delta
        with run.lock:
            self.scrapes += 1
            if ev.restarted:
                self.restarts += 1
                run.add_log(f"scrape {self.scrapes}: the server restarted (a counter went down or its process start "
                            "time changed): new baseline; rates and totals are the new process's")
                run.new_epoch(f"scrape {self.scrapes}: a counter went down or the process start time changed")
            elif d is not None and not d.reset:
                i = run.add_token_row(interval_row(d, snap, ev.wall_t, ev.previous, ev.slots, ev.previous_slots))
                hits, misses = layer_counts(ev.previous, snap) if ev.previous is not None else (None, None)
                if hits is not None and misses is not None:
                    run.add_layer_counts(i, hits, misses)
            run.set_status(Status.OK, snap.detail())
            n_layer = snap.layer_count()
            if n_layer:
                run.set_dims(n_layer=n_layer, grow=True)
            run.update_summary(totals_summary(snap), replace=True)  # the totals of the process answering now
            run.set_absent(absent_keys(snap))
            run.set_summary_notes(summary_notes(snap))
            if snap.exported("cache_bytes"):
                run.set_cache_mib(budget_mib=snap.values["cache_bytes"] / MIB)
            if snap.exported("resident_bytes"):
                run.set_cache_mib(resident_mib=snap.values["resident_bytes"] / MIB)

    def failed(self, ev: ScrapeFailed) -> None:
        self.run.set_status(SCRAPE_STATUS[ev.state], ev.detail)


def scrape_health(state: PollState) -> ScrapeHealth:
    """The poller's bookkeeping as the frozen snapshot the run model keeps
    (:class:`~bmoe_top.tui.model.health.ScrapeHealth`), read under the state's lock."""
    with state.lock:
        slots = state.slots
        return ScrapeHealth(
            url=state.url, state=str(state.status), detail=state.detail, http_status=state.http_status,
            scrapes_ok=state.n_ok, scrapes_failed=state.n_fail, restarts=state.n_resets, limit=state.limit,
            start_time=state.start_time, last_ok_mono=state.last_ok_mono, retry_at_mono=state.next_attempt_mono,
            json_quoted=state.json_quoted, bad_lines=tuple(state.bad_lines), proxy_note=state.proxy_note,
            slots=None if slots is None else tuple(
                SlotView(id=x.id, processing=x.processing, task=x.task, n_decoded=x.n_decoded, n_prompt=x.n_prompt)
                for x in slots.slots),
            slots_note=state.slots_note, snapshot=state.last, delta=state.last_delta)


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def interval_row(d: MetricsDelta, cur: PromSnapshot, wall_t: float, prev: PromSnapshot | None = None,
                 slots: SlotsReading | None = None,
                 prev_slots: SlotsReading | None = None) -> dict[str, float | None]:
    """One token row for a completed scrape interval (not a reset): per generated token in the
    interval, ``wall_ms``/``io_ms``/``stall_ms``/``mgmt_ms``/``compute_ms`` (the
    ``bmoe:token_*_seconds_total`` sums / ``bmoe:timed_tokens_total``, else tokens predicted) and
    ``read_mib`` (upload bytes / tokens predicted, MiB); ``cache_hit_pct`` since the start (the
    ``hit_ratio`` gauge, else the counters), ``t`` (``wall_t``, unix s); and the
    :data:`INTERVAL_COLUMNS`: ``tok_s`` is the tokens the counter gained over the interval's wall
    time (all slots); ``processing``/``deferred`` the request gauges at its end;
    ``counted_at_end`` 1 when requests were processing and the token counter did not move (a
    server that counts tokens at a request's end, as llama-server does), else 0; with ``/slots``
    readings at both ends, ``slot_tokens`` = the counter's gain plus the change of the tokens the
    processing slots hold (tokens generated in the interval, finished or not) and ``slot_tok_s``
    over the interval (all slots); ``prompt_cached`` prompt tokens reused from the server's cache.
    None (the row stays NaN) where the server does not export the series or the interval had no
    token to divide by."""
    tokens = d.d.get("tokens_predicted")
    up = d.d.get("upload_bytes")
    row: dict[str, float | None] = {f"{k}_ms": d.token_ms.get(k) for k in TIME_KEYS}
    processing = cur.values.get("requests_processing")
    at_end: float | None = None
    if processing is not None and tokens is not None:
        at_end = 1.0 if processing > 0 and tokens == 0 else 0.0
    slot_tokens: float | None = None
    if slots is not None and prev_slots is not None and tokens is not None:
        slot_tokens = max(0.0, tokens + slots.decoding - prev_slots.decoding)
    cached: float | None = None
    if prev is not None and PROMPT_CACHED in cur.others and PROMPT_CACHED in prev.others:
        cached = cur.others[PROMPT_CACHED] - prev.others[PROMPT_CACHED]
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
        "processing": processing,
        "deferred": cur.values.get("requests_deferred"),
        "counted_at_end": at_end,
        "slot_tokens": slot_tokens,
        "slot_tok_s": slot_tokens / d.dt_s if slot_tokens is not None and d.dt_s > 0 else None,
        "prompt_cached": cached,
    })
    return {k: _finite(v) for k, v in row.items()}


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
    series is not exported. ``tok_s``/``s_per_tok`` count tokens over the time that made them
    (:func:`summary_notes` says how): bmoe-run's per-token wall sums when exported, else the
    server's generation time plus its prompt time (llama-server's generation time starts after a
    request's first token, which the prompt pass made)."""
    v = s.values
    out: dict[str, float | None] = {}
    tok = v.get("tokens_predicted")
    out["tokens"] = tok
    out["n_prompt"] = v.get("prompt_tokens")
    if PROMPT_CACHED in s.others:
        out["n_prompt_cached"] = s.others[PROMPT_CACHED]
    if "upload_bytes" in v:
        out["read_mib"] = v["upload_bytes"] / MIB
        if tok:
            out["read_mib_per_tok"] = v["upload_bytes"] / MIB / tok
    out["cache_hit_pct"] = hit_pct_total(s)
    if "cache_bytes" in v:
        out["budget_mib"] = v["cache_bytes"] / MIB
    if "resident_bytes" in v:
        out["resident_mib"] = v["resident_bytes"] / MIB
    if "prompt_seconds" in v:
        out["prefill_s"] = v["prompt_seconds"]
        if v["prompt_seconds"] > 0 and v.get("prompt_tokens") is not None:
            out["prefill_tps"] = v["prompt_tokens"] / v["prompt_seconds"]
    timed = v.get("timed_tokens")
    wall = v.get("wall_s")
    if timed and wall:
        out["s_per_tok"] = wall / timed
        out["tok_s"] = timed / wall
    elif tok and v.get("tokens_predicted_seconds") is not None:
        spent = v["tokens_predicted_seconds"] + (v.get("prompt_seconds") or 0.0)
        if spent > 0:
            out["s_per_tok"] = spent / tok
            out["tok_s"] = tok / spent
    per = timed if timed else tok
    if per:
        for key, series in (("compute_s_tok", "compute_s"), ("io_s_tok", "io_s"), ("stall_s_tok", "stall_s"),
                            ("mgmt_s_tok", "mgmt_s")):
            if series in v:
                out[key] = v[series] / per
    return {k: x for k, x in out.items() if x is not None and math.isfinite(x)}


def summary_notes(s: PromSnapshot) -> dict[str, str]:
    """How the run panel's figures from this server are counted (``RunModel.summary_notes``)."""
    v = s.values
    if v.get("timed_tokens") and v.get("wall_s"):
        return {"tok_s": TOK_S_PER_TOKEN_WALL, "s_per_tok": TOK_S_PER_TOKEN_WALL}
    if v.get("tokens_predicted_seconds") is not None:
        return {"tok_s": TOK_S_PROMPT_INCLUDED, "s_per_tok": TOK_S_PROMPT_INCLUDED}
    return {}


def absent_keys(s: PromSnapshot) -> dict[str, str]:
    """Run-summary keys whose series the server does not export -> :data:`NOT_EXPORTED`."""
    return {key: NOT_EXPORTED for key, series in SUMMARY_SERIES.items() if not any(s.exported(x) for x in series)}
