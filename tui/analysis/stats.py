"""Statistics for comparing runs honestly (docs/analysis.md "Statistics in plain words").

* :func:`mser5`: where warm-up ends, chosen from the data (MSER-5: the truncation point over
  batch means of 5 tokens that minimises the steady part's squared standard error).
* :func:`mann_whitney`: Mann-Whitney U two-sided p (exact without ties for small samples, else
  the normal approximation with tie and continuity corrections: scipy's definitions).
* :func:`hodges_lehmann`: the Hodges-Lehmann shift (median of all pairwise differences) and its
  distribution-free confidence interval (Moses), as benchstat reports a change.
* :func:`verdict`: the ``~`` rule: a change counts only if p < alpha AND it exceeds the noise floor.
* :func:`min_runs`: runs per arm a test (4) or a 95% interval (6) needs.
* :func:`block_bootstrap_diff`: one run per arm: a within-run interval for the difference of
  steady means by a moving-block bootstrap (per-token wall times are autocorrelated).
* :func:`percentiles`.

Only numpy and the standard library: scipy is used by the tests to check these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = ["Mser", "mser5", "mann_whitney", "MannWhitney", "Shift", "hodges_lehmann", "verdict",
           "min_runs", "Interval", "block_bootstrap_diff", "block_bootstrap_mean", "percentiles", "lag1",
           "NOISE_FLOOR_PCT", "ALPHA", "Statistic", "mean_stat", "rate_stat", "percentile_stat"]

F64 = npt.NDArray[np.float64]
#: a change smaller than this share of the baseline is reported as ``~`` (noise), percent
NOISE_FLOOR_PCT = 2.0
#: significance level of the Mann-Whitney test
ALPHA = 0.05


def _finite(x: npt.ArrayLike) -> F64:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    return a[np.isfinite(a)]


@dataclass(frozen=True, slots=True)
class Mser:
    """The warm-up split of one series: ``split`` the index of the first steady value (0 = no
    warm-up), ``n`` values, ``steady_mean`` / ``warm_mean`` (NaN when that part is empty),
    ``batch`` the batch size used (5)."""

    split: int
    n: int
    steady_mean: float
    warm_mean: float
    batch: int


def mser5(x: npt.ArrayLike, batch: int = 5, max_fraction: float = 0.5) -> Mser:
    """MSER-5 truncation: batch means of ``batch`` consecutive values (a trailing partial batch is
    dropped for the choice), then the number of leading batches d minimising
    ``sum((Y[d:] - mean(Y[d:]))**2) / (k - d)**2`` over d <= ``max_fraction`` of the k batches
    (White 1997; the usual guard against truncating into a noisy tail). NaNs are dropped.
    Fewer than two batches: no truncation."""
    a = _finite(x)
    n = int(a.shape[0])
    k = n // batch
    if k < 2:
        return Mser(0, n, float(a.mean()) if n else float("nan"), float("nan"), batch)
    y = a[: k * batch].reshape(k, batch).mean(axis=1)
    dmax = max(0, min(k - 2, int(max_fraction * k)))
    # suffix sums give every candidate's statistic at once
    rev = y[::-1]
    s1 = np.cumsum(rev)[::-1]
    s2 = np.cumsum(rev * rev)[::-1]
    d = np.arange(dmax + 1)
    m = k - d
    sse = s2[d] - s1[d] ** 2 / m
    stat = sse / (m.astype(np.float64) ** 2)
    best = int(np.argmin(stat))
    split = best * batch
    warm = float(a[:split].mean()) if split else float("nan")
    return Mser(split, n, float(a[split:].mean()), warm, batch)


@dataclass(frozen=True, slots=True)
class MannWhitney:
    """``u`` the statistic of the first sample (pairs where a > b, ties count half), ``p`` the
    two-sided p-value, ``method`` "exact" or "normal"."""

    u: float
    p: float
    method: str


def _ranks(v: F64) -> tuple[F64, F64]:
    """Average ranks (1-based) and the tie group sizes."""
    order = np.argsort(v, kind="stable")
    sv = v[order]
    n = sv.shape[0]
    starts = np.flatnonzero(np.concatenate([[True], sv[1:] != sv[:-1]]))
    ends = np.append(starts[1:], n)
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(n)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks, (ends - starts).astype(np.float64)


def _u_counts(m: int, n: int) -> list[int]:
    """Number of arrangements giving U = 0..m*n for sizes m, n (no ties): the coefficients of
    the Gaussian binomial [m+n choose m]."""
    # f[j][u] for the first j of the m values; build with the recurrence over n
    cur = [[1] + [0] * (m * n) for _ in range(m + 1)]  # n' = 0: only U = 0 for each m'
    for n2 in range(1, n + 1):
        nxt = [[0] * (m * n + 1) for _ in range(m + 1)]
        nxt[0][0] = 1
        for m2 in range(1, m + 1):
            row = nxt[m2]
            a = nxt[m2 - 1]
            b = cur[m2]
            # c(u; m2, n2) = c(u - n2; m2 - 1, n2) + c(u; m2, n2 - 1)
            for u in range(m2 * n2 + 1):
                v = b[u]
                if u >= n2:
                    v += a[u - n2]
                row[u] = v
        cur = nxt
    return cur[m]


EXACT_MAX = 400  # m * n at most for the exact distribution


def mann_whitney(a: npt.ArrayLike, b: npt.ArrayLike) -> MannWhitney:
    """Two-sided Mann-Whitney U test of ``a`` against ``b`` (NaNs dropped). Exact when there are
    no ties and m*n <= 400, else normal with tie and continuity corrections (the same numbers as
    ``scipy.stats.mannwhitneyu`` with ``method="exact"`` / ``"asymptotic"``). Raises ValueError
    when a sample is empty."""
    x, y = _finite(a), _finite(b)
    m, n = x.shape[0], y.shape[0]
    if m == 0 or n == 0:
        raise ValueError("Mann-Whitney needs at least one value in each sample")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:m].sum() - m * (m + 1) / 2.0)
    u2 = m * n - u1
    big = max(u1, u2)
    if (ties == 1).all() and m * n <= EXACT_MAX:
        counts = _u_counts(m, n)
        total = math.comb(m + n, m)
        k = int(round(big))
        p = 2.0 * sum(counts[k:]) / total
        return MannWhitney(u1, min(1.0, p), "exact")
    mu = m * n / 2.0
    nn = m + n
    tie_term = float(((ties**3) - ties).sum()) / (nn * (nn - 1)) if nn > 1 else 0.0
    var = m * n / 12.0 * ((nn + 1) - tie_term)
    if var <= 0:
        return MannWhitney(u1, 1.0, "normal")
    z = (big - mu - 0.5) / math.sqrt(var)
    p = 2.0 * (1.0 - NormalDist().cdf(z))
    return MannWhitney(u1, min(1.0, max(0.0, p)), "normal")


@dataclass(frozen=True, slots=True)
class Shift:
    """The Hodges-Lehmann estimate of how much ``b`` is above ``a`` (``shift``, in the data's
    unit) and its ``confidence`` interval [``low``, ``high``] (NaN when the samples are too small
    for that confidence: see :func:`min_runs`)."""

    shift: float
    low: float
    high: float
    confidence: float


def hodges_lehmann(a: npt.ArrayLike, b: npt.ArrayLike, confidence: float = 0.95) -> Shift:
    """Median of all differences ``b_j - a_i`` and the distribution-free interval from their
    order statistics: [D(k), D(mn+1-k)] with k the largest count such that P(U < k) <= alpha/2
    under the null (exact U distribution for m*n <= 400, else the normal approximation).
    Raises ValueError when a sample is empty."""
    x, y = _finite(a), _finite(b)
    m, n = x.shape[0], y.shape[0]
    if m == 0 or n == 0:
        raise ValueError("a shift needs at least one value in each sample")
    d = np.sort((y[None, :] - x[:, None]).reshape(-1))
    shift = float(np.median(d))
    alpha = 1.0 - confidence
    mn = m * n
    if mn <= EXACT_MAX:
        counts = _u_counts(m, n)
        total = math.comb(m + n, m)
        cum = 0
        k = 0
        for u in range(mn + 1):
            cum += counts[u]
            if cum / total <= alpha / 2.0:
                k = u + 1  # P(U <= u) <= alpha/2: D(u+1) is a valid lower bound
            else:
                break
    else:
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        k = int(math.floor(mn / 2.0 - z * math.sqrt(mn * (m + n + 1) / 12.0)))
    if k < 1:
        return Shift(shift, float("nan"), float("nan"), confidence)
    return Shift(shift, float(d[k - 1]), float(d[mn - k]), confidence)


def min_runs(alpha: float = ALPHA, confidence: float = 0.95) -> tuple[int, int]:
    """(runs per arm for a Mann-Whitney test to reach p < alpha at all, runs per sample for a
    distribution-free interval of the median at ``confidence``): (4, 6) at the defaults, as
    benchstat advises."""
    n_test = next(n for n in range(1, 64) if 2.0 / math.comb(2 * n, n) < alpha)
    n_ci = next(n for n in range(1, 64) if 2.0 * 0.5**n <= 1.0 - confidence)
    return n_test, n_ci


def verdict(p: float, change_pct: float, alpha: float = ALPHA, noise_floor_pct: float = NOISE_FLOOR_PCT) -> bool:
    """True when a change counts: p < ``alpha`` AND |change| > ``noise_floor_pct`` percent of
    the baseline; otherwise the change is shown as ``~``. NaN p or change: False."""
    return bool(p < alpha and abs(change_pct) > noise_floor_pct)


def lag1(x: npt.ArrayLike) -> float:
    """Lag-1 autocorrelation of a series (NaN with fewer than 3 values or no variance)."""
    a = _finite(x)
    if a.shape[0] < 3:
        return float("nan")
    c = a - a.mean()
    den = float((c * c).sum())
    return float((c[:-1] * c[1:]).sum() / den) if den > 0 else float("nan")


@dataclass(frozen=True, slots=True)
class Interval:
    """``estimate`` with a ``confidence`` interval [``low``, ``high``], ``block`` the bootstrap
    block length (values), ``resamples`` how many, ``method`` how it was made."""

    estimate: float
    low: float
    high: float
    confidence: float
    block: int
    resamples: int
    method: str


def _block_len(n: int) -> int:
    return max(1, int(round(n ** (1.0 / 3.0))))


#: a statistic of series: float [m, n] (m series of n values) -> float [m]
Statistic = Callable[[F64], F64]


def mean_stat(rows: F64) -> F64:
    """The mean of each series."""
    out: F64 = rows.mean(axis=1)
    return out


def rate_stat(rows: F64) -> F64:
    """Tokens per second of each series of per-token milliseconds: 1000 / mean (NaN when the
    mean is not positive)."""
    m = rows.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = np.where(m > 0, 1000.0 / m, np.nan)
    return out


def percentile_stat(q: float) -> Statistic:
    """The ``q``-th percentile of each series (linear interpolation, as :func:`percentiles`)."""
    def stat(rows: F64) -> F64:
        out: F64 = np.percentile(rows, q, axis=1)
        return out

    return stat


#: resampled values held at once by the bootstrap (rows x tokens), to bound its memory
_CHUNK_VALUES = 1 << 22


def _mbb_stats(a: F64, block: int, resamples: int, rng: np.random.Generator, stat: Statistic) -> F64:
    """``stat`` of ``resamples`` moving-block bootstrap series of ``a`` (same length)."""
    n = a.shape[0]
    nb = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(resamples, nb))
    out = np.empty(resamples, dtype=np.float64)
    step = max(1, _CHUNK_VALUES // max(1, nb * block))
    for i in range(0, resamples, step):
        s = starts[i:i + step]
        idx = (s[:, :, None] + np.arange(block)[None, None, :]).reshape(s.shape[0], -1)[:, :n]
        out[i:i + step] = stat(a[idx])
    return out


def block_bootstrap_mean(x: npt.ArrayLike, confidence: float = 0.95, resamples: int = 2000,
                         block: int | None = None, seed: int = 0, stat: Statistic = mean_stat) -> Interval:
    """Within-run interval of one series' mean (or another ``stat``: :func:`rate_stat`,
    :func:`percentile_stat`) by a moving-block bootstrap (blocks of ``block`` consecutive
    values, default n^(1/3): keeps the autocorrelation a plain bootstrap would destroy).
    Percentile interval; deterministic for a ``seed``. Raises ValueError with fewer than 2
    values."""
    a = _finite(x)
    if a.shape[0] < 2:
        raise ValueError("an interval needs at least 2 values")
    bl = min(a.shape[0], block or _block_len(a.shape[0]))
    vals = _mbb_stats(a, bl, resamples, np.random.default_rng(seed), stat)
    q = (1.0 - confidence) / 2.0
    return Interval(float(stat(a[None, :])[0]), float(np.nanquantile(vals, q)), float(np.nanquantile(vals, 1 - q)),
                    confidence, bl, resamples, "moving-block bootstrap")


def block_bootstrap_diff(a: npt.ArrayLike, b: npt.ArrayLike, confidence: float = 0.95, resamples: int = 2000,
                         block: int | None = None, seed: int = 0, stat: Statistic = mean_stat) -> Interval:
    """Within-run interval of ``stat(b) - stat(a)`` (default the means) for one run per arm:
    each series resampled by moving blocks on its own (see :func:`block_bootstrap_mean`). It
    covers the token-to-token noise inside the two runs, not what differs between runs (order,
    thermal drift, the machine's other load). Raises ValueError with fewer than 2 values in a
    series."""
    x, y = _finite(a), _finite(b)
    if x.shape[0] < 2 or y.shape[0] < 2:
        raise ValueError("an interval needs at least 2 values in each series")
    bl = block or max(_block_len(x.shape[0]), _block_len(y.shape[0]))
    rng = np.random.default_rng(seed)
    ma = _mbb_stats(x, min(bl, x.shape[0]), resamples, rng, stat)
    mb = _mbb_stats(y, min(bl, y.shape[0]), resamples, rng, stat)
    dd = mb - ma
    q = (1.0 - confidence) / 2.0
    est = float(stat(y[None, :])[0] - stat(x[None, :])[0])
    return Interval(est, float(np.nanquantile(dd, q)), float(np.nanquantile(dd, 1 - q)), confidence, bl, resamples,
                    "moving-block bootstrap")


def percentiles(x: npt.ArrayLike, qs: tuple[float, ...] = (50.0, 95.0, 99.0)) -> list[float]:
    """Percentiles (linear interpolation, numpy's default) of the finite values; NaN if none."""
    a = _finite(x)
    if a.shape[0] == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(a, qs)]
