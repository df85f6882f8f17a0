"""The bmoe-top Textual app: one app, whose first screen is the mode's screen
(``bmoe_top.tui.screens``: replay, live, metrics attach, audit attach).

Data comes in off the UI thread (sources feed the run model under its lock); the mode screen
polls ``run.version`` on a timer and repaints at most ``fps`` times a second, whatever the input
rate.
"""

from __future__ import annotations

from textual.app import App
from textual.screen import Screen

__all__ = ["BmoeTopApp", "CSS"]

#: The layout every mode screen shares (mode screens add their own parts in DEFAULT_CSS).
CSS = """
Screen { layout: vertical; }
#title { height: 1; background: $boost; color: $text; padding: 0 1; }
#body { height: 1fr; }
#side { width: 30%; min-width: 34; max-width: 48; border-right: solid $primary-darken-2; }
#side VerticalScroll { height: 1fr; }
#run-panel-scroll { height: 2fr; }
#answer-side { height: 1fr; border-top: solid $primary-darken-2; }
#main { width: 1fr; }
#grids { height: 1fr; }
LayerHeatmap { width: 1fr; }
ExpertMap { width: 1fr; border-left: solid $primary-darken-2; }
TabbedContent { height: 1fr; width: 1fr; }
TabPane { padding: 0; }
#log-scroll, #problems-scroll, #text-scroll { height: 1fr; }
"""


class BmoeTopApp(App[int]):
    """bmoe-top over one mode screen (``main``): it is the first screen on the stack, so the
    views are queried on it even while a modal or the command palette is open."""

    CSS = CSS
    TITLE = "bmoe-top"

    def __init__(self, main: Screen[None]) -> None:
        super().__init__()
        self.main = main

    def get_default_screen(self) -> Screen[None]:
        return self.main
