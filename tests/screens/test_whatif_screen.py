"""The what-if screen under Textual's pilot: the budget cursor and its keys, the charts' legend,
marks and greyed region, the policies and layers tables (sort, filter), writing a profile from
the screen, the help, the narrow layout; and the real 48-layer trace with T and Belady."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest
from helpers import synth
from helpers.waits import pilot_until

from bmoe_top.parsers.strp import read_strp
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens.analysis_modals import AnalysisHelp, PathScreen
from bmoe_top.tui.screens.whatif import WhatIfScreen, whatif_app
from bmoe_top.tui.widgets.curves import CurveChart
from bmoe_top.tui.widgets.tables import SortTable


def synthetic_app(tmp_path: Path):
    (tmp_path / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp_path / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp_path / "run.route.csv"), str(tmp_path / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif run.route.csv + run.csv")


def chart_text(app, which: str = "#chart-a") -> str:
    return app.main.query_one(which, CurveChart).text()


async def test_cursor_keys_and_charts(tmp_path) -> None:
    app = synthetic_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        s: WhatIfScreen = app.main
        assert s.budget_mib == 64.0  # opens on the run's budget (the CSV's cache_mb)
        await pilot.press("right")
        assert s.budget_mib > 64.0
        await pilot.press("home")
        assert s.budget_mib == 0.0
        await pilot.press("end")
        assert s.budget_mib == 256.0  # the whole bank
        await pilot.press("r")
        assert s.budget_mib == 64.0
        await pilot.press("b")
        assert s.budget_mib == s.report.recommended_budget_mib
        await pilot.press("pageup")
        assert s.budget_mib < s.report.recommended_budget_mib
        text = chart_text(app)
        for part in ("decode hit % against the cache budget", "LRU", "Belady (ceiling)", "static profile",
                     "run's budget 64 MiB", "T 16 MiB", "whole bank 256 MiB", "below T: LRU hits ~0%",
                     "compulsory ceiling", "+5 hidden", "cache budget (MiB)"):
            assert part in text, part
        assert "FIFO" not in text
        await pilot.press("a")
        assert "FIFO" in chart_text(app) and "SIEVE" in chart_text(app)
        assert "MiB read per decode token" in chart_text(app, "#chart-b")
        await pilot.press("y")
        assert "flash I/O s per token" in chart_text(app, "#chart-b")
        await pilot.press("y")
        assert "MiB read per decode token" in chart_text(app, "#chart-b")
        readout = str(app.main.query_one("#wi-readout").render())
        assert "LRU" in readout and "read/token" in readout
        side = app.main.query_one("#side-summary").render()
        assert side is not None


async def test_tables_sort_and_filter(tmp_path) -> None:
    app = synthetic_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        table = app.main.query_one("#policy-table", SortTable)
        table.data_table.focus()
        names = [r.cells[0] for r in table.shown]
        assert names[0] == "LRU" and names[-1] == "Belady (ceiling)"
        await pilot.press("s", "s")  # sort by the second column, decode hit %, descending
        hits = [r.keys[1] for r in table.shown]
        assert hits == sorted(hits, reverse=True) and table.shown[0].cells[0] == "Belady (ceiling)"
        await pilot.press("S")
        assert [r.keys[1] for r in table.shown] == sorted(hits)
        await pilot.press("slash")
        await pilot.press(*"layer")
        await pilot.pause()
        assert {r.cells[0] for r in table.shown} == {"LRU per layer (even)", "LRU per layer (allocated)"}
        await pilot.press("escape")
        await pilot.pause()
        assert len(table.shown) == 9 and table.filter_text == ""
        await pilot.press("3")
        await pilot.pause()
        layers = app.main.query_one("#layer-table", SortTable)
        assert len(layers.shown) == 8  # every MoE layer
        misses = [r.keys[3] for r in layers.shown]
        assert misses == sorted(misses, reverse=True)  # most misses first
        alloc = str(app.main.query_one("#alloc").render())
        assert "one global LRU" in alloc and "allocated by each layer's curve" in alloc
        slots = sum(int(r.cells[-1]) for r in layers.shown)
        assert 0 < slots <= 64  # 64 MiB of 1 MiB experts


async def test_write_a_profile_and_help(tmp_path) -> None:
    app = synthetic_app(tmp_path)
    out = tmp_path / "hot.strp"
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, PathScreen)
        box = app.screen.query_one("#path-input")
        box.value = str(out)
        await pilot.press("enter")
        await pilot.pause()
        assert read_strp(out).slots == 64
        before = out.read_bytes()
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(out)
        await pilot.press("enter")
        await pilot.pause()
        assert out.read_bytes() == before  # an existing file is not overwritten from the screen
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, AnalysisHelp)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, WhatIfScreen)


async def test_narrow_layout(tmp_path) -> None:
    app = synthetic_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        s = app.main
        assert s.has_class("narrow") and s.has_class("short")
        assert not s.query_one("#wi-side").display or s.query_one("#wi-side").size.width == 0
        text = chart_text(app)
        assert "LRU" in text and "Belady (ceiling)" in text and "T 16 MiB" in text
        await pilot.press("y")
        assert "MiB read per decode token" in chart_text(app)  # one chart: y cycles its metric
        await pilot.press("y", "y")
        assert "decode hit %" in chart_text(app)


@pytest.fixture
def qwen_app(real_runs):
    d = real_runs / "bigmoeonedge-2026-07-15"
    inp = load_whatif([str(d / "qwen.route.csv"), str(d / "qwen.metrics"), str(d / "qwen.log")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif qwen.route.csv")


async def test_real_trace_shows_t_and_belady(qwen_app) -> None:
    async with qwen_app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        s = qwen_app.main
        assert s.budget_mib == 4000.0
        text = chart_text(qwen_app)
        assert "T 785 MiB" in text and "Belady (ceiling)" in text and "run's budget 4,000 MiB" in text
        assert "below T: LRU hits ~0%, cache off is strictly better" in text
        readout = str(s.query_one("#wi-readout").render())
        assert "LRU 80.29%" in readout and "Belady" in readout and "the most a policy could buy" in readout


async def test_ctrl_c_quits_whatif_at_once(tmp_path) -> None:
    app = synthetic_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")  # before: Textual's "press ctrl+q to quit" notice, and the app ran on
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_ascii_text_has_a_stand_in_for_every_character_and_the_profile_dialog_is_whole(tmp_path, monkeypatch):
    """``whatif --ascii`` at a width that shows the side panel: every character drawn has an ASCII
    stand-in (``Belady − LRU`` read ``Belady ? LRU``); the footer names ``y`` once; the ``w``
    dialog's question is shown whole (it was cut at ``... hottest first) for bm``)."""
    from helpers.hostile import screen_text

    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.widgets.base import ascii_cells

    monkeypatch.setattr(BmoeTopApp, "force_ascii", True)
    app = synthetic_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        # the footer names y once when its bindings have settled (a persistent double times out)
        def settled() -> str:
            t = screen_text(app)
            return t if "y metric" in t and " y y " not in t else ""

        text = await pilot_until(pilot, settled, "the footer naming y once")
        assert "Belady - LRU" in ascii_cells(text) and "Belady ? LRU" not in ascii_cells(text)
        unmapped = sorted({ch for ch in text if not ch.isascii() and ascii_cells(ch) == "?"})
        assert unmapped == [], unmapped
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, PathScreen)
        await pilot.pause()
        # what the terminal shows, the modal over the screen (the SVG a screenshot is)
        dialog = html.unescape("".join(re.findall(r"<text[^>]*>(.*?)</text>", app.export_screenshot())))
        dialog = dialog.replace("\xa0", " ")
        # wrapped over two lines of the box, each whole
        assert "Write an STRP profile (experts by lookups, hottest first) for" in dialog
        assert "bmoe-run --moe-cache-profile, to:" in dialog



def side_text(app) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(app.main._side_text())
    return console.export_text()


async def test_predicted_tok_s_chart_column_and_panel(tmp_path) -> None:
    """With the tok/s model (160 MiB of RAM, 16 MiB dense, 1,000 MB/s): ``y`` reaches the
    predicted tok/s chart with the fastest budget, the knee, the break-even and plain mmap marked;
    the policies table has the predicted tok/s column; the panel says the run's check. Without a
    bandwidth the column reads "absent" and the panel names the flag."""
    from bmoe_top.tui.jobs.sizing import speed_view

    (tmp_path / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp_path / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp_path / "run.route.csv"), str(tmp_path / "run.csv")])
    report, replay = analyse_input(inp)
    speed = speed_view(inp, report, ram=160 * 2**20, bandwidth_mb_s=1000.0, dense=16 * 2**20)
    app = whatif_app(inp, report, replay, "whatif run.route.csv + run.csv", speed)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("y", "y")
        text = chart_text(app, "#chart-b")
        lru = speed.reports["lru"]
        assert "predicted tok/s (serial; expert cache + page cache)" in text
        assert f"fastest {lru.best_mib:.0f} MiB" in text and "plain mmap" in text
        if lru.knee_mib is not None:
            assert "knee" in text
        side = side_text(app)
        assert "predicted speed" in side and "tok/s (predicted)" in side and "at the run's budget" in side
        assert "160 MiB (--ram)" in side and "1,000 MB/s (--bandwidth)" in side
        await pilot.press("2")
        await pilot.pause()
        table = app.main.query_one("#policy-table", SortTable)
        assert any(c.key == "tok_s" for c in table.table.columns)
        row = next(r for r in table.shown if r.cells[0] == "LRU")
        assert float(row.cells[4]) == pytest.approx(row.keys[4], rel=0.01) and row.keys[4] > 0
    bare = load_whatif([str(tmp_path / "run.route.csv")])
    r2, rp2 = analyse_input(bare)
    app = whatif_app(bare, r2, rp2, "whatif run.route.csv", speed_view(bare, r2, machine_ram=(None, "")))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        side = side_text(app)
        assert "absent:" in side and "--bandwidth" in side
        await pilot.press("2")
        await pilot.pause()
        row = next(r for r in app.main.query_one("#policy-table", SortTable).shown if r.cells[0] == "LRU")
        assert row.cells[4] == "absent"
