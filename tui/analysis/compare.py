"""The comparison of arms of runs: did a change make it faster, and can we tell?

Input: arms (a name and one or more runs); a run is its per-token columns, its summary numbers,
its entry state (temperature, MemAvailable, CPU frequency when the source has them) and its
routed experts when a trace is there. Output: a :class:`Comparison`, a tree of plain
dataclasses with lists and floats (``orjson.dumps`` serialises it; NaN becomes null) that the
JSON, markdown and CSV renderers print. docs/analysis.md "Comparing runs".

Two kinds of metrics. Deterministic ones (decode hit %, MiB read per token, routed experts) are
compared exactly. Timing ones get statistics on each run's steady state (after its MSER-5
warm-up split): with several runs per arm the run is the unit (Mann-Whitney U, Hodges-Lehmann
shift and interval); with one run per arm a moving-block bootstrap of the two runs' tokens,
labelled as covering only the noise inside the runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bmoe_top.parsers.token_csv import TokenTable
from bmoe_top.tui.model.quantities import NO_CACHE, q

from . import stats as S

__all__ = ["run_from_token_table", "absent_reasons", "entry_from_sidecar", "resources_from", "RunInput", "ArmInput",
           "ArmValue", "Delta", "MetricRow", "WarmupRow", "EntryRow", "Contamination", "Comparison", "compare",
           "TIMING_COLUMNS", "ENTRY_KEYS", "RESOURCE_KEYS", "WITHIN_RUN_LABEL", "identical_note", "same_data"]

F64 = npt.NDArray[np.float64]

#: per-token timing columns (ms) and their labels; ``flash_ms`` is the catalogue's flash wait
#: (``token.flash_ms``: io_ms in serial I/O, stall_ms under overlap, as ``RunModel.breakdown`` gives it)
TIMING_COLUMNS: dict[str, str] = {
    "wall_ms": "wall per token",
    "compute_ms": "compute",
    "io_ms": "flash I/O",
    "flash_ms": q("token.flash_ms").label,
    "mgmt_ms": "cache mgmt",
}
#: entry-state keys a source may carry, and their labels
ENTRY_KEYS: dict[str, str] = {
    "temperature_c": "temperature (°C)",
    "mem_available_mib": "MemAvailable (MiB)",
    "cpu_freq_mhz": "CPU frequency (MHz)",
}
#: memory and temperature of a run (one number per run): key -> (label, unit, lower is better)
RESOURCE_KEYS: dict[str, tuple[str, str, bool]] = {
    "peak_rss_mib": ("peak RSS", "MiB", True),
    "mem_available_min_mib": ("MemAvailable low point", "MiB", False),
    "swap_max_mib": ("swap used, peak", "MiB", True),
    "cpu_temp_max_c": ("CPU temperature, peak", "°C", True),
    "batt_temp_max_c": ("battery temperature, peak", "°C", True),
}
#: relative entry-state difference (percent of the baseline; temperature: degrees) worth a hint
_ENTRY_TOLERANCE = {"temperature_c": 2.0, "mem_available_mib": 5.0, "cpu_freq_mhz": 5.0}
WITHIN_RUN_LABEL = "within-run only: order and thermal drift not covered"


@dataclass(frozen=True, slots=True)
class RunInput:
    """One run. ``tokens``: per-token columns by name (any of :data:`TIMING_COLUMNS` in ms,
    ``flash_ms`` the run's own flash wait: io_ms serial, stall_ms overlap,
    ``read_mib`` MiB read that token, ``hit_pct`` the cumulative decode hit %), decode tokens in
    order. ``summary``: run numbers (``tok_s``, ``prefill_s``, ``load_s``, ``ttft_s`` seconds,
    ``hit_pct``, ``read_mib_per_token``). ``entry``: state when the run started (keys of
    :data:`ENTRY_KEYS`). ``routed``: the routed experts (e.g. ``Lookups.item``) or None.
    ``resources``: memory and temperature over the run (keys of :data:`RESOURCE_KEYS`).
    ``absent``: metric -> why the run has no value of it, in the run panel's words
    (``hit_pct``: ``NO_CACHE`` for a run without an expert cache)."""

    name: str
    tokens: Mapping[str, npt.ArrayLike]
    summary: Mapping[str, float] = field(default_factory=dict)
    entry: Mapping[str, float] = field(default_factory=dict)
    routed: npt.ArrayLike | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    absent: Mapping[str, str] = field(default_factory=dict)


def absent_reasons(summary_hit_pct: float | None, hit_column: npt.ArrayLike | None) -> dict[str, str]:
    """Why a run lacks a metric (:attr:`RunInput.absent`): ``hit_pct`` is ``NO_CACHE`` when the
    source's hit rate is -1, or (without one) every row's is."""
    if summary_hit_pct is not None and math.isfinite(summary_hit_pct):
        return {"hit_pct": NO_CACHE} if summary_hit_pct < 0 else {}
    h = np.asarray(hit_column if hit_column is not None else [], dtype=np.float64).reshape(-1)
    h = h[np.isfinite(h)]
    return {"hit_pct": NO_CACHE} if h.size and (h < 0).all() else {}


_MIB = 1024 * 1024
#: sidecar keys (BigMoeOnEdge's ``*.metrics`` key=value files) -> (entry key, scale)
_SIDECAR_ENTRY = (
    ("cpu_temp_before_mC", "temperature_c", 1e-3),
    ("batt_temp_before_dC", "temperature_c", 0.1),
    ("mem_avail_before_kb", "mem_available_mib", 1.0 / 1024),
    ("cpu_freq_before_khz", "cpu_freq_mhz", 1e-3),
    ("cpu_freq_khz", "cpu_freq_mhz", 1e-3),
    ("cpu_freq_mhz", "cpu_freq_mhz", 1.0),
)
#: sidecar keys -> (resource key, scale)
_SIDECAR_RESOURCES = (
    ("peak_rss_kb", "peak_rss_mib", 1.0 / 1024),
    ("mem_avail_floor_kb", "mem_available_min_mib", 1.0 / 1024),
    ("cpu_temp_max_mC", "cpu_temp_max_c", 1e-3),
    ("batt_temp_max_dC", "batt_temp_max_c", 0.1),
)
#: per-token columns -> (resource key, reduction)
_COLUMN_RESOURCES = (("rss_mib", "peak_rss_mib", "max"), ("mem_available_mib", "mem_available_min_mib", "min"),
                     ("swap_mib", "swap_max_mib", "max"))


def _number(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, str)):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def entry_from_sidecar(sidecar: Mapping[str, object]) -> dict[str, float]:
    """Entry state (keys of :data:`ENTRY_KEYS`) from a device sidecar's ``*_before`` values
    (BigMoeOnEdge's ``*.metrics`` key=value lines; numbers or numeric strings)."""
    entry: dict[str, float] = {}
    for key, dst, scale in _SIDECAR_ENTRY:
        v = _number(sidecar.get(key))
        if dst not in entry and v is not None:
            entry[dst] = v * scale
    return entry


def resources_from(columns: Mapping[str, npt.ArrayLike], sidecar: Mapping[str, object]) -> dict[str, float]:
    """Memory and temperature of a run (keys of :data:`RESOURCE_KEYS`): the sidecar's peaks
    (``peak_rss_kb``, ``mem_avail_floor_kb``, ``cpu_temp_max_mC``, ``batt_temp_max_dC``), else the
    extremes of the per-token memory columns (``rss_mib``, ``mem_available_mib``, ``swap_mib``)."""
    out: dict[str, float] = {}
    for key, dst, scale in _SIDECAR_RESOURCES:
        v = _number(sidecar.get(key))
        if v is not None:
            out[dst] = v * scale
    for col, dst, how in _COLUMN_RESOURCES:
        if dst in out or col not in columns:
            continue
        a = np.asarray(columns[col], dtype=np.float64).reshape(-1)
        a = a[np.isfinite(a)]
        if a.size:
            out[dst] = float(a.max() if how == "max" else a.min())
    return out


def run_from_token_table(table: TokenTable, name: str, sidecar: Mapping[str, float | str] | None = None,
                         routed: npt.ArrayLike | None = None) -> RunInput:
    """A run from a ``--csv`` sink (parsers/token_csv.py ``TokenTable``) and, when there is one,
    its device sidecar (``key=value`` numbers, e.g. parsed ``*.metrics`` lines): timing columns
    by name, the flash wait as ``flash_ms`` (the run model's breakdown of the rows: io_ms
    serial, stall_ms overlap), ``read_bytes`` as ``read_mib``, ``cache_hit_pct`` as ``hit_pct``; the summary's
    canonical keys; entry state from the sidecar's ``*_before`` values (else the first row's
    ``mem_available_mib``)."""
    from bmoe_top.tui.model import RunModel

    cols = table.columns
    tokens: dict[str, npt.ArrayLike] = {k: cols[k] for k in TIMING_COLUMNS if k in cols}
    model = RunModel()
    model.update_meta(table.meta)
    model.add_token_rows({k: cols[k] for k in ("wall_ms", "compute_ms", "io_ms", "stall_ms", "mgmt_ms") if k in cols},
                         table.n_rows)
    tokens["flash_ms"] = np.array(model.breakdown()["flash"], dtype=np.float64)
    if "read_bytes" in cols:
        tokens["read_mib"] = np.asarray(cols["read_bytes"], dtype=np.float64) / _MIB
    if "cache_hit_pct" in cols:
        h = np.asarray(cols["cache_hit_pct"], dtype=np.float64)
        tokens["hit_pct"] = np.where(h < 0, np.nan, h)  # -1 = no cache
    sm = table.summary
    summary: dict[str, float] = {}
    for src, dst in (("tok_s", "tok_s"), ("prefill_s", "prefill_s"), ("load_s", "load_s"), ("ttft_s", "ttft_s"),
                     ("cache_hit_pct", "hit_pct"), ("read_mib_per_tok", "read_mib_per_token")):
        v = sm.get(src)
        if v is not None and math.isfinite(v) and not (src == "cache_hit_pct" and v < 0):
            summary[dst] = float(v)
    entry = entry_from_sidecar(sidecar or {})
    if "mem_available_mib" not in entry and "mem_available_mib" in cols:
        m = np.asarray(cols["mem_available_mib"], dtype=np.float64)
        m = m[np.isfinite(m)]
        if m.size:
            entry["mem_available_mib"] = float(m[0])
    return RunInput(name, tokens, summary, entry, routed, resources_from(cols, sidecar or {}),
                    absent_reasons(sm.get("cache_hit_pct"), cols.get("cache_hit_pct")))


@dataclass(frozen=True, slots=True)
class ArmInput:
    """An arm: a name and its runs (the same change, repeated)."""

    name: str
    runs: Sequence[RunInput]


@dataclass(frozen=True, slots=True)
class ArmValue:
    """An arm's value of a metric: ``center`` (the median of its runs' values; with one run,
    that run's value), ``low``/``high`` a within-run interval of the center with one run (NaN
    otherwise), ``per_run`` each run's value."""

    arm: str
    runs: int
    center: float
    low: float
    high: float
    per_run: list[float]


@dataclass(frozen=True, slots=True)
class Delta:
    """``arm`` against ``vs`` (the baseline): ``change`` = arm - baseline in the metric's unit,
    ``change_pct`` of the baseline, its interval [``low``, ``high``] (NaN if none), ``p`` the
    Mann-Whitney p (NaN when not tested), ``verdict``: ``better`` / ``worse`` (significant and
    above the noise floor), ``~`` (not), ``same`` / ``differs`` (deterministic metrics), ``?``
    (no test possible); ``method`` how; ``label`` what the interval does not cover;
    ``confidence`` the interval's (the comparison's, or less when the runs are too few for it:
    the label says so; NaN without an interval)."""

    arm: str
    vs: str
    change: float
    change_pct: float
    low: float
    high: float
    p: float
    verdict: str
    method: str
    label: str
    confidence: float = math.nan


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One metric: ``kind`` ``timing`` / ``resource`` (memory, temperature: one number per run) /
    ``deterministic``; ``lower_is_better``; a value per arm and a delta per non-baseline arm;
    ``absent``: arm -> why none of its runs has a value (:attr:`RunInput.absent`)."""

    metric: str
    label: str
    unit: str
    kind: str
    lower_is_better: bool
    values: list[ArmValue]
    deltas: list[Delta]
    absent: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WarmupRow:
    """A run's warm-up split (MSER-5 over wall_ms): tokens ``[0, split)`` are warm-up."""

    arm: str
    run: str
    tokens: int
    split: int
    warm_mean_ms: float
    steady_mean_ms: float
    lag1: float

    @property
    def name(self) -> str:
        """``arm/run``, or the run alone when the arm is that run."""
        return self.arm if self.arm == self.run else f"{self.arm}/{self.run}"


@dataclass(frozen=True, slots=True)
class EntryRow:
    """An entry-state key: values per arm (one per run, NaN where a run lacks it) and the
    difference of an arm's mean from the baseline's (``diff``, per non-baseline arm)."""

    key: str
    label: str
    per_arm: list[list[float]]
    diff: list[float]


@dataclass(frozen=True, slots=True)
class Contamination:
    """Entry-state differences between arms and what to do about them."""

    rows: list[EntryRow]
    hints: list[str]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The result. ``workload_same``: None without routed experts, else whether every run routed
    the same experts; ``banner`` says "different workload" when not. ``identical``: the arms that
    hold the same data as the baseline (:func:`same_data`: the same file twice, or identical
    runs), whose every delta is ``same`` with no interval or test; ``identical_note`` says so in
    one line ("" when no arm is)."""

    arms: list[str]
    baseline: str
    workload_same: bool | None
    banner: str
    metrics: list[MetricRow]
    warmup: list[WarmupRow]
    contamination: Contamination
    advice: list[str]
    noise_floor_pct: float
    alpha: float
    confidence: float
    identical: list[str] = field(default_factory=list)
    identical_note: str = ""


def _same_values(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        u = np.asarray(x, dtype=np.float64).reshape(-1)
        v = np.asarray(b[k], dtype=np.float64).reshape(-1)
        if u.shape != v.shape or not np.array_equal(u, v, equal_nan=True):
            return False
    return True


def same_data(a: ArmInput, b: ArmInput) -> bool:
    """Whether arms ``a`` and ``b`` hold the same data: as many runs, each with the same token
    columns, summary, entry state, resources and routed experts as its counterpart (the same
    file given twice, or two runs that measured exactly the same numbers): nothing to compare."""
    if len(a.runs) != len(b.runs):
        return False
    for x, y in zip(a.runs, b.runs):
        if (x.routed is None) != (y.routed is None):
            return False
        if not (_same_values(x.tokens, y.tokens) and _same_values(x.summary, y.summary)
                and _same_values(x.entry, y.entry) and _same_values(x.resources, y.resources)):
            return False
        if x.routed is not None and not _same_values({"r": x.routed}, {"r": y.routed}):
            return False
    return True


def identical_note(baseline: str, same: Sequence[str]) -> str:
    """The one line that says arms hold the baseline's data ("" for none)."""
    if not same:
        return ""
    who = ", ".join(same)
    verb = "holds" if len(same) == 1 else "hold"
    return (f"no comparison: {who} {verb} the same data as {baseline} (the same file twice, or identical runs); "
            "every difference is 0 by construction")


def _col(run: RunInput, name: str) -> F64 | None:
    v = run.tokens.get(name)
    if v is None:
        return None
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return a if a.size and np.isfinite(a).any() else None


def _nan() -> float:
    return float("nan")


def _pct(change: float, base: float) -> float:
    return 100.0 * change / base if base and math.isfinite(base) else _nan()


def _size_pct(change: float, base: float) -> float:
    """The change in percent of the baseline, for the noise floor and the direction: from a
    baseline of 0, any change is infinitely many percent (no percentage of 0 bounds it: 0 ->
    132.6 ms is a change, not noise); ``change_pct`` itself stays NaN there (no percentage)."""
    if base == 0 and math.isfinite(change) and change != 0:
        return math.copysign(math.inf, change)
    return _pct(change, base)


def _judge(change_pct: float, significant: bool, lower_is_better: bool) -> str:
    if not significant:
        return "~"
    return "better" if (change_pct < 0) == lower_is_better else "worse"


def _steady(arms: Sequence[ArmInput], splits: list[list[int]], column: str) -> list[list[F64 | None]]:
    """Per arm, per run: the finite values of ``column`` after the run's warm-up split (None
    when the run has no such column)."""
    out: list[list[F64 | None]] = []
    for arm, sp in zip(arms, splits):
        runs: list[F64 | None] = []
        for run, s in zip(arm.runs, sp):
            c = _col(run, column)
            if c is None:
                runs.append(None)
                continue
            x = c[s:]
            ok = np.isfinite(x)
            runs.append(x if ok.all() else x[ok])  # a view when every value counts
        out.append(runs)
    return out


def _shift_coverage(sh: S.Shift, conf: float, m: int, n: int) -> tuple[str, float]:
    """(label, confidence) of a Hodges-Lehmann interval of ``m`` and ``n`` runs: the label says
    when the runs are too few for ``conf`` and the interval has a lower confidence."""
    if not math.isfinite(sh.low):
        return "", _nan()
    if sh.confidence < conf:
        return f"{sh.confidence:.0%} interval: {m} and {n} runs cannot give {conf:.0%}", sh.confidence
    return "", sh.confidence


def _want(boot: S.Bootstrap, series: list[list[F64 | None]], stat: S.Statistic) -> None:
    """Tell ``boot`` the intervals :func:`_timing_row` will ask for (arms of one run)."""
    for runs in series:
        if len(runs) == 1 and runs[0] is not None:
            boot.want_mean(runs[0], stat)
    for j in range(1, len(series)):
        if len(series[0]) == 1 and len(series[j]) == 1:
            a0, b0 = series[0][0], series[j][0]
            if a0 is not None and b0 is not None:
                boot.want_diff(a0, b0, stat)


def _timing_row(metric: str, label: str, unit: str, arms: Sequence[ArmInput], series: list[list[F64 | None]],
                lower: bool, alpha: float, floor: float, conf: float, boot: S.Bootstrap,
                stat: S.Statistic = S.mean_stat) -> MetricRow | None:
    """``series[a][r]``: run r of arm a's steady values (per token) of the metric, or None; a
    run's value is ``stat`` of its series (the mean, tok/s, a percentile)."""
    if not any(s is not None for runs in series for s in runs):
        return None
    if all(s is None or not s.any() for runs in series for s in runs):
        return None  # 0 throughout: nothing to compare
    values: list[ArmValue] = []
    run_vals: list[list[float]] = []
    for arm, runs in zip(arms, series):
        pr = [float(stat(s[None, :])[0]) if s is not None and s.size else _nan() for s in runs]
        fin = [v for v in pr if math.isfinite(v)]
        lo = hi = _nan()
        if len(runs) == 1 and runs[0] is not None and runs[0].size >= 2:
            iv = boot.interval_mean(runs[0], conf, stat)
            lo, hi = iv.low, iv.high
        values.append(ArmValue(arm.name, len(runs), float(np.median(fin)) if fin else _nan(), lo, hi, pr))
        run_vals.append(fin)
    deltas: list[Delta] = []
    base = values[0]
    for j in range(1, len(arms)):
        a_runs, b_runs = series[0], series[j]
        if not run_vals[0] or not run_vals[j]:
            deltas.append(Delta(arms[j].name, arms[0].name, _nan(), _nan(), _nan(), _nan(), _nan(), "?",
                                "none", "the metric is missing in an arm"))
            continue
        if len(a_runs) == 1 and len(b_runs) == 1:
            a0, b0 = a_runs[0], b_runs[0]
            if a0 is None or b0 is None or a0.size < 2 or b0.size < 2:
                continue
            iv = boot.interval_diff(a0, b0, conf, stat)
            pct = _pct(iv.estimate, base.center)
            size = _size_pct(iv.estimate, base.center)
            sig = (iv.low > 0 or iv.high < 0) and abs(size) > floor
            low, high = _floored(iv.low, iv.high, base.center, a0, b0)
            deltas.append(Delta(arms[j].name, arms[0].name, iv.estimate, pct, low, high, _nan(),
                                _judge(size, sig, lower), f"moving-block bootstrap of tokens (block {iv.block})",
                                WITHIN_RUN_LABEL, conf))
            continue
        mw = S.mann_whitney(run_vals[0], run_vals[j])
        sh = S.hodges_lehmann(run_vals[0], run_vals[j], conf)
        pct = _pct(sh.shift, base.center)
        size = _size_pct(sh.shift, base.center)
        low, high = _floored(sh.low, sh.high, base.center, np.asarray(run_vals[0]), np.asarray(run_vals[j]))
        deltas.append(Delta(arms[j].name, arms[0].name, sh.shift, pct, low, high, mw.p,
                            _judge(size, S.verdict(mw.p, size, alpha, floor), lower),
                            f"Mann-Whitney U ({mw.method}) on run means, Hodges-Lehmann shift",
                            *_shift_coverage(sh, conf, len(run_vals[0]), len(run_vals[j]))))
    return MetricRow(metric, label, unit, "timing", lower, values, deltas)


def _floored(low: float, high: float, base: float, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """A change's interval for a quantity that is never negative (every value of both arms >= 0:
    a time, a size, a rate): the arm's value cannot go below 0, so the change not below
    ``-base`` (a percentage of the baseline not below -100 %; a resampled baseline larger than the
    one measured put it there). Otherwise as it is."""
    if not (math.isfinite(base) and base >= 0 and np.all(np.asarray(a)[np.isfinite(a)] >= 0)
            and np.all(np.asarray(b)[np.isfinite(b)] >= 0)):
        return low, high
    return (max(low, -base) if math.isfinite(low) else low), (max(high, -base) if math.isfinite(high) else high)


def _scalar_row(metric: str, label: str, unit: str, arms: Sequence[ArmInput], vals: list[list[float]],
                lower: bool, kind: str, alpha: float, floor: float, conf: float) -> MetricRow | None:
    """A per-run number: exact comparison (deterministic) or runs as the unit (timing)."""
    if not any(math.isfinite(v) for vs in vals for v in vs):
        return None
    values = []
    for arm, vs in zip(arms, vals):
        fin = [v for v in vs if math.isfinite(v)]
        values.append(ArmValue(arm.name, len(vs), float(np.median(fin)) if fin else _nan(), _nan(), _nan(), vs))
    deltas = []
    base = values[0]
    for j in range(1, len(arms)):
        a = [v for v in vals[0] if math.isfinite(v)]
        b = [v for v in vals[j] if math.isfinite(v)]
        if not a or not b:
            deltas.append(Delta(arms[j].name, arms[0].name, _nan(), _nan(), _nan(), _nan(), _nan(), "?", "none",
                                "the metric is missing in an arm"))
            continue
        change = values[j].center - base.center
        pct = _pct(change, base.center)
        if kind == "deterministic":
            same = all(math.isclose(x, a[0], rel_tol=1e-9, abs_tol=1e-12) for x in a + b)
            deltas.append(Delta(arms[j].name, arms[0].name, change, pct, _nan(), _nan(), _nan(),
                                "same" if same else "differs", "exact", ""))
        elif len(a) >= 2 and len(b) >= 2:
            mw = S.mann_whitney(a, b)
            sh = S.hodges_lehmann(a, b, conf)
            pct = _pct(sh.shift, base.center)
            size = _size_pct(sh.shift, base.center)
            deltas.append(Delta(arms[j].name, arms[0].name, sh.shift, pct, sh.low, sh.high, mw.p,
                                _judge(size, S.verdict(mw.p, size, alpha, floor), lower),
                                f"Mann-Whitney U ({mw.method}) on runs, Hodges-Lehmann shift",
                                *_shift_coverage(sh, conf, len(a), len(b))))
        else:
            deltas.append(Delta(arms[j].name, arms[0].name, change, pct, _nan(), _nan(), _nan(), "?", "none",
                                "one number per run and too few runs for a test"))
    return MetricRow(metric, label, unit, kind, lower, values, deltas)


def _summary(run: RunInput, *keys: str) -> float:
    for k in keys:
        v = run.summary.get(k)
        if v is not None and math.isfinite(float(v)):
            return float(v)
    return _nan()


def compare(arms: Sequence[ArmInput], noise_floor_pct: float = S.NOISE_FLOOR_PCT, alpha: float = S.ALPHA,
            confidence: float = 0.95, seed: int = 0) -> Comparison:
    """Compare ``arms`` against the first (the baseline). Raises ValueError with fewer than two
    arms or an arm without runs. Deterministic for a ``seed`` (the bootstrap's)."""
    if len(arms) < 2:
        raise ValueError("a comparison needs at least two arms")
    for arm in arms:
        if not arm.runs:
            raise ValueError(f"arm {arm.name!r} has no runs")
    # warm-up split per run, from wall_ms
    warm: list[WarmupRow] = []
    splits: list[list[int]] = []
    for arm in arms:
        row = []
        for run in arm.runs:
            w = _col(run, "wall_ms")
            if w is None:
                row.append(0)
                continue
            m = S.mser5(w)
            # the split counts finite values; map it back to token indices
            idx = np.flatnonzero(np.isfinite(w))
            split = int(idx[m.split]) if m.split < idx.size else int(w.size)
            row.append(split)
            warm.append(WarmupRow(arm.name, run.name, int(w.size), split, m.warm_mean, m.steady_mean,
                                  S.lag1(w[split:])))
        splits.append(row)
    metrics: list[MetricRow] = []
    # the timing rows: each per-token column's steady mean, then tok/s and the wall percentiles
    # of the steady tokens (one number per run)
    specs: list[tuple[str, str, str, list[list[F64 | None]], bool, S.Statistic]] = []
    for name, label in TIMING_COLUMNS.items():
        specs.append((name, label, "ms/token", _steady(arms, splits, name), True, S.mean_stat))
    wall_steady = _steady(arms, splits, "wall_ms")
    for key, label, unit, lower, stat in (("tok_s", "tok/s (steady)", "tok/s", False, S.rate_stat),
                                          ("p50", "wall p50 (steady)", "ms", True, S.percentile_stat(50.0)),
                                          ("p95", "wall p95 (steady)", "ms", True, S.percentile_stat(95.0)),
                                          ("p99", "wall p99 (steady)", "ms", True, S.percentile_stat(99.0))):
        specs.append((key, label, unit, wall_steady, lower, stat))
    boot = S.Bootstrap(seed=seed)  # one draw of resamples per run serves every row
    for _k, _l, _u, series, _lower, stat in specs:
        _want(boot, series, stat)
    for key, label, unit, series, lower, stat in specs:
        r = _timing_row(key, label, unit, arms, series, lower, alpha, noise_floor_pct, confidence, boot, stat)
        if r is not None:
            metrics.append(r)
    for key, label in (("prefill_s", "prefill"), ("load_s", "load"), ("ttft_s", "TTFT")):
        vals = [[_summary(run, key) for run in arm.runs] for arm in arms]
        r3 = _scalar_row(key, label, "s", arms, vals, True, "timing", alpha, noise_floor_pct, confidence)
        if r3 is not None:
            metrics.append(r3)
    # memory and temperature: one number per run
    for key, (label, unit, lower) in RESOURCE_KEYS.items():
        vals = [[float(run.resources[key]) if key in run.resources else _nan() for run in arm.runs] for arm in arms]
        r6 = _scalar_row(key, label, unit, arms, vals, lower, "resource", alpha, noise_floor_pct, confidence)
        if r6 is not None:
            metrics.append(r6)
    # deterministic: hit % and MiB/token
    hit = []
    mib = []
    for arm in arms:
        hv, mv = [], []
        for run in arm.runs:
            h = _summary(run, "hit_pct", "cache_hit_pct")
            if not math.isfinite(h):
                c = _col(run, "hit_pct")
                h = float(c[np.isfinite(c)][-1]) if c is not None else _nan()
            hv.append(h)
            m_ = _summary(run, "read_mib_per_token", "read_mib_per_tok")
            if not math.isfinite(m_):
                c = _col(run, "read_mib")
                m_ = float(np.nanmean(c)) if c is not None else _nan()
            mv.append(m_)
        hit.append(hv)
        mib.append(mv)
    for key, label, unit, vals2, lower in (("hit_pct", "decode hit %", "%", hit, False),
                                           ("read_mib_per_token", "MiB read per token", "MiB", mib, True)):
        r4 = _scalar_row(key, label, unit, arms, vals2, lower, "deterministic", alpha, noise_floor_pct, confidence)
        if r4 is not None:
            metrics.append(r4)
    for metric in metrics:  # why an arm has no value, when all its runs say the same
        for arm, v in zip(arms, metric.values):
            why = {run.absent.get(metric.metric, "") for run in arm.runs}
            if not math.isfinite(v.center) and len(why) == 1 and "" not in why:
                metric.absent[arm.name] = why.pop()
    # routed experts
    routed = [(arm.name, run.name, np.asarray(run.routed).reshape(-1)) for arm in arms for run in arm.runs
              if run.routed is not None]
    workload: bool | None = None
    banner = ""
    if routed:
        ref_arm, ref_run, ref = routed[0]
        workload = True
        for an, rn, r5 in routed[1:]:
            if r5.shape != ref.shape or not np.array_equal(r5, ref):
                workload = False
                n = min(r5.size, ref.size)
                diff = np.flatnonzero(r5[:n] != ref[:n])
                where = f"first at lookup {int(diff[0])}" if diff.size else f"{ref.size} vs {r5.size} lookups"
                banner = (f"different workload: {an}/{rn} routed other experts than {ref_arm}/{ref_run} ({where}); "
                          "timing differences include the workload's")
                break
        if any(run.routed is None for arm in arms for run in arm.runs) and workload:
            workload = None  # some runs cannot be checked
    contamination = _contamination(arms)
    advice = _advice(arms, alpha, confidence)
    same = [a.name for a in arms[1:] if same_data(arms[0], a)]
    if same:  # no test pretends to measure a difference there is none of
        for metric in metrics:
            metric.deltas[:] = [Delta(d.arm, d.vs, 0.0, 0.0, _nan(), _nan(), _nan(), "same", "identical data", "")
                                if d.arm in same else d for d in metric.deltas]
    return Comparison([a.name for a in arms], arms[0].name, workload, banner, metrics, warm, contamination, advice,
                      noise_floor_pct, alpha, confidence, same, identical_note(arms[0].name, same))


def _contamination(arms: Sequence[ArmInput]) -> Contamination:
    rows = []
    hints = []
    for key, label in ENTRY_KEYS.items():
        per_arm = [[float(run.entry[key]) if key in run.entry else _nan() for run in arm.runs] for arm in arms]
        if not any(math.isfinite(v) for vs in per_arm for v in vs):
            continue
        means = [float(np.nanmean(vs)) if any(math.isfinite(v) for v in vs) else _nan() for vs in per_arm]
        diff = [m - means[0] for m in means[1:]]
        rows.append(EntryRow(key, label, per_arm, diff))
        tol = _ENTRY_TOLERANCE[key]
        for arm, d in zip(arms[1:], diff):
            if not math.isfinite(d):
                continue
            rel = abs(d) if key == "temperature_c" else abs(_pct(d, means[0]))
            if rel > tol:
                hints.append(f"{arm.name} started with {label} {d:+,.1f} from {arms[0].name}: run the arms in "
                             "reverse order too (or interleave them) to see whether the difference follows the order")
    return Contamination(rows, hints)


def _advice(arms: Sequence[ArmInput], alpha: float, confidence: float) -> list[str]:
    n_test, n_ci = S.min_runs(alpha, confidence)
    counts = [len(a.runs) for a in arms]
    out = []
    if all(c == 1 for c in counts):
        out.append(f"one run per arm: the intervals are {WITHIN_RUN_LABEL}; for a test take at least {n_test} "
                   f"runs per arm ({n_ci} for a {confidence:.0%} interval), interleaved A B A B")
    elif min(counts) < n_test:
        out.append(f"{min(counts)} run(s) in an arm: Mann-Whitney cannot reach p < {alpha:g} below {n_test} runs per "
                   f"arm ({n_ci} for a {confidence:.0%} interval); run the arms interleaved")
    elif min(counts) < n_ci:
        out.append(f"{min(counts)} runs per arm: enough for the test, {n_ci} give a {confidence:.0%} interval")
    if not all(c == 1 for c in counts):
        out.append("the run is the unit: each run's steady mean after its warm-up split")
    return out
