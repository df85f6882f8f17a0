"""The tok/s model (tui/analysis/speed.py): hand-computed cases of each formula, and properties
that hold for every input (faster reads, more hits and less compute are never slower, more
evictions never faster; overlap is never slower than serial without a stall; plain mmap's
readahead only costs)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.tui.analysis.speed import (
    MIB,
    Memory,
    TokenCosts,
    hit_at,
    mmap_prediction,
    predict,
    sizing_report,
    two_level_prediction,
)

# 48 layers x top-8 lookups a token, 1 MiB experts, 1,000 MB/s: a token that misses everything
# reads 384 x 1,048,576 bytes = 402.65 ms of flash.
COSTS = TokenCosts(compute_ms=50.0, mgmt_ms=5.0, lookups=384, miss_bytes=MIB, read_mb_s=1000.0, stall_ms=2.0)
ALL_MISS_MS = 384 * MIB / 1e9 * 1e3


def test_one_budget_by_hand():
    p = predict(1000.0, 0.75, COSTS)
    assert p.flash_ms == pytest.approx(ALL_MISS_MS / 4)  # 100.66 ms
    assert p.serial_ms == pytest.approx(50 + 100.663296 + 5)
    assert p.overlap_ms == pytest.approx(100.663296 + 5 + 2)  # the reads are longer than compute
    assert p.serial_tok_s == pytest.approx(1000 / 155.663296)
    assert predict(1000.0, 0.9, COSTS).overlap_ms == pytest.approx(50 + 5 + 2)  # compute hides 40.27 ms of reads


def test_the_compute_a_miss_adds_by_hand():
    # 0.1 ms of compute a miss: at hit 0.75, 96 misses add 9.6 ms to the 50 ms of a token without one
    c = TokenCosts(compute_ms=50.0, mgmt_ms=5.0, lookups=384, miss_bytes=MIB, read_mb_s=1000.0, miss_ms=0.1)
    p = predict(1000.0, 0.75, c)
    assert p.compute_ms == pytest.approx(59.6) and p.serial_ms == pytest.approx(59.6 + 100.663296 + 5)
    assert predict(1000.0, 1.0, c).compute_ms == 50.0
    # two levels: a page-cache hit is still an expert-cache miss (the runtime reads it, buffered)
    b, h = [1000.0, 2000.0, 4000.0, 8000.0], [0.5, 0.7, 0.8, 0.9]
    mem = Memory(ram=6000 * MIB, dense=500 * MIB, runtime=500 * MIB)
    two = two_level_prediction(b, h, 1000.0, c, mem)
    assert two.hit == pytest.approx(0.8) and two.compute_ms == pytest.approx(50 + 0.1 * 384 * 0.5)
    # plain mmap has no expert cache: no miss of it to pay for
    assert mmap_prediction(b, h, c, mem).compute_ms == 50.0
    with pytest.raises(ValueError):
        TokenCosts(compute_ms=50.0, mgmt_ms=5.0, lookups=384, miss_bytes=MIB, read_mb_s=1000.0, miss_ms=-1.0)


def test_the_mgmt_an_eviction_adds_by_hand():
    # 0.06 ms of mgmt an evicting miss on a 0.1 ms base: 25 evictions a token make 1.6 ms
    c = replace(COSTS, mgmt_ms=0.1, evict_ms=0.06)
    p = predict(1000.0, 0.75, c, evictions=25.0)
    assert p.mgmt_ms == pytest.approx(1.6)
    assert p.serial_ms == pytest.approx(50 + 100.663296 + 1.6) and p.overlap_ms == pytest.approx(100.663296 + 1.6 + 2)
    # a budget whose misses find room (no eviction): the base alone; without evict_ms the
    # run's whole mgmt at every budget
    assert predict(1000.0, 0.75, c).mgmt_ms == 0.1 and predict(1000.0, 0.75, COSTS, evictions=25.0).mgmt_ms == 5.0
    # two levels: the expert cache's own evictions; plain mmap has no expert cache to evict from or manage
    b, h = [1000.0, 2000.0, 4000.0, 8000.0], [0.5, 0.7, 0.8, 0.9]
    mem = Memory(ram=6000 * MIB, dense=500 * MIB, runtime=500 * MIB)
    assert two_level_prediction(b, h, 1000.0, c, mem, 10.0).mgmt_ms == pytest.approx(0.7)
    assert mmap_prediction(b, h, c, mem).mgmt_ms == 0.0
    r = sizing_report(b, h, c, evictions=[30.0, 10.0, 1.0, 0.0])
    assert [p.mgmt_ms for p in r.points] == pytest.approx([1.9, 0.7, 0.16, 0.1])
    with pytest.raises(ValueError, match="eviction counts"):
        sizing_report(b, h, c, evictions=[1.0])
    with pytest.raises(ValueError, match="evictions"):
        predict(1000.0, 0.75, c, evictions=-1.0)
    with pytest.raises(ValueError, match="evict_ms"):
        replace(COSTS, evict_ms=math.inf)


def test_the_curve_is_read_by_straight_lines_from_zero():
    b, h = [100.0, 200.0, 400.0], [0.2, 0.5, 0.9]
    assert hit_at(b, h, 0) == 0 and hit_at(b, h, 50) == pytest.approx(0.1)
    assert hit_at(b, h, 150) == pytest.approx(0.35) and hit_at(b, h, 300) == pytest.approx(0.7)
    assert hit_at(b, h, 1e9) == 0.9
    with pytest.raises(ValueError):
        hit_at([200.0, 100.0], [0.1, 0.2], 150)
    with pytest.raises(ValueError):
        hit_at([], [], 1)


def test_two_levels_by_hand():
    b, h = [1000.0, 2000.0, 4000.0, 8000.0], [0.5, 0.7, 0.8, 0.9]
    mem = Memory(ram=6000 * MIB, dense=500 * MIB, runtime=500 * MIB)
    # B = 1000: the page cache keeps 4000 MiB, and the two hit as one cache of 4000: 0.8
    assert two_level_prediction(b, h, 1000.0, COSTS, mem).hit == pytest.approx(0.8)
    # B = 4000: the page cache keeps 1000, the expert cache's own 4000 count: 0.8
    assert two_level_prediction(b, h, 4000.0, COSTS, mem).hit == pytest.approx(0.8)
    # B = 2500 leaves 2500: 0.725
    assert two_level_prediction(b, h, 2500.0, COSTS, mem).hit == pytest.approx(0.725)
    assert not two_level_prediction(b, h, 8000.0, COSTS, mem).fits


def test_plain_mmap_by_hand():
    b, h = [1000.0, 2000.0, 4000.0], [0.5, 0.7, 0.8]
    mem = Memory(ram=5000 * MIB, dense=500 * MIB, runtime=500 * MIB, readahead=4 * MIB)
    p = mmap_prediction(b, h, COSTS, mem)
    # each 1 MiB miss reads 4 MiB: the 4000 MiB page cache holds 1000 MiB of used experts: hit 0.5
    assert p.hit == pytest.approx(0.5) and p.budget_mib == 0
    assert p.flash_ms == pytest.approx(384 * 0.5 * 4 * MIB / 1e9 * 1e3)
    small = mmap_prediction(b, h, COSTS, Memory(ram=5000 * MIB, dense=500 * MIB, runtime=500 * MIB,
                                                 readahead=128 * 1024))
    assert small.hit == pytest.approx(0.8) and small.flash_ms == pytest.approx(ALL_MISS_MS * 0.2)


def test_plain_mmap_has_no_cache_management_and_no_overlap():
    b, h = [1000.0, 2000.0, 4000.0], [0.5, 0.7, 0.8]
    mem = Memory(ram=5000 * MIB, dense=500 * MIB, runtime=500 * MIB, readahead=128 * 1024)
    p = mmap_prediction(b, h, COSTS, mem)
    # no expert cache to manage (the run's 5 ms mgmt and 2 ms stall are the streaming runtime's), and a
    # page fault stalls the token's thread: the overlap total is the serial one
    assert p.mgmt_ms == 0.0 and p.stall_ms == 0.0
    assert p.serial_ms == pytest.approx(50.0 + ALL_MISS_MS * 0.2)
    assert p.overlap_ms == p.serial_ms and p.tok_s(True) == p.tok_s(False)


def test_plain_mmap_from_the_page_cache_replay():
    b, h = [1000.0, 2000.0, 4000.0], [0.5, 0.7, 0.8]
    mem = Memory(ram=5000 * MIB, dense=500 * MIB, runtime=500 * MIB, readahead=8 * MIB)
    # the replay's bytes replace the readahead rule: 96 MiB a token of 384 MiB of experts is a 0.75 hit
    p = mmap_prediction(b, h, COSTS, mem, read_per_token=96 * MIB)
    assert p.hit == pytest.approx(0.75) and p.flash_ms == pytest.approx(96 * MIB / 1e9 * 1e3)
    assert p.compute_ms == COSTS.compute_ms and p.serial_ms == pytest.approx(50.0 + p.flash_ms)
    # windows that read more than every expert of the token: hit 0, the flash time is still the bytes'
    more = mmap_prediction(b, h, COSTS, mem, read_per_token=500 * MIB)
    assert more.hit == 0.0 and more.flash_ms == pytest.approx(500 * MIB / 1e9 * 1e3)
    none = mmap_prediction(b, h, COSTS, mem, read_per_token=0.0)
    assert none.hit == 1.0 and none.flash_ms == 0.0
    with pytest.raises(ValueError, match="read_per_token"):
        mmap_prediction(b, h, COSTS, mem, read_per_token=-1.0)


def test_the_report_names_the_best_the_knee_and_the_break_even():
    b = [1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
    h = [0.5, 0.8, 0.9, 0.92, 0.93]
    mem = Memory(ram=7000 * MIB, dense=500 * MIB, runtime=500 * MIB, readahead=8 * MIB)
    r = sizing_report(b, h, COSTS, memory=mem, overlap=True)
    # page cache 6000 - B MiB; together they reach max(B, 6000 - B): 5000, 4000, 3000, 4000, 5000
    assert [p.hit for p in r.points] == pytest.approx([0.93, 0.92, 0.9, 0.92, 0.93])
    assert r.best_mib == 1000.0 and not r.larger_is_slower  # 5000 ties 1000: the smaller is named
    # 8 MiB readahead: each 1 MiB miss reads 8 MiB, the 6000 MiB page cache holds 750 MiB of used
    # experts (hit 0.375): every budget beats it
    assert r.mmap is not None and r.mmap.hit == pytest.approx(0.375) and r.break_even_mib == 1000.0
    assert r.cache_to_demand[0] == pytest.approx(1000 / 384)
    # one level, serial: 3.90, 7.38, 10.50, 11.47, 12.02 tok/s; one more GiB past 4000 buys 0.57
    # tok/s, under 5 % of 11.47 (0.573); past 3000 it buys 0.99, under 10 % of 10.50
    one = sizing_report(b, h, COSTS)
    assert [p.serial_tok_s for p in one.points] == pytest.approx([3.901, 7.378, 10.497, 11.466, 12.021], abs=1e-3)
    assert one.knee_mib == 4000.0 and one.mmap is None and one.break_even_mib is None
    assert sizing_report(b, h, COSTS, knee_share=0.10).knee_mib == 3000.0
    assert not one.larger_is_slower and one.best_mib == 5000.0


def test_a_larger_expert_cache_that_starves_the_page_cache_is_slower():
    b = [1000.0, 2000.0, 3000.0, 4000.0]
    h = [0.6, 0.8, 0.9, 0.95]
    mem = Memory(ram=4500 * MIB, dense=250 * MIB, runtime=250 * MIB)
    r = sizing_report(b, h, COSTS, memory=mem)
    # B = 1000 leaves 3000 of page cache (0.9); B = 4000 leaves none (0.95 of its own): faster;
    # but B = 2000 leaves 2000 (0.8) and is slower than B = 1000
    assert r.points[1].serial_tok_s < r.points[0].serial_tok_s


costs_st = st.builds(TokenCosts, compute_ms=st.floats(0, 1e3), mgmt_ms=st.floats(0, 1e2), lookups=st.floats(1, 1e4),
                     miss_bytes=st.floats(1e3, 1e8), read_mb_s=st.floats(1, 1e5), stall_ms=st.floats(0, 1e2),
                     miss_ms=st.floats(0, 10), evict_ms=st.floats(0, 10))
hit_st = st.floats(0, 1)
evictions_st = st.floats(0, 1e4)


@given(costs_st, hit_st, st.floats(1.01, 100))
def test_faster_reads_are_never_slower(c, h, factor):
    faster = replace(c, read_mb_s=c.read_mb_s * factor)
    a, b = predict(1, h, c), predict(1, h, faster)
    assert b.serial_ms <= a.serial_ms * (1 + 1e-12) and b.overlap_ms <= a.overlap_ms * (1 + 1e-12)


@given(costs_st, hit_st, hit_st)
def test_more_hits_are_never_slower(c, h1, h2):
    lo, hi = sorted((h1, h2))
    assert predict(1, hi, c).serial_ms <= predict(1, lo, c).serial_ms * (1 + 1e-12)
    assert predict(1, hi, c).overlap_ms <= predict(1, lo, c).overlap_ms * (1 + 1e-12)


@given(costs_st, hit_st, evictions_st, evictions_st)
def test_more_evictions_are_never_faster(c, h, e1, e2):
    lo, hi = sorted((e1, e2))
    assert predict(1, h, c, evictions=hi).serial_ms >= predict(1, h, c, evictions=lo).serial_ms * (1 - 1e-12)
    assert predict(1, h, c, evictions=hi).overlap_ms >= predict(1, h, c, evictions=lo).overlap_ms * (1 - 1e-12)


@given(costs_st, hit_st)
def test_overlap_without_stall_is_never_slower_than_serial(c, h):
    c0 = replace(c, stall_ms=0.0)
    p = predict(1, h, c0)
    assert p.overlap_ms <= p.serial_ms * (1 + 1e-12)
    assert p.serial_ms >= max(p.compute_ms, p.flash_ms) and math.isclose(
        p.serial_ms, p.compute_ms + p.flash_ms + p.mgmt_ms, rel_tol=1e-12)


@given(costs_st, st.floats(1e3, 1e7), st.integers(1, 64))
def test_a_larger_readahead_never_makes_plain_mmap_faster(c, ram_mib, ra_factor):
    # a whole multiple of the smaller readahead: one that is not can round a miss up to fewer
    # bytes (a 73,662,465-byte miss reads 73,728,000 in 192 KiB pieces, 73,793,536 in 128 KiB)
    b, h = [100.0, 1000.0, 10000.0], [0.3, 0.7, 0.95]
    small = Memory(ram=ram_mib * MIB, dense=0, runtime=0, readahead=128 * 1024)
    big = Memory(ram=ram_mib * MIB, dense=0, runtime=0, readahead=128 * 1024 * ra_factor)
    assert mmap_prediction(b, h, c, big).serial_ms >= mmap_prediction(b, h, c, small).serial_ms * (1 - 1e-12)


def test_bad_costs_are_refused():
    with pytest.raises(ValueError, match="read_mb_s"):
        TokenCosts(1, 1, 1, 1, 0)
    with pytest.raises(ValueError, match="compute_ms"):
        TokenCosts(math.nan, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="hit"):
        predict(1, 1.5, COSTS)
