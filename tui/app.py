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

import asyncio
import errno
import gc
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import platformdirs
from rich.segment import Segment
from rich.style import Style
from textual import constants
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.driver import Driver
from textual.filter import ANSIToTruecolor, LineFilter, Monochrome, NoColor
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender

from bmoe_top.outfile import OutputFileError, write_atomic
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.settings import Problem, Settings, SettingsStore
from bmoe_top.tui.terminal import HangupDriver
from bmoe_top.tui.widgets.base import ascii_cells
from bmoe_top.tui.widgets.lines import MemoTruecolor
from bmoe_top.tui.widgets.palette import Look

__all__ = ["AsciiFilter", "BmoeTopApp", "CSS", "default_screenshot_folder"]

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
/* the Overview's views: their heights come from PanelStack (each view's need) */
ExpertMap { border-top: solid $primary-darken-3; }
.-empty { height: 1 !important; min-height: 1 !important; max-height: 1 !important; border-top: none !important; }
#too-small { display: none; }

/* compact: one header line, no side panel, no tab bar */
.-compact #side { display: none; }
.-compact #tabs > ContentTabs { display: none; }
.-compact #live-status, .-compact #attach-status { display: none; }
/* ...unless it says why something is wrong (a launch that failed, a socket not there yet) */
.-compact #live-status.-problem, .-compact #attach-status.-problem { display: block; }
/* the diagnosis line likewise: in the compact layout only when a rule fired */
.-compact #diagnosis { display: none; }
.-compact #diagnosis.-finding { display: block; }

/* below the minimum size: say so */
.-tiny #body, .-tiny Footer, .-tiny #title, .-tiny #live-status, .-tiny #attach-status, .-tiny #diagnosis,
.-tiny #prompt-bar { display: none; }
.-tiny #too-small { display: block; height: 1fr; content-align: center middle; }
/* ...and no notification over it (they come back when the terminal is large enough) */
.-tiny Toast { visibility: hidden; }

/* panel groups the settings leave out ([panels]) */
.-no-trends TrendChart, .-no-answer #answer-side { display: none; }
.-no-maps LayerHeatmap, .-no-maps ExpertMap { display: none !important; }

/* ASCII: line-drawing borders in ASCII */
.-ascii #side { border-right: ascii $primary-darken-2; }
.-ascii #answer-side { border-top: ascii $primary-darken-2; }
.-ascii ExpertMap { border-top: ascii $primary-darken-3; }
/* ...and none of Textual's chrome in box characters: the tab bar's underline (the active tab
   keeps its own style) and the command-palette key's left rule */
.-ascii Underline { display: none; }
/* ...so the active tab is marked by itself: reversed and bold (without colour nothing else tells) */
.-ascii Tab.-active { text-style: bold reverse; }
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
        # (style, background) -> its plain style: one entry per distinct style (equal styles,
        # as rich compares them, share it), so styles built afresh each frame add none
        self._memo: dict[tuple[Style, Color], Style] = {}

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
                key = (style, background)
                got = memo.get(key)
                if got is None:
                    got = memo[key] = self._plain(style, background)
                style = got
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


def default_screenshot_folder() -> Path:
    """Where screenshots go when the settings name no folder: ``screenshots`` in the user's data
    folder (``platformdirs.user_data_dir``: ``$XDG_DATA_HOME/bmoe-top/screenshots``, by default
    ``~/.local/share/bmoe-top/screenshots`` on Linux), made on the first screenshot."""
    return Path(platformdirs.user_data_dir("bmoe-top", appauthor=False)) / "screenshots"


class BmoeTopApp(App[int]):
    """bmoe-top over one mode screen (``main``): it is the first screen on the stack, so the
    views are queried on it even while a modal or the command palette is open.

    ``look``: how to draw (None: :meth:`Look.detect` from this terminal, ``NO_COLOR``, the
    locale, :attr:`force_ascii` and the settings' colour scale).

    Settings (docs/user-guide.md "Settings"): the app reads :attr:`settings_store` (the command
    line's, else defaults kept in memory: tests never touch a settings file) and its screens keep
    what a key changes with :meth:`remember`; the theme is kept when the palette changes it;
    problems the file had are shown once the screen is up. ``ctrl+s`` (and the palette's
    Screenshot) saves an SVG of the screen into the settings' screenshot folder, else
    :func:`default_screenshot_folder` (never the working directory: a repository's folder),
    says where, and lists the files it saved on stderr once the screen has closed."""

    CSS = CSS
    TITLE = "bmoe-top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "screenshot", "screenshot", show=False, priority=True),
    ]
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
    #: The settings (the command line sets it: the file ``--config`` names or the user's, or none
    #: with ``--no-config``); None: each app keeps the defaults in memory.
    settings_store: ClassVar[SettingsStore | None] = None

    #: The signals that end the app as its quit key does (:attr:`own_process` only): the terminal
    #: restored, a live screen's runtime child closed, then the status 128 + the signal's number
    #: (docs/user-guide.md "Exit status").
    EXIT_SIGNALS: ClassVar[tuple[signal.Signals, ...]] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self, main: Screen[None], look: Look | None = None) -> None:
        #: The signal that ended the app (None: it ended otherwise).
        self.exit_signal: int | None = None
        self._memo_filters: dict[int, MemoTruecolor] = {}  # id of Textual's filter -> its wrapper
        self._no_color_filter = NoColorFilter()  # instead of Textual's Monochrome under NO_COLOR
        self._ascii_filter = AsciiFilter()
        self.store = self.settings_store if self.settings_store is not None else SettingsStore(None)
        super().__init__()
        self.main = main
        self._look = look
        self.last_screenshot: Path | None = None
        self.screenshots: list[Path] = []  # every screenshot saved, for the list printed at exit

    @classmethod
    def startup_settings(cls) -> Settings:
        """The settings a screen starts from (before its app exists: screens are built first)."""
        return cls.settings_store.settings if cls.settings_store is not None else Settings()

    @classmethod
    def settings_problem(cls, name: str, value: str, choices: Iterable[str], default: str) -> None:
        """A kept name a screen does not know (``"section.key"`` = ``value``, not one of
        ``choices``): one line with the others, shown once the screen is up."""
        if cls.settings_store is not None:
            section, _, key = name.partition(".")
            cls.settings_store.problems.append(Problem(
                f"[{section}] {key} = {sanitize(value)!r}: must be one of {', '.join(choices)}; the default "
                f"{default!r} is used"))

    @property
    def settings(self) -> Settings:
        """The settings in use (what the file said, and what was changed since)."""
        return self.store.settings

    def remember(self, name: str, value: Any) -> None:
        """Keep ``"section.key"`` = ``value`` for the next start (:meth:`SettingsStore.set`); a
        file that cannot be written is said once."""
        said = self.store.set(name, value)
        if said is not None:
            self.notify(said, severity="warning", timeout=6)

    @property
    def look(self) -> Look:
        if self._look is None:
            self._look = Look.detect(self.console.color_system, no_color=self.no_color, ascii=self.force_ascii,
                                     scale=self.settings.look.colour_scale, environ=os.environ)
        return self._look

    @look.setter
    def look(self, value: Look) -> None:
        self._look = value
        self._apply_look_classes()

    def on_mount(self) -> None:
        if self.own_process:
            self._install_signals()
        self._apply_look_classes()
        theme = self.settings.look.theme
        if theme != self.theme:
            if theme in self.available_themes:
                self.theme = theme
            else:
                self.store.problems.append(_theme_problem(theme))
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.store.problems:
            self.call_after_refresh(self._say_problems)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.EXIT_SIGNALS:
            try:
                loop.add_signal_handler(sig, self.end_by_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def end_by_signal(self, sig: int) -> None:
        """End the app as its quit key does, with the status 128 + ``sig`` (the first signal's)."""
        self.exit_signal = self.exit_signal or sig
        self.exit(return_code=128 + int(self.exit_signal))

    def _theme_changed(self, theme: Any) -> None:
        self.remember("look.theme", self.theme)

    def _say_problems(self) -> None:
        """What the settings file had wrong, once the screen is up (also on stderr at start)."""
        lines = [str(p) for p in self.store.problems]
        shown = lines[:3] + ([f"... and {len(lines) - 3} more"] if len(lines) > 3 else [])
        where = sanitize(str(self.store.path)) if self.store.path is not None else "settings"
        self.notify("\n".join(shown), title=f"settings: {where}", severity="warning", timeout=10, markup=False)

    # ------------------------------------------------------------------------------ screenshots
    def screenshot_folder(self) -> Path:
        """Where screenshots go: the settings' folder (``~`` expanded), else
        :func:`default_screenshot_folder`."""
        folder = self.settings.screenshots.folder
        return Path(os.path.expanduser(folder)) if folder else default_screenshot_folder()

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """Save an SVG of the screen (``ctrl+s``, the palette's Screenshot) as
        ``bmoe-top-YYYYmmdd-HHMMSS.svg`` in :meth:`screenshot_folder` (``path``: there instead),
        never over an existing file or through a link, and say where, or why not."""
        folder = Path(path) if path else self.screenshot_folder()
        if not path and not self.settings.screenshots.folder:
            try:  # the user's data folder is ours to make; a folder the settings name is not
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as e:
                self.notify(sanitize(f"cannot make {folder}: {e.strerror or e}"), title="screenshot not saved",
                            severity="error", timeout=8, markup=False)
                return
        stem = filename or time.strftime("bmoe-top-%Y%m%d-%H%M%S")
        svg = self.export_screenshot().encode("utf-8")
        for i in range(100):
            target = folder / (f"{stem}.svg" if i == 0 else f"{stem}-{i}.svg")
            try:
                write_atomic(target, svg)
            except OutputFileError as e:
                if e.errno == errno.EEXIST and not filename:  # the next free name
                    continue
                self.notify(sanitize(str(e)), title="screenshot not saved", severity="error", timeout=8,
                            markup=False)
                return
            self.last_screenshot = target
            self.screenshots.append(target)
            self.notify(sanitize(str(target)), title="screenshot saved", timeout=6, markup=False)
            return

    def get_driver_class(self) -> type[Driver]:
        """:class:`~bmoe_top.tui.terminal.HangupDriver` where Textual would use its Linux driver
        (Linux, macOS) and ``TEXTUAL_DRIVER`` names none: it ends the app with SIGHUP when the
        terminal goes away, as a session leader is ended; Textual's own driver elsewhere."""
        driver = super().get_driver_class()
        return HangupDriver if constants.DRIVER is None and issubclass(HangupDriver, driver) else driver

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`textual.app.App.run`, then the path of every screenshot saved, one line each on
        stderr (the notification that said it has gone with the screen)."""
        try:
            return super().run(*args, **kwargs)
        finally:
            for shot in self.screenshots:
                print(f"bmoe-top: screenshot saved: {sanitize(str(shot))}", file=sys.stderr)

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
            if command.title == "Screenshot":
                yield SystemCommand("Screenshot", f"ctrl+s: an SVG of the screen into {self.screenshot_folder()}",
                                    lambda: self.set_timer(0.1, self.action_screenshot))
            elif not (has_keys and command.title == "Keys"):
                yield command


def _theme_problem(theme: str) -> Problem:
    return Problem(f"[look] theme = {sanitize(theme)!r}: not a theme of this Textual; the default is used")
