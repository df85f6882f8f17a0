"""Alert rules that wait before they fire, like Prometheus's (docs/alerts.md). No Textual.

A :class:`Rule` compares one quantity of the catalogue (``bmoe_top.tui.model.quantities``, by
key) with a threshold (``token.cache_hit_pct < 30``); the condition must hold for ``for_s``
seconds of the run's own clock before the alert fires. Each rule's alert moves
``inactive -> pending -> firing -> resolved`` (:class:`AlertState`): pending while the condition
holds for less than ``for_s``, back to inactive when it stops holding before that, firing once it
has held ``for_s`` (at once when ``for_s`` is 0), resolved when a firing condition stops holding
(resolved reads as inactive: the next hold is pending again).

Absent is not zero: a row without the quantity (NaN: not sent, not known yet, no cache) never
satisfies a condition, so it never fires; it ends a pending alert and resolves a firing one, as a
series that disappears does in Prometheus.

Time is the run's own clock (:func:`run_clock`): the sum of the rows' own durations (token rows:
``wall_ms``; interval rows: ``interval_s``; request rows: ``t_gen_ms``), so a live run and its
replay give the same transitions at the same rows and a test needs no sleep. :class:`AlertEngine`
evaluates every row once, in order (:meth:`AlertEngine.advance_run` reads the rows added since its
last call); each evaluation returns the state changes as plain data (:class:`Transition`), the
event log's input.

:data:`DEFAULT_RULES` are the defaults (hit rate, stall share, flash-wait share, MemAvailable,
temperature, tok/s collapse, and the fleet's instance down); the settings file overrides their
thresholds and adds rules (``bmoe_top.tui.settings``); the fleet exports the ones with a PromQL
twin as a Prometheus rules file (``bmoe_top.tui.fleet.rules``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.model.run import RunModel
from bmoe_top.tui.model.status import RowUnit

__all__ = ["Active", "AlertEngine", "AlertState", "DEFAULT_RULES", "FIRST_WINDOW", "INPUTS", "OPS", "RECENT",
           "Rule", "Severity", "Transition", "alert_series", "firing_text", "run_clock", "with_threshold"]

F64 = NDArray[np.float64]

#: Comparisons a rule may use, as PromQL writes them.
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}

_NP_OPS: dict[str, Callable[[F64, float], NDArray[np.bool_]]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}

#: Rows the ``recent.*`` inputs cover (the title's window: ``bmoe_top.tui.widgets.panels.RECENT_ROWS``).
RECENT = 32
#: The run's first steady window: rows ``[8, 40)`` (the first 8 tokens warm the cache up).
FIRST_WINDOW = (8, 40)


class AlertState(StrEnum):
    """Where a rule's alert is."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Severity(StrEnum):
    """How bad a firing alert is (the ``severity`` label of the rules file)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule: ``key op threshold`` held ``for_s`` seconds; ``severity``; ``summary``: one
    sentence of what it means. ``fleet``: the catalogue key of the same number as Prometheus
    computes it (a ``fleet.*`` quantity with a PromQL expression), ``""`` when the fleet has none:
    the rule is then left out of the rules file. Raises ``ValueError`` for an operator not in
    :data:`OPS`, a threshold that is not finite, a negative ``for_s`` or a key not in the
    catalogue."""

    name: str
    key: str
    op: str
    threshold: float
    for_s: float = 0.0
    severity: Severity = Severity.WARNING
    summary: str = ""
    fleet: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"{self.op!r} is not a comparison (one of {' '.join(OPS)})")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold {self.threshold!r} is not a number")
        if not (self.for_s >= 0 and math.isfinite(self.for_s)):
            raise ValueError(f"for {self.for_s!r} s must be 0 or more seconds")
        for key in (self.key, self.fleet):
            if key:
                q(key)  # KeyError names it
        object.__setattr__(self, "severity", Severity(self.severity))

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` satisfies the condition (absent, ``None`` or NaN: never)."""
        return value is not None and value == value and OPS[self.op](value, self.threshold)

    @property
    def expr(self) -> str:
        """The condition as written: ``token.cache_hit_pct < 30``."""
        return f"{self.key} {self.op} {self.threshold:g}"


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change: ``rule`` (its name) went from ``old`` to ``new`` at ``t`` (s of the run's
    clock) at ``row`` (the row evaluated), the quantity reading ``value`` (``None``: absent)."""

    rule: str
    old: AlertState
    new: AlertState
    value: float | None
    t: float
    row: int


@dataclass(slots=True)
class _Alert:
    rule: Rule
    state: AlertState = AlertState.INACTIVE
    since: float = 0.0  # run clock at which the condition started holding (pending / firing)
    value: float | None = None  # the newest reading while pending or firing


@dataclass(frozen=True, slots=True)
class Active:
    """A pending or firing alert: its rule, state, the run clock its condition started holding
    at (``since``) and its newest reading."""

    rule: Rule
    state: AlertState
    since: float
    value: float | None


class AlertEngine:
    """The alerts of ``rules`` over one run's rows (see the module docstring). Not thread-safe:
    one caller (the screen's refresh, a headless document) owns it."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._alerts = [_Alert(r) for r in self.rules]
        self._order = {r.name: i for i, r in enumerate(self.rules)}
        self._row = 0  # rows evaluated so far
        self._t = 0.0  # the run clock after them

    @property
    def rows(self) -> int:
        """Rows evaluated so far."""
        return self._row

    def active(self) -> list[Active]:
        """The pending and firing alerts, firing first, then by rule order."""
        out = [Active(a.rule, a.state, a.since, a.value) for a in self._alerts
               if a.state in (AlertState.PENDING, AlertState.FIRING)]
        return sorted(out, key=lambda a: a.state is not AlertState.FIRING)

    def firing(self) -> list[Active]:
        """The firing alerts, in rule order."""
        return [a for a in self.active() if a.state is AlertState.FIRING]

    def state(self, name: str) -> AlertState:
        """The state of the alert of the rule called ``name`` (``KeyError`` when there is none)."""
        for a in self._alerts:
            if a.rule.name == name:
                return a.state
        raise KeyError(name)

    def reset(self) -> None:
        """Forget every state (the run was replaced): the next evaluation starts at row 0."""
        self._alerts = [_Alert(r) for r in self.rules]
        self._row, self._t = 0, 0.0

    def step(self, values: Mapping[str, float | None], t: float) -> list[Transition]:
        """Evaluate one row read at run clock ``t`` (s; never earlier than the previous row's):
        ``values`` maps catalogue keys to readings (a key left out is absent). Returns the state
        changes, in rule order."""
        out: list[Transition] = []
        row = self._row
        for a in self._alerts:
            self._move(a, a.rule.holds(values.get(a.rule.key)), values.get(a.rule.key), t, row, out)
        self._row, self._t = row + 1, t
        return out

    def advance(self, t: F64, values: Mapping[str, F64]) -> list[Transition]:
        """Evaluate ``len(t)`` rows in order: ``t`` their run clock, ``values`` one array per
        catalogue key (NaN: absent; a key left out: absent on every row). Equal to calling
        :meth:`step` per row, but only rows where a condition changes (or a pending alert's
        ``for_s`` runs out) cost Python work."""
        n = len(t)
        out: list[Transition] = []
        base = self._row
        for a in self._alerts:
            v = values.get(a.rule.key)
            if v is None and a.state not in (AlertState.PENDING, AlertState.FIRING):
                continue  # absent on every row: nothing holds, nothing to end
            if v is None:
                cond = np.zeros(n, dtype=bool)
                v = np.full(n, np.nan)
            else:
                with np.errstate(invalid="ignore"):
                    cond = _NP_OPS[a.rule.op](v, a.rule.threshold) & ~np.isnan(v)
            self._run_rows(a, cond, v, t, base, out)
        self._row += n
        if n:
            self._t = float(t[-1])
        out.sort(key=lambda tr: (tr.row, self._order[tr.rule]))
        return out

    def advance_run(self, run: RunModel, stop: int | None = None) -> list[Transition]:
        """Evaluate the rows of ``run`` added since the last call, up to ``stop`` (default every
        row). A run with fewer rows than already evaluated (it was replaced) starts again."""
        n = run.tokens.n if stop is None else stop
        if n < self._row:
            self.reset()
        if n == self._row:
            return []
        t, values = alert_series(run, self._row, n, {r.key for r in self.rules})
        return self.advance(t, values)

    # -- the state machine --------------------------------------------------------------------
    def _move(self, a: _Alert, holds: bool, value: float | None, t: float, row: int, out: list[Transition]) -> None:
        old = a.state
        if holds:
            a.value = value
            if old in (AlertState.INACTIVE, AlertState.RESOLVED):
                a.since = t
                new = AlertState.FIRING if a.rule.for_s <= 0 else AlertState.PENDING
            elif old is AlertState.PENDING and t >= a.since + a.rule.for_s:
                new = AlertState.FIRING
            else:
                return
        elif old is AlertState.PENDING:
            new = AlertState.INACTIVE
        elif old is AlertState.FIRING:
            new = AlertState.RESOLVED
        else:
            return
        a.state = new
        if not holds:
            a.value = None
        out.append(Transition(a.rule.name, old, new, value, t, row))

    def _run_rows(self, a: _Alert, cond: NDArray[np.bool_], v: F64, t: F64, base: int,
                  out: list[Transition]) -> None:
        n = len(cond)
        i = 0
        while i < n:
            holding = a.state in (AlertState.PENDING, AlertState.FIRING)
            if holding:
                # the next row where the condition stops holding
                stops = np.flatnonzero(~cond[i:])
                end = i + int(stops[0]) if len(stops) else n
                if a.state is AlertState.PENDING:
                    due = i + int(np.searchsorted(t[i:end], a.since + a.rule.for_s, side="left"))
                    if due < end:
                        self._move(a, True, float(v[due]), float(t[due]), base + due, out)
                if end < n:
                    if end > i:
                        a.value = float(v[end - 1])
                    x = float(v[end])
                    self._move(a, False, None if x != x else x, float(t[end]), base + end, out)
                    i = end + 1
                else:
                    a.value = float(v[n - 1])
                    i = n
            else:
                starts = np.flatnonzero(cond[i:])
                if not len(starts):
                    return
                j = i + int(starts[0])
                self._move(a, True, float(v[j]), float(t[j]), base + j, out)
                i = j + 1


# ---------------------------------------------------------------------------------- the inputs
def run_clock(run: RunModel, lo: int, hi: int) -> F64:
    """The run's own clock (s) at the end of each row ``[lo, hi)``: the running sum of the rows'
    own durations (token rows ``wall_ms``, interval rows ``interval_s``, request rows
    ``t_gen_ms``; a row without one adds 0). Caller holds ``run.lock``."""
    col, scale = {RowUnit.INTERVAL: ("interval_s", 1.0), RowUnit.REQUEST: ("t_gen_ms", 1e-3)}.get(
        run.row_unit, ("wall_ms", 1e-3))
    if not run.tokens.has(col):
        return np.zeros(hi - lo)
    before = run.column_stats(col, 0, lo).sum if lo else 0.0
    d = np.nan_to_num(_held(run, col, lo, hi), nan=0.0)
    return (before + np.cumsum(d)) * scale


def _held(run: RunModel, name: str, lo: int, hi: int) -> F64:
    return np.asarray(run.tokens.view(name, lo, hi), dtype=np.float64)


class _Rows:
    """Rows ``[lo, hi)`` of ``run`` as the inputs read them: each column's rolling sums are
    computed once per evaluation (the flash share, the stall share and tok/s all read
    ``wall_ms``'s), and a column no row carries rolls to nothing without reading it. Caller holds
    ``run.lock``."""

    def __init__(self, run: RunModel, lo: int, hi: int) -> None:
        self.run, self.lo, self.hi = run, lo, hi
        self._rolled: dict[str, tuple[F64, F64]] = {}

    def held(self, name: str) -> F64:
        return _held(self.run, name, self.lo, self.hi)

    def nan(self) -> F64:
        return np.full(self.hi - self.lo, np.nan)

    def rolling(self, name: str) -> tuple[F64, F64]:
        """Per row: the sum and count of ``name``'s values over the :data:`RECENT` rows ending
        at it (NaN rows count in neither)."""
        got = self._rolled.get(name)
        if got is None:
            if not self.run.tokens.has(name):
                zero = np.zeros(self.hi - self.lo)
                got = (zero, zero)
            else:
                got = _rolling(self.run, name, self.lo, self.hi)
            self._rolled[name] = got
        return got


def _rolling(run: RunModel, name: str, lo: int, hi: int) -> tuple[F64, F64]:
    """Per row of ``[lo, hi)``: the sum and count of ``name``'s values over the :data:`RECENT`
    rows ending at it (NaN rows count in neither)."""
    a = max(0, lo - RECENT + 1)
    x = _held(run, name, a, hi)
    ok = ~np.isnan(x)
    cs = np.concatenate(([0.0], np.cumsum(np.where(ok, x, 0.0))))
    cc = np.concatenate(([0], np.cumsum(ok)))
    end = np.arange(lo - a + 1, hi - a + 1)
    start = np.maximum(end - RECENT, 0)
    return cs[end] - cs[start], (cc[end] - cc[start]).astype(np.float64)


def _share(rows: _Rows, part: str) -> F64:
    """100 * mean(part) / mean(wall_ms) over the recent rows of each row (NaN without either)."""
    if not rows.run.tokens.has(part):
        return rows.nan()
    ps, pc = rows.rolling(part)
    ws, wc = rows.rolling("wall_ms")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 100.0 * (ps / pc) / (ws / wc)
    out[(pc == 0) | (wc == 0) | ~(ws > 0)] = np.nan
    return out


def _tok_s(rows: _Rows) -> F64:
    ws, wc = rows.rolling("wall_ms")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 1000.0 * wc / ws
    out[~(ws > 0)] = np.nan
    return out


def _hit(rows: _Rows) -> F64:
    x = rows.held("cache_hit_pct").copy()
    x[x < 0] = np.nan  # -1: no cache, not 0 %
    return x


def _tok_s_pct_first(rows: _Rows) -> F64:
    a, b = FIRST_WINDOW
    run, lo, hi = rows.run, rows.lo, rows.hi
    out = rows.nan()
    if run.tokens.n < b:
        return out
    first = run.column_stats("wall_ms", a, b)
    if first.count < b - a or not first.sum > 0:
        return out
    base = 1000.0 * first.count / first.sum
    now = _tok_s(rows)
    out = 100.0 * now / base
    out[np.arange(lo, hi) < b + RECENT - 1] = np.nan  # the recent window must lie past the first one
    return out


def _mem_available(rows: _Rows) -> F64:
    return rows.held("mem_available_mib").copy()


def _temp(rows: _Rows) -> F64:
    try:
        v = float(rows.run.sidecar["cpu_temp_max_mC"]) / 1000.0
    except (KeyError, ValueError):
        v = math.nan
    return np.full(rows.hi - rows.lo, v)


def _flash(rows: _Rows) -> F64:
    mode, _ = rows.run.mode()
    return _share(rows, "stall_ms" if mode == "overlap" else "io_ms")


#: The quantities a local run gives the rules: catalogue key -> its value per row of the rows
#: (NaN: absent).
INPUTS: dict[str, Callable[[_Rows], F64]] = {
    "token.cache_hit_pct": _hit,
    "recent.tok_s": _tok_s,
    "recent.flash_pct": _flash,
    "recent.stall_pct": lambda rows: _share(rows, "stall_ms"),
    "recent.tok_s_pct_first": _tok_s_pct_first,
    "token.mem_available_mib": _mem_available,
    "token.rss_mib": lambda rows: rows.held("rss_mib").copy(),
    "device.cpu_temp_max": _temp,
}


def alert_series(run: RunModel, lo: int, hi: int, keys: Iterable[str]) -> tuple[F64, dict[str, F64]]:
    """The run clock of rows ``[lo, hi)`` and each of ``keys``' values there (keys the run cannot
    give, such as the fleet's, are left out: absent)."""
    with run.lock:
        hi = min(hi, run.tokens.n)
        lo = min(lo, hi)
        t = run_clock(run, lo, hi)
        rows = _Rows(run, lo, hi)
        values = {k: INPUTS[k](rows) for k in keys if k in INPUTS}
    return t, values


# ------------------------------------------------------------------------------ default rules
#: The default rules (docs/alerts.md lists each with why its threshold holds). The ``[alerts]``
#: section of the settings file overrides their thresholds and ``for:``; ``[alert_rules]`` adds
#: rules and replaces or turns off these by name.
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("CacheHitLow", "token.cache_hit_pct", "<", 30.0, 60.0, Severity.WARNING,
         "The expert cache holds under 30 % of the lookups: most experts are read from flash.",
         fleet="fleet.hit_pct"),
    Rule("StallShareHigh", "recent.stall_pct", ">", 50.0, 30.0, Severity.WARNING,
         "Under --overlap, compute waits for expert reads over half of each token's wall time.",
         fleet="fleet.stall_pct"),
    Rule("FlashWaitHigh", "recent.flash_pct", ">", 70.0, 30.0, Severity.WARNING,
         "Waiting for expert reads takes over 70 % of each token's wall time.",
         fleet="fleet.stall_share"),
    Rule("MemAvailableLow", "token.mem_available_mib", "<", 512.0, 10.0, Severity.CRITICAL,
         "The device has under 512 MiB available: the page cache is starved and swapping is near."),
    Rule("TemperatureHigh", "device.cpu_temp_max", ">", 85.0, 0.0, Severity.WARNING,
         "The CPU reached 85 °C: it throttles, and tok/s falls with it."),
    Rule("TokSCollapse", "recent.tok_s_pct_first", "<", 50.0, 30.0, Severity.CRITICAL,
         "tok/s fell under half of the run's first steady window (in the fleet: of the stream's best hour).",
         fleet="fleet.speed_pct_best"),
    Rule("InstanceDown", "fleet.up", "==", 0.0, 60.0, Severity.CRITICAL,
         "Prometheus cannot scrape the instance.", fleet="fleet.up"),
)


def with_threshold(rule: Rule, threshold: float | None = None, for_s: float | None = None) -> Rule:
    """``rule`` with another threshold and / or ``for:`` (``None``: kept)."""
    return replace(rule, threshold=rule.threshold if threshold is None else threshold,
                   for_s=rule.for_s if for_s is None else for_s)


def firing_text(active: Sequence[Active], ascii_only: bool = False) -> str:
    """The status line's words for the firing alerts (``""`` when none): the first rule's name
    and reading, and how many more fire."""
    firing = [a for a in active if a.state is AlertState.FIRING]
    if not firing:
        return ""
    a = firing[0]
    mark = "!" if ascii_only else "▲"
    more = f" +{len(firing) - 1}" if len(firing) > 1 else ""
    return f"{mark} {a.rule.name}{more}"
