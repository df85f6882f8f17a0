"""The base of every line-API view over a run model and a playback cursor: its look, its frame
cache, the repaint test, and "no data yet" told apart from "this source never sends it".

A view is driven by a :class:`~bmoe_top.tui.model.RunModel` and a
:class:`~bmoe_top.tui.playback.Playback` only (not by a screen): any screen can compose it. The
screen calls :meth:`RunView.poll` on its repaint timer; a view repaints only when what it draws
from changed (:meth:`RunView.frame_key`), and a view that is expensive to draw may set
:attr:`RunView.min_interval` to repaint at most that often while the data streams.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from bmoe_top.tui.model import RowUnit, RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.settings import Settings
from bmoe_top.tui.widgets.lines import FrameCache, MemoTruecolor, blank
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.sizing import Need

__all__ = ["DEFAULT_LOOK", "FrameKey", "NeedChanged", "RunView", "absent_phrase", "ascii_cells", "ascii_strip",
           "ascii_text", "look_of", "remember", "settings_of", "truecolor_filters"]

DEFAULT_LOOK = Look()

#: The ASCII look's stand-ins for the typography in labels and readouts (one cell for one, so the
#: columns stay aligned); anything else outside ASCII becomes ``?``.
_ASCII = str.maketrans({
    "→": ">", "←": "<", "–": "-", "—": "-", "×": "x", "·": ".", "…": ".", "°": "o", "▲": "^", "▼": "v",
    "µ": "u", "≥": ">", "≤": "<", "“": '"', "”": '"', "‘": "'", "’": "'", "▸": ">", "│": "|", "─": "-",
    "└": "+", "┊": ":", "╰": "`", "╯": "'", "█": "#", "●": "o", "■": "#", "❚": "|", "▶": ">", "◀": "<",
    "Δ": "d", "±": "+", "≈": "~", "•": "*", "┤": "+", "┬": "+", "├": "+", "┼": "+", "┄": "-", "╎": "!",
    "┆": ":", "▕": "]", "▏": "|", "▎": "|", "░": ":", "▒": "=", "▓": "#", "✚": "+", "○": "@", "□": "=",
    "◇": "%", "★": "*", "◆": "&", "✖": "x", "↑": "^", "↓": "v", "┌": "+", "┐": "+", "┘": "+", "━": "-",
    "┃": "|", "╭": "+", "╮": "+", "⏎": "<", "⇥": ">", "−": "-", "‐": "-", "‑": "-", "‒": "-", "⁄": "/",
    "√": "v", "÷": "/", "∞": "8", "⚠": "!", "✔": "v", "✓": "v",
})


def _ascii(s: str) -> str:
    return s if s.isascii() else s.translate(_ASCII).encode("ascii", "replace").decode("ascii")


def ascii_cells(text: str) -> str:
    """``text`` in ASCII that takes the same cells: each character its stand-in (``?`` when it
    has none), a wide one two, a zero-width one none."""
    if text.isascii():
        return text
    out = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
            continue
        w = cell_len(ch)
        if w:
            sub = _ascii(ch)
            out.append((sub if len(sub) == 1 else "?") * w)
    return "".join(out)


def ascii_text(text: Text) -> Text:
    """A copy of ``text`` with only ASCII characters, one for one (its styles stay in place)."""
    out = text.copy()
    if not out.plain.isascii():
        out.plain = "".join(_ascii(ch) if len(_ascii(ch)) == 1 else "?" for ch in out.plain)
    return out


def ascii_strip(line: Strip) -> Strip:
    """``line`` with only ASCII text (the ASCII look: a terminal or locale without UTF-8)."""
    if all(seg.text.isascii() for seg in line):
        return line
    segs = [seg if seg.text.isascii() else Segment(_ascii(seg.text), seg.style, seg.control) for seg in line]
    return Strip(segs)


def look_of(widget: Widget) -> Look:
    """The look of the app ``widget`` runs in (the default look outside an app: unit tests)."""
    own: Look | None = getattr(widget, "_look", None)
    if own is not None:
        return own
    try:
        app = widget.app
    except Exception:  # not mounted: no active app
        return DEFAULT_LOOK
    look = getattr(app, "look", None)
    return look if isinstance(look, Look) else DEFAULT_LOOK


def settings_of(widget: Widget) -> Settings:
    """The settings of the app ``widget`` runs in (the defaults outside one)."""
    try:
        got = getattr(widget.app, "settings", None)
    except Exception:  # not mounted: no active app
        return Settings()
    return got if isinstance(got, Settings) else Settings()


def remember(widget: Widget, name: str, value: Any) -> None:
    """Keep setting ``name`` (``"section.key"``) = ``value`` through the app ``widget`` runs in
    (``BmoeTopApp.remember``); nothing outside one."""
    try:
        keep = getattr(widget.app, "remember", None)
    except Exception:
        return
    if callable(keep):
        keep(name, value)


def truecolor_filters(look: Look, filters: Sequence[LineFilter]) -> Sequence[LineFilter]:
    """The app's line ``filters`` for a widget of ours drawing in ``look``: in the truecolor look
    without the ANSI-to-truecolor one. Every style our line-API widgets draw with there is a
    truecolor colour or none, which that filter returns as it is, after a walk over every segment
    of every line of every frame (tests/widgets/test_truecolor_views.py)."""
    if look.colors != "truecolor":
        return filters
    return [f for f in filters if not isinstance(f, (MemoTruecolor, ANSIToTruecolor))]


def absent_phrase(run: RunModel, what: str) -> str:
    """How to say that ``what`` is not there: not yet (a live source that may still send it) or
    never (a file, or a source that has no such data)."""
    if run.status.live:
        return f"no {what} yet"
    return f"no {what} in this source"


@dataclass(frozen=True, slots=True)
class FrameKey:
    """What a view's frame is drawn from: the run's ``version`` (rows added), the playback
    ``cursor``, and the rest of what it reads (``view``: the selection, the zoom, the look, and
    what a view adds with :meth:`extended`)."""

    version: int
    cursor: int
    view: tuple[Hashable, ...]

    def extended(self, *more: Hashable) -> FrameKey:
        """This key with a view's own state (its fold, its cell cursor, ...) added."""
        return replace(self, view=(*self.view, *more))

    def only_data(self, old: FrameKey, following: bool) -> bool:
        """Whether only the data moved since ``old``: the run's version, and the cursor while it
        ``following`` the newest row (nothing the user moves)."""
        return self.view == old.view and (self.cursor == old.cursor or following)


class NeedChanged(Message):
    """A view's :meth:`RunView.need` changed (it got data, or lost it): its column shares its
    rows again."""


class RunView(Widget):
    """A view of ``run`` at ``playback`` (see the module docstring). Subclasses implement
    :meth:`build` and may extend :meth:`frame_key`; in a column of views
    (:class:`~bmoe_top.tui.widgets.stack.PanelStack`) :meth:`need` says the rows it asks for."""

    #: Repaint at most this often (seconds) while the data changes (0: every poll).
    min_interval = 0.0
    #: The panel group the ``[panels]`` settings and their keys hide or show ("": always shown).
    group = ""

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self.frame = FrameCache(self._build_frame)
        self._look: Look | None = None
        self._polled: FrameKey | None = None
        self._painted_at = 0.0
        self._retry: Timer | None = None  # a repaint held back by min_interval, due when it ends
        self._need_key: Hashable = None
        #: how many times :meth:`need_key` changed (a screen that polls its views fits their
        #: column when this moved, in the same repaint as the polls)
        self.need_changes = 0

    @property
    def look(self) -> Look:
        return look_of(self)

    def set_look(self, look: Look | None) -> None:
        """Draw with ``look`` instead of the app's (None: the app's again)."""
        self._look = look
        self.frame.invalidate()
        self.refresh()

    # -- what a frame depends on -------------------------------------------------------------------
    def frame_key(self) -> FrameKey:
        """What this view's frame is drawn from (a view adds its own state with
        :meth:`FrameKey.extended`)."""
        pb = self.playback
        return FrameKey(self.run.version, pb.cursor,
                        (pb.selected, pb.per_col, pb.fit, pb.view_end, pb.follow, pb.playing, self.look))

    def poll(self, force: bool = False) -> bool:
        """Repaint when what this view draws from changed; returns True when it did."""
        key = self.frame_key()
        if key == self._polled and not force:
            return False
        now = time.monotonic()
        if not force and self.min_interval and now - self._painted_at < self.min_interval \
                and self._only_data_changed(key):
            # waits for the interval, then paints what it draws from by then, also when nothing
            # polls it again (a run that ended stops the screen's polls)
            if self._retry is None:
                self._retry = self.set_timer(self.min_interval - (now - self._painted_at), self._poll_again)
            return False
        self._polled = key
        self._painted_at = now
        self.refresh()
        need_key = self.need_key()
        if need_key != self._need_key:
            self._need_key = need_key
            self.need_changes += 1
            self.post_message(NeedChanged())
        return True

    def _poll_again(self) -> None:
        self._retry = None
        self.poll()

    # -- the rows it asks for -----------------------------------------------------------------------
    def need(self, compact: bool, first: bool = False) -> Need:
        """The rows this view asks for in a column of views (:mod:`~bmoe_top.tui.widgets.sizing`);
        ``compact``: the compact layout; ``first``: it is the map the user keeps when only one
        fits. By default: one row."""
        return Need(1, 1)

    def need_key(self) -> Hashable:
        """What :meth:`need` depends on besides the layout (a change re-shares the column)."""
        return None

    def fit_rows(self, rows: int) -> None:
        """The column gave this view ``rows`` rows (a view that draws differently by its height
        adapts here)."""

    def _only_data_changed(self, key: FrameKey) -> bool:
        """True when only the data moved since the last painted key: the run's version, and the
        cursor while it follows the newest row (the user did not move anything): such repaints may
        wait for :attr:`min_interval`. A slow-motion view that trails the newest row moves its
        cursor on its own: every view follows it at once (one viewed row on the whole screen)."""
        old = self._polled
        if old is None:
            return False
        pb = self.playback
        return key.only_data(old, following=pb.follow and not pb.behind)

    @property
    def row_unit(self) -> RowUnit:
        return self.run.row_unit

    # -- drawing ------------------------------------------------------------------------------------
    def build(self, width: int, height: int) -> list[Strip]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _build_frame(self, width: int, height: int) -> list[Strip]:
        lines = self.build(width, height)
        return [ascii_strip(ln) for ln in lines] if self.look.ascii else lines

    def lines(self) -> list[Strip]:
        width, height = self.content_size
        return self.frame.get((self._polled if self._polled is not None else self.frame_key(), width, height),
                              width, height)

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        lines = self.lines()
        if y < len(lines):
            line = lines[y]
            if line.cell_length != width:
                line = line.crop(0, width)
                if line.cell_length < width:
                    line = Strip([*line, *blank(width - line.cell_length)], width)
            return line
        return blank(width)

    def get_line_filters(self) -> Sequence[LineFilter]:
        return truecolor_filters(self.look, super().get_line_filters())

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.wanted_height(width)

    def wanted_height(self, width: int) -> int:
        """Rows this view wants when its height is ``auto``."""
        return 1

    def text(self, width: int = 120, height: int = 30) -> str:
        """The view as plain text (tests, headless checks)."""
        return "\n".join(s.text for s in self.build(width, height))
