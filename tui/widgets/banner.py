"""The alert banner: one line under the title that says at once what a person must know about the
run (a file that is not a recorded run, files of different runs loaded together, a recording that
stopped on a write error). It shows the newest of ``RunModel.alerts`` and how many there are; it
takes no room while there is none. The text is the run model's (already safe to draw)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from bmoe_top.tui.model import RunModel

__all__ = ["Banner", "banner_text"]


def banner_text(alerts: Sequence[str], total: int, listed: bool = False) -> str:
    """The banner's one line: the newest alert, and how many more (``""`` when none); ``listed``:
    the newest sums up lines the Problems tab (key 4, which lists every alert too) names one by one."""
    if not alerts:
        return ""
    more = total - 1
    if more > 0:
        return f"⚠ {alerts[-1]}  (+{more} more: 4 lists them)"
    return f"⚠ {alerts[-1]}" + (" (4 lists them)" if listed else "")


class Banner(Static):
    """One line of the newest alert of ``run`` (hidden while there is none); call
    :meth:`update_from_run` from the screen's repaint."""

    DEFAULT_CSS = """
    Banner { height: 1; padding: 0 1; background: $error 30%; color: $text; text-style: bold; display: none; }
    Banner.-shown { display: block; }
    """

    def __init__(self, run: RunModel, **kw: Any) -> None:
        super().__init__("", **kw)
        self.run = run
        self._key = -1

    def update_from_run(self, force: bool = False) -> None:
        """Show the newest alert (on a change of the alerts, or always when ``force``)."""
        with self.run.lock:
            key = self.run.alert_count
            alerts = self.run.alerts
        if key == self._key and not force:
            return
        self._key = key
        line = banner_text(alerts, key, bool(alerts) and self.run.alert_listed(alerts[-1]))
        self.set_class(bool(line), "-shown")
        self.update(Text(line, no_wrap=True, overflow="ellipsis"))
