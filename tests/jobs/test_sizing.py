"""The what-if's predicted tok/s (tui/jobs/sizing.py) on a synthetic run whose every input is
known: 8 MoE layers x top-2 of 1 MiB experts (16 lookups, 16 MiB a token that misses everything),
the run's 25 ms compute and 2 ms mgmt a token (serial); each case computed by hand. Where each
input came from is said, an absent one is named with its flag and nothing is predicted from a 0;
the RAM a process may use is the smaller of MemTotal and its memory cgroup's limit (v1 and v2)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import synth

from bmoe_top.tui.analysis.cachesim import decode_evictions
from bmoe_top.tui.analysis.pagecache import expert_pieces, replay_mmap
from bmoe_top.tui.analysis.speed import MIB
from bmoe_top.tui.jobs.sizing import policy_hits, probe_bandwidth, speed_view
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.settings import ProbeSettings
from bmoe_top.tui.sources.procfs import ram_limit


@pytest.fixture
def synthetic(tmp_path: Path):
    route, csv = tmp_path / "run.route.csv", tmp_path / "run.csv"
    route.write_bytes(synth.route_trace(48, seed=5))
    csv.write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(route), str(csv)])
    report, _ = analyse_input(inp, [16.0, 32.0, 64.0, 128.0, 256.0])
    return inp, report


def lru_read(report, budget: float) -> float:
    lru = next(c for c in report.curves if c.policy == "lru")
    return float(lru.read_mib_per_token[list(lru.budgets_mib).index(budget)])


def test_one_level_by_hand(synthetic):
    inp, report = synthetic
    v = speed_view(inp, report, bandwidth_mb_s=1000.0, machine_ram=(None, ""))
    assert v.levels == 1 and not v.overlap
    assert (v.inputs.lookups, v.inputs.miss_bytes) == (16.0, MIB)
    assert v.inputs.read_mb_s_from == "--bandwidth"
    assert v.inputs.costs is not None and (v.inputs.costs.compute_ms, v.inputs.costs.mgmt_ms) == (25.0, 2.0)
    lru = v.reports["lru"]
    for p in lru.points:
        read = lru_read(report, p.budget_mib)  # MiB a token reads at this budget
        flash = read * MIB / 1e9 * 1e3  # ms at 10^9 bytes/s
        assert p.flash_ms == pytest.approx(flash)
        assert p.serial_tok_s == pytest.approx(1000 / (25 + flash + 2))
        assert p.hit == pytest.approx(1 - read / 16)
    # the whole bank reads only first lookups: the fastest budget is the largest, no larger is slower
    assert lru.best_mib == 256.0 and not lru.larger_is_slower
    assert lru.cache_to_demand == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])
    # the run's own budget (64 MiB) is predicted one level, beside the tok/s the run measured
    assert v.at_run is not None and v.at_run.budget_mib == 64.0
    c = v.inputs.costs
    assert c.measured_tok_s is not None
    assert v.run_error() == pytest.approx((v.at_run.serial_tok_s - c.measured_tok_s) / c.measured_tok_s)


def test_a_sweep_s_mgmt_an_eviction_follows_each_budget_s_evictions(synthetic):
    """One run's mgmt is its own at every budget (above: 2 ms); costs with the mgmt an eviction
    adds (a sweep's) pay it per evicting miss of each budget, the replay's count."""
    inp, report = synthetic
    assert inp.run_costs is not None
    swept = replace(inp, run_costs=replace(inp.run_costs, mgmt_ms=0.1, evict_ms=0.05))
    v = speed_view(swept, report, bandwidth_mb_s=1000.0, machine_ram=(None, ""))
    lru = next(c for c in report.curves if c.policy == "lru")
    ev = decode_evictions(inp.lookups, lru.budgets_mib, lru.decode_hit_pct)
    assert ev[0] > 0 and ev[-1] == 0  # 16 MiB evicts, the whole bank does not
    for p, e in zip(v.reports["lru"].points, ev):
        flash = lru_read(report, p.budget_mib) * MIB / 1e9 * 1e3
        assert p.mgmt_ms == pytest.approx(0.1 + 0.05 * e)
        assert p.serial_tok_s == pytest.approx(1000 / (25 + flash + 0.1 + 0.05 * e))
    assert v.at_run is not None and v.at_run.mgmt_ms == pytest.approx(0.1 + 0.05 * ev[2])  # the run's 64 MiB


def test_two_levels_and_plain_mmap_by_hand(synthetic):
    inp, report = synthetic
    # 100 MiB of RAM, 20 MiB dense, 8 MiB runtime: the page cache holds 72 - B MiB
    v = speed_view(inp, report, ram=100 * MIB, bandwidth_mb_s=1000.0, dense=20 * MIB, runtime=8 * MIB,
                   readahead=4 * MIB)
    assert v.levels == 2 and v.inputs.ram_from == "--ram" and v.inputs.dense_from == "--dense-mib"
    lru = v.reports["lru"]
    hits = policy_hits(next(c for c in report.curves if c.policy == "lru"), 16.0, MIB)
    by = {p.budget_mib: p for p in lru.points}
    # at 16 MiB the page cache (56 MiB) is the larger level: hit = h(56), read off 32..64 by a line
    h56 = hits[1] + (hits[2] - hits[1]) * (56 - 32) / (64 - 32)
    assert by[16.0].hit == pytest.approx(h56)
    assert by[16.0].flash_ms == pytest.approx(16 * (1 - h56) * MIB / 1e6)
    # at 64 MiB the expert cache is larger (page cache 8 MiB): h(64)
    assert by[64.0].hit == pytest.approx(hits[2])
    # 128 and 256 MiB do not fit in 100 MiB
    assert not by[128.0].fits and not by[256.0].fits
    # plain mmap: 4 MiB reads a miss, a quarter of the 72 MiB page cache is experts in use: h(18)
    h18 = hits[0] + (hits[1] - hits[0]) * (18 - 16) / (32 - 16)
    assert lru.mmap is not None
    assert lru.mmap.hit == pytest.approx(h18)
    assert lru.mmap.flash_ms == pytest.approx(16 * (1 - h18) * 4 * MIB / 1e6)
    assert lru.break_even_mib == 16.0  # streaming at the smallest budget already beats 4 MiB reads


def test_plain_mmap_from_the_page_cache_replay(synthetic):
    inp, report = synthetic
    lk = inp.lookups
    # each layer one tensor of its experts' 1 MiB slices, one after another
    pieces = expert_pieces([[(il * lk.n_expert * MIB, MIB, lk.n_expert)] for il in range(lk.n_layer)], lk.n_expert)
    kw = dict(ram=100 * MIB, bandwidth_mb_s=1000.0, dense=20 * MIB, runtime=8 * MIB, readahead=4 * MIB)
    v = speed_view(inp, report, mmap_pieces=pieces, **kw)
    # llama.cpp advises the file sequential: windows of twice the readahead
    want = replay_mmap(lk, pieces, 72 * MIB, 4 * MIB, sequential=True).read_per_token
    assert v.inputs.mmap_read_per_token == want and want > 0
    assert v.inputs.mmap_from.startswith("the page cache replayed")
    mmap = v.reports["lru"].mmap
    assert mmap is not None
    # the replay's bytes at 1,000 MB/s: flash ms = bytes / 10^6
    assert mmap.flash_ms == pytest.approx(want / 1e6)
    assert mmap.serial_ms == pytest.approx(mmap.compute_ms + mmap.flash_ms + mmap.mgmt_ms)
    # without the layout, or with one that does not fit the trace, the readahead rule, and it says why
    rule = speed_view(inp, report, **kw)
    assert rule.inputs.mmap_read_per_token is None and "--model GGUF" in rule.inputs.mmap_from
    short = speed_view(inp, report, mmap_pieces=pieces[:3], **kw)
    assert short.inputs.mmap_read_per_token is None and "does not fit the trace" in short.inputs.mmap_from
    assert short.reports["lru"].mmap == rule.reports["lru"].mmap


def test_plain_mmap_reads_at_the_faults_rate_where_it_is_known(synthetic):
    inp, report = synthetic
    kw = dict(ram=100 * MIB, bandwidth_mb_s=1000.0, dense=20 * MIB, runtime=8 * MIB, readahead=4 * MIB)
    base = speed_view(inp, report, **kw)
    # no faults' rate: the read bandwidth, and the input says why
    assert base.inputs.mmap_read_mb_s == 1000.0 and "no faults' rate" in base.inputs.mmap_read_mb_s_from
    # the remembered probe's faults' rate at the same readahead
    probe = ProbeSettings(file="/m/model.gguf", mmap_mb_s=250.0, mmap_readahead_kb=4096.0)
    v = speed_view(inp, report, probe=probe, **kw)
    assert v.inputs.mmap_read_mb_s == 250.0 and "settings [probe] mmap faults" in v.inputs.mmap_read_mb_s_from
    slow, fast = v.reports["lru"].mmap, base.reports["lru"].mmap
    assert slow is not None and fast is not None
    assert slow.flash_ms == pytest.approx(4 * fast.flash_ms)  # the same bytes at a quarter of the rate
    # the policies still read at the read bandwidth
    assert v.reports["lru"].points == base.reports["lru"].points
    # a rate measured at another readahead is not used, and the input says so
    other = speed_view(inp, report, probe=replace(probe, mmap_readahead_kb=128.0), **kw)
    assert other.inputs.mmap_read_mb_s == 1000.0 and "128 KiB readahead, not 4096" in other.inputs.mmap_read_mb_s_from
    # the flag wins
    flag = speed_view(inp, report, probe=probe, mmap_bandwidth_mb_s=500.0, **kw)
    assert (flag.inputs.mmap_read_mb_s, flag.inputs.mmap_read_mb_s_from) == (500.0, "--mmap-bandwidth")


def test_absent_inputs_are_named_with_their_flags_never_zero(synthetic, tmp_path):
    inp, report = synthetic
    bare = load_whatif([inp.trace])  # the trace alone: no costs, no bandwidth
    r2, _ = analyse_input(bare, [16.0, 64.0])
    v = speed_view(bare, r2, machine_ram=(None, ""))
    assert v.reports == {} and v.at_run is None
    assert any("--bandwidth" in m for m in v.inputs.missing)
    assert any("compute and mgmt" in m for m in v.inputs.missing)
    assert any("--ram" in m for m in v.inputs.missing) and any("--dense-mib" in m for m in v.inputs.missing)
    assert v.inputs.read_mb_s is None and v.inputs.ram is None


def test_the_remembered_probe_gives_the_bandwidth_at_the_run_s_lanes(synthetic):
    inp, report = synthetic
    probe = ProbeSettings(file="/m.gguf", slice_bytes=1e6, direct_mb_s=(400.0, 700.0, 900.0), buffered_mb_s=(300.0,))
    assert probe_bandwidth(probe, 2) == (700.0, "settings [probe] O_DIRECT at queue depth 2 (/m.gguf)")
    assert probe_bandwidth(probe, 16)[0] == 900.0  # deeper than measured: the deepest
    assert probe_bandwidth(ProbeSettings(buffered_mb_s=(300.0,)), 2)[1].startswith("settings [probe] buffered")
    assert probe_bandwidth(ProbeSettings(), 2) == (None, "")
    bare = load_whatif([inp.trace, str(Path(inp.trace).with_name("run.csv"))], read_mib_s=None)
    # the run recorded a bandwidth: it wins over the probe
    v = speed_view(bare, report, probe=probe, machine_ram=(None, ""))
    assert v.inputs.read_mb_s_from.startswith("the run: run summary read_mib_s x 2 lane(s)")


def _proc(root: Path, cgroup: str, mountinfo: str) -> Path:
    (root / "self").mkdir(parents=True)
    (root / "meminfo").write_text("MemTotal:       16384000 kB\nMemAvailable:   8000000 kB\n")
    (root / "self" / "cgroup").write_text(cgroup)
    (root / "self" / "mountinfo").write_text(mountinfo)
    return root


def test_the_ram_is_the_memory_cgroup_limit_v2(tmp_path):
    cg = tmp_path / "cg"
    (cg / "bench").mkdir(parents=True)
    (cg / "bench" / "memory.max").write_text("1073741824\n")
    (cg / "bench" / "memory.current").write_text("4096\n")
    (cg / "memory.max").write_text("max\n")
    proc = _proc(tmp_path / "proc", "0::/bench\n", f"30 25 0:26 / {cg} rw,nosuid - cgroup2 cgroup2 rw\n")
    assert ram_limit(root=str(proc)) == (1 << 30, "the memory cgroup limit (v2, /bench)")


def test_the_ram_is_the_memory_cgroup_limit_v1(tmp_path):
    mem = tmp_path / "memory"
    (mem / "job").mkdir(parents=True)
    (mem / "job" / "memory.limit_in_bytes").write_text("536870912\n")
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    proc = _proc(tmp_path / "proc", "5:memory:/job\n0::/\n", f"35 25 0:30 / {mem} rw - cgroup cgroup rw,memory\n")
    assert ram_limit(root=str(proc)) == (512 << 20, "the memory cgroup limit (v1, /job)")


def test_without_a_limit_below_it_the_ram_is_memtotal(tmp_path):
    cg = tmp_path / "cg"
    (cg / "bench").mkdir(parents=True)
    (cg / "bench" / "memory.max").write_text("max\n")
    (cg / "bench" / "memory.current").write_text("4096\n")
    proc = _proc(tmp_path / "proc", "0::/bench\n", f"30 25 0:26 / {cg} rw - cgroup2 cgroup2 rw\n")
    ram, where = ram_limit(root=str(proc))
    assert ram == 16384000 * 1024 and where.startswith("this machine's MemTotal")
    # a limit above MemTotal is no limit on the RAM
    (cg / "bench" / "memory.max").write_text(str(1 << 45))
    assert ram_limit(root=str(proc))[0] == 16384000 * 1024
