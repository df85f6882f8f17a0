"""The keys typed right after ``/`` go into the search box on every screen, from every focus
outside a text box and on every tab, even when they arrive before the box has drawn (a burst of
keys as a terminal delivers fast typing, queued together): ``q`` does not quit, ``p`` and space
do not pause, ``n`` and ``0`` are text (tui/widgets/search.py, ``/`` a priority key)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.screen_cases import SCREENS
from helpers.waits import pilot_until
from textual import events
from textual.widgets import Input, TabbedContent

from bmoe_top.tui.widgets.search import SearchBar

BURST = (("slash", "/"), ("q", "q"), ("p", "p"), ("space", " "), ("n", "n"), ("0", "0"), ("g", "g"))


@pytest.mark.parametrize("name", list(SCREENS))
async def test_keys_typed_right_after_slash_land_in_the_box(name, tmp_path):
    size = (120, 40)
    app, close, ready = SCREENS[name](tmp_path)
    ran: list[str] = []
    dispatch = app._dispatch_action

    async def watched(namespace: Any, action_name: str, params: Any) -> bool:
        ran.append(action_name)
        return True if action_name == "quit" else await dispatch(namespace, action_name, params)

    app._dispatch_action = watched  # type: ignore[method-assign]
    try:
        async with app.run_test(size=size) as pilot:
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
            await pilot.pause()
            screen = app.screen
            tabs = screen.query(TabbedContent)
            panes = [None] + ([p.id for p in tabs.first().query("TabPane") if p.id] if tabs else [])
            for pane in panes:
                if pane is not None:
                    tabs.first().active = pane
                    await pilot.pause()
                focuses = [None, *(w for w in screen.focus_chain if not isinstance(w, Input))]
                for focus in focuses:
                    screen.set_focus(focus)
                    await pilot.pause()
                    ran.clear()
                    for key, char in BURST:  # queued together: none waits for the one before
                        app.post_message(events.Key(key, char))
                    bar = screen.query_one(SearchBar)
                    where = f"{name} {size} tab {pane} focus {focus!r}"
                    await pilot_until(pilot, lambda bar=bar: "search" in ran and bar.box.value == "qp n0g",
                                      f"{where}: the text typed")
                    assert ran == ["search"], f"{where}: ran {ran}"
                    assert app.is_running and app.focused is bar.box
                    await pilot.press("escape")  # clears the query, closes the box
                    await pilot_until(pilot, lambda bar=bar: not bar.editing, f"{where}: the box closed")
    finally:
        close()
