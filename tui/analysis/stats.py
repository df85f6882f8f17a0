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
  steady means by a moving-block bootstrap (per-token wall times are autocorrelated); its
  resamples' means and percentiles come from compiled block sums and order statistics
  (tui/analysis/_resample.py), never from the resamples themselves.
* :func:`percentiles`.

numpy, numba and the standard library: scipy is used by the tests to check these.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Mser", "mser5", "mann_whitney", "MannWhitney", "Shift", "hodges_lehmann", "verdict",
           "min_runs", "Interval", "block_bootstrap_diff", "block_bootstrap_mean", "percentiles", "lag1",
           "NOISE_FLOOR_PCT", "ALPHA", "Statistic", "mean_stat", "rate_stat", "percentile_stat", "Bootstrap"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: a change smaller than this share of the baseline is reported as ``~`` (noise), percent
NOISE_FLOOR_PCT = 2.0
#: significance level of the Mann-Whitney test
ALPHA = 0.05


def _finite(x: npt.ArrayLike) -> F64:
    """The finite values of ``x`` (``x`` itself when all are)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        a = a.reshape(-1)
    ok = np.isfinite(a)
    return a if ok.all() else a[ok]


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
#: the least confidence a Hodges-Lehmann interval is given at when the samples are too small for
#: the one asked for (two runs an arm reach 67%, one and one nothing)
MIN_SHIFT_CONFIDENCE = 0.5


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
    unit) and its ``confidence`` interval [``low``, ``high``] (with samples too small for the
    confidence asked for, a lower one: see :func:`hodges_lehmann`; NaN when even that is too
    low)."""

    shift: float
    low: float
    high: float
    confidence: float


def hodges_lehmann(a: npt.ArrayLike, b: npt.ArrayLike, confidence: float = 0.95) -> Shift:
    """Median of all differences ``b_j - a_i`` and the distribution-free interval from their
    order statistics: [D(k), D(mn+1-k)] with k the largest count such that P(U < k) <= alpha/2
    under the null (exact U distribution for m*n <= 400, else the normal approximation).
    When the samples are too small for ``confidence`` (no k >= 1: 3 and 3 values reach 90%,
    not 95%) the interval is every difference's range [D(1), D(mn)] and the returned
    ``confidence`` is the one it has, if at least :data:`MIN_SHIFT_CONFIDENCE`, else the
    interval is NaN. Raises ValueError when a sample is empty."""
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
        # too few values for that confidence: the widest interval (every difference's range) at
        # the confidence it has, 1 - 2 / C(m+n, m) without ties (90% with 3 and 3 runs)
        reach = 1.0 - 2.0 / math.comb(m + n, m)
        if reach < MIN_SHIFT_CONFIDENCE:
            return Shift(shift, float("nan"), float("nan"), confidence)
        return Shift(shift, float(d[0]), float(d[-1]), reach)
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


@dataclass(frozen=True, slots=True)
class Statistic:
    """A statistic of series: ``kind`` ``mean``, ``rate`` (tokens per second of per-token
    milliseconds: 1000 / mean, NaN when the mean is not positive) or ``percentile`` (the ``q``-th,
    numpy's linear interpolation, as :func:`percentiles`). Called on float [m, n] (m series of n
    values) it gives float [m]; the bootstrap computes it for its resamples without building them."""

    kind: str
    q: float = 0.0

    def __call__(self, rows: F64) -> F64:
        if self.kind == "percentile":
            out: F64 = np.percentile(rows, self.q, axis=1)
            return out
        m: F64 = rows.mean(axis=1)
        if self.kind == "mean":
            return m
        with np.errstate(divide="ignore", invalid="ignore"):
            rate: F64 = np.where(m > 0, 1000.0 / m, np.nan)
        return rate


#: the mean of each series
mean_stat = Statistic("mean")
#: tokens per second of each series of per-token milliseconds
rate_stat = Statistic("rate")


def percentile_stat(q: float) -> Statistic:
    """The ``q``-th percentile of each series (linear interpolation, as :func:`percentiles`)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"a percentile is between 0 and 100 (got {q})")
    return Statistic("percentile", float(q))


#: block starts drawn at once (rows x blocks), to bound the memory of a draw
_CHUNK_STARTS = 1 << 21
#: the tables of the groups run side by side stay under this many bytes (else one at a time)
_PARALLEL_BYTES = 512 << 20
#: standard deviations of a resample's count below a percentile that its band of ranks spans: at
#: 3.5 about 1 resample in 2,000 falls outside and is counted over every rank (O(n), exact too)
_BAND_SIGMAS = 3.5

#: where a draw sits in its generator's stream: (resamples, blocks, bound) of each draw before it
Stream = tuple[tuple[int, int, int], ...]


def _chunks(rng: np.random.Generator, resamples: int, nb: int, hi: int
            ) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """The starts ``rng.integers(0, hi, size=(resamples, nb))`` would give, drawn a few rows at a
    time (the same numbers: the generator fills rows in order)."""
    step = max(1, _CHUNK_STARTS // max(1, nb))
    for i in range(0, resamples, step):
        yield i, rng.integers(0, hi, size=(min(step, resamples - i), nb))


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _key(a: F64) -> tuple[int, bytes]:
    """A series' identity by content (a request and a later question name the same values)."""
    return a.shape[0], hashlib.blake2b(np.ascontiguousarray(a).data, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class _Group:
    """Resamples drawn once: ``n`` values in blocks of ``block``, at ``before`` in the stream."""

    before: Stream
    n: int
    block: int


class Bootstrap:
    """Moving-block bootstrap values of many series at once, for one seed and ``resamples``.

    A resample's starts depend only on the seed, the draws made before from the same generator,
    the series' length and the block length; :meth:`want_mean` and :meth:`want_diff` name what
    :meth:`interval_mean` and :meth:`interval_diff` will be asked, and the first question draws
    each group of starts once and computes every wanted statistic of its series from a table of
    per-block sums and counts (tok/s is 1000 / the mean), a thread per group. A question nobody
    wanted is computed when asked. The numbers equal building every resample and reducing it.
    Memory per group: its starts (int32 when they fit) and a table row per block start."""

    def __init__(self, resamples: int = 2000, seed: int = 0):
        self.resamples = resamples
        self.seed = seed
        self._want: dict[_Group, dict[tuple[object, ...], tuple[F64, Statistic]]] = {}
        self._vals: dict[tuple[object, ...], F64] = {}
        self._states: dict[Stream, Mapping[str, Any]] = {}
        self._ids: dict[int, tuple[F64, tuple[int, bytes]]] = {}
        self._orders: dict[object, tuple[F64, npt.NDArray[np.int32]]] = {}

    def _key(self, a: F64) -> tuple[int, bytes]:
        """A series' identity by content, hashed once per array (kept alive here, so its id is
        not reused while this bootstrap lives)."""
        got = self._ids.get(id(a))
        if got is None:
            got = self._ids[id(a)] = (a, _key(a))
        return got[1]

    def _request(self, a: F64, block: int, before: Stream, stat: Statistic) -> tuple[object, ...]:
        key = (_group(a.shape[0], block, before), self._key(a), stat)
        if key not in self._vals:
            self._want.setdefault(key[0], {})[key] = (a, stat)
        return key

    def _plan_mean(self, x: F64, block: int | None) -> tuple[int, Stream]:
        return min(x.shape[0], block or _block_len(x.shape[0])), ()

    def _plan_diff(self, x: F64, y: F64, block: int | None) -> tuple[int, int, Stream]:
        bl = block or max(_block_len(x.shape[0]), _block_len(y.shape[0]))
        bx, by = min(bl, x.shape[0]), min(bl, y.shape[0])
        return bx, by, ((self.resamples, -(-x.shape[0] // bx), x.shape[0] - bx + 1),)

    def want_mean(self, x: npt.ArrayLike, stat: Statistic = mean_stat, block: int | None = None) -> None:
        """:meth:`interval_mean` of ``x`` will be asked (series of fewer than 2 values: ignored)."""
        a = _finite(x)
        if a.shape[0] >= 2:
            bl, before = self._plan_mean(a, block)
            self._request(a, bl, before, stat)

    def want_diff(self, x: npt.ArrayLike, y: npt.ArrayLike, stat: Statistic = mean_stat,
                  block: int | None = None) -> None:
        """:meth:`interval_diff` of ``x`` and ``y`` will be asked."""
        a, b = _finite(x), _finite(y)
        if a.shape[0] >= 2 and b.shape[0] >= 2:
            bx, by, first = self._plan_diff(a, b, block)
            self._request(a, bx, (), stat)
            self._request(b, by, first, stat)

    def _values(self, key: tuple[object, ...]) -> F64:
        if key not in self._vals:
            # every wanted group, a thread each (the loops release the GIL), the streams' first
            # draws first: a later draw starts from their generator's state when it is there
            # (else it draws them again itself)
            todo = sorted(self._want.items(), key=lambda kv: len(kv[0].before))
            self._want = {}
            # a group's tables take about 8 bytes a value per mean and 24 per percentile: groups
            # run side by side only while that stays under _PARALLEL_BYTES
            size = max((g.n * (8 * len(r) + 24 * len(r)) for g, r in todo), default=0)
            n_threads = min(len(todo), _cpus(), max(1, _PARALLEL_BYTES // max(1, size)))
            if n_threads <= 1:
                for g, reqs in todo:
                    self._run(g, reqs)
            else:
                with ThreadPoolExecutor(n_threads) as pool:
                    for f in [pool.submit(self._run, g, reqs) for g, reqs in todo]:
                        f.result()
        return self._vals[key]

    def _generator(self, before: Stream) -> np.random.Generator:
        """``default_rng(seed)`` advanced past the draws ``before`` (from a kept state if any)."""
        rng = np.random.default_rng(self.seed)
        done = 0
        for i in range(len(before), 0, -1):
            st = self._states.get(before[:i])
            if st is not None:
                rng.bit_generator.state = st
                done = i
                break
        for r, nb, hi in before[done:]:
            for _ in _chunks(rng, r, nb, hi):
                pass
        return rng

    def _run(self, g: _Group, reqs: dict[tuple[object, ...], tuple[F64, Statistic]]) -> None:
        from . import _resample as R

        n, block = g.n, g.block
        nb = -(-n // block)
        hi = n - block + 1
        last = n - (nb - 1) * block
        # a table row per block start: each distinct series' block sum (means; tok/s is 1000 /
        # the mean), then each percentile's counts: one read per block serves every statistic
        sums_of: dict[tuple[int, bytes], int] = {}
        series: list[F64] = []
        for a, st in reqs.values():
            sk = self._key(a)
            if st.kind in ("mean", "rate") and sk not in sums_of:
                sums_of[sk] = len(series)
                series.append(a)
        quant = [(k, a, st) for k, (a, st) in reqs.items() if st.kind == "percentile"]
        m, nq = len(series), len(quant)
        sums_t = np.empty((hi, m), dtype=np.float64)
        for c, a in enumerate(series):
            R.block_sums(a, block, sums_t[:, c])
        counts = np.empty((hi, 3 * nq), dtype=np.int32)
        band_of, sv, rank, band_lo, band_w, brank = _bands([(a, st.q, self._key(a)) for _k, a, st in quant], block,
                                                           counts, self._orders)
        qs = np.array([st.q for _k, _a, st in quant], dtype=np.float64)
        means = np.empty((self.resamples, m), dtype=np.float64)
        qvals = np.empty((self.resamples, nq), dtype=np.float64)
        rng = self._generator(g.before)
        tail = np.arange(last, dtype=np.int64)
        for i, part in _chunks(rng, self.resamples, nb, hi):  # the starts a few rows at a time
            sl = part[:, -1:] + tail[None, :]
            last_sums = np.stack([a[sl].sum(axis=1) for a in series], axis=1) if m else np.zeros((part.shape[0], 0))
            j = slice(i, i + part.shape[0])
            R.group_pass(sums_t, counts, last_sums, band_of, sv, rank, qs, band_lo, band_w, brank, part, block, n,
                         means[j], qvals[j])
        self._states[(*g.before, (self.resamples, nb, hi))] = rng.bit_generator.state
        del sums_t, counts
        for k, (a, st) in reqs.items():
            if st.kind == "percentile":
                continue
            mean = means[:, sums_of[self._key(a)]]
            if st.kind == "mean":
                self._vals[k] = mean.copy()
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    self._vals[k] = np.where(mean > 0, 1000.0 / mean, np.nan)
        for j2, (k, _a, _st) in enumerate(quant):
            self._vals[k] = qvals[:, j2].copy()

    def interval_mean(self, x: npt.ArrayLike, confidence: float = 0.95, stat: Statistic = mean_stat,
                      block: int | None = None) -> Interval:
        """:func:`block_bootstrap_mean` of ``x`` with this bootstrap's draws."""
        a = _finite(x)
        if a.shape[0] < 2:
            raise ValueError("an interval needs at least 2 values")
        bl, before = self._plan_mean(a, block)
        vals = self._values(self._request(a, bl, before, stat))
        q = (1.0 - confidence) / 2.0
        return Interval(float(stat(a[None, :])[0]), float(np.nanquantile(vals, q)),
                        float(np.nanquantile(vals, 1 - q)), confidence, bl, self.resamples, "moving-block bootstrap")

    def interval_diff(self, x: npt.ArrayLike, y: npt.ArrayLike, confidence: float = 0.95,
                      stat: Statistic = mean_stat, block: int | None = None) -> Interval:
        """:func:`block_bootstrap_diff` of ``x`` and ``y`` with this bootstrap's draws."""
        a, b = _finite(x), _finite(y)
        if a.shape[0] < 2 or b.shape[0] < 2:
            raise ValueError("an interval needs at least 2 values in each series")
        bx, by, first = self._plan_diff(a, b, block)
        ka, kb = self._request(a, bx, (), stat), self._request(b, by, first, stat)
        dd = self._values(kb) - self._values(ka)
        q = (1.0 - confidence) / 2.0
        est = float(stat(b[None, :])[0] - stat(a[None, :])[0])
        bl = block or max(_block_len(a.shape[0]), _block_len(b.shape[0]))
        return Interval(est, float(np.nanquantile(dd, q)), float(np.nanquantile(dd, 1 - q)), confidence, bl,
                        self.resamples, "moving-block bootstrap")


def _group(n: int, block: int, before: Stream) -> _Group:
    return _Group(before, n, block)


def _bands(wanted: list[tuple[F64, float, object]], block: int, table: npt.NDArray[np.int32],
           orders: dict[object, tuple[F64, npt.NDArray[np.int32]]] | None = None
           ) -> tuple[I64, F64, npt.NDArray[np.int32], I64, I64, npt.NDArray[np.int32]]:
    """For each (series, percentile q, the series' identity) of ``wanted`` (all of length n): a
    band of ranks around the order statistics q needs (as wide as a resample's spread needs), and
    per block start s, in ``table`` [n - block + 1, 3 n_q] columns 3j..3j+2: the block's values
    ranked below band j, where its values in the band start in the band's list, and how many.
    Returns (the series of each band, each distinct series sorted, their ranks, band_lo, band_w,
    brank) for ``_resample.group_pass``. ``orders`` keeps each series' sorted values and ranks by
    identity for the next call."""
    nq = len(wanted)
    n = wanted[0][0].shape[0] if nq else 0
    nb = -(-n // block) if nq else 0
    orders = {} if orders is None else orders
    ids: dict[object, int] = {}
    for a, _q, sk in wanted:
        if sk not in ids:
            ids[sk] = len(ids)
            if sk not in orders:  # a series is sorted once
                order = np.argsort(a, kind="stable")
                rk = np.empty(n, dtype=np.int32)
                rk[order] = np.arange(n, dtype=np.int32)
                orders[sk] = (a[order], rk)
    sv = np.empty((len(ids), n), dtype=np.float64)
    rank = np.empty((len(ids), n), dtype=np.int32)
    for sk, i in ids.items():
        sv[i], rank[i] = orders[sk]
    band_of = np.array([ids[sk] for _a, _q, sk in wanted], dtype=np.int64)
    band_lo = np.zeros(nq, dtype=np.int64)
    band_w = np.zeros(nq, dtype=np.int64)
    ranks: list[npt.NDArray[np.int32]] = []
    m = n - block + 1
    for j, (_a, q, _sk) in enumerate(wanted):
        rk = rank[band_of[j]]
        k1 = min(n - 1, int(np.floor((n - 1) * (q / 100.0))))
        k2 = min(n - 1, k1 + 1)
        # the band: a resample's count of values ranked below k1 varies with its nb blocks'
        # counts, whose variance every window of the series gives; _BAND_SIGMAS deviations each side
        cum = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(rk < k1, out=cum[1:])
        w_k = cum[block:] - cum[:-block]
        spread = float(np.sqrt(nb * float(w_k.var()))) if w_k.size > 1 else float(block)
        margin = int(_BAND_SIGMAS * spread) + block + 1
        lo_r, hi_r = max(0, k1 - margin), min(n, k2 + 1 + margin)
        np.cumsum(rk < lo_r, out=cum[1:])
        table[:, 3 * j] = cum[block:block + m] - cum[:m]
        inside = (rk >= lo_r) & (rk < hi_r)
        np.cumsum(inside, out=cum[1:])
        table[:, 3 * j + 1] = cum[:m]
        table[:, 3 * j + 2] = cum[block:block + m] - cum[:m]
        band_lo[j], band_w[j] = lo_r, hi_r - lo_r
        ranks.append((rk[inside] - lo_r).astype(np.int32))
    brank = np.zeros((nq, max([1, *(int(r.shape[0]) for r in ranks)])), dtype=np.int32)
    for j, r in enumerate(ranks):
        brank[j, : r.shape[0]] = r
    return band_of, sv, rank, band_lo, band_w, brank


def _quantiles(wanted: list[tuple[F64, float, object]], starts: npt.NDArray[np.integer[Any]], block: int, n: int
               ) -> tuple[F64, int]:
    """Percentile ``q`` of every resample of each (series, q, its identity) in ``wanted`` (all of
    length n), and how many (resample, percentile) fell outside their band and were counted over
    every rank."""
    from . import _resample as R

    nq = len(wanted)
    table = np.empty((n - block + 1, 3 * nq), dtype=np.int32)
    band_of, sv, rank, band_lo, band_w, brank = _bands(wanted, block, table)
    out = np.empty((starts.shape[0], nq), dtype=np.float64)
    qs = np.array([q for _a, q, _k in wanted], dtype=np.float64)
    wide = R.group_pass(np.empty((n - block + 1, 0)), table, np.empty((starts.shape[0], 0)), band_of, sv, rank, qs,
                        band_lo, band_w, brank, starts, block, n, np.empty((starts.shape[0], 0)), out)
    return out, int(wide)


def block_bootstrap_mean(x: npt.ArrayLike, confidence: float = 0.95, resamples: int = 2000,
                         block: int | None = None, seed: int = 0, stat: Statistic = mean_stat) -> Interval:
    """Within-run interval of one series' mean (or another ``stat``: :data:`rate_stat`,
    :func:`percentile_stat`) by a moving-block bootstrap (blocks of ``block`` consecutive
    values, default n^(1/3): keeps the autocorrelation a plain bootstrap would destroy).
    Percentile interval; deterministic for a ``seed``. Cost: O(n) once, then O(n / block) per
    resample (and a band of values near a percentile); :class:`Bootstrap` shares the draws of
    many series. Raises ValueError with fewer than 2 values."""
    return Bootstrap(resamples, seed).interval_mean(x, confidence, stat, block)


def block_bootstrap_diff(a: npt.ArrayLike, b: npt.ArrayLike, confidence: float = 0.95, resamples: int = 2000,
                         block: int | None = None, seed: int = 0, stat: Statistic = mean_stat) -> Interval:
    """Within-run interval of ``stat(b) - stat(a)`` (default the means) for one run per arm:
    each series resampled by moving blocks on its own (see :func:`block_bootstrap_mean`; one
    generator, ``a``'s draws first). It covers the token-to-token noise inside the two runs, not
    what differs between runs (order, thermal drift, the machine's other load). Raises
    ValueError with fewer than 2 values in a series."""
    return Bootstrap(resamples, seed).interval_diff(a, b, confidence, stat, block)


def percentiles(x: npt.ArrayLike, qs: tuple[float, ...] = (50.0, 95.0, 99.0)) -> list[float]:
    """Percentiles (linear interpolation, numpy's default) of the finite values; NaN if none."""
    a = _finite(x)
    if a.shape[0] == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(a, qs)]
