"""The compare core: noise-aware deltas, warm-up splits, exact deterministic metrics, the
different-workload banner, contamination hints; and two real CSVs from ../shared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.tui.analysis.compare import WITHIN_RUN_LABEL, ArmInput, RunInput, compare

MIB = 1024 * 1024


def _run(rng: np.random.Generator, name: str, mean: float, n: int = 120, hit: float = 70.0, routed=None,
         entry=None) -> RunInput:
    warm = np.linspace(3 * mean, mean, 15)
    noise = rng.normal(0, 0.03 * mean, n)
    wall = np.concatenate([warm, mean + noise])[:n]
    io = 0.4 * wall
    return RunInput(name, {"wall_ms": wall, "io_ms": io, "compute_ms": wall - io, "mgmt_ms": 0.05 * wall,
                           "read_mib": np.full(n, 150.0), "hit_pct": np.linspace(10, hit, n)},
                    {"prefill_s": 6.0 + rng.normal(0, 0.05), "load_s": 30.0}, entry or {}, routed)


def _row(c, metric):
    return next(m for m in c.metrics if m.metric == metric)


def test_several_runs_per_arm_detect_a_real_change() -> None:
    rng = np.random.default_rng(1)
    a = ArmInput("base", [_run(rng, f"a{i}", 200.0) for i in range(6)])
    b = ArmInput("fast", [_run(rng, f"b{i}", 180.0) for i in range(6)])
    c = compare([a, b])
    wall = _row(c, "wall_ms")
    d = wall.deltas[0]
    assert d.verdict == "better" and d.p < 0.05
    assert d.low < -20 * 0.5 and d.high < 0 and d.low <= d.change <= d.high
    assert d.change_pct == pytest.approx(-10, abs=2)
    assert "Mann-Whitney" in d.method and d.label == ""
    assert _row(c, "tok_s").deltas[0].verdict == "better"
    # deterministic metrics compared exactly
    assert _row(c, "hit_pct").deltas[0].verdict == "same"
    assert _row(c, "read_mib_per_token").deltas[0].verdict == "same"
    assert len(c.warmup) == 12 and all(5 <= w.split <= 30 for w in c.warmup)
    assert c.workload_same is None and c.banner == ""
    assert any("run is the unit" in s for s in c.advice)


def test_same_distribution_is_noise() -> None:
    rng = np.random.default_rng(2)
    a = ArmInput("a", [_run(rng, f"a{i}", 200.0) for i in range(5)])
    b = ArmInput("b", [_run(rng, f"b{i}", 201.0) for i in range(5)])
    d = _row(compare([a, b]), "wall_ms").deltas[0]
    assert d.verdict == "~"  # 0.5% is under the 2% floor whatever p says


def test_too_few_runs_say_so() -> None:
    rng = np.random.default_rng(3)
    a = ArmInput("a", [_run(rng, f"a{i}", 200.0) for i in range(3)])
    b = ArmInput("b", [_run(rng, f"b{i}", 100.0) for i in range(3)])
    c = compare([a, b])
    d = _row(c, "wall_ms").deltas[0]
    assert d.verdict == "~" and d.p == pytest.approx(0.1)  # 3 vs 3 cannot reach 0.05
    assert any("cannot reach p < 0.05 below 4 runs" in s for s in c.advice)


def test_one_run_per_arm_is_within_run_only() -> None:
    rng = np.random.default_rng(4)
    c = compare([ArmInput("a", [_run(rng, "a", 200.0)]), ArmInput("b", [_run(rng, "b", 150.0, hit=72.0)])])
    d = _row(c, "wall_ms").deltas[0]
    assert d.label == WITHIN_RUN_LABEL and "bootstrap" in d.method
    assert d.verdict == "better" and d.low < d.change < d.high < 0
    v = _row(c, "wall_ms").values[0]
    assert v.low < v.center < v.high
    assert _row(c, "hit_pct").deltas[0].verdict == "differs"
    assert _row(c, "prefill_s").deltas[0].verdict == "?"
    assert any(WITHIN_RUN_LABEL in s for s in c.advice)


def test_routed_experts_and_entry_state() -> None:
    rng = np.random.default_rng(5)
    r1 = np.arange(100) % 7
    r2 = r1.copy()
    r2[40] = 6 - r2[40]
    a = ArmInput("a", [_run(rng, "a", 200.0, routed=r1, entry={"temperature_c": 31.0, "mem_available_mib": 1500})])
    b = ArmInput("b", [_run(rng, "b", 200.0, routed=r2, entry={"temperature_c": 38.5, "mem_available_mib": 1510})])
    c = compare([a, b])
    assert c.workload_same is False and c.banner.startswith("different workload") and "lookup 40" in c.banner
    rows = {r.key: r for r in c.contamination.rows}
    assert rows["temperature_c"].diff == [pytest.approx(7.5)]
    assert any("temperature" in h and "reverse order" in h for h in c.contamination.hints)
    assert not any("MemAvailable" in h for h in c.contamination.hints)
    same = compare([ArmInput("a", [_run(rng, "a", 200.0, routed=r1)]), ArmInput("b", [_run(rng, "b", 200.0,
                                                                                            routed=r1)])])
    assert same.workload_same is True and same.banner == ""
    d = orjson.loads(orjson.dumps(c))
    assert d["banner"] == c.banner and d["metrics"][0]["metric"] == "wall_ms"
    with pytest.raises(ValueError):
        compare([a])


def _real_run(path: Path) -> RunInput:
    from bmoe_top.tui.analysis.compare import run_from_token_table

    return run_from_token_table(load_token_csv(path.read_bytes()), path.stem)


def test_two_real_csvs(real_runs: Path) -> None:
    a = _real_run(real_runs / "bigmoeonedge-2026-07-21" / "bmoe-20260721-090406.csv")
    b = _real_run(real_runs / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv")
    c = compare([ArmInput("07-21", [a]), ArmInput("07-22", [b])])
    wall = _row(c, "wall_ms")
    assert wall.deltas[0].label == WITHIN_RUN_LABEL
    assert wall.deltas[0].verdict in ("better", "worse", "~")
    assert np.isfinite(wall.deltas[0].low) and np.isfinite(wall.deltas[0].high)
    assert {w.run for w in c.warmup} == {a.name, b.name}
    assert all(0 <= w.split < w.tokens for w in c.warmup)
    assert _row(c, "hit_pct").values[0].center == pytest.approx(66.6)
    assert "flash_ms" in {m.metric for m in c.metrics}
    assert [r.key for r in c.contamination.rows] == ["mem_available_mib"]
    orjson.dumps(c)


def test_run_from_a_csv_and_its_sidecar(real_runs: Path) -> None:
    from bmoe_top.parsers.summary_lines import parse_summary_line
    from bmoe_top.tui.analysis.compare import run_from_token_table

    d = real_runs / "bigmoeonedge-2026-07-12"
    table = load_token_csv((d / "qwen_c4000_l4_ov.csv").read_bytes())
    side: dict[str, float | str] = {}
    for line in (d / "qwen_c4000_l4_ov.metrics").read_text().splitlines():
        sl = parse_summary_line(line)
        if sl is not None and sl.kind == "sidecar":
            side.update(sl.values)
    run = run_from_token_table(table, "qwen", side)
    assert run.entry["temperature_c"] == pytest.approx(46.7)
    assert run.entry["mem_available_mib"] == pytest.approx(5944328 / 1024)
    assert np.allclose(run.tokens["read_mib"], table.columns["read_bytes"] / MIB)
    assert run.summary["hit_pct"] == table.summary["cache_hit_pct"]
    c = compare([ArmInput("a", [run]), ArmInput("b", [_real_run(real_runs / "bigmoeonedge-2026-07-21" /
                                                                 "bmoe-20260721-090406.csv")])])
    assert {r.key for r in c.contamination.rows} >= {"temperature_c", "mem_available_mib"}


def test_one_run_rates_and_percentiles_get_within_run_intervals() -> None:
    rng = np.random.default_rng(8)
    c = compare([ArmInput("a", [_run(rng, "a", 200.0)]), ArmInput("b", [_run(rng, "b", 160.0)])])
    for metric in ("tok_s", "p50", "p95"):
        row = _row(c, metric)
        d = row.deltas[0]
        assert d.label == WITHIN_RUN_LABEL and "bootstrap" in d.method
        assert d.low <= d.change <= d.high
        assert all(v.low <= v.center <= v.high for v in row.values)
    tok = _row(c, "tok_s")
    assert tok.deltas[0].verdict == "better" and tok.deltas[0].low > 0  # faster = more tok/s
    assert tok.values[0].center == pytest.approx(1000.0 / _row(c, "wall_ms").values[0].center)


def test_memory_and_temperature_rows() -> None:
    from bmoe_top.tui.analysis.compare import entry_from_sidecar, resources_from

    side = {"peak_rss_kb": "6086860", "mem_avail_floor_kb": 2073736, "cpu_temp_max_mC": "70200",
            "batt_temp_max_dC": "394", "cpu_temp_before_mC": "46700", "mem_avail_before_kb": "bad"}
    res = resources_from({"rss_mib": np.array([10.0, 30.0, np.nan]), "swap_mib": np.array([1.0, 5.0])}, side)
    assert res["peak_rss_mib"] == pytest.approx(6086860 / 1024)  # the sidecar's peak wins over the column
    assert res["cpu_temp_max_c"] == pytest.approx(70.2) and res["batt_temp_max_c"] == pytest.approx(39.4)
    assert res["swap_max_mib"] == 5.0
    assert entry_from_sidecar(side) == {"temperature_c": pytest.approx(46.7)}
    rng = np.random.default_rng(9)
    runs_a = [RunInput(f"a{i}", _run(rng, "x", 200.0).tokens, resources={"peak_rss_mib": 3000.0 + i})
              for i in range(4)]
    runs_b = [RunInput(f"b{i}", _run(rng, "x", 200.0).tokens, resources={"peak_rss_mib": 3500.0 + i})
              for i in range(4)]
    row = _row(compare([ArmInput("a", runs_a), ArmInput("b", runs_b)]), "peak_rss_mib")
    assert row.kind == "resource" and row.unit == "MiB"
    assert row.deltas[0].verdict == "worse" and row.deltas[0].change == pytest.approx(500.0)
    one = _row(compare([ArmInput("a", runs_a[:1]), ArmInput("b", runs_b[:1])]), "peak_rss_mib")
    assert one.deltas[0].verdict == "?"


def _with_flash(run: RunInput, flash: float, rng: np.random.Generator) -> RunInput:
    n = len(run.tokens["wall_ms"])
    col = np.zeros(n) if flash == 0 else flash + rng.normal(0, 0.05 * flash, n)
    return RunInput(run.name, {**run.tokens, "flash_ms": col}, run.summary, run.entry, run.routed)


@pytest.mark.parametrize("runs", [1, 6])
def test_a_change_from_zero_is_not_noise(runs) -> None:
    # one run waits 0 ms a token for flash (every expert resident), the other 132.6: no percentage
    # of 0 bounds that
    rng = np.random.default_rng(11)
    a = ArmInput("resident", [_with_flash(_run(rng, f"a{i}", 200.0), 0.0, rng) for i in range(runs)])
    b = ArmInput("streamed", [_with_flash(_run(rng, f"b{i}", 200.0), 132.6, rng) for i in range(runs)])
    d = _row(compare([a, b]), "flash_ms").deltas[0]
    assert d.verdict == "worse", d
    assert d.change == pytest.approx(132.6, rel=0.05) and d.change_pct != d.change_pct  # no percentage of 0
    from bmoe_top.tui.present.compare import delta_text

    assert delta_text(d).endswith("(from 0)") and delta_text(d).startswith("+13")
    back = _row(compare([b, a]), "flash_ms").deltas[0]  # and to 0 from 132.6: -100 %, better
    assert back.verdict == "better" and back.change_pct == pytest.approx(-100, abs=1)


def test_the_flash_wait_of_a_serial_run_is_its_io(real_runs: Path, capsys) -> None:
    # gemma_stream is serial: its flash wait is its io_ms (449 ms/token), not its stall (0);
    # gemma_base overlaps: its flash wait is its stall_ms (133 ms/token)
    from bmoe_top.tui.cli import main

    serial = real_runs / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    overlap = real_runs / "bigmoeonedge-2026-07-12-pr23" / "gemma_base.csv"
    assert main(["compare", "--json", str(serial), str(overlap)]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    row = next(m for m in doc["metrics"] if m["metric"] == "flash_ms")
    assert row["label"] == "flash wait"
    assert [v["center"] for v in row["values"]] == [pytest.approx(448.7, abs=0.1), pytest.approx(132.6, abs=0.1)]
    d = row["deltas"][0]
    assert d["verdict"] == "better" and d["change"] == pytest.approx(132.6 - 448.7, abs=0.2)
    assert "stall_ms" not in {m["metric"] for m in doc["metrics"]}


def test_a_time_that_falls_to_nothing_has_no_interval_below_minus_100_percent() -> None:
    # compare of a run with flash waits against one without: [-148.1%, -31.7%] for a time that
    # cannot fall by more than all of it (a resampled baseline above the one measured put it there)
    rng = np.random.default_rng(7)
    spiky = _run(rng, "a", 200.0)
    io = np.where(rng.random(spiky.tokens["wall_ms"].size) < 0.08, 400.0, 0.5)  # rare, long waits
    spiky = RunInput("a", {**spiky.tokens, "io_ms": io}, spiky.summary, spiky.entry, spiky.routed)
    calm = _run(rng, "b", 200.0)
    calm = RunInput("b", {**calm.tokens, "io_ms": np.zeros(calm.tokens["wall_ms"].size)}, calm.summary,
                    calm.entry, calm.routed)
    c = compare([ArmInput("base", [spiky]), ArmInput("new", [calm])])
    row = _row(c, "io_ms")
    base, d = row.values[0].center, row.deltas[0]
    assert d.change == pytest.approx(-base) and d.change_pct == pytest.approx(-100.0)
    assert d.low >= -base and d.low <= d.change <= d.high < 0, (d.low, d.change, d.high, base)
