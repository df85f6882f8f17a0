"""The moving-block bootstrap as it was before its resamples went to compiled block sums and
order statistics: every resample gathered in full, then its mean or ``np.percentile``. Kept for
tests/analysis/test_stats.py (the package's bootstrap gives the same intervals) and
benchmarks/bench_compare.py (the baseline). Not used by the package."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
_CHUNK_VALUES = 1 << 22


def mean_rows(rows: F64) -> F64:
    out: F64 = rows.mean(axis=1)
    return out


def rate_rows(rows: F64) -> F64:
    m = rows.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = np.where(m > 0, 1000.0 / m, np.nan)
    return out


def percentile_rows(q: float) -> Callable[[F64], F64]:
    def stat(rows: F64) -> F64:
        out: F64 = np.percentile(rows, q, axis=1)
        return out

    return stat


def mbb_stats(a: F64, block: int, resamples: int, rng: np.random.Generator, stat: Callable[[F64], F64]) -> F64:
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


def _block_len(n: int) -> int:
    return max(1, int(round(n ** (1.0 / 3.0))))


def interval_mean(x: F64, confidence: float = 0.95, resamples: int = 2000, block: int | None = None, seed: int = 0,
                  stat: Callable[[F64], F64] = mean_rows) -> tuple[float, float, float]:
    """(estimate, low, high) as ``stats.block_bootstrap_mean`` computed them."""
    a = x[np.isfinite(x)]
    bl = min(a.shape[0], block or _block_len(a.shape[0]))
    vals = mbb_stats(a, bl, resamples, np.random.default_rng(seed), stat)
    q = (1.0 - confidence) / 2.0
    return float(stat(a[None, :])[0]), float(np.nanquantile(vals, q)), float(np.nanquantile(vals, 1 - q))


def interval_diff(a: F64, b: F64, confidence: float = 0.95, resamples: int = 2000, block: int | None = None,
                  seed: int = 0, stat: Callable[[F64], F64] = mean_rows) -> tuple[float, float, float]:
    """(estimate, low, high) as ``stats.block_bootstrap_diff`` computed them."""
    x, y = a[np.isfinite(a)], b[np.isfinite(b)]
    bl = block or max(_block_len(x.shape[0]), _block_len(y.shape[0]))
    rng = np.random.default_rng(seed)
    ma = mbb_stats(x, min(bl, x.shape[0]), resamples, rng, stat)
    mb = mbb_stats(y, min(bl, y.shape[0]), resamples, rng, stat)
    dd = mb - ma
    q = (1.0 - confidence) / 2.0
    est = float(stat(y[None, :])[0] - stat(x[None, :])[0])
    return est, float(np.nanquantile(dd, q)), float(np.nanquantile(dd, 1 - q))
