"""Every key of every screen from every focus (tui/widgets/keymap.py): for each screen (live over
the emitter, replay, attach --metrics, attach --audit, attach --pid (memory), whatif, compare,
sweep, fleet and its drill-down),
each widget Tab can reach on each of its tabs (and no focus), and each key of that screen's table,
pressing the key runs the action the table says (and only it), or, where the key types into a
focused text box, no action of the screen. The cases come from the tables: a key added to a table
is tested here without a new line.

The app's action dispatch is watched (every action that runs is recorded, then run); ``quit``
and ``app.screenshot`` are recorded and not run (they end the app or write a file: each has its
own tests)."""

from __future__ import annotations

import ast
from typing import Any

import pytest
from helpers.screen_cases import SCREENS
from helpers.waits import pilot_until
from textual.widget import Widget
from textual.widgets import DataTable, Input, TabbedContent

from bmoe_top.tui.widgets.fleet_table import FleetTableView
from bmoe_top.tui.widgets.focus import PanelScroll
from bmoe_top.tui.widgets.grids import GridView
from bmoe_top.tui.widgets.keymap import Key, parse_action
from bmoe_top.tui.widgets.search import SearchBar
from bmoe_top.tui.widgets.tables import SortTable

#: Actions recorded but not run (they end the app or write a file; tested elsewhere).
NOT_RUN = frozenset({"quit", "screenshot", "write_profile"})
SIZE = (120, 40)


def _scope_of(widget: Widget | None) -> str | None:
    """The key scope a focused widget answers in (None: the screen's keys only)."""
    if isinstance(widget, GridView):
        return "map"
    if isinstance(widget, FleetTableView):
        return "fleet-table"
    if isinstance(widget, PanelScroll):
        return "panel"
    if widget is not None and any(isinstance(a, (SortTable, DataTable)) for a in widget.ancestors_with_self):
        return "table"
    return None


def expected(table: tuple[Key, ...], key: str, focus: Widget | None) -> Key | None:
    """The row of ``table`` that answers ``key`` with ``focus`` focused (None: no action of the
    screen, the key types into a text box or nothing answers it)."""
    rows = [k for k in table if key in k.names]
    for k in rows:
        if k.scope == "anywhere":
            return k
    if isinstance(focus, Input):
        return None
    scope = _scope_of(focus)
    for k in rows:
        if k.scope == scope:
            return k
    for k in rows:
        if k.scope in ("screen", "focus"):
            return k
    return None


def _params(args: str) -> tuple[Any, ...]:
    return ast.literal_eval(f"({args},)") if args else ()


async def _settle(pilot, app, screen, focus, tabs: dict[TabbedContent, str], values: dict[Input, str]) -> None:
    """Back to the state a key is pressed in: no modal, the tab, the text boxes' text, the focus
    (a pause only when something had to change)."""
    changed = False
    while app.screen is not screen and len(app.screen_stack) > 1:
        app.pop_screen()
        changed = True
    for bar in screen.query(SearchBar):
        if bar.editing:
            bar.close()
            changed = True
    for tc, active in tabs.items():
        if tc.active != active:
            tc.active = active
            changed = True
    for box, value in values.items():
        if box.value != value:
            box.value = value
    if changed:
        await pilot.pause()
    if app.focused is not focus:
        if focus is None:
            screen.set_focus(None)
        else:
            focus.focus()
        await pilot.pause()


@pytest.mark.parametrize("name", list(SCREENS))
async def test_every_key_does_its_action_from_every_focus(name, tmp_path):
    app, close, ready = SCREENS[name](tmp_path)
    ran: list[tuple[str, str, tuple[Any, ...]]] = []
    dispatch = app._dispatch_action

    async def watched(namespace: Any, action_name: str, params: Any) -> bool:
        ran.append((type(namespace).__name__, action_name, tuple(params)))
        if action_name in NOT_RUN:
            return True
        return await dispatch(namespace, action_name, params)

    app._dispatch_action = watched  # type: ignore[method-assign]
    failures: list[str] = []
    tested = 0
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
            await pilot.pause(0.2)
            screen = app.screen
            table: tuple[Key, ...] = type(screen).KEYS
            keys = sorted({n for k in table for n in k.names})
            all_tabs = list(screen.query(TabbedContent))
            panes = [(tc, [p.id for p in tc.query("TabPane") if p.id]) for tc in all_tabs]
            states = [({tc: tc.active for tc in all_tabs}, True)]
            for tc, ids in panes:
                for pid in ids:
                    if pid != tc.active:
                        states.append(({**{t: t.active for t in all_tabs}, tc: pid}, False))
            values = {box: box.value for box in screen.query(Input)}
            for tabs, with_none in states:
                await _settle(pilot, app, screen, None, tabs, values)
                focuses: list[Widget | None] = ([None] if with_none else []) + [
                    w for w in screen.focus_chain if not (isinstance(w, Input) and "search" in (w.id or ""))]
                for focus in focuses:
                    for key in keys:
                        await _settle(pilot, app, screen, focus, tabs, values)
                        ran.clear()
                        want = expected(table, key, focus)
                        if want is not None:
                            ns, act, args = parse_action(want.action)
                            node = app if ns == "app" else screen
                            if node.check_action(act, _params(args)) is False:
                                want = None  # not offered here (a recording has no chat to cancel)
                        await pilot.press(key)
                        where = f"{name} tab {sorted(tabs.values())} focus {focus!r} key {key!r}"
                        if want is None:
                            mine = [r for r in ran if r[0] == type(screen).__name__]
                            if mine:
                                failures.append(f"{where}: expected no screen action, ran {mine}")
                        else:
                            _ns, act, args = parse_action(want.action)
                            got = [(a, p) for _n, a, p in ran]
                            if got[:1] != [(act, _params(args))] or len(got) > 1 and act not in ("help", "seek"):
                                failures.append(f"{where}: expected {want.action}, ran {ran}")
                        tested += 1
    finally:
        close()
    assert not failures, f"{len(failures)} of {tested} cases:\n" + "\n".join(failures[:40])
    assert tested >= len(keys)


@pytest.mark.parametrize("name", list(SCREENS))
async def test_tab_visits_only_shown_maps_tables_and_boxes(name, tmp_path):
    """On every screen and each of its tabs, nothing has the focus at the start but the widget the
    screen focuses itself (the fleet's table, the live prompt box), and Tab stops only at a map, a
    table, a text box or the run panel's column drawn on screen: never a tab bar (it takes the
    arrows) nor another scrolling container (a stop with no mark)."""
    app, close, ready = SCREENS[name](tmp_path)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
            await pilot.pause()
            screen = app.screen
            start = screen.focused
            assert start is None or isinstance(start, (Input, FleetTableView)), f"{name} starts on {start!r}"
            tabs = list(screen.query(TabbedContent))
            states = [None] + [(tc, p.id) for tc in tabs for p in tc.query("TabPane") if p.id]
            for state in states:
                if state is not None:
                    state[0].active = state[1]
                    await pilot.pause()
                seen = []
                for _ in range(len(screen.focus_chain) + 1):
                    await pilot.press("tab")
                    await pilot.pause()
                    w = screen.focused
                    if w is None:
                        continue
                    seen.append(w)
                    assert isinstance(w, (GridView, DataTable, Input, FleetTableView, PanelScroll)) \
                        or _scope_of(w) == "table", \
                        f"{name} {state}: Tab stopped at {w!r}"
                    assert w.is_on_screen and w.region.width > 0 and w.region.height > 0, f"{name}: {w!r} not shown"
    finally:
        close()


@pytest.mark.parametrize("name", list(SCREENS))
async def test_every_screen_has_the_one_search_and_its_next_and_previous_match(name, tmp_path):
    """``/``, ``n`` and ``N`` are the same rows of every screen's table (tui/widgets/search.py):
    the exhaustive test above then presses each from every focus."""
    from bmoe_top.tui.widgets.search import SEARCH_KEYS

    app, close, ready = SCREENS[name](tmp_path)
    try:
        async with app.run_test(size=(80, 24)) as pilot:  # started, so that close() ends what it started
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
        table = type(app.main).KEYS
        for key in SEARCH_KEYS:
            assert key in table, f"{name}: {key.keys} is not the shared search key"
        assert [k for k in table if set(k.names) & {"slash", "n", "N"}] == list(SEARCH_KEYS)
    finally:
        close()
