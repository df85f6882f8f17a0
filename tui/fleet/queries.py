"""The PromQL behind every fleet column, and how the step and the rate window are chosen.

Every column is one PromQL expression over all selected instances at once, grouped
``by (job, instance)`` (plus the labels that tell two scrape targets of one job and instance
apart, e.g. the ``external_labels`` of several Prometheus servers writing into one store:
:data:`BY` and the ``by`` argument), so a refresh costs a fixed number of queries whatever the
fleet's size (docs/fleet.md lists them). The series are those of moe-cache-reference.md "Server metrics"
(``llamacpp:moe_cache_*``), llama-server's own request/token series, and bmoe-run's per-token
time sums (``bmoe:token_*_seconds_total``, docs/metrics.md). A runtime that lacks a series
simply yields no sample for that column: the table says "not exported", never 0.

Rules (Grafana's ``$__rate_interval``): a counter is read through ``rate()`` over a range of at
least four scrape intervals and at least one step plus one scrape interval (:func:`rate_interval`;
with a 1 s scrape, ``[1s]`` holds one sample and gives nothing), and the step is never shorter
than the scrape interval nor so short that a series exceeds ``max_points`` points
(:func:`choose_step`; Prometheus itself refuses more than 11,000). Per-layer series are summed
per layer, never read per expert.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from string import Template

from bmoe_top.tui.model.quantities import Quantity, q
from bmoe_top.tui.sources.prometheus import format_duration

__all__ = [
    "Column",
    "COLUMNS",
    "COLUMN_BY_KEY",
    "COLUMN_SERIES",
    "DRILL_COLUMNS",
    "exported_query",
    "exported",
    "DERIVED",
    "UP_QUERY",
    "BY",
    "by_text",
    "instances_query",
    "interval_query",
    "interval_estimate",
    "MAX_POINTS",
    "matchers",
    "selector_problem",
    "label_matcher",
    "values_matcher",
    "detail_matchers",
    "rate_interval",
    "choose_step",
    "column_query",
    "column_queries",
    "column_text",
    "header",
    "up_query",
    "restarts_query",
    "layer_queries",
    "totals_query",
]

#: A series never has more points than this (Prometheus refuses above 11,000 per series).
MAX_POINTS = 2000

#: The grouping labels of a row: one per (job, instance), and more when two targets share them.
BY: tuple[str, ...] = ("job", "instance")
_BY = "job, instance"


def by_text(by: Sequence[str]) -> str:
    """``("job", "instance", "prometheus")`` -> ``job, instance, prometheus``."""
    return ", ".join(by)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the instances table: ``key`` (JSON key), ``label`` (header), ``unit``,
    ``needs`` (alternatives, each a tuple of the exposed series it reads; an instance exports the
    column when it exports every series of one alternative, else the cell says "not exported"),
    ``template`` (PromQL with ``$sel`` = the label matchers in braces, ``$r`` = the rate range,
    e.g. ``6s``, and ``$by`` = the grouping labels)."""

    key: str
    label: str
    unit: str
    needs: tuple[tuple[str, ...], ...]
    template: str

    @property
    def series(self) -> tuple[str, ...]:
        """Every series any alternative reads, in order."""
        return tuple(dict.fromkeys(n for alt in self.needs for n in alt))


#: Units a column's header leaves out (a count of what the label names).
_QUIET_UNITS = frozenset({"requests"})
#: How a header writes a unit.
_SHORT_UNITS = {"ms/token": "ms/tok", "% of wall": "%"}


def header(x: Quantity) -> str:
    """A fleet column's header from its catalogue quantity: its label and its unit
    (``hit %``, ``read MiB/s``, ``wall ms/tok``; ``tok/s``, ``processing``)."""
    unit = _SHORT_UNITS.get(x.unit, x.unit)
    return x.label if x.unit in x.label or x.unit in _QUIET_UNITS else f"{x.label} {unit}"


def _column(key: str) -> Column:
    x = q(key)
    return Column(x.field, header(x), x.unit, x.needs, x.promql)


#: The table's columns: the catalogue's ``fleet.*`` quantities (bmoe_top.tui.model.quantities),
#: their PromQL and the series they need read there. wall = compute + flash wait + mgmt, each in
#: ms per generated token.
COLUMNS: tuple[Column, ...] = tuple(_column(f"fleet.{k}") for k in (
    "tok_s", "prompt_tok_s", "hit_pct", "read_mib_s", "wall_ms", "compute_ms", "flash_ms", "mgmt_ms",
    "resident_experts", "resident_mib", "budget_experts", "budget_mib", "requests_processing",
    "requests_deferred"))

#: Columns only the drill-down asks: the two flash terms apart, so its breakdown knows the mode
#: (serial: the flash wait is ``io_ms``; overlap: ``stall_ms``, ``io_ms`` being lane-busy time).
DRILL_COLUMNS: tuple[Column, ...] = (_column("fleet.io_ms"), _column("fleet.stall_ms"))

#: Every series a column (of the table or the drill-down) reads.
COLUMN_SERIES: tuple[str, ...] = tuple(dict.fromkeys(n for c in COLUMNS + DRILL_COLUMNS for n in c.series))

COLUMN_BY_KEY: dict[str, Column] = {c.key: c for c in COLUMNS + DRILL_COLUMNS}

#: Columns computed from others, per point, without a query: key -> (label, unit, doc).
DERIVED: dict[str, tuple[str, str, str]] = {
    x.field: (header(x), x.unit, f"{x.formula}: {x.definition[0].lower()}{x.definition[1:]}")
    for x in (q("fleet.stall_share"),)
}

#: ``up`` per instance: 1 when its last scrape succeeded, 0 when it failed.
UP_QUERY = q("fleet.up").promql


def label_matcher(name: str, value: str) -> str:
    """``name="value"`` with the value escaped as a PromQL string (``\\``, ``"``, newline)."""
    v = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}="{v}"'


def values_matcher(name: str, values: Iterable[str]) -> str:
    """``name=~"v1|v2"``: exactly these values (each a literal: its regular-expression characters
    escaped; PromQL anchors the expression at both ends)."""
    return label_matcher(name, "|".join(sorted({re.escape(v) for v in values}))).replace("=", "=~", 1)


def detail_matchers(by: Sequence[str], keys: Iterable[Sequence[str]]) -> list[str]:
    """Matchers that pick the rows of ``keys`` (values of the grouping labels ``by``): one
    ``=~`` per label (a superset when two labels vary together; the caller keeps its keys)."""
    keys = list(keys)
    return [values_matcher(b, (k[i] for k in keys)) for i, b in enumerate(by)]


# One PromQL label matcher: a label name, an operator, a quoted string (double or single quotes with
# backslash escapes, or a raw string in backticks); commas between matchers, one trailing allowed.
_MATCHER = re.compile(r"""\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"""
                      r"""(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)\s*""")
_MATCHERS = re.compile(rf"(?:{_MATCHER.pattern}(?:,{_MATCHER.pattern})*,?)?\s*")
_FORM = 'label matchers, e.g. {job="bmoe"} or job="bmoe", instance=~"a.*" (docs/fleet.md)'


def selector_problem(selector: str) -> str | None:
    """Why ``selector`` is not what :func:`matchers` takes (PromQL label matchers, in braces or
    not, or empty), or None: braces that do not balance, a quote not closed, a control character,
    anything else in it. Every fleet form refuses such a selector before a query is written
    (``fleet --rules`` printed ``{{job="x}[1m]``)."""
    text = selector.strip()
    if not text.isprintable():
        return "it holds a control character"
    inner = text[1:-1] if text.startswith("{") and text.endswith("}") and len(text) > 1 else text
    if _MATCHERS.fullmatch(inner):
        return None
    bare = re.sub(r"""\\.|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""", "", inner)  # closed strings out
    if any(c in bare for c in "\"'`"):
        return f"a quoted value is not closed; it takes {_FORM}"
    if bare.count("{") != bare.count("}"):
        return f"its braces do not balance; it takes {_FORM}"
    return f"it takes {_FORM}"


def matchers(selector: str, *extra: str) -> str:
    """The label matchers of ``selector`` (``{job="bmoe"}``, or ``job="bmoe"`` without braces,
    or empty) joined with ``extra`` matchers, in braces; ``""`` when there are none. The
    selector is passed through as written (:func:`selector_problem` tells a malformed one)."""
    inner = selector.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    parts = [p for p in (inner.rstrip(", "), *extra) if p]
    return "{" + ", ".join(parts) + "}" if parts else ""


def rate_interval(scrape_s: float, step_s: float) -> float:
    """The ``rate()`` range for a step: ``max(4 * scrape, step + scrape)`` seconds."""
    return max(4.0 * scrape_s, step_s + scrape_s)


def choose_step(window_s: float, scrape_s: float, max_points: int = MAX_POINTS) -> float:
    """The step (s) for ``window_s`` at most ``max_points`` points per series and never shorter
    than the scrape interval, rounded up to the millisecond. Raises ``ValueError`` for a
    window or interval that is not > 0, or fewer than 2 points."""
    if not (window_s > 0 and scrape_s > 0) or max_points < 2:
        raise ValueError(f"window {window_s!r} s, scrape interval {scrape_s!r} s, {max_points} points")
    step = max(scrape_s, window_s / (max_points - 1))
    return math.ceil(round(step * 1000.0, 6)) / 1000.0


def _fill(template: str, sel: str, range_s: float | str | None = None, by: str | Sequence[str] = _BY) -> str:
    by = by if isinstance(by, str) else by_text(by)
    subs = {"sel": sel, "by": by}
    if range_s is not None:
        subs["r"] = range_s if isinstance(range_s, str) else format_duration(range_s)
    return Template(template).substitute(subs)


def column_text(col: Column, sel: str, range_text: str, by: str = _BY) -> str:
    """``col``'s PromQL with the matchers ``sel`` (braces included, or ``""``) and the range
    ``range_text`` written as given (``$__rate_interval`` for Grafana, ``6s``), grouped ``by``."""
    return _fill(col.template, sel, range_text, by)


def column_query(col: Column, selector: str, range_s: float, *extra: str, by: Sequence[str] = BY) -> str:
    """``col``'s PromQL for ``selector`` (+ ``extra`` matchers) with a rate range of ``range_s``,
    grouped ``by``."""
    return _fill(col.template, matchers(selector, *extra), range_s, by)


def column_queries(selector: str, range_s: float, *extra: str, drill: bool = False,
                   by: Sequence[str] = BY) -> dict[str, str]:
    """Every column's PromQL (with ``drill``, the drill-down's own columns too): key -> query."""
    return {c.key: column_query(c, selector, range_s, *extra, by=by)
            for c in COLUMNS + (DRILL_COLUMNS if drill else ())}


def instances_query(selector: str, window_s: float, *extra: str) -> str:
    """Every scrape target the selector picks that has an ``up`` sample in the window, with all
    its labels (which labels tell two targets apart) and its last ``up``."""
    return _fill("last_over_time(up$sel[$r])", matchers(selector, *extra), window_s)


def up_query(selector: str, *extra: str, by: Sequence[str] = BY) -> str:
    return _fill(UP_QUERY, matchers(selector, *extra), by=by)


#: Windows over which the scrape interval is estimated from the stored ``up`` samples, longest
#: first: the first for which some target is older than the window answers.
ESTIMATE_WINDOWS_S = (300, 60, 10)


def interval_query(selector: str) -> str:
    """The longest scrape interval among the targets, estimated from the stored samples, for a
    store that does not say it (no targets list: VictoriaMetrics, a long-term store): the window
    divided by the number of ``up`` samples in it, among the targets already stored a window ago
    (a younger target has fewer samples and would read longer); the longest window first."""
    sel = matchers(selector)
    return " or ".join(f"max({w} / count_over_time(up{sel}[{w}s]) and up{sel} offset {w}s)"
                       for w in ESTIMATE_WINDOWS_S)


#: Scrape intervals people set (s): an estimate within :data:`SNAP` of one reads as it.
ROUND_INTERVALS = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
SNAP = 0.15


def interval_estimate(value: float) -> float | None:
    """The estimate's answer as the interval it most likely is: the nearest of
    :data:`ROUND_INTERVALS` when within 15 % of it (one sample more or less in a 10 s window
    reads 0.91 or 1.1 for 1 s), else rounded to two significant digits; ``None`` unless > 0."""
    if not (value > 0 and math.isfinite(value)):
        return None
    near = min(ROUND_INTERVALS, key=lambda r: abs(math.log(value / r)))
    return near if abs(value / near - 1.0) <= SNAP else float(f"{value:.2g}")


def restarts_query(selector: str, window_s: float, *extra: str, by: Sequence[str] = BY) -> str:
    """Restarts per instance over the window: changes of ``process_start_time_seconds`` (bmoe-run,
    and any exporter with a process collector), else counter resets of ``llamacpp:n_decode_total``."""
    sel = matchers(selector, *extra)
    return _fill("sum by ($by) (changes(process_start_time_seconds$sel[$r])) or "
                 "sum by ($by) (resets(llamacpp:n_decode_total$sel[$r]))", sel, window_s, by)


def layer_queries(selector: str, range_s: float, *extra: str) -> dict[str, str]:
    """Per-layer hit and miss rates (/s), summed per ``layer`` label: ``hits``, ``misses``."""
    sel = matchers(selector, *extra)
    return {"hits": _fill("sum by ($by) (rate(llamacpp:moe_cache_layer_hits_total$sel[$r]))", sel, range_s, "layer"),
            "misses": _fill("sum by ($by) (rate(llamacpp:moe_cache_layer_misses_total$sel[$r]))", sel, range_s,
                            "layer")}


def exported_query(selector: str, window_s: float, *extra: str, by: Sequence[str] = BY) -> str:
    """Which of the columns' series each instance exported in the window: one sample per (job,
    instance, series name). Tells "not exported" from "no value yet" (a rate needs two samples);
    read over the window (``last_over_time`` keeps the name), so a down instance, which exports
    nothing now, still says what it exported while it was up."""
    name_re = '__name__=~"' + "|".join(COLUMN_SERIES) + '"'
    return _fill("count by ($by, __name__) (last_over_time($sel[$r]))", matchers(selector, name_re, *extra),
                 window_s, by)


def exported(col: Column, names: set[str]) -> bool:
    """Whether an instance exporting ``names`` exports ``col``."""
    return any(all(n in names for n in alt) for alt in col.needs)


def totals_query(selector: str, *extra: str) -> str:
    """Every counter's value since the runtime started (``*_total`` of ``llamacpp:`` and ``bmoe:``,
    per-layer ones excluded), summed per series name."""
    sel = matchers(selector, '__name__=~"(llamacpp|bmoe):.+_total"', '__name__!~"llamacpp:moe_cache_layer_.+"',
                   *extra)
    return f"sum by (__name__) ({sel})"
