"""Per-layer maps drawn with the line API: the layer x token hit-share heatmap (on the shared time
axis: its columns are the breakdown's columns) and the layer x expert routing map (or, with
``v``, its memory tiers: each expert's misses by the tier that served them).

Both fold layers (and the expert map folds experts) to fit when ``fold`` is on, so 48 x 128 and
94 x 512 stay legible; with ``fold`` off they scroll (the cell cursor, the mouse wheel). Colour
scales are fixed (:class:`~bmoe_top.tui.widgets.palette.Look`); a cell with no data shows the
no-data glyph. Each map has a cell cursor (arrow keys while it has the focus, mouse hover and
click) with a readout in its right margin; moving the heatmap's cursor along the tokens (or
clicking one of its cells) selects that token in every view.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import BindingType
from textual.reactive import reactive
from textual.strip import Strip

from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.model.routes import page_cache_share
from bmoe_top.tui.playback import TokenWindow
from bmoe_top.tui.present.numbers import fmt, mib, ms, show, sig
from bmoe_top.tui.widgets.base import FrameKey, absent_phrase
from bmoe_top.tui.widgets.charts import TimeView, TokenSelected, token_text, token_value
from bmoe_top.tui.widgets.keymap import Key, bindings
from bmoe_top.tui.widgets.lines import (
    axis_row,
    axis_unit,
    fit_text,
    gutter_text,
    margins,
    nice_step,
    segments_from_index,
    strip,
    wrap_fields,
)
from bmoe_top.tui.widgets.palette import BLANK, Look
from bmoe_top.tui.widgets.sizing import Need

__all__ = ["ExpertMap", "GridView", "LayerHeatmap", "fold_rows"]


def fold_rows(m: np.ndarray, f: int, how: str = "mean") -> np.ndarray:
    """Fold groups of ``f`` rows into one (nan-mean or sum); the last group may be short."""
    if f <= 1:
        return m
    n = m.shape[0]
    if m.size == 0:
        return np.zeros((-(-n // f), *m.shape[1:]), dtype=float if how == "mean" else m.dtype)
    pad = (-n) % f
    if pad:
        fill = np.nan if how == "mean" else 0
        m = np.concatenate([m, np.full((pad, *m.shape[1:]), fill, dtype=m.dtype if how != "mean" else float)])
    g = m.reshape(-1, f, *m.shape[1:])
    if how == "sum":
        return g.sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN groups stay NaN (no data)
        return np.nanmean(g.astype(float), axis=1)


def as_of_words(unit: str, as_of: int | None, stop: int) -> list[str]:
    """What the layer x expert map's counts cover, longest first (for :func:`fit_text`), given
    :attr:`~bmoe_top.tui.model.routes.ExpertCounts.as_of` and ``stop`` (the rows up to the viewed
    one): the viewed row (``as of token 100``); an older checkpoint when the routing of the viewed
    row is no longer held (``as of token 40: later routing not held``, the counts of tokens 1-40);
    nothing at all (``routing of token 100 not held``)."""
    if as_of is None:
        return [f"as of {unit} {stop:,}", f"{unit} {stop:,}", f"@{stop:,}"]
    if as_of <= 0:
        return [f"routing of {unit} {stop:,} not held", "routing not held", "not held"]
    return [f"as of {unit} {as_of:,}: later routing not held", f"as of {unit} {as_of:,}", f"@{as_of:,}"]


def resident_words(unit: str, known: bool, row: int | None) -> str:
    """The expert map legend's words for a full cell: the cache's experts now (``row`` None), as
    the source last said them by the viewed row (``row``: the row that map came after, -1 before
    the first), or, with no map by then (``known`` False), the experts whose last lookup hit."""
    if not known:
        return "hit at its last routing"
    if row is None:
        return "resident now"
    return f"resident before {unit} 1" if row < 0 else f"resident as of {unit} {row + 1:,}"


def group_label(i: int, f: int, n: int, prefix: str = "L") -> str:
    a = i * f
    b = min(n, a + f) - 1
    return f"{prefix}{a}" if a == b else f"{prefix}{a}-{b}"


@dataclass
class Cursor:
    """A cell cursor: folded row and column (-1: none yet)."""

    row: int = 0
    col: int = -1


#: A focused map's keys (:mod:`bmoe_top.tui.widgets.keymap`, scope ``map``).
GRID_KEYS: tuple[Key, ...] = (
    Key("up", "move(-1, 0)", "cell cursor one layer up", "map", palette=False),
    Key("down", "move(1, 0)", "cell cursor one layer down", "map", palette=False),
    Key("left", "move(0, -1)", "cell cursor left", "map", palette=False),
    Key("right", "move(0, 1)", "cell cursor right", "map", palette=False),
    Key("escape", "leave", "leave the map", "map", palette=False),
)


class GridView(TimeView):
    """Base of the maps: a title line, rows of layers (folded to fit, or scrolled), a cell cursor
    with a readout in the right margin."""

    can_focus = True
    fold: reactive[bool] = reactive(True)

    BINDINGS: ClassVar[list[BindingType]] = bindings(GRID_KEYS, scope=("map",))

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.cursor = Cursor()
        self.hover: Cursor | None = None
        self.top = 0  # first layer row drawn (fold off)
        self._geom: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # first row y, rows shown, n rows, f, gut

    group = "maps"
    #: Layer rows a map keeps on screen at least (layers folded into them beyond that), in the
    #: full layout and in the compact one.
    LAYER_ROWS, LAYER_ROWS_COMPACT = 6, 4
    #: Rows of a map that are not layer rows (title, axis; the expert map's border and foot).
    CHROME = 2

    def need(self, compact: bool, first: bool = False) -> Need:
        """Its title and axis and its layer rows (:attr:`LAYER_ROWS`, fewer with fewer layers);
        it takes a share of the spare rows. The map kept first is the most important panel of
        the column; a map with nothing to show asks for its one line."""
        priority = 0 if first else 1
        if getattr(self, "empty", False):
            return Need(1, 1, priority=priority)
        layers = min(max(1, self.run.n_layer or 0), self.LAYER_ROWS_COMPACT if compact else self.LAYER_ROWS)
        return Need(self.CHROME + layers, self.CHROME + layers, grow=1, priority=priority)

    def need_key(self) -> Any:
        return (getattr(self, "empty", False), self.run.n_layer)

    def watch_fold(self, _old: bool, _new: bool) -> None:
        self.top = 0
        self.frame.invalidate()
        self.refresh()

    def frame_key(self) -> FrameKey:
        hv = (self.hover.row, self.hover.col) if self.hover else None
        return super().frame_key().extended(self.fold, self.cursor.row, self.cursor.col, hv, self.top, self.has_focus)

    def allow_focus(self) -> bool:
        """A map with nothing to show (its one line says why) is no Tab stop: no cell to move to."""
        return self.can_focus and not getattr(self, "empty", False)

    def watch_has_focus(self, _focused: bool) -> None:
        """The title's focus mark follows the focus (the Focus event came before ``has_focus``
        was set: the mark was drawn one repaint late, or never while nothing else moved)."""
        super().watch_has_focus(_focused)
        self.poll(force=True)

    def action_leave(self) -> None:
        self.screen.set_focus(None)

    @staticmethod
    def layer_fold(n_layer: int, rows_avail: int, fold: bool) -> int:
        if not fold or n_layer <= rows_avail or rows_avail <= 0:
            return 1
        return math.ceil(n_layer / rows_avail)

    def visible_rows(self, n_rows: int, avail: int) -> tuple[int, int]:
        """(first, count) of the folded rows drawn, keeping the cursor row in view."""
        if n_rows <= avail:
            self.top = 0
            return 0, n_rows
        r = self.cursor.row
        if r < self.top:
            self.top = r
        elif r >= self.top + avail:
            self.top = r - avail + 1
        self.top = max(0, min(self.top, n_rows - avail))
        return self.top, avail

    def title_segments(self, title: str, look: Look) -> list[Segment]:
        style = look.accent if self.has_focus else look.title
        mark = "▸ " if self.has_focus and not look.ascii else ("> " if self.has_focus else "")
        return [Segment(mark + title, style)]

    def cell_at(self, x: int, y: int) -> Cursor | None:
        y0, shown, n_rows, _f, gut = self._geom
        r = y - y0
        if not 0 <= r < shown:
            return None
        return Cursor(self.top + r, x - gut)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        cell = self.cell_at(event.x, event.y)
        new = cell if cell is not None and cell.col >= 0 else None
        old = self.hover
        if (new is None) != (old is None) or (new and old and (new.row, new.col) != (old.row, old.col)):
            self.hover = new
            self.poll()

    def on_leave(self, event: events.Leave) -> None:
        if self.hover is not None:
            self.hover = None
            self.poll()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_move(3, 0)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_move(-3, 0)
        event.stop()

    def action_move(self, drow: int, dcol: int) -> None:
        _y0, _shown, n_rows, _f, _gut = self._geom
        self.cursor.row = max(0, min(max(0, n_rows - 1), self.cursor.row + drow))
        if dcol:
            self.move_col(dcol)
        self.poll(force=True)

    def move_col(self, d: int) -> None:
        self.cursor.col = max(0, self.cursor.col + d)

    def _readout_lines(self, lines: list[tuple[str, Style]], right: int, n: int) -> list[tuple[str, Style]]:
        out = wrap_fields(lines, right - 1)
        return out + [("", BLANK)] * max(0, n - len(out))


class LayerHeatmap(GridView):
    """Layer x token hit share on the shared time axis: each cell is the share of a layer's routed
    experts that were resident (cache hits) for that token (the tokens' mean when zoomed out)."""

    DEFAULT_CSS = "LayerHeatmap { height: 1fr; }"

    @property
    def empty(self) -> bool:
        return not self.run.n_layer or self.run.route_token_count() == 0

    def move_col(self, d: int) -> None:
        self.playback.step(d * max(1, int(self.playback.per_col)))
        self.post_message(TokenSelected(self.playback.sel))

    def on_click(self, event: events.Click) -> None:
        cell = self.cell_at(event.x, event.y)
        if cell is None:
            return
        self.cursor.row = cell.row
        hit = self.column_at(event.x)
        if hit is not None:
            w, j = hit
            a, b = w.rows_of(j)
            if b > a:
                self.playback.select(a)
                self.post_message(TokenSelected(self.playback.sel))
        self.poll(force=True)

    def _matrix(self, w: TokenWindow) -> tuple[np.ndarray, np.ndarray | None]:
        """Hit share ``[n_layer, used]`` of the window's columns (the mean of each column's rows),
        and the lookups behind it when read from the history (coarse columns)."""
        run = self.run
        if not w.coarse:
            return w.reduce(run.hit_matrix(w.hi, start=w.lo)), None
        ls = run.layer_series(w.lo, w.hi, bins=w.used)
        return w.remap(ls.edges, ls.share), w.remap(ls.edges, ls.lookups)

    def build(self, width: int, height: int) -> list[Strip]:
        run, look = self.run, self.look
        g = look.g
        gut, right, cols = self.geometry(width)
        w = self.window(width)
        unit = run.row_unit
        with run.lock:
            n_layer = run.n_layer or 0
            k = w.used
            if self.empty:
                if unit == "token":
                    short = absent_phrase(run, "routing")
                    why = [short + (" (route trace or BMOE_ROUTE)" if not run.status.live
                                    else " (bmoe-run sends it with --route-telemetry)"), short]
                else:
                    why = [absent_phrase(run, f"per-layer hit/miss counts per {unit}"), absent_phrase(run, "counts")]
                self._geom = (0, 0, 0, 1, gut)
                label = f"layer × {unit} hit share: "
                return [strip([(" " * gut, BLANK), (label, look.title),
                               (fit_text(why, width - gut - len(label)), look.dim)], width)]
            share, lookups = self._matrix(w) if k else (np.zeros((n_layer, 0)), None)
        axis = height >= 6
        avail = max(1, height - 1 - (1 if axis else 0))
        f = self.layer_fold(n_layer, avail, self.fold)
        if lookups is not None and f > 1:
            hits = fold_rows(np.nan_to_num(share) * lookups, f, "sum")
            look_f = fold_rows(lookups, f, "sum")
            with np.errstate(invalid="ignore", divide="ignore"):
                folded = np.where(look_f > 0, hits / np.where(look_f > 0, look_f, 1), np.nan)
        else:
            folded = fold_rows(share, f)
        n_rows = folded.shape[0]
        first, shown = self.visible_rows(n_rows, avail)
        self._geom = (1, shown, n_rows, f, gut)
        # title line: name and legend, as long as fits
        legend_cells = look.hit_cells
        per = f", {f} layers/row" if f > 1 else ""
        title_opts = [f"layer × {unit} hit share{per} ", f"layer × {unit} hit %{per} ", "hit % "]
        legend_w = len(legend_cells) + len(" 0% ") + len(" 100%") + len(f"  {g.no_data} no routing")
        title = fit_text(title_opts, max(6, gut + cols - legend_w))
        head = [*self.title_segments(title, look), Segment("0% ", look.dim),
                *[Segment(ch, st) for ch, st in legend_cells], Segment(" 100%", look.dim)]
        rest = gut + cols - sum(s.cell_length for s in head)
        nd = f"  {g.no_data} no routing"
        if rest >= len(nd):
            head.append(Segment(nd, look.dim))
        elif rest >= 3:
            head.append(Segment(f"  {g.no_data}", look.dim))
        head_len = sum(s.cell_length for s in head)
        cell = self.hover if self.hover is not None else Cursor(self.cursor.row, w.col_of(w.selected) or 0)
        cell.row = max(0, min(n_rows - 1, cell.row))
        readout = self.readout(cell, w, f, n_layer, folded, right)
        lines = [Strip([*head[: max(1, len(head))], Segment(" " * max(0, gut + cols - head_len), BLANK),
                        Segment(" " + readout[0][0][: right - 1].ljust(right - 1), readout[0][1])]).crop(0, width)]
        bins = look.hit_bin(folded[first: first + shown]) if k else np.zeros((shown, 0), np.int16)
        table: list[tuple[str, Style]] = [look.no_data, *legend_cells]
        cursor_of = {}  # table index -> its cursor variant
        memo: dict[int, Segment] = {}  # segments made from this table (it only grows)
        sel_col = w.col_of(w.selected)
        cur_row = self.cursor.row
        for i in range(shown):
            r = first + i
            idx = (bins[i].astype(np.int64) + 1) if k else np.zeros(0, np.int64)
            for c, focus in ((sel_col, r == cur_row), (self.hover.col if self.hover and self.hover.row == r else None,
                                                        True)):
                if c is not None and 0 <= c < k and focus:
                    base = int(idx[c])
                    if base not in cursor_of:
                        ch, st = table[base]
                        cursor_of[base] = len(table)
                        table.append((ch, st + look.cursor))
                    idx[c] = cursor_of[base]
            side = readout[i + 1] if i + 1 < len(readout) else ("", BLANK)
            lines.append(Strip([Segment(gutter_text(group_label(r, f, n_layer), gut) + g.vbar, look.dim),
                                *segments_from_index(idx, table, memo), Segment(" " * (cols - k), BLANK),
                                Segment(" " + side[0][: right - 1].ljust(right - 1), side[1])]))
        if axis:
            more = f"{n_rows - shown} more rows" if shown < n_rows else ""
            ax = axis_row(w, sel_col, look.dim, look.accent, g.mark_up)
            lines.append(Strip([Segment(axis_unit(unit, gut - 1) + g.corner, look.dim), *ax,
                                Segment(" " + (more or "")[: right - 1].ljust(right - 1), look.dim)]))
        return lines[:height]

    def readout(self, cell: Cursor, w: TokenWindow, f: int, n_layer: int, folded: np.ndarray,
                right: int) -> list[tuple[str, Style]]:
        """The cursor cell: layer(s), token, hit share (hits of lookups), experts read for the
        layer(s) (and by which memory tier, when the source says) and for the whole token, the
        token's wall time and text."""
        run, look = self.run, self.look
        unit = run.row_unit
        col = cell.col
        if col is None or col < 0 or col >= w.used:
            return [(f"{group_label(cell.row, f, n_layer)}", look.title)]
        a, b = w.rows_of(col)
        tok = f"{unit} {a + 1:,}" if b - a == 1 else f"{unit}s {a + 1:,}–{b:,}"
        out: list[tuple[str, Style]] = [(f"{group_label(cell.row, f, n_layer)} · {tok}", look.title)]
        with run.lock:
            ls = run.layer_series(a, b, bins=1)
        l0, l1 = cell.row * f, min(n_layer, (cell.row + 1) * f)
        look_n = float(np.nansum(ls.lookups[l0:l1])) if ls.lookups.size else 0.0
        hits_n = float(np.nansum(np.nan_to_num(ls.share[l0:l1]) * ls.lookups[l0:l1])) if ls.lookups.size else 0.0
        where = "layer" if l1 - l0 == 1 else "layers"
        if look_n > 0:
            pct = f"hit {fmt(100 * hits_n / look_n, 1, '%')}"
            out.append((fit_text([f"{pct} ({hits_n:,.0f}/{look_n:,.0f})", pct], right - 1), look.label))
            out.append((f"{where}: {look_n - hits_n:,.0f} read", look.label))
            split = run.tier_split(a, b, l0, l1) if look_n > hits_n else None
            if split is not None:  # the misses by the memory tier that served them
                out.append((f"page cache {split[0]:,} · disk {split[1]:,}", look.label))
        else:
            out.append(("nothing routed", look.dim))
        all_look = float(np.nansum(ls.lookups)) if ls.lookups.size else 0.0
        all_hits = float(np.nansum(np.nan_to_num(ls.share) * ls.lookups)) if ls.lookups.size else 0.0
        what = unit if b - a == 1 else unit + "s"
        if all_look > 0:
            out.append((f"{what}: {all_look - all_hits:,.0f} read", look.label))
        if b - a == 1:
            wall = token_value(run, "wall_ms", a)
            read = token_value(run, "read_mib", a)
            bits = [x for x in (mib(read) if math.isfinite(read) else "", ms(wall) if math.isfinite(wall) else "") if x]
            if bits and len(", ".join(bits)) <= right - 1:
                out.append((", ".join(bits), look.dim))
            else:
                out.extend((b_, look.dim) for b_ in bits)
            text = token_text(run, a, limit=right - 4)
            if text is not None:
                from bmoe_top.parsers.sanitize import sanitize

                out.append((f"“{sanitize(text)}”", look.label))
        return self._readout_lines(out, right, 0)


#: The tiers view's page-cache share of misses (the quantity catalogue's definition).
PAGE_CACHE_SHARE = q("map.page_cache_share")


class ExpertMap(GridView):
    """Layer x expert map as of the selected token, in one of two views (``tiers``, the ``v``
    key; docs/user-guide.md "The main screen").

    Routing heat: colour = how often the router picked the expert against a uniform router
    (fixed log scale, cold to hot); glyph = residency: a full cell when resident, a dot when not,
    the no-data glyph when never routed. Residency comes from ``BMOE_RESIDENT`` when the source
    sends it, else from whether the expert's last routing was a hit (the legend says which). An
    STRP profile shows its ranks instead.

    Memory tiers: each cell is its misses' page-cache share (the catalogue's
    ``map.page_cache_share``, on the hit-share scale: disk at its bottom, page cache at its top;
    docs/memory.md "The tiers on the maps"), a no-miss glyph where every routing was a hit, ``?``
    where its misses carry no tier (prefill), the no-data glyph where never routed; a source that
    never sends tiers shows one line saying so, never zeros."""

    DEFAULT_CSS = "ExpertMap { height: 1fr; }"
    CHROME = 4  # the border, the title, the expert axis and the foot
    tiers: reactive[bool] = reactive(False)

    #: While a run streams, the map repaints at most every 2 s: its heat counts every token so far,
    #: so a second's tokens move it little, and it is the costliest view to build and draw (a key,
    #: the cursor or a seek still repaints it at once).
    min_interval = 2.0

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.left = 0  # first expert column drawn (fold off)
        self._groups: tuple[np.ndarray, np.ndarray, int, int, int] | None = None

    @property
    def empty(self) -> bool:
        run = self.run
        if run.expert_rank is not None or run.resident is not None:
            return False
        return not run.n_expert or run.routes.total == 0

    def frame_key(self) -> FrameKey:
        return super().frame_key().extended(self.left, self.tiers)

    def watch_tiers(self, _old: bool, _new: bool) -> None:
        self.frame.invalidate()
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        cell = self.cell_at(event.x, event.y)
        if cell is not None and cell.col >= 0:
            cw = self._groups[2] if self._groups is not None else 1
            self.cursor.row, self.cursor.col = cell.row, cell.col // cw + self.left
            self.hover = None
            self.poll(force=True)

    @staticmethod
    def expert_groups(n_expert: int, cols: int, fold: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """Columns of experts: (first expert of each group, group sizes, display cells per group).
        More experts than columns (folded): groups of one or more spread over every column; fewer:
        one expert per group, up to 4 cells wide; ``fold`` off: one expert per cell."""
        if n_expert <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 1
        if fold and n_expert > cols:
            j = np.arange(cols + 1, dtype=np.int64)
            edges = (j * n_expert) // cols
            return edges[:-1], np.diff(edges), 1
        cw = max(1, min(4, cols // n_expert)) if fold else 1
        return np.arange(n_expert, dtype=np.int64), np.ones(n_expert, np.int64), cw

    def build(self, width: int, height: int) -> list[Strip]:
        run, look = self.run, self.look
        g = look.g
        gut, right = margins(width)
        cols = max(1, width - gut - right)
        with run.lock:
            rank = run.expert_rank.copy() if run.expert_rank is not None else None
            stop = self.playback.sel + 1
            n_layer, n_expert = run.n_layer or 0, run.n_expert or 0
            agg = run.expert_aggregates(max(0, stop))
            counts, hits, pagecache, disk = agg.routed, agg.hits, agg.pagecache, agg.disk
            resident, res_row = run.resident_at(max(0, stop))  # as of the viewed row
            resident = resident.copy() if resident is not None else None
            last_hit = agg.last
            top_k = run.top_k
            unit = run.row_unit
            tiers = self.tiers
            told = run.routes.tier_rows > 0
        if tiers and not told and not self.empty:
            self._geom = (0, 0, 0, 1, gut)
            label = "layer × expert memory tiers: "
            said = "tiers not reported by this source" + (" (yet)" if run.status.live else "")
            return [strip([(" " * gut, BLANK), (label, look.title),
                           (fit_text([f"{said} (v: routing heat)", said], width - gut - len(label)), look.dim)],
                          width)]
        if rank is not None and counts.sum() == 0:
            return self.build_rank(rank, resident, width, height)
        if self.empty or (counts.sum() == 0 and resident is None):
            why = [absent_phrase(run, "per-expert routing"), absent_phrase(run, "routing")] if unit == "token" else \
                ["this source never sends per-expert routing", "never sent"]
            self._geom = (0, 0, 0, 1, gut)
            label = "layer × expert map: "
            return [strip([(" " * gut, BLANK), (label, look.title),
                           (fit_text(why, width - gut - len(label)), look.dim)], width)]
        if resident is not None and resident.shape != counts.shape:
            L, E = max(resident.shape[0], counts.shape[0]), max(resident.shape[1], counts.shape[1])
            counts = _pad(counts, L, E)
            hits = _pad(hits, L, E)
            pagecache = _pad(pagecache, L, E)
            disk = _pad(disk, L, E)
            resident = _pad(resident, L, E).astype(bool)
            last_hit = _pad(last_hit, L, E, -1)
            n_layer, n_expert = L, E
        res_src = resident_words(unit, resident is not None, res_row)
        res = resident.astype(np.int8) if resident is not None else (last_hit > 0).astype(np.int8)
        g_start, g_size, cw = self.expert_groups(n_expert, cols, self.fold)
        avail = max(1, height - 2 - (1 if height >= 8 else 0))
        fl = self.layer_fold(n_layer, avail, self.fold)

        def fold(a: np.ndarray) -> np.ndarray:
            by_group = np.add.reduceat(a.astype(np.int64), g_start, axis=1)
            return fold_rows(by_group, fl, "sum")

        c, h, r_sum = fold(counts), fold(hits), fold(res)
        pc, dk = (fold(pagecache), fold(disk)) if tiers else (None, None)
        cells_per = fold(np.ones_like(res))
        # a folded cell is drawn resident when at least half the pairs whose residency is known
        # are (every pair with a resident set; the routed ones with last-hit residency)
        known = cells_per if resident is not None else fold((counts > 0).astype(np.int8))
        res_cell_mask = (r_sum > 0) & (2 * r_sum >= known)
        per_layer = counts.sum(axis=1, keepdims=True).astype(float)
        expected = fold_rows(per_layer, fl, "sum") / max(1, n_expert) * g_size[None, :]
        bins = look.heat_bin(c.astype(float), np.maximum(expected, 1e-9))
        n_rows, n_cols = c.shape
        first, shown = self.visible_rows(n_rows, avail)
        col_shown = min(n_cols, cols // cw)
        self.left = max(0, min(self.left, n_cols - col_shown))
        if self.cursor.col >= 0:
            cc = min(self.cursor.col, n_cols - 1)
            self.cursor.col = cc
            if cc < self.left:
                self.left = cc
            elif cc >= self.left + col_shown:
                self.left = cc - col_shown + 1
        left = self.left
        self._geom = (2, shown, n_rows, fl, gut)
        self._groups = (g_start, g_size, cw, left, n_cols)
        # the cells: an index into ``table`` per folded (layer, expert) cell
        nl = look.heat_levels
        if pc is not None and dk is not None:
            no_miss, untold = ("o" if look.ascii else "○", look.good), ("?", look.dim)
            table: list[tuple[str, Style]] = [look.no_data, no_miss, untold, *look.hit_cells]
            tb = look.hit_bin(page_cache_share(pc, dk))
            cells = np.where(c == 0, 0, np.where(tb >= 0, 3 + tb, np.where(h >= c, 1, 2)))
            tail_opts = [f"  {no_miss[0]} no miss  ? no tier  {g.no_data} never routed",
                         f"  {no_miss[0]} no miss ? no tier {g.no_data} never", f" {no_miss[0]} no miss ? no tier"]
            legend = [Segment("disk ", look.dim), *[Segment(ch, st) for ch, st in look.hit_cells],
                      Segment(" page cache", look.dim)]
            title_opts = [f"memory tiers: {PAGE_CACHE_SHARE.label} ", "misses by tier ", "misses "]
        else:
            table = [look.no_data, *look.heat_resident, *look.heat_out]
            b = bins.astype(np.int64)
            if resident is not None:
                b = np.where((b < 0) & res_cell_mask, 0, b)  # resident but never routed: resident, coldest
            cells = np.where(b < 0, 0, np.where(res_cell_mask, 1 + b, 1 + nl + b))
            res_cell = look.heat_resident[-1][0]
            out_cell = look.heat_out[-1][0]
            word = "resident" if resident is not None else "last hit"  # the readout's word
            tail_opts = [f"  {res_cell} {res_src}  {out_cell} not  {g.no_data} never routed",
                         f"  {res_cell} {word} {out_cell} not {g.no_data} never", f"  {res_cell} {word} {out_cell} not"]
            legend = [Segment("cold ", look.dim), *[Segment(ch, st) for ch, st in look.heat_resident],
                      Segment(" hot", look.dim)]
            title_opts = ["layer × expert routing heat (vs uniform) ", "layer × expert heat ", "experts "]
        # title + legend
        legend_len = sum(s.cell_length for s in legend)
        title = fit_text(title_opts, max(8, gut + cols - legend_len - len(tail_opts[-1])))
        head = [*self.title_segments(title, look), *legend]
        tail = fit_text(tail_opts, max(0, gut + cols - sum(s.cell_length for s in head)))
        head.append(Segment(tail, look.dim))
        cur: Cursor | None = None
        if self.hover is not None:
            cur = Cursor(self.hover.row, self.hover.col // cw + left)
        elif self.cursor.col >= 0:
            cur = self.cursor
        readout = self.readout(cur, c, h, r_sum, cells_per, expected, fl, g_start, g_size, n_layer, agg.as_of,
                               stop, resident is not None, right, None if pc is None or dk is None else (pc, dk))
        head_len = sum(s.cell_length for s in head)
        lines = [Strip([*head, Segment(" " * max(0, gut + cols - head_len), BLANK),
                        Segment(" " + readout[0][0][: right - 1].ljust(right - 1), readout[0][1])]).crop(0, width)]
        # expert ticks
        ticks = self._expert_ticks(g_start[left: left + col_shown], cw, n_expert)
        lines.append(Strip([Segment(gutter_text("expert", gut) + g.vbar, look.dim), Segment(ticks, look.dim),
                            Segment(" " * (cols - len(ticks)), BLANK),
                            Segment(" " + (readout[1][0] if len(readout) > 1 else "")[: right - 1].ljust(right - 1),
                                    readout[1][1] if len(readout) > 1 else BLANK)]))
        cursor_of: dict[int, int] = {}
        memo: dict[int, Segment] = {}  # segments made from this table (it only grows)
        for i in range(shown):
            r = first + i
            idx = cells[r, left: left + col_shown].astype(np.int64)
            if cur is not None and cur.row == r and 0 <= cur.col - left < col_shown:
                j = cur.col - left
                base = int(idx[j])
                if base not in cursor_of:
                    ch, st = table[base]
                    cursor_of[base] = len(table)
                    table.append((ch, st + look.cursor))
                idx[j] = cursor_of[base]
            if cw > 1:
                idx = np.repeat(idx, cw)
            side = readout[i + 2] if i + 2 < len(readout) else ("", BLANK)
            lines.append(Strip([Segment(gutter_text(group_label(r, fl, n_layer), gut) + g.vbar, look.dim),
                                *segments_from_index(idx, table, memo), Segment(" " * (cols - len(idx)), BLANK),
                                Segment(" " + side[0][: right - 1].ljust(right - 1), side[1])]))
        foot = []
        if shown < n_rows:
            foot.append(f"{n_rows - shown} more layer rows")
        if top_k:
            foot.append(f"top-{top_k}")
        if n_cols < n_expert:
            foot.append(f"{n_expert} experts in {n_cols} cells")
        if fl > 1:
            foot.append(f"{fl} layers/row")
        if col_shown < n_cols:
            last = left + col_shown - 1
            foot.append(f"experts {int(g_start[left])}–{int(g_start[last] + g_size[last]) - 1} of {n_expert}")
        if agg.as_of is not None:  # the routing of the viewed row is no longer held: say what is drawn
            foot.append(as_of_words(unit, agg.as_of, stop)[0])
        if foot and len(lines) < height:
            lines.append(strip([(" " * gut, BLANK), (" · ".join(foot), look.dim)], width))
        return lines[:height]

    @staticmethod
    def _expert_ticks(starts: np.ndarray, cw: int, n_expert: int) -> str:
        """Expert numbers at round positions over the groups shown (first expert of each)."""
        shown = len(starts)
        chars = [" "] * (shown * cw)
        if not shown:
            return ""
        label_w = len(str(n_expert))
        per = max(1e-9, (int(starts[-1]) - int(starts[0]) + 1) / shown) / cw
        step = max(1, int(nice_step((label_w + 1) * per)))
        e = (int(starts[0]) // step) * step
        while e <= int(starts[-1]):
            j = int(np.searchsorted(starts, e, side="left"))
            if j < shown and starts[j] >= e:
                c = j * cw
                lab = str(int(starts[j])) if starts[j] != e else str(e)
                if c + len(lab) <= len(chars) and all(ch == " " for ch in chars[max(0, c - 1): c + len(lab) + 1]):
                    chars[c: c + len(lab)] = list(lab)
            e += step
        return "".join(chars)

    def readout(self, cur: Cursor | None, c: np.ndarray, h: np.ndarray, r_sum: np.ndarray, cells_per: np.ndarray,
                expected: np.ndarray, fl: int, g_start: np.ndarray, g_size: np.ndarray, n_layer: int,
                as_of: int | None, stop: int, resident_known: bool, right: int,
                tiers: tuple[np.ndarray, np.ndarray] | None = None) -> list[tuple[str, Style]]:
        look, unit = self.look, self.run.row_unit
        as_of_line = (fit_text(as_of_words(unit, as_of, stop), right - 1), look.dim)
        if cur is None or not (0 <= cur.row < c.shape[0] and 0 <= cur.col < c.shape[1]):
            return [("", BLANK), as_of_line, ("Tab/click: cursor" if right > 17 else "", look.dim)]
        r, col = cur.row, cur.col
        e0 = int(g_start[col])
        e1 = e0 + int(g_size[col]) - 1
        exp = f"expert {e0}" if e0 == e1 else f"experts {e0}-{e1}"
        out: list[tuple[str, Style]] = [(f"{group_label(r, fl, n_layer)} · {exp}", look.title), as_of_line]
        routed, hit = int(c[r, col]), int(h[r, col])
        if tiers is not None:  # the tiers first: the rows beside a short map cut the last lines
            out.extend(self._tier_readout(routed, hit, int(tiers[0][r, col]), int(tiers[1][r, col])))
            return wrap_fields(out, right - 1)
        ratio = routed / expected[r, col] if expected[r, col] > 0 else math.nan
        out.append((f"routed {routed:,}" + (f" ({sig(ratio, 2)}× uniform)" if math.isfinite(ratio) and routed
                                             else ""), look.label))
        if routed:
            share = fmt(100 * hit / routed, 1, "%")
            out.append((fit_text([f"hits {hit:,} ({share})", f"hits {share}"], right - 1), look.label))
        n_res, n_cells = int(r_sum[r, col]), int(cells_per[r, col])
        word = "resident" if resident_known else "last hit"
        if n_cells == 1:
            out.append((f"{word}: {'yes' if n_res else 'no'}", look.good if n_res else look.warn))
        else:
            out.append((f"{word}: {n_res} of {n_cells}", look.label))
        return wrap_fields(out, right - 1)

    def _tier_readout(self, routed: int, hit: int, pc: int, dk: int) -> list[tuple[str, Style]]:
        """A cell's misses by tier, most telling first: the page cache's share of them (the
        cell's value), the page cache's and the disk's, those without a tier, then the misses of
        the routed."""
        look = self.look
        if not routed:
            return [("never routed", look.dim)]
        misses = routed - hit
        if not misses:
            return [("no miss", look.good), (f"hits {hit:,}", look.label)]
        share = float(page_cache_share(np.array(pc), np.array(dk)))
        out = [(f"{show(PAGE_CACHE_SHARE, 100 * share)} page cache", look.label)] if pc + dk else []
        out += [(f"page cache {pc:,}", look.label), (f"disk {dk:,}", look.label)]
        if misses > pc + dk:
            out.append((f"no tier {misses - pc - dk:,}", look.dim))
        out.append((f"misses {misses:,} of {routed:,}", look.label))
        return out

    def build_rank(self, rank: np.ndarray, resident: np.ndarray | None, width: int, height: int) -> list[Strip]:
        """An STRP profile: colour = rank among all ranked pairs (hottest at the top of the scale),
        a full cell where the profile puts the expert in the cache, a dot where ranked but not
        cached, the no-data glyph where unranked."""
        look = self.look
        g = look.g
        gut, right = margins(width)
        cols = max(1, width - gut - right)
        n_layer, n_expert = rank.shape
        ranked = rank >= 0
        n_ranked = max(1, int(ranked.sum()))
        nl = look.heat_levels
        heat = np.where(ranked, (nl - 1) - rank / max(1, n_ranked - 1) * (nl - 1), np.nan)
        fe = math.ceil(n_expert / cols) if self.fold and n_expert > cols else 1
        fl = self.layer_fold(n_layer, max(1, height - 2), self.fold)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            hh = fold_rows(fold_rows(heat.T, fe).T, fl)
        res = resident.astype(np.int8) if resident is not None else ranked.astype(np.int8)
        r = fold_rows(fold_rows(res.T, fe, "sum").T, fl, "sum")
        bins = np.where(np.isnan(hh), -1, np.clip(np.rint(hh), 0, nl - 1)).astype(np.int64)
        self._geom = (2, bins.shape[0], bins.shape[0], fl, gut)
        head = [*self.title_segments("layer × expert profile rank ", look), Segment("coldest ", look.dim),
                *[Segment(ch, st) for ch, st in look.heat_resident], Segment(" hottest", look.dim),
                Segment(f"  {look.heat_resident[-1][0]} cached by the profile  {look.heat_out[-1][0]} ranked  "
                        f"{g.no_data} unranked", look.dim)]
        lines = [Strip(head).crop(0, width)]
        hdr = f"experts 0–{n_expert - 1}, {n_ranked} ranked pairs" + (
            f", {fe} experts/cell" if fe > 1 else "") + (f", {fl} layers/row" if fl > 1 else "")
        lines.append(strip([(" " * (gut - 1) + g.vbar, look.dim), (hdr, look.dim)], width))
        table: list[tuple[str, Style]] = [look.no_data, *look.heat_resident, *look.heat_out]
        for i in range(bins.shape[0]):
            b = bins[i][:cols]
            idx = np.where(b < 0, 0, np.where(r[i][:cols] > 0, 1 + b, 1 + nl + b))
            lines.append(Strip([Segment(gutter_text(group_label(i, fl, n_layer), gut) + g.vbar, look.dim),
                                *segments_from_index(idx, table)]))
        return lines[:height]

    def move_col(self, d: int) -> None:
        n_cols = self._groups[4] if self._groups is not None else 1
        self.cursor.col = max(0, min(n_cols - 1, (self.cursor.col if self.cursor.col >= 0 else 0) + d))

    def action_move(self, drow: int, dcol: int) -> None:
        if self.cursor.col < 0:
            self.cursor.col = 0
        super().action_move(drow, dcol)


def _pad(a: np.ndarray, L: int, E: int, fill: int = 0) -> np.ndarray:
    out = np.full((L, E), fill, dtype=a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out
