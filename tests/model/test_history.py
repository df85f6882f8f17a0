"""Token columns with a window and the tiered history: every series and whole-run statistic agrees
with an exact computation over every row, whatever was dropped at full resolution."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.model.columns import TokenColumns


def feed(tc: TokenColumns, rng: np.random.Generator, n: int, exact: dict[str, list[float]]) -> None:
    for i in range(n):
        if rng.random() < 0.01:  # a bulk block now and then (a file's rows)
            k = int(rng.integers(1, 40))
            cols = {"a": rng.normal(size=k), "c": rng.normal(size=k)}
            tc.extend(cols, k)
            for name in exact:
                exact[name].extend(cols.get(name, np.full(k, np.nan)).tolist())
            continue
        row = {}
        for name in exact:
            if name == "c" and i < 50:  # a column that appears late
                exact[name].append(math.nan)
                continue
            v = float(rng.normal()) if rng.random() > 0.2 else None
            row[name] = v
            exact[name].append(math.nan if v is None else v)
        tc.append(row)


def check_bins(tc: TokenColumns, exact: dict[str, np.ndarray], lo: int, hi: int, bins: int) -> None:
    s = tc.series(["a", "b", "c", "never"], lo, hi, bins)
    e = s.edges
    assert e[0] <= lo and e[-1] >= min(hi, tc.n) and np.all(np.diff(e) > 0)
    for j in range(s.bins):
        for name, col in exact.items():
            seg = col[e[j]:e[j + 1]]
            cnt = int(np.count_nonzero(~np.isnan(seg)))
            assert s.count[name][j] == cnt, (name, j, e[j], e[j + 1], s.width)
            if cnt:
                assert math.isclose(s.sum[name][j], float(np.nansum(seg)), rel_tol=1e-9, abs_tol=1e-9)
                assert s.min[name][j] == np.nanmin(seg) and s.max[name][j] == np.nanmax(seg)
                assert math.isclose(s.mean(name)[j], float(np.nanmean(seg)), rel_tol=1e-9, abs_tol=1e-9)
            else:
                assert math.isnan(s.min[name][j]) and math.isnan(s.mean(name)[j])
        assert s.count["never"][j] == 0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 4000), window=st.sampled_from([None, 64, 100, 300]),
       queries=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(1, 70)), min_size=1, max_size=8))
def test_series_and_stats_are_exact_with_any_window(seed, n, window, queries):
    # small levels so that dropping, ring shifts and the whole-run level's halving all happen;
    # each level spans more rows than the next coarser level's width (as with the defaults)
    tc = TokenColumns(["a", "b"], window=window, history_capacity=16, base_rows=8)
    exact: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    feed(tc, np.random.default_rng(seed), n, exact)
    cols = {k: np.array(v) for k, v in exact.items()}
    assert tc.n == len(cols["a"])
    check_bins(tc, cols, 0, tc.n, 50)
    for fa, fb, bins in queries:
        lo = int(fa * tc.n)
        hi = lo + int(fb * (tc.n - lo)) + 1
        check_bins(tc, cols, lo, hi, bins)
    for name, col in cols.items():
        s = tc.stats(name)
        assert s.count == int(np.count_nonzero(~np.isnan(col)))
        if s.count:
            assert math.isclose(s.sum, float(np.nansum(col)), rel_tol=1e-9, abs_tol=1e-9)
            assert (s.min, s.max) == (np.nanmin(col), np.nanmax(col))
    # rows still held read back exactly; older rows are NaN in a view, never invented
    start = tc.start
    assert np.array_equal(tc.view("a", start), cols["a"][start:], equal_nan=True)
    if start:
        assert np.isnan(tc.view("a", 0, start)).all()
    if window is not None:
        assert tc.n - start <= 2 * window + 64


def test_window_bounds_the_rows_held():
    tc = TokenColumns(["x"], window=1024)
    for i in range(100_000):
        tc.append({"x": float(i)})
    assert tc.n == 100_000 and 1024 <= tc.n - tc.start <= 2 * 1024 + 64
    s = tc.series(["x"], bins=10)
    assert s.count["x"].sum() == 100_000 and s.min["x"][0] == 0.0 and s.max["x"][-1] == 99_999.0
    assert tc.stats("x").sum == sum(range(100_000))
    assert tc.last("x") == 99_999.0


def test_window_must_hold_two_buckets():
    with pytest.raises(ValueError):
        TokenColumns(window=10)


def test_late_column_and_absent_values():
    tc = TokenColumns(["a"])
    tc.append({"a": 1.0})
    tc.append({"b": 2.0, "a": None})
    assert tc.has("a") and tc.has("b") and not tc.has("zzz")
    assert np.isnan(tc.view("a")[1]) and np.isnan(tc.view("b")[0]) and tc.view("b")[1] == 2.0
    assert np.isnan(tc.view("zzz")).all() and len(tc.view("zzz")) == 2
    assert tc.last("b") == 2.0 and math.isnan(tc.last("a"))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), min_size=1, max_size=30))
def test_stats_asked_again_as_rows_arrive_match_an_exact_recount(seed, steps):
    """A range asked for frame after frame while rows arrive (a run panel's whole-turn figures):
    each answer equals a recount of the rows, whether the range grew, stayed or shrank."""
    rng = np.random.default_rng(seed)
    tc = TokenColumns(["a"])
    col: list[float] = []
    lo = 0
    for add, pick in steps:
        for _ in range(add):
            v = float(rng.normal()) if rng.random() > 0.3 else None
            tc.append({"a": v})
            col.append(math.nan if v is None else v)
        if pick == 3 and col:
            lo = int(rng.integers(0, len(col)))  # a new turn's start
        hi = None if pick else int(rng.integers(lo, len(col) + 1))  # the whole run, or a cursor's range
        arr = np.array(col[lo:hi], dtype=float)
        s = tc.stats("a", lo, hi)
        assert s.count == int(np.count_nonzero(~np.isnan(arr)))
        if s.count:
            assert math.isclose(s.sum, float(np.nansum(arr)), rel_tol=1e-9, abs_tol=1e-9)
            assert (s.min, s.max) == (np.nanmin(arr), np.nanmax(arr))
        else:
            assert math.isnan(s.min) and math.isnan(s.max)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 9), min_size=1, max_size=60))
def test_counts_added_one_row_at_a_time_equal_the_same_counts_added_in_blocks(seed, blocks):
    """A live token's counts (one row, the fast path of ``add_block``) land in the same buckets
    as the same rows added as blocks (a file's rows), at every level, open buckets included."""
    from bmoe_top.tui.model.history import CountHistory

    rng = np.random.default_rng(seed)
    def zeros(a, b):
        return {"hits": np.zeros((3, 1)), "lookups": np.zeros((3, 1))}
    one = CountHistory(zeros, lambda: 1 << 40, 3, capacity=8, base_rows=4, fanout=2)
    block = CountHistory(zeros, lambda: 1 << 40, 3, capacity=8, base_rows=4, fanout=2)
    row = 0
    for k in blocks:
        look = rng.integers(0, 9, size=(3, k)).astype(float)
        hits = np.minimum(look, rng.integers(0, 9, size=(3, k)))
        for j in range(k):
            one.add_block(row + j, hits[:, j:j + 1], look[:, j:j + 1])
        block.add_block(row, hits, look)  # blocks of two or more rows: the general path
        row += k
    for a, b in zip(one._all_levels(), block._all_levels()):
        assert (a.width, a.first, a.n) == (b.width, b.first, b.n)
        for name in ("hits", "lookups"):
            assert np.array_equal(a.arr[name][:, : a.n], b.arr[name][:, : b.n])
            assert np.array_equal(a.open[name], b.open[name])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 90), min_size=1, max_size=12))
def test_blocks_folded_at_once_equal_the_same_blocks_folded_one_by_one(seed, batches):
    """A file's rows fold their base blocks in one call (``fold_blocks``): every level (drops of
    the oldest buckets, the whole-run level's halvings, the open buckets) ends exactly as when
    the same blocks fold one at a time, as live rows do."""
    from bmoe_top.tui.model.history import ColumnHistory, column_stats

    rng = np.random.default_rng(seed)
    def fine(a, b):
        return column_stats(np.zeros((2, 0)))
    one = ColumnHistory(fine, lambda: 0, 2, capacity=8, base_rows=4, fanout=4)
    many = ColumnHistory(fine, lambda: 0, 2, capacity=8, base_rows=4, fanout=4)
    for k in batches:
        rows = rng.normal(size=(2, 4 * k))
        rows[rng.random(rows.shape) < 0.1] = np.nan  # absent values
        rows[1, : 4 * int(rng.integers(0, k + 1))] = np.nan  # a column absent for whole blocks
        blocks = column_stats(rows.reshape(2 * k, 4))  # per block: [2 * k] stats, column-major
        for j in range(k):
            one.fold(column_stats(rows[:, 4 * j: 4 * j + 4]))
        many.fold_blocks({key: v.reshape(2, k) for key, v in blocks.items()})
    assert one.folded == many.folded
    for a, b in zip(one._all_levels(), many._all_levels()):
        assert (a.width, a.first, a.n) == (b.width, b.first, b.n)
        for name in ("count", "sum", "min", "max"):
            assert np.array_equal(a.arr[name], b.arr[name], equal_nan=True), name
            assert np.array_equal(a.open[name], b.open[name], equal_nan=True), name


def test_a_file_keeps_only_the_columns_it_has_without_a_copy():
    """A file's columns are kept as they are: no storage for a column the file does not have
    (it reads as absent, never as zero), no copy of the ones it has."""
    wall = np.arange(1000, dtype=np.float64)
    tc = TokenColumns(["step", "wall_ms", "io_ms", "stall_ms"])
    tc.extend({"wall_ms": wall, "io_ms": np.full(1000, np.nan)}, 1000, adopt=True)
    assert tc.nbytes == wall.nbytes
    assert np.shares_memory(tc.view("wall_ms"), wall)
    assert not tc.has("io_ms") and not tc.has("stall_ms") and np.isnan(tc.view("io_ms")).all()
    assert tc.stats("io_ms").count == 0 and math.isnan(tc.stats("io_ms").mean)
    tc.append({"wall_ms": 5.0, "io_ms": 1.0})  # rows after the file's are stored as usual
    assert tc.n == 1001 and tc.view("io_ms")[-1] == 1.0 and np.isnan(tc.view("io_ms")[0])
    assert tc.view("wall_ms")[999] == 999.0 and tc.last("wall_ms") == 5.0
    s = tc.series(["wall_ms", "io_ms"], bins=10)
    assert s.count["wall_ms"].sum() == 1001 and s.count["io_ms"].sum() == 1
