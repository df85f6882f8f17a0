"""Snapshot of the main replay screen (pytest-textual-snapshot), on a deterministic synthetic run.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen


def _run() -> RunModel:
    run = RunModel()
    load_data(run, synth.token_csv(96, seed=3), "synthetic.csv")
    load_data(run, synth.route_trace(96, n_layer=12, n_expert=48, seed=4), "synthetic.route.csv")
    return run


def replay_app() -> BmoeTopApp:
    return BmoeTopApp(ReplayScreen(_run(), title="replay synthetic.csv"))


def test_main_screen(snap_compare):
    assert snap_compare(replay_app(), terminal_size=(160, 48))


def test_main_screen_narrow_mid_run(snap_compare):
    async def seek(pilot):
        await pilot.press("home")
        await pilot.press(*["right"] * 30)

    assert snap_compare(replay_app(), terminal_size=(100, 36), run_before=seek)
