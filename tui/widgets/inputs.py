"""Text boxes of the run screens."""

from __future__ import annotations

from typing import Any

from textual.widgets import Input

__all__ = ["SteadyInput"]


class SteadyInput(Input):
    """An :class:`~textual.widgets.Input` whose cursor does not blink, as in htop's and less's
    prompts: a blinking cursor repaints the screen twice a second while nothing else moves."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.cursor_blink = False
