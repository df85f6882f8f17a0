"""The comparison views: what ``bmoe-top compare`` shows and prints (the JSON document, a
markdown table for notes, a CSV, and the screen's tables), from the arms as read
(:class:`LoadedArm`, filled by :func:`bmoe_top.tui.jobs.compare.load_arms`) and the comparison.
The statistics are :mod:`bmoe_top.tui.analysis.compare`'s; docs/analysis.md "Statistics in plain
words" explains them.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt
import orjson

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.numbers import fmt, text_line
from bmoe_top.tui.present.tables import Column, Row, Table, number_key

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.compare import Comparison, Delta, MetricRow, RunInput

__all__ = ["LoadedArm", "LoadedRun", "comparison_document", "comparison_markdown", "comparison_csv",
           "summary_table", "warmup_table", "token_table", "token_series", "delta_text", "metric_label", "arm_names",
           "entry_rows",
           "short_names", "FLASH", "VERDICT_KIND", "CompareDocument", "ComparisonDoc"]

#: :func:`token_series`' column name of each run's own flash wait
FLASH = "flash"

#: verdict -> row kind (styles: bmoe_top.tui.widgets.palette.KIND_STYLE)
VERDICT_KIND = {"better": "good", "worse": "bad", "differs": "bad", "~": "", "same": "", "?": "missing"}


@dataclass(frozen=True, slots=True, eq=False)
class LoadedRun:
    """One run read: ``name``, its ``files``, the run model, and what the comparison takes."""

    name: str
    files: list[str]
    model: RunModel
    input: RunInput


@dataclass(frozen=True, slots=True, eq=False)
class LoadedArm:
    name: str
    runs: list[LoadedRun] = field(default_factory=list)


# ------------------------------------------------------------------------------- rendering
def _fmt_value(v: float, unit: str) -> str:
    digits = 1 if unit in ("ms/token", "ms", "MiB", "%", "°C") else 2 if unit in ("tok/s",) else 3
    return fmt(v, digits)


#: the unit of a percentage: its changes are in percentage points, never a percent of a percent
PERCENT = "%"


#: units written shorter in a metric's name (the summary's first column is never left out)
_UNIT_IN_NAME = {"ms/token": "ms/tok"}


def metric_label(m: MetricRow) -> str:
    """The metric's name with its unit (``wall per token [ms/tok]``) unless the name already
    says it (``tok/s (steady)``, ``decode hit %``): a table too narrow for every column still
    shows what a number counts."""
    if not m.unit or m.unit in m.label:
        return m.label
    return f"{m.label} [{_UNIT_IN_NAME.get(m.unit, m.unit)}]"


def delta_text(d: Delta, unit: str = "") -> str:
    """A delta as the tables print it: the change in percent of the baseline (``-9.4%``), in
    points for a metric that is itself a percentage (``+35.5 pt``), in the metric's unit from a
    baseline of 0 (``+132.6 (from 0)``). The verdict beside it says whether it counts (``~``
    within the noise still shows the change's size: the Hodges-Lehmann shift with several runs);
    ``same`` for exact metrics that agree, ``?`` when there is no change to show."""
    if d.verdict == "same":
        return "same"
    if not math.isfinite(d.change):
        return "?"
    if unit == PERCENT:
        return f"{d.change:+.1f} pt"
    # from a baseline of 0 there is no percentage: the change itself
    return f"{d.change_pct:+.1f}%" if math.isfinite(d.change_pct) else f"{d.change:+.4g} (from 0)"


def _interval_text(d: Delta, base: float, unit: str = "", confidence: float = math.nan) -> str:
    """The delta's interval in percent of the baseline value (in points for a percentage; in the
    metric's unit from a baseline of 0, which has no percentages), its confidence after it when
    lower than the table's ``confidence`` (``[-62.1%, -58.3%] (90%)``: too few runs for 95%)."""
    if not (math.isfinite(d.low) and math.isfinite(d.high) and math.isfinite(base)):
        return ""
    if unit == PERCENT:
        text = f"[{d.low:+.1f} pt, {d.high:+.1f} pt]"
    elif not base:
        text = f"[{d.low:+.4g}, {d.high:+.4g}]"
    else:
        text = f"[{100 * d.low / base:+.1f}%, {100 * d.high / base:+.1f}%]"
    if math.isfinite(d.confidence) and d.confidence < confidence:
        text += f" ({d.confidence:.0%})"
    return text


def _p_text(d: Delta) -> str:
    return f"{d.p:.3f}" if math.isfinite(d.p) else ""


def short_names(names: Sequence[str], width: int = 10, least: int = 5) -> dict[str, str]:
    """Each name cut to its end from where it differs from the others, for a narrow heading: the
    part after their common prefix (``bmoe-20260721-090406``, ``bmoe-20260722-142300`` ->
    ``…1-090406``, ``…2-142300``), at least its last ``least`` characters (a name that is the
    others' prefix: ``bigmoeonedge-2026-07-12`` beside ``…-pr23`` -> ``…07-12``), from the start
    of the word it begins in when that fits (``…cache32``, not ``…che32``), its last ``width``
    characters at most; a name already that short stays whole."""
    if len(names) < 2:
        return {n: n if len(n) <= width else "…" + n[-(width - 1):] for n in names}
    common = len(os.path.commonprefix(list(names)))
    out = {}
    for n in names:
        if len(n) <= width:
            out[n] = n
            continue
        start = max(0, min(common, len(n) - least))
        word = start
        while word > 0 and n[word].isalnum() and n[word - 1].isalnum():
            word -= 1
        if len(n) - word <= width - 1:
            start = word
        out[n] = "…" + n[start:].lstrip()[-(width - 1):]
    return out if len(set(out.values())) == len(out) else {n: n for n in names}


def summary_table(c: Comparison) -> Table:
    """One row per metric, named with its unit: per other arm its delta against the baseline and
    the verdict first (the answer: ``~`` when within the noise, the change's size beside it),
    then each arm's value (with several runs, the median of its runs' values; ``±`` half the
    within-run interval with one run), and per other arm the delta's interval (percent of the
    baseline, points for a percentage) and p."""
    short = short_names(c.arms)
    cols = [Column("metric", "metric", False)]
    for a in c.arms[1:]:
        cols += [Column(f"delta:{a}", f"Δ {a}", short=f"Δ {short[a]}"),
                 Column(f"verdict:{a}", "verdict", False, drop=1)]
    for a in c.arms:
        cols.append(Column(f"value:{a}", a, short=short[a]))
    # narrow: the interval goes first, then p, then the verdict (the values, the delta and the metric
    # with its unit stay)
    for a in c.arms[1:]:
        cols += [Column(f"ci:{a}", f"{c.confidence:.0%} CI of Δ", False, short="CI of Δ", drop=3),
                 Column(f"p:{a}", "p", drop=2)]
    rows = []
    for m in c.metrics:
        name = metric_label(m)
        cells = [name]
        keys: list[float | str] = [name]
        kind = ""
        for d in m.deltas:
            cells += [delta_text(d, m.unit), d.verdict]
            keys += [number_key(d.change if m.unit == PERCENT else d.change_pct), d.verdict]
            kind = kind or VERDICT_KIND.get(d.verdict, "")
        for v in m.values:
            t = m.absent.get(v.arm) or _fmt_value(v.center, m.unit)
            if math.isfinite(v.low) and math.isfinite(v.high):
                t += f" ±{_fmt_value((v.high - v.low) / 2, m.unit)}"
            cells.append(t)
            keys.append(number_key(v.center))
        for d in m.deltas:
            cells += [_interval_text(d, m.values[0].center, m.unit, c.confidence), _p_text(d)]
            keys += [number_key(d.low), number_key(d.p)]
        rows.append(Row(tuple(cells), tuple(keys), kind))
    labels = sorted({d.label for m in c.metrics for d in m.deltas if d.label})
    note = (f"~ = within the noise (p ≥ {c.alpha:g} or under the {c.noise_floor_pct:g}% noise floor): the change "
            "beside it is not established; a percentage's change is in points (pt)")
    if labels:
        note += "; " + "; ".join(labels)
    return Table("summary", tuple(cols), tuple(rows), note)


def arm_names(settings: Sequence[Sequence[Mapping[str, str]]], folders: Sequence[Sequence[str]],
              fallback: Sequence[str]) -> list[str]:
    """Names for arms that were not given one, by what differs between them: the run-header
    settings (``settings[a][r]``, each run's ``key=value`` header) whose value is the same in
    all of an arm's runs and differs between arms (``--cache-mb 3`` and ``--cache-mb 10``; at
    most two), else the folder that holds each arm's runs (``folders[a][r]``) when the arms'
    differ, else ``fallback[a]`` (the first file's name); ``(N runs)`` after an arm of several."""
    common: list[dict[str, str]] = []
    for runs in settings:
        keep = dict(runs[0]) if runs else {}
        for other in runs[1:]:
            keep = {k: v for k, v in keep.items() if other.get(k) == v}
        keep.pop("format", None)
        common.append(keep)
    keys = [k for k in common[0] if all(k in c for c in common) and len({c[k] for c in common}) > 1] if common else []
    if keys:
        base = [" ".join(f"--{k.replace('_', '-')} {c[k]}" for k in keys[:2]) for c in common]
    else:
        where = [sorted(set(f)) for f in folders]
        distinct = all(len(w) == 1 and w[0] for w in where) and len({w[0] for w in where}) == len(where)
        base = [w[0] for w in where] if distinct else list(fallback)
    return [b + (f" ({len(runs)} runs)" if len(runs) > 1 else "") for b, runs in zip(base, settings)]


def warmup_table(c: Comparison) -> Table:
    """Each run's warm-up split (MSER-5 over wall_ms) and its warm and steady means."""
    cols = (Column("arm", "arm", False), Column("run", "run", False), Column("tokens", "tokens"),
            Column("split", "steady from token"), Column("warm", "warm-up mean ms"),
            Column("steady", "steady mean ms"), Column("lag1", "lag-1 autocorr."))
    rows = tuple(Row((w.arm, w.run, fmt(w.tokens, 0), fmt(w.split, 0), fmt(w.warm_mean_ms, 1),
                      fmt(w.steady_mean_ms, 1), fmt(w.lag1, 2)),
                     (w.arm, w.run, float(w.tokens), float(w.split), number_key(w.warm_mean_ms),
                      number_key(w.steady_mean_ms), number_key(w.lag1))) for w in c.warmup)
    return Table("warm-up", cols, rows, "MSER-5: the cut over batch means of 5 tokens that makes the steady part's "
                                        "mean most precise (first half only); timing statistics use the steady part")


def entry_rows(c: Comparison) -> list[tuple[str, str, str]]:
    """The contamination panel: (label, values per arm, kind) and the hints."""
    out: list[tuple[str, str, str]] = []
    if not c.contamination.rows:
        out.append(("entry state", "not in these sources (temperature, MemAvailable, CPU frequency at the start "
                                   "of a run): contamination cannot be checked", "missing"))
    for r in c.contamination.rows:
        vals = "  ".join(f"{a}: " + ", ".join(fmt(v, 1) for v in vs) for a, vs in zip(c.arms, r.per_arm))
        diffs = "  ".join(f"Δ {a} {d:+.1f}" for a, d in zip(c.arms[1:], r.diff) if math.isfinite(d))
        out.append((r.label, f"{vals}   {diffs}".rstrip(), ""))
    for h in c.contamination.hints:
        out.append(("hint", h, "bad"))
    return out


def _key_of(run: RunModel) -> tuple[npt.NDArray[np.int64], bool]:
    """Alignment keys of a run's token rows: (turn, step) when the rows carry a step, else the
    row's ordinal; and whether steps were used."""
    with run.lock:
        n = run.tokens.n
        step = np.array(run.tokens.view("step", 0, n)) if run.tokens.has("step") else None
        turn = np.array(run.tokens.view("turn", 0, n)) if run.tokens.has("turn") else np.zeros(n)
    if step is None or not np.isfinite(step).all():
        return np.arange(n, dtype=np.int64), False
    t = np.nan_to_num(turn, nan=0.0).astype(np.int64)
    return (t << 32) | step.astype(np.int64), True


def token_series(arms: Sequence[LoadedArm], column: str = "wall_ms", run_index: int = 0
                 ) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[np.float64]], bool]:
    """The per-token view aligned by step: (keys [n] ascending, per arm its ``run_index``-th
    run's ``column`` at each key (NaN where that run has no such token), aligned by (turn, step)
    or not). Keys are ``turn << 32 | step`` when every run has steps, else row ordinals.
    ``column`` ``flash``: each run's own flash wait (``RunModel.breakdown``: io_ms serial, stall_ms
    overlap)."""
    picked = [a.runs[min(run_index, len(a.runs) - 1)].model for a in arms]
    keyed = [_key_of(m) for m in picked]
    by_step = all(k[1] for k in keyed)
    if not by_step:
        keyed = [(np.arange(m.tokens.n, dtype=np.int64), False) for m in picked]
    keys = np.unique(np.concatenate([k for k, _ in keyed])) if keyed else np.zeros(0, dtype=np.int64)
    out = []
    for m, (k, _) in zip(picked, keyed):
        with m.lock:
            if column == FLASH:
                v = np.array(m.breakdown(0, m.tokens.n)["flash"], dtype=np.float64)
            else:
                v = (np.array(m.tokens.view(column, 0, m.tokens.n), dtype=np.float64) if m.tokens.has(column)
                     else np.full(m.tokens.n, np.nan))
        col = np.full(keys.shape[0], np.nan)
        # the first row of a repeated key wins
        uk, first = np.unique(k, return_index=True)
        col[np.searchsorted(keys, uk)] = v[first]
        out.append(col)
    return keys, out, by_step


def token_table(arms: Sequence[LoadedArm], c: Comparison, run_index: int = 0) -> Table:
    """Side by side per token, aligned by step: per arm wall, flash wait and cumulative hit %,
    and the wall difference against the baseline; rows inside a run's warm-up are marked."""
    keys, walls, by_step = token_series(arms, "wall_ms", run_index)
    flashes = token_series(arms, FLASH, run_index)[1]
    hits = token_series(arms, "cache_hit_pct", run_index)[1]
    splits = {(w.arm, w.run): w.split for w in c.warmup}
    cols = [Column("turn", "turn"), Column("step", "step" if by_step else "row")]
    for a in arms:
        cols += [Column(f"wall:{a.name}", f"{a.name} wall ms"), Column(f"flash:{a.name}", q("token.flash_ms").label),
                 Column(f"hit:{a.name}", "hit %")]
    for a in arms[1:]:
        cols.append(Column(f"d:{a.name}", f"Δ wall {a.name}"))
    rows = []
    ordinal = [np.cumsum(np.isfinite(w)) - 1 for w in walls]
    for i, k in enumerate(keys.tolist()):
        turn, step = (k >> 32, k & 0xFFFFFFFF) if by_step else (0, k)
        cells: list[str] = [str(turn), str(step)]
        sk: list[float | str] = [float(turn), float(step)]
        warm = False
        for j, a in enumerate(arms):
            run = a.runs[min(run_index, len(a.runs) - 1)]
            if np.isfinite(walls[j][i]) and ordinal[j][i] < splits.get((a.name, run.name), 0):
                warm = True
            cells += [fmt(walls[j][i], 1), fmt(flashes[j][i], 1), fmt(hits[j][i], 1)]
            sk += [number_key(walls[j][i]), number_key(flashes[j][i]), number_key(hits[j][i])]
        for j in range(1, len(arms)):
            d = walls[j][i] - walls[0][i]
            cells.append(f"{d:+.1f}" if math.isfinite(d) else fmt(None))
            sk.append(number_key(d))
        rows.append(Row(tuple(cells), tuple(sk), "missing" if warm else ""))
    which = ", ".join(f"{a.name}: {a.runs[min(run_index, len(a.runs) - 1)].name}" for a in arms)
    return Table("tokens", tuple(cols), tuple(rows),
                 f"runs {which}; aligned by {'(turn, step)' if by_step else 'row'}; dim rows are warm-up")


# ------------------------------------------------------------------------------- headless
#: a float of the comparison; JSON null where it is NaN (orjson writes NaN as null)
Num = float | None


class ArmValueDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.ArmValue` as JSON."""

    arm: str
    runs: int
    center: Num
    low: Num
    high: Num
    per_run: list[Num]


class DeltaDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.Delta` as JSON."""

    arm: str
    vs: str
    change: Num
    change_pct: Num
    low: Num
    high: Num
    p: Num
    verdict: str
    method: str
    label: str
    confidence: Num


class MetricRowDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.MetricRow` as JSON."""

    metric: str
    label: str
    unit: str
    kind: str
    lower_is_better: bool
    values: list[ArmValueDoc]
    deltas: list[DeltaDoc]
    absent: dict[str, str]


class WarmupRowDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.WarmupRow` as JSON."""

    arm: str
    run: str
    tokens: int
    split: int
    warm_mean_ms: Num
    steady_mean_ms: Num
    lag1: Num


class EntryRowDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.EntryRow` as JSON."""

    key: str
    label: str
    per_arm: list[list[Num]]
    diff: list[Num]


class ContaminationDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.Contamination` as JSON."""

    rows: list[EntryRowDoc]
    hints: list[str]


class ComparisonDoc(TypedDict):
    """:class:`bmoe_top.tui.analysis.compare.Comparison` as JSON (docs/analysis.md "The
    comparison result")."""

    arms: list[str]
    baseline: str
    workload_same: bool | None
    banner: str
    metrics: list[MetricRowDoc]
    warmup: list[WarmupRowDoc]
    contamination: ContaminationDoc
    advice: list[str]
    noise_floor_pct: Num
    alpha: Num
    confidence: Num
    identical: list[str]
    identical_note: str


class RunReadDoc(TypedDict):
    """A run as read: its name, files, token rows and problems (bad lines) counted."""

    name: str
    files: list[str]
    token_rows: int
    problems: int


class ArmReadDoc(TypedDict):
    """An arm as read: its name and runs."""

    name: str
    runs: list[RunReadDoc]


class CompareDocument(ComparisonDoc):
    """``bmoe-top compare --json``: the arms as read, then the comparison."""

    arms_input: list[ArmReadDoc]


def comparison_document(arms: Sequence[LoadedArm], c: Comparison) -> CompareDocument:
    """``bmoe-top compare --json``: the arms as read (runs, files, token rows, problems) and the
    comparison (docs/analysis.md "The comparison result")."""
    body: ComparisonDoc = orjson.loads(orjson.dumps(c))
    return {
        "arms_input": [{"name": a.name, "runs": [{"name": r.name, "files": r.files, "token_rows": r.model.tokens.n,
                                                   "problems": r.model.problem_count} for r in a.runs]}
                       for a in arms],
        **body,
    }


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|") or " "


def comparison_markdown(c: Comparison) -> str:
    """A markdown table of the comparison to paste into notes, with the warm-up splits, the
    banner, the intervals' coverage, contamination hints and advice as lines under it; every line
    made safe for a terminal (arm names are file and folder names: :func:`text_line`)."""
    t = summary_table(c)
    head = [col.label for col in t.columns]
    lines = ["| " + " | ".join(_md_cell(h) for h in head) + " |",
             "|" + "|".join("---:" if col.numeric else "---" for col in t.columns) + "|"]
    for r in t.rows:
        lines.append("| " + " | ".join(_md_cell(x) for x in r.cells) + " |")
    lines.append("")
    for line in (c.identical_note, c.banner):
        if line:
            lines.append(f"**{line}**")
            lines.append("")
    lines.append(t.note)
    lines.append("")
    lines.append("Warm-up (MSER-5): " + "; ".join(f"{w.name} steady from token {w.split} of {w.tokens}"
                                                  for w in c.warmup))
    for h in c.contamination.hints:
        lines.append(f"- {h}")
    for a in c.advice:
        lines.append(f"- {a}")
    return "".join(text_line(line) + "\n" for line in lines)


def _num(v: float) -> str:
    return "" if not math.isfinite(v) else repr(float(v))


def comparison_csv(c: Comparison) -> str:
    """The comparison as CSV, one row per (metric, arm): the arm's value and interval, and for a
    non-baseline arm its delta against the baseline (change, %, interval, p, verdict, method);
    every text field made safe for a terminal (arm names are file and folder names: :func:`text_line`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["metric", "label", "unit", "kind", "arm", "runs", "value", "value_low", "value_high", "vs",
                "change", "change_pct", "change_low", "change_high", "p", "verdict", "method", "coverage"])
    for m in c.metrics:
        deltas: dict[str, Delta] = {d.arm: d for d in m.deltas}
        for v in m.values:
            d = deltas.get(v.arm)
            row = [m.metric, m.label, m.unit, m.kind, v.arm, v.runs, _num(v.center), _num(v.low), _num(v.high)]
            if d is None:
                row += ["", "", "", "", "", "", "", "", ""]
            else:
                row += [d.vs, _num(d.change), _num(d.change_pct), _num(d.low), _num(d.high), _num(d.p), d.verdict,
                        d.method, d.label]
            w.writerow([text_line(x) if isinstance(x, str) else x for x in row])
    return buf.getvalue()


def metric_row(c: Comparison, metric: str) -> MetricRow | None:
    """The row of ``metric`` (e.g. ``wall_ms``), or None."""
    return next((m for m in c.metrics if m.metric == metric), None)
