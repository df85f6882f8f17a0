"""compare's views: a percentage's change is in points, a change within the noise still shows
its size, arms are named by what differs between them, and a metric keeps its unit however
narrow the table gets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import synth

from bmoe_top.tui.analysis.compare import ArmInput, RunInput, compare
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.present import compare as P


def _runs(rng: np.random.Generator, name: str, mean: float, n: int, hit: float) -> list[RunInput]:
    return [RunInput(f"{name}{i}", {"wall_ms": mean + rng.normal(0, 0.02 * mean, 80)}, {"hit_pct": hit})
            for i in range(n)]


def _row(c, metric: str):
    return next(r for r in P.summary_table(c).rows if r.keys[0] == P.metric_label(next(
        m for m in c.metrics if m.metric == metric)))


def test_a_hit_rate_change_is_in_points() -> None:
    """59.7 -> 95.2 % is +35.5 points, not +59.5 % (a relative change of a percentage)."""
    rng = np.random.default_rng(1)
    c = compare([ArmInput("a", _runs(rng, "a", 100.0, 1, 59.7)), ArmInput("b", _runs(rng, "b", 100.0, 1, 95.2))])
    hit = next(m for m in c.metrics if m.metric == "hit_pct")
    assert P.delta_text(hit.deltas[0], hit.unit) == "+35.5 pt"
    assert "+35.5 pt" in _row(c, "hit_pct").cells and "+59.5%" not in _row(c, "hit_pct").cells


def test_a_change_within_the_noise_still_shows_its_size() -> None:
    """Three runs per arm cannot reach p < 0.05: tok/s 2.21 -> 7.13 is still '~', but its
    Hodges-Lehmann shift is shown beside the verdict (it was a bare '~')."""
    rng = np.random.default_rng(2)
    a = ArmInput("a", _runs(rng, "a", 1000 / 2.21, 3, 50.0))
    b = ArmInput("b", _runs(rng, "b", 1000 / 7.13, 3, 50.0))
    c = compare([a, b])
    tok = next(m for m in c.metrics if m.metric == "tok_s")
    d = tok.deltas[0]
    assert d.verdict == "~"
    row = _row(c, "tok_s")
    assert row.cells[1] == P.delta_text(d, tok.unit) and row.cells[1].startswith("+2") and row.cells[2] == "~"
    # and its interval: three runs an arm cannot give 95%, the widest one is 90% and says so
    ci = row.cells[[col.key for col in P.summary_table(c).columns].index("ci:b")]
    assert ci.startswith("[+") and ci.endswith("(90%)"), ci
    assert d.confidence == pytest.approx(0.9) and d.low > 0 and "90% interval: 3 and 3 runs" in d.label
    wall = _row(c, "wall_ms")
    assert wall.cells[1].startswith("-") and wall.cells[1].endswith("%")


def _csv(path: Path, cache_mb: int, seed: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(synth.token_csv(40, seed=seed).replace(b"cache_mb=64", f"cache_mb={cache_mb}".encode()))
    return str(path)


def test_arms_are_named_by_what_differs_between_them(tmp_path: Path) -> None:
    """Three runs an arm, files c3_1.. and c10_1..: the arms are '--cache-mb 3' and '--cache-mb
    10' (the run headers' difference), not 'c3_1 (3 runs)'; with the same headers, the folders."""
    a = ",".join(_csv(tmp_path / f"c3_{i}.csv", 3, i) for i in range(1, 4))
    b = ",".join(_csv(tmp_path / f"c10_{i}.csv", 10, 10 + i) for i in range(1, 4))
    arms = J.load_arms(J.parse_arms([a, b]))
    assert [x.name for x in arms] == ["--cache-mb 3 (3 runs)", "--cache-mb 10 (3 runs)"]
    a = _csv(tmp_path / "before" / "run.csv", 64, 1)
    b = _csv(tmp_path / "after" / "run.csv", 64, 2)
    assert [x.name for x in J.load_arms(J.parse_arms([a, b]))] == ["before", "after"]
    named = J.load_arms(J.parse_arms([], [f"base={a}", f"new={b}"]))
    assert [x.name for x in named] == ["base", "new"]


def test_every_metric_carries_its_unit() -> None:
    """At 80 columns the unit column was the first left out, so '47.9' stood without 'ms/token':
    the unit is in the metric's name, which is never left out."""
    rng = np.random.default_rng(3)
    c = compare([ArmInput("a", _runs(rng, "a", 100.0, 1, 50.0)), ArmInput("b", _runs(rng, "b", 90.0, 1, 60.0))])
    t = P.summary_table(c)
    assert "unit" not in [col.key for col in t.columns]
    names = [r.cells[0] for r in t.rows]
    assert "wall per token [ms/tok]" in names and "wall p50 (steady) [ms]" in names
    assert "tok/s (steady)" in names and "decode hit %" in names  # the unit is already in the name


def test_each_run_draws_its_own_flash_wait(real_runs: Path) -> None:
    # the per-token view of a serial run (gemma_stream) against an overlapped one (gemma_base):
    # each draws its own flash wait, io_ms serial and stall_ms overlap, never the other's column
    serial = real_runs / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    overlap = real_runs / "bigmoeonedge-2026-07-12-pr23" / "gemma_base.csv"
    arms = J.load_arms(J.parse_arms([str(serial), str(overlap)]))
    _, flash, _ = P.token_series(arms, P.FLASH)
    _, io, _ = P.token_series(arms, "io_ms")
    _, stall, _ = P.token_series(arms, "stall_ms")
    assert np.nanmean(flash[0]) == pytest.approx(np.nanmean(io[0])) and np.nanmean(flash[0]) > 400
    assert np.nanmean(flash[1]) == pytest.approx(np.nanmean(stall[1])) and np.nanmean(flash[1]) < np.nanmean(io[1])
    c = compare([ArmInput(a.name, [r.input for r in a.runs]) for a in arms])
    heading = [col.label for col in P.token_table(arms, c).columns]
    assert heading.count("flash wait") == 2


def test_a_run_without_a_cache_says_so_as_the_run_panel_does(real_runs: Path) -> None:
    # gemma_stream ran with no expert cache (hit -1): compare says "no cache (off in this run)",
    # the words replay --summary uses, not "missing"
    from bmoe_top.tui.model.quantities import NO_CACHE

    serial = real_runs / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    overlap = real_runs / "bigmoeonedge-2026-07-12-pr23" / "gemma_base.csv"
    arms = J.load_arms(J.parse_arms([str(serial), str(overlap)]))
    c = compare([ArmInput(a.name, [r.input for r in a.runs]) for a in arms])
    hit = next(m for m in c.metrics if m.metric == "hit_pct")
    assert hit.absent == {arms[0].name: NO_CACHE}
    assert _row(c, "hit_pct").cells[3:5] == (NO_CACHE, "58.0")
    assert f"| {NO_CACHE} | 58.0 |" in P.comparison_markdown(c)


def test_the_same_file_twice_is_no_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``compare X X`` (or two runs that measured exactly the same numbers) said nothing and gave
    every row a verdict and an interval, as if a comparison had happened."""
    import orjson

    from bmoe_top.tui.cli import main

    a, copy, other = tmp_path / "a.csv", tmp_path / "copy.csv", tmp_path / "b.csv"
    a.write_bytes(synth.token_csv(60))
    copy.write_bytes(a.read_bytes())
    other.write_bytes(synth.token_csv(60, seed=5))
    for second in (a, copy):
        assert main(["compare", str(a), str(second), "--json"]) == 0
        doc = orjson.loads(capsys.readouterr().out)
        assert doc["identical"] == [doc["arms"][1]]
        assert doc["identical_note"].startswith("no comparison: ") and "the same data as" in doc["identical_note"]
        assert {d["verdict"] for m in doc["metrics"] for d in m["deltas"]} == {"same"}
        assert all(d["low"] is None and d["p"] is None for m in doc["metrics"] for d in m["deltas"])
        assert main(["compare", str(a), str(second), "--md"]) == 0
        md = capsys.readouterr().out
        assert f"**{doc['identical_note']}**" in md
    assert main(["compare", str(a), str(other), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["identical"] == [] and doc["identical_note"] == ""
