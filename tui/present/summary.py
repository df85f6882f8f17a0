"""A run's numbers as the run panel shows them, as plain data: the summary document
(``replay --summary --json``), its rows, its text, and the run panel's rows.

``summary`` holds the source's own end-of-run numbers (CSV ``# summary``, summary lines,
``BMOE_DONE``, ``/metrics`` totals); ``derived`` what bmoe-top computed from the token rows (over
the whole run, also when only the newest rows are held at full resolution). Labels, units and
formats are the catalogue's (``bmoe_top.tui.model.quantities``: the ``summary.*`` quantities);
``summary_scope`` says what the source's figures cover (the run panel's heading).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

import numpy as np

from bmoe_top.tui.model import RunModel, Status, Turn
from bmoe_top.tui.model.alerts import Active, AlertState
from bmoe_top.tui.model.diagnosis import diagnose
from bmoe_top.tui.model.quantities import NO_CACHE, Quantity, q, quantities
from bmoe_top.tui.present.diagnosis import diagnosis_document
from bmoe_top.tui.present.numbers import MISSING, fmt, mib, num, safe_rows, show, text_line, whole
from bmoe_top.tui.present.turns import is_session, turn_list, turns_text

__all__ = ["EXTRA_FIELDS", "FLAG_KEYS", "MODE_WORDS", "SUMMARY_FIELDS", "device_rows", "mode_words", "run_panel_rows",
           "run_summary", "scope_words", "summary_rows", "summary_text", "tier_rows", "tier_split",
           "typed_meta", "TierDoc", "TIERS_HEADING"]

#: The run panel's summary rows, in order (catalogue keys ``summary.<key>``).
_MAIN = ("tokens", "tok_s", "s_per_tok", "read_mib", "read_mib_per_tok", "cache_hit_pct", "resident_mib", "budget_mib",
         "n_prompt", "prefill_s", "prefill_tps", "load_s", "ttft_s", "compute_s_tok", "io_s_tok", "stall_s_tok",
         "mgmt_s_tok")
#: The run panel's summary rows: (key, label, unit). ``--summary`` prints the same keys.
SUMMARY_FIELDS: tuple[tuple[str, str, str], ...] = tuple((k, q(f"summary.{k}").label, q(f"summary.{k}").unit)
                                                          for k in _MAIN)
_SUMMARY_Q: dict[str, Quantity] = {k: q(f"summary.{k}") for k in _MAIN}

#: Rows shown only when the source gives the value: (keys the sources spell it with, label, unit,
#: digits). The two definitions of hit % and of MiB per token are named (docs/telemetry.md
#: "Additive fields"): bmoe-cli's figures are since load / page-aligned, bmoe-run's contract fields
#: decode only / payload; a source that sends only one of them keeps the contract label above.
_EXTRA_SPELLINGS = {"xfer_mib_tok": ("xfer_mib_tok", "xfer_MiB/tok"), "xfer_mib": ("xfer_mib", "xfer_MiB"),
                    "decode_tok_s": ("decode_tok_s", "decode_tok/s"), "cpu_s/tok": ("cpu_s/tok", "cpu_s_tok"),
                    "rss_mib": ("rss_mib", "rss_MiB"), "peak_rss_mib": ("peak_rss_mib", "peak_rss_MiB")}
_EXTRA_Q: tuple[Quantity, ...] = tuple(x for x in quantities("summary.") if x.field not in _MAIN)
EXTRA_FIELDS: tuple[tuple[tuple[str, ...], str, str, int], ...] = tuple(
    (_EXTRA_SPELLINGS.get(x.field, (x.field,)), x.label, x.unit, 0 if x.form.value == "count" else 2)
    for x in _EXTRA_Q)

#: Per-token summary keys the token rows give when the source sends no total (key, ms column).
_PER_TOKEN_COLUMNS = (("compute_s_tok", "compute_ms"), ("io_s_tok", "io_ms"), ("stall_s_tok", "stall_ms"),
                      ("mgmt_s_tok", "mgmt_ms"))

#: The source's figures a run knows by its first token (shown for a row before the newest one of
#: a one-turn run: they cover no row after it).
_AT_START = frozenset({"n_prompt", "prefill_s", "prefill_tps", "load_s", "ttft_s", "budget_mib"})
#: Of those, what holds for the whole run (one load); the others are the newest turn's.
_PER_RUN = frozenset({"load_s", "budget_mib"})
#: What a figure of the newest turn left out at an earlier row says instead of "missing".
NEWEST_TURN_WORDS = "the newest turn's (End)"

#: Extra figures a token row carries that hold for the run so far (shown before the turn's end).
_LIVE_EXTRA = frozenset({"hit_pct_decode", "hit_pct_since_load", "rss_mib"})

#: Token-row columns of the page-aligned read (bmoe-run's rows carry it beside the payload).
_ALIGNED_COLUMNS = ("xfer_mb", "xfer_mib")
#: When a source names both definitions, the contract rows say which one they are.
_DEFINED_LABELS = {"read_mib_per_tok": ("xfer_mib_tok", "xfer_MiB/tok", "payload/tok"),
                   "read_mib": ("xfer_mib", "xfer_MiB", "read payload")}

#: Run-header flags the run panel lists.
FLAG_KEYS = ("moe_stream", "cache_mb", "io_threads", "o_direct", "overlap", "prefetch", "threads", "n_ctx",
             "cache_auto", "force_cache", "dense_weights", "drop_cold_frac")


#: Run-header entries that are names, kept as text whatever they look like.
NAME_META = frozenset({"model", "arch", "format", "profile", "resident_from", "recording_source", "name", "audit_pids"})
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")


def typed_meta(meta: Mapping[str, str]) -> dict[str, str | int | float]:
    """The run header for a JSON document: an entry written as a whole number or a decimal that
    reads back as itself (``n_ctx=2048``, ``expert_bank_MiB=12.0``) is a number, a name
    (:data:`NAME_META`) and anything else stays text; the text forms print the same either way."""
    out: dict[str, str | int | float] = {}
    for k, v in meta.items():
        if k not in NAME_META and _INT.fullmatch(v):
            out[k] = int(v)
        elif k not in NAME_META and _FLOAT.fullmatch(v) and repr(float(v)) == v:
            out[k] = float(v)
        else:
            out[k] = v
    return out


def scope_words(run: RunModel, stop: int | None = None) -> str:
    """What the run panel's numbers cover, in words (its heading): the source's own figures'
    scope (``since start`` for a ``/metrics`` server, ``since load (pid 42)`` for an audit log's
    newest process run), else the last finished turn of a run of several (``turn 3``, ``turn 3
    (last finished)``), ``run so far`` while it runs, ``run``; with ``stop`` (the rows shown end
    before the newest: slow motion, a selected row) the rows up to it (``tokens 1-199``)."""
    with run.lock:
        unit = str(run.row_unit)
        if stop is not None:
            return f"{unit}s {min(run.epoch_start, stop) + 1:,}-{stop:,}"
        scope, detail = run.summary_scope
        if scope is not None:
            return str(scope) + (f" ({detail})" if detail else "")
        finished = [t for t in run.turns if t.done is not None]
        newest = run.turns[-1] if run.turns else None
        if finished and run.turn_count > 1:  # the source's numbers are its last finished turn's
            t = finished[-1]
            return f"turn {t.index + 1}" + ("" if t is newest else " (last finished)")
        return "run so far" if run.status.live else "run"


def _turn_start_figures(turn: Turn | None) -> dict[str, float]:
    """A finished turn's own figures of its start (prompt tokens, prefill, TTFT) as summary keys,
    from its end record; empty while it runs or when its record has none."""
    if turn is None or turn.done is None:
        return {}
    said = {k: num(turn.done.get(k)) for k in sorted(_AT_START - _PER_RUN)}  # end records spell them so
    return {k: v for k, v in said.items() if v is not None}


def run_summary(run: RunModel, stop: int | None = None, *, turns: bool = True) -> dict[str, Any]:
    """The numbers the run panel shows, as JSON-ready data (None = missing from the source).
    ``derived`` covers the token rows of the source's current process only
    (``run.epoch_start``: after a server restart the dead process's rows no longer count), up to
    row ``stop`` (default: every row; with a ``stop`` before the newest row the source's own
    figures, which cover rows after it, are left out: every figure is the rows' up to it);
    ``derived`` also holds the cache's ``resident_mib`` / ``budget_mib`` as the source said them
    last (a token, a load record), for the rows before the first end record, and ``aligned_rows``
    True when the rows carry the page-aligned read beside the payload (the read rows then say
    which definition they are from the first token);
    ``extra`` the :data:`EXTRA_FIELDS` the source gave (while a turn runs, the figures its newest
    token carries for the run so far); ``absent`` the keys the source cannot give, and at a
    row of an earlier turn the newest turn's figures left out (:data:`NEWEST_TURN_WORDS`), with
    the words shown instead, unless the viewed row's turn has ended: its own prompt tokens,
    prefill and TTFT from its end record are the figures then, and ``at_turn`` names that turn
    and those keys (``{"turn": 2, "keys": [...]}``, absent otherwise); ``summary_notes`` how a
    figure is counted; ``summary_scope`` what the source's figures cover (:func:`scope_words`);
    ``alerts`` the lines the banner shows;
    ``mode`` is None when the rows carry no per-token time; ``upto`` the ``stop`` when it applied;
    ``tiers`` the memory tiers (:class:`TierDoc`, :func:`tier_split`; absent when the source sent
    none); ``turn_list`` every request of the run (:func:`~bmoe_top.tui.present.turns.turn_list`) and
    ``diagnosis`` the findings over the newest rows (:func:`~bmoe_top.tui.present.diagnosis.diagnosis_document`,
    no probe: a printing command reads no settings; docs/diagnosis.md), both left out with
    ``turns=False``: the run panel shows the numbers alone."""
    with run.lock:
        n = run.tokens.n
        span = n or run.route_token_count()  # a routing trace alone: its decode tokens are the rows
        upto = stop if stop is not None and 0 < stop < span else None
        n = min(upto, n) if upto is not None else n
        own: Mapping[str, Any] = run.summary
        left_out: dict[str, str] = {}
        at_turn: dict[str, Any] = {}
        if upto is not None:  # the source's figures that cover rows after the viewed one are left out
            kept = {k: v for k, v in own.items() if k in _AT_START and (run.turn_count <= 1 or k in _PER_RUN)}
            words = NEWEST_TURN_WORDS
            if run.turn_count > 1:  # the viewed row's turn's own start figures, from its end record
                viewed = run.turn_at(upto - 1)
                said = _turn_start_figures(viewed)
                if viewed is not None and said:
                    kept.update(said)
                    at_turn = {"turn": viewed.index + 1, "keys": sorted(said)}
                elif viewed is not None and viewed.done is None and not run.status.live:
                    words = f"no end record (turn {viewed.index + 1})"  # a file that ends inside it
            # a figure of the newest turn, at a row of an earlier one: sent, not at this row
            left_out = {k: words for k in _AT_START - _PER_RUN if k in own and k not in kept}
            own = kept
        own_extra: Mapping[str, Any] = run.summary_extra if upto is None else {}
        s: dict[str, Any] = {key: num(own.get(key)) for key, _, _ in SUMMARY_FIELDS}
        for key in ("tokens", "n_prompt"):
            s[key] = whole(s[key])
        extra: dict[str, Any] = {}
        for keys, _label, _unit, digits in EXTRA_FIELDS:
            for k in keys:
                v = num(own.get(k))
                if v is None:
                    v = num(own_extra.get(k))
                if v is None and k in _LIVE_EXTRA and run.tokens.has(k) and n:
                    v = num(run.tokens.view(k, n - 1, n)[0])  # the newest token's figure (so far)
                if v is not None:
                    extra[keys[0]] = whole(v) if digits == 0 and float(v).is_integer() else v
                    break
        lo = min(run.epoch_start, n)
        rows = n - lo
        derived: dict[str, Any] = {"token_rows": n}
        if any(run.tokens.has(c) for c in _ALIGNED_COLUMNS):  # the rows name both reads from the first token
            derived["aligned_rows"] = True
        if run.epoch_start:
            derived["epoch_rows"] = rows
        if rows:
            wall = run.column_stats("wall_ms", lo, n)
            mean_wall = num(wall.mean) if wall.count else None
            derived["mean_wall_ms"] = mean_wall
            derived["tok_s"] = (1000.0 / mean_wall) if mean_wall else None
            read = run.column_stats("read_mib", lo, n)
            derived["read_mib"] = num(read.sum) if run.tokens.has("read_mib") and read.count else None
            derived["cache_hit_pct"] = num(run.tokens.view("cache_hit_pct", n - 1, n)[0])
            derived["tokens"] = rows
            if mean_wall:
                derived["s_per_tok"] = mean_wall / 1000.0
            if derived["read_mib"] is not None:
                derived["read_mib_per_tok"] = derived["read_mib"] / rows
            for key, column in _PER_TOKEN_COLUMNS:  # a source without these totals still times each token
                if run.tokens.has(column):
                    st = run.column_stats(column, lo, n)
                    if st.count:
                        derived[key] = num(st.mean / 1000.0)
        routed = run.route_token_count() if not rows else 0
        if routed:  # no token rows: a routing trace's decode tokens, and its hit % where it says hit or miss
            rt = routed if upto is None else min(upto, routed)
            derived["tokens"] = rt
            derived["from_routing"] = ["tokens"]
            shares = run.layer_series(0, rt, bins=1)
            look = float(np.nansum(shares.lookups))
            if look > 0:
                derived["cache_hit_pct"] = 100.0 * float(np.nansum(shares.share * shares.lookups)) / look
                derived["from_routing"].append("cache_hit_pct")
        if s.get("prefill_tps") is None and s.get("n_prompt") and s.get("prefill_s"):
            derived["prefill_tps"] = s["n_prompt"] / s["prefill_s"]
        resident = run.resident_mib  # the cache as the source said it last (a token, a load record)
        if upto is not None:  # ... or at the viewed row, when the rows carry it (else not known there)
            at = num(run.tokens.view("resident_mib", n - 1, n)[0]) if run.tokens.has("resident_mib") else None
            resident = at
        if resident is not None:
            derived["resident_mib"] = resident
        if run.budget_mib is not None:
            derived["budget_mib"] = run.budget_mib
        elif n and run.tokens.has("cache_budget_mib"):  # a CSV without its # summary: the rows say it
            budget = num(run.tokens.view("cache_budget_mib", n - 1, n)[0])
            if budget is not None:
                derived["budget_mib"] = budget
        mode, why = run.mode()
        doc = {
            **s,
            "extra": extra,
            "summary_extra": dict(own_extra),
            "summary_notes": dict(run.summary_notes),
            "summary_scope": scope_words(run, upto),
            **({"upto": upto} if upto is not None else {}),
            **({"at_turn": at_turn} if at_turn else {}),
            "absent": {**run.absent, **left_out},
            "meta": typed_meta(run.meta),
            "mode": None if mode == "none" else mode,
            "mode_reason": why,
            "derived": derived,
            "turns": run.turn_count,
            "n_layer": run.n_layer,
            "n_expert": run.n_expert,
            "top_k": run.top_k,
            "routing_rows": run.routes.total,
            "problems": run.problem_count,
            "alerts": list(run.alerts),
            "sidecar": dict(run.sidecar),
            "status": run.status,
            "status_detail": run.status_detail,
            "row_unit": run.row_unit,
            "sources": list(run.sources),
        }
        tiers = tier_split(run, upto)
        if tiers is not None:  # absent when the source sent no tiers, never 0
            doc["tiers"] = tiers
        if turns:
            doc["turn_list"] = turn_list(run)
            doc["diagnosis"] = diagnosis_document(diagnose(run)[1])
        return doc


def summary_rows(s: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The run panel's summary rows from :func:`run_summary`: (label, text, kind); kind ``""`` for
    the source's own number, ``derived`` for what the token rows give when the source has no
    end-of-run number (still streaming, or a source without a summary), ``missing`` when neither
    exists (the text is the source's own word for it when it has one: ``not exported``). Labels
    are the catalogue's; one that another scope shares names this one (``tok/s (since start)``,
    ``read (turn 3)``: ``summary_scope``). A label or value says how a figure is counted when the
    source says (``50.0 per stream``, ``TTFT/turn``, ``read payload``); then the
    :data:`EXTRA_FIELDS` the source gave. ``replay --summary`` prints exactly these rows."""
    rows = []
    derived = s["derived"]
    extra = s.get("extra") or {}
    absent = s.get("absent") or {}
    notes = s.get("summary_notes") or {}
    at_turn = s.get("at_turn") or {}
    words = {"summary": (s.get("summary_scope") or "run").split(" (")[0]}  # the heading says the detail
    live = s.get("status") in (Status.GENERATING, Status.LOADING)
    from_file = s.get("status") == Status.REPLAY  # a recorded file: what it lacks it never had
    for key, _label, _unit in SUMMARY_FIELDS:
        qty = _SUMMARY_Q[key]
        label = qty.screen_label(**words)
        v = s.get(key)
        kind = ""
        per_stream = notes.get(key, "").startswith("per stream")
        if key == "ttft_s" and notes.get(key, "").startswith("per turn"):
            label = "TTFT/turn"  # without the model load bmoe-cli's TTFT adds
        named = _DEFINED_LABELS.get(key)
        if named is not None and (named[0] in extra or named[1] in extra or derived.get("aligned_rows")):
            label = named[2]
        if v is None and key in absent:
            rows.append((label, absent[key], MISSING))
            continue
        if v is None and derived.get(key) is not None:
            v, kind = derived[key], "derived"
        if v is None and key == "cache_hit_pct" and from_file and "from_routing" not in derived:
            rows.append((label, "not in this source", MISSING))  # absent is not "no cache": it never said
            continue
        if v is None:
            rows.append((label, MISSING, MISSING))
            continue
        if key == "cache_hit_pct" and v < 0:
            rows.append((label, NO_CACHE, kind))
            continue
        if key == "stall_s_tok" and not v and s.get("mode") == "serial":
            rows.append((label, "none (serial I/O)", kind))
            continue
        text = show(qty, v) + (" per stream" if per_stream else "")
        if key in at_turn.get("keys", ()) or (kind and key == "prefill_tps"
                                                and {"n_prompt", "prefill_s"} <= set(at_turn.get("keys", ()))):
            text += f" (turn {at_turn['turn']})"
        if kind and not s.get("upto"):  # (the heading of rows up to a viewed one says where they end)
            note = qty.running_words() if live else ("from routing" if key in derived.get("from_routing", ())
                                                     else "from token rows")
            text += f" ({note})" if note else ""
        rows.append((label, text, kind))
    for x in _EXTRA_Q:
        v = extra.get(_EXTRA_SPELLINGS.get(x.field, (x.field,))[0])
        if v is None:
            continue
        label = x.screen_label(**words)
        if x.field.startswith("hit_pct") and v < 0:  # -1: no cache
            rows.append((label, NO_CACHE, ""))
        else:
            rows.append((label, show(x, v), ""))
    return rows


def summary_text(s: Mapping[str, Any]) -> str:
    """``replay --summary``: the run panel's numbers as text (same rows, same marks)."""
    lines = [f"sources: {', '.join(s['sources'])}"]
    meta = s["meta"]
    lines.append(f"model: {meta.get('model', MISSING)}  arch: {meta.get('arch', MISSING)}  "
                 f"layers: {s['n_layer'] or MISSING}  experts: {s['n_expert'] or MISSING}")
    if s["mode"] is not None:
        lines.append(f"mode: {s['mode']} ({s['mode_reason']})")
    for alert in s.get("alerts") or ():
        lines.append(f"alert: {alert}")
    for label, text, _kind in summary_rows(s):
        lines.append(f"  {label:<16} {text}")
    lines.append(f"token rows: {s['derived']['token_rows']}  turns: {s['turns']}  "
                 f"routing rows: {s['routing_rows']}  problems: {s['problems']}")
    if is_session(s.get("turn_list", ())):
        lines.extend(turns_text(s["turn_list"]))
    dev = device_rows(s["sidecar"])
    if dev:
        lines.append("device:")
        lines.extend(f"  {label:<16} {value}" for label, value, _kind in dev)
    return "\n".join(text_line(x) for x in lines)


#: The breakdown mode in plain words: what "flash wait" is in each mode.
MODE_WORDS = {
    "overlap": "overlapped I/O: flash wait = stall",
    "serial": "serial I/O: flash wait = io",
    "unknown": "unknown (drawn as serial)",
}


def mode_words(mode: str) -> str:
    """The mode in plain words (the contract detail: docs/telemetry.md "The contract as bmoe-run writes it")."""
    return MODE_WORDS.get(mode, mode)


#: Device sidecar keys (``key=value`` lines) -> (label, unit converter): the memory and heat
#: numbers a phone run is about. Values in kB, deci- and milli-degrees are shown in MiB / °C.
_DEVICE = (
    ("peak_rss_kb", "peak RSS", "kb"),
    ("mem_avail_before_kb", "avail before", "kb"),
    ("mem_avail_floor_kb", "avail floor", "kb"),
    ("mem_avail_after_kb", "avail after", "kb"),
    ("cpu_temp_before_mC", "CPU temp", "mC"),
    ("cpu_temp_max_mC", "CPU temp max", "mC"),
    ("cpu_temp_after_mC", "CPU temp after", "mC"),
    ("batt_temp_before_dC", "battery temp", "dC"),
    ("batt_temp_max_dC", "battery max", "dC"),
    ("batt_temp_after_dC", "battery after", "dC"),
)


def _device_value(raw: str, unit: str) -> str | None:
    try:
        x = float(raw)
    except ValueError:
        return None
    if unit == "kb":
        return mib(x / 1024.0)
    if unit == "mC":
        return f"{x / 1000.0:.1f} °C"
    if unit == "dC":
        return f"{x / 10.0:.1f} °C"
    return raw


def device_rows(sidecar: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The device sidecar as (label, value, kind) rows (peak RSS, available memory, CPU and
    battery temperature, in MiB/GiB and °C); other keys follow verbatim. Empty without a sidecar."""
    out: list[tuple[str, str, str]] = []
    seen = set()
    for key, label, unit in _DEVICE:
        raw = sidecar.get(key)
        if raw is None:
            continue
        seen.add(key)
        v = _device_value(str(raw), unit)
        if v is not None:
            out.append((label, v, ""))
    for key, raw in sidecar.items():
        if key not in seen:
            out.append((key, str(raw), ""))
    return out


class TierDoc(TypedDict, total=False):
    """The ``tiers`` block of the run document (docs/memory.md "The three tiers in bmoe-run"):
    keys are the catalogue's ``tier.<key>`` quantities. ``cache`` / ``page_cache`` / ``disk`` the
    routed experts each tier served (counts) and ``*_pct`` their shares of ``routed`` (present when
    the rows carry hits and misses); ``page_cache_mib`` / ``disk_mib`` the expert payload MiB each
    served; ``rss_anon`` / ``rss_file`` / ``mem_available`` bytes, the live child's newest reading
    (None: the kernel did not say; absent when no process was read). Every key may be absent
    (``total=False``): a figure the source did not send is left out, never 0."""

    routed: int
    cache: int
    page_cache: int
    disk: int
    cache_pct: float
    page_cache_pct: float
    disk_pct: float
    page_cache_mib: float
    disk_mib: float
    rss_anon: int | None
    rss_file: int | None
    mem_available: int | None


#: The tier counts: (the catalogue's share quantity, the document's count key, the token column).
_TIER_COUNTS = (("tier.cache_pct", "cache", "hits"), ("tier.page_cache_pct", "page_cache", "misses_pagecache"),
                ("tier.disk_pct", "disk", "misses_disk"))
_TIER_MIB = (("tier.page_cache_mib", "pagecache_mib"), ("tier.disk_mib", "disk_mib"))
_TIER_MEMORY = ("tier.rss_anon", "tier.rss_file", "tier.mem_available")


def tier_split(run: RunModel, stop: int | None = None) -> TierDoc | None:
    """The routed experts of the token rows up to ``stop`` (default all) split by the tier that
    served them (:data:`~bmoe_top.tui.model.quantities.TIERS`), the MiB each served, and the
    runtime process's RSS split and MemAvailable beside them (a live child): :class:`TierDoc`.
    None when the source sends no tiers (a runtime that cannot tell): absent, never 0."""
    doc: dict[str, Any] = {}
    with run.lock:
        stats = {col: run.column_stats(col, 0, stop) for _k, _d, col in _TIER_COUNTS if run.tokens.has(col)}
        mib = {key: run.column_stats(col, 0, stop) for key, col in _TIER_MIB if run.tokens.has(col)}
        pm = run.process_memory
    if len(stats) == len(_TIER_COUNTS) and stats["hits"].count:
        counts = {dkey: int(stats[col].sum) for _k, dkey, col in _TIER_COUNTS}
        routed = sum(counts.values())
        doc["routed"] = routed
        doc.update(counts)
        if routed > 0:
            for key, dkey, _col in _TIER_COUNTS:
                doc[key.removeprefix("tier.")] = 100.0 * counts[dkey] / routed
    for key, st in mib.items():
        if st.count:
            doc[key.removeprefix("tier.")] = float(st.sum)
    if not doc:
        return None
    if pm is not None:  # the RAM beside the tiers, for a runtime that sends them
        for key, v in zip(_TIER_MEMORY, (pm.rss_anon, pm.rss_file, pm.mem_available), strict=True):
            doc[key.removeprefix("tier.")] = v
    return cast("TierDoc", doc)


#: The heading of the run panel's "memory tiers" section: the only rows that draw the process
#: memory reading (a panel without it draws the same whatever the reading).
TIERS_HEADING = "memory tiers"


def tier_rows(run: RunModel, stop: int | None = None) -> list[tuple[str, str, str]]:
    """The run panel's "memory tiers" section: :func:`tier_split` as (label, value, kind) rows
    under a section heading. Empty when the source sends no tiers."""
    doc = tier_split(run, stop)
    if doc is None:
        return []
    d: Mapping[str, Any] = doc
    out: list[tuple[str, str, str]] = [(TIERS_HEADING, "", "section")]
    keys = [k for k, _d, _c in _TIER_COUNTS] + [k for k, _c in _TIER_MIB]
    for key in keys:
        if key.removeprefix("tier.") in d:
            x = q(key)
            out.append((x.label, show(x, d[key.removeprefix("tier.")]), "derived"))
    for key in _TIER_MEMORY:
        short = key.removeprefix("tier.")
        if short in d:
            x, v = q(key), d[short]
            out.append((x.label, MISSING if v is None else show(x, v), MISSING if v is None else ""))
    return out


def alert_rows(active: Sequence[Active]) -> list[tuple[str, str, str]]:
    """One row per pending or firing alert (firing first): the rule's name, then its state; a
    firing one with the reading against the condition and since when (s of the run's clock),
    kind ``problem``; a pending one only since when, one short line (a rule near its threshold
    goes pending and back often: a long row moved every row under it each time)."""
    out = []
    for a in active:
        if a.state is not AlertState.FIRING:
            out.append((a.rule.name, f"pending since {a.since:,.1f} s (fires at {a.since + a.rule.for_s:,.1f} s)",
                        ""))
            continue
        x = q(a.rule.key)
        value = show(x, a.value) if a.value is not None else MISSING
        out.append((a.rule.name, f"{a.state.value}: {x.label} {value} {a.rule.op} {a.rule.threshold:g}, "
                    f"since {a.since:,.1f} s", "problem"))
    return out


def run_panel_rows(run: RunModel, cursor: int, playing: str = "",
                   alerts: Sequence[Active] = ()) -> list[tuple[str, str, str]]:
    """The run panel: (label, value, kind) rows, the status, the position and the numbers first,
    the model (its file, arch, layers, experts, flags) after them; kind ``missing`` (the source did not send it),
    ``derived`` (from the token rows), ``name`` (the model), ``problem``, or ``""``. ``cursor`` is
    the rows shown (playback): before the newest row the numbers are the rows' up to it (the
    heading says so: ``tokens 1-199``), as the title's and the views' are; ``playing`` a label
    after the position (e.g. ``"▶ 4x"``). A live source's newest row (the runtime's head) is named
    once, in the title; the position row says the row shown. ``alerts``: the pending and firing
    alerts (:func:`alert_rows`), under the status."""
    n = run.tokens.n or run.route_token_count()  # a routing trace alone: its decode tokens are the rows
    upto = cursor if 0 < cursor < n else None
    s = run_summary(run, stop=upto, turns=False)
    meta = s["meta"]
    out: list[tuple[str, str, str]] = []

    def row(label: str, value: str, kind: str = "") -> None:
        out.append((label, value, MISSING if value == MISSING else kind))

    detail = s["status_detail"]
    status = detail if detail and detail.startswith(s["status"]) else s["status"] + (f" — {detail}" if detail else "")
    row("status", status)
    out.extend(alert_rows(alerts))
    position = f"{cursor:,}" if run.status.live else f"{cursor:,} / {n:,}"
    row(str(s["row_unit"]), position + (f"  {playing}" if playing else ""))
    if s["mode"] is not None:
        row("mode", mode_words(s["mode"]))
    out.append(("", "", ""))
    out.append((s["summary_scope"], "", "section"))
    for label, text, kind in summary_rows(s):
        row(label, text, kind)
    out.extend(tier_rows(run, upto))
    # what does not change while the run goes on comes after its numbers (a short panel shows
    # the numbers, not the model's name)
    out.append(("model", "", "section"))
    model = meta.get("model") or meta.get("recording_source") or MISSING
    row("file", model.rsplit("/", 1)[-1], "name")
    row("arch", meta.get("arch", MISSING))
    row("layers", fmt(s["n_layer"]) if s["n_layer"] else MISSING)
    experts = fmt(s["n_expert"]) if s["n_expert"] else MISSING
    if s["top_k"]:
        experts += f", top-{s['top_k']}"
    row("experts", experts)
    flags = " ".join(f"{k}={v}" for k, v in meta.items() if k in FLAG_KEYS)
    row("flags", flags or MISSING)
    dev = device_rows(s["sidecar"])
    if dev:
        out.append(("device", "", "section"))
        out.extend(dev)
    if s["problems"]:
        row("problems", f"{s['problems']} bad lines (4)", "problem")
    return safe_rows(out)
