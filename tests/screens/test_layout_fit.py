"""The Overview's column shares its rows like btop's boxes (tui/widgets/sizing.py,
tui/widgets/stack.py): at every size from 80x24 to 200x60 both maps keep their layer rows on
screen, panels with nothing to show give their rows away, and T / A / M hide or show the trends,
the answer and the maps, kept in the settings file's ``[panels]``."""

from __future__ import annotations

import sys

import pytest
from helpers import EMITTER, synth
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.live import LiveScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.settings import load
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.stack import PanelStack

SIZES = [(80, 24), (100, 30), (120, 40), (160, 48), (200, 60)]
VIEWS = ("#overview-strip", "#breakdown", "#trends", "#heatmap", "#expert-map")
#: Rows of each map that are not layer rows, and the layer rows each keeps at least (compact, full).
CHROME = {"#heatmap": 2, "#expert-map": 4}
LAYER_ROWS = {True: 4, False: 6}


def replay_run(routes: bool = True, n_layer: int = 48) -> RunModel:
    run = RunModel()
    load_data(run, synth.token_csv(96, seed=3), "synthetic.csv")
    if routes:
        load_data(run, synth.route_trace(96, n_layer=n_layer, n_expert=128, seed=4), "synthetic.route.csv")
    return run


def assert_maps_on_screen(screen, size: tuple[int, int], n_layer: int) -> None:
    compact = size[0] < 100 or size[1] < 30
    column = screen.query_one("#main").region
    assert column.bottom <= size[1] - 1  # the footer's row stays the footer's
    for sel, chrome in CHROME.items():
        view = screen.query_one(sel)
        least = chrome + min(n_layer, LAYER_ROWS[compact])
        assert view.display, f"{sel} left out at {size}"
        assert view.region.height >= least, f"{sel} has {view.region.height} rows at {size}, needs {least}"
        assert column.y <= view.region.y and view.region.bottom <= column.bottom, f"{sel} below the fold at {size}"


@pytest.mark.parametrize("size", SIZES)
async def test_replay_keeps_both_maps_layer_rows_on_screen(size):
    app = BmoeTopApp(ReplayScreen(replay_run(), title="replay"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert_maps_on_screen(app.main, size, 48)


@pytest.mark.parametrize("size", [(120, 40), (200, 60)])
async def test_live_keeps_both_maps_layer_rows_on_screen(size):
    src = ChildSession([sys.executable, EMITTER, "--rate", "2000", "--route-layers", "48", "--route-experts", "128"])
    screen = LiveScreen(src, title="launch emitter", n_predict=24)
    screen.quiet_after_s = 1e9
    app = BmoeTopApp(screen)
    try:
        async with app.run_test(size=size) as pilot:
            await pilot_until(pilot, lambda: src.state == "ready", "the emitter is ready")
            src.generate("tell me", 24)
            await pilot_until(pilot, lambda: screen.run_model.route_token_count() >= 24, "24 routed tokens")
            await pilot_until(pilot, lambda: not screen.query_one("#heatmap").has_class("-empty"), "the map drawn")
            screen.refresh_views(force=True)
            await pilot.pause(0.1)
            assert_maps_on_screen(screen, size, 48)
    finally:
        src.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
async def test_a_run_without_routing_gives_the_maps_rows_to_the_charts(size):
    app = BmoeTopApp(ReplayScreen(replay_run(routes=False), title="replay"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.main
        column = screen.query_one("#main").region
        used = sum(screen.query_one(sel).region.height for sel in VIEWS if screen.query_one(sel).display)
        assert used == column.height, f"{column.height - used} blank rows at {size}"
        assert screen.query_one("#heatmap").region.height == 1 == screen.query_one("#expert-map").region.height


async def test_data_that_arrives_is_fitted_in_the_repaint_that_draws_it():
    """The views' heights change in the same repaint as their ``-empty`` classes: a turn's first
    rows lay the screen out once (the column fitted on a NeedChanged message one message later
    laid it out a second time, 13 ms of CPU at 200x60)."""
    run = RunModel()
    screen = ReplayScreen(run, title="replay")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        stack = screen.query_one("#main", PanelStack)
        assert stack.heights["heatmap"] == 1 == stack.heights["breakdown"]  # nothing to show yet
        load_data(run, synth.token_csv(96, seed=3), "synthetic.csv")
        load_data(run, synth.route_trace(96, n_layer=48, n_expert=128, seed=4), "synthetic.route.csv")
        screen.refresh_views()  # no message handled between this and the asserts
        assert stack.heights["heatmap"] >= CHROME["#heatmap"] + LAYER_ROWS[False]
        assert stack.heights["breakdown"] > 1
        assert screen.query_one("#heatmap").styles.height.value == stack.heights["heatmap"]
        fitted = dict(stack.heights)
        await pilot.pause()
        assert stack.heights == fitted
        assert_maps_on_screen(screen, (200, 60), 48)


async def test_a_source_without_answer_text_gives_the_side_to_the_run_panel():
    app = BmoeTopApp(ReplayScreen(replay_run(), title="replay"))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        screen = app.main
        side = screen.query_one("#side").region
        assert screen.query_one("#answer-side").region.height == 1
        assert screen.query_one("#run-panel-scroll").region.height == side.height - 1


async def test_keys_hide_and_show_each_panel_group_and_the_choice_is_kept(tmp_path):
    path = tmp_path / "settings.toml"
    BmoeTopApp.settings_store = load(path)
    try:
        app = BmoeTopApp(ReplayScreen(replay_run(), title="replay"))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            screen = app.main
            trends = screen.query_one("#trends").region.height
            await pilot.press("M")
            await pilot_until(pilot, lambda: not screen.query_one("#heatmap").display, "the maps hidden")
            assert not screen.query_one("#expert-map").display
            assert screen.query_one("#trends").region.height > trends  # the maps' rows went to the charts
            await pilot.press("T", "A")
            await pilot_until(pilot, lambda: not screen.query_one("#trends").display, "the trends hidden")
            assert not screen.query_one("#answer-side").display
        kept = load(path).settings.panels
        assert (kept.trends, kept.answer, kept.maps) == (False, False, False)
        BmoeTopApp.settings_store = load(path)
        again = BmoeTopApp(ReplayScreen(replay_run(), title="replay"))
        async with again.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert not again.main.query_one("#heatmap").display
            await pilot.press("M")
            await pilot_until(pilot, lambda: again.main.query_one("#heatmap").display, "the maps shown again")
            assert_maps_on_screen(again.main, (120, 40), 48)
        assert load(path).settings.panels.maps
    finally:
        BmoeTopApp.settings_store = None
