"""The three tiers on bmoe-top's side (docs/memory.md "The three tiers in bmoe-run"): the parser
reads ``pagecache_mb``, the feed turns a token's tiers into columns, and the run panel's "memory
tiers" section splits the routed experts and the MiB read by tier, with the live child's RSS
split and MemAvailable; against a real ``bmoe-run --session --no-odirect`` child too."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from helpers.waits import until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.quantities import TIERS
from bmoe_top.tui.present.summary import run_panel_rows, tier_rows
from bmoe_top.tui.sources.child_session import ChildSession

BMOE_RUN = Path(sys.executable).with_name("bmoe-run")


def _progress(step: int, read: float, pc: float | None, hits: int, misses: int, misses_pc: int) -> str:
    d: dict[str, object] = {"step": step, "steps": 3, "wall_ms": 10.0, "io_ms": 1.0, "compute_ms": 9.0,
                            "mgmt_ms": 0.0, "stall_ms": 0.0, "read_mb": read, "cache_hit_pct": 50.0, "text": "x"}
    if pc is not None:
        d.update(pagecache_mb=pc, hits=hits, misses=misses, misses_pagecache=misses_pc)
    return "BMOE_PROGRESS " + orjson.dumps(d).decode()


def test_the_parser_reads_pagecache_mb_and_old_lines_lack_it():
    new = bl.parse_line(_progress(1, 2.5, 1.5, 6, 2, 1))
    old = bl.parse_line(_progress(1, 2.5, None, 0, 0, 0))
    slow = bl.parse_line(_progress(1, 2.5, None, 0, 0, 0)[:-1] + ',"pagecache_mb":0}')  # an int: converted
    assert isinstance(new, bl.Progress) and new.pagecache_mb == 1.5 and new.read_mb == 2.5
    assert isinstance(old, bl.Progress) and old.pagecache_mb is None
    assert isinstance(slow, bl.Progress) and slow.pagecache_mb == 0.0
    bad = bl.parse_line(_progress(1, 2.5, None, 0, 0, 0)[:-1] + ',"pagecache_mb":"lots"}')
    assert isinstance(bad, bl.BadLine) and "pagecache_mb" in bad.reason


def test_the_run_panel_splits_routed_experts_and_mib_by_tier():
    run = RunModel()
    feed = RecordFeed(run)
    for i, (read, pc, h, m, mpc) in enumerate([(4.0, 1.0, 4, 4, 1), (2.0, 2.0, 6, 2, 2), (0.0, 0.0, 8, 0, 0)]):
        feed.apply(bl.parse_line(_progress(i + 1, read, pc, h, m, mpc)), None)
    rows = {label: (value, kind) for label, value, kind in tier_rows(run)}
    # 24 routed: 18 hits, 3 from the page cache, 3 from disk
    assert rows[TIERS[0]] == ("75.0 %", "derived")
    assert rows[TIERS[1]] == ("12.5 %", "derived")
    assert rows[TIERS[2]] == ("12.5 %", "derived")
    assert rows["read from page cache"][0] == "3.00 MiB" and rows["read from disk"][0] == "3.00 MiB"
    assert ("memory tiers", "", "section") in run_panel_rows(run, run.tokens.n)
    # rows before the viewed one: the first row alone
    first = {label: value for label, value, _k in tier_rows(run, 1)}
    assert first[TIERS[0]] == "50.0 %" and first["read from disk"] == "3.00 MiB"


def test_a_source_without_tiers_has_no_section():
    run = RunModel()
    RecordFeed(run).apply(bl.parse_line(_progress(1, 2.0, None, 0, 0, 0)), None)
    assert tier_rows(run) == []
    assert all(label != "memory tiers" for label, _v, _k in run_panel_rows(run, 1))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "tiny.gguf", preset="tiny"))


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
def test_a_live_bmoe_run_child_fills_the_memory_tiers(tiny):
    """A real ``bmoe-run --session --no-odirect`` child bound to a run model: its tokens carry
    the tiers (the model was just loaded through the page cache: every miss came from there),
    and the panel shows the child's RSS split and MemAvailable read from /proc."""
    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "--session", "--progress", "--quiet", "-c", "256",
                      "--cache-mb", "0.2", "--force-cache", "--no-odirect"], ready_timeout_s=120)
    feed = bind(s)
    run = feed.run
    s.start()
    try:
        assert s.wait_state("ready", 120), s.status()
        s.generate("The experts of every layer", 6)
        assert until(lambda: run.tokens.n >= 6 and s.status().state == "ready", limit=120)
        assert until(lambda: run.process_memory is not None, limit=30)
        rows = {label: value for label, value, _k in tier_rows(run)}
    finally:
        assert s.close(timeout=10) == 0
    assert rows[TIERS[2]] == "0.0 %"  # nothing from disk: the load read the file into the page cache
    assert float(rows[TIERS[1]].split()[0]) > 0
    assert rows["read from disk"] == "0 MiB"
    pm = run.process_memory
    assert pm is not None and pm.rss_anon and pm.rss_anon > 0 and pm.mem_available and pm.mem_available > 0
    assert rows["RSS anon"] != "missing" and rows["MemAvailable"] != "missing"


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
def test_an_idle_child_s_memory_is_read_on_a_timer(tiny):
    """A loaded ``bmoe-run`` child waiting for a prompt sends no record; its RSS split and
    MemAvailable are read again all the same (a timer, every MEMORY_EVERY_S), and the timer
    ends with the child."""
    s = ChildSession([str(BMOE_RUN), "-m", str(tiny), "--session", "--progress", "--quiet", "-c", "256",
                      "--no-odirect"], ready_timeout_s=120)
    feed = bind(s)
    run = feed.run
    s.start()
    try:
        assert s.wait_state("ready", 120), s.status()
        n0, last = feed.memory_readings, run.last_line_t
        assert until(lambda: feed.memory_readings >= n0 + 2, limit=30)
        assert run.last_line_t == last and run.tokens.n == 0  # no record came meanwhile
        pm = run.process_memory
        assert pm is not None and pm.rss_anon and pm.rss_anon > 0
    finally:
        assert s.close(timeout=10) == 0
    timer = feed.memory_timer
    assert timer is not None
    assert until(lambda: not timer.is_alive(), limit=10)
