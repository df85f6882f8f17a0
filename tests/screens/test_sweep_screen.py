"""The sweep's screen (tui/screens/sweep.py): a real sweep of the bundled runtime on the tiny
generated model runs on it (the bar and the status line follow the runs, ``p`` pauses it between
runs, the arms fill in) and ends with the table and the same document ``--once --json`` prints;
``c`` opens compare on two arms and ``q`` there comes back; ``w`` opens the what-if with the
measured points over the predicted curve; ``q`` during a run ends its child. Snapshots at 80x24
and 120x40 (and the what-if it opens) over a finished sweep of synthetic runs (every number
from the files: nothing runs), one of them with another routing (flagged).

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_sweep_screen.py --snapshot-update
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from helpers.hostile import screen_text
from helpers.pagecache import cached_model
from helpers.sweep_data import synth_sweep
from helpers.waits import pilot_until
from textual.widgets import ProgressBar

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.cli import main, runtime_exe
from bmoe_top.tui.jobs.sweep import SweepPlan
from bmoe_top.tui.screens.compare import CompareScreen
from bmoe_top.tui.screens.sweep import SweepScreen, sweep_app
from bmoe_top.tui.screens.whatif import WhatIfScreen
from bmoe_top.tui.widgets.curves import CurveChart
from bmoe_top.tui.widgets.tables import SortTable

SNAP_SIZES = {"narrow": (80, 24), "mid": (120, 40)}
GRID = ("--cache-mb", "0.3,1.6", "--runs", "2", "-n", "6", "-p", "Hello there")
EXTRA = ("--quiet", "-t", "1")


def real_plan(out: Path) -> SweepPlan:
    """The plan ``bmoe-top sweep -m tiny GRID --extra ... -o out`` makes."""
    return SweepPlan(tuple(runtime_exe()), str(cached_model("tiny")), (0.3, 1.6), runs=2, prompt="Hello there",
                     n_predict=6, out=str(out), extra=EXTRA)


def cli_document(capsys, out: Path) -> dict:
    code = main(["sweep", "-m", str(cached_model("tiny")), *GRID, "-o", str(out),
                 *(f"--extra={e}" for e in EXTRA), "--once", "--json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    return orjson.loads(cap.out)


async def test_a_real_sweep_runs_on_the_screen_and_ends_with_the_clis_document(tmp_path, capsys):
    out = tmp_path / "sweep"
    screen = SweepScreen(real_plan(out))
    app = BmoeTopApp(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        # a run going on: the status line names it, with done / running / left
        await pilot_until(pilot, lambda: screen.progress is not None and screen.progress.running is not None,
                          "a run going on")
        assert "running 0.30 MiB x 1 lane(s), round 1" in screen_text(app) and "left 3" in screen_text(app)
        # p pauses after the run going on: the sweep waits, the status says so, p resumes it
        await pilot.press("p")
        assert screen.control.paused and "PAUSED" in screen_text(app)
        await pilot_until(pilot, lambda: screen.progress is not None and screen.progress.done >= 1
                          and screen.progress.running is None, "the first run ended")
        done = screen.progress.done
        await pilot_until(pilot, lambda: screen.control.holding, "the sweep held between runs")
        assert screen.progress.done == done and screen.progress.running is None and screen.result is None
        await pilot.press("p")
        assert not screen.control.paused
        await pilot_until(pilot, lambda: screen.result is not None, "the sweep ended", limit=300)
        bar = screen.query_one("#sw-bar", ProgressBar)
        assert bar.total == 4 and bar.progress == 4
        text = screen_text(app)
        assert "ended: 4 of 4 runs (4 made now" in text and "median |error|" in text
        table = screen.query_one("#sweep-arms", SortTable).table
        assert table is not None and [r.keys[0] for r in table.rows] == [0.3, 1.6]
        doc = screen.document()
    assert doc is not None
    # the same document --once --json prints over the same folder (every run found done: resumed)
    again = cli_document(capsys, out)
    for a in again["arms"]:
        for r in a["runs"]:
            assert r.pop("resumed") is True
    for a in doc["arms"]:
        for r in a["runs"]:
            assert r.pop("resumed") is False
    assert again == doc
    # the table's cells are the document's numbers
    for row, a in zip(table.rows, doc["arms"]):
        assert row.keys[3] == pytest.approx(a["measured_tok_s"]) and row.keys[5] == pytest.approx(a["predicted_tok_s"])
        assert row.keys[6] == pytest.approx(a["error_pct"])


async def test_compare_and_the_whatif_open_from_the_arms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = synth_sweep(Path("sweep"), differs={(2, 1)})
    app = sweep_app(plan)
    screen = app.main
    assert isinstance(screen, SweepScreen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: screen.result is not None, "the sweep read")
        # the flagged run: named on its arm's row, left out of its median
        table = screen.query_one("#sweep-arms", SortTable).table
        assert table is not None
        assert table.rows[1].cells[-1] == "differs (2)" and table.rows[1].kind == "bad"
        assert table.rows[1].cells[2] == "1/2" and table.rows[0].cells[-1] == "same"
        # / searches the table: the flagged arm
        await pilot.press("slash", *"differs", "enter")
        st = screen.query_one("#sweep-arms", SortTable)
        assert [r.cells[0] for r in st.shown] == ["64"]
        await pilot.press("slash", "escape", "enter")
        await pilot_until(pilot, lambda: len(st.shown) == 3, "every arm again")
        screen.set_focus(None)
        # c with the cursor on the first arm and nothing marked: nothing to compare
        await pilot.press("c")
        assert app.screen is screen
        # m marks the first arm and the third, c compares them; q there comes back to the sweep
        await pilot.press("m")
        screen.query_one("#sweep-arms", SortTable).data_table.move_cursor(row=2)
        await pilot.press("m", "c")
        await pilot_until(pilot, lambda: isinstance(app.screen, CompareScreen), "compare open")
        assert [a.name for a in app.screen.arms] == ["16 MiB x1", "256 MiB x1"]
        assert [len(a.runs) for a in app.screen.arms] == [2, 2]
        await pilot.press("q")
        await pilot_until(pilot, lambda: app.screen is screen, "back to the sweep")
        assert app.is_running
        # w: the what-if, its lower chart on predicted tok/s with the arms' measured medians as points
        await pilot.press("w")
        await pilot_until(pilot, lambda: isinstance(app.screen, WhatIfScreen), "what-if open")
        wi = app.screen
        plot = wi.query_one("#chart-b", CurveChart).plot
        assert plot is not None and plot.title.startswith("predicted tok/s")
        measured = [s for s in plot.series if s.key == "measured"]
        assert len(measured) == 1 and measured[0].points
        doc = screen.document()
        assert doc is not None
        assert list(measured[0].x) == [a["cache_mb"] for a in doc["arms"]]
        assert list(measured[0].y) == [a["measured_tok_s"] for a in doc["arms"]]
        await pilot.press("q")
        await pilot_until(pilot, lambda: app.screen is screen, "back to the sweep")


async def test_quit_during_a_run_ends_its_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    plan = SweepPlan(("sh", "-c", f"echo $$ > {pid_file}; exec sleep 60", "runtime"), "m.gguf", (1.0,),
                     out=str(tmp_path / "out"))
    screen = SweepScreen(plan)
    app = BmoeTopApp(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: pid_file.exists() and pid_file.read_text().strip(), "the child started")
        pid = int(pid_file.read_text())
        await pilot.press("q")
    screen.close()
    assert screen._thread is not None and not screen._thread.is_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("size", SNAP_SIZES)
def test_snapshot(snap_compare, size, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = sweep_app(synth_sweep(Path("sweep"), differs={(2, 1)}))

    async def ended(pilot):
        await pilot_until(pilot, lambda: app.main.result is not None, "the sweep read")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SNAP_SIZES[size], run_before=ended)


def test_snapshot_ascii_no_color(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("BMOE_ASCII", "1")
    app = sweep_app(synth_sweep(Path("sweep"), differs={(2, 1)}))

    async def ended(pilot):
        await pilot_until(pilot, lambda: app.main.result is not None, "the sweep read")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SNAP_SIZES["narrow"], run_before=ended)


def test_snapshot_whatif_with_measured_points(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = sweep_app(synth_sweep(Path("sweep"), differs={(2, 1)}))

    async def whatif(pilot):
        await pilot_until(pilot, lambda: app.main.result is not None, "the sweep read")
        await pilot.press("w")
        await pilot_until(pilot, lambda: isinstance(app.screen, WhatIfScreen), "what-if open")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SNAP_SIZES["mid"], run_before=whatif)
