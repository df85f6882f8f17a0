"""Modal screens every mode shares: seek to a token, and the key help."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

__all__ = ["HelpScreen", "SeekScreen"]


class SeekScreen(ModalScreen[int | None]):
    """Ask for a token number to seek to."""

    DEFAULT_CSS = """
    SeekScreen { align: center middle; }
    #seek-box { width: 44; height: auto; border: round $primary; padding: 1 2; background: $surface; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def compose(self) -> ComposeResult:
        with Vertical(id="seek-box"):
            yield Label(f"Seek to token (1–{self.n}):" if self.n else "Seek to token (none yet):")
            yield Input(placeholder="token number", id="seek-input", type="integer")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(int(event.value))
        except ValueError:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


HELP_FOOTNOTE = (
    "\n\nBreakdown: wall = compute + flash wait + mgmt per token; flash wait is io_ms in"
    "\nserial runs and stall_ms under overlap (io_ms is lane-busy time there)."
    "\nHeatmaps use fixed colour scales; · marks a cell with no data."
)


class HelpScreen(ModalScreen[None]):
    """Every key the screen understands: ``rows`` of (keys, what they do)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 72; height: auto; max-height: 90%; border: round $primary; padding: 1 2;
                background: $surface; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss_help", "close")]

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        text = "bmoe-top keys\n\n" + "\n".join(f"  {k:<22} {d}" for k, d in self.rows) + HELP_FOOTNOTE
        with VerticalScroll(id="help-box"):
            yield Static(text)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
