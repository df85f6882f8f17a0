"""How the views look on this terminal: colour scales, glyphs and line-drawing characters in one
:class:`Look`, so a colour or a glyph means the same thing in every view.

A look is chosen once per app (:meth:`Look.detect`) from the terminal and the user's settings:

* colours: ``truecolor`` (also a 256-colour terminal), ``16`` (``TERM=linux``, ``TERM=screen``,
  ``TERM=xterm`` without ``COLORTERM``: the colour scales use the 16 ANSI colours plus glyph
  density, so no two neighbouring steps collapse into one colour), or ``mono`` (``NO_COLOR``:
  no colour at all, values by glyph density, emphasis by bold and reverse video);
* glyphs: Unicode blocks, or ASCII (``--ascii``, or a locale without UTF-8);
* scale: the sequential colour scale of the hit-share and routing-heat maps: ``viridis`` (the
  default: hit share on viridis, heat on inferno), ``cividis`` (both maps on cividis), or
  ``classic`` (red-amber-green hit share, blue-to-red heat: not safe for colour-blind users).

Scales are fixed, not normalised to the data on screen: a cell's colour is comparable across
layers, tokens, runs and sessions. Every style is a real :class:`rich.style.Style` (never None):
Textual's monochrome filter (``NO_COLOR``) needs one on every segment.
"""

from __future__ import annotations

import locale
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.style import Style

from bmoe_top.tui.settings import COLOUR_SCALES

__all__ = [
    "BLANK", "COLOR_MODES", "DIM", "EIGHTHS", "KIND_STYLE", "LABEL", "Look", "NO_DATA_GLYPH", "SCALES",
    "STATUS_STYLE", "TITLE", "locale_is_utf8",
]

COLOR_MODES = ("truecolor", "16", "mono")
#: The maps' colour scales, in the order ``c`` steps through them (the settings' names).
SCALES = COLOUR_SCALES

BLANK = Style()

#: The 24-bit look's label styles and glyphs as constants, for widgets drawn outside a
#: :class:`Look` (the fleet table, the analysis curves).
DIM = Style(color="#7f848e")
LABEL = Style(color="#abb2bf")
TITLE = Style(color="#e5c07b", bold=True)
EIGHTHS = " ▁▂▃▄▅▆▇█"
NO_DATA_GLYPH = "·"

#: Every state word a status line shows (run model :class:`~bmoe_top.tui.model.Status`, a live
#: source's, a poller's, a followed file's: all string enums) -> its style (truecolor; a 16-colour
#: or monochrome look maps it with :meth:`Look.status_style`).
STATUS_STYLE: dict[str, str] = {
    "ok": "bold #98c379", "ready": "bold #98c379", "generating": "bold #61afef",
    "loading": "bold #e5c07b", "connecting": "bold #e5c07b", "waiting": "bold #e5c07b", "starting": "bold #e5c07b",
    "unreachable": "bold #e06c75", "unauthorized": "bold #e06c75", "http_error": "bold #e06c75",
    "error": "bold #e06c75",
    "disconnected": "bold #e06c75", "aborted": "bold #e06c75", "failed": "bold #e06c75",
    "malformed": "bold #d19a66",
    "closing": "#7f848e", "exited": "#7f848e", "closed": "#7f848e", "done": "#7f848e", "replay": "#7f848e",
}

#: Row kinds of ``bmoe_top.tui.present`` rows -> style ("" = plain).
KIND_STYLE: dict[str, str] = {
    "": "", "missing": "#7f848e italic", "derived": "#d19a66", "name": "bold", "problem": "bold #e06c75",
    "section": "bold #e5c07b", "good": "#98c379", "bad": "#e06c75",
}

# -- colour scales (11 steps each, low -> high) ------------------------------------------------
# viridis / inferno / cividis sampled from matplotlib's tables; the darkest end is lifted a little so
# the lowest step still stands out from a dark terminal background.
_VIRIDIS = ["#471164", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58",
            "#b5de2b", "#dde318", "#fde725"]
_INFERNO = ["#2c0b57", "#460b6a", "#5f136e", "#78206c", "#932667", "#ad305c", "#c73e4c", "#dd513a",
            "#ed6925", "#f8850f", "#fcb519"]
_INFERNO_HOT = "#fcffa4"
_CIVIDIS = ["#0d2f63", "#233d6c", "#3b496c", "#51576e", "#666970", "#7c7b78", "#938e78", "#aba175",
            "#c5b76c", "#e0cd5e", "#fde737"]
_CLASSIC_HIT = ["#b3261e", "#c8401f", "#d65a20", "#e07826", "#e6952e", "#e8b336", "#c9c23c", "#9cc743",
                "#6fbd4a", "#45ad52", "#23985a"]
_CLASSIC_HEAT = ["#1b2a49", "#23406e", "#2c5a8f", "#3f7aa8", "#6b97b4", "#a9a9a9", "#d6a06a", "#e58446",
                 "#ec6431", "#ea4426", "#ff2a1a"]

# Okabe-Ito: distinguishable for every common colour-vision deficiency.
_SERIES_TRUE = {"compute": "#56b4e9", "flash": "#e69f00", "mgmt": "#cc79a7"}
_SERIES_16 = {"compute": "blue", "flash": "yellow", "mgmt": "magenta"}

#: 16 colours: five steps that differ in colour and in glyph density (viridis-like order for hit
#: share, inferno-like for heat).
_HIT_16 = [("░", "magenta"), ("▒", "blue"), ("▓", "cyan"), ("▆", "green"), ("█", "yellow")]
_HEAT_16 = ["blue", "magenta", "red", "yellow", "bright_white"]


def locale_is_utf8(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user's locale (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``) asks for UTF-8.

    A C or POSIX locale is not UTF-8, also when Python coerced it to ``C.UTF-8`` for itself
    (PEP 538: ``LC_CTYPE`` set to ``C.UTF-8`` while ``LANG`` says C, POSIX or nothing)."""
    env = os.environ if environ is None else environ
    lc_all, lc_ctype, lang = env.get("LC_ALL", ""), env.get("LC_CTYPE", ""), env.get("LANG", "")
    if not lc_all and lc_ctype in ("C.UTF-8", "C.utf8", "UTF-8") and lang in ("", "C", "POSIX"):
        return False  # the interpreter's coercion of a C locale, not the user's choice
    value = lc_all or lc_ctype or lang
    if not value:
        try:
            value = locale.setlocale(locale.LC_CTYPE, None)
        except locale.Error:
            return False
    v = value.lower().replace("-", "")
    return "utf8" in v


@dataclass(frozen=True)
class Glyphs:
    """Characters the views draw with (a Unicode and an ASCII set)."""

    vbar: str
    corner: str
    hline: str
    tick: str
    mark_up: str  # under the selected column (axis row)
    mark_down: str  # over the selected column (title row)
    clip: str  # a bar taller than the scale
    ellipsis: str
    dot: str  # separator
    no_data: str
    full: str
    spark: str  # 8 levels, low -> high
    eighths: str | None  # partial cells of a bar (None: whole cells only)
    live: str
    paused: str
    playing: str
    ended: str
    down: str
    window_l: str
    window_r: str
    window_fill: str


UNICODE = Glyphs(vbar="│", corner="└", hline="─", tick="┬", mark_up="▲", mark_down="▼", clip="▲", ellipsis="…",
                 dot="·", no_data="·", full="█", spark="▁▂▃▄▅▆▇█", eighths=" ▁▂▃▄▅▆▇█", live="●", paused="❚❚",
                 playing="▶", ended="■", down="✖", window_l="╰", window_r="╯", window_fill="─")
ASCII = Glyphs(vbar="|", corner="+", hline="-", tick="+", mark_up="^", mark_down="v", clip="^", ellipsis="...",
               dot="-", no_data=".", full="#", spark="_.-:=+*#", eighths=None, live="*", paused="||",
               playing=">", ended="#", down="x", window_l="\\", window_r="/", window_fill="_")


Cell = tuple[str, Style]


@dataclass(frozen=True, eq=False)
class Look:
    """One rendering mode: ``colors`` (``truecolor`` / ``16`` / ``mono``), ``ascii`` glyphs, and
    the map ``scale`` (``viridis`` / ``cividis`` / ``classic``). Build once; every attribute is
    precomputed (styles are shared objects, so run-length merging compares them by identity)."""

    colors: str = "truecolor"
    ascii: bool = False
    scale: str = "viridis"
    g: Glyphs = field(init=False)
    dim: Style = field(init=False)
    label: Style = field(init=False)
    title: Style = field(init=False)
    alert: Style = field(init=False)
    warn: Style = field(init=False)
    good: Style = field(init=False)
    accent: Style = field(init=False)
    no_data: Cell = field(init=False)
    hit_cells: list[Cell] = field(init=False)
    heat_resident: list[Cell] = field(init=False)
    heat_out: list[Cell] = field(init=False)
    heat_levels: int = field(init=False)
    series: dict[str, Style] = field(init=False)
    series_glyph: dict[str, str] = field(init=False)
    trend: Style = field(init=False)
    window: Style = field(init=False)
    cursor: Style = field(init=False)
    _kinds: dict[str, Style] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.colors not in COLOR_MODES:
            raise ValueError(f"colors must be one of {COLOR_MODES}")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}")
        s = object.__setattr__
        g = ASCII if self.ascii else UNICODE
        s(self, "g", g)
        mono, c16 = self.colors == "mono", self.colors == "16"

        def st(true: str, c16_: str, bold: bool | None = None, dim: bool | None = None) -> Style:
            if mono:
                return Style(bold=bold, dim=dim) if (bold or dim) else BLANK
            return Style(color=c16_ if c16 else true, bold=bold)

        s(self, "dim", st("#7f848e", "bright_black", dim=True))
        s(self, "label", st("#abb2bf", "white"))
        s(self, "title", st("#e5c07b", "yellow", bold=True))
        s(self, "alert", st("#e06c75", "bright_red", bold=True))
        s(self, "warn", st("#d19a66", "yellow", bold=True))
        s(self, "good", st("#98c379", "green"))
        s(self, "accent", st("#61afef", "cyan", bold=True))
        s(self, "no_data", (g.no_data, Style(dim=True) if mono else st("#5c6370", "bright_black")))
        s(self, "trend", st("#56b6c2", "cyan"))
        s(self, "window", Style(reverse=True) if (mono or c16) else Style(bgcolor="#3e4452"))
        s(self, "cursor", Style(reverse=True, bold=True))
        # hit share
        if mono:
            ramp = "-+*#" if self.ascii else "░▒▓█"
            hit = [(ch, BLANK) for ch in ramp]
        elif c16:
            hit = [("#" if self.ascii else ch, Style(color=c)) for ch, c in _HIT_16]
        else:
            colors = {"viridis": _VIRIDIS, "cividis": _CIVIDIS, "classic": _CLASSIC_HIT}[self.scale]
            hit = [(g.full, Style(color=c)) for c in colors]
        s(self, "hit_cells", hit)
        # routing heat: colour = heat; glyph = resident (full cell) or not (a dot), one glyph each
        # in every look, so residency never depends on telling heat textures apart; without
        # colour (NO_COLOR) heat is the intensity: dim, normal, bold
        if mono:
            res, out = ("#", "o") if self.ascii else ("█", "●")
            heat = [Style(dim=True), BLANK, Style(bold=True)]
            s(self, "heat_resident", [(res, x) for x in heat])
            s(self, "heat_out", [(out, x) for x in heat])
        else:
            if c16:
                colors = _HEAT_16
            else:
                colors = {"viridis": [*_INFERNO[:-1], _INFERNO_HOT], "cividis": _CIVIDIS,
                          "classic": _CLASSIC_HEAT}[self.scale]
            styles = [Style(color=c) for c in colors]
            s(self, "heat_resident", [("#" if self.ascii else "█", x) for x in styles])
            s(self, "heat_out", [("o" if self.ascii else "●", x) for x in styles])
        s(self, "heat_levels", len(self.heat_resident))
        # breakdown series
        if mono:
            s(self, "series", {k: BLANK for k in _SERIES_TRUE})
            s(self, "series_glyph", {"compute": "#", "flash": "=", "mgmt": "+"} if self.ascii
              else {"compute": "█", "flash": "▒", "mgmt": "░"})
        else:
            cols = _SERIES_16 if c16 else _SERIES_TRUE
            s(self, "series", {k: Style(color=v) for k, v in cols.items()})
            s(self, "series_glyph", {"compute": "#", "flash": "=", "mgmt": "+"} if self.ascii
              else {k: g.full for k in cols})

    # ------------------------------------------------------------------------------ choosing
    @classmethod
    def detect(cls, color_system: str | None, *, no_color: bool = False, ascii: bool | None = None,
               scale: str = "viridis", environ: Mapping[str, str] | None = None) -> Look:
        """The look for a terminal: ``color_system`` as Rich detected it (``truecolor``,
        ``256``, ``standard``, ``windows`` or None), ``no_color`` (``NO_COLOR`` was set),
        ``ascii`` (``--ascii``; None: ASCII when the locale is not UTF-8)."""
        if no_color or color_system is None:
            colors = "mono"
        elif color_system in ("truecolor", "256"):
            colors = "truecolor"
        else:
            colors = "16"
        if ascii is None:
            ascii = not locale_is_utf8(environ)
        return cls(colors=colors, ascii=ascii, scale=scale)

    def with_scale(self, scale: str) -> Look:
        return Look(colors=self.colors, ascii=self.ascii, scale=scale)

    def next_scale(self) -> Look:
        return self.with_scale(SCALES[(SCALES.index(self.scale) + 1) % len(SCALES)])

    def describe(self) -> str:
        return f"{self.colors} colours, {'ASCII' if self.ascii else 'Unicode'}, {self.scale}"

    # ------------------------------------------------------------------------------ values -> cells
    def hit_bin(self, share: np.ndarray) -> np.ndarray:
        """Hit share (0..1, NaN = no data) -> index into :attr:`hit_cells`, -1 for no data."""
        n = len(self.hit_cells)
        out = np.full(share.shape, -1, dtype=np.int16)
        ok = ~np.isnan(share)
        out[ok] = np.clip(np.floor(share[ok] * n), 0, n - 1).astype(np.int16)
        return out

    def heat_bin(self, count: np.ndarray, expected: np.ndarray | float) -> np.ndarray:
        """Routed counts vs the uniform expectation (log2 of the ratio, -3 cold .. +3 hot) ->
        index into :attr:`heat_resident` / :attr:`heat_out`; -1 where never routed."""
        n = self.heat_levels
        out = np.full(count.shape, -1, dtype=np.int16)
        ok = count > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.log2(count / expected)
        out[ok] = np.clip(np.floor((r[ok] + 3.0) / 6.0 * n), 0, n - 1).astype(np.int16)
        return out

    def hit_legend(self) -> list[Cell]:
        return list(self.hit_cells)

    def status_style(self, word: str) -> Style:
        """A state word's style in this look (bold in monochrome)."""
        spec = STATUS_STYLE.get(word, "bold")
        if self.colors == "mono":
            return Style(bold="bold" in spec)
        style = Style.parse(spec)
        if self.colors == "16" and style.color is not None and style.color.triplet is not None:
            style = style + Style(color=_nearest16(spec))
        return style

    def kind_style(self, kind: str) -> Style:
        """A present-row kind's style in this look (one shared object per kind)."""
        style = self._kinds.get(kind)
        if style is None:
            style = self._kinds[kind] = self._kind_style(kind)
        return style

    def _kind_style(self, kind: str) -> Style:
        spec = KIND_STYLE.get(kind, "")
        if not spec:
            return BLANK
        if self.colors == "mono":
            return Style(bold="bold" in spec, italic="italic" in spec)
        style = Style.parse(spec)
        if self.colors == "16":
            style = style + Style(color=_nearest16(spec))
        return style


_NEAREST16 = {"#98c379": "green", "#61afef": "cyan", "#e5c07b": "yellow", "#e06c75": "bright_red",
              "#d19a66": "yellow", "#7f848e": "bright_black", "#abb2bf": "white"}


def _nearest16(spec: str) -> str:
    for token in spec.split():
        if token.startswith("#"):
            return _NEAREST16.get(token, "white")
    return "white"


def ramp_index(values: np.ndarray, lo: float, hi: float, levels: int) -> np.ndarray:
    """Values -> 0..levels-1 on a fixed linear scale [lo, hi]; -1 for NaN."""
    out = np.full(values.shape, -1, dtype=np.int16)
    ok = np.isfinite(values)
    span = hi - lo if hi > lo else 1.0
    out[ok] = np.clip(np.floor((values[ok] - lo) / span * levels), 0, levels - 1).astype(np.int16)
    return out


def cells_from_index(index: Sequence[int], cells: Sequence[Cell], missing: Cell) -> list[Cell]:
    """Index array -> cells (``missing`` where the index is -1)."""
    return [missing if i < 0 else cells[i] for i in index]
