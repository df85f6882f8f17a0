"""Snapshots (pytest-textual-snapshot) of the layer x expert map's memory tiers view (``v``) on the
replay screen: a transcript whose routes name their tiers (tests/helpers/synth.py), at 80x24 and
120x40, in colour and in ASCII under NO_COLOR; and a transcript without tiers, whose map says
they are not reported.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_tier_map_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest
from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.grids import ExpertMap
from bmoe_top.tui.widgets.palette import Look

SIZES = {"narrow": (80, 24), "mid": (120, 40)}
LOOKS = {"colour": Look(), "ascii-mono": Look(colors="mono", ascii=True)}


def app(look: Look, tiers: bool = True) -> BmoeTopApp:
    run = RunModel()
    data = synth.progress_transcript(48, n_layer=8, n_expert=24, tiers=tiers)
    load_data(run, data, "tiers.txt" if tiers else "old.txt")
    return BmoeTopApp(ReplayScreen(run, title="replay " + ("tiers.txt" if tiers else "old.txt")), look=look)


async def to_tiers(pilot) -> None:
    await pilot.press("v")
    em = pilot.app.screen.query_one(ExpertMap)
    await pilot.pause()
    assert em.tiers and em.size.height > 1  # drawn, in the tiers view


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("look", LOOKS)
def test_tiers_view(snap_compare, size, look):
    assert snap_compare(app(LOOKS[look]), terminal_size=SIZES[size], run_before=to_tiers)


@pytest.mark.parametrize("size", SIZES)
def test_tiers_view_of_a_source_without_tiers(snap_compare, size):
    assert snap_compare(app(Look(), tiers=False), terminal_size=SIZES[size], run_before=to_tiers)


