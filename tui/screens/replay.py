"""The replay screen (``bmoe-top replay PATH...``): the shared views over a recorded run, with
playback from its start at the recorded pace or faster."""

from __future__ import annotations

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.base import RunScreen

__all__ = ["ReplayScreen", "run_replay"]


class ReplayScreen(RunScreen):
    """A recorded run: the layout and keys of :class:`~bmoe_top.tui.screens.base.RunScreen`,
    opening on the whole run."""


def run_replay(run: RunModel, title: str, fps: float = 10.0) -> int:
    """Run the replay screen over ``run``; returns the process exit status."""
    app = BmoeTopApp(ReplayScreen(run, title=title, fps=fps))
    app.run()
    return app.return_code or 0
