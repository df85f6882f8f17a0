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
