"""``bmoe-top sweep``: run the runtime at several cache budgets (and read lanes), N times each in
an order that keeps drift off the arms, record every run in a folder, and put each arm's measured
tok/s beside the tok/s model's prediction from one reference run (docs/analysis.md "The sweep").

Each run is a child process (the bundled ``bmoe-run`` or any command that takes its flags) in its
own process group, always reaped; its folder ``OUT/c<MiB>-l<lanes>/run<N>/`` holds ``run.csv``
(the per-token CSV), ``run.route.csv`` (the route trace), ``run.log`` (its output) and
``run.json`` (the command line, the machine, the exit status, the wall time). A run whose
``run.json`` says it ended well is not run again: a sweep cut short resumes where it stopped.

The prediction: the reference run is round 1 of the first budget and the first lane count given;
its routing is replayed through the LRU at every budget (tui/jobs/whatif.py) and turned into
tok/s with its read bandwidth per lane times the arm's lanes, the misses that evict at the arm's
budget, and the reference arm's costs over all its rounds (:func:`reference_costs`: the compute a
miss adds and the mgmt an eviction adds, fitted on its tokens, and the medians of the rest; one
run's compute swings with the machine's load, the median of the rounds does not follow one of
them) (tui/jobs/sizing.py). A run whose decode routing is not the
reference's (another workload) is flagged and left out of its arm's median and of the reference
costs. No Textual.

Progress: :func:`run_sweep` reports a :class:`~bmoe_top.tui.present.sweep.SweepProgress` when a
run starts and when it ends; a :class:`SweepControl` pauses it between runs or stops it (the
running child's process group ended at once).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bmoe_top.outfile import OutputFileError, write_atomic
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.analysis.cachesim import token_evictions
from bmoe_top.tui.analysis.speed import MIB, Prediction, hit_at, predict
from bmoe_top.tui.jobs.sizing import demand, evictions_at, policy_hits, token_costs
from bmoe_top.tui.jobs.whatif import WhatIfError, analyse_input, load_whatif, run_costs, summary_number
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.sweep import (
    NO_REFERENCE,
    ReferenceInputs,
    SweepArm,
    SweepProgress,
    SweepResult,
    SweepRun,
)
from bmoe_top.tui.present.whatif import RunCosts

__all__ = ["ORDERS", "MeasuredRun", "SweepControl", "SweepError", "SweepPlan", "SweepStopped", "arm_dir",
           "parse_list", "reference_costs", "run_sweep", "schedule"]

#: The orders a sweep runs its arms in each round.
ORDERS = ("interleaved", "reversed", "random")


class SweepError(ValueError):
    """A sweep that cannot be run; ``str()`` is one sentence for the user."""


class SweepStopped(Exception):
    """The sweep was stopped (:meth:`SweepControl.stop`) before its end: the run going on was ended
    and left undone (a later sweep over the folder runs it again)."""


class SweepControl:
    """Pause, resume or stop a sweep from another thread. A pause takes effect between runs (the
    run going on ends first); a stop ends the running child's process group at once and makes
    :func:`run_sweep` raise :class:`SweepStopped`."""

    #: Seconds between two looks at the stop flag while a child runs.
    POLL_S = 0.1

    def __init__(self) -> None:
        self._go = threading.Event()
        self._go.set()
        self._stop = threading.Event()
        #: True while the sweep's thread waits in :meth:`wait` (paused between two runs)
        self.holding = False

    def pause(self) -> None:
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()

    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait(self) -> None:
        """Block while paused; raises SweepStopped once stopped."""
        self.holding = True
        try:
            self._go.wait()
        finally:
            self.holding = False
        if self._stop.is_set():
            raise SweepStopped


@dataclass(frozen=True)
class SweepPlan:
    """What to run: ``command`` the runtime's command line before its flags; ``model``; the grid
    ``cache_mb`` x ``io_threads``; ``overlap`` (``--overlap``); ``runs`` per arm; ``order`` one of
    :data:`ORDERS` (``interleaved``: every arm once per round, in the order given; ``reversed``:
    every other round backwards; ``random``: shuffled per round from ``seed``); ``prompt`` and
    ``n_predict``; ``out`` the folder; ``timeout_s`` per run; ``extra`` flags for every run;
    ``env`` (name, value) pairs added to every run's environment, the same for every arm (the
    bundled runtime on crowded cores: ``OMP_WAIT_POLICY=PASSIVE``, chosen once for the sweep by
    :func:`~bmoe_top.tui.sources.child_session.runtime_wait_env`), kept in each run's ``run.json``."""

    command: tuple[str, ...]
    model: str
    cache_mb: tuple[float, ...]
    io_threads: tuple[int, ...] = (1,)
    overlap: bool = False
    runs: int = 1
    order: str = "interleaved"
    prompt: str = "Hello"
    n_predict: int = 32
    out: str = "sweep"
    timeout_s: float = 600.0
    extra: tuple[str, ...] = ()
    seed: int = 0
    env: tuple[tuple[str, str], ...] = ()

    def arms(self) -> list[tuple[float, int]]:
        return list(itertools.product(self.cache_mb, self.io_threads))


def schedule(plan: SweepPlan) -> Iterator[tuple[int, int]]:
    """(round 1..N, arm index) in the order the runs are made."""
    n = len(plan.arms())
    for r in range(1, plan.runs + 1):
        order = list(range(n))
        if plan.order == "reversed" and r % 2 == 0:
            order.reverse()
        elif plan.order == "random":
            random.Random(plan.seed * 1_000_003 + r).shuffle(order)
        for i in order:
            yield r, i


def arm_dir(out: str, cache_mb: float, lanes: int, rnd: int) -> Path:
    """The folder of one run: ``OUT/c<MiB>-l<lanes>/run<N>``."""
    return Path(out) / f"c{cache_mb:.10g}-l{lanes}" / f"run{rnd}"


def _machine() -> dict[str, object]:
    info: dict[str, object] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": sys.version.split()[0]}
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        info["loadavg"] = None
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            info["mem_total_kb"] = int(fh.readline().split()[1])
    except (OSError, ValueError, IndexError):
        info["mem_total_kb"] = None
    return info


def _measured(d: Path) -> tuple[float | None, str, MeasuredRun | None]:
    """The run's decode tok/s from its CSV summary and its own costs (None without compute or
    mgmt in its summary), or (None, why, None)."""
    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.sources.files import ReplayError

    try:
        run = open_paths([str(d / "run.csv")])
    except ReplayError as e:
        return None, str(e), None
    v, _ = summary_number(run, "tok_s")
    if v is None or not v > 0:
        return None, "its CSV has no tok/s in a # summary line", None
    costs = run_costs(run)
    if costs is None:
        return v, "", None
    with run.lock:
        n = run.tokens.n
        cols = [np.array(run.tokens.view(c, 0, n), dtype=np.float64) if run.tokens.has(c) else np.full(n, np.nan)
                for c in ("compute_ms", "read_mib", "mgmt_ms")]
    return v, "", MeasuredRun(costs, cols[0], cols[1], cols[2])


def _routing_key(d: Path) -> str | None:
    """A digest of the run's decode routing (step, layer, expert of every decode row)."""
    from bmoe_top.parsers.route_trace import load_route_trace

    try:
        t = load_route_trace((d / "run.route.csv").read_bytes())
    except (OSError, ValueError):
        return None
    dec = t.phase == 1
    h = hashlib.sha256()
    for col in (t.step[dec], t.layer[dec], t.expert[dec]):
        h.update(col.astype("int32").tobytes())
    return h.hexdigest()


def _done(d: Path) -> bool:
    try:
        rec = json.loads((d / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and rec.get("exit") == 0 and (d / "run.csv").is_file()


def _last_error(out: bytes) -> str:
    """``: <line>`` for a failed child's output: its last line that says ``error`` (else its last
    line), one line safe to draw, at most 200 characters; "" when it printed nothing."""
    lines = [ln.strip() for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
    return f": {sanitize(said[:200])}" if said else ""


def _run_one(plan: SweepPlan, cache_mb: float, lanes: int, d: Path, control: SweepControl) -> str:
    """Run one arm's child into ``d``; returns "" or why it failed. Raises KeyboardInterrupt or
    SweepStopped after ending the child's process group (nothing recorded: the run is not done)."""
    d.mkdir(parents=True, exist_ok=True)
    argv = [*plan.command, "-m", plan.model, "--cache-mb", f"{cache_mb:.10g}", "--force-cache",
            "--io-threads", str(lanes), "-p", plan.prompt, "-n", str(plan.n_predict), "--csv", str(d / "run.csv"),
            "--route-trace", str(d / "run.route.csv"), "--force", *(["--overlap"] if plan.overlap else []),
            *plan.extra]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **dict(plan.env)} if plan.env else None)
    try:
        timed_out = False
        while True:
            left = plan.timeout_s - (time.monotonic() - t0)
            if left <= 0:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                timed_out = True
                break
            try:
                out, _ = proc.communicate(timeout=min(control.POLL_S, left))
                break
            except subprocess.TimeoutExpired:
                if control.stopped:
                    raise SweepStopped from None
        code: int | None = None if timed_out else proc.returncode
        why = (f"still running after {fmt(plan.timeout_s, 0)} s: ended" if timed_out
               else "" if code == 0 else f"exited with status {code}" + _last_error(out or b""))
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    wall = time.monotonic() - t0
    write_atomic(d / "run.log", out or b"", force=True)
    rec = {"argv": argv, "cache_mb": cache_mb, "io_threads": lanes, "overlap": plan.overlap, "exit": code,
           "wall_s": round(wall, 3), "machine": _machine(), "env": dict(plan.env)}
    write_atomic(d / "run.json", json.dumps(rec, indent=1).encode(), force=True)
    return why


Predictor = Callable[[float, int, RunCosts], Prediction]

#: Tokens a run needs (with different miss counts) for its slope of compute on misses to count.
MIN_FIT_TOKENS = 4


@dataclass(frozen=True)
class MeasuredRun:
    """What :func:`reference_costs` takes from one run: its summary's ``costs``, and per decode
    token (the CSV's rows) its ``compute_ms``, ``read_mib`` and ``mgmt_ms``, float [n] (NaN: not
    reported)."""

    costs: RunCosts
    compute_ms: npt.NDArray[np.float64]
    read_mib: npt.NDArray[np.float64]
    mgmt_ms: npt.NDArray[np.float64]


def _evict_fit(r: MeasuredRun, evictions: npt.NDArray[np.float64]) -> tuple[float, float] | None:
    """(mgmt of a token with no eviction, mgmt one eviction adds) of one run: the median mgmt of
    its tokens with no eviction (0 when every token evicts), and the median over its evicting
    tokens of their mgmt above that over their evictions (the Theil-Sen slope of a line through
    that base); None when its rows are not the replay's tokens one to one or fewer than
    :data:`MIN_FIT_TOKENS` of them evict."""
    if r.mgmt_ms.shape != evictions.shape:
        return None
    ok = np.isfinite(r.mgmt_ms)
    y, x = r.mgmt_ms[ok], evictions[ok]
    some = x > 0
    if int(some.sum()) < MIN_FIT_TOKENS:
        return None
    base = float(np.median(y[~some])) if (~some).any() else 0.0
    return base, float(np.median((y[some] - base) / x[some]))


def _mean_mgmt(r: MeasuredRun) -> float:
    """A run's mgmt per token: the mean of its rows' (its summary's when no row reports it)."""
    ok = np.isfinite(r.mgmt_ms)
    return float(np.mean(r.mgmt_ms[ok])) if ok.any() else r.costs.mgmt_ms


def reference_costs(runs: Sequence[MeasuredRun], miss_bytes: float,
                    evictions: npt.NDArray[np.float64] | None = None) -> RunCosts:
    """The costs per token a sweep predicts every arm with, from ``runs`` (the reference arm's
    runs with the reference routing, every round), the bytes one miss reads and ``evictions``
    (float [decode tokens]: the misses that evict in each decode token of the reference routing
    at the reference budget, :func:`~bmoe_top.tui.analysis.cachesim.token_evictions`; None: not
    known):

    - ``miss_ms``: the compute one miss adds (the runtime's work for a miss besides its read and
      mgmt, which the runtime counts as compute): per run, the Theil-Sen slope of its tokens'
      compute ms on their misses (read MiB / MiB a miss), robust to a token that met a load spike,
      and 0 when its 95 % interval reaches 0 (its tokens do not tell it from none); the median
      over the runs with :data:`MIN_FIT_TOKENS` tokens and more than one miss count, at least 0;
      0 when no run has them (every token missed alike);
    - ``compute_ms``: a token's compute with no miss: per run the mean over its tokens of compute
      - ``miss_ms`` x misses (the mean, as the measured tok/s is), the median over the runs; the
      median of the runs' summary compute when no run reports compute per token;
    - ``evict_ms``: the mgmt one evicting miss adds (the runtime moves the evicted expert's pages
      into the missed one): per run with :data:`MIN_FIT_TOKENS` evicting tokens, the median over
      them of (mgmt - base) / evictions, ``base`` the median mgmt of its tokens with no eviction
      (0 when every token evicts: the line's intercept through the evicting tokens alone is no
      token's mgmt, cache management costs more per eviction when a token evicts less); the
      median over the runs, at least 0; 0 when no run has them;
    - ``mgmt_ms``: with ``evict_ms`` > 0 the median over those runs of their ``base``, else the
      median over the runs of their tokens' mean (their summary's when no token reports it: the
      summary has 0.1 ms steps);
    - ``stall_ms``: the median of the runs' summaries; the mode and lanes of the first.
    Raises ValueError for no runs."""
    from scipy.stats import theilslopes

    if not runs:
        raise ValueError("no runs")
    med = statistics.median
    per_miss = miss_bytes / MIB if miss_bytes > 0 else math.inf
    fits: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = []
    slopes = []
    for r in runs:
        ok = np.isfinite(r.compute_ms) & np.isfinite(r.read_mib)
        x, y = r.read_mib[ok] / per_miss, r.compute_ms[ok]
        if x.size:
            fits.append((x, y))
        if x.size >= MIN_FIT_TOKENS and float(np.ptp(x)) > 0:
            t = theilslopes(y, x)
            slopes.append(float(t.slope) if t.low_slope > 0 else 0.0)
    miss_ms = max(0.0, med(slopes)) if slopes else 0.0
    if fits:
        compute = med(float(np.mean(y - miss_ms * x)) for x, y in fits)
    else:
        compute, miss_ms = med(c.costs.compute_ms for c in runs), 0.0
    evict_fits = [f for r in runs if evictions is not None and (f := _evict_fit(r, evictions)) is not None]
    evict_ms = max(0.0, med(f[1] for f in evict_fits)) if evict_fits else 0.0
    mgmt = med(f[0] for f in evict_fits) if evict_ms > 0 else med(_mean_mgmt(r) for r in runs)
    first = runs[0].costs
    return RunCosts(max(0.0, compute), mgmt, med(c.costs.stall_ms for c in runs), first.overlap, first.lanes, None,
                    first.read_mib_per_tok, miss_ms, evict_ms)


def _predict(plan: SweepPlan, ref: Path, ref_runs: Sequence[MeasuredRun]) -> tuple[
        dict[tuple[float, int], tuple[float, float, float]], ReferenceInputs, list[str], Predictor]:
    """Per arm (cache MiB, lanes): (predicted tok/s, hit %, flash ms) from the reference run's
    routing (its hits and evicting misses at the arm's budget) and bandwidth and the reference
    arm's costs (:func:`reference_costs` of ``ref_runs``), and the predictor itself (a budget,
    lanes and costs per token -> the prediction) for the check with each run's own costs."""
    inp = load_whatif([str(ref / "run.route.csv"), str(ref / "run.csv")])
    if inp.run_costs is None or inp.read_mib_s is None:
        raise WhatIfError("the reference run's CSV has no compute, mgmt or read bandwidth in its summary")
    report, _ = analyse_input(inp, sorted(set(plan.cache_mb)))
    lookups, miss = demand(report)
    lru = next(c for c in report.curves if c.policy == "lru")
    hits = policy_hits(lru, lookups, miss)
    per_lane = inp.read_mib_s * MIB / 1e6
    costs = reference_costs(ref_runs, miss, token_evictions(inp.lookups, round(plan.cache_mb[0] * MIB)))

    def predictor(cache_mb: float, lanes: int, c: RunCosts) -> Prediction:
        tc = token_costs(c, lookups, miss, per_lane * lanes)
        return predict(cache_mb, hit_at(lru.budgets_mib, hits, cache_mb), tc,
                       evictions=evictions_at(inp.lookups, lru, cache_mb))

    out = {}
    for cache_mb, lanes in plan.arms():
        p = predictor(cache_mb, lanes, costs)
        out[(cache_mb, lanes)] = (p.tok_s(costs.overlap), 100.0 * p.hit, p.flash_ms)
    used: ReferenceInputs = {
        "compute_ms": costs.compute_ms, "miss_ms": costs.miss_ms, "mgmt_ms": costs.mgmt_ms, "evict_ms": costs.evict_ms,
        "stall_ms": costs.stall_ms, "costs_runs": len(ref_runs), "read_mb_s_per_lane": per_lane,
        "mode": "overlap" if costs.overlap else "serial", "lookups": lookups, "miss_bytes": miss}
    return out, used, list(inp.notes), predictor


def _arm(cache_mb: float, lanes: int, runs: Sequence[SweepRun],
         pred: tuple[float, float, float] | None = None) -> SweepArm:
    good = [x.tok_s for x in runs if x.tok_s is not None and not x.routing_differs]
    return SweepArm(cache_mb, lanes, tuple(runs), statistics.median(good) if good else None,
                    *(pred if pred is not None else (None, None, None)))


def _so_far(plan: SweepPlan, results: dict[tuple[int, int], SweepRun]) -> SweepResult:
    """The sweep as far as it went: every arm's runs ended so far and their median, nothing
    predicted yet (the prediction needs the reference arm's every round)."""
    arms = [_arm(c, lanes, [results[(r, i)] for r in range(1, plan.runs + 1) if (r, i) in results])
            for i, (c, lanes) in enumerate(plan.arms())]
    return SweepResult(plan.model, plan.out, plan.order, tuple(arms), None, NO_REFERENCE, ())


def run_sweep(plan: SweepPlan, progress: Callable[[SweepProgress], None] | None = None,
              control: SweepControl | None = None) -> SweepResult:
    """Run (or resume) every run of ``plan`` and put each arm's measured tok/s beside its
    prediction. ``progress`` gets a :class:`SweepProgress` when a run starts and when it ends;
    ``control`` pauses the sweep between runs or stops it. Raises SweepError for an output
    folder that cannot be written, SweepStopped once ``control`` stopped it."""
    control = control if control is not None else SweepControl()
    arms = plan.arms()
    order = list(schedule(plan))
    try:
        Path(plan.out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"{plan.out}: cannot make the folder ({e.strerror})") from None
    results: dict[tuple[int, int], SweepRun] = {}
    own: dict[tuple[int, int], MeasuredRun | None] = {}
    t0 = time.monotonic()
    ran = resumed_n = 0

    def report(k: int, running: tuple[float, int, int] | None, last: tuple[float, int, SweepRun] | None) -> None:
        if progress is None:
            return
        elapsed = time.monotonic() - t0
        left = sum(1 for r2, i2 in order[k:] if not _done(arm_dir(plan.out, *arms[i2], r2)))
        eta = elapsed / ran * left if ran and left else None
        progress(SweepProgress(len(order), len(results), resumed_n, running, control.paused, elapsed, eta, last,
                               _so_far(plan, results)))

    for k, (rnd, i) in enumerate(order, 1):
        cache_mb, lanes = arms[i]
        d = arm_dir(plan.out, cache_mb, lanes, rnd)
        resumed = _done(d)
        why = ""
        if not resumed:
            control.wait()
            report(k - 1, (cache_mb, lanes, rnd), None)
            try:
                why = _run_one(plan, cache_mb, lanes, d, control)
            except OutputFileError as e:
                raise SweepError(str(e)) from None
            ran += 1
        else:
            resumed_n += 1
        tok_s, problem, costs = _measured(d) if not why else (None, why, None)
        results[(rnd, i)] = SweepRun(rnd, str(d), tok_s, problem, False, resumed)
        own[(rnd, i)] = costs
        report(k, None, (cache_mb, lanes, results[(rnd, i)]))
    ref = arm_dir(plan.out, plan.cache_mb[0], plan.io_threads[0], 1)
    notes: list[str] = [f"every run with {' '.join(f'{k}={v}' for k, v in plan.env)}: the cores were crowded when "
                        "the sweep began (docs/runtime.md \"Threads\")"] if plan.env else []
    predicted: dict[tuple[float, int], tuple[float, float, float]] = {}
    predictor: Predictor | None = None
    used: ReferenceInputs = NO_REFERENCE
    ref_key = _routing_key(ref) if results.get((1, 0)) and results[(1, 0)].tok_s is not None else None
    differs = {key: ref_key is not None and x.tok_s is not None and _routing_key(Path(x.dir)) != ref_key
               for key, x in results.items()}
    ref_costs = [c for r in range(1, plan.runs + 1) if (c := own[(r, 0)]) is not None and not differs[(r, 0)]]
    if ref_key is None:
        notes.append(f"no reference run ({ref}): nothing predicted")
    elif not ref_costs:
        notes.append("no prediction: the reference arm's runs have no compute or mgmt per token in their summary")
    else:
        try:
            predicted, used, more, predictor = _predict(plan, ref, ref_costs)
            notes += more
        except WhatIfError as e:
            notes.append(f"no prediction: {e}")
    out_arms = []
    for i, (cache_mb, lanes) in enumerate(arms):
        runs = []
        for rnd in range(1, plan.runs + 1):
            x = results[(rnd, i)]
            m = own[(rnd, i)]
            mine = predictor(cache_mb, lanes, m.costs).tok_s(m.costs.overlap) \
                if predictor is not None and m is not None else None
            runs.append(SweepRun(x.round, x.dir, x.tok_s, x.problem, differs[(rnd, i)], x.resumed, mine))
        out_arms.append(_arm(cache_mb, lanes, runs, predicted.get((cache_mb, lanes))))
    if any(differs.values()):
        notes.append("runs whose decode routing differs from the reference's are flagged and left out of the medians")
    return SweepResult(plan.model, plan.out, plan.order, tuple(out_arms), str(ref) if ref_key else None, used,
                       tuple(notes))


def parse_list(text: str, what: str, *, lanes: bool = False) -> tuple[float, ...]:
    """``--cache-mb 16,32,64`` -> (16.0, 32.0, 64.0), repeats dropped; ``lanes``: whole numbers
    >= 1. Raises SweepError naming ``what``."""
    out: list[float] = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            v = float(int(part)) if lanes else float(part)
        except ValueError:
            raise SweepError(f"{what}: {part!r} is not a {'whole ' if lanes else ''}number") from None
        if not (math.isfinite(v) and v >= (1 if lanes else 0)):
            raise SweepError(f"{what}: {part!r} must be {'at least 1' if lanes else 'a finite number >= 0'}")
        out.append(v)
    if not out:
        raise SweepError(f"{what}: no values")
    return tuple(dict.fromkeys(out))
