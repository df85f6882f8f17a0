"""A run's numbers as the run panel shows them, as plain data: the summary document
(``replay --summary --json``), its rows, its text, and the run panel's rows.

``summary`` holds the source's own end-of-run numbers (CSV ``# summary``, summary lines,
``BMOE_DONE``, ``/metrics`` totals); ``derived`` what bmoe-top computed from the token rows (over
the whole run, also when only the newest rows are held at full resolution).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.present.numbers import MISSING, count, fmt, mib, num, safe_rows, sig, text_line, whole
from bmoe_top.tui.present.turns import is_session, turn_list, turns_text

__all__ = ["EXTRA_FIELDS", "FLAG_KEYS", "MODE_WORDS", "SUMMARY_FIELDS", "device_rows", "mode_words", "run_panel_rows",
           "run_summary", "summary_rows", "summary_text", "typed_meta"]

#: The run panel's summary rows: (key, label, unit). ``--summary`` prints the same keys.
SUMMARY_FIELDS = (
    ("tokens", "tokens", ""),
    ("tok_s", "tok/s", ""),
    ("s_per_tok", "s/token", "s"),
    ("read_mib", "read", "MiB"),
    ("read_mib_per_tok", "read/token", "MiB"),
    ("cache_hit_pct", "cache hit", "%"),
    ("resident_mib", "resident", "MiB"),
    ("budget_mib", "budget", "MiB"),
    ("n_prompt", "prompt tokens", ""),
    ("prefill_s", "prefill", "s"),
    ("prefill_tps", "prefill tok/s", ""),
    ("load_s", "load", "s"),
    ("ttft_s", "TTFT", "s"),
    ("compute_s_tok", "compute/token", "s"),
    ("io_s_tok", "flash io/token", "s"),
    ("stall_s_tok", "stall/token", "s"),
    ("mgmt_s_tok", "mgmt/token", "s"),
)

#: Rows shown only when the source gives the value: (keys the sources spell it with, label, unit,
#: digits). The two definitions of hit % and of MiB per token are named (docs/telemetry.md
#: "Additive fields"): bmoe-cli's figures are since load / page-aligned, bmoe-run's contract fields
#: decode only / payload; a source that sends only one of them keeps the contract label above.
EXTRA_FIELDS: tuple[tuple[tuple[str, ...], str, str, int], ...] = (
    (("n_prompt_cached",), "prompt cached", "tok", 0),
    (("hit_pct_decode",), "hit decode", "%", 1),
    (("hit_pct_since_load",), "hit since load", "%", 1),
    (("xfer_mib_tok", "xfer_MiB/tok"), "aligned/tok", "MiB", 2),
    (("xfer_mib", "xfer_MiB"), "read aligned", "MiB", 1),
    (("decode_tok_s", "decode_tok/s"), "decode tok/s", "", 1),
    (("cache_evictions",), "evictions", "", 0),
    (("cache_rereads",), "re-reads", "", 0),
    (("cache_rereads/tok",), "re-reads/token", "", 2),
    (("majflt/tok",), "majflt/token", "", 1),
    (("cpu_s/tok", "cpu_s_tok"), "cpu/token", "s", 3),
    (("rss_mib", "rss_MiB"), "RSS", "MiB", 1),
    (("peak_rss_mib", "peak_rss_MiB"), "peak RSS", "MiB", 1),
    (("route_ahead_agree_pct",), "ahead agreed", "%", 1),
    (("predict_stale_pct",), "stale-gate hit", "%", 1),
    (("predict_control_pct",), "predict control", "%", 1),
)

#: Per-token summary keys the token rows give when the source sends no total (key, ms column).
_PER_TOKEN_COLUMNS = (("compute_s_tok", "compute_ms"), ("io_s_tok", "io_ms"), ("stall_s_tok", "stall_ms"),
                      ("mgmt_s_tok", "mgmt_ms"))

#: Extra figures a token row carries that hold for the run so far (shown before the turn's end).
_LIVE_EXTRA = frozenset({"hit_pct_decode", "hit_pct_since_load", "rss_mib"})

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


def run_summary(run: RunModel, *, turns: bool = True) -> dict[str, Any]:
    """The numbers the run panel shows, as JSON-ready data (None = missing from the source).
    ``derived`` covers the token rows of the source's current process only
    (``run.epoch_start``: after a server restart the dead process's rows no longer count);
    ``derived`` also holds the cache's ``resident_mib`` / ``budget_mib`` as the source said them
    last (a token, a load record), for the rows before the first end record;
    ``extra`` the :data:`EXTRA_FIELDS` the source gave (while a turn runs, the figures its newest
    token carries for the run so far); ``absent`` the keys the source cannot give
    with the words shown instead; ``summary_notes`` how a figure is counted; ``alerts`` the lines
    the banner shows; ``mode`` is None when the rows carry no per-token time; ``turn_list``
    every request of the run (:func:`~bmoe_top.tui.present.turns.turn_list`; left out with
    ``turns=False``: the run panel shows the numbers alone)."""
    with run.lock:
        s: dict[str, Any] = {key: num(run.summary.get(key)) for key, _, _ in SUMMARY_FIELDS}
        for key in ("tokens", "n_prompt"):
            s[key] = whole(s[key])
        extra: dict[str, Any] = {}
        for keys, _label, _unit, digits in EXTRA_FIELDS:
            for k in keys:
                v = num(run.summary.get(k))
                if v is None:
                    v = num(run.summary_extra.get(k))
                if v is None and k in _LIVE_EXTRA and run.tokens.has(k):
                    v = num(run.tokens.last(k))  # while the turn runs: its newest token's figure
                if v is not None:
                    extra[keys[0]] = whole(v) if digits == 0 and float(v).is_integer() else v
                    break
        n = run.tokens.n
        lo = min(run.epoch_start, n)
        rows = n - lo
        derived: dict[str, Any] = {"token_rows": n}
        if run.epoch_start:
            derived["epoch_rows"] = rows
        if rows:
            wall = run.column_stats("wall_ms", lo)
            mean_wall = num(wall.mean) if wall.count else None
            derived["mean_wall_ms"] = mean_wall
            derived["tok_s"] = (1000.0 / mean_wall) if mean_wall else None
            read = run.column_stats("read_mib", lo)
            derived["read_mib"] = num(read.sum) if run.tokens.has("read_mib") and read.count else None
            derived["cache_hit_pct"] = num(run.tokens.last("cache_hit_pct"))
            derived["tokens"] = rows
            if mean_wall:
                derived["s_per_tok"] = mean_wall / 1000.0
            if derived["read_mib"] is not None:
                derived["read_mib_per_tok"] = derived["read_mib"] / rows
            for key, column in _PER_TOKEN_COLUMNS:  # a source without these totals still times each token
                if run.tokens.has(column):
                    st = run.column_stats(column, lo)
                    if st.count:
                        derived[key] = num(st.mean / 1000.0)
        if s.get("prefill_tps") is None and s.get("n_prompt") and s.get("prefill_s"):
            derived["prefill_tps"] = s["n_prompt"] / s["prefill_s"]
        if run.resident_mib is not None:  # the cache as the source said it last (a token, a load record)
            derived["resident_mib"] = run.resident_mib
        if run.budget_mib is not None:
            derived["budget_mib"] = run.budget_mib
        mode, why = run.mode()
        doc = {
            **s,
            "extra": extra,
            "summary_extra": dict(run.summary_extra),
            "summary_notes": dict(run.summary_notes),
            "absent": dict(run.absent),
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
        if turns:
            doc["turn_list"] = turn_list(run)
        return doc


#: The hit rate of a run the source says had no expert cache (a hit rate of -1).
NO_CACHE = "no cache (off in this run)"


def summary_rows(s: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The run panel's summary rows from :func:`run_summary`: (label, text, kind); kind ``""`` for
    the source's own number, ``derived`` for what the token rows give when the source has no
    end-of-run number (still streaming, or a source without a summary), ``missing`` when neither
    exists (the text is the source's own word for it when it has one: ``not exported``). A label
    says how a figure is counted when the source says (``tok/s per stream``, ``TTFT/turn``, ``read/tok
    payload``); then the :data:`EXTRA_FIELDS` the source gave. ``replay --summary`` prints exactly
    these rows."""
    rows = []
    derived = s["derived"]
    extra = s.get("extra") or {}
    absent = s.get("absent") or {}
    notes = s.get("summary_notes") or {}
    live = s.get("status") in (Status.GENERATING, Status.LOADING)
    from_file = s.get("status") == Status.REPLAY  # a recorded file: what it lacks it never had
    for key, label, unit in SUMMARY_FIELDS:
        v = s.get(key)
        kind = ""
        if notes.get(key, "").startswith("per stream"):
            label = "tok/s/stream" if key == "tok_s" else "s/tok/stream"
        elif key == "ttft_s" and notes.get(key, "").startswith("per turn"):
            label = "TTFT/turn"  # without the model load bmoe-cli's TTFT adds
        named = _DEFINED_LABELS.get(key)
        if named is not None and (named[0] in extra or named[1] in extra):
            label = named[2]
        if v is None and key in absent:
            rows.append((label, absent[key], MISSING))
            continue
        if v is None and derived.get(key) is not None:
            v, kind = derived[key], "derived"
        if v is None and key == "cache_hit_pct" and from_file:
            rows.append((label, "not in this source", MISSING))  # absent is not "no cache": it never said
            continue
        if v is None:
            rows.append((label, MISSING, MISSING))
            continue
        if key == "cache_hit_pct" and v < 0:
            rows.append((label, NO_CACHE, kind))
            continue
        if key in ("tokens", "n_prompt"):
            text = count(v)
        elif unit == "MiB":
            text = mib(v)
        elif key in ("tok_s", "prefill_tps"):
            text = sig(v, 3)
        else:
            text = fmt(v, 3 if unit == "s" else 1, unit)
        if kind:
            text += " (so far)" if live else " (from token rows)"
        rows.append((label, text, kind))
    for keys, label, unit, digits in EXTRA_FIELDS:
        v = extra.get(keys[0])
        if v is None:
            continue
        if keys[0].startswith("hit_pct") and v < 0:  # -1: no cache
            rows.append((label, NO_CACHE, ""))
        else:
            text = count(v, unit) if digits == 0 else mib(v) if unit == "MiB" else fmt(v, digits, unit)
            rows.append((label, text, ""))
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


def run_panel_rows(run: RunModel, cursor: int, playing: str = "") -> list[tuple[str, str, str]]:
    """The run panel: (label, value, kind) rows; kind ``missing`` (the source did not send it),
    ``derived`` (from the token rows), ``name`` (the model), ``problem``, or ``""``. ``cursor`` is
    the rows shown (playback), ``playing`` a label after it (e.g. ``"▶ 4x"``)."""
    s = run_summary(run, turns=False)
    meta = s["meta"]
    out: list[tuple[str, str, str]] = []

    def row(label: str, value: str, kind: str = "") -> None:
        out.append((label, value, MISSING if value == MISSING else kind))

    model = meta.get("model") or meta.get("recording_source") or MISSING
    row("model", model.rsplit("/", 1)[-1], "name")
    row("arch", meta.get("arch", MISSING))
    row("layers", fmt(s["n_layer"]) if s["n_layer"] else MISSING)
    experts = fmt(s["n_expert"]) if s["n_expert"] else MISSING
    if s["top_k"]:
        experts += f", top-{s['top_k']}"
    row("experts", experts)
    flags = " ".join(f"{k}={v}" for k, v in meta.items() if k in FLAG_KEYS)
    row("flags", flags or MISSING)
    if s["mode"] is not None:
        row("mode", mode_words(s["mode"]))
    detail = s["status_detail"]
    status = detail if detail and detail.startswith(s["status"]) else s["status"] + (f" — {detail}" if detail else "")
    row("status", status)
    row(str(s["row_unit"]), f"{cursor:,} / {s['derived']['token_rows']:,}" + (f"  {playing}" if playing else ""))
    out.append(("", "", ""))
    with run.lock:
        finished = [t for t in run.turns if t.done is not None]
        newest = run.turns[-1] if run.turns else None
    if finished and run.turn_count > 1:  # the source's numbers are its last finished turn's
        t = finished[-1]
        out.append((f"turn {t.index + 1}" + ("" if t is newest else " (last finished)"), "", "section"))
    else:
        out.append(("run so far" if run.status.live else "run", "", "section"))
    for label, text, kind in summary_rows(s):
        row(label, text, kind)
    dev = device_rows(s["sidecar"])
    if dev:
        out.append(("device", "", "section"))
        out.extend(dev)
    if s["problems"]:
        row("problems", f"{s['problems']} bad lines (4)", "problem")
    return safe_rows(out)
