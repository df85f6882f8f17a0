"""One viewed row for the whole screen: in slow motion and after a seek the title's numbers, the
run panel and both maps are the viewed row's, and a live source's newest row (the runtime's head)
is named once, in the title. No test waits on time: the playback's cursor is set, the repaint
called directly, and the expert map's repaint interval is moved by setting its last paint back."""

from __future__ import annotations

import contextlib
import math

import pytest
from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.model import Status
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.playback import SPEEDS
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import RunPanel

N = 1024


@pytest.fixture
def live_run(tmp_path):
    """A 1,024-token run with routing, read as a source that is still generating."""
    csv, trace = tmp_path / "run.csv", tmp_path / "run.route.csv"
    csv.write_bytes(synth.token_csv(N))
    trace.write_bytes(synth.route_trace(N))
    run = open_paths([str(csv), str(trace)])
    run.set_status(Status.GENERATING, "")
    return run


@contextlib.asynccontextmanager
async def following(run, title: str):
    """The replay screen over ``run`` at 200x60, its playback following the newest row, paused."""
    screen = ReplayScreen(run, title=title)
    app = BmoeTopApp(screen)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        pb = screen.playback
        pb.follow, pb.playing, pb.selected = True, False, None
        yield app, screen, pilot


def hit_at(run, row: int) -> str:
    return f"{float(run.tokens.view('cache_hit_pct', row, row + 1)[0]):.1f} %"


async def test_slow_motion_shows_the_viewed_token_everywhere(live_run):
    """In slow motion the title and the run panel said ``tokens 1,024 · hit 79.3%`` (the runtime's
    head) while the views showed token 199 and the expert map ``as of token 183``."""
    run = live_run
    async with following(run, "slow") as (app, screen, pilot):
        pb = screen.playback
        pb.speed_index = SPEEDS.index(0.1)
        pb.cursor = 24
        screen.refresh_views(force=True)
        emap = app.query_one(ExpertMap)
        assert emap._polled.cursor == 24
        pb.cursor = 40  # the slow-motion view moves on its own (the cumulative hit % still climbs here)
        screen.refresh_views()
        title = app.query_one("#title").plain
        assert "token 40 · runtime at 1,024" in title
        assert title.count("1,024") == 1  # the head, once, named
        assert hit_at(run, 39) != hit_at(run, N - 1)
        assert f"hit {hit_at(run, 39)} so far" in title and hit_at(run, N - 1) not in title
        assert "last 32:" in title
        panel = app.query_one(RunPanel).text()
        assert "tokens 1-40" in panel and "40 tok" in panel and "1,024" not in panel
        # the expert map follows at once, not after its repaint interval
        assert emap._polled.cursor == 40
        assert "as of token 40" in emap.text(160, 30)
        assert app.query_one(LayerHeatmap)._polled.cursor == 40


async def test_after_a_seek_the_title_and_panel_are_the_seeked_tokens(live_run):
    run = live_run
    run.set_status(Status.REPLAY, "")
    screen = ReplayScreen(run, title="seek")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        screen.playback.seek(30)
        screen.refresh_views(force=True)
        await pilot.pause()
        title = app.query_one("#title").plain
        sel = screen.playback.sel
        assert f"token {sel + 1}/1,024" in title and f"tokens 1-{sel + 1}:" in title
        assert f"hit {hit_at(run, sel)} so far" in title
        panel = app.query_one(RunPanel).text()
        assert f"tokens 1-{sel + 1}" in panel and f"{sel + 1} tok" in panel
        # at the end: the whole run, the source's own figures
        await pilot.press("end")
        await pilot.pause()
        title = app.query_one("#title").plain
        # an ended run's last row: the catalogue's ended words, not the live "so far"
        assert "run:" in title and f"hit {hit_at(run, N - 1)} {q('token.cache_hit_pct').ended}" in title
        assert "so far" not in title
        assert not math.isnan(float(run.tokens.view("cache_hit_pct", N - 1, N)[0]))


async def test_at_an_earlier_row_the_expert_map_draws_the_cache_as_it_was_then(tmp_path):
    """The expert map drew the experts resident now at every viewed row; back at a row the cache
    held other experts, its legend and cells are the map the source had sent by that row."""
    import numpy as np

    csv, trace = tmp_path / "run.csv", tmp_path / "run.route.csv"
    csv.write_bytes(synth.token_csv(200))
    trace.write_bytes(synth.route_trace(200))
    run = open_paths([str(csv), str(trace)])
    run.set_status(Status.REPLAY, "")
    then = np.zeros((8, 32), bool)
    then[:, 0] = True  # expert 0 of every layer
    now = np.zeros((8, 32), bool)
    now[:, 31] = True
    run.set_resident(now)  # after the last row
    run.set_resident(then, after_row=49)  # a map sent after row 50: kept, the map now stays
    screen = ReplayScreen(run, title="resident")
    app = BmoeTopApp(screen)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        emap = app.query_one(ExpertMap)
        screen.playback.seek(99)
        screen.refresh_views(force=True)
        await pilot.pause()
        assert "resident as of token 50" in emap.text(160, 30)
        with run.lock:
            shown, row = run.resident_at(screen.playback.sel + 1)
        assert row == 49 and shown[:, 0].all() and not shown[:, 31].any()
        await pilot.press("end")
        await pilot.pause()
        screen.refresh_views(force=True)
        assert "resident now" in emap.text(160, 30)


async def test_a_repaint_the_expert_map_held_back_comes_when_nothing_polls_again(live_run):
    """The map repaints at most every 2 s while the data streams; a repaint it held back waited
    for the next poll, and once the run ended nothing polled: after End the live demo's map stayed
    at ``as of token 196`` beside a title at 1,024 until a key was pressed."""
    from helpers.waits import pilot_until

    run = live_run
    async with following(run, "held") as (app, screen, pilot):
        screen.refresh_views(force=True)  # following: at the newest row
        emap = app.query_one(ExpertMap)
        assert emap._polled.cursor == N
        emap.min_interval = 0.5  # (the map's own is 2 s)
        run.add_token_rows({"wall_ms": [1.0]}, 1)  # a new row; the cursor follows it
        screen.refresh_views()  # the screen paints it; the map holds its repaint back (painted just now)
        assert screen.playback.cursor == N + 1 and emap._polled.cursor == N
        await pilot_until(pilot, lambda: emap._polled.cursor == N + 1, "the held-back repaint, with no poll after it")
        assert f"token {N + 1:,}" in emap.text(160, 30)
