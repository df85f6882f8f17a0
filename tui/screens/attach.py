"""The base of the two network attach screens (``bmoe-top attach --metrics URL`` /
``--audit FILE``): the replay screen (:class:`~bmoe_top.tui.app.BmoeTopApp`) over the run model
the attach source feeds, following the newest row, plus what an attach needs beyond it:

* a status line under the title (``#attach-status``): the source's connection state with its
  reason, in the words and colours of :data:`STATUS_WORDS` / :data:`STATUS_STYLE`;
* an attach panel (``#attach-panel``) above the run panel, for the source's own numbers
  (scrape counters, audit runs) that are not run-model fields.

The side answer tail is hidden (neither source carries answer text); the trends keep their three
rows an attach source can fill (tok/s, hit %, MiB/token) and the breakdown shares the height with
the grids, so the layer heatmap stays on screen in a small terminal. Subclasses implement
:meth:`AttachApp.start_source`, :meth:`AttachApp.attach_key`, :meth:`AttachApp.status_text` and
:meth:`AttachApp.panel_renderable`.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.run import RunModel

__all__ = ["AttachApp", "STATUS_STYLE", "STATUS_WORDS"]

STATUS_STYLE = {
    "ok": "bold #98c379", "connecting": "bold #e5c07b", "waiting": "bold #e5c07b",
    "unreachable": "bold #e06c75", "unauthorized": "bold #e06c75", "malformed": "bold #d19a66",
    "error": "bold #e06c75",
}
STATUS_WORDS = {
    "ok": "● connected", "connecting": "… connecting", "unreachable": "✖ unreachable",
    "unauthorized": "✖ unauthorized", "malformed": "⚠ malformed answer", "error": "✖ cannot poll",
}

ATTACH_CSS = """
#attach-status { height: auto; max-height: 3; padding: 0 1; background: $panel; }
#attach-panel { height: auto; padding: 0 1; border-bottom: solid $primary-darken-2; }
#answer-side { display: none; }
#breakdown { height: 1fr; min-height: 7; max-height: 14; }
#trends { height: 3; }
#grids { height: 1fr; min-height: 6; }
#requests { height: 1fr; }
"""


class AttachApp(BmoeTopApp):
    """:class:`BmoeTopApp` over an attach source's run model (see the module docstring)."""

    CSS = BmoeTopApp.CSS + ATTACH_CSS

    def __init__(self, run: RunModel, title: str, fps: float = 10.0) -> None:
        super().__init__(run, title=title, fps=fps, follow=True)
        self._attach_key: Any = None
        self._attach_status: Static | None = None
        self._attach_panel: Static | None = None

    # -- subclass hooks -------------------------------------------------------------------------
    def start_source(self) -> None:
        """Start the source's thread (called once, on mount)."""

    def attach_key(self) -> Any:
        """Changes whenever the status line or the attach panel must be redrawn."""
        return self.model.version

    def status_text(self) -> Text:
        return Text(self.model.status)

    def panel_renderable(self) -> Any:
        return ""

    # -- layout and repaint ---------------------------------------------------------------------
    async def on_mount(self) -> None:
        # kept as references: query_one searches the active screen, which is another one
        # while the command palette or a modal is open
        self._attach_status = Static(id="attach-status")
        self._attach_panel = Static(id="attach-panel")
        await self.mount(self._attach_status, after=self.query_one("#title"))
        await self.query_one("#run-panel-scroll").mount(self._attach_panel, before=self.query_one("#run-panel"))
        await self.mount_extra()
        self.start_source()
        self.update_attach(force=True)
        # BmoeTopApp.on_mount runs after this one (Textual dispatches on_mount along the MRO)

    async def mount_extra(self) -> None:
        """Mount subclass widgets (e.g. a tab) before the source starts."""

    def refresh_views(self, force: bool = False) -> None:
        super().refresh_views(force)
        self.update_attach(force)

    def update_attach(self, force: bool = False) -> None:
        if self._attach_status is None or not self._attach_status.is_attached:
            return  # before mount / during teardown
        key = self.attach_key()
        if key == self._attach_key and not force:
            return
        self._attach_key = key
        self._attach_status.update(self.status_text())
        self._attach_panel.update(self.panel_renderable())
