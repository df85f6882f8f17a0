"""The app's exit status: an exception inside the app (a repaint that fails) ends it with
status 1, so a crashed ``bmoe-top replay`` is never mistaken for a clean quit."""

from __future__ import annotations

import pytest
from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.replay import ReplayScreen


class BrokenScreen(ReplayScreen):
    """A screen whose repaint fails (as a view that cannot draw would)."""

    def refresh_views(self, force: bool = False) -> None:
        raise RuntimeError("a view failed to draw")


async def test_a_crash_inside_the_app_exits_1(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(16))
    app = BmoeTopApp(BrokenScreen(open_paths([str(p)]), title="broken"))
    with pytest.raises(RuntimeError, match="failed to draw"):
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
    assert app.return_code == 1


async def test_a_clean_quit_exits_0(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(16))
    app = BmoeTopApp(ReplayScreen(open_paths([str(p)]), title="ok"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("q")
    assert app.return_code == 0
