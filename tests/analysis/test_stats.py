"""The statistics against scipy (random data) and hand-worked small cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from bmoe_top.tui.analysis import stats as S


@pytest.mark.parametrize("seed", range(25))
def test_mann_whitney_exact_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 12)), int(rng.integers(1, 12))
    a = rng.normal(0, 1, m)
    b = rng.normal(float(rng.normal(0, 1)), 1, n)
    got = S.mann_whitney(a, b)
    want = sps.mannwhitneyu(a, b, alternative="two-sided", method="exact")
    assert got.method == "exact"
    assert got.u == pytest.approx(want.statistic)
    assert got.p == pytest.approx(want.pvalue, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(25))
def test_mann_whitney_normal_with_ties_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    m, n = int(rng.integers(3, 40)), int(rng.integers(3, 40))
    a = np.round(rng.normal(0, 1, m), 1)
    b = np.round(rng.normal(0.3, 1, n), 1)
    got = S.mann_whitney(a, b)
    want = sps.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True)
    if got.method == "exact":  # no ties drawn: compare with the exact one
        want = sps.mannwhitneyu(a, b, alternative="two-sided", method="exact")
    assert got.u == pytest.approx(want.statistic)
    assert got.p == pytest.approx(want.pvalue, rel=1e-7, abs=1e-12)


def test_mann_whitney_hand_case() -> None:
    # a entirely below b, 4 vs 4: the most extreme of C(8,4) = 70 arrangements, both tails
    r = S.mann_whitney([1, 2, 3, 4], [5, 6, 7, 8])
    assert r.u == 0 and r.p == pytest.approx(2 / 70)
    with pytest.raises(ValueError):
        S.mann_whitney([], [1.0])


@pytest.mark.parametrize("seed", range(20))
def test_hodges_lehmann_interval_inverts_the_test(seed: int) -> None:
    """The interval is the set of shifts the exact test does not reject (Moses)."""
    rng = np.random.default_rng(200 + seed)
    m, n = int(rng.integers(4, 10)), int(rng.integers(4, 10))
    a = rng.normal(10, 2, m)
    b = rng.normal(11, 2, n)
    sh = S.hodges_lehmann(a, b, 0.95)
    d = (b[None, :] - a[:, None]).reshape(-1)
    assert sh.shift == pytest.approx(float(np.median(d)))
    assert sh.low <= sh.shift <= sh.high
    eps = 1e-9 * max(1.0, abs(sh.low))

    def p_at(delta: float) -> float:
        return float(sps.mannwhitneyu(a + delta, b, alternative="two-sided", method="exact").pvalue)

    assert p_at(sh.low - eps) <= 0.05
    assert p_at(sh.low + eps) > 0.05
    assert p_at(sh.high + eps) <= 0.05
    assert p_at(sh.high - eps) > 0.05


def test_hodges_lehmann_too_few_runs_and_large_samples() -> None:
    # C(6,3) = 20 arrangements: no 95% interval; the widest, every difference's range, is a 90% one
    sh = S.hodges_lehmann([1, 2, 3], [4, 5, 6])
    assert sh.shift == 3 and (sh.low, sh.high) == (1, 5) and sh.confidence == pytest.approx(0.9)
    two = S.hodges_lehmann([1, 2], [4, 6])  # C(4,2) = 6: 67%
    assert (two.low, two.high) == (2, 5) and two.confidence == pytest.approx(2 / 3)
    one = S.hodges_lehmann([1], [4])  # one difference: no interval at any confidence worth the name
    assert one.shift == 3 and math.isnan(one.low) and math.isnan(one.high) and one.confidence == 0.95
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 60), rng.normal(1, 1, 60)
    big = S.hodges_lehmann(a, b)
    assert big.low < big.shift < big.high and abs(big.shift - 1.0) < 0.5
    assert big.high - big.low < 1.0


def test_min_runs_and_verdict() -> None:
    assert S.min_runs() == (4, 6)
    assert S.verdict(0.01, 5.0)
    assert not S.verdict(0.01, 1.0)  # below the 2% noise floor: ~
    assert not S.verdict(0.2, 30.0)  # not significant: ~
    assert not S.verdict(float("nan"), 10.0)
    assert S.verdict(0.01, -3.0)


def _mser_direct(x: np.ndarray, batch: int = 5) -> int:
    k = len(x) // batch
    y = x[: k * batch].reshape(k, batch).mean(axis=1)
    best, arg = float("inf"), 0
    for d in range(0, max(0, min(k - 2, k // 2)) + 1):
        t = y[d:]
        v = float(((t - t.mean()) ** 2).sum() / len(t) ** 2)
        if v < best - 1e-15:
            best, arg = v, d
    return arg * batch


def test_mser5_finds_the_warm_up() -> None:
    rng = np.random.default_rng(4)
    x = np.concatenate([np.linspace(400, 150, 20), rng.normal(150, 5, 180)])
    m = S.mser5(x)
    assert 10 <= m.split <= 30
    assert m.steady_mean == pytest.approx(float(x[m.split:].mean()))
    assert m.warm_mean == pytest.approx(float(x[: m.split].mean()))
    for seed in range(10):
        y = np.random.default_rng(seed).gamma(2.0, 50.0, 120) + np.linspace(80, 0, 120) ** 1.5 / 10
        assert S.mser5(y).split == _mser_direct(y)
    flat = S.mser5(rng.normal(100, 1, 100))
    assert flat.split <= 50
    assert S.mser5([1.0, 2.0]).split == 0


def test_block_bootstrap() -> None:
    rng = np.random.default_rng(8)
    # AR(1) series: the block bootstrap interval is wider than the iid one would be
    e = rng.normal(0, 10, 400)
    x = np.empty(400)
    x[0] = 100
    for i in range(1, 400):
        x[i] = 100 + 0.6 * (x[i - 1] - 100) + e[i]
    iv = S.block_bootstrap_mean(x)
    assert iv.low < x.mean() < iv.high
    iid_half = 1.96 * x.std() / math.sqrt(len(x))
    assert (iv.high - iv.low) / 2 > 1.2 * iid_half
    assert S.block_bootstrap_mean(x) == iv  # deterministic for a seed
    d = S.block_bootstrap_diff(x, x + 20)
    assert d.estimate == pytest.approx(20.0)
    assert d.low < 20 < d.high
    with pytest.raises(ValueError):
        S.block_bootstrap_mean([1.0])
    assert S.lag1(x) == pytest.approx(float(np.corrcoef(x[:-1], x[1:])[0, 1]), abs=0.02)


def test_percentiles() -> None:
    x = np.arange(101, dtype=float)
    assert S.percentiles(x) == [50.0, 95.0, 99.0]
    assert all(math.isnan(v) for v in S.percentiles([float("nan")]))


def _series(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """Per-token-like series: AR(1) noise, heavy ties (values on a coarse grid), or a step."""
    if kind == "ties":
        return np.round(rng.normal(100, 5, n)) / 2
    if kind == "step":
        return np.where(np.arange(n) < n // 3, 150.0, 100.0) + rng.normal(0, 1, n)
    e = rng.normal(0, 10, n)
    x = np.empty(n)
    x[0] = 100
    for i in range(1, n):
        x[i] = 100 + 0.6 * (x[i - 1] - 100) + e[i]
    return x


@pytest.mark.parametrize("kind", ["ar1", "ties", "step"])
@pytest.mark.parametrize("n", [2, 3, 7, 50, 333, 2000])
def test_bootstrap_intervals_equal_the_gathered_resamples(kind: str, n: int) -> None:
    """Block sums and order statistics read without building a resample give the intervals the
    gathered resamples gave (tests/helpers/bootstrap_reference.py), for the mean, tok/s and the
    percentiles, one series and the difference of two: asked alone, or wanted together first
    and drawn once for all (as compare asks)."""
    from helpers import bootstrap_reference as ref

    rng = np.random.default_rng(n * 7 + len(kind))
    x, y = _series(rng, n, kind), _series(rng, n + n // 3, kind) + 3
    stats = ((S.mean_stat, ref.mean_rows), (S.rate_stat, ref.rate_rows),
             (S.percentile_stat(50.0), ref.percentile_rows(50.0)), (S.percentile_stat(95.0), ref.percentile_rows(95.0)),
             (S.percentile_stat(99.0), ref.percentile_rows(99.0)), (S.percentile_stat(0.0), ref.percentile_rows(0.0)),
             (S.percentile_stat(100.0), ref.percentile_rows(100.0)))
    together = {block: (S.Bootstrap(300, 3), S.Bootstrap(300, 5)) for block in (None, 1, 4)}
    for block, (one, two) in together.items():
        for stat, _r in stats:
            one.want_mean(x, stat, block)
            two.want_diff(x, y, stat, block)
            two.want_mean(y, stat, block)
    for stat, rstat in stats:
        for block, (one, two) in together.items():
            want = ref.interval_mean(x, resamples=300, block=block, seed=3, stat=rstat)
            for boot in (S.Bootstrap(300, 3), one):
                iv = boot.interval_mean(x, stat=stat, block=block)
                assert (iv.estimate, iv.low, iv.high) == pytest.approx(want, rel=1e-12, abs=1e-12), (stat, block)
            want = ref.interval_diff(x, y, resamples=300, block=block, seed=5, stat=rstat)
            for boot in (S.Bootstrap(300, 5), two):
                d = boot.interval_diff(x, y, stat=stat, block=block)
                assert (d.estimate, d.low, d.high) == pytest.approx(want, rel=1e-12, abs=1e-12), (stat, block)
            want = ref.interval_mean(y, resamples=300, block=block, seed=5, stat=rstat)
            iv = two.interval_mean(y, stat=stat, block=block)
            assert (iv.estimate, iv.low, iv.high) == pytest.approx(want, rel=1e-12, abs=1e-12), (stat, block)
    want = ref.interval_mean(x, seed=0)
    iv = S.block_bootstrap_mean(x)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_bootstrap_percentile_band_and_its_fallback_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bands of ranks too narrow for most resamples (no margin for their spread): those are
    counted over every rank instead, and every resample's percentile equals np.percentile of the
    gathered resample, inside its band or not."""
    rng = np.random.default_rng(4)
    x = np.concatenate([np.full(40, 150.0), np.full(60, 100.0)]) + rng.normal(0, 1, 100)
    n, block = x.shape[0], 20
    starts = rng.integers(0, n - block + 1, size=(200, 5))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(200, -1)[:, :n]
    qs = (30.0, 50.0, 70.0)
    for sigmas in (0.0, 6.0):
        monkeypatch.setattr(S, "_BAND_SIGMAS", sigmas)
        out, wide = S._quantiles([(x, q, "x") for q in qs], starts, block, n)
        assert (wide > 0) == (sigmas == 0.0)
        for j, q in enumerate(qs):
            assert np.array_equal(out[:, j], np.percentile(x[idx], q, axis=1))
