"""The base of the two network attach screens (``bmoe-top attach --metrics URL`` / ``--audit
FILE``): the shared views over the run model the attach source feeds, following the newest row,
plus a status line under the title (``#attach-status``: the source's state with its reason) and an
attach panel above the run panel (``#attach-panel``: the source's own numbers).

Neither source carries answer text, so the side has no answer tail; the trends keep the three
rows an attach source can fill (tok/s, hit %, MiB/token) and the breakdown shares the height with
the maps, so the layer heatmap stays on screen in a small terminal. Subclasses implement
:meth:`AttachScreen.start_source`, :meth:`AttachScreen.attach_key`, :meth:`AttachScreen.status_text`
and :meth:`AttachScreen.panel_rows`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import label_columns, row_strips

__all__ = ["AttachScreen", "rows_table"]


def rows_table(rows: Sequence[tuple[str, str, str]], look: Look | None = None, width: int = 44) -> Text:
    """``bmoe_top.tui.present`` rows (label, value, kind) laid out like the run panel's for a panel
    ``width`` cells wide (:func:`~bmoe_top.tui.widgets.panels.row_strips`): every label whole (on
    a line of its own when wider than its column), each value wrapped under its own column."""
    look = look or Look()
    width = max(20, width)
    lw, vw = label_columns(rows, width)
    lines = [Text.assemble(*((seg.text, seg.style or "") for seg in strip))
             for row in rows for strip in row_strips(*row, width, lw, vw, look)]
    return Text("\n").join(lines)


class AttachScreen(RunScreen):
    """:class:`~bmoe_top.tui.screens.base.RunScreen` over an attach source's run model (see the
    module docstring)."""

    DEFAULT_CSS = """
    #attach-status { height: auto; max-height: 3; padding: 0 1; background: $panel; }
    #attach-panel { height: auto; padding: 0 1; border-bottom: solid $primary-darken-2; }
    #breakdown { height: 1fr; min-height: 7; max-height: 14; }
    """
    SHOW_ANSWER = False

    def __init__(self, run: RunModel, title: str, fps: float = 10.0) -> None:
        super().__init__(run, title=title, fps=fps, follow=True)
        self._attach_key: Hashable = None

    # -- subclass hooks --------------------------------------------------------------------------
    def start_source(self) -> None:
        """Start the source's thread (called once, on mount)."""

    def attach_key(self) -> Hashable:
        """Changes whenever the status line or the attach panel must be redrawn."""
        return self.model.version

    def status_text(self) -> Text:
        return Text(self.model.status)

    def status_word(self) -> str:
        return str(self.model.status)

    def panel_rows(self) -> Sequence[tuple[str, str, str]]:
        return []

    # -- layout and repaint ---------------------------------------------------------------------
    def compose_status(self) -> ComposeResult:
        yield Static(id="attach-status")

    def compose_side(self) -> ComposeResult:
        yield Static(id="attach-panel")

    def on_mount(self) -> None:
        self.start_source()

    def after_mount(self) -> None:
        self.update_attach(force=True)

    FOLLOWS_ROWS = True  # a scrape or a record is a few rows a second at most

    def tick(self) -> None:
        """The shared tick; the status line and the attach panel follow the data at once (a
        scrape or an audit record is a few a second at most), like the title."""
        seen = self.clock.seen
        super().tick()
        if self.clock.seen is not seen:
            self.update_attach()

    def refresh_views(self, force: bool = False) -> None:
        super().refresh_views(force)
        self.update_attach(force)

    def update_attach(self, force: bool = False) -> None:
        if not self.is_attached or not self.query("#attach-status"):
            return  # before compose / during teardown
        key = (self.attach_key(), self.query_one("#attach-panel", Static).content_region.width)
        if key == self._attach_key and not force:
            return
        self._attach_key = key
        line = self.query_one("#attach-status", Static)
        line.set_class(self.model.status != Status.OK, "-problem")  # the compact layout shows it then
        line.update(self.status_text())
        panel = self.query_one("#attach-panel", Static)
        panel.update(rows_table(self.panel_rows(), look_of(self), panel.content_region.width or 44))
