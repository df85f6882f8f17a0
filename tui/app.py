"""The bmoe-top Textual app: one app, whose first screen is the mode's screen
(``bmoe_top.tui.screens``: replay, live, metrics attach, audit attach).

Data comes in off the UI thread (sources feed the run model under its lock); the mode screen
polls ``run.version`` on a timer: the title and the answer text repaint at most ``fps`` times a
second, the views and panels every ``refresh`` seconds (``--refresh``), whatever the input rate,
and nothing repaints while nothing changes. The app holds the
:class:`~bmoe_top.tui.widgets.palette.Look` every view draws with (colours, glyphs, colour scale),
chosen from the terminal on start; its command palette lists the mode screen's own actions. An
exception inside the app ends it with exit status 1.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.app import App, SystemCommand
from textual.color import Color
from textual.filter import ANSIToTruecolor, LineFilter, Monochrome, NoColor
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender

from bmoe_top.tui.widgets.base import ascii_cells
from bmoe_top.tui.widgets.lines import MemoTruecolor
from bmoe_top.tui.widgets.palette import Look

__all__ = ["AsciiFilter", "BmoeTopApp", "CSS"]

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
TabbedContent { height: 1fr; width: 1fr; }
TabPane { padding: 0; }
#log-scroll, #problems-scroll, #text-scroll { height: 1fr; }
OverviewStrip { height: 3; }
BreakdownChart { height: 14; }
LayerHeatmap { height: 1fr; min-height: 4; }
ExpertMap { height: 1fr; min-height: 4; border-top: solid $primary-darken-3; }
.-empty { height: 1 !important; min-height: 1 !important; max-height: 1 !important; border-top: none !important; }
#search { display: none; height: 1; border: none; padding: 0 1; }
#search.-shown { display: block; }
#too-small { display: none; }

/* compact: one header line, no side panel, no tab bar, one map at a time */
.-compact #side { display: none; }
.-compact #tabs > ContentTabs { display: none; }
.-compact #live-status, .-compact #attach-status { display: none; }
/* ...unless it says why something is wrong (a launch that failed, a socket not there yet) */
.-compact #live-status.-problem, .-compact #attach-status.-problem { display: block; }
.-compact OverviewStrip { height: 2; }
.-compact BreakdownChart { height: 1fr; min-height: 4; max-height: 10; }
.-compact LayerHeatmap { height: 1fr; min-height: 3; }
.-compact ExpertMap { display: none; }
.-compact.-experts ExpertMap { display: block; border-top: none; }
.-compact.-experts LayerHeatmap { display: none; }

/* below the minimum size: say so */
.-tiny #body, .-tiny Footer, .-tiny #title, .-tiny #live-status, .-tiny #attach-status,
.-tiny #prompt-bar { display: none; }
.-tiny #too-small { display: block; height: 1fr; content-align: center middle; }

/* ASCII: line-drawing borders in ASCII */
.-ascii #side { border-right: ascii $primary-darken-2; }
.-ascii #answer-side { border-top: ascii $primary-darken-2; }
.-ascii ExpertMap { border-top: ascii $primary-darken-3; }
/* ...and none of Textual's chrome in box characters: the tab bar's underline (the active tab
   keeps its own style) and the command-palette key's left rule */
.-ascii Underline { display: none; }
.-ascii FooterKey.-command-palette { border-left: none; }
"""


class AsciiScrollBarRender(ScrollBarRender):
    """Scrollbars without block characters: the thumb is its colour alone, in whole cells."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


class NoColorFilter(LineFilter):
    """``NO_COLOR``: every colour removed (no-color.org: no ANSI colour at all), attributes kept.
    Textual's own ``Monochrome`` filter turned colours into greys, still sent as 256-colour or
    truecolor codes. What a colour set apart stays apart: a segment whose background stands out
    from the screen's (a table's cursor row, a selected tab, the banner) is drawn reversed; the
    maps and charts already draw by glyph density in the ``mono`` look."""

    #: Background luminance difference from the screen's that reads as a highlight.
    HIGHLIGHT = 0.12

    def __init__(self) -> None:
        super().__init__()
        self._memo: dict[tuple[int, Color], tuple[Style, Style]] = {}

    def _plain(self, style: Style, background: Color) -> Style:
        bg = style.bgcolor
        highlight = False
        if bg is not None and not bg.is_default:
            r, g, b = bg.get_truecolor()
            lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255.0
            base = background.rich_color.get_truecolor()
            base_lum = (0.2126 * base[0] + 0.7152 * base[1] + 0.0722 * base[2]) / 255.0
            highlight = abs(lum - base_lum) > self.HIGHLIGHT
        plain = Style(bold=style.bold, dim=style.dim, italic=style.italic, underline=style.underline,
                      strike=style.strike, reverse=bool(style.reverse) != highlight, link=style.link)
        return plain + Style(color="default", bgcolor="default")

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        memo = self._memo
        if len(memo) > 8192:
            memo.clear()
        out = []
        for text, style, control in segments:
            if style is not None:
                got = memo.get((id(style), background))
                if got is None or got[0] is not style:
                    got = memo[(id(style), background)] = (style, self._plain(style, background))
                style = got[1]
            out.append(Segment(text, style, control))
        return out


class AsciiFilter(LineFilter):
    """The ASCII look (``--ascii``, a locale without UTF-8): every line of every screen in ASCII,
    each other character as its stand-in in as many cells (:func:`ascii_cells`). The views pick
    their own ASCII glyphs; this covers what they do not draw: Textual's chrome (the footer's
    arrow keys, borders, a table's sort arrow) and prose (``Δ``, ``±``, ``≈``) on any screen."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(seg.text.isascii() for seg in segments):
            return segments
        return [seg if seg.text.isascii() else Segment(ascii_cells(seg.text), seg.style, seg.control)
                for seg in segments]


class BmoeTopApp(App[int]):
    """bmoe-top over one mode screen (``main``): it is the first screen on the stack, so the
    views are queried on it even while a modal or the command palette is open.

    ``look``: how to draw (None: :meth:`Look.detect` from this terminal, ``NO_COLOR``, the
    locale and :attr:`force_ascii`)."""

    CSS = CSS
    TITLE = "bmoe-top"
    #: ``--ascii`` (the command line sets it): ASCII glyphs whatever the locale.
    force_ascii: ClassVar[bool | None] = None
    #: ``--refresh S`` (the command line sets it): seconds between repaints of the views while
    #: data streams, for every mode screen (None: the screens' default, 1 s).
    refresh_s: ClassVar[float | None] = None
    #: The collector's policy for a process that runs this one app (the command line sets it):
    #: see :meth:`on_ready`. Tests run many apps in one process and leave the collector alone.
    own_process: ClassVar[bool] = False
    #: Young-generation thresholds while the app runs (:func:`gc.set_threshold`).
    GC_THRESHOLDS: ClassVar[tuple[int, int, int]] = (20_000, 20, 100)

    def __init__(self, main: Screen[None], look: Look | None = None) -> None:
        self._memo_filters: dict[int, MemoTruecolor] = {}  # id of Textual's filter -> its wrapper
        self._no_color_filter = NoColorFilter()  # instead of Textual's Monochrome under NO_COLOR
        self._ascii_filter = AsciiFilter()
        super().__init__()
        self.main = main
        self._look = look

    @property
    def look(self) -> Look:
        if self._look is None:
            self._look = Look.detect(self.console.color_system, no_color=self.no_color, ascii=self.force_ascii,
                                     environ=os.environ)
        return self._look

    @look.setter
    def look(self, value: Look) -> None:
        self._look = value
        self._apply_look_classes()

    def on_mount(self) -> None:
        self._apply_look_classes()

    def on_ready(self) -> None:
        """Once the first screen is drawn (:attr:`own_process` only): what exists now lives as
        long as the app (Textual's DOM, styles, code), so it is frozen out of the cyclic
        collector, and the young generations are collected less often. Every line drawn makes
        short-lived segments and strips; with Python's default thresholds a full collection
        walked every object of the app every few seconds (100-180 ms each, about 2 % of a core
        while a run streams: docs/architecture.md "Repaint cost")."""
        if self.own_process:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*self.GC_THRESHOLDS)

    def _apply_look_classes(self) -> None:
        look = self.look
        ScrollBar.renderer = AsciiScrollBarRender if look.ascii else ScrollBarRender
        for screen in (self.main, *self.screen_stack):
            screen.set_class(look.ascii, "-ascii")
            screen.set_class(look.colors == "mono", "-mono")

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, its ANSI-to-truecolor one wrapped in :class:`MemoTruecolor` (it ran
        over every segment of every line drawn), under ``NO_COLOR`` :class:`NoColorFilter`
        instead of its monochrome one, and in the ASCII look :class:`AsciiFilter`."""
        out: list[LineFilter] = []
        wrapped = self._memo_filters
        for f in super().get_line_filters():
            if self.no_color and isinstance(f, (Monochrome, NoColor)):
                f = self._no_color_filter
            elif type(f) is ANSIToTruecolor:
                w = wrapped.get(id(f))
                if w is None or w.inner is not f:
                    w = wrapped[id(f)] = MemoTruecolor(f)
                f = w
            out.append(f)
        if self.look.ascii:
            out.append(self._ascii_filter)
        return out

    def get_default_screen(self) -> Screen[None]:
        return self.main

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The screen's own actions, then Textual's (theme, quit, screenshot), without Textual's
        "Keys" panel when the screen has its own "Keys (help)" (the palette said "Keys" twice)."""
        commands = getattr(self.main, "commands", None)
        own = list(commands()) if callable(commands) else []
        for title, help_text, callback in own:
            yield SystemCommand(title, help_text, callback)
        has_keys = any(title.startswith("Keys") for title, _h, _c in own)
        for command in super().get_system_commands(screen):
            if not (has_keys and command.title == "Keys"):
                yield command
