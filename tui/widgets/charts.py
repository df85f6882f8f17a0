"""Per-token charts drawn with the line API: the whole-run overview strip, the wall-time
breakdown and the trends.

The breakdown and the trends (and the layer x token heatmap in ``grids``) draw the time window
of :meth:`~bmoe_top.tui.playback.Playback.window` with the same margins
(:func:`~bmoe_top.tui.widgets.lines.margins`), so column ``j`` is the same tokens in each: a
spike in the breakdown can be traced down into its layers. Zoomed out, a column is the mean of
its tokens (exact bins from ``RunModel.series``). The right margin reads out the selected token.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.strip import Strip

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.quantities import Quantity, q
from bmoe_top.tui.model.run import robust_top
from bmoe_top.tui.playback import Playback, TokenWindow
from bmoe_top.tui.present.numbers import MISSING, mib, ms, show, sig, unit_text
from bmoe_top.tui.widgets.base import RunView, absent_phrase
from bmoe_top.tui.widgets.lines import (
    axis_row,
    axis_unit,
    blank,
    fit_text,
    gutter_text,
    margins,
    nice_max,
    segments_from_index,
    strip,
    wrap_fields,
)
from bmoe_top.tui.widgets.palette import BLANK, Look
from bmoe_top.tui.widgets.sizing import Need

__all__ = ["BreakdownChart", "OverviewStrip", "TRENDS", "TrendChart", "breakdown_columns", "token_text"]

_SERIES = ("compute", "flash", "mgmt")


def breakdown_columns(run: RunModel, w: TokenWindow, mode: str) -> dict[str, np.ndarray]:
    """Per column of ``w``: wall, compute, flash, mgmt (ms; the mean of the column's tokens when
    zoomed out). flash is ``stall_ms`` under overlap, ``io_ms`` otherwise; compute is
    ``compute_ms`` when sent, else the residual."""
    if w.exact:
        return run.breakdown(w.lo, w.hi)
    flash_col = "stall_ms" if mode == "overlap" else "io_ms"
    v = w.values(run, ["wall_ms", flash_col, "mgmt_ms", "compute_ms"])
    wall, flash, mgmt = v["wall_ms"], v[flash_col], v["mgmt_ms"]
    if run.tokens.has("compute_ms"):
        compute = v["compute_ms"]
    else:
        compute = wall - np.nan_to_num(flash) - np.nan_to_num(mgmt)
    return {"wall": wall, "compute": compute, "flash": flash, "mgmt": mgmt}


def token_value(run: RunModel, name: str, row: int) -> float:
    """One token column's value at ``row`` (NaN when absent or not held)."""
    if row < 0 or row >= run.tokens.n:
        return math.nan
    return float(run.tokens.view(name, row, row + 1)[0])


def token_text(run: RunModel, row: int, limit: int = 40) -> str | None:
    """The answer text token ``row`` added (None when the source does not say)."""
    with run.lock:
        if not run.tokens.has("text_end") or not 0 <= row < run.tokens.n:
            return None
        end = token_value(run, "text_end", row)
        turn_no = token_value(run, "turn", row)
        if not math.isfinite(end):
            return None
        prev = token_value(run, "text_end", row - 1) if row > 0 else math.nan
        if row > 0 and token_value(run, "turn", row - 1) != turn_no:
            prev = math.nan
        turn = run.turn_at(row)
        if turn is None:
            return None
        a = int(prev) if math.isfinite(prev) else 0
        b = min(int(end), turn.text_len)
        if b <= a:
            return ""
        return turn.text_prefix(b)[a:b][:limit]


class TimeView(RunView):
    """A view of the shared time window: the margins, the window, and clicks that select a token."""

    def geometry(self, width: int) -> tuple[int, int, int]:
        gut, right = margins(width)
        return gut, right, max(1, width - gut - right)

    def window(self, width: int) -> TokenWindow:
        return self.playback.window(self.geometry(width)[2])

    def column_at(self, x: int) -> tuple[TokenWindow, int] | None:
        gut, _right, cols = self.geometry(self.content_size.width)
        w = self.playback.window(cols)
        j = x - gut
        if 0 <= j < w.used:
            return w, j
        return None

    def on_click(self, event: events.Click) -> None:
        hit = self.column_at(event.x)
        if hit is None:
            return
        w, j = hit
        a, b = w.rows_of(j)
        if b > a:
            self.playback.select(a)
            self.post_message(TokenSelected(self.playback.sel))


class TokenSelected(events.Message):
    """A view selected a token (a click): the screen repaints every view."""

    def __init__(self, row: int) -> None:
        super().__init__()
        self.row = row


# ====================================================================================== overview
class OverviewStrip(TimeView):
    """The whole run, downsampled into the width: hit % and ms/token per column (exact bins), with
    the visible window marked under it (and shaded in truecolour). A click moves the window there."""

    DEFAULT_CSS = "OverviewStrip { height: 3; }"

    def need(self, compact: bool, first: bool = False) -> Need:
        rows = 2 if compact else 3
        return Need(rows, rows, priority=2)

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(run, playback, **kw)
        self._whole: tuple[tuple[Any, ...], TokenWindow, dict[str, np.ndarray]] | None = None

    def build(self, width: int, height: int) -> list[Strip]:
        look, run = self.look, self.run
        g = look.g
        gut, right, cols = self.geometry(width)
        w = self.window(width)
        with run.lock:
            n = run.tokens.n
            if n == 0:
                return [strip([(" " * gut, BLANK), (absent_phrase(run, f"{run.row_unit}s") + " (whole-run overview)",
                                                    look.dim)], width)]
            has_hit = run.tokens.has("cache_hit_pct")
            has_wall = run.tokens.has("wall_ms")
            whole, means = self._whole_run(run, cols)
        used = whole.used
        col_lo, col_hi = whole.starts, whole.stops
        in_win = (col_hi > w.lo) & (col_lo < w.hi) & (np.arange(cols) < used)
        shade = look.window if look.colors == "truecolor" else None
        out: list[Strip] = []
        spark = g.spark
        want = [("hit %", "cache_hit_pct")] if has_hit else []
        if has_wall:
            want.append(("ms/tok", "wall_ms"))
        want = want[: max(1, height - 1)] if height >= 2 else want[:1]
        n_hit = len(look.hit_cells)
        for label, name in want:
            mean = np.full(cols, np.nan)
            mean[:used] = means[name]
            if name == "cache_hit_pct":
                mean = np.where(mean < 0, np.nan, mean)
                lo_v, hi_v = 0.0, 100.0
                tail = self._hit_tail(run)
            else:
                finite = mean[np.isfinite(mean)]
                hi_v = nice_max(float(finite.max())) if finite.size else 1.0
                lo_v = 0.0
                tail = f"0–{sig(hi_v, 2)} ms"
            ok = np.isfinite(mean)
            v = np.where(ok, mean, 0.0)
            lev = np.clip(np.floor((v - lo_v) / (hi_v - lo_v) * len(spark)), 0, len(spark) - 1).astype(np.int64)
            hit_bin = np.clip(v / 100.0 * n_hit, 0, n_hit - 1).astype(np.int64) if name == "cache_hit_pct" \
                else np.zeros(cols, np.int64)
            # one code per distinct (level, hit bin, in the window) cell; -1 level: no data
            lev = np.where(ok, lev, -1)
            hit_bin = np.where(ok, hit_bin, 0)
            key = ((lev + 1) * n_hit + hit_bin) * 2 + in_win
            uniq, codes = np.unique(key, return_inverse=True)
            table = [self._spark_cell((int(k // 2) // n_hit - 1, int(k // 2) % n_hit, bool(k % 2)), look, shade, name)
                     for k in uniq.tolist()]
            out.append(Strip([Segment(gutter_text(label, gut) + g.vbar, look.label),
                              *segments_from_index(codes.reshape(-1), table),
                              Segment(" " + fit_text([tail], right - 1).ljust(right - 1), look.dim)]))
        if height >= 2 or not want:
            chars = np.where(in_win, g.window_fill, " ")
            first = int(np.argmax(in_win)) if in_win.any() else -1
            last = cols - 1 - int(np.argmax(in_win[::-1])) if in_win.any() else -1
            if first >= 0 and last > first:
                chars[first], chars[last] = g.window_l, g.window_r
            sel = w.selected
            mark = None
            mark = whole.col_of(sel)
            if mark is not None:
                chars[mark] = g.mark_up
            label = f"{w.lo + 1:,}–{w.hi:,} of {n:,}" if w.hi > w.lo else f"0 of {n:,}"
            per = ""
            short = f"{w.lo + 1:,}–{w.hi:,}/{n:,}" if w.hi > w.lo else f"0/{n:,}"
            tail = fit_text([f"window {label}{per}", f"{label}{per}", label, short, f"{w.hi:,}/{n:,}",
                             f"{w.lo + 1:,}–{w.hi:,}"], right - 1)
            out.append(Strip([Segment("run".rjust(gut - 1) + " ", look.dim),
                              Segment("".join(chars.tolist()), look.accent),
                              Segment(" " + tail.ljust(right - 1), look.dim)]))
        return out[:height]

    def _whole_run(self, run: RunModel, cols: int) -> tuple[TokenWindow, dict[str, np.ndarray]]:
        """The whole run in ``cols`` columns and its per-column means of hit % and wall time (call
        with the run's lock held). Token rows are only ever appended, so these change only when
        the run grows, a column appears, or the width changes: kept until then."""
        tok = run.tokens
        key = (tok.n, tok.start, tok.has("cache_hit_pct"), tok.has("wall_ms"), cols)
        if self._whole is None or self._whole[0] != key:
            whole = TokenWindow.make(0, tok.n, 1.0, cols, None, tok.n, spread=True)
            self._whole = (key, whole, whole.values(run, ["cache_hit_pct", "wall_ms"]))
        return self._whole[1], self._whole[2]

    @staticmethod
    def _hit_tail(run: RunModel) -> str:
        """The cumulative hit rate of the first and the newest token: the warm-up in numbers."""
        with run.lock:
            tok = run.tokens
            last = tok.last("cache_hit_pct")
            head = tok.view("cache_hit_pct", tok.start, min(tok.n, tok.start + 4096))
        ok = head[np.isfinite(head) & (head >= 0)]
        if not ok.size or not math.isfinite(last) or last < 0:
            return "no cache"
        first = f"{ok[0]:.1f}" if tok.start == 0 else "…"
        return f"{first}→{last:.1f} %"

    @staticmethod
    def _spark_cell(k: tuple[int, int, bool], look: Look, shade: Style | None, name: str) -> tuple[str, Style]:
        lev, hit_bin, in_win = k
        g = look.g
        if lev < 0:
            glyph, style = look.no_data
        else:
            glyph = g.spark[lev]
            if name == "cache_hit_pct" and look.colors != "mono":
                style = look.hit_cells[hit_bin][1]
            else:
                style = look.trend
        if in_win and shade is not None:
            style = style + shade
        return glyph, style

    def on_click(self, event: events.Click) -> None:
        gut, _right, cols = self.geometry(self.content_size.width)
        j = event.x - gut
        n = self.run.tokens.n
        if 0 <= j < cols and n:
            self.playback.seek(int(j * n // cols) + 1)
            self.post_message(TokenSelected(self.playback.sel))


# ===================================================================================== breakdown
class BreakdownChart(TimeView):
    """Stacked bar per column: wall = compute + flash wait + mgmt (ms per token).

    Flash wait is ``io_ms`` in serial runs and ``stall_ms`` under overlap (lane-busy ``io_ms`` is
    never stacked on wall). The y scale (ms, with ticks) is :func:`~bmoe_top.tui.model.run.robust_top`
    of wall over the rows held (the 98th percentile, or the far-outlier fence when lower), fixed
    while playing; taller bars are clipped with a marker and the legend counts them. A token too
    short for the smallest step a look draws (an eighth of a cell, a cell in ASCII) still shows a
    minimum mark at the base, never nothing. The selected token's column is marked; its values
    are read out on the right.
    """

    DEFAULT_CSS = "BreakdownChart { height: 14; }"

    #: Rows the breakdown needs at least, and would like, before the spare rows are shared.
    LEAST, WANT = 4, 10

    def need(self, compact: bool, first: bool = False) -> Need:
        if self.empty:
            return Need(1, 1, priority=3)
        return Need(self.LEAST - compact, self.WANT - 2 * compact, grow=1, priority=3)

    def need_key(self) -> Any:
        return self.empty

    @property
    def empty(self) -> bool:
        return self.run.tokens.n == 0 or not self.run.tokens.has("wall_ms")

    def build(self, width: int, height: int) -> list[Strip]:
        run, look = self.run, self.look
        g = look.g
        gut, right, cols = self.geometry(width)
        w = self.window(width)
        with run.lock:
            mode, _why = run.mode()
            n = run.tokens.n
            if self.empty:
                return [self._empty_line(width, gut)]
            parts = breakdown_columns(run, w, mode)
            has_mgmt = run.tokens.has("mgmt_ms")
            top = run.wall_scale() if w.exact or w.per_col <= 1 else self._binned_top(parts["wall"])
            sel = w.selected
            readout = self.readout(sel, mode, right - 1)
        top = nice_max(top)
        rows = max(1, height - 2)
        flash = "stall" if mode == "overlap" else "io"
        per = f" · mean per column ({w.zoom_label()})" if w.per_col >= 1.5 else ""
        unit = run.row_unit
        per_row = "" if unit == "token" else f" (ms/token, mean per {unit})"
        k = min(w.used, len(parts["wall"]))
        over = int(np.count_nonzero(parts["wall"][:k] > top * 1.0001))
        clip_note = f" · {g.clip} {over:,} over {sig(top, 3)} ms" if over else ""
        head = self._legend(look, has_mgmt, flash, per_row, per, gut + cols, clip_note)
        head_len = sum(seg.cell_length for seg in head)
        lines = [Strip([*head, Segment(" " * max(0, gut + cols - head_len), BLANK),
                        Segment(" " + readout[0][0][: right - 1].ljust(right - 1), readout[0][1])])]
        # a live run's routing can be a token ahead of its token line: bars for the rows held
        cells = self._bar_codes(parts, top, rows, k, look)
        codes, table = cells
        sel_col = w.col_of(sel)
        if sel_col is not None and sel_col < k:
            # mark the selected column in its empty cells
            mark_code = len(table)
            table.append(self._cursor_cell(look))
            col = codes[:, sel_col]
            col[col == 0] = mark_code
        memo: dict[int, Segment] = {}  # one table for every row: equal runs share a segment
        for r in range(rows):
            label = ""
            if r == 0:
                label = f"{sig(top, 3)} ms" if len(f"{sig(top, 3)} ms") <= gut - 1 else sig(top, 3)
            elif r == rows - 1:
                label = "0"
            elif rows >= 5 and r == rows // 2:
                label = sig(top * (rows - r) / rows, 3)
            seg_row = segments_from_index(codes[r], table, memo) if k else []
            side = readout[r + 1] if r + 1 < len(readout) else ("", look.dim)
            lines.append(Strip([Segment(label.rjust(gut - 1) + g.vbar, look.dim), *seg_row,
                                Segment(" " * (cols - k), BLANK),
                                Segment(" " + side[0][: right - 1].ljust(right - 1), side[1])]))
        axis = axis_row(w, sel_col, look.dim, look.accent, g.mark_up)
        span = f"{w.lo + 1:,}–{w.hi:,} of {n:,}" if w.hi > w.lo else f"0 of {n:,}"
        lines.append(Strip([Segment(axis_unit(unit, gut - 1) + g.corner, look.dim), *axis,
                            Segment(" " + fit_text([f"{unit}s {span}", span, f"{w.hi:,}/{n:,}"],
                                                   right - 1).ljust(right - 1), look.dim)]))
        return lines[:height]

    def _empty_line(self, width: int, gut: int) -> Strip:
        run, look = self.run, self.look
        if run.tokens.n and not run.tokens.has("wall_ms"):
            msg = "no per-token times in this source (no wall_ms)"
        elif run.status.live and run.row_unit == "token":
            msg = "no tokens yet: type a prompt below and press Enter" if run.status in ("ready", "loading") \
                else "no tokens yet"
        elif run.status.live:
            msg = f"no {run.row_unit}s yet"
        else:
            msg = f"no per-{run.row_unit} rows in this source"
        return strip([(" " * gut, BLANK), ("wall-time breakdown: ", look.title), (msg, look.dim)], width)

    @staticmethod
    def _binned_top(wall: np.ndarray) -> float:
        return robust_top(wall)

    @staticmethod
    def _legend(look: Look, has_mgmt: bool, flash: str, per_row: str, per: str, width: int,
                clip_note: str = "") -> list[Segment]:
        """The legend, as long as fits ``width``: each series' glyph and name in its colour, and
        ``clip_note`` (how many bars the scale clips) when it fits too."""
        fg, st = look.series_glyph, look.series
        emph = Style(bold=True) if look.colors == "mono" else BLANK

        def part(name: str, text: str) -> tuple[str, Style]:
            # ASCII's glyphs are # = +: in brackets, so "compute = flash" never reads as an equation
            glyph = f"[{fg[name]}]" if look.ascii else fg[name]
            return f"{glyph} {text}", st[name] + emph

        mg = part("mgmt", "mgmt") if has_mgmt else ("mgmt missing", look.dim)
        options = [
            [("wall = ", look.title), part("compute", "compute"), (" + ", look.dim),
             part("flash", f"flash wait ({flash}_ms)"), (" + ", look.dim), mg, (per_row + per, look.dim)],
            [("wall = ", look.title), part("compute", "compute"), (" + ", look.dim), part("flash", f"flash ({flash})"),
             (" + ", look.dim), mg, (per, look.dim)],
            [part("compute", "compute"), (" ", BLANK), part("flash", "flash"), (" ", BLANK), mg, (per, look.dim)],
            [part("compute", "comp"), (" ", BLANK), part("flash", "flash"), (" ", BLANK),
             part("mgmt", "mgmt") if has_mgmt else ("", BLANK)],
        ]
        for note in ([(clip_note, look.warn)], []) if clip_note else ([],):
            for opt in options:
                if sum(len(t) for t, _ in opt + note) <= width:
                    return [Segment(t, s_) for t, s_ in opt + note if t]
        return [Segment(t, s_) for t, s_ in options[-1] if t][: max(1, width)]

    @staticmethod
    def _cursor_cell(look: Look) -> tuple[str, Style]:
        glyph = ":" if look.ascii else "┊"
        return glyph, look.accent

    def _bar_codes(self, parts: dict[str, np.ndarray], top: float, rows: int, k: int,
                   look: Look) -> tuple[np.ndarray, list[tuple[str, Style]]]:
        """Cell codes ``[rows, k]`` of the stacked bars and the table they index (vectorised)."""
        codes = np.zeros((rows, k), dtype=np.int64)
        table: list[tuple[str, Style]] = [(" ", BLANK)]
        if k == 0:
            return codes, table
        wall = parts["wall"]
        comp = np.nan_to_num(np.clip(parts["compute"], 0, None))
        flash = np.nan_to_num(np.clip(parts["flash"], 0, None))
        mgmt = np.nan_to_num(np.clip(parts["mgmt"], 0, None))
        eighths = look.g.eighths
        q = 8 if eighths else 1  # sub-cell steps
        scale = rows * q / top
        b1 = np.rint(comp * scale).astype(np.int64)
        b2 = np.rint((comp + flash) * scale).astype(np.int64)
        b3 = np.rint((comp + flash + mgmt) * scale).astype(np.int64)
        base = ((rows - 1 - np.arange(rows)) * q)[:, None]
        s1 = b1[None, :] > base
        s2 = ~s1 & (b2[None, :] > base)
        s3 = ~s1 & ~s2 & (b3[None, :] > base)
        series = np.where(s1, 1, np.where(s2, 2, np.where(s3, 3, 0)))
        bs = np.where(s1, b1[None, :], np.where(s2, b2[None, :], b3[None, :]))
        fill = np.clip(bs - base, 0, q)
        up1 = np.where(b2 > b1, 2, np.where(b3 > b1, 3, 0))[None, :]
        up2 = np.where(b3 > b2, 3, 0)[None, :]
        upper = np.where(s1, up1, np.where(s2, up2, 0))
        upper = np.where(fill >= q, 0, upper)
        code = np.where(series > 0, series * 100 + fill * 10 + upper, 0)
        missing = ~np.isfinite(wall)
        code[rows - 1, missing] = 9
        # a token too short for one step of this look: a minimum mark at the base, never nothing
        tiny = ~missing & (b3 == 0) & (np.nan_to_num(wall) > 0)
        code[rows - 1, tiny] = 7
        clipped = b3 > rows * q
        code[0, clipped & ~missing] = 8
        uniq, inv = np.unique(code, return_inverse=True)
        table = [self._bar_cell(int(c), look) for c in uniq.tolist()]
        return inv.reshape(code.shape).astype(np.int64), table

    @staticmethod
    def _bar_cell(code: int, look: Look) -> tuple[str, Style]:
        if code == 0:
            return " ", BLANK
        if code == 9:
            return look.no_data
        if code == 7:  # under one step: the lowest mark there is
            eighths = look.g.eighths
            return (eighths[1] if eighths else "_"), look.series["compute"]
        if code == 8:
            return look.g.clip, Style(bold=True) if look.colors == "mono" else Style(color="bright_white"
                                                                                       if look.colors == "16"
                                                                                       else "#ffffff", bold=True)
        series, fill, upper = code // 100, (code // 10) % 10, code % 10
        name = _SERIES[series - 1]
        st = look.series[name]
        eighths = look.g.eighths
        if not eighths or fill >= 8:
            return look.series_glyph[name] if not eighths else look.g.full, st
        if look.colors == "mono":
            if upper:  # two series share the cell: the texture of the one filling most of it
                return look.series_glyph[name if fill >= 4 else _SERIES[upper - 1]], BLANK
            return eighths[fill], BLANK  # the bar's top: its height to the eighth, without a texture
        bg = look.series[_SERIES[upper - 1]].color if upper else None
        return eighths[fill], Style(color=st.color, bgcolor=bg)

    def readout(self, row: int | None, mode: str, width: int) -> list[tuple[str, Style]]:
        """The selected token's numbers (right margin): a header, then one value per line."""
        run, look = self.run, self.look
        if row is None or row < 0:
            return [("", look.dim)]
        unit = run.row_unit

        def v(name: str) -> float:
            return token_value(run, name, row)

        parts = run.breakdown(row, row + 1)
        wall, comp, fl, mg = (float(parts[k][0]) if len(parts[k]) else math.nan
                              for k in ("wall", "compute", "flash", "mgmt"))
        out: list[tuple[str, Style]] = [(f"{look.g.mark_down} {unit} {row + 1:,}", look.title)]
        lw = 8 if width >= 20 else (6 if width >= 15 else 5)

        def line(label: str, value: str, style: Style) -> None:
            text = f"{label:<{lw - 1}} {value}"  # at least one space: a label never runs into its value
            if len(text) > width:
                text = f"{label} {value.replace(' ', '')}" if label else value.replace(" ", "")
            out.append((text, style))

        wide = lw == 8
        line("wall", ms(wall) if math.isfinite(wall) else MISSING, look.label)
        line("compute" if wide else "comp", ms(comp) if math.isfinite(comp) else MISSING, look.series["compute"])
        line("flash", (ms(fl) if math.isfinite(fl) else MISSING), look.series["flash"])
        line("mgmt", ms(mg) if math.isfinite(mg) else MISSING, look.series["mgmt"])
        if mode == "overlap":
            line("io lanes" if wide else "lanes", ms(v("io_ms")), look.dim)
        read = v("read_mib")
        if math.isfinite(read):
            line("read", mib(read), look.label)
        hit = v("cache_hit_pct")
        if math.isfinite(hit):
            line("hit cum" if wide else "hit", "no cache" if hit < 0 else f"{hit:.1f} %", look.label)
        step, steps = v("step"), v("steps")
        if math.isfinite(step):  # the runtime's step of n_predict steps: labelled at every width
            line("step", f"{int(step):,}" + (f"/{int(steps):,}" if math.isfinite(steps) else ""), look.dim)
        return wrap_fields(out, width)


# ======================================================================================== trends
#: (label, column or derived name, the catalogue's ``token.*`` quantity of that column
#: (``bmoe_top.tui.model.quantities``: its unit and form), fixed scale)
Trend = tuple[str, str, Quantity, tuple[float, float] | None]
TRENDS: tuple[Trend, ...] = (
    (q("token.tok_s").label, "tok_s", q("token.tok_s"), None),
    (f"{q('token.cache_hit_pct').label} %", "cache_hit_pct", q("token.cache_hit_pct"), (0.0, 100.0)),
    (q("token.read_mib").label, "read_mib", q("token.read_mib"), None),
    (q("token.rss_mib").label, "rss_mib", q("token.rss_mib"), None),
    (q("token.mem_available_mib").label, "mem_available_mib", q("token.mem_available_mib"), None),
    (q("token.swap_mib").label, "swap_mib", q("token.swap_mib"), None),
    (q("token.majflt").label, "majflt", q("token.majflt"), None),
    (q("token.cpu_ms").label, "cpu_ms", q("token.cpu_ms"), None),
)


#: Trends drawn when the source sends them and never listed as missing: device columns only some
#: sources have (swap in use, e.g. a phone's zram, next to RSS and available memory; CPU time).
OPTIONAL_TRENDS = frozenset({"swap_mib", "cpu_ms"})


class TrendChart(TimeView):
    """One trend per row pair (one row when space is short), aligned with the breakdown's tokens:
    tok/s, hit %, MiB/token and the device's memory columns (RSS, available memory, swap in use)
    when the source has them. Each has a y scale with its unit and the selected token's value on
    the right; the trends the source does not have share one line that says so (never a flat
    zero)."""

    DEFAULT_CSS = "TrendChart { height: auto; }"

    #: Rows per trend (2: a taller sparkline with its scale under the value).
    rows_per = 2
    #: Trends shown at most.
    max_trends = 6

    def available(self) -> tuple[list[Trend], list[str]]:
        tok = self.run.tokens
        have: list[Trend] = []
        missing: list[Trend] = []
        for t in TRENDS:
            name = t[1]
            ok = tok.has("wall_ms") or tok.has("tok_s") if name == "tok_s" else tok.has(name)
            if name in OPTIONAL_TRENDS and not ok:
                continue  # an optional extra: not listed as missing
            (have if ok else missing).append(t)
        return have[: self.max_trends], [t[0] for t in missing]

    group = "trends"

    def wanted_height(self, width: int) -> int:
        have, missing = self.available()
        return max(1, len(have) * self.rows_per + (1 if missing and self.rows_per > 1 else 0))

    def _counts(self) -> tuple[int, bool]:
        """(trends the source has, whether some are missing), however many are shown."""
        shown, self.max_trends = self.max_trends, len(TRENDS)
        try:
            have, missing = self.available()
        finally:
            self.max_trends = shown
        return len(have), bool(missing)

    def need(self, compact: bool, first: bool = False) -> Need:
        """One row at least (one trend, or the line that says none is there); would like two rows
        a trend (one in the compact layout, three trends at most) and the line of missing ones."""
        n, missing = self._counts()
        want = min(n, 3) if compact else 2 * n + missing
        return Need(1, max(1, want), priority=4)

    def need_key(self) -> Any:
        return self._counts()

    def fit_rows(self, rows: int) -> None:
        """Two rows a trend when every trend fits so, else one row a trend, as many as fit."""
        n, missing = self._counts()
        if rows >= 2 * n + missing:
            self.rows_per, self.max_trends = 2, max(1, n)
        else:
            self.rows_per, self.max_trends = 1, max(1, rows)
        self.frame.invalidate()
        self.refresh()

    def column_series(self, w: TokenWindow, name: str) -> np.ndarray:
        run = self.run
        tok = run.tokens
        if name == "tok_s":
            if run.row_unit != "token" and tok.has("tok_s"):
                return w.values(run, ["tok_s"])["tok_s"]
            wall = w.values(run, ["wall_ms"])["wall_ms"]
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(wall > 0, 1000.0 / wall, np.nan)
        v = w.values(run, [name])[name].copy()
        if name == "cache_hit_pct":
            v[v < 0] = np.nan
        return v

    def value_at(self, name: str, row: int | None) -> float:
        if row is None:
            return math.nan
        if name == "tok_s":
            if self.run.row_unit != "token" and self.run.tokens.has("tok_s"):
                return token_value(self.run, "tok_s", row)
            wall = token_value(self.run, "wall_ms", row)
            return 1000.0 / wall if wall > 0 else math.nan
        x = token_value(self.run, name, row)
        return math.nan if name == "cache_hit_pct" and x < 0 else x

    @staticmethod
    def fmt_value(x: float, quantity: Quantity, scale: bool = False) -> str:
        """``x`` as the catalogue shows ``quantity``; ``scale``: with its unit even where the
        trend's label already says it (a scale is read apart from the label: ``0–8,000 tok/s``)."""
        if not math.isfinite(x):
            return "—"
        text = show(quantity, x)
        return f"{text} {quantity.unit}" if scale and not unit_text(quantity) else text

    def build(self, width: int, height: int) -> list[Strip]:
        run, look = self.run, self.look
        g = look.g
        gut, right, cols = self.geometry(width)
        w = self.window(width)
        lines: list[Strip] = []
        with run.lock:
            have, missing = self.available()
            rows_per = self.rows_per if height >= len(have) * self.rows_per + (1 if missing else 0) else 1
            budget = height - (1 if missing and self.rows_per > 1 else 0)
            k = w.used
            sel = w.selected
            sel_col = w.col_of(sel)
            for label, name, quantity, fixed in have:
                if budget < rows_per:
                    break
                budget -= rows_per
                v = self.column_series(w, name) if k else np.zeros(0)
                finite = v[np.isfinite(v)]
                if fixed is not None:
                    lo_v, hi_v = fixed
                else:
                    lo_v, hi_v = 0.0, nice_max(float(finite.max())) if finite.size else 1.0
                cur = self.value_at(name, sel)
                value = self.fmt_value(cur, quantity)
                top = self.fmt_value(hi_v, quantity, scale=True)
                if fixed is not None:
                    top = f"{fixed[1]:g} {quantity.unit}"  # 0–100 %
                scale = f"0–{top}"
                short = f"0–{top.split(' ')[0]}"
                strips = self._spark_rows(v, lo_v, hi_v, rows_per, k, cols, look, sel_col)
                for r, row_segs in enumerate(strips):
                    lab = label if r == 0 else ""
                    if rows_per == 1:
                        tail = fit_text([f"{value} [{scale}]", f"{value} [{short}]", value], right - 1)
                    else:
                        tail = fit_text([value], right - 1) if r == 0 else fit_text([scale, short], right - 1)
                    lines.append(Strip([Segment(gutter_text(lab, gut) + g.vbar, look.label), *row_segs,
                                        Segment(" " + tail[: right - 1].ljust(right - 1),
                                                look.label if r == 0 else look.dim)]))
            if missing and len(lines) < height and self.rows_per > 1:
                what = "no data yet" if run.status.live and run.tokens.n == 0 else "not in this source"
                lines.append(strip([(" " * gut, BLANK), (f"{what}: {', '.join(missing)}", look.dim)], width))
        if not lines:
            lines.append(strip([(" " * gut, BLANK), (absent_phrase(run, "trends"), look.dim)], width))
        return lines[:height]

    @staticmethod
    def _spark_rows(v: np.ndarray, lo: float, hi: float, rows: int, k: int, cols: int, look: Look,
                    sel_col: int | None) -> list[list[Segment]]:
        """``rows`` rows of sparkline cells over ``k`` columns (then blank up to ``cols``)."""
        spark = look.g.spark
        levels = len(spark) * rows
        span = hi - lo if hi > lo else 1.0
        finite = np.isfinite(v)
        lev = np.where(finite, np.clip(np.floor((np.nan_to_num(v) - lo) / span * levels), 0, levels - 1), -1)
        out = []
        for r in range(rows):  # r = 0 is the top row
            below = (rows - 1 - r) * len(spark)
            code = np.where(lev < 0, -1, np.where(lev < below, -2, np.minimum(lev - below, len(spark) - 1)))
            # -1 no data (bottom row only), -2 empty
            if r != rows - 1:
                code = np.where(code == -1, -2, code)
            table: list[tuple[str, Style]] = [(ch, look.trend) for ch in spark]
            table.append(look.no_data)  # index len(spark): no data
            table.append((" ", BLANK))  # empty
            idx = np.where(code == -1, len(spark), np.where(code == -2, len(spark) + 1, code)).astype(np.int64)
            if r < rows - 1:
                full = lev >= below + len(spark)
                idx = np.where(full & (code >= 0), len(spark) - 1, idx)
            if sel_col is not None and sel_col < k:
                table.append((look.g.spark[-1] if idx[sel_col] < len(spark) else (":" if look.ascii else "┊"),
                              look.accent))
                if idx[sel_col] >= len(spark):
                    idx[sel_col] = len(table) - 1
                else:
                    table[-1] = (table[idx[sel_col]][0], look.accent + Style(bold=True))
                    idx[sel_col] = len(table) - 1
            segs = segments_from_index(idx[:k], table) if k else []
            segs.append(Segment(" " * (cols - k), BLANK))
            out.append(segs)
        return out


__all__ += ["TokenSelected", "TimeView", "token_value", "blank"]
