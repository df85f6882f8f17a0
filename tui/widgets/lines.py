"""What every line-API widget shares: run-length merging of cells into segments, a frame cache
(the lines are rebuilt only when what they depend on changed), axis ticks, legends that fit, and
the margins every time view uses (so a column is the same token in each).

Every segment carries a real :class:`rich.style.Style` (never None): Textual's monochrome filter
(``NO_COLOR``) reads the colour of each one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import ANSIToTruecolor, LineFilter
from textual.strip import Strip

from bmoe_top.tui.playback import TokenWindow
from bmoe_top.tui.widgets.palette import BLANK

__all__ = ["FrameCache", "MemoTruecolor", "axis_row", "axis_unit", "blank", "elide_words", "fit_label", "fit_text",
           "fit_words", "gutter_text", "margins", "middle_ellipsis", "nice_max", "nice_step", "segments",
           "segments_from_index",
           "strip", "wrap_fields"]

Cell = tuple[str, Style]


def segments(cells: Iterable[tuple[str, Style]]) -> list[Segment]:
    """Run-length merge (glyph, style) cells into segments (one segment per run of equal style)."""
    out: list[Segment] = []
    buf: list[str] = []
    style: Style | None = None
    for ch, st in cells:
        if buf and (st is style or st == style):
            buf.append(ch)
            continue
        if buf:
            out.append(Segment("".join(buf), style or BLANK))
        buf, style = [ch], st
    if buf:
        out.append(Segment("".join(buf), style or BLANK))
    return out


#: Memo keys of :func:`segments_from_index`: run length x this + table index.
_RUN_KEY = 1 << 20


def segments_from_index(idx: np.ndarray, table: Sequence[Cell],
                        memo: dict[int, Segment] | None = None) -> list[Segment]:
    """Cells given as indexes into ``table`` -> run-length merged segments (vectorised: one
    segment per run of equal index). ``memo``: segments already made from this same ``table``
    (pass one dict for every row drawn with one table: equal runs share one segment object)."""
    n = len(idx)
    if n == 0:
        return []
    bounds = np.flatnonzero(idx[1:] != idx[:-1]) + 1
    starts = np.concatenate(([0], bounds))
    runs = np.diff(np.concatenate((starts, [n])))
    m = _RUN_KEY
    if len(table) >= m:
        raise ValueError(f"a table of {len(table)} cells (at most {m - 1})")
    keys = (runs * m + np.asarray(idx)[starts]).tolist()  # one int per (run length, table index)
    made = {} if memo is None else memo
    out = []
    for key in keys:
        seg = made.get(key)
        if seg is None:
            glyph, style = table[key % m]
            seg = made[key] = Segment(glyph * (key // m), style)
        out.append(seg)
    return out


def blank(width: int, style: Style = BLANK) -> Strip:
    """An empty line of ``width`` cells (with a style: never None)."""
    return Strip([Segment(" " * max(0, width), style)], max(0, width))


def strip(parts: Iterable[tuple[str, Style]], width: int | None = None) -> Strip:
    """A line from (text, style) parts, cut or padded to ``width`` when given."""
    s = Strip([Segment(t, st or BLANK) for t, st in parts if t])
    if width is not None:
        s = s.crop(0, width)
        if s.cell_length < width:
            s = Strip([*s, Segment(" " * (width - s.cell_length), BLANK)], width)
    return s


def middle_ellipsis(text: str, width: int) -> str:
    """``text`` if it fits ``width`` cells, else its start and its end around one ``…`` (a file
    name keeps its extension, a path its last folder): the rule for one word too wide to show."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    tail = (width - 1) // 2
    end = text[text.rfind("/"):] if "/" in text.rstrip("/") else text[text.rfind("."):] if "." in text[1:] else ""
    if len(end) <= width - 2 and (len(end) <= 8 or "/" in end):  # the extension or the last part, whole
        tail = max(tail, len(end))
    return text[: width - 1 - tail] + "…" + (text[-tail:] if tail else "")


def elide_words(text: str, width: int, shortest: int = 9) -> str:
    """``text`` in ``width`` cells by shortening its longest words in their middle
    (:func:`middle_ellipsis`: a file name keeps its extension), none below ``shortest`` cells;
    what still does not fit is cut after its last whole word with ``…``. The rule for a line of
    file names (``replay qwen3…q4km.csv + qwen3…q4km.route.csv``)."""
    words = text.split(" ")
    while sum(map(len, words)) + len(words) - 1 > width:
        i = max(range(len(words)), key=lambda j: len(words[j]))
        over = sum(map(len, words)) + len(words) - 1 - width
        if len(words[i]) <= shortest:
            break
        words[i] = middle_ellipsis(words[i], max(shortest, len(words[i]) - over))
    out = " ".join(words)
    if len(out) <= width:
        return out
    cut = fit_words(out, max(0, width - 1))
    return cut + "…" if cut else middle_ellipsis(out, width)


def fit_text(options: Sequence[str], width: int) -> str:
    """The first of ``options`` (longest first) that fits ``width`` cells, else the last with
    whole words dropped from its end until it fits (:func:`fit_words`: a number is never cut)."""
    for o in options:
        if len(o) <= width:
            return o
    return fit_words(options[-1], width) if options else ""


def fit_words(text: str, width: int) -> str:
    """``text`` if it fits ``width`` cells, else its leading whole words that fit (a trailing
    separator such as "·" or "of" dropped with the word after it); "" when not even the first
    word fits. Never cuts inside a word, so never inside a number."""
    if len(text) <= width:
        return text
    out = ""
    for word in text.split(" "):
        cand = f"{out} {word}" if out else word
        if len(cand) > width:
            break
        out = cand
    words = out.split(" ")
    while len(words) > 1 and words[-1] in ("·", "of", "-", "–", "/", ",", ":"):
        words.pop()
    return " ".join(words) if words and words[0] else ""


def wrap_fields(lines: Iterable[tuple[str, Style]], width: int) -> list[tuple[str, Style]]:
    """Readout lines that fit ``width`` cells: a longer line wraps at spaces onto the lines after
    it (its style kept); a word longer than the width is dropped, never cut. Lines come most
    important first, so a short view that shows only the first lines drops the least important."""
    out: list[tuple[str, Style]] = []
    for text, style in lines:
        if len(text) <= width:
            out.append((text, style))
            continue
        rest = text
        while rest:
            piece = fit_words(rest, width)
            if not piece:  # the first word is wider than the readout: drop that word
                _, _, rest = rest.partition(" ")
                continue
            out.append((piece, style))
            rest = rest[len(piece):].lstrip(" ")
            if rest.startswith("· "):  # a field separator never starts a line
                rest = rest[2:]
    return out


class FrameCache:
    """The lines of one widget, rebuilt by ``build(width, height)`` only when the key changes."""

    def __init__(self, build: Callable[[int, int], list[Strip]]) -> None:
        self._build = build
        self._key: Hashable = None
        self.lines: list[Strip] = []
        self.builds = 0

    def get(self, key: Hashable, width: int, height: int) -> list[Strip]:
        if key != self._key:
            self._key = key
            self.lines = self._build(width, height)
            self.builds += 1
        return self.lines

    def invalidate(self) -> None:
        self._key = None


#: Row labels of the time views and maps, and what they read in a gutter too narrow for them.
SHORT_LABELS = {"ms/tok": "wall", "majflt": "flt", "expert": "exp"}


def fit_label(text: str, width: int) -> str:
    """A row label in ``width`` cells, whole or in a short form, never cut into something else
    (``ms/to``, ``L10-1``): its :data:`SHORT_LABELS` form; a folded layer group ``L10-11`` without
    its ``L`` (``10-11``), else its first layer and a ``+`` (``100+``); else cut."""
    if len(text) <= width:
        return text
    short = SHORT_LABELS.get(text)
    if short is not None and len(short) <= width:
        return short
    if text.startswith("L") and "-" in text:
        bare = text[1:]
        if len(bare) <= width:
            return bare
        first = bare.split("-", 1)[0] + "+"
        if len(first) <= width:
            return first
    return text[:width]


def gutter_text(text: str, gut: int) -> str:
    """A row label right-aligned in a gutter of ``gut`` cells (its last cell is the axis rule)."""
    return fit_label(text, gut - 1).rjust(gut - 1)


def margins(width: int) -> tuple[int, int]:
    """(left gutter, right readout) widths of every time view of ``width`` cells: the same for
    every view of the same width, so their columns line up."""
    if width >= 110:
        return 8, 22
    if width >= 76:
        return 7, 17
    return 6, 12


def nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 x 10^k that is at least ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    e = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * e >= raw:
            return float(m * e)
    return float(10 * e)


def nice_max(v: float) -> float:
    """A round upper bound of ``v`` for a scale (1, 2, 2.5, 5 x 10^k)."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= v * 0.999:
            return float(m * e)
    return float(10 * e)


#: Short names of the row units for a narrow axis gutter.
_UNIT_SHORT = {"token": "tok", "request": "req", "interval": "intvl"}


def axis_unit(unit: str, width: int) -> str:
    """The row unit as the axis label in ``width`` cells: the word, else its short form
    (``req``), never a word cut in the middle; right-aligned."""
    for text in (unit, _UNIT_SHORT.get(unit, "")):
        if text and len(text) <= width:
            return text.rjust(width)
    return " " * max(0, width)


def axis_row(w: TokenWindow, mark: int | None, style: Style, mark_style: Style, tick: str) -> list[Segment]:
    """The cells of the token axis under a window's columns: token numbers at round numbers
    (spaced so they never touch), the selected column marked."""
    cols = w.cols
    chars = [" "] * cols
    k = w.used
    if k:
        per = max(1e-9, (w.hi - w.lo) / k)
        label_w = len(f"{w.hi:,}")
        step = max(1, int(nice_step((label_w + 2) * per)))
        t = ((w.lo // step) + 1) * step
        if w.lo == 0:
            t = step
        ticks = [(0, w.lo + 1)] if w.lo == 0 else []
        while t <= w.hi:
            c = w.col_of(t - 1)
            if c is not None:
                ticks.append((c, t))
            t += step
        for col, t in ticks:
            label = f"{t:,}"
            if col + len(label) > cols or (mark is not None and col - 1 <= mark <= col + len(label)):
                continue
            if any(ch != " " for ch in chars[max(0, col - 1): col + len(label) + 1]):
                continue
            chars[col: col + len(label)] = list(label)
    segs = [Segment("".join(chars), style)]
    if mark is not None and 0 <= mark < cols:
        segs = [Segment("".join(chars[:mark]), style), Segment(tick, mark_style),
                Segment("".join(chars[mark + 1:]), style)]
    return [s for s in segs if s.text]


class MemoTruecolor(LineFilter):
    """Textual's :class:`~textual.filter.ANSIToTruecolor` (``inner``) with its answer remembered
    per style value and background: a line whose styles need no conversion (the views draw in
    truecolor) comes back as it is instead of as a copy of every segment. The same segments
    come out as from ``inner.apply`` (tests/widgets/test_app_filter.py).

    The memo holds one entry per distinct style (equal styles share it, as rich compares them):
    a view that builds its styles afresh every frame (a chart's cells) adds none after its first
    frame, where entries per style object kept every frame's styles alive until the cap."""

    #: Styles remembered per background before the memo starts again (bounded memory).
    MAX_STYLES = 8192

    def __init__(self, inner: ANSIToTruecolor) -> None:
        super().__init__(enabled=inner.enabled)
        self.inner = inner
        # background -> style -> its conversion, None when it needs none (the style itself)
        self._memo: dict[Color, dict[Style, Style | None]] = {}

    def held(self) -> int:
        """Styles remembered, over every background."""
        return sum(len(m) for m in self._memo.values())

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        memo = self._memo.get(background)
        if memo is None or len(memo) > self.MAX_STYLES:
            if len(self._memo) > 64:
                self._memo.clear()
            memo = self._memo[background] = {}
        convert = self.inner.truecolor_style
        rich_bg = background.rich_color
        out: list[Segment] | None = None
        for i, seg in enumerate(segments):
            text, style, control = seg
            new = None
            if style is not None:
                if style in memo:
                    got = memo[style]
                    new = style if got is None else got
                else:
                    conv = convert(style, rich_bg)
                    memo[style] = None if conv is style else conv
                    new = conv
            if out is None:
                if new is style and control is None:
                    continue
                out = list(segments[:i])
            out.append(seg if new is style and control is None else Segment(text, new, None))
        return segments if out is None else out
