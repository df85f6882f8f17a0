"""Typing a prompt into a live screen's prompt box in a Textual pilot (tests/screens)."""

from __future__ import annotations

from typing import Any

from textual.widgets import Input


async def send_prompt(pilot: Any, app: Any, prompt: str, n: int | None = None) -> None:
    """Set the n_predict box to ``n`` (when given), type ``prompt`` into the focused prompt box
    and press Enter."""
    if n is not None:
        app.query_one("#n-predict", Input).value = str(n)
    box = app.query_one("#prompt", Input)
    box.focus()
    box.value = prompt
    await pilot.press("enter")


async def one_turn_in_the_turns_tab(pilot: Any, app: Any, src: Any) -> Any:
    """Once ``src`` (a live source of ``app``) is ready, one short turn (5 tokens) sent and done,
    then the Turns tab shown with its row: its table (a ``SortTable``)."""
    from helpers.waits import pilot_until

    await pilot_until(pilot, lambda: src.state == "ready", "ready")
    await send_prompt(pilot, app, "short", 5)
    await pilot_until(pilot, lambda: src.status().turns_done == 1, "the turn done")
    app.main.action_tab("turns")
    table = app.query_one("#turns-table")
    await pilot_until(pilot, lambda: table.data_table.row_count == 1, "the turn's row")
    return table
