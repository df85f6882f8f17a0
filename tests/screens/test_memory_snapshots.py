"""Snapshots (pytest-textual-snapshot) of the memory screen (``attach --pid``) on deterministic
readings replayed through MemoryPlayer (tests/helpers/memory_readings.py: a 48 x 128 model, folded
to fit), at a narrow (80x24) and a wide (200x60) size, in colour and in ASCII under NO_COLOR.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_memory_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest
from helpers.memory_readings import readings

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.screens.attach_memory import MemoryScreen
from bmoe_top.tui.sources.memory import MemoryPlayer
from bmoe_top.tui.widgets.palette import Look

SIZES = {"narrow": (80, 24), "wide": (200, 60)}
LOOKS = {"colour": Look(), "ascii-mono": Look(colors="mono", ascii=True)}


def app(look: Look) -> BmoeTopApp:
    player = MemoryPlayer(readings(48, 128, samples=4), speed=float("inf"), name="mem.jsonl")
    return BmoeTopApp(MemoryScreen(player, fps=10), look=look)


async def settle(pilot) -> None:
    screen = pilot.app.screen
    while screen.model.history.samples < 4 or screen.model.state != "replayed":
        await pilot.pause(0.05)
    screen.tick(force=True)
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("look", LOOKS)
def test_memory_screen(snap_compare, size, look):
    assert snap_compare(app(LOOKS[look]), terminal_size=SIZES[size], run_before=settle)
