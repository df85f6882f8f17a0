"""One fleet instance's drill-downs -> the run model (docs/fleet.md "The screen").

:class:`DrillFeed` takes what ``FleetSession.drill`` returns (anything of the :class:`DrillData`
shape: the time grid and the per-column series asked with ``query_range``, the per-layer rates,
the counters' totals) and writes one row per grid step (``row_unit`` interval, per-token means
over the step's rate window): the same columns a ``/metrics`` scrape interval gives
(:mod:`bmoe_top.tui.feed.metrics`), so the shared views (breakdown, trends, layer heatmap, run
panel, overview and zoom) draw it as they draw ``attach --metrics``. Because the rows come from
Prometheus' storage, the first drill-down already holds the whole window, from before bmoe-top
started.

Successive drill-downs ask the whole window again on an aligned grid (``drill(align=True)``):
only the steps newer than the newest row written are appended, and only once they are settled
(older than ``settled``: a step at "now" may still miss a scrape in progress), so a row is
written once and never rewritten. A step where the instance had no value (down, not exported)
is a row of absent values, never zeros. A failed drill-down changes only the status; the rows
stay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from bmoe_top.parsers.prom import MIB, PromSnapshot
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.feed.metrics import summary_notes, totals_summary
from bmoe_top.tui.model import RowUnit, RunModel, Status
from bmoe_top.tui.model.quantities import Scope
from bmoe_top.tui.sources.prometheus import PromError, PromErrorKind

__all__ = ["DrillData", "DrillFeed", "ERROR_STATUS", "step_row", "STEP_COLUMNS"]


class DrillData(Protocol):
    """What :class:`DrillFeed` reads of a drill-down (``bmoe_top.tui.fleet.drill.DrillDown``)."""

    @property
    def job(self) -> str: ...
    @property
    def instance(self) -> str: ...
    @property
    def at(self) -> float: ...
    @property
    def step_s(self) -> float: ...
    @property
    def t(self) -> np.ndarray: ...
    @property
    def series(self) -> Mapping[str, np.ndarray]: ...
    @property
    def layers(self) -> Sequence[int]: ...
    @property
    def layer_hits(self) -> np.ndarray: ...
    @property
    def layer_misses(self) -> np.ndarray: ...
    @property
    def totals(self) -> Mapping[str, float | None]: ...


#: A failed drill-down's error kind -> the run's status.
ERROR_STATUS: dict[PromErrorKind, Status] = {
    PromErrorKind.UNREACHABLE: Status.UNREACHABLE,
    PromErrorKind.TIMEOUT: Status.UNREACHABLE,
    PromErrorKind.MALFORMED: Status.MALFORMED,
}

#: Row columns copied from the drill-down's series as they are (same name).
STEP_COLUMNS = ("wall_ms", "compute_ms", "io_ms", "stall_ms", "mgmt_ms", "flash_ms", "tok_s", "prompt_tok_s",
                "read_mib_s", "stall_share", "up", "resident_experts", "resident_mib", "budget_experts",
                "budget_mib", "requests_processing", "requests_deferred")


def _v(a: np.ndarray | None, j: int) -> float | None:
    if a is None:
        return None
    x = float(a[j])
    return x if math.isfinite(x) else None


def step_row(d: DrillData, j: int) -> dict[str, float | None]:
    """Row ``j`` of the grid: :data:`STEP_COLUMNS`, ``t`` (Unix s), ``interval_s`` (the step),
    ``cache_hit_pct`` and ``interval_hit_pct`` (the rate window's hit %), ``read_mib`` (MiB read
    per generated token) and ``tokens_in_interval`` (tok/s x step). ``None`` where absent."""
    s = d.series
    row: dict[str, float | None] = {k: _v(s.get(k), j) for k in STEP_COLUMNS}
    hit = _v(s.get("hit_pct"), j)
    tok, read = row["tok_s"], row["read_mib_s"]
    row.update({
        "t": float(d.t[j]), "interval_s": d.step_s, "cache_hit_pct": hit, "interval_hit_pct": hit,
        "read_mib": read / tok if read is not None and tok else None,
        "tokens_in_interval": tok * d.step_s if tok is not None else None,
    })
    return row


def _newest(a: np.ndarray | None, stop: int) -> float | None:
    if a is None or stop <= 0:
        return None
    ok = np.flatnonzero(np.isfinite(a[:stop]))
    return float(a[ok[-1]]) if ok.size else None


class DrillFeed:
    """Drill-downs of one instance -> ``run`` (see the module docstring). ``rows``: rows written;
    ``drills`` / ``failures``: drill-downs applied and failed; ``last``: the newest applied."""

    def __init__(self, run: RunModel, name: str = "") -> None:
        self.run = run
        self.rows = 0
        self.drills = 0
        self.failures = 0
        self.last: DrillData | None = None
        self.last_t: float | None = None
        run.set_row_unit(RowUnit.INTERVAL)
        run.set_summary_scope(Scope.SINCE_START)  # the run panel's figures: the counters' totals
        if name:
            run.add_source(sanitize(name))  # first: the events of its states name it
        run.set_status(Status.CONNECTING, "")

    def apply(self, d: DrillData, settled: float | None = None) -> int:
        """Append the steps of ``d`` newer than the newest row and not after ``settled`` (Unix s;
        default ``d.at``); returns the rows added."""
        run = self.run
        horizon = d.at if settled is None else min(d.at, settled)
        t = d.t
        eps = d.step_s * 0.01
        lo = 0 if self.last_t is None else int(np.searchsorted(t, self.last_t + eps))
        hi = int(np.searchsorted(t, horizon + eps))
        n_layer = (max(d.layers) + 1) if len(d.layers) else 0
        with run.lock:
            self.drills += 1
            self.last = d
            if self.last_t is not None and lo < hi and t[lo] - self.last_t > 1.5 * d.step_s:
                run.add_log(f"bmoe-top: no rows for {t[lo] - self.last_t - d.step_s:.0f} s before "
                            f"{t[lo]:.0f} (older than the window when asked)")
            if n_layer:
                run.set_dims(n_layer=n_layer, grow=True)
            for j in range(lo, hi):
                i = run.add_token_row(step_row(d, j))
                if n_layer:
                    hits = np.full(n_layer, np.nan)
                    misses = np.full(n_layer, np.nan)
                    hits[list(d.layers)] = d.layer_hits[:, j] * d.step_s
                    misses[list(d.layers)] = d.layer_misses[:, j] * d.step_s
                    if np.isfinite(hits).any() or np.isfinite(misses).any():
                        run.add_layer_counts(i, hits, misses)
            if hi > lo:
                self.rows += hi - lo
                self.last_t = float(t[hi - 1])
            values = {k: v for k, v in d.totals.items() if v is not None and math.isfinite(v)}
            budget = _newest(d.series.get("budget_mib"), hi)
            if budget is not None:
                values["cache_bytes"] = budget * MIB
            totals = PromSnapshot(t=d.at, values=values)
            summary: dict[str, float | int | None] = dict(totals_summary(totals))
            run.set_summary_notes(summary_notes(totals))
            resident = _newest(d.series.get("resident_mib"), hi)
            summary["resident_mib"] = resident
            run.update_summary(summary)
            run.set_cache_mib(resident_mib=resident, budget_mib=budget)
            up = _v(d.series.get("up"), len(t) - 1) if len(t) else None
            run.set_status(Status.OK, "instance up" if up == 1 else
                           "instance down (up = 0)" if up == 0 else "instance not scraped now")
        return hi - lo

    def failed(self, err: PromError) -> None:
        """A drill-down that did not come back: the status says why; the rows stay."""
        status = ERROR_STATUS.get(err.kind, Status.ERROR)
        if err.kind is PromErrorKind.HTTP and err.http_status in (401, 403):
            status = Status.UNAUTHORIZED
        detail = sanitize(f"{err.kind.value}: {err.message}")
        with self.run.lock:
            self.failures += 1
            self.run.set_status(status, detail)
            self.run.add_log("prometheus: " + detail + (f" (query {sanitize(err.query)})" if err.query else ""))
