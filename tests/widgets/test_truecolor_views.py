"""In the truecolor look a view's lines skip Textual's ANSI-to-truecolor filter
(tui/widgets/base.py ``RunView.get_line_filters``): that is exact only while every style they draw
with is a fixed point of the filter (a truecolor colour or none, never dim). Every view's every
line is checked, in both truecolor scales, with a selected token and cell cursors on both maps,
and the other looks keep the filter."""

from __future__ import annotations

import pytest
from helpers import synth
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from textual.filter import ANSIToTruecolor

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.base import RunView
from bmoe_top.tui.widgets.lines import MemoTruecolor
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import AnswerTail, RunPanel


def _run() -> RunModel:
    run = RunModel()
    load_data(run, synth.progress_transcript(40, n_layer=6, n_expert=24,
                                             text="an answer with `code`, *emphasis* and\ttabs\n"), "answer.out")
    load_data(run, synth.token_csv(300, seed=5), "synthetic.csv")
    load_data(run, synth.route_trace(300, n_layer=12, n_expert=48, seed=6), "synthetic.route.csv")
    return run


@pytest.mark.parametrize("look", [Look(), Look(scale="cividis")], ids=["viridis", "cividis"])
async def test_every_line_of_every_view_is_a_fixed_point_of_the_truecolor_filter(look):
    filt = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
    app = BmoeTopApp(ReplayScreen(_run(), title="truecolor"), look=look)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("home", "right", "right")  # a selected token and its readouts
        for grid in (app.main.query_one("#heatmap"), app.main.query_one("#expert-map")):
            grid.cursor.row, grid.cursor.col = 2, 20
        app.main.refresh_views(force=True)
        await pilot.pause()
        views = [*app.main.query(RunView), *app.main.query(RunPanel), *app.main.query(AnswerTail)]
        assert len(views) >= 7 and {type(v) for v in views} >= {RunPanel, AnswerTail}
        checked = 0
        for view in views:
            assert not any(isinstance(f, (MemoTruecolor, ANSIToTruecolor)) for f in view.get_line_filters())
            for line in (view.render_line(y) for y in range(view.content_size.height)):
                segs = list(line)
                for bg in (view.background_colors[1], app.screen.background_colors[1]):
                    assert filt.apply(segs, bg) == segs, (type(view).__name__, [s for s in segs if s.style])
                checked += 1
        assert checked > 40
        tail = app.main.query_one(AnswerTail)
        assert any("answer" in tail.render_line(y).text for y in range(tail.content_size.height))


@pytest.mark.parametrize("look", [Look(colors="16"), Look(colors="mono")], ids=["16", "mono"])
async def test_the_other_looks_keep_the_filter(look):
    app = BmoeTopApp(ReplayScreen(_run(), title="looks"), look=look)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for view in [*app.main.query(RunView), *app.main.query(RunPanel), *app.main.query(AnswerTail)]:
            assert any(isinstance(f, MemoTruecolor) for f in view.get_line_filters())
