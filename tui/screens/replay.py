"""The replay screen (``bmoe-top replay PATH...``): the shared views over a recorded run, with
playback from its start at the recorded pace or faster; a session's files add a Turns tab (every
request in order: its turn's numbers, its prompt, or why it has no turn)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import TabPane

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.tables import text_table
from bmoe_top.tui.present.turns import TURN_TABLE, is_session, turn_list, turn_rows
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.widgets.tables import SortTable

__all__ = ["ReplayScreen", "run_replay"]


class ReplayScreen(RunScreen):
    """A recorded run: the layout and keys of :class:`~bmoe_top.tui.screens.base.RunScreen`,
    opening on the whole run; a session (several turns, request ids, prompts or refused
    requests) gets a Turns tab (key 5)."""

    DEFAULT_CSS = """
    #turns-table { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("5", "turns_tab", "turns (a session)", show=False),
    ]

    def __init__(self, run: RunModel, *, title: str = "", fps: float = 10.0, refresh: float | None = None,
                 follow: bool = False) -> None:
        super().__init__(run, title=title, fps=fps, refresh=refresh, follow=follow)
        entries = turn_list(run)  # a replay's files are loaded before its screen: its turns are known
        self._turn_rows = turn_rows(entries) if is_session(entries) else []

    def compose_tabs(self) -> ComposeResult:
        if self._turn_rows:
            yield TabPane("Turns", SortTable(text_table("turns", TURN_TABLE, self._turn_rows), id="turns-table"),
                          id="turns")

    def commands(self) -> list[tuple[str, str, Any]]:
        out = super().commands()
        if self._turn_rows:
            out.append(("Tab: Turns", "5", self.action_turns_tab))
        return out

    def action_turns_tab(self) -> None:
        if self._turn_rows:
            self.action_tab("turns")


def run_replay(run: RunModel, title: str, fps: float = 10.0) -> int:
    """Run the replay screen over ``run``; returns the process exit status."""
    app = BmoeTopApp(ReplayScreen(run, title=title, fps=fps))
    app.run()
    return app.return_code or 0
