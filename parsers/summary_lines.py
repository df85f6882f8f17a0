"""End-of-run text lines and key=value sidecars.

Contract: ../shared/seeds/telemetry-contract.md "End-of-run lines" (``=== answer ===`` /
``=== perf ===`` banners, ``generation:``, ``moe-stream:``, ``moe-cache:``, ``moe-prefetch:``,
``moe-spec-gate:``, ``stall_s/tok=`` under ``--overlap``) and "CSV sink" (the ``# summary`` keys),
plus lines real runs print that the contract does not list (``prefill:``, ``compute:``,
``moe-overlap:``, ``mode:``, ``moe-waits:``, ``moe-drop:``, the ``moe-cache:`` churn line and
the auto-budget form, and bmoe-cli's ``moe-substitute:``, ``moe-rows:``, ``moe-route-ahead:``
and ``moe-predict:`` lines).

A line of a known kind whose shape drifted from these forms (``generation: 64 tokens in 20.29 s,
3.15 tok/s``; ``moe-stream: read 1843.2 MiB in 4.1 s (449.6 MiB/s)``) still gives every number it
carries: each quantity is recognised by its unit and the word before it (``N tokens``, ``in S s``,
``T tok/s``, ``read M MiB``, ``B MiB/s``, ``P% hit`` ...), and ``SummaryLine.exact`` is False. A
line that starts like a summary line but carries no number of its kind is "unparsed": returned
with its text, for the UI to show as it is.

Values use the CANONICAL summary keys below (units in the name: ``_s`` seconds, ``_mib`` MiB,
``_pct`` percent, ``_tok`` per generated token). Keys without a canonical name keep the
``# summary`` spelling (``majflt/tok``, ``cpu_s/tok``), so a text log and a CSV of the same run
give the same dict. docs/telemetry.md "Summary keys".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

__all__ = [
    "SummaryLine", "parse_summary_line", "canonical_summary", "CANONICAL_KEYS",
    "CSV_TO_CANONICAL", "derive_summary", "exact_sum", "looks_like_summary",
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
    "moe-waits", "moe-drop", "moe-substitute", "moe-rows", "moe-route-ahead", "moe-predict"
    (a known line may carry no number: values {}), "sidecar" (values {key: number or string}),
    or "unparsed" (the line starts like a summary line but its shape is unknown, or its numbers
    cannot be read for sure: values {"kind": <prefix>, "text": line[, "why": reason]}; report it,
    show ``text`` as it is). ``exact``: False when the numbers were read from a drifted
    form by their units (see the module doc). ``raw``: the line as given, stripped.
    """

    kind: str
    values: dict[str, float | str] = field(default_factory=dict)
    exact: bool = True
    raw: str = ""


_F = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
_I = r"(\d+)"
_DASH = r"(?:\u2014|--?)"  # bmoe-cli prints an em dash; a log that went through ASCII has - or --

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
    "moe-substitute": [
        (re.compile(rf"moe-substitute:\s+{_I}/{_I} reranked slots went to a resident expert"
                    rf"(?: \({_F}%\))?(?:, margin {_F})?"),
         ("experts_substituted", "experts_reranked", "experts_substituted_pct", "substitute_margin")),
    ],
    "moe-rows": [
        (re.compile(rf"moe-rows:\s+{_F} MiB of row-gathered table\S* off the resident set, {_F} MiB resident, "
                    rf"{_I} rows gathered, {_I} reads \({_F} MiB\)"),
         ("rows_table_mib", "rows_resident_mib", "rows_gathered", "rows_reads", "rows_read_mib")),
        (re.compile(rf"moe-rows:\s+{_I} FAILED reads"), ("rows_failed_reads",)),
    ],
    # bmoe-cli --route-ahead N (BigMoeOnEdge docs/route-ahead.md)
    "moe-route-ahead": [
        (re.compile(rf"moe-route-ahead:\s+{_I} layers? early {_DASH} {_I} routings committed, {_I} passed through; "
                    rf"committed selection agreed with the router on {_F}% of slots"),
         ("route_ahead_layers", "route_ahead_committed", "route_ahead_passed", "route_ahead_agree_pct")),
        (re.compile(rf"moe-route-ahead:\s+prediction {_F} ms/token of worker CPU \({_I} GEMVs, {_F} ms each\)"
                    rf"(?: \+ {_F} ms/token issuing the reads)?(?: \+ {_F} ms/token watchdog)?"),
         ("route_ahead_cpu_ms/tok", "route_ahead_gemvs", "route_ahead_gemv_ms", "route_ahead_issue_ms/tok",
          "route_ahead_watchdog_ms/tok")),
    ],
    # bmoe-cli --predict-log (BigMoeOnEdge docs/expert-prediction.md): slot overlap and whole
    # routings of each predictor, then how many routings each was scored on
    "moe-predict": [
        (re.compile(rf"moe-predict:\s+stale-gate {_F}% of routed slots \({_F}% whole routings\) \| "
                    rf"prev-token {_F}% \({_F}%\) \| fresh-gate control {_F}% \({_F}%\)"),
         ("predict_stale_pct", "predict_stale_exact_pct", "predict_prev_pct", "predict_prev_exact_pct",
          "predict_control_pct", "predict_control_exact_pct")),
        (re.compile(rf"moe-predict:\s+stale-2 \(two layers early\) {_F}% of routed slots \({_F}% whole routings\)"),
         ("predict_stale2_pct", "predict_stale2_exact_pct")),
        (re.compile(rf"moe-predict:\s+scored {_DASH} stale-gate {_I} routings/{_I} slots, prev-token {_I}/{_I}, "
                    rf"control {_I}/{_I}; {_I} routings the stale-gate could not rank"),
         ("predict_stale_routings", "predict_stale_slots", "predict_prev_routings", "predict_prev_slots",
          "predict_control_routings", "predict_control_slots", "predict_unscored")),
        # a note with no number (its text goes on over the next lines): known, nothing to read
        (re.compile(r"moe-predict:\s+the control is below 100%"), ()),
    ],
    "mode": [
        (re.compile(r"mode:\s+(.+)"), ("mode",)),
    ],
}
_STRING_VALUES = frozenset({"prefetch_mode", "mode"})

# Drifted forms: each quantity found by its unit and context anywhere in the line (first match wins).
_NUMS = r"(?<![\w.])"  # a number starts a token
_DRIFT: dict[str, list[tuple[re.Pattern[str], str]]] = {
    kind: [(re.compile(rx), key) for rx, key in pairs] for kind, pairs in {
        "generation": [
            (rf"{_NUMS}{_I}\s*tokens?\b", "tokens"),
            (rf"{_NUMS}{_F}\s*s/tok(?:en)?\b", "s_per_tok"),
            (rf"{_NUMS}{_F}\s*tok(?:ens)?/s\b", "tok_s"),
            (rf"{_NUMS}{_F}\s*(?:s|sec|seconds)(?![\w/])", "generation_s"),
        ],
        "prefill": [
            (rf"{_NUMS}{_I}\s*tokens?\b", "n_prompt"),
            (rf"model load\s*{_F}\s*s\b", "load_s"),
            (rf"TTFT\s*{_F}\s*s\b", "ttft_s"),
            (rf"{_NUMS}{_F}\s*tok(?:ens)?/s\b", "prefill_tps"),
            (rf"(?<!load )(?<!TTFT ){_NUMS}{_F}\s*(?:s|sec|seconds)(?![\w/])", "prefill_s"),
        ],
        "moe-stream": [
            (rf"read\s*{_F}\s*MiB(?![\w/])", "read_mib"),
            (rf"{_NUMS}{_F}\s*MiB/tok(?:en)?\b", "read_mib_per_tok"),
            (rf"{_NUMS}{_F}\s*MiB/s\b", "read_mib_s"),
            (rf"decode\s*{_F}\s*s/tok(?:en)?\b", "s_per_tok"),
            (rf"compute\s*{_F}", "compute_s_tok"),
            (rf"cache mgmt\s*{_F}", "mgmt_s_tok"),
            (rf"(?:flash )?I/O\s*{_F}", "io_s_tok"),
            (rf"\bin\s*{_F}\s*(?:s|sec|seconds)(?![\w/])", "io_s"),
            (rf"stall_s/tok\s*=\s*{_F}", "stall_s_tok"),
        ],
        "moe-cache": [
            (rf"{_NUMS}{_F}\s*%\s*hit", "cache_hit_pct"),
            (rf"hit(?: rate)?\s*{_F}\s*%", "cache_hit_pct"),
            (rf"resident\s*{_F}\s*MiB", "resident_mib"),
            (rf"budget\s*{_F}\s*MiB", "budget_mib"),
            (rf"{_NUMS}{_I}\s*evictions?\b", "cache_evictions"),
            (rf"{_NUMS}{_I}\s*re-?reads?\b", "cache_rereads"),
        ],
        "moe-prefetch": [
            (rf"{_NUMS}{_F}\s*MiB", "prefetch_mib"),
            (rf"{_NUMS}{_I}\s*/\s*\d+\s*experts", "prefetch_useful"),
            (rf"{_NUMS}\d+\s*/\s*{_I}\s*experts", "prefetch_total"),
            (rf"{_NUMS}{_F}\s*%", "prefetch_useful_pct"),
        ],
        "moe-spec-gate": [
            (rf"{_NUMS}{_F}\s*%\s*(?:router )?(?:prediction )?recall", "spec_recall_pct"),
            (rf"recall\s*{_F}\s*%", "spec_recall_pct"),
        ],
        "moe-overlap": [
            (rf"stall\s*{_F}\s*s/tok(?:en)?\b", "stall_s_tok"),
        ],
        "compute": [
            (rf"{_NUMS}{_F}\s*%\s*CPU", "cpu_occupancy_pct"),
            (rf"{_NUMS}{_F}\s*cpu-s/tok(?:en)?\b", "cpu_s/tok"),
            (rf"{_NUMS}{_I}\s*threads?\b", "threads"),
            (rf"{_NUMS}{_F}\s*major faults/tok(?:en)?\b", "majflt/tok"),
        ],
    }.items()
}


def _drifted(kind: str, s: str) -> dict[str, float | str]:
    """The numbers of a line of ``kind`` whose shape is not one of the exact forms, by their units."""
    values: dict[str, float | str] = {}
    body = s[s.index(":") + 1:]
    for rx, key in _DRIFT.get(kind, ()):
        if key in values:
            continue
        m = rx.search(body)
        if m is not None:
            values[key] = _num(m.group(1))
    if kind == "generation" and "s_per_tok" not in values:
        gs, n = values.get("generation_s"), values.get("tokens")
        if isinstance(gs, float) and isinstance(n, float) and n > 0:
            values["s_per_tok"] = gs / n
    return values

_STALL = re.compile(rf"stall_s/tok\s*=\s*{_F}")
#: Extensions bmoe-run appends after a contract line's own shape (docs/telemetry.md "Additive
#: fields"): searched after the exact match, each (pattern, the keys of its groups).
_EXTENSIONS: dict[str, list[tuple[re.Pattern[str], tuple[str, ...]]]] = {
    "generation": [(re.compile(rf";\s*{_F} tok/s in llama_decode alone"), ("decode_tok_s",))],
    "moe-stream": [(re.compile(rf"page-aligned {_F} MiB \({_F} MiB/token\)"), ("xfer_mib", "xfer_mib_tok"))],
    "moe-cache": [(re.compile(rf"decode only; {_F}% hit since load"), ("hit_pct_since_load",))],
}
_BANNER = re.compile(r"===\s*(answer|perf)\s*===")
_KIND = re.compile(r"(generation|prefill|compute|mode|moe-[a-z][a-z0-9-]*):(?:\s|$)")
_SIDECAR = re.compile(r"([A-Za-z_][\w.\-/]*)=(\S*)")


def _num(s: str) -> float:
    return float(s)


# Numbers with a separator between digits, and the forms that decide how a line writes them.
_SEP_NUM = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)+")
_COMMA_THOUSAND = re.compile(r"[1-9]\d{0,2},\d{3}")  # 1,234: thousands, or 1.234 with a decimal comma
_DOT_THOUSAND = re.compile(r"[1-9]\d{0,2}\.\d{3}")  # 1.234: 1.234, or 1234 grouped by a de_DE locale
_DOTS_GROUPED = re.compile(r"[1-9]\d{0,2}(?:\.\d{3}){2,}")
_COMMA_LINE = re.compile(r"(?:[1-9]\d{0,2}(?:\.\d{3})+|\d+)(?:,\d+)?")
_POINT_LINE = re.compile(r"[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")


def _convention(n: str) -> str | None:
    """Which decimal mark the number ``n`` shows for sure: ``"comma"`` (``0,317``, ``1.234,5``,
    ``1.234.567``), ``"point"`` (``0.317``, ``1,234.5``, ``1,234,567``), or None (``1,234`` and
    ``1.234`` read either way)."""
    c, d = n.count(","), n.count(".")
    if c and d:
        return "comma" if n.rfind(",") > n.rfind(".") else "point"
    if c:
        return "point" if c > 1 else None if _COMMA_THOUSAND.fullmatch(n) else "comma"
    if d > 1:
        return "comma" if _DOTS_GROUPED.fullmatch(n) else None
    return None if _DOT_THOUSAND.fullmatch(n) else "point"


def _commas(s: str) -> tuple[str, str | None]:
    """``s`` with its numbers in the decimal-point form, or ``(s, why)`` when they cannot be read
    for sure. A line without a comma between digits is left as it is (a decimal point, the C and
    Python default). Otherwise the line's numbers decide: one that shows a decimal comma
    (``0,317 s/token``, a C runtime under a de_DE LC_NUMERIC) makes every ``d,d`` a decimal and
    every ``.`` between digit groups a thousands mark; one that shows a decimal point (``0.317``,
    ``1,234,567``) makes every ``,`` a thousands mark. Both at once, a number that fits neither,
    or only numbers like ``3,152`` (3.152 or 3152) are refused, never read as one of them."""
    nums = _SEP_NUM.findall(s)
    if not any("," in n for n in nums):
        return s, None
    seen = {c for n in nums if (c := _convention(n)) is not None}
    if seen == {"comma", "point"}:
        a = next(n for n in nums if _convention(n) == "comma")
        b = next(n for n in nums if _convention(n) == "point")
        return s, f"{a} has a decimal comma and {b} a decimal point: the numbers cannot be read for sure"
    if "comma" in seen:
        if (bad := next((n for n in nums if not _COMMA_LINE.fullmatch(n)), None)) is not None:
            return s, f"{bad} does not fit the line's decimal commas"
        return _SEP_NUM.sub(lambda m: m.group().replace(".", "").replace(",", "."), s), None
    if "point" in seen:
        if (bad := next((n for n in nums if "," in n and not _POINT_LINE.fullmatch(n)), None)) is not None:
            return s, f"{bad} does not fit the line's thousands separators"
        return _SEP_NUM.sub(lambda m: m.group().replace(",", ""), s), None
    n = next(n for n in nums if "," in n)
    return s, f"{n} could be {n.replace(',', '.')} (a decimal comma) or {n.replace(',', '')} (thousands): not read"


def looks_like_summary(line: str) -> bool:
    """True when ``line`` starts like an end-of-run line (banner or ``generation:`` etc.)."""
    line = line.lstrip("\ufeff").strip()
    return bool(_BANNER.fullmatch(line) or _KIND.match(line))


def parse_summary_line(line: str) -> SummaryLine | None:
    """Parse one end-of-run line; None when it is not one (ordinary text).

    Leading BOM and surrounding whitespace are ignored. Numbers become floats (token counts
    too); ``mode`` and ``prefetch_mode`` stay strings. A ``moe-stream:`` line may carry
    ``stall_s/tok=<s>`` (``--overlap``); bmoe-run's extensions after a line's shape give
    ``decode_tok_s``, ``xfer_mib`` / ``xfer_mib_tok`` and ``hit_pct_since_load`` /
    ``hit_pct_decode`` (docs/telemetry.md "Additive fields"). A drifted form gives the numbers it carries
    (``exact=False``); a summary-like line without them is ``"unparsed"``. Numbers written with
    decimal commas (``0,317 s/token``, a runtime under a de_DE locale) or thousands separators
    (``1,234 tokens``, next to a decimal point) are read as such; a line where ``3,152`` could be
    either is ``"unparsed"`` with its ``why`` (see :func:`_commas`). Never raises.
    """
    s = raw_s = line.lstrip("\ufeff").strip()
    if not s:
        return None
    m = _BANNER.fullmatch(s)
    if m:
        return SummaryLine("banner", {"name": m.group(1)}, raw=s)
    km = _KIND.match(s)
    if km is None:
        sm = _SIDECAR.fullmatch(s)
        if sm is None:
            return None
        key, raw = sm.group(1), sm.group(2)
        try:
            return SummaryLine("sidecar", {key: float(raw)}, raw=s)
        except ValueError:
            return SummaryLine("sidecar", {key: raw}, raw=s)
    kind = km.group(1)
    if kind != "mode":
        s, ambiguous = _commas(s)
        if ambiguous is not None:
            return SummaryLine("unparsed", {"kind": kind, "text": raw_s, "why": ambiguous}, raw=raw_s)
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
        for ext, keys in _EXTENSIONS.get(kind, ()):
            em = ext.search(s, m.end())
            if em is not None:
                values.update({k: _num(g) for k, g in zip(keys, em.groups())})
                if kind == "moe-cache" and "cache_hit_pct" in values:
                    values["hit_pct_decode"] = values["cache_hit_pct"]  # the line says it is decode only
        return SummaryLine(kind, values, raw=raw_s)
    drifted = _drifted(kind, s)
    # prose that happens to start with "generation:" carries one number at most: a drifted summary
    # line carries two (moe-overlap and moe-spec-gate lines have one)
    if len(drifted) >= (1 if kind in ("moe-overlap", "moe-spec-gate") else 2):
        return SummaryLine(kind, drifted, exact=False, raw=raw_s)
    return SummaryLine("unparsed", {"kind": kind, "text": raw_s}, raw=raw_s)


def _to_float(v: str) -> float | None:
    try:
        f = float(v)
    except ValueError:
        return None
    return f


def canonical_summary(raw: dict[str, str], derived: set[str] | None = None) -> dict[str, float]:
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
    return derive_summary(out, derived)


def exact_sum(a: float, b: float) -> float:
    """``a + b`` as the decimal numbers a file writes them add up (16.062 + 11.775 = 27.837),
    without binary floating point's noise (27.837000000000003): the sum of their shortest
    decimal forms, rounded once."""
    try:
        return float(Decimal(repr(a)) + Decimal(repr(b)))
    except (InvalidOperation, ValueError):  # an infinity or NaN: the float sum says it
        return a + b


def derive_summary(s: dict[str, float], derived: set[str] | None = None) -> dict[str, float]:
    """Fill canonical keys that follow exactly from others, when the inputs are present and the
    key is missing (in place; returns ``s``; ``derived`` gets the keys filled, so that a figure a
    source states can replace them when files of one run merge). The formulas are the
    runtime's own (bmoe-cli prints TTFT as load + prefill, MiB/token as read / tokens, MiB/s as
    read / io time):

    ``ttft_s = load_s + prefill_s`` (:func:`exact_sum`: no binary noise),
    ``read_mib_per_tok = read_mib / tokens``, ``read_mib_s = read_mib / io_s``.
    """
    def ok(k: str) -> bool:
        v = s.get(k)
        return v is not None and not math.isnan(v)

    added = derived if derived is not None else set()
    if "ttft_s" not in s and ok("load_s") and ok("prefill_s"):
        s["ttft_s"] = exact_sum(s["load_s"], s["prefill_s"])
        added.add("ttft_s")
    if "read_mib_per_tok" not in s and ok("read_mib") and ok("tokens") and s["tokens"] > 0:
        s["read_mib_per_tok"] = s["read_mib"] / s["tokens"]
        added.add("read_mib_per_tok")
    if "read_mib_s" not in s and ok("read_mib") and ok("io_s") and s["io_s"] > 0:
        s["read_mib_s"] = s["read_mib"] / s["io_s"]
        added.add("read_mib_s")
    return s
