"""Modals of the analysis screens: ask for a file path (write a profile), and the keys help with
what the screen's numbers mean."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Static

from bmoe_top.tui.screens.modals import help_body
from bmoe_top.tui.widgets.panels import safe_text

__all__ = ["PathScreen", "AnalysisHelp", "leave"]


def leave(screen: Screen[None]) -> None:
    """``q`` on an analysis screen: back to the screen it was opened from (the sweep's), else
    the app ends."""
    if screen is not getattr(screen.app, "main", screen):
        screen.app.pop_screen()
    else:
        screen.app.exit()


class PathScreen(ModalScreen[str | None]):
    """Ask for a path (``prompt``, prefilled with ``default``); Enter answers, escape cancels."""

    DEFAULT_CSS = """
    PathScreen { align: center middle; }
    #path-box { width: 70; max-width: 95%; height: auto; border: round $primary; padding: 1 2;
                background: $surface; }
    #path-prompt { width: 100%; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, default: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="path-box"):
            yield Static(safe_text(self.prompt), id="path-prompt")  # wraps in the box (a Label is cut)
            yield Input(value=self.default, id="path-input")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class AnalysisHelp(ModalScreen[None]):
    """The screen's keys (``rows`` of (keys, what)) and ``notes`` on what its numbers mean."""

    DEFAULT_CSS = """
    AnalysisHelp { align: center middle; }
    #analysis-help { width: 90; max-width: 95%; height: auto; max-height: 90%; border: round $primary;
                     padding: 1 2; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "close", "close")]

    def __init__(self, title: str, rows: list[tuple[str, str]], notes: str) -> None:
        super().__init__()
        self.title_text = title
        self.rows = rows
        self.notes = notes

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="analysis-help"):
            yield Static(help_body(self.title_text, self.rows, self.notes), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)

