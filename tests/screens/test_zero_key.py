"""``0`` zooms to the whole run (the key table's row) and never moves a selection: not the selected
token of a run screen, not the cursor of a table, from any focus of any screen."""

from __future__ import annotations

import pytest
from helpers.screen_cases import SCREENS
from helpers.waits import pilot_until
from textual.widgets import DataTable

from bmoe_top.tui.playback import Playback


@pytest.mark.parametrize("name", list(SCREENS))
async def test_zero_never_moves_the_selection_from_any_focus(name, tmp_path):
    app, close, ready = SCREENS[name](tmp_path)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
            await pilot.pause()
            screen = app.screen
            pb = getattr(screen, "playback", None)
            for focus in [None, *screen.focus_chain]:
                screen.set_focus(focus)
                await pilot.pause()
                if isinstance(pb, Playback) and pb.n > 3:
                    pb.step(-2)  # a token selected before its end, the window zoomed in
                    pb.zoom(-2)
                    await pilot.pause()
                tables = list(screen.query(DataTable))
                for t in tables:
                    if t.row_count > 1:
                        t.move_cursor(row=1)
                await pilot.pause()
                before = [t.cursor_coordinate for t in tables], getattr(pb, "selected", None)
                await pilot.press("0")
                await pilot.pause()
                after = [t.cursor_coordinate for t in tables], getattr(pb, "selected", None)
                assert after == before, f"{name}, focus {focus!r}: 0 moved the selection {before} -> {after}"
                if isinstance(pb, Playback) and pb.n > 3 and not isinstance(app.focused, DataTable):
                    assert pb.fit, f"{name}, focus {focus!r}: 0 did not zoom to the whole run"
    finally:
        close()
