"""The diagnosis line on the run screens: it names the path, the bottleneck and the first thing
to change with its number, fits the terminal's width, follows the run and never takes the focus."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import KEEP_ALL, RunModel
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.diagnosis import DiagnosisLine
from bmoe_top.tui.widgets.palette import Look


def dead_cache_run(n: int = 64) -> RunModel:
    """A serial run whose 100 MiB budget is below one token's 408 MiB of experts (2 % hits)."""
    run = RunModel(KEEP_ALL)
    cols = {"wall_ms": np.full(n, 200.0), "io_ms": np.full(n, 150.0), "read_mib": np.full(n, 400.0),
            "cache_hit_pct": np.full(n, 2.0), "mgmt_ms": np.full(n, 5.0)}
    run.add_token_rows(cols, n)
    run.set_cache_mib(budget_mib=100.0)
    return run


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_line_names_the_finding_and_fits(size):
    run = dead_cache_run()
    screen = ReplayScreen(run, title="dead cache")
    app = BmoeTopApp(screen, look=Look(colors="mono", ascii=True))
    async with app.run_test(size=size) as pilot:
        line = screen.query_one("#diagnosis", DiagnosisLine)
        await pilot_until(pilot, lambda: line.text != "", "the line drawn")
        assert line.text.startswith("streaming serial · flash wait · cache off") or size[0] == 80
        assert "budget 100 MiB < 408 MiB" in line.text
        assert len(line.text) <= size[0] - 2 and line.region.height == 1
        shown = line.render_line(0).text
        assert "budget 100 MiB" in shown
        for _ in range(12):  # Tab through every stop: the line is never one
            await pilot.press("tab")
            assert screen.focused is not line


async def test_the_line_follows_the_run_once_per_repaint():
    run = RunModel(KEEP_ALL)
    run.add_token_rows({"wall_ms": np.full(40, 50.0), "io_ms": np.full(40, 10.0)}, 40)
    screen = ReplayScreen(run, title="healthy")
    app = BmoeTopApp(screen, look=Look(colors="mono", ascii=True))
    async with app.run_test(size=(120, 40)) as pilot:
        line = screen.query_one("#diagnosis", DiagnosisLine)
        await pilot_until(pilot, lambda: line.text.endswith("no problem found"), "no problem found")
        assert line.text == "streaming serial · compute · no problem found"
        await pilot.pause()
        screen.refresh_views()  # the line at its laid-out width
        before = line.evaluations
        screen.refresh_views()
        screen.refresh_views()
        assert line.evaluations == before  # nothing changed: the rules did not run again
        run.update_sidecar({"cpu_temp_max_mC": "92000"})
        screen.refresh_views()
        assert line.evaluations == before + 1
        assert "cool the device" in line.text and "CPU temp max 92.0 °C > 85.0 °C" in line.text


async def test_a_live_runs_diagnosis_changes_go_into_its_event_log():
    """The rules that fire, before and after, in the event log (kind diagnosis) of a live model;
    a file's replay (test_the_line_names_the_finding_and_fits) records none."""
    from bmoe_top.tui.model.run import LIVE

    run = RunModel(LIVE)
    cols = {"wall_ms": np.full(64, 200.0), "io_ms": np.full(64, 150.0), "read_mib": np.full(64, 400.0),
            "cache_hit_pct": np.full(64, 2.0), "mgmt_ms": np.full(64, 5.0)}
    run.add_token_rows(cols, 64)
    run.set_cache_mib(budget_mib=100.0)
    screen = ReplayScreen(run, title="live dead cache")
    async with BmoeTopApp(screen, look=Look(colors="mono", ascii=True)).run_test(size=(160, 45)) as pilot:
        got = await pilot_until(pilot, lambda: [e for e in run.events.snapshot() if e.kind == "diagnosis"],
                                "a diagnosis event")
        assert got[0].old == "no problem found" and "budget_below_cycle" in got[0].new
        assert "budget 100 MiB < 408 MiB" in got[0].detail


async def test_a_file_replay_records_no_diagnosis_event():
    run = dead_cache_run()
    screen = ReplayScreen(run, title="file")
    async with BmoeTopApp(screen, look=Look(colors="mono", ascii=True)).run_test(size=(160, 45)) as pilot:
        line = screen.query_one("#diagnosis", DiagnosisLine)
        await pilot_until(pilot, lambda: "budget 100 MiB" in line.text, "the line drawn")
        assert [e for e in run.events.snapshot() if e.kind == "diagnosis"] == []
