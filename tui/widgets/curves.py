"""Curves drawn with Textual's line API: y against x for several series (the what-if screen's
hit % and MiB read per token against the cache budget, the compare screen's wall time per
token), with a scale and units on both axes, one glyph and one colour per series, a legend that
wraps instead of being cut off, vertical marks (the run's budget, T, the whole bank), a shaded
region (below T, where LRU cannot hit) and a cursor column.

Colours are the 16 ANSI colours (the same in a 16-colour terminal as in a true-colour one);
every series also has its own glyph, so the chart reads under NO_COLOR, and an ASCII glyph set
for ``ascii`` mode. Every segment carries a style (never None).
"""

from __future__ import annotations

import locale
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.lines import FrameCache, segments
from bmoe_top.tui.widgets.palette import DIM, LABEL, TITLE

__all__ = ["CurveSeries", "CurveMark", "CurvePlot", "CurveChart", "SERIES_LOOK", "nice_ticks", "ascii_mode"]

F64 = npt.NDArray[np.float64]

#: (glyph, ASCII glyph, ANSI colour) per series slot; policies and arms take them in order
SERIES_LOOK: tuple[tuple[str, str, str], ...] = (
    ("●", "o", "bright_cyan"), ("■", "#", "magenta"), ("▲", "^", "bright_blue"), ("▼", "v", "green"),
    ("✚", "+", "yellow"), ("○", "@", "white"), ("□", "=", "cyan"), ("◇", "%", "bright_green"),
    ("★", "*", "bright_red"), ("◆", "&", "bright_yellow"),
)
_AXIS = Style(color="bright_black")
_PLAIN = Style()
_SHADE_BG = "grey27"


def ascii_mode() -> bool:
    """ASCII glyphs: ``BMOE_ASCII=1``, or a locale whose encoding is not UTF-8."""
    if os.environ.get("BMOE_ASCII", "") not in ("", "0"):
        return True
    enc = (locale.getpreferredencoding(False) or "").lower().replace("-", "")
    return enc not in ("utf8", "utf16", "utf32")


@dataclass(frozen=True, slots=True, eq=False)
class CurveSeries:
    """One series: ``x`` and ``y`` float [n] (NaN = no value there), drawn with SERIES_LOOK
    slot ``look``; ``label`` names it in the legend; ``points``: only the columns its points
    fall in are drawn (measured points over a curve), never the line between them."""

    key: str
    label: str
    x: F64
    y: F64
    look: int = 0
    points: bool = False


@dataclass(frozen=True, slots=True)
class CurveMark:
    """A vertical mark at ``x`` (e.g. the run's budget), named ``label`` in the legend;
    ``glyph`` / ``ascii`` draw it, ``color`` (an ANSI name) colours it."""

    x: float
    label: str
    glyph: str = "│"
    ascii: str = "|"
    color: str = "white"


@dataclass(frozen=True, slots=True, eq=False)
class CurvePlot:
    """What a :class:`CurveChart` draws. ``y_min``/``y_max`` fix the y scale (None: from the
    data, from 0); ``x_unit`` the x ticks' unit, the one the budgets around the chart are given in
    (ticks past 10,000 read ``12.5k``); ``shade_below`` greys the
    region left of that x (``shade_label`` explains it); ``hline`` a horizontal reference (y,
    label), e.g. the compulsory-miss ceiling; ``cursor`` an x to highlight."""

    title: str
    x_label: str
    x_unit: str
    y_label: str
    y_unit: str
    series: tuple[CurveSeries, ...]
    marks: tuple[CurveMark, ...] = ()
    y_min: float | None = 0.0
    y_max: float | None = None
    shade_below: float | None = None
    shade_label: str = ""
    hline: tuple[float, str] | None = None
    cursor: float | None = None
    x_min: float | None = None
    x_max: float | None = None
    note: str = ""
    hidden: frozenset[str] = field(default_factory=frozenset)
    #: False: the series are not listed (a chart under another with the same series says so)
    legend: bool = True


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + 1e-9 * step:
        out.append(round(v, 10))
        v += step
    return out


def _tick_label(v: float, unit: str, scale: float) -> str:
    x = v / scale
    if abs(x) >= 10000:
        return f"{x / 1000:g}k"
    if x == int(x):
        return f"{int(x):,}"
    return f"{x:g}"


class CurveChart(Widget):
    """Draws a :class:`CurvePlot` (set with :meth:`set_plot`). Layout, top to bottom: the
    title, the legend (wrapped over as many lines as it needs), the plot with the y scale on
    the left, the x axis with its ticks and unit. Columns left of ``shade_below`` are greyed
    (a dim fill glyph under NO_COLOR and ASCII); marks are vertical lines; the cursor column is
    reversed. Frames are rebuilt only when the plot or the size changes."""

    DEFAULT_CSS = """
    CurveChart { height: 1fr; width: 1fr; min-height: 8; }
    """

    GUTTER = 7  # y labels and the axis line

    def __init__(self, plot: CurvePlot | None = None, *, ascii: bool | None = None, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.plot = plot
        self._ascii = ascii
        self._version = 0
        self.frame = FrameCache(self.build)

    def set_plot(self, plot: CurvePlot) -> None:
        self.plot = plot
        self._version += 1
        self.refresh()

    @property
    def ascii(self) -> bool:
        """ASCII glyphs: as asked, else the app's look (``--ascii``, a locale without UTF-8) or
        :func:`ascii_mode`."""
        if self._ascii is not None:
            return self._ascii
        return look_of(self).ascii or ascii_mode()

    @property
    def mono(self) -> bool:
        try:
            return bool(self.app.no_color)
        except Exception:  # not mounted in an app
            return False

    # -------------------------------------------------------------------------------- layout
    def legend_lines(self, width: int) -> list[list[Segment]]:
        """The legend, wrapped to ``width``: every series (glyph and label), then the marks and
        the shaded region; never cut off (an entry longer than the width is wrapped by words)."""
        plot = self.plot
        if plot is None:
            return []
        items: list[list[Segment]] = []
        if not plot.legend:
            items.append([Segment("series as in the chart above", DIM)])
        n_hidden = 0
        for s in plot.series if plot.legend else ():
            g, a, c = SERIES_LOOK[s.look % len(SERIES_LOOK)]
            if s.key in plot.hidden:
                n_hidden += 1
                continue
            items.append([Segment(a if self.ascii else g, Style(color=c, bold=True)), Segment(" " + s.label, LABEL)])
        if n_hidden:
            items.append([Segment(f"+{n_hidden} hidden", DIM)])
        for m in plot.marks:
            items.append([Segment(m.ascii if self.ascii else m.glyph, Style(color=m.color, bold=True)),
                          Segment(" " + m.label, LABEL)])
        if plot.hline is not None:
            items.append([Segment("-" if self.ascii else "┄", Style(color="white")), Segment(" " + plot.hline[1],
                                                                                             LABEL)])
        if plot.shade_below is not None and plot.shade_label:
            items.append([Segment(self._shade_glyph(), self._shade_style()), Segment(" " + plot.shade_label, DIM)])
        lines: list[list[Segment]] = []
        cur: list[Segment] = []
        used = 0
        for it in items:
            n = sum(len(s.text) for s in it)
            if cur and used + 2 + n > width:
                lines.append(cur)
                cur, used = [], 0
            if cur:
                cur.append(Segment("  ", _PLAIN))
                used += 2
            if n > width:  # one long entry: wrap it by words
                words = "".join(s.text for s in it).split(" ")
                style = it[-1].style or _PLAIN
                line = ""
                for w in words:
                    if line and len(line) + 1 + len(w) > width:
                        lines.append([Segment(line, style)])
                        line = w
                    else:
                        line = f"{line} {w}" if line else w
                cur, used = [Segment(line, style)], len(line)
                continue
            cur.extend(it)
            used += n
        if cur:
            lines.append(cur)
        return lines

    def _shade_glyph(self) -> str:
        return ":" if self.ascii else "░"

    def _shade_style(self) -> Style:
        return Style(color="bright_black", bgcolor=None if self.mono else _SHADE_BG)

    def build(self, width: int, height: int) -> list[Strip]:
        plot = self.plot
        if plot is None or width < self.GUTTER + 8 or height < 4:
            return [Strip([Segment("no data" if plot is None else "too small", DIM)])]
        lines: list[Strip] = []
        head = [Segment(plot.title, TITLE)]
        if plot.note:
            head.append(Segment("  " + plot.note, DIM))
        lines.append(Strip(head).crop(0, width))
        legend = self.legend_lines(width)
        rows = height - 1 - len(legend) - 2
        if rows < 3:  # keep the plot: the legend then takes what is left
            legend = legend[: max(0, height - 6)]
            rows = height - 1 - len(legend) - 2
        lines += [Strip(seg).crop(0, width) for seg in legend]
        rows = max(1, rows)
        pw = width - self.GUTTER
        vis = [s for s in plot.series if s.key not in plot.hidden]
        xs = [s.x[np.isfinite(s.x)] for s in vis] or [np.zeros(1)]
        allx = np.concatenate(xs) if any(a.size for a in xs) else np.zeros(1)
        x0 = plot.x_min if plot.x_min is not None else float(allx.min()) if allx.size else 0.0
        x1 = plot.x_max if plot.x_max is not None else float(allx.max()) if allx.size else 1.0
        if x1 <= x0:
            x1 = x0 + 1.0
        ys = [s.y[np.isfinite(s.y)] for s in vis]
        ally = np.concatenate(ys) if ys and any(a.size for a in ys) else np.zeros(1)
        y0 = plot.y_min if plot.y_min is not None else float(ally.min())
        y1 = plot.y_max if plot.y_max is not None else float(ally.max()) * 1.05
        if plot.hline is not None and plot.y_max is None:
            y1 = max(y1, plot.hline[0])
        if not y1 > y0:
            y1 = y0 + 1.0
        # cell centres
        cx = x0 + (np.arange(pw) + 0.5) * (x1 - x0) / pw
        col_of = lambda x: int(np.clip(math.floor((x - x0) / (x1 - x0) * pw), 0, pw - 1))  # noqa: E731
        grid: list[list[tuple[str, Style]]] = [[(" ", _PLAIN)] * pw for _ in range(rows)]
        shade = np.zeros(pw, dtype=bool)
        if plot.shade_below is not None:
            shade = cx < plot.shade_below
        if shade.any():
            sg, ss = self._shade_glyph(), self._shade_style()
            fill = sg if self.mono or self.ascii else " "
            for r in range(rows):
                for c in np.flatnonzero(shade).tolist():
                    grid[r][c] = (fill, ss)
        if plot.hline is not None and y0 <= plot.hline[0] <= y1:
            r = self._row(plot.hline[0], y0, y1, rows)
            for c in range(pw):
                grid[r][c] = ("-" if self.ascii else "┄", Style(color="white", bgcolor=grid[r][c][1].bgcolor))
        for m in plot.marks:
            if x0 <= m.x <= x1:
                c = col_of(m.x)
                for r in range(rows):
                    grid[r][c] = (m.ascii if self.ascii else m.glyph,
                                  Style(color=m.color, bgcolor=grid[r][c][1].bgcolor))
        # series, the first drawn last (on top)
        for s in reversed(vis):
            g, a, color = SERIES_LOOK[s.look % len(SERIES_LOOK)]
            st = Style(color=color, bold=True)
            order = np.argsort(s.x, kind="stable")
            sx, sy = s.x[order], s.y[order]
            ok = np.isfinite(sx) & np.isfinite(sy)
            sx, sy = sx[ok], sy[ok]
            if not sx.size:
                continue
            # the value at each column: the series' points in it (their mean), else interpolated
            # between neighbours inside the series' range
            yv = np.interp(cx, sx, sy, left=np.nan, right=np.nan)
            if sx.size == 1 or s.points:
                yv = np.full(pw, np.nan)
            cols = np.clip(np.floor((sx - x0) / (x1 - x0) * pw).astype(np.int64), 0, pw - 1)
            inside = (sx >= x0) & (sx <= x1)
            if inside.any():
                sums = np.bincount(cols[inside], weights=sy[inside], minlength=pw)
                cnt = np.bincount(cols[inside], minlength=pw)
                has = cnt > 0
                yv[has] = sums[has] / cnt[has]
            for c in np.flatnonzero(np.isfinite(yv)).tolist():
                v = float(yv[c])
                if v < y0 or v > y1:
                    continue
                r = self._row(v, y0, y1, rows)
                grid[r][c] = (a if self.ascii else g, Style(color=color, bold=True, bgcolor=grid[r][c][1].bgcolor)
                              if not self.mono else st)
        if plot.cursor is not None and x0 <= plot.cursor <= x1:
            c = col_of(plot.cursor)
            for r in range(rows):
                ch, stl = grid[r][c]
                grid[r][c] = (ch if ch.strip() else (":" if self.ascii else "┆"), stl + Style(reverse=True))
        ticks = nice_ticks(y0, y1, max(2, min(5, rows // 2)))
        tick_rows = {self._row(t, y0, y1, rows): t for t in ticks}
        for r in range(rows):
            t = tick_rows.get(r)
            label = (_tick_label(t, plot.y_unit, 1.0) + ("%" if plot.y_unit == "%" else "")) if t is not None else ""
            lines.append(Strip([Segment(label.rjust(self.GUTTER - 1)[-(self.GUTTER - 1):], _AXIS),
                                Segment("┤" if t is not None and not self.ascii else ("+" if t is not None else
                                                                                      ("|" if self.ascii else "│")),
                                        _AXIS),
                                *segments(grid[r])]))
        # x axis: a tick line and the labels
        scale, unit = 1.0, plot.x_unit  # the unit every budget on the screen is given in (never GiB beside MiB)
        xt = nice_ticks(x0 / scale, x1 / scale, max(2, pw // 12))
        axis = ["-" if self.ascii else "─"] * pw
        tail = f" {plot.x_label} ({unit})"
        room = pw - len(tail) if len(tail) < pw // 2 else pw
        labels = [" "] * pw
        last_end = -2
        for t in xt:
            c = col_of(t * scale)
            axis[c] = "+" if self.ascii else "┬"
            text = _tick_label(t, unit, 1.0)
            start = max(0, min(pw - len(text), c - len(text) // 2))
            if start > last_end + 1 and start + len(text) <= room:
                labels[start:start + len(text)] = list(text)
                last_end = start + len(text)
        if room < pw:
            labels[room:] = list(tail)
        corner = "+" if self.ascii else "└"
        lines.append(Strip([Segment(" " * (self.GUTTER - 1) + corner, _AXIS), Segment("".join(axis), _AXIS)]))
        lines.append(Strip([Segment(unit[: self.GUTTER - 1].rjust(self.GUTTER - 1) + " ", _AXIS),
                            Segment("".join(labels).rstrip(), LABEL)]).crop(0, width))
        return lines

    @staticmethod
    def _row(v: float, y0: float, y1: float, rows: int) -> int:
        """Row of value ``v`` (0 = top)."""
        f = (v - y0) / (y1 - y0)
        return int(np.clip(rows - 1 - math.floor(f * (rows - 1) + 0.5), 0, rows - 1))

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        lines = self.frame.get((self._version, width, height, self.ascii, self.mono), width, height)
        if y < len(lines):
            return lines[y].crop(0, width).extend_cell_length(width, _PLAIN)
        return Strip.blank(width, _PLAIN)

    def text(self) -> str:
        """The chart as plain text at its size (tests)."""
        w, h = self.size.width or 100, self.size.height or 24
        return "\n".join(s.text for s in self.build(w, h))

    @staticmethod
    def series_from(key: str, label: str, x: Sequence[float] | F64, y: Sequence[float] | F64,
                    look: int) -> CurveSeries:
        """A series from sequences (copied to float arrays)."""
        return CurveSeries(key, label, np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), look)
