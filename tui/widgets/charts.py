"""Per-token charts drawn with Textual's line API: the wall-time breakdown and the trends.

Both show the same token window: the last ``width`` tokens up to the playback cursor, one
column per token, so a column in the breakdown and the trend rows under it are the same token.
Frames are computed once per (run version, cursor, size) (:class:`~bmoe_top.tui.widgets.lines.FrameCache`)
and ``render_line`` only slices them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.widgets.lines import FrameCache, segments
from bmoe_top.tui.widgets.palette import (
    COMPUTE,
    DIM,
    EIGHTHS,
    FLASH,
    LABEL,
    MGMT,
    NO_DATA_GLYPH,
    NO_DATA_STYLE,
    TITLE,
    TREND_STYLE,
)

_SERIES = ("compute", "flash", "mgmt")
_COLORS = {"compute": COMPUTE, "flash": FLASH, "mgmt": MGMT}


@lru_cache(maxsize=64)
def _style(color: str, bgcolor: str | None = None) -> Style:
    return Style(color=color, bgcolor=bgcolor)


#: Columns left of the bars (y labels) and right of them (values at the cursor); both widgets
#: use the same margins so a token is the same column in each.
GUTTER = 8
RIGHT = 18


class TokenWindowMixin:
    """Shared window logic: last ``w`` tokens before the cursor."""

    run: RunModel
    playback: Playback

    def window(self, w: int) -> tuple[int, int]:
        stop = min(self.playback.cursor, self.run.tokens.n)
        return max(0, stop - w), stop


class BreakdownChart(TokenWindowMixin, Widget):
    """Stacked bar per token: wall = compute + flash wait + mgmt (ms).

    Flash wait is ``io_ms`` in serial runs and ``stall_ms`` under overlap (lane-busy ``io_ms``
    is never stacked on wall). The y scale is the 98th percentile of wall over the whole run, so
    it does not jump while playing; taller bars are clipped with a ``▲`` marker.
    """

    DEFAULT_CSS = """
    BreakdownChart { height: 14; width: 1fr; }
    """

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self.frame = FrameCache(self.build)

    def build(self, width: int, height: int) -> list[Strip]:
        run = self.run
        rows = max(1, height - 2)
        cols = max(1, width - GUTTER - RIGHT)
        lo, hi = self.window(cols)
        with run.lock:
            mode, why = run.mode()
            parts = run.breakdown(lo, hi)
            n = run.tokens.n
            has_mgmt = run.tokens.has("mgmt_ms")
            top = run.wall_scale()
            info = self.cursor_info(parts, mode, lo, hi)
        flash_name = "stall_ms" if mode == "overlap" else "io_ms"
        title = [
            Segment("wall = ", TITLE), Segment("█ compute", Style(color=COMPUTE)), Segment("  +  ", DIM),
            Segment(f"█ flash wait ({flash_name})", Style(color=FLASH)), Segment("  +  ", DIM),
            Segment("█ mgmt" if has_mgmt else "mgmt missing", Style(color=MGMT) if has_mgmt else DIM),
            Segment(f"    {mode}: {why}", DIM),
        ]
        lines = [Strip(title).crop(0, width)]
        wall = parts["wall"]
        # stacked boundaries in units of eighth-rows
        comp = np.nan_to_num(np.clip(parts["compute"], 0, None))
        flash = np.nan_to_num(np.clip(parts["flash"], 0, None))
        mgmt = np.nan_to_num(np.clip(parts["mgmt"], 0, None))
        scale = rows * 8 / top
        b1 = np.rint(comp * scale).astype(int)
        b2 = np.rint((comp + flash) * scale).astype(int)
        b3 = np.rint((comp + flash + mgmt) * scale).astype(int)
        missing = ~np.isfinite(wall)
        clipped = b3 > rows * 8
        k = hi - lo
        grid: list[list[tuple[str, Style]]] = [[(" ", Style())] * k for _ in range(rows)]
        for j in range(k):
            if missing[j]:
                grid[rows - 1][j] = (NO_DATA_GLYPH, NO_DATA_STYLE)
                continue
            bounds = ((b1[j], COMPUTE), (b2[j], FLASH), (b3[j], MGMT))
            for r in range(rows):
                base = (rows - 1 - r) * 8  # eighths below this cell
                # which series covers the bottom of the cell, and where the next starts
                lower = None
                for b, c in bounds:
                    if b > base:
                        lower = (b, c)
                        break
                if lower is None:
                    continue  # this cell is above the bar's top
                b, c = lower
                fill = min(8, b - base)
                if fill >= 8:
                    grid[r][j] = ("█", _style(c))
                else:
                    upper = None
                    for b2_, c2 in bounds:
                        if b2_ > b:
                            upper = c2
                            break
                    grid[r][j] = (EIGHTHS[fill], _style(c, upper))
            if clipped[j]:
                grid[0][j] = ("▲", _style("#ffffff", MGMT if b2[j] <= rows * 8 else FLASH))
        for r in range(rows):
            if r == 0:
                label = f"{top:6.0f}ms"[: GUTTER]
            elif r == rows - 1:
                label = "     0 "
            else:
                label = ""
            cells = grid[r] + [(" ", Style())] * (cols - k)
            side = info[r] if r < len(info) else ("", DIM)
            lines.append(Strip([Segment(label.rjust(GUTTER - 1) + "│", DIM), *segments(cells),
                                Segment(" " + side[0][: RIGHT - 1], side[1])]))
        unit = run.row_unit
        axis = f"{unit}s {lo + 1}–{hi} of {n}" if hi > lo else f"no {unit}s yet ({n} in run)"
        if unit != "token" and hi > lo:
            axis += f"  (ms per token, mean over each {unit})"
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "└", DIM), Segment(axis, DIM)]).crop(0, width))
        return lines

    def cursor_info(self, parts: dict[str, np.ndarray], mode: str, lo: int, hi: int) -> list[tuple[str, Style]]:
        """The numbers of the token at the cursor (row ``hi - 1``), for the right margin."""
        if hi <= lo:
            return []
        i = hi - 1
        tok = self.run.tokens

        def v(name: str, arr: np.ndarray | None = None) -> str:
            x = float(arr[i - lo]) if arr is not None else float(tok.view(name, i, i + 1)[0])
            return "missing" if not math.isfinite(x) else f"{x:,.1f}"

        out = [(f"{self.run.row_unit} {i + 1:,}", TITLE),
               (f"wall  {v('', parts['wall'])} ms", LABEL),
               (f"comp  {v('', parts['compute'])}", Style(color=COMPUTE)),
               (f"flash {v('', parts['flash'])}", Style(color=FLASH)),
               (f"mgmt  {v('', parts['mgmt'])}", Style(color=MGMT))]
        if mode == "overlap":
            out.append((f"io(lanes) {v('io_ms')}", DIM))
        out.append((f"read  {v('read_mib')} MiB", LABEL))
        hit = float(tok.view("cache_hit_pct", i, i + 1)[0])
        out.append((f"hit   {'no cache' if hit < 0 else v('cache_hit_pct') + ' %'}", LABEL))
        return out

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        lines = self.frame.get((self.run.version, self.playback.cursor, width, height), width, height)
        if y < len(lines):
            return lines[y].extend_cell_length(width)
        return Strip.blank(width)


class TrendChart(TokenWindowMixin, Widget):
    """One row per trend, aligned with the breakdown's tokens: tok/s, hit %, MiB/token, memory.

    A trend the source did not send is shown as ``missing``, never as a flat zero line.
    """

    DEFAULT_CSS = """
    TrendChart { height: 6; width: 1fr; }
    """

    #: (label, column or derived name, unit)
    TRENDS = (
        ("tok/s", "tok_s", ""),
        ("hit %", "cache_hit_pct", "%"),
        ("MiB/tok", "read_mib", "MiB"),
        ("rss", "rss_mib", "MiB"),
        ("avail", "mem_available_mib", "MiB"),
        ("majflt", "majflt", ""),
    )

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self.frame = FrameCache(self.build)

    def series(self, name: str, lo: int, hi: int) -> np.ndarray | None:
        tok = self.run.tokens
        if name == "tok_s" and self.run.row_unit != "token" and tok.has("tok_s"):
            return tok.view("tok_s", lo, hi)  # a row's own rate (an interval may be partly idle)
        if name == "tok_s":
            if not tok.has("wall_ms"):
                return None
            w = tok.view("wall_ms", lo, hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(w > 0, 1000.0 / w, np.nan)
        if name == "cache_hit_pct":
            if not tok.has(name):
                return None
            v = tok.view(name, lo, hi).copy()
            v[v < 0] = np.nan  # -1 = no cache
            return v
        if not tok.has(name):
            return None
        return tok.view(name, lo, hi)

    def build(self, width: int, height: int) -> list[Strip]:
        cols = max(1, width - GUTTER - RIGHT)
        lo, hi = self.window(cols)
        lines = []
        with self.run.lock:
            for label, name, unit in self.TRENDS[:height]:
                v = self.series(name, lo, hi)
                head = Segment(label.rjust(GUTTER - 1) + "│", LABEL)
                if v is None:
                    lines.append(Strip([head, Segment(" missing (not in this source)", DIM)]))
                    continue
                finite = v[np.isfinite(v)]
                if not finite.size:
                    lines.append(Strip([head, Segment(" no data in this window", DIM)]))
                    continue
                vmin, vmax = float(finite.min()), float(finite.max())
                if name == "cache_hit_pct":
                    vmin, vmax = 0.0, 100.0
                span = vmax - vmin if vmax > vmin else 1.0
                cells = []
                for x in v:
                    if not math.isfinite(x):
                        cells.append((NO_DATA_GLYPH, NO_DATA_STYLE))
                    else:
                        cells.append((EIGHTHS[1 + int(round((x - vmin) / span * 7))], TREND_STYLE))
                last = finite[-1] if np.isfinite(v[-1]) else math.nan
                tail = f" {fmt(float(last), 1, unit)}"[:RIGHT]
                lines.append(Strip([head, *segments(cells), Segment(" " * (cols - len(cells))),
                                    Segment(tail, LABEL)]))
        return lines

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        lines = self.frame.get((self.run.version, self.playback.cursor, width, height), width, height)
        if y < len(lines):
            return lines[y].crop(0, width).extend_cell_length(width)
        return Strip.blank(width)

