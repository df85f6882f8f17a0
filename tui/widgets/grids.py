"""Per-layer grids drawn with the line API: the layer x token hit heatmap and the layer x expert map.

Both fold rows (and the expert map folds columns) to fit the widget when ``fold`` is on, so
48 layers x 128 experts and 94 x 512 stay legible; with ``fold`` off they scroll instead.
Colour scales are fixed (``palette``); a cell with no data shows ``NO_DATA_GLYPH``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.lines import FrameCache, segments
from bmoe_top.tui.widgets.palette import (
    CELL_GLYPH,
    DIM,
    HEAT_STYLES,
    HIT_STYLES,
    MISS_GLYPH,
    NO_DATA_GLYPH,
    NO_DATA_STYLE,
    TITLE,
    heat_bin,
    hit_bin,
    legend_segments,
)

GUTTER = 8
HEADER = 2


def fold_rows(m: np.ndarray, f: int, how: str = "mean") -> np.ndarray:
    """Fold groups of ``f`` rows into one (nan-mean or sum); the last group may be short."""
    if f <= 1:
        return m
    n = m.shape[0]
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


def _row_segments(label: str, bins: np.ndarray, glyphs: np.ndarray | None, styles: list[Style]) -> list[Segment]:
    """One grid row: the label gutter, then a cell per bin (no-data glyph where the bin is -1)."""
    cells = [(NO_DATA_GLYPH, NO_DATA_STYLE) if b < 0 else (CELL_GLYPH if glyphs is None else glyphs[j], styles[b])
             for j, b in enumerate(bins.tolist())]
    return [Segment(label[: GUTTER - 1].rjust(GUTTER - 1) + "│", DIM), *segments(cells)]


class GridView(ScrollView):
    """Base: a titled grid of ``rows x cols`` cells with a row-label gutter."""

    fold: reactive[bool] = reactive(True)

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self.frame = FrameCache(self._build_framed)

    def watch_fold(self, _old: bool, _new: bool) -> None:
        self.frame.invalidate()
        self.refresh()

    def build(self, width: int, height: int) -> list[Strip]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _build_framed(self, width: int, height: int) -> list[Strip]:
        lines = self.build(width, height)
        if lines:  # the title never forces a horizontal scroll
            lines[0] = lines[0].crop(0, width)
        vw = max((ln.cell_length for ln in lines), default=0)
        self.virtual_size = Size(vw, len(lines))
        return lines

    def _frame(self) -> list[Strip]:
        width, height = self.scrollable_content_region.size
        return self.frame.get((self.run.version, self.playback.cursor, width, height, self.fold), width, height)

    def on_resize(self) -> None:
        self.frame.invalidate()

    def render_line(self, y: int) -> Strip:
        lines = self._frame()
        sx, sy = self.scroll_offset
        width = self.scrollable_content_region.width
        i = y + sy
        if i < len(lines):
            return lines[i].crop(sx, sx + width).extend_cell_length(width)
        return Strip.blank(width)

    @staticmethod
    def layer_fold(n_layer: int, rows_avail: int, fold: bool) -> int:
        if not fold or n_layer <= rows_avail or rows_avail <= 0:
            return 1
        return math.ceil(n_layer / rows_avail)

    @staticmethod
    def layer_label(i: int, f: int, n_layer: int) -> str:
        a = i * f
        b = min(n_layer, a + f) - 1
        return f"L{a}" if a == b else f"L{a}-{b}"


class LayerHeatmap(GridView):
    """Layer x token hit share: each cell is the share of a layer's routed experts that were
    resident (cache hits) for that token; the last tokens up to the playback cursor."""

    DEFAULT_CSS = "LayerHeatmap { height: 1fr; }"

    def build(self, width: int, height: int) -> list[Strip]:
        run = self.run
        with run.lock:
            n_layer = run.n_layer or 0
            n_tok = run.route_token_count()
            if run.row_unit != "token":  # attach rows: later rows may have no per-layer counts yet
                n_tok = max(n_tok, run.tokens.n)
            stop = min(self.playback.cursor, n_tok)
            cols = max(1, width - GUTTER)
            lo = max(0, stop - cols)
            share = run.hit_matrix(stop, start=lo) if n_layer and stop else None
            unit = run.row_unit
        title = [Segment(f"layer × {unit} hit share ", TITLE),
                 *legend_segments(HIT_STYLES, "0%", "100%"),
                 Segment(f"  {NO_DATA_GLYPH} no routing", DIM)]
        lines = [Strip(title)]
        if share is None or not n_layer:
            why = ("no routing data in this source (route trace or BMOE_ROUTE)" if unit == "token"
                   else f"no per-layer hit/miss counts per {unit} yet")
            lines.append(Strip([Segment("  " + why, DIM)]))
            return lines
        f = self.layer_fold(n_layer, height - HEADER, self.fold)
        folded = fold_rows(share, f)
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "│", DIM),
                            Segment(f"{unit}s {lo + 1}–{stop}" + (f", {f} layers/row" if f > 1 else ""), DIM)]))
        bins = hit_bin(folded)
        for i in range(folded.shape[0]):
            lines.append(Strip(_row_segments(self.layer_label(i, f, n_layer), bins[i], None, HIT_STYLES)))
        return lines


class ExpertMap(GridView):
    """Layer x expert map: colour = how often the router picked the expert, against a uniform
    router (fixed log scale, cold blue to hot red); glyph = residency: ``█`` resident, ``░`` not
    resident, ``·`` never routed. Residency comes from ``BMOE_RESIDENT`` when the source sends it,
    else from whether the expert's last routing was a hit (the legend says which)."""

    DEFAULT_CSS = "ExpertMap { height: 1fr; }"

    def build(self, width: int, height: int) -> list[Strip]:
        run = self.run
        with run.lock:
            n_layer, n_expert = run.n_layer or 0, run.n_expert or 0
            stop = self.playback.cursor
            agg = run.expert_aggregates(stop)
            counts = agg.routed
            resident = run.resident.copy() if run.resident is not None else None
            rank = run.expert_rank.copy() if run.expert_rank is not None else None
            last_hit = agg.last if resident is None else None
            top_k = run.top_k
        if rank is not None and counts.sum() == 0:
            return self.build_rank(rank, resident, width, height)
        res_src = "resident now" if resident is not None else "hit at last routing"
        title = [Segment("layer × expert routing heat ", TITLE),
                 *legend_segments(HEAT_STYLES, "cold", "hot"),
                 Segment(f"  █ {res_src}  ░ not  {NO_DATA_GLYPH} never routed", DIM)]
        lines = [Strip(title)]
        if not n_layer or not n_expert or counts.sum() == 0:
            why = ("no routing data in this source (route trace or BMOE_ROUTE)" if run.row_unit == "token"
                   else "no per-expert routing in this source")
            lines.append(Strip([Segment("  " + why, DIM)]))
            if resident is not None:
                counts = np.zeros((resident.shape[0], resident.shape[1]), dtype=np.int64)
            else:
                return lines
            n_layer, n_expert = resident.shape
        cols = max(1, width - GUTTER)
        fe = math.ceil(n_expert / cols) if self.fold and n_expert > cols else 1
        fl = self.layer_fold(n_layer, height - HEADER, self.fold)
        # fold experts (columns): sum counts; residency: resident if any in the group
        if resident is not None:
            res = resident.astype(np.int8)
        else:
            assert last_hit is not None  # read above whenever there is no resident map
            res = (last_hit > 0).astype(np.int8)
        c = fold_rows(fold_rows(counts.T, fe, "sum").T, fl, "sum")
        r = fold_rows(fold_rows(res.T, fe, "sum").T, fl, "sum")
        per_layer = counts.sum(axis=1, keepdims=True).astype(float)
        expected_row = fold_rows(per_layer, fl, "sum") / max(1, n_expert) * fe
        bins = heat_bin(c.astype(float), np.maximum(expected_row, 1e-9))
        hdr = f"experts 0–{n_expert - 1}" + (f", {fe} experts/cell" if fe > 1 else "") + (
            f", {fl} layers/row" if fl > 1 else "") + (f", top-{top_k}" if top_k else "") + (
            f", as of {run.row_unit} {agg.as_of + 1}" if agg.as_of is not None else "")
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "│", DIM), Segment(hdr, DIM)]))
        for i in range(c.shape[0]):
            glyphs = np.where(r[i] > 0, CELL_GLYPH, MISS_GLYPH)
            row_bins = bins[i].copy()
            if resident is not None:
                # resident but never routed: still show it as resident (cold colour)
                row_bins[(row_bins < 0) & (r[i] > 0)] = 0
            lines.append(Strip(_row_segments(self.layer_label(i, fl, n_layer), row_bins, glyphs, HEAT_STYLES)))
        return lines

    def build_rank(self, rank: np.ndarray, resident: np.ndarray | None, width: int, height: int) -> list[Strip]:
        """An STRP profile: colour = rank among all ranked pairs (hottest red, coldest blue),
        ``█`` the profile puts the expert in the cache, ``░`` ranked but not cached, ``·`` unranked."""
        n_layer, n_expert = rank.shape
        ranked = rank >= 0
        n_ranked = max(1, int(ranked.sum()))
        # fixed scale over the profile's own ranks: rank 0 -> bin 10 (hot) ... last -> bin 0 (cold)
        heat = np.where(ranked, 10.0 - rank / max(1, n_ranked - 1) * 10.0, np.nan)
        cols = max(1, width - GUTTER)
        fe = math.ceil(n_expert / cols) if self.fold and n_expert > cols else 1
        fl = self.layer_fold(n_layer, height - HEADER, self.fold)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            h = fold_rows(fold_rows(heat.T, fe).T, fl)  # nan-max would hide; mean of the group
        res = resident.astype(np.int8) if resident is not None else ranked.astype(np.int8)
        r = fold_rows(fold_rows(res.T, fe, "sum").T, fl, "sum")
        bins = np.where(np.isnan(h), -1, np.clip(np.rint(h), 0, 10)).astype(np.int16)
        lines = [Strip([Segment("layer × expert profile rank ", TITLE),
                        *legend_segments(HEAT_STYLES, "coldest", "hottest"),
                        Segment(f"  █ cached by the profile  ░ ranked  {NO_DATA_GLYPH} unranked", DIM)])]
        hdr = f"experts 0–{n_expert - 1}, {n_ranked} ranked pairs" + (
            f", {fe} experts/cell" if fe > 1 else "") + (f", {fl} layers/row" if fl > 1 else "")
        lines.append(Strip([Segment(" " * (GUTTER - 1) + "│", DIM), Segment(hdr, DIM)]))
        for i in range(bins.shape[0]):
            glyphs = np.where(r[i] > 0, CELL_GLYPH, MISS_GLYPH)
            lines.append(Strip(_row_segments(self.layer_label(i, fl, n_layer), bins[i], glyphs, HEAT_STYLES)))
        return lines
