"""Modal screens every mode shares: seek to a token, the key help, and the breakdown mode's
contract detail."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from bmoe_top.parsers.sanitize import sanitize

__all__ = ["HelpScreen", "ModeScreen", "SeekScreen", "help_body", "prose_lines"]


def prose_lines(notes: str) -> list[str]:
    """``notes`` as written in the code (lines wrapped near 100 columns) as its logical lines, for
    the screen to wrap at its own width: a line joins the one before it unless that one ends a
    sentence (``.``) or is blank; a blank line stays (a paragraph's end)."""
    out: list[str] = []
    joining = False
    for line in notes.strip("\n").splitlines():
        text = line.strip()
        if not text:
            out.append("")
            joining = False
        elif joining:
            out[-1] += " " + text
        else:
            out.append(text)
        joining = bool(text) and not text.endswith(".")
    return out


def help_body(title: str, rows: list[tuple[str, str]], notes: str) -> RenderableType:
    """A help screen's text: the title, the key rows (the keys in a column as wide as the widest,
    what they do wrapped beside them) and the notes' logical lines (:func:`prose_lines`), all
    wrapped at word boundaries at the width the box gets, every terminal from 80x24 to 200x60."""
    keys = Table.grid(padding=(0, 1), expand=False)
    keys.add_column(no_wrap=True, min_width=min(24, max((len(k) for k, _ in rows), default=0)))
    keys.add_column(overflow="fold")
    for k, d in rows:
        keys.add_row(Text(sanitize(k)), Text(sanitize(d)))
    prose = Text("\n".join(sanitize(line) for line in prose_lines(notes)), overflow="fold")
    return Group(Text(sanitize(title)), Text(), keys, Text(), prose)


class SeekScreen(ModalScreen[int | None]):
    """Ask for a token number to select."""

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


HELP_FOOTNOTE = """
State (title): ● live (following the newest token; slow motion trails it and catches up),
❚❚ paused, ▶ replay at its speed, ▶ playing a recording (bmoe-top play), ■ ended,
✖ disconnected. End returns to live, in real time.

Overview, top to bottom on one token axis (column j is the same tokens in each):
the whole run (the window marked under it), wall = compute + flash wait + mgmt per token,
the trends, and the layer x token hit share; then the layer x expert map as of the
selected token. Zoomed out, a column is the mean of its tokens.

Maps: Tab moves the focus to a map (its title is marked); the arrows move its cell cursor;
Escape leaves it; the mouse hovers and clicks. Fixed colour scales (c: viridis / cividis /
classic); · marks a cell with no data; a full cell is a resident expert, a dot one that is not.
v: the layer x expert map's memory tiers instead, each cell the page-cache share of its misses
(the scale's bottom: all from disk), ○ no miss, ? misses without a tier (the prompt's)."""


class HelpScreen(ModalScreen[None]):
    """Every key the screen understands: ``rows`` of (keys, what they do)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help-box { width: 90; max-width: 100%; height: auto; max-height: 90%; border: round $primary;
                padding: 1 2; background: $surface; }
    """
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss_help", "close")]

    def __init__(self, rows: list[tuple[str, str]], notes: str = HELP_FOOTNOTE, title: str = "bmoe-top keys") -> None:
        super().__init__()
        self.rows = rows
        self.notes = notes
        self.title_text = title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_body(self.title_text, self.rows, self.notes), id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


MODE_DETAIL = {
    "overlap": (
        "Under --overlap the runtime reads experts on I/O lanes while it computes. io_ms is then\n"
        "lane-busy time (it can exceed wall_ms and is never stacked on wall); the flash wait in\n"
        "the breakdown is stall_ms, the time the token really waited for flash.\n"
        "wall = compute + stall + mgmt."),
    "serial": (
        "Without overlap every expert read blocks the token: the flash wait is io_ms.\n"
        "wall = compute + io + mgmt."),
    "unknown": "No token rows and no stall figure: the breakdown is drawn as serial.",
}


class ModeScreen(ModalScreen[None]):
    """The breakdown mode: in plain words, how it was decided, and the contract's definition
    (docs/telemetry.md "The contract as bmoe-run writes it")."""

    DEFAULT_CSS = """
    ModeScreen { align: center middle; }
    #mode-box { width: 92; max-width: 100%; height: auto; border: round $primary; padding: 1 2;
                background: $surface; }
    """
    BINDINGS = [Binding("escape,q,d", "dismiss_mode", "close")]

    def __init__(self, mode: str, words: str, why: str) -> None:
        super().__init__()
        self.mode, self.words, self.why = mode, words, why

    def compose(self) -> ComposeResult:
        text = (f"{self.words}\n\ndecided from: {sanitize(self.why)}\n\n{MODE_DETAIL.get(self.mode, '')}\n\n"
                "compute is the compute_ms column when the source sends it, else the residual\n"
                "wall - flash wait - mgmt. mgmt is cache management (page commits, evictions, LRU\n"
                "bookkeeping). docs/telemetry.md, \"The contract as bmoe-run writes it\".")
        with Vertical(id="mode-box"):
            yield Static(text, markup=False)

    def action_dismiss_mode(self) -> None:
        self.dismiss(None)
