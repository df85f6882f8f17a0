"""Keys that cannot break (tui/widgets/focus.py, the mode screens' Escape): the tab keys, the
palette's tab entries and clicks on the tab bar switch tabs whatever has the focus; Tab stops
only at widgets drawn on screen; Escape on a map leaves it and never cancels the generation."""

from __future__ import annotations

import sys

from helpers import EMITTER, synth
from helpers.waits import pilot_until, tab_to
from textual.widgets import Input, TabbedContent

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.grids import ExpertMap, GridView, LayerHeatmap


def _routed_emitter() -> ChildSession:
    return ChildSession([sys.executable, EMITTER, "--rate", "100", "--route-layers", "4", "--route-experts", "16",
                         "--route-k", "2", "--route-slots", "8"], stall_after_s=5.0)


async def _generating_with_a_map_focused(pilot, app, src) -> None:
    """`bmoe-top`, Enter (the prompt already in the box), then Tab until a map has the focus."""
    await pilot_until(pilot, lambda: src.state == "ready", "ready")
    await pilot.press("enter")
    await pilot_until(pilot, lambda: src.state == "generating" and app.main.run_model.n_tokens >= 3, "generating")
    await pilot_until(pilot, lambda: not app.query_one(LayerHeatmap).empty, "routing shown")
    await pilot.pause()
    for _ in range(4):
        await pilot.press("tab")
        if isinstance(app.focused, GridView):
            return
    raise AssertionError(f"Tab never reached a map: focus on {app.focused!r}")


async def test_tab_keys_palette_and_clicks_switch_tabs_after_tab_reached_a_map():
    src = _routed_emitter()
    app = live_app(src, title="emitter", prompt="hello", n_predict=4_000)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await _generating_with_a_map_focused(pilot, app, src)
            tabs = app.query_one("#tabs", TabbedContent)
            for key, tab in (("ctrl+t", "turns"), ("ctrl+o", "whatif"), ("ctrl+l", "log")):
                await pilot.press(key)
                await pilot_until(pilot, lambda tab=tab: tabs.active == tab, f"the {tab} tab after {key}")
            # the digit keys, from a map again
            await pilot.press("1")
            await pilot.pause()
            await pilot.press("tab", "tab")
            assert isinstance(app.focused, GridView)
            for key, tab in (("2", "text"), ("3", "log"), ("4", "problems")):
                await pilot.press(key)
                await pilot_until(pilot, lambda tab=tab: tabs.active == tab, f"the {tab} tab after {key}")
            # the palette's "Tab: Turns", from a map
            await pilot.press("1")
            await pilot.pause()
            app.query_one(ExpertMap).focus()
            await pilot.pause()
            entry = next(cb for title, _h, cb in app.main.commands() if title == "Tab: Turns")
            entry()
            await pilot_until(pilot, lambda: tabs.active == "turns", "the Turns tab from the palette")
            # a click on the tab bar, from a map
            await pilot.press("1")
            await pilot.pause()
            app.query_one(ExpertMap).focus()
            await pilot.pause()
            await pilot.click("#tabs Tab#--content-tab-log")
            await pilot_until(pilot, lambda: tabs.active == "log", "the Log tab from a click")
    finally:
        src.close(3)


async def test_escape_on_a_map_leaves_it_and_the_generation_runs_on():
    src = _routed_emitter()
    app = live_app(src, title="emitter", prompt="hello", n_predict=4_000)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await _generating_with_a_map_focused(pilot, app, src)
            n = app.main.run_model.n_tokens
            await pilot.press("escape")
            assert app.focused is None
            await pilot_until(pilot, lambda: app.main.run_model.n_tokens >= n + 20, "tokens after Escape")
            assert src.state == "generating" and src.status().turns_done == 0
            # Escape in the prompt box while it generates still cancels
            app.query_one("#prompt", Input).focus()
            await pilot.press("escape")
            await pilot_until(pilot, lambda: src.status().turns_done == 1, "the cancelled turn")
            assert app.main.run_model.turns[-1].done["cancelled"] is True
    finally:
        src.close(3)


async def test_tab_stops_are_widgets_on_screen_and_each_shows_its_focus(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    r = tmp_path / "run.route.csv"
    r.write_bytes(synth.route_trace(64))
    app = BmoeTopApp(ReplayScreen(open_paths([str(p), str(r)]), title="r"))
    async with app.run_test(size=(80, 24)) as pilot:  # both maps keep their rows (the panel layout)
        await pilot.pause()
        seen = []
        for _ in range(3):
            await pilot.press("tab")
            await pilot.pause()
            w = app.focused
            assert w is not None and w.is_on_screen and w.region.height > 0, w
            assert "> " in str(w.render_line(0).text) or "▸ " in w.render_line(0).text
            seen.append(w)
        assert {type(w) for w in seen} == {LayerHeatmap, ExpertMap}
        await pilot.press("M")  # the maps hidden: no longer Tab stops
        await pilot_until(pilot, lambda: not any(m.is_on_screen for m in app.query(GridView)), "the maps hidden")
        await pilot.press("tab")
        await pilot.pause()
        assert not isinstance(app.focused, GridView)


async def test_every_run_panel_row_is_reached_from_the_keyboard(tmp_path):
    """The run panel is taller than the side column at 120x40: Tab reaches its column (marked by
    a bar down its left edge while focused), ↓ / PgDn / End scroll it until its last row shows,
    Home back to its first; ← still selects the previous token from there."""
    from bmoe_top.tui.widgets.focus import PanelScroll
    from bmoe_top.tui.widgets.panels import RunPanel

    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    app = BmoeTopApp(ReplayScreen(open_paths([str(p)]), title="r"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        scroll = app.query_one("#run-panel-scroll", PanelScroll)
        panel = app.query_one(RunPanel)
        assert panel.region.height > scroll.region.height, "the panel fits: nothing to scroll"
        await tab_to(pilot, app, scroll, "the run panel")
        assert app.focused is scroll
        edge = {app.screen._compositor.render_strips()[y].text[scroll.region.x]
                for y in range(scroll.region.y, scroll.region.bottom)}
        assert edge == {"┃"}, f"no focus mark down the panel's edge: {edge}"

        def bottom_shown() -> bool:
            return scroll.scroll_y + scroll.scrollable_content_region.height >= panel.region.height - 1 \
                or scroll.scroll_y >= scroll.max_scroll_y > 0

        await pilot.press("down")
        await pilot_until(pilot, lambda: scroll.scroll_y >= 1, "↓ scrolled a row")
        await pilot.press("end")
        await pilot_until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y, "End: the last row")
        assert bottom_shown()
        await pilot.press("home")
        await pilot_until(pilot, lambda: scroll.scroll_y == 0, "Home: the first row")
        for _ in range(40):
            await pilot.press("pagedown")
            if scroll.scroll_y == scroll.max_scroll_y:
                break
        await pilot_until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y, "PgDn to the last row")
        sel = app.main.playback.sel
        await pilot.press("left")
        await pilot_until(pilot, lambda: app.main.playback.sel == sel - 1, "← the previous token")
        assert app.focused is scroll
        await pilot.press("escape")  # leaves the panel, as it leaves a map
        await pilot_until(pilot, lambda: app.focused is None, "Escape left the panel")


async def test_the_whatif_side_panel_is_reached_and_scrolled_from_the_keyboard(tmp_path):
    """whatif at 120x40: its side panel (the trace, the cursor's numbers, the bounds) runs past
    the screen; Tab reaches it and ↓ scrolls it to its last row while ← / → still move the
    budget cursor."""
    from helpers.screen_cases import SCREENS

    from bmoe_top.tui.widgets.focus import PanelScroll

    app, close, _ready = SCREENS["whatif"](tmp_path)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            side = app.query_one("#wi-side", PanelScroll)
            assert side.max_scroll_y > 0, "the side panel fits: nothing to scroll"
            await tab_to(pilot, app, side, "the side panel")
            assert app.focused is side
            for _ in range(side.max_scroll_y + 1):
                await pilot.press("down")
            await pilot_until(pilot, lambda: side.scroll_y == side.max_scroll_y, "↓ to the last row")
            budget = app.main.budget_mib
            await pilot.press("right")
            await pilot_until(pilot, lambda: app.main.budget_mib > budget, "→ a larger budget")
            await pilot.press("up")
            await pilot_until(pilot, lambda: side.scroll_y == side.max_scroll_y - 1, "↑ a row up")
    finally:
        close()
