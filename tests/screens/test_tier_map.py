"""The expert map's memory tiers view on a run screen (docs/user-guide.md "Keys"): ``v`` switches
it from any focus outside a text box, the map in the focus included, and keeps the choice in the
settings (``[view] expert_map``); the next screen opens in it."""

from __future__ import annotations

from pathlib import Path

from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.base import settings_of
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.settings import load
from bmoe_top.tui.widgets.grids import ExpertMap


def _app(path: Path) -> BmoeTopApp:
    """bmoe-top over ``path`` with the settings file beside it, as the command line starts one."""
    BmoeTopApp.settings_store = load(path.with_name("settings.toml"))
    return BmoeTopApp(ReplayScreen(open_paths([str(path)]), title=f"replay {path.name}"))


def _map_text(em: ExpertMap) -> str:
    return "\n".join(s.text for s in em.build(em.size.width, em.size.height))


async def test_v_switches_the_expert_map_from_the_screen_and_from_the_focused_map(tmp_path):
    path = tmp_path / "tiers.txt"
    path.write_bytes(synth.progress_transcript(48, n_layer=4, n_expert=16, tiers=True))
    app = _app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        em = screen.query_one(ExpertMap)
        assert not em.tiers and "heat" in _map_text(em).splitlines()[0]
        await pilot.press("v")
        assert em.tiers and settings_of(screen).view.expert_map == "tiers"
        assert _map_text(em).startswith("misses by tier disk ")
        em.focus()
        await pilot.pause()
        assert screen.focused is em
        await pilot.press("v")  # the map in the focus: the same key, the same action
        assert not em.tiers and settings_of(screen).view.expert_map == "heat"
        await pilot.press("v")
        assert em.tiers
    again = _app(path)  # the choice was kept: a new screen opens in the tiers view
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.screen.query_one(ExpertMap).tiers


async def test_a_replay_without_tiers_says_so_in_the_tiers_view(tmp_path):
    path = tmp_path / "old.txt"
    path.write_bytes(synth.progress_transcript(24))
    app = _app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        em = app.screen.query_one(ExpertMap)
        await pilot.press("v")
        assert em.tiers
        text = _map_text(em)
        assert "tiers not reported by this source" in text and "%" not in text
