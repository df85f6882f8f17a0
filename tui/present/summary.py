"""A run's numbers as the run panel shows them, as plain data: the summary document
(``replay --summary --json``), its rows, its text, and the run panel's rows.

``summary`` holds the source's own end-of-run numbers (CSV ``# summary``, summary lines,
``BMOE_DONE``, ``/metrics`` totals); ``derived`` what bmoe-top computed from the token rows (over
the whole run, also when only the newest rows are held at full resolution).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.present.numbers import MISSING, fmt, mib, num, sig

__all__ = ["FLAG_KEYS", "MODE_WORDS", "SUMMARY_FIELDS", "device_rows", "mode_words", "run_panel_rows", "run_summary",
           "summary_rows", "summary_text"]

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

#: Run-header flags the run panel lists.
FLAG_KEYS = ("moe_stream", "cache_mb", "io_threads", "o_direct", "overlap", "prefetch", "threads", "n_ctx",
             "cache_auto", "force_cache", "dense_weights", "drop_cold_frac")


def run_summary(run: RunModel) -> dict[str, Any]:
    """The numbers the run panel shows, as JSON-ready data (None = missing from the source)."""
    with run.lock:
        s: dict[str, Any] = {key: num(run.summary.get(key)) for key, _, _ in SUMMARY_FIELDS}
        for key in ("tokens", "n_prompt"):
            if s[key] is not None:
                s[key] = int(s[key])
        n = run.tokens.n
        derived: dict[str, Any] = {"token_rows": n}
        if n:
            wall = run.column_stats("wall_ms")
            mean_wall = num(wall.mean) if wall.count else None
            derived["mean_wall_ms"] = mean_wall
            derived["tok_s"] = (1000.0 / mean_wall) if mean_wall else None
            read = run.column_stats("read_mib")
            derived["read_mib"] = num(read.sum) if run.tokens.has("read_mib") else None
            derived["cache_hit_pct"] = num(run.tokens.last("cache_hit_pct"))
            derived["tokens"] = n
            if mean_wall:
                derived["s_per_tok"] = mean_wall / 1000.0
            if derived["read_mib"] is not None:
                derived["read_mib_per_tok"] = derived["read_mib"] / n
        if s.get("prefill_tps") is None and s.get("n_prompt") and s.get("prefill_s"):
            derived["prefill_tps"] = s["n_prompt"] / s["prefill_s"]
        mode, why = run.mode()
        return {
            **s,
            "summary_extra": dict(run.summary_extra),
            "meta": dict(run.meta),
            "mode": mode,
            "mode_reason": why,
            "derived": derived,
            "turns": run.turn_count,
            "n_layer": run.n_layer,
            "n_expert": run.n_expert,
            "top_k": run.top_k,
            "routing_rows": run.routes.total,
            "problems": run.problem_count,
            "sidecar": dict(run.sidecar),
            "status": run.status,
            "status_detail": run.status_detail,
            "row_unit": run.row_unit,
            "sources": list(run.sources),
        }


def summary_rows(s: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The run panel's summary rows from :func:`run_summary`: (label, text, kind); kind ``""`` for
    the source's own number, ``derived`` for what the token rows give when the source has no
    end-of-run number (still streaming, or a source without a summary), ``missing`` when neither
    exists. ``replay --summary`` prints exactly these rows."""
    rows = []
    derived = s["derived"]
    live = s.get("status") in (Status.GENERATING, Status.LOADING)
    for key, label, unit in SUMMARY_FIELDS:
        v = s.get(key)
        kind = ""
        if v is None and derived.get(key) is not None:
            v, kind = derived[key], "derived"
        if v is None:
            rows.append((label, MISSING, MISSING))
            continue
        if key == "cache_hit_pct" and v < 0:
            rows.append((label, "no cache", kind))
            continue
        if unit == "MiB":
            text = mib(v)
        elif key in ("tok_s", "prefill_tps"):
            text = sig(v, 3)
        else:
            text = fmt(v, 3 if unit == "s" else 1, unit)
        if kind:
            text += " (so far)" if live else " (from token rows)"
        rows.append((label, text, kind))
    return rows


def summary_text(s: Mapping[str, Any]) -> str:
    """``replay --summary``: the run panel's numbers as text (same rows, same marks)."""
    lines = [f"sources: {', '.join(s['sources'])}"]
    meta = s["meta"]
    lines.append(f"model: {meta.get('model', MISSING)}  arch: {meta.get('arch', MISSING)}  "
                 f"layers: {s['n_layer'] or MISSING}  experts: {s['n_expert'] or MISSING}")
    lines.append(f"mode: {s['mode']} ({s['mode_reason']})")
    for label, text, _kind in summary_rows(s):
        lines.append(f"  {label:<16} {text}")
    lines.append(f"token rows: {s['derived']['token_rows']}  turns: {s['turns']}  "
                 f"routing rows: {s['routing_rows']}  problems: {s['problems']}")
    if s["sidecar"]:
        lines.append("device: " + " ".join(f"{k}={v}" for k, v in s["sidecar"].items()))
    return "\n".join(lines)


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
    s = run_summary(run)
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
    return out
