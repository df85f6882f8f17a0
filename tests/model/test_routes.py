"""Routing rows, per-layer counts and expert aggregates (the misses by memory tier included):
exact against a brute-force count over every row, with and without a routing window (old
cursors answered from a checkpoint, said so)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.model.routes import RouteStore

L, E, K = 4, 12, 2


def routing(rng: np.random.Generator, n_tok: int):
    """Per token: one prefill block now and then (tok -1 - turn, no tiers, as bmoe-run sends
    them), then the token's decode rows, each miss served by the page cache or the disk."""
    out = []
    turn = 0
    for t in range(n_tok):
        if t % 50 == 0:
            for _ in range(3):
                out.append((np.full(L * K, -1 - turn), np.repeat(np.arange(L), K),
                            rng.integers(0, E, L * K), rng.integers(0, 2, L * K), None))
            turn += 1
        hit = rng.integers(0, 2, L * K)
        out.append((np.full(L * K, t), np.repeat(np.arange(L), K), rng.integers(0, E, L * K),
                    hit, np.where(hit > 0, 0, rng.integers(1, 3, L * K))))
    return out


def brute(rows, stop):
    """(routed, hits, last, page-cache misses, disk misses) over the rows before ``stop``."""
    cnt = np.zeros((L, E), np.int64)
    hit = np.zeros((L, E), np.int64)
    last = np.full((L, E), -1, np.int8)
    tiers = np.zeros((3, L, E), np.int64)
    seen_max = -1
    for tok, layer, expert, h, tier in rows:
        for t, lay, e, x, r in zip(tok, layer, expert, h, tier if tier is not None else [-1] * len(tok)):
            seen_max = max(seen_max, t)
            if stop is not None and seen_max >= stop:
                return cnt, hit, last, tiers[1], tiers[2]
            cnt[lay, e] += 1
            hit[lay, e] += x > 0
            last[lay, e] = int(x > 0)
            if r >= 0:
                tiers[r, lay, e] += 1
    return cnt, hit, last, tiers[1], tiers[2]


def same(got, want) -> bool:
    return (np.array_equal(got.routed, want[0]) and np.array_equal(got.hits, want[1])
            and np.array_equal(got.last, want[2]) and np.array_equal(got.pagecache, want[3])
            and np.array_equal(got.disk, want[4]))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), n_tok=st.integers(1, 300), window=st.sampled_from([None, 20, 64]),
       stops=st.lists(st.integers(0, 320), min_size=1, max_size=6))
def test_expert_aggregates_match_brute_force(seed, n_tok, window, stops):
    rows = routing(np.random.default_rng(seed), n_tok)
    rs = RouteStore(window_tokens=window)
    rs._cap = 64  # small storage, so a window evicts often
    for name in ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax"):
        setattr(rs, name, getattr(rs, name)[:64].copy())
    for r in rows:
        rs.extend(*r)
    for stop in [*stops, None, n_tok]:
        got = rs.expert_counts(L, E, stop)
        if got.as_of is None:
            want = brute(rows, stop)
        else:  # older than the routing window: exact as of the checkpoint it names
            assert window is not None and got.as_of <= stop
            want = brute(rows, got.as_of)
        assert same(got, want)
    assert rs.tier_rows == sum(len(r[0]) for r in rows if r[4] is not None)
    # per-layer counts of decode rows: every row, whatever was evicted
    share = rs.layer_series(L, 0, n_tok, bins=n_tok)
    look = np.zeros((L, n_tok))
    hits = np.zeros((L, n_tok))
    for tok, layer, _e, h, _r in rows:
        if tok[0] >= 0:
            np.add.at(look, (layer, tok), 1)
            np.add.at(hits, (layer, tok), h > 0)
    assert share.width == 1 and np.array_equal(share.lookups, look)
    assert np.allclose(share.share, hits / look, equal_nan=True)


def test_counts_for_rows_without_routing_and_late_counts():
    rs = RouteStore(count_rows=128)
    rs.add_counts(1, np.array([3.0, np.nan, 0.0]), np.array([1.0, 2.0, 4.0]))
    assert rs.count_rows == 2 and rs.max_layer == 2
    m = rs.hit_share(3, 0, 2)
    assert np.isnan(m[:, 0]).all() and m[0, 1] == 0.75 and np.isnan(m[1, 1]) and m[2, 1] == 0.0
    for row in range(2, 5000):
        rs.add_counts(row, np.array([1.0, 1.0, 1.0]), np.array([1.0, 0.0, 0.0]))
    rs.add_counts(1, np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.0]))  # late, for an old row
    assert np.isnan(rs.hit_share(3, 1, 2)).all()  # row 1 is no longer held at full resolution
    s = rs.layer_series(3, 0, 5000, bins=1)
    assert s.lookups[:, 0].tolist() == [5 + 2 * 4998, 4998, 4 + 4998]
    assert s.share[0, 0] == (4 + 4998) / (5 + 2 * 4998)
    rs.add_counts(7, np.array([-1.0]), np.array([5.0]))  # a counter that went down: nothing
    assert rs.n == 0  # no routing rows invented


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), n_tok=st.integers(1, 300), window=st.sampled_from([None, 40]),
       every=st.sampled_from([8, 33, 100]), max_snaps=st.sampled_from([3, 256]),
       stops=st.lists(st.integers(0, 320), min_size=2, max_size=12))
def test_backward_seeks_use_snapshots_and_match_plain_count(seed, n_tok, window, every, max_snaps, stops):
    """Cursor moves in any order (back and forth) give the plain count, and a backward seek counts
    at most one snapshot interval of rows (not the run from its start)."""
    import bmoe_top.tui.model.routes as routes_mod

    rows = routing(np.random.default_rng(seed), n_tok)
    rs = RouteStore(window_tokens=window)
    rs._cap = 64
    for name in ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax"):
        setattr(rs, name, getattr(rs, name)[:64].copy())
    rs._snap_every = every
    saved = routes_mod.MAX_SNAPSHOTS
    routes_mod.MAX_SNAPSHOTS = max_snaps
    counted: list[int] = []
    orig = rs._add_rows

    def add_rows(agg, a, b, sign=1):
        counted.append(b - a)
        orig(agg, a, b, sign)

    rs._add_rows = add_rows  # type: ignore[method-assign]
    try:
        for r in rows:
            rs.extend(*r)
        rs.expert_counts(L, E, None)  # the whole run once: snapshots along the way
        for stop in stops:
            counted.clear()
            backward = rs._acc is not None and rs.rows_before(stop) < rs._acc.rows
            got = rs.expert_counts(L, E, stop)
            if got.as_of is not None:
                assert window is not None
                want = brute(rows, got.as_of)
            else:
                want = brute(rows, stop)
                if backward:  # one interval at most, however far back
                    assert sum(counted) < rs._snap_every
            assert same(got, want)
        assert len(rs._snapshots) <= max_snaps
    finally:
        routes_mod.MAX_SNAPSHOTS = saved


def test_a_source_without_tiers_counts_no_tier():
    """Rows without a tier (bmoe-cli, an old recording) count no page-cache or disk miss and
    leave ``tier_rows`` at 0 (the tier view says "not reported", never zeros)."""
    rs = RouteStore()
    rs.extend(np.zeros(4), np.zeros(4), np.arange(4), np.array([0, 0, 1, 0]))
    got = rs.expert_counts(1, 4, None)
    assert rs.tier_rows == 0 and (rs.tier == -1).all()
    assert got.routed.sum() == 4 and got.pagecache.sum() == 0 and got.disk.sum() == 0


def test_a_tier_value_that_is_no_tier_counts_as_not_said():
    """Tier values outside 0-2 (a newer runtime's, a damaged line) are not said: never wrapped
    into the int8 column as another tier (257 would read as 1, the page cache)."""
    rs = RouteStore()
    rs.extend(np.zeros(5), np.zeros(5), np.arange(5), np.zeros(5), np.array([1, 2, 257, -3, 7]))
    got = rs.expert_counts(1, 5, None)
    assert rs.tier_rows == 2 and rs.tier.tolist() == [1, 2, -1, -1, -1]
    assert got.pagecache.tolist() == [[1, 0, 0, 0, 0]] and got.disk.tolist() == [[0, 1, 0, 0, 0]]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), n_tok=st.integers(2, 300), window=st.sampled_from([None, 40]),
       stops=st.lists(st.integers(0, 320), min_size=2, max_size=8))
def test_tiers_that_start_mid_run_are_counted_from_then_at_any_cursor(seed, n_tok, window, stops):
    """Rows without tiers first (snapshots and checkpoints kept then hold no tier counts), then
    rows with them: every cursor, back and forth, still gives the plain count."""
    rows = routing(np.random.default_rng(seed), n_tok)
    half = len(rows) // 2
    rows = [(*r[:4], None) for r in rows[:half]] + rows[half:]
    rs = RouteStore(window_tokens=window)
    rs._cap = 64
    for name in ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax"):
        setattr(rs, name, getattr(rs, name)[:64].copy())
    rs._snap_every = 16
    for r in rows[:half]:
        rs.extend(*r)
    rs.expert_counts(L, E, None)  # snapshots (and, with a window, checkpoints) without tier counts
    assert rs.tier_rows == 0 and all(a.pagecache.size == 0 for a in rs._snapshots)
    for r in rows[half:]:
        rs.extend(*r)
    for stop in [*stops, None]:
        got = rs.expert_counts(L, E, stop)
        want = brute(rows, stop if got.as_of is None else got.as_of)
        assert same(got, want)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), n_tok=st.integers(1, 200), window=st.sampled_from([None, 30]),
       spans=st.lists(st.tuples(st.integers(0, 210), st.integers(1, 40), st.integers(0, L - 1),
                                st.integers(1, L)), min_size=1, max_size=6))
def test_tier_split_of_a_token_span_and_layers_matches_its_rows(seed, n_tok, window, spans):
    """The page-cache and disk misses of tokens [lo, hi) in layers [l0, l1): those of their rows,
    or None when their rows are no longer held (a window) or carry no tier."""
    rows = routing(np.random.default_rng(seed), n_tok)
    rs = RouteStore(window_tokens=window)
    rs._cap = 64
    for name in ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax"):
        setattr(rs, name, getattr(rs, name)[:64].copy())
    for r in rows:
        rs.extend(*r)
    for lo, width, l0, nl in spans:
        hi, l1 = lo + width, min(L, l0 + nl)
        got = rs.tier_split(lo, hi, l0, l1)
        pc = dk = told = 0
        for tok, layer, _e, _h, tier in rows:
            if tier is None:
                continue
            sel = (tok >= lo) & (tok < hi) & (layer >= l0) & (layer < l1)
            pc += int(((tier == 1) & sel).sum())
            dk += int(((tier == 2) & sel).sum())
            told += int(sel.sum())
        if lo <= rs._evicted_max_tok or not told:
            assert got is None
        else:
            assert got == (pc, dk)
