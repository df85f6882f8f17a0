"""Compiled loops of the moving-block bootstrap (tui/analysis/stats.py), numba, cached on disk.

A resample of a series ``a`` [n] is ``nb = ceil(n / L)`` blocks of ``L`` consecutive values from
random starts, the last one cut so that it has n values. Its mean needs only each block's sum,
read from a table of every start's block sum (double-double prefix sums: right to about one
rounding), so a resample costs O(nb) instead of O(n); an order statistic needs only the values
near it, a band of ranks counted per block from prefix counts, so a resample costs O(nb) plus
the band. Several series of one length resampled with the same starts (a run's columns) share
each block's read. Results equal a sort of the resample: the percentile is numpy's ``linear``
method step for step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

F = TypeVar("F", bound=Callable[..., Any])
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Starts = npt.NDArray[np.integer[Any]]


def jit(fn: F) -> F:
    """numba ``njit`` with the on-disk cache, typed for mypy."""
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


@jit
def block_sums(a: F64, block: int, w: F64) -> None:
    """``w`` [n - block + 1]: the sum of ``a[s:s + block]`` for every start s, from double-double
    prefix sums (TwoSum: the rounding errors of the running sum kept beside it), so each is
    right to about one rounding."""
    n = a.shape[0]
    hi = np.empty(n + 1, dtype=np.float64)
    lo = np.empty(n + 1, dtype=np.float64)
    s = 0.0
    err = 0.0
    hi[0] = 0.0
    lo[0] = 0.0
    for i in range(n):
        x = a[i]
        t = s + x
        bp = t - s
        err += (s - (t - bp)) + (x - bp)
        s = t
        hi[i + 1] = s
        lo[i + 1] = err
    for i in range(n - block + 1):
        w[i] = (hi[i + block] - hi[i]) + (lo[i + block] - lo[i])


@jit
def _order_stats(cnt: I64, stamp: I64, r: int, width: int, k1: int, k2: int) -> tuple[int, int]:
    """The band ranks (0-based in the band) of the ``k1``-th and ``k2``-th smallest values
    (``k1 <= k2``) of a multiset of band ranks: rank i is there ``cnt[i]`` times where
    ``stamp[i] == r`` (else none); -1 if the band holds too few."""
    t1 = -1
    acc = 0
    for i in range(width):
        if stamp[i] == r:
            acc += cnt[i]
            if t1 < 0 and acc > k1:
                t1 = i
            if acc > k2:
                return t1, i
    return t1, -1


@jit
def group_pass(sums: F64, counts: I32, last_sums: F64, band_of: I64, sv: F64, rank: I32, qs: F64, band_lo: I64,
               band_w: I64, brank: I32, starts: Starts, block: int, n: int, means: F64, quants: F64) -> int:
    """Every statistic of every resample of a group of series resampled with the same
    ``starts`` [R, nb], one read of each table's row per block.

    ``sums`` [n - block + 1, m] per block start s the block's sum of each of m series (from
    :func:`block_sums`); ``counts`` [n - block + 1, 3 n_q] per percentile j: the block's values
    ranked below j's band, where the block's values in the band start in ``brank[j]``, and how many.
    The last block, shorter: its sums in ``last_sums`` [R, m], its values' ranks read from
    ``rank``. Outputs ``means`` [R, m] (each series' block sums added in order,
    compensated) and ``quants`` [R, n_q]: numpy's ``linear`` percentile ``qs[j]`` of the resample
    of series ``band_of[j]`` (``sv`` [n_series, n] each sorted, ``rank`` [n_series, n] each value's
    place; band j the ranks [``band_lo[j]``, + ``band_w[j]``), ``brank`` [n_q, width] its values'
    ranks less ``band_lo[j]`` in the order of their positions). A resample whose order statistics
    fall outside the band is counted over every rank instead; returns how many were."""
    nb = starts.shape[1]
    m = sums.shape[1]
    nq = qs.shape[0]
    last = n - (nb - 1) * block
    width = 1
    for j in range(nq):
        width = max(width, band_w[j])
    cnt = np.zeros((nq, width), dtype=np.int64)
    stamp = np.full((nq, width), -1, dtype=np.int64)
    run_at = np.zeros((nq, nb + 1), dtype=np.int64)  # per band, the blocks holding some of its
    run_len = np.zeros((nq, nb + 1), dtype=np.int64)  # values: where they start in brank, how many
    hits = np.zeros(nq, dtype=np.int64)
    below = np.zeros(nq, dtype=np.int64)
    inside = np.zeros(nq, dtype=np.int64)
    k1s = np.zeros(nq, dtype=np.int64)
    k2s = np.zeros(nq, dtype=np.int64)
    gammas = np.zeros(nq, dtype=np.float64)
    for j in range(nq):
        vi = (n - 1) * (qs[j] / 100.0)
        if vi >= n - 1:
            k1s[j] = n - 1
            k2s[j] = n - 1
        else:
            k1s[j] = int(np.floor(vi))
            k2s[j] = k1s[j] + 1
        gammas[j] = vi - np.floor(vi)
    full = np.zeros(0, dtype=np.int64)
    cov = np.zeros(0, dtype=np.int64)
    wide = 0
    for r in range(starts.shape[0]):
        sr = starts[r]
        sl = sr[nb - 1]  # the last block: [sl, sl + last)
        for c in range(m):  # each series' block sums in order, compensated (TwoSum, no branch)
            acc = 0.0
            err = 0.0
            for b in range(nb):
                v = sums[sr[b], c] if b < nb - 1 else last_sums[r, c]
                t = acc + v
                bp = t - acc
                err += (acc - (t - bp)) + (v - bp)
                acc = t
            means[r, c] = (acc + err) / n
        for j in range(nq):  # each band's counts, and its runs kept without a branch
            ra = run_at[j]
            rl = run_len[j]
            lo_c = 0
            in_c = 0
            h = 0
            for b in range(nb - 1):
                s = sr[b]
                lo_c += counts[s, 3 * j]
                k = counts[s, 3 * j + 2]
                ra[h] = counts[s, 3 * j + 1]
                rl[h] = k
                h += 1 if k > 0 else 0
                in_c += k
            sj = band_of[j]
            for t in range(sl, sl + last):  # the last block's values, counted as they come
                i = rank[sj, t] - band_lo[j]
                if i < 0:
                    lo_c += 1
                elif i < band_w[j]:
                    in_c += 1
                    if stamp[j, i] != r:
                        stamp[j, i] = r
                        cnt[j, i] = 0
                    cnt[j, i] += 1
            below[j] = lo_c
            inside[j] = in_c
            hits[j] = h
        for j in range(nq):
            k1 = k1s[j] - below[j]
            k2 = k2s[j] - below[j]
            sj = band_of[j]
            t1 = -1
            t2 = -1
            if k1 >= 0 and k2 < inside[j]:
                for h in range(hits[j]):  # the band's values of each block that has any
                    f = run_at[j, h]
                    for t in range(f, f + run_len[j, h]):
                        i = brank[j, t]
                        if stamp[j, i] != r:
                            stamp[j, i] = r
                            cnt[j, i] = 0
                        cnt[j, i] += 1
                t1, t2 = _order_stats(cnt[j], stamp[j], r, band_w[j], k1, k2)
                t1 += band_lo[j]
                t2 += band_lo[j]
            else:  # every rank: each position's coverage, then a walk in rank order
                wide += 1
                if full.shape[0] == 0:
                    full = np.zeros(n + 1, dtype=np.int64)
                    cov = np.zeros(n, dtype=np.int64)
                for b in range(nb):
                    s = sr[b]
                    full[s] += 1
                    full[s + (block if b < nb - 1 else last)] -= 1
                acc_c = 0
                for p in range(n):
                    acc_c += full[p]
                    cov[rank[sj, p]] = acc_c
                    full[p] = 0
                full[n] = 0
                acc_c = 0
                for i in range(n):
                    acc_c += cov[i]
                    if t1 < 0 and acc_c > k1s[j]:
                        t1 = i
                    if acc_c > k2s[j]:
                        t2 = i
                        break
            a = sv[sj, t1]
            bb = sv[sj, t2]
            diff = bb - a
            g = gammas[j]
            quants[r, j] = bb - diff * (1 - g) if g >= 0.5 else a + diff * g
    return wide
