"""What the metrics attach screen shows, as data: the ``attach --metrics --once --json`` document,
the attach panel's rows and the status line's parts (docs/metrics.md). A value the server does
not export reads "not exported" (one wording, screen and JSON lists); None = no value, never 0.

Throughput gauges: ``llamacpp:prompt_tokens_seconds`` / ``llamacpp:predicted_tokens_seconds`` mean
"since the last scrape by anyone" on llama-server (it resets them at every ``/metrics`` request)
and "since start" on bmoe-run serve; the document never puts them under one key: ``totals`` has
``prompt_tok_s_since_last_scrape`` / ``predicted_tok_s_since_last_scrape`` or
``..._since_start`` (and ``gauge_window`` says which).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bmoe_top.parsers.prom import (
    PROMPT_CACHED,
    SERIES,
    SERIES_BY_KEY,
    TIME_KEYS,
    PromSnapshot,
    hit_pct_total,
    split_series,
)
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.model.health import ScrapeHealth
from bmoe_top.tui.model.quantities import NOT_EXPORTED, q
from bmoe_top.tui.present.numbers import MISSING, count, fmt, ms, num, safe_rows, show, text_line, whole
from bmoe_top.tui.present.summary import run_summary

__all__ = ["COUNT_KEYS", "LIMIT_WORDS", "NOT_EXPORTED", "OTHER_ROWS", "STATUS_WORDS", "gauge_window",
           "metrics_document", "metrics_panel_rows", "newest_rates", "not_exported", "status_parts"]

#: How each poller state reads on the status line.
STATUS_WORDS = {
    "ok": "● connected", "connecting": "… connecting", "busy": "◔ busy", "refused": "✖ refused",
    "unreachable": "✖ unreachable", "server_error": "✖ server error", "disabled": "✖ no /metrics",
    "unauthorized": "✖ unauthorized", "http_error": "✖ HTTP error", "malformed": "⚠ malformed answer",
    "error": "✖ cannot poll",
}

#: How each limit of a scrape (``limit`` in the document) reads on the status line.
LIMIT_WORDS = {"deadline": "scrape deadline (--timeout)", "body_size": "body size cap (--max-body-mb)"}

#: Series whose values are counts (printed and sent as integers).
COUNT_KEYS = frozenset({s.key for s in SERIES if s.type == "counter" and not s.key.endswith(("_s", "_seconds"))}
                       | {"slots", "prefilled", "requests_processing", "requests_deferred", "hybrid"})

#: The throughput gauges whose meaning depends on the server (see the module docstring).
_GAUGES = {"prompt_tokens_seconds": "prompt_tok_s", "predicted_tokens_seconds": "predicted_tok_s"}

#: Rows of series bmoe-top does not know shown on the attach panel (the JSON keeps all of them).
OTHER_ROWS = 12

#: What the rates block says about how the interval's gen tok/s is counted.
RATE_BASIS = "all slots: the tokens the counter gained over the interval's wall time"
SLOT_BASIS = "all slots: counter gain + change of the tokens the processing slots hold (/slots), over the interval"
AT_END = "this server counts tokens when a request ends: requests are processing, the counter did not move"

#: The "since start" rows of the attach panel: catalogue keys, in order.
SINCE_START_ROWS = ("since_start.tokens_predicted", "since_start.prompt_tokens", "since_start.hits",
                    "since_start.hits_profile", "since_start.misses", "since_start.upload_bytes",
                    "since_start.swaps", "since_start.slots", "since_start.prefilled", "since_start.cache_bytes",
                    "since_start.requests_processing", "since_start.requests_deferred")


def not_exported(s: PromSnapshot) -> list[str]:
    """Names of the known series the snapshot lacks."""
    return [sp.name for sp in SERIES if not s.exported(sp.key)]


def gauge_window(s: PromSnapshot) -> str:
    """``"since_start"`` for bmoe-run serve (it exports ``bmoe:`` series), else
    ``"since_last_scrape"`` (llama-server resets its throughput gauges at every scrape)."""
    bmoe = any(SERIES_BY_KEY[k].name.startswith("bmoe:") for k in s.values)
    return "since_start" if bmoe else "since_last_scrape"


def _value(key: str, v: float) -> float | int | None:
    x = num(v)
    if x is not None and key in COUNT_KEYS and x.is_integer():
        return whole(x)
    return x


def newest_rates(run: RunModel, n_layer: int) -> dict[str, Any] | None:
    """The newest interval row of ``run`` as the ``rates`` block: ``tok_s`` (all slots; see
    ``tok_s_basis``), ``counted_at_end`` (requests processing and the counter did not move:
    ``note`` says so), ``slot_tok_s``/``slot_tokens`` (live from ``/slots``), the request gauges,
    hit %, MiB/s, swaps, per-layer hit % and the per-token ms."""
    with run.lock:
        n = run.tokens.n
        if not n:
            return None
        last = run.tokens.last
        share = run.hit_matrix(n, start=n - 1) if n_layer else np.zeros((0, 1))
        at_end = last("counted_at_end") == 1.0
        slot_tok_s = num(last("slot_tok_s"))

        def c(name: str) -> int | float | None:
            return whole(last(name))

        return {
            "interval_s": num(last("interval_s")), "reset": False, "tok_s": num(last("tok_s")),
            "tok_s_basis": RATE_BASIS, "tokens": c("tokens_in_interval"),
            "counted_at_end": at_end, "note": AT_END if at_end else None,
            "slot_tok_s": slot_tok_s, "slot_tokens": c("slot_tokens"),
            "slot_tok_s_basis": SLOT_BASIS if slot_tok_s is not None else None,
            "processing": c("processing"), "deferred": c("deferred"),
            "prompt_tok_s": num(last("prompt_tok_s")), "prompt_cached": c("prompt_cached"),
            "hit_pct": num(last("interval_hit_pct")),
            "read_mib_s": num(last("read_mib_s")), "cpu_mib_s": num(last("cpu_mib_s")),
            "swaps": c("swaps"),
            "layer_hit_pct": [num(100.0 * x) for x in share[:, 0]] if share.shape[0] else [],
            "token_ms": {k: num(last(f"{k}_ms")) for k in TIME_KEYS},
        }


def metrics_document(run: RunModel, now: float | None = None) -> dict[str, Any]:
    """The numbers the metrics attach screen shows, from the run model alone (its
    ``scrape_health``, published by the feed: docs/architecture.md "Source health"): ``url``,
    ``status`` and ``detail``, ``http_status``, ``scrapes_ok``/``scrapes_failed``, ``restarts``,
    ``start_time`` (the server's process start as it says it), ``stale_s`` (age of the last good
    scrape; None before one; ``now``: ``time.monotonic()``), ``retry_in_s`` (the countdown to the
    next attempt after a failure), ``limit`` (the limit that ended the newest scrape:
    ``"deadline"`` (``--timeout``) or ``"body_size"`` (``--max-body-mb``), else None),
    ``json_quoted``, ``bad_lines``, ``notes`` (the parser's, e.g. a duplicate series),
    ``proxy_note``, ``intervals`` (the catalogue's ``interval.count``: the run's rows, good scrapes
    - 1 - restarts); ``run`` (the run summary: totals since the server
    started); ``totals`` (every exported series by key, counts as integers, the throughput
    gauges under a key that says their window, ``hit_pct`` since start, ``layer_hit_pct``,
    ``prompt_tokens_cached``), ``gauge_window``, ``n_layer``, ``not_exported`` (series names);
    ``other_series`` / ``other_types`` (every series bmoe-top does not know, ``name{labels}`` ->
    value); ``slots`` (the ``/slots`` reading, or None; ``slots_note`` why not); ``rates`` (None
    after one scrape; ``{"reset": true}`` when the newest scrape started a new baseline; else
    :func:`newest_rates`)."""
    with run.lock:
        h = run.scrape_health or ScrapeHealth()
        s, d = h.snapshot, h.delta
        out: dict[str, Any] = {
            "url": h.url, "status": h.state, "detail": h.detail, "http_status": h.http_status,
            "scrapes_ok": h.scrapes_ok, "scrapes_failed": h.scrapes_failed, "restarts": h.restarts,
            "start_time": h.start_time, "stale_s": _round(h.stale_s(now)), "retry_in_s": _round(h.retry_in(now)),
            "limit": h.limit,
            "json_quoted": h.json_quoted, "bad_lines": [{"line": n, "error": m} for n, m in h.bad_lines],
            "notes": list(s.notes) if s is not None else [],
            "proxy_note": h.proxy_note, "intervals": run.tokens.n, "run": run_summary(run),
            "slots": None if h.slots is None else [
                {"id": x.id, "processing": x.processing, "task": x.task, "n_decoded": x.n_decoded,
                 "n_prompt": x.n_prompt} for x in h.slots],
            "slots_note": h.slots_note,
        }
        if s is None:
            out["totals"] = None
            out["rates"] = None
            out["other_series"] = {}
            out["other_types"] = {}
            return out
        window = gauge_window(s)
        tot: dict[str, Any] = {}
        for k, v in sorted(s.values.items()):
            key = f"{_GAUGES[k]}_{window}" if k in _GAUGES else k
            tot[key] = _value(k, v)
        tot["hit_pct"] = num(hit_pct_total(s))
        cached = s.others.get(PROMPT_CACHED)
        tot["prompt_tokens_cached"] = None if cached is None else _value("prompt_tokens", cached)
        lh, lm = s.layers.get("layer_hits"), s.layers.get("layer_misses")
        n_layer = s.layer_count()
        if lh is not None and lm is not None:
            per: list[float | None] = []
            for il in range(n_layer):
                a, b = lh.get(il), lm.get(il)
                per.append(None if a is None or b is None or a + b <= 0 else num(100.0 * a / (a + b)))
            tot["layer_hit_pct"] = per
        else:
            tot["layer_hit_pct"] = None
        out["n_layer"] = n_layer
        out["totals"] = tot
        out["gauge_window"] = window
        out["not_exported"] = not_exported(s)
        out["other_series"] = {k: num(v) for k, v in sorted(s.others.items())}
        out["other_types"] = dict(sorted(s.other_types.items()))
        if d is None:
            out["rates"] = None
        elif d.reset:
            out["rates"] = {"interval_s": d.dt_s, "reset": True}
        else:
            out["rates"] = newest_rates(run, n_layer)
        return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def status_parts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The status line from :func:`metrics_document`: (text, kind) parts; kind ``status`` (the
    state word; its style is the state's), ``detail``, ``alert`` (the last picture is old),
    ``dim`` or ``warn``. A busy server reads "busy: metrics stale for N s"; after a failure the
    retry countdown counts down to the next attempt. The scrapes are counted beside the intervals
    between them (the catalogue's ``interval.count``, as the title and the breakdown count them)."""
    status = str(doc.get("status") or "")
    out: list[tuple[str, str]] = [(STATUS_WORDS.get(status, status), "status")]
    stale = doc.get("stale_s")
    if status == Status.BUSY and stale is not None:
        out.append((f"  metrics stale for {stale:.0f} s (the last values are kept)", "alert"))
    if doc.get("limit"):
        out.append((f"  limit hit: {LIMIT_WORDS.get(doc['limit'], doc['limit'])}", "alert"))
    if doc.get("detail"):
        out.append((f"  {doc['detail']}", "detail"))
    if status not in (Status.OK, Status.BUSY, Status.CONNECTING) and stale is not None:
        out.append((f"  (showing the last good scrape, {stale:.0f} s old)", "alert"))
    retry = doc.get("retry_in_s")
    if retry is not None and status != Status.OK:
        out.append((f"  retry in {math.ceil(retry):.0f} s", "dim"))
    out.append((f"  scrapes {doc.get('scrapes_ok', 0)} ok / {doc.get('scrapes_failed', 0)} failed · "
                f"{q('interval.count').label} {doc.get('intervals', 0):,}", "dim"))
    if doc.get("json_quoted"):
        out.append(("  body JSON-quoted (decoded)", "warn"))
    if doc.get("restarts"):
        out.append((f"  restarts seen: {doc['restarts']}", "warn"))
    if doc.get("proxy_note"):
        out.append((f"  proxy: {doc['proxy_note']}", "dim"))
    return [(text_line(t), k) for t, k in out]


def metrics_panel_rows(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The attach panel from :func:`metrics_document`: (label, value, kind) rows; kind ``section``
    for a heading, ``missing`` for a value the server does not send or export, else ``""``. Labels
    and formats are the catalogue's (``bmoe_top.tui.model.quantities``): a label another scope
    shares says its scope (``tok/s (all slots, 1.0 s)``, ``hit (since start)``). The interval's
    tok/s is for all slots, and says when the server counts tokens at a request's end; with
    ``/slots`` the live progress is beside it; prompt tokens reused from the cache sit beside the
    prompt numbers; the series bmoe-top does not know are listed last."""
    ne = set(doc.get("not_exported") or [])
    tot = doc.get("totals")
    r = doc.get("rates")
    out: list[tuple[str, str, str]] = []
    span = {"interval": show(q("interval.length"), r["interval_s"])} if r and r.get("interval_s") is not None else {}

    def sec(name: str) -> None:
        out.append((name, "", "section"))

    def row(label: str, value: str) -> None:
        out.append((label, value, MISSING if value in (MISSING, NOT_EXPORTED) else ""))

    def exported(series_key: str) -> bool:
        return tot is None or SERIES_BY_KEY[series_key].name not in ne

    def rate(key: str, series_key: str) -> None:
        qty = q(key)
        label = qty.screen_label(**span)
        if not exported(series_key):
            return row(label, NOT_EXPORTED)
        if r is None:
            return row(label, MISSING)
        if r.get("reset"):
            return row(label, "restart: new baseline")
        v = r.get(qty.field)
        if v is None and key == "interval.hit_pct" and tot is not None:
            return row(label, "idle (no lookups)")
        return row(label, show(qty, v))

    def total(key: str) -> None:
        qty = q(key)
        label = qty.screen_label()
        if tot is None:
            return row(label, MISSING)
        if not exported(qty.field):
            return row(label, NOT_EXPORTED)
        return row(label, show(qty, tot.get(qty.field)))

    sec("interval")
    row(q("interval.length").label, show(q("interval.length"), r["interval_s"]) if r else MISSING)
    rate("interval.tok_s", "tokens_predicted")
    if r and r.get("counted_at_end"):
        row("", "server counts at request end")
    if r and r.get("slot_tok_s") is not None:
        qty = q("interval.slot_tok_s")
        row(qty.screen_label(**span), show(qty, r["slot_tok_s"]))
    rate("interval.prompt_tok_s", "prompt_tokens")
    if r and r.get("prompt_cached") is not None:
        qty = q("interval.prompt_cached")
        row(qty.screen_label(**span), show(qty, r["prompt_cached"]))
    rate("interval.hit_pct", "hits")
    rate("interval.read_mib_s", "upload_bytes")
    rate("interval.swaps", "swaps")
    sec("since start")
    hit = q("since_start.hit_pct")
    row(hit.screen_label(), show(hit, tot.get("hit_pct")) if tot else MISSING)
    total("since_start.tokens_predicted")
    total("since_start.prompt_tokens")
    if tot is not None:
        cached = tot.get("prompt_tokens_cached")
        qty = q("summary.n_prompt_cached")
        row(qty.screen_label(), NOT_EXPORTED if cached is None else show(qty, cached))
    for key in SINCE_START_ROWS[2:]:
        total(key)
    slots = doc.get("slots")
    if slots:
        busy = [x for x in slots if x.get("processing")]
        row(q("slots.busy").label, f"{len(busy)} of {len(slots)}")
        for x in busy[:4]:
            row(f"slot {x['id']}", f"task {x.get('task')}: {count(x.get('n_decoded'), 'tok')} so far")
    elif doc.get("slots_note"):
        row("slots", doc["slots_note"])
    per = q("interval.token_ms")
    sec(f"{per.label} ({per.words(**span)})")
    tm = (r or {}).get("token_ms") or {}
    for k in TIME_KEYS:
        if not exported(k + "_s"):
            row(k, NOT_EXPORTED)
        elif r is None or r.get("reset"):
            row(k, MISSING)
        else:  # the one duration formatter, as the breakdown's readout shows the same times
            v = tm.get(k)
            row(k, ms(v) if v is not None else MISSING)
    others = doc.get("other_series") or {}
    if others:
        sec(f"other series ({len(others)})")
        shown = _other_rows(others, row)
        if len(others) > shown:
            row("", f"… {len(others) - shown} more (all in --once --json)")
    return safe_rows(out)


def _other_rows(others: dict[str, float | None], row: Any) -> int:
    """The series the panel does not know, up to :data:`OTHER_ROWS` rows: a metric with one series
    on one row (``name{labels}``), a metric with several as its name, then one row per series
    labelled by the labels that tell them apart (``reason=too_large``): five series of one
    metric all read ``bmoe:http_rejected_total{…`` once the label was cut to the panel's width.
    Returns the series shown."""
    groups: dict[str, list[tuple[dict[str, str], float | None]]] = {}
    for key, v in others.items():
        name, labels = split_series(key)
        groups.setdefault(name, []).append((labels, v))

    def value(v: float | None) -> str:
        return fmt(v, 2) if v is None or not float(v).is_integer() else count(v)

    shown = rows = 0
    for name, series in groups.items():
        if rows >= OTHER_ROWS:
            break
        if len(series) == 1:
            labels, v = series[0]
            inner = ",".join(f'{k}="{x}"' for k, x in labels.items())
            row(f"{name}{{{inner}}}" if labels else name, value(v))
            shown, rows = shown + 1, rows + 1
            continue
        keys = sorted({k for labels, _v in series for k in labels})
        differ = [k for k in keys if len({labels.get(k) for labels, _v in series}) > 1] or keys
        row(name, f"{len(series)} series")
        rows += 1
        for labels, v in series[: max(1, OTHER_ROWS - rows)]:
            row("  " + " ".join(f"{k}={labels.get(k, '')}" for k in differ), value(v))
            shown, rows = shown + 1, rows + 1
    return shown
