"""The sweep's views: the ``bmoe-top sweep --json`` document and its text table, and the shapes the
job fills (:class:`SweepRun`, :class:`SweepArm`, :class:`SweepResult`; docs/analysis.md "The
sweep"). The prediction is :mod:`bmoe_top.tui.analysis.speed`'s; the measured tok/s is each
run's own summary.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.numbers import fmt, show
from bmoe_top.tui.present.tables import Column, Row, Table, number_key

__all__ = ["NO_REFERENCE", "ReferenceInputs", "SweepArm", "SweepDocument", "SweepProgress", "SweepResult", "SweepRun",
           "error_words", "progress_line", "progress_words", "sweep_document", "sweep_lines", "sweep_table"]


class ReferenceInputs(TypedDict):
    """What the prediction took from the reference arm (null without one): ms per token over its
    ``costs_runs`` runs (``compute_ms`` a token's compute with no miss, ``miss_ms`` the compute
    one miss adds, ``mgmt_ms`` a token's mgmt with no eviction, ``evict_ms`` the mgmt one
    evicting miss adds, ``stall_ms`` the median: ``reference_costs`` in tui/jobs/sweep.py),
    10^6 bytes/s of one read lane, the mode, lookups per token, bytes per miss (those three
    from the reference run)."""

    compute_ms: float | None
    miss_ms: float | None
    mgmt_ms: float | None
    evict_ms: float | None
    stall_ms: float | None
    costs_runs: int | None
    read_mb_s_per_lane: float | None
    mode: str | None
    lookups: float | None
    miss_bytes: float | None


#: the reference inputs of a sweep without a prediction
NO_REFERENCE: ReferenceInputs = {"compute_ms": None, "miss_ms": None, "mgmt_ms": None, "evict_ms": None,
                                 "stall_ms": None, "costs_runs": None, "read_mb_s_per_lane": None, "mode": None,
                                 "lookups": None, "miss_bytes": None}


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One run of an arm: ``round`` (1..N), its folder ``dir``, its measured decode ``tok_s``
    (None: it failed, ``problem`` says why), ``routing_differs`` when its routing is not the
    reference run's (another workload: left out of the arm's median), ``resumed`` when it was
    found done in the folder and not run again; ``own_costs_tok_s`` the prediction at its budget
    with its own compute, mgmt and stall per token (the reference's routing and bandwidth): the
    check of the read model alone, free of how loaded the machine was."""

    round: int
    dir: str
    tok_s: float | None
    problem: str = ""
    routing_differs: bool = False
    resumed: bool = False
    own_costs_tok_s: float | None = None

    @property
    def own_costs_error(self) -> float | None:
        if self.tok_s is None or self.own_costs_tok_s is None or self.routing_differs:
            return None
        return (self.own_costs_tok_s - self.tok_s) / self.tok_s


@dataclass(frozen=True, slots=True)
class SweepArm:
    """One point of the grid: ``cache_mb`` and ``io_threads``; its ``runs``; ``measured_tok_s``
    the median over its runs with the reference routing (None: none); ``predicted_tok_s`` the
    tok/s model's at this budget from the reference run (None: not predicted); ``error`` the
    prediction's (predicted - measured) / measured."""

    cache_mb: float
    io_threads: int
    runs: tuple[SweepRun, ...]
    measured_tok_s: float | None
    predicted_tok_s: float | None
    predicted_hit_pct: float | None
    predicted_flash_ms: float | None

    @property
    def spread(self) -> float | None:
        """(largest - smallest) / median of the tok/s of its runs with the reference routing
        (None: fewer than two)."""
        good = [x.tok_s for x in self.runs if x.tok_s is not None and not x.routing_differs]
        if len(good) < 2 or self.measured_tok_s is None or self.measured_tok_s <= 0:
            return None
        return (max(good) - min(good)) / self.measured_tok_s

    @property
    def routing_differs(self) -> tuple[int, ...]:
        """The rounds whose routing differs from the reference run's."""
        return tuple(x.round for x in self.runs if x.routing_differs)

    @property
    def own_costs_error(self) -> float | None:
        """The median over its runs of the own-costs prediction's error (None: no run has one)."""
        e = [x.own_costs_error for x in self.runs if x.own_costs_error is not None]
        return statistics.median(e) if e else None

    @property
    def error(self) -> float | None:
        if self.measured_tok_s is None or self.predicted_tok_s is None or self.measured_tok_s <= 0:
            return None
        return (self.predicted_tok_s - self.measured_tok_s) / self.measured_tok_s


@dataclass(frozen=True, slots=True)
class SweepResult:
    """A sweep: the ``model``, the output folder ``out``, the ``order`` it ran in, the ``arms``;
    ``reference`` the run whose routing and costs predict every arm (its folder) and
    ``reference_inputs`` what the prediction took from it (compute, mgmt, stall ms per token,
    read MB/s of one lane, mode); ``notes`` what could not be done."""

    model: str
    out: str
    order: str
    arms: tuple[SweepArm, ...]
    reference: str | None
    reference_inputs: ReferenceInputs
    notes: tuple[str, ...] = ()

    def errors(self) -> list[float]:
        return [a.error for a in self.arms if a.error is not None]

    def median_abs_error(self) -> float | None:
        e = sorted(abs(x) for x in self.errors())
        if not e:
            return None
        m = len(e) // 2
        return e[m] if len(e) % 2 else (e[m - 1] + e[m]) / 2

    def max_abs_error(self) -> float | None:
        e = [abs(x) for x in self.errors()]
        return max(e) if e else None

    def own_costs_errors(self) -> list[float]:
        """Every run's own-costs prediction error."""
        return [x.own_costs_error for a in self.arms for x in a.runs if x.own_costs_error is not None]


@dataclass(frozen=True, slots=True)
class SweepProgress:
    """Where a sweep is: ``total`` runs in the grid, ``done`` ended (``resumed`` of them found done
    in the folder), ``running`` the run going on (cache MiB, lanes, round; None between runs),
    ``paused``, ``elapsed_s`` since the sweep started, ``eta_s`` the runs left to make times the
    mean time of those made so far (None before one ended, or with none left), ``last`` the run
    that just ended with its arm (cache MiB, lanes), ``so_far`` the arms with the runs ended so far
    (measured, nothing predicted yet)."""

    total: int
    done: int
    resumed: int
    running: tuple[float, int, int] | None
    paused: bool
    elapsed_s: float
    eta_s: float | None
    last: tuple[float, int, SweepRun] | None
    so_far: SweepResult

    @property
    def left(self) -> int:
        """Runs neither ended nor going on."""
        return self.total - self.done - (1 if self.running is not None else 0)


def progress_line(p: SweepProgress) -> str:
    """The line a run that ended gets on stderr: done/total, its arm and round, its tok/s or
    why it has none, the time so far and the ETA."""
    assert p.last is not None
    cache_mb, lanes, x = p.last
    what = f"{x.tok_s:.3g} tok/s" if x.tok_s is not None else (x.problem or "no tok/s")
    eta = f", ETA {fmt(p.eta_s, 0)} s" if p.eta_s is not None else ""
    return (f"sweep [{p.done}/{p.total}] {fmt(cache_mb, 0)} MiB, {lanes} lane(s), round {x.round}: {what}"
            f"{' (done before)' if x.resumed else ''} (elapsed {fmt(p.elapsed_s, 0)} s{eta})")


def progress_words(p: SweepProgress | None, result: SweepResult | None) -> str:
    """The screen's progress line: the run going on, done / running / left, the time so far and
    the ETA; once ended, what was run and found done."""
    if result is not None and p is not None:
        made = p.done - p.resumed
        took = f" in {fmt(p.elapsed_s, 0)} s" if made else ""
        return f"ended: {p.done} of {p.total} runs ({made} made now{took}, {p.resumed} found done before)"
    if p is None:
        return "starting"
    parts = []
    if p.running is not None:
        c, lanes, rnd = p.running
        parts.append(f"running {fmt(c, 0)} MiB x {lanes} lane(s), round {rnd}")
    parts.append(f"done {p.done} ({p.resumed} before), running {0 if p.running is None else 1}, left {p.left}")
    parts.append(f"elapsed {fmt(p.elapsed_s, 0)} s" + (f", ETA {fmt(p.eta_s, 0)} s" if p.eta_s is not None else ""))
    return ("PAUSED (after the run going on)  " if p.paused else "") + "; ".join(parts)


def sweep_table(r: SweepResult) -> Table:
    """The arms as the screen's table: budget, lanes, runs used / made, the measured median and
    spread, the prediction, its error, the error with each run's own costs, the routing:
    ``same`` as the reference run's, ``differs (2)`` naming the rounds left out, ``failed (1)``
    the rounds that ended without a tok/s."""
    tq, eq, mq, sq = q("predict.tok_s"), q("predict.error_pct"), q("sweep.measured_tok_s"), q("sweep.spread_pct")
    cols = (Column("cache_mb", "cache MiB", short="MiB"), Column("lanes", "lanes", drop=2),
            Column("runs", "runs used/made", short="runs"), Column("measured", mq.label, short="measured"),
            Column("spread", sq.label, drop=3), Column("predicted", tq.scoped(), short="predicted"),
            Column("error", eq.label, short="error"), Column("own", "error, own costs", short="own costs", drop=1),
            Column("routing", "routing", False))
    rows = []
    for a in r.arms:
        ok = sum(1 for x in a.runs if x.tok_s is not None and not x.routing_differs)
        made = sum(1 for x in a.runs if x.tok_s is not None or x.problem)
        err, own, spread = _pct(a.error), _pct(a.own_costs_error), _pct(a.spread)
        flagged = a.routing_differs
        failed = [x.round for x in a.runs if x.problem]
        routing = (f"differs ({', '.join(map(str, flagged))})" if flagged else "same" if ok else "")
        if failed:
            routing += ("; " if routing else "") + f"failed ({', '.join(map(str, failed))})"
        kind = "bad" if flagged or failed else ""
        rows.append(Row((fmt(a.cache_mb, 0), str(a.io_threads), f"{ok}/{made}", show(mq, a.measured_tok_s),
                         show(sq, spread), show(tq, a.predicted_tok_s), show(eq, err), show(eq, own), routing),
                        (a.cache_mb, a.io_threads, ok, number_key(a.measured_tok_s), number_key(spread),
                         number_key(a.predicted_tok_s), number_key(err), number_key(own), routing), kind))
    ri = r.reference_inputs
    if ri["compute_ms"] is not None:
        ref = "/".join(Path(r.reference or "").parts[-2:])  # the arm's run in the sweep's folder, not the whole path
        note = (f"predicted from {ref}'s routing and read bandwidth and the reference arm's "
                f"{ri['costs_runs']} run(s): compute {fmt(ri['compute_ms'], 1)} ms a token + "
                f"{fmt(ri['miss_ms'], 2)} ms a miss, mgmt {fmt(ri['mgmt_ms'], 1)} ms a token + "
                f"{fmt(ri['evict_ms'], 2)} ms an eviction ({ri['mode']})")
    else:
        note = "nothing predicted yet" if not r.notes else "nothing predicted: " + "; ".join(r.notes)
    return Table("arms", cols, tuple(rows), note)


class SweepRunDoc(TypedDict):
    round: int
    dir: str
    tok_s: float | None
    problem: str
    routing_differs: bool
    resumed: bool
    own_costs_tok_s: float | None
    own_costs_error_pct: float | None


class SweepArmDoc(TypedDict):
    cache_mb: float
    io_threads: int
    runs: list[SweepRunDoc]
    measured_tok_s: float | None
    spread_pct: float | None
    predicted_tok_s: float | None
    predicted_hit_pct: float | None
    predicted_flash_ms: float | None
    error_pct: float | None
    own_costs_error_pct: float | None


class SweepDocument(TypedDict):
    """``bmoe-top sweep --json`` (docs/analysis.md "The sweep")."""

    model: str
    out: str
    order: str
    reference: str | None
    reference_inputs: ReferenceInputs
    arms: list[SweepArmDoc]
    median_abs_error_pct: float | None
    max_abs_error_pct: float | None
    own_costs_median_abs_error_pct: float | None
    own_costs_max_abs_error_pct: float | None
    notes: list[str]


def _pct(v: float | None) -> float | None:
    return None if v is None else 100.0 * v


def sweep_document(r: SweepResult) -> SweepDocument:
    """The sweep as JSON: every arm's runs, measured and predicted tok/s and the error."""
    own = r.own_costs_errors()
    return {
        "model": r.model, "out": r.out, "order": r.order, "reference": r.reference,
        "reference_inputs": r.reference_inputs,
        "arms": [{"cache_mb": a.cache_mb, "io_threads": a.io_threads,
                  "runs": [{"round": x.round, "dir": x.dir, "tok_s": x.tok_s, "problem": x.problem,
                            "routing_differs": x.routing_differs, "resumed": x.resumed,
                            "own_costs_tok_s": x.own_costs_tok_s, "own_costs_error_pct": _pct(x.own_costs_error)}
                           for x in a.runs],
                  "measured_tok_s": a.measured_tok_s, "spread_pct": _pct(a.spread),
                  "predicted_tok_s": a.predicted_tok_s,
                  "predicted_hit_pct": a.predicted_hit_pct, "predicted_flash_ms": a.predicted_flash_ms,
                  "error_pct": _pct(a.error), "own_costs_error_pct": _pct(a.own_costs_error)} for a in r.arms],
        "median_abs_error_pct": _pct(r.median_abs_error()), "max_abs_error_pct": _pct(r.max_abs_error()),
        "own_costs_median_abs_error_pct": _pct(statistics.median([abs(e) for e in own]) if own else None),
        "own_costs_max_abs_error_pct": _pct(max(abs(e) for e in own) if own else None),
        "notes": list(r.notes),
    }


def error_words(r: SweepResult) -> str:
    """The errors over the arms: the median and largest |error| of the prediction, then with each
    run's own costs."""
    eq = q("predict.error_pct")
    med, mx = r.median_abs_error(), r.max_abs_error()
    own = [abs(e) for e in r.own_costs_errors()]
    return (f"median |error| {show(eq, _pct(med))}, largest {show(eq, _pct(mx))}; with each run's own costs: "
            f"median {show(eq, _pct(statistics.median(own) if own else None))}, "
            f"largest {show(eq, _pct(max(own) if own else None))}")


def sweep_lines(r: SweepResult) -> list[str]:
    """The sweep as a text table: one line per arm, then the errors' median and maximum."""
    tq, eq, sq = q("predict.tok_s"), q("predict.error_pct"), q("sweep.spread_pct")
    ri = r.reference_inputs
    costs = (f": compute {fmt(ri['compute_ms'], 1)} ms a token + {fmt(ri['miss_ms'], 2)} ms a miss, mgmt "
             f"{fmt(ri['mgmt_ms'], 1)} ms a token + {fmt(ri['evict_ms'], 2)} ms an eviction (the reference arm's "
             f"{ri['costs_runs']} run(s))"
             if ri["compute_ms"] is not None else "")
    lines = [f"sweep of {r.model} ({r.order}); prediction from {r.reference or 'no reference run'}{costs}",
             f"{'cache MiB':>10} {'lanes':>5} {'runs':>5} {'measured tok/s':>15} {sq.label:>8} {tq.scoped():>18} "
             f"{eq.label:>17} {'with own costs':>15}"]
    for a in r.arms:
        ok = sum(1 for x in a.runs if x.tok_s is not None and not x.routing_differs)
        err = a.error
        lines.append(f"{fmt(a.cache_mb, 0):>10} {a.io_threads:>5} {ok:>5} {show(tq, a.measured_tok_s):>15} "
                     f"{show(sq, _pct(a.spread)):>8} {show(tq, a.predicted_tok_s):>18} {show(eq, _pct(err)):>17} "
                     f"{show(eq, _pct(a.own_costs_error)):>15}")
        for x in a.runs:
            if x.problem or x.routing_differs:
                lines.append(f"    round {x.round}: " + (x.problem or "routing differs from the reference run: "
                                                                         "left out"))
    lines.append(error_words(r))
    lines += [f"note: {n}" for n in r.notes]
    return lines
