"""End-of-run text lines and key=value sidecars.

Contract: ../shared/seeds/telemetry-contract.md "End-of-run lines" (``=== answer ===`` /
``=== perf ===`` banners, ``generation:``, ``moe-stream:``, ``moe-cache:``, ``moe-prefetch:``,
``moe-spec-gate:``, ``stall_s/tok=`` under ``--overlap``) and "CSV sink" (the ``# summary`` keys),
plus lines real runs print that the contract does not list (``prefill:``, ``compute:``,
``moe-overlap:``, ``mode:``, ``moe-waits:``, ``moe-drop:``, the ``moe-cache:`` churn line and
the auto-budget form).

Values use the CANONICAL summary keys below (units in the name: ``_s`` seconds, ``_mib`` MiB,
``_pct`` percent, ``_tok`` per generated token). Keys without a canonical name keep the
``# summary`` spelling (``majflt/tok``, ``cpu_s/tok``), so a text log and a CSV of the same run
give the same dict.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = [
    "SummaryLine", "parse_summary_line", "canonical_summary", "CANONICAL_KEYS",
    "CSV_TO_CANONICAL", "derive_summary", "looks_like_summary",
]

#: The keys the run panel shows, in display order.
CANONICAL_KEYS: tuple[str, ...] = (
    "tokens", "s_per_tok", "tok_s", "read_mib", "read_mib_per_tok", "read_mib_s", "io_s",
    "compute_s_tok", "mgmt_s_tok", "io_s_tok", "stall_s_tok", "cache_hit_pct", "resident_mib",
    "budget_mib", "n_prompt", "load_s", "prefill_s", "prefill_tps", "ttft_s", "prefetch_mib",
    "prefetch_useful", "prefetch_total", "spec_recall_pct",
)

#: ``# summary`` key (CSV sink) -> canonical key.
CSV_TO_CANONICAL: dict[str, str] = {
    "tokens": "tokens",
    "s/tok": "s_per_tok",
    "tok/s": "tok_s",
    "read_MiB": "read_mib",
    "read_MiB/tok": "read_mib_per_tok",
    "read_MiB/s": "read_mib_s",
    "io_s": "io_s",
    "compute_s/tok": "compute_s_tok",
    "mgmt_s/tok": "mgmt_s_tok",
    "io_s/tok": "io_s_tok",
    "stall_s/tok": "stall_s_tok",
    "cache_hit_pct": "cache_hit_pct",
    "cache_resident_MiB": "resident_mib",
    "cache_budget_MiB": "budget_mib",
    "n_prompt": "n_prompt",
    "load_s": "load_s",
    "prefill_s": "prefill_s",
    "prefill_tps": "prefill_tps",
    "ttft_s": "ttft_s",
    "spec_read_MiB": "prefetch_mib",
    "spec_useful": "prefetch_useful",
    "spec_experts": "prefetch_total",
    "spec_recall_pct": "spec_recall_pct",
}


@dataclass(slots=True)
class SummaryLine:
    """One recognised end-of-run line.

    ``kind``: "banner" (values {"name": "answer"|"perf"}), "generation", "prefill", "compute",
    "mode", "moe-stream", "moe-cache", "moe-prefetch", "moe-spec-gate", "moe-overlap",
    "moe-waits", "moe-drop", "sidecar" (values {key: number or string}), or "unparsed" (the line
    starts like a summary line but its shape is unknown: values {"kind": <prefix>, "text": line};
    report it).
    """

    kind: str
    values: dict[str, float | str] = field(default_factory=dict)


_F = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
_I = r"(\d+)"

_PATTERNS: dict[str, list[tuple[re.Pattern[str], tuple[str, ...]]]] = {
    "generation": [
        (re.compile(rf"generation:\s+{_I} tokens?, {_F} s/token \({_F} tok/s\)"),
         ("tokens", "s_per_tok", "tok_s")),
    ],
    "prefill": [
        (re.compile(rf"prefill:\s+{_I} tokens?, {_F} s \({_F} tok/s\)"
                    rf"(?: \| model load {_F} s)?(?: \| TTFT {_F} s)?"),
         ("n_prompt", "prefill_s", "prefill_tps", "load_s", "ttft_s")),
    ],
    "compute": [
        (re.compile(rf"compute:\s+{_F}% CPU occupancy \({_F} cpu-s/token over {_I} threads?\)"
                    rf"(?:, {_F} major faults/token)?"),
         ("cpu_occupancy_pct", "cpu_s/tok", "threads", "majflt/tok")),
    ],
    "moe-stream": [
        (re.compile(rf"moe-stream:\s+read {_F} MiB \({_F} MiB/token\), decode {_F} s/token "
                    rf"\(compute {_F}(?: \+ cache mgmt {_F})? \+ flash I/O {_F} s/token"
                    rf"(?:, {_F} MiB/s)?\)"),
         ("read_mib", "read_mib_per_tok", "s_per_tok", "compute_s_tok", "mgmt_s_tok",
          "io_s_tok", "read_mib_s")),
    ],
    "moe-cache": [
        (re.compile(rf"moe-cache:\s+{_F}% hit, resident {_F} MiB"
                    rf"(?:, budget {_F} MiB \(auto(?:, resized {_I}\S*)?\))?"),
         ("cache_hit_pct", "resident_mib", "budget_mib", "cache_resizes")),
        (re.compile(rf"moe-cache:\s+{_I} evictions, {_I} re-reads \({_F}/token\)"),
         ("cache_evictions", "cache_rereads", "cache_rereads/tok")),
        (re.compile(r"moe-cache:\s+(?:off|disabled|none)\b"), ()),
    ],
    "moe-prefetch": [
        (re.compile(rf"moe-prefetch:\s+{_F} MiB speculative, {_I}/{_I} experts useful"
                    rf"(?: \({_F}%\))?(?: \[([\w-]+)\])?"),
         ("prefetch_mib", "prefetch_useful", "prefetch_total", "prefetch_useful_pct",
          "prefetch_mode")),
    ],
    "moe-spec-gate": [
        (re.compile(rf"moe-spec-gate:\s+{_F}% router prediction recall"
                    rf"(?: \(auto-disabled below {_F}%\))?"),
         ("spec_recall_pct", "spec_auto_disabled_below_pct")),
    ],
    "moe-overlap": [
        (re.compile(rf"moe-overlap:\s+stall {_F} s/token"), ("stall_s_tok",)),
    ],
    "moe-waits": [
        (re.compile(rf"moe-waits:\s+drain {_F} s/token.*?adopt {_F} s/token"),
         ("drain_s/tok", "adopt_s/tok")),
    ],
    "moe-drop": [
        (re.compile(rf"moe-drop:\s+{_I}/{_I} routed experts dropped(?: \({_F}%\))?"
                    rf"(?:, threshold {_F})?"),
         ("experts_dropped", "experts_routed", "experts_dropped_pct", "drop_threshold")),
    ],
    "mode": [
        (re.compile(r"mode:\s+(.+)"), ("mode",)),
    ],
}
_STRING_VALUES = frozenset({"prefetch_mode", "mode"})

_STALL = re.compile(rf"stall_s/tok\s*=\s*{_F}")
_BANNER = re.compile(r"===\s*(answer|perf)\s*===")
_KIND = re.compile(r"(generation|prefill|compute|mode|moe-[a-z][a-z0-9-]*):(?:\s|$)")
_SIDECAR = re.compile(r"([A-Za-z_][\w.\-/]*)=(\S*)")


def _num(s: str) -> float:
    return float(s)


def looks_like_summary(line: str) -> bool:
    """True when ``line`` starts like an end-of-run line (banner or ``generation:`` etc.)."""
    line = line.lstrip("\ufeff").strip()
    return bool(_BANNER.fullmatch(line) or _KIND.match(line))


def parse_summary_line(line: str) -> SummaryLine | None:
    """Parse one end-of-run line; None when it is not one (ordinary text).

    Leading BOM and surrounding whitespace are ignored. Numbers become floats (token counts
    too); ``mode`` and ``prefetch_mode`` stay strings. A ``moe-stream:`` line may carry
    ``stall_s/tok=<s>`` (``--overlap``). Never raises.
    """
    s = line.lstrip("\ufeff").strip()
    if not s:
        return None
    m = _BANNER.fullmatch(s)
    if m:
        return SummaryLine("banner", {"name": m.group(1)})
    km = _KIND.match(s)
    if km is None:
        sm = _SIDECAR.fullmatch(s)
        if sm is None:
            return None
        key, raw = sm.group(1), sm.group(2)
        try:
            return SummaryLine("sidecar", {key: float(raw)})
        except ValueError:
            return SummaryLine("sidecar", {key: raw})
    kind = km.group(1)
    for rx, names in _PATTERNS.get(kind, ()):
        m = rx.match(s)
        if m is None:
            continue
        values: dict[str, float | str] = {}
        if kind == "moe-cache" and not names:
            values["cache_hit_pct"] = -1.0  # cache off: the contract's -1 convention
        for name, raw in zip(names, m.groups()):
            if raw is None:
                continue
            values[name] = raw.strip() if name in _STRING_VALUES else _num(raw)
        if kind == "moe-stream":
            st = _STALL.search(s, m.end())
            if st:
                values["stall_s_tok"] = _num(st.group(1))
        return SummaryLine(kind, values)
    return SummaryLine("unparsed", {"kind": kind, "text": s})


def _to_float(v: str) -> float | None:
    try:
        f = float(v)
    except ValueError:
        return None
    return f


def canonical_summary(raw: dict[str, str]) -> dict[str, float]:
    """Map ``# summary`` keys (CSV sink) to canonical keys; values as floats.

    Keys with no canonical name are kept verbatim (``majflt/tok`` survives). A value that is not
    a number is left out (the caller reports it). ``cache_hit_pct`` -1 means "no cache" and is
    kept as -1. Derived keys are added by :func:`derive_summary`.
    """
    out: dict[str, float] = {}
    for k, v in raw.items():
        f = _to_float(v) if isinstance(v, str) else (float(v) if isinstance(v, (int, float)) else None)
        if f is None:
            continue
        out[CSV_TO_CANONICAL.get(k, k)] = f
    return derive_summary(out)


def derive_summary(s: dict[str, float]) -> dict[str, float]:
    """Fill canonical keys that follow exactly from others, when the inputs are present and the
    key is missing (in place; returns ``s``). The formulas are the runtime's own (bmoe-cli prints
    TTFT as load + prefill, MiB/token as read / tokens, MiB/s as read / io time):

    ``ttft_s = load_s + prefill_s``, ``read_mib_per_tok = read_mib / tokens``,
    ``read_mib_s = read_mib / io_s``.
    """
    def ok(k: str) -> bool:
        v = s.get(k)
        return v is not None and not math.isnan(v)

    if "ttft_s" not in s and ok("load_s") and ok("prefill_s"):
        s["ttft_s"] = s["load_s"] + s["prefill_s"]
    if "read_mib_per_tok" not in s and ok("read_mib") and ok("tokens") and s["tokens"] > 0:
        s["read_mib_per_tok"] = s["read_mib"] / s["tokens"]
    if "read_mib_s" not in s and ok("read_mib") and ok("io_s") and s["io_s"] > 0:
        s["read_mib_s"] = s["read_mib"] / s["io_s"]
    return s
