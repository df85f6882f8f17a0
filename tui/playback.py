"""Playback over a run model: which rows are shown, which one is selected, how the time window
is laid out in columns, at what pace the cursor moves. No Textual.

State (:class:`Playback`):

* ``cursor``: rows revealed (0..n). A replay reveals its rows as it plays; a live source that is
  followed keeps it at n (the newest row).
* ``follow``: live. The cursor is pinned to the newest row, or, in slow motion (a speed under
  1x), trails it at that pace and catches up. Any key that moves the selection leaves it; End (or
  resuming) comes back to it; a new turn follows again when the user sat at the newest row.
* ``selected``: the row every view reads out (the breakdown's values, the map cursors, the
  expert map "as of", the answer text); None = the newest row shown (``cursor - 1``).
* the time window (:meth:`Playback.window`): ``cols`` columns of ``per_col`` rows each (the
  zoom: 1 row per column up to the whole run), ending at the cursor while playing or following,
  else kept still while the selection moves inside it. Every time view (overview, breakdown,
  trends, layer x token heatmap) asks for the window of the same width, so column ``j`` is the
  same rows in each.

Original pace (1x) comes from the line timestamps (``t``, recordings) for a replay and from the
tokens' own ``wall_ms`` for a live run (slow motion shows the tokens' own time stretched, never
the gaps between turns); without either, 100 ms per row. ``MAX`` speed moves through the run as
fast as the screen repaints (1 % of the run per tick, at least one row).

Playing on from an earlier row of a live run that still streams catches up: the run grows at its
own pace, so at 1x the view would trail it forever. On top of its pace the view gains a share of
the run time it trails by (the gap closes with a time constant of :data:`CATCH_UP_S`, at most
doubling the pace), and within :data:`LIVE_SLACK_MS` of the newest row it follows live again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from bmoe_top.tui.model import RunModel, Series

__all__ = ["CATCH_UP_S", "COARSE", "LIVE_SLACK_MS", "SPEEDS", "PlayState", "Playback", "TokenWindow", "ZOOM_MAX",
           "fit_zoom"]

SPEEDS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, math.inf)
#: Index of 1x in :data:`SPEEDS`.
ONE_X = SPEEDS.index(1.0)
#: The widest zoom: rows per column (a power of two).
ZOOM_MAX = 1 << 24
#: Rows per column from which the views read the tiered history rather than the rows.
COARSE = 64
#: Seconds in which a view playing on toward a live run's newest row closes its gap by 1 - 1/e
#: (beyond its pace, at most as much again as the pace).
CATCH_UP_S = 2.0
#: Run time (ms) behind the newest row at which a view playing on toward it follows live again:
#: a live source hands its token lines over in batches of up to 0.25 s.
LIVE_SLACK_MS = 300.0


class PlayState(StrEnum):
    """What the playback is doing, in the words of the state indicator."""

    LIVE = "live"  # following a live source
    PAUSED = "paused"  # holding still (a live source keeps sending)
    PLAYING = "replay"  # a replay playing at its speed
    ENDED = "ended"  # at the last row of a source that sends no more


@dataclass(frozen=True, eq=False)
class TokenWindow:
    """The rows a time view shows in ``cols`` columns: column ``j`` holds rows
    ``[starts[j], stops[j])``; the first :attr:`used` columns hold rows (the rest is not revealed
    yet, or past the end of the run). Rows ``[lo, hi)`` are shown. ``per_col`` is the zoom (rows
    per column; under 1: columns per row); ``selected`` is the selected row, ``n`` the run's rows.
    """

    lo: int
    hi: int
    per_col: float
    cols: int
    selected: int | None
    n: int
    starts: np.ndarray
    stops: np.ndarray

    @classmethod
    def make(cls, lo: int, hi: int, per_col: float, cols: int, selected: int | None, n: int,
             spread: bool = False) -> TokenWindow:
        """Columns over rows ``[lo, hi)``: ``per_col`` rows each (aligned bins), or with ``spread``
        the rows spread evenly over every column (a run longer than the width: 1 or more rows
        per column; shorter: a whole number of columns per row)."""
        span = max(0, hi - lo)
        j = np.arange(cols, dtype=np.int64)
        if spread and span:
            if span >= cols:
                starts = lo + (j * span) // cols
                stops = lo + ((j + 1) * span) // cols
                per = span / cols
            else:
                cpt = max(1, cols // span)
                starts = lo + np.minimum(j // cpt, span - 1)
                stops = starts + 1
                starts = np.where(j < span * cpt, starts, hi)
                stops = np.where(j < span * cpt, stops, hi)
                per = 1.0 / cpt
        elif per_col >= 1:
            pc = int(per_col)
            starts = lo + j * pc
            stops = np.minimum(hi, starts + pc)
            per = float(pc)
        else:
            cpt = int(round(1 / per_col))
            starts = lo + j // cpt
            stops = np.minimum(hi, starts + 1)
            per = per_col
        starts = np.minimum(starts, hi)
        stops = np.maximum(np.minimum(stops, hi), starts)
        return cls(lo, hi, per, cols, selected, n, starts, stops)

    @property
    def used(self) -> int:
        """Columns holding at least one shown row (they come first)."""
        return int(np.count_nonzero(self.stops > self.starts))

    @property
    def exact(self) -> bool:
        """One row per column, each row once: the rows themselves, unbinned."""
        k = self.used
        return k == self.hi - self.lo and bool(np.all(self.stops[:k] - self.starts[:k] == 1))

    def col_of(self, row: int | None) -> int | None:
        """The (first) column holding ``row`` (None when it is outside the window)."""
        if row is None or row < self.lo or row >= self.hi:
            return None
        k = self.used
        j = int(np.searchsorted(self.starts[:k], row, side="right")) - 1
        if j < 0:
            return None
        first = int(np.searchsorted(self.starts[:k], self.starts[j], side="left"))
        return first

    def rows_of(self, col: int) -> tuple[int, int]:
        """Rows ``[a, b)`` shown in column ``col`` (empty when none)."""
        if not 0 <= col < self.cols:
            return self.hi, self.hi
        return int(self.starts[col]), int(self.stops[col])

    def zoom_label(self) -> str:
        """How many rows a column holds ("" at one row per column)."""
        if self.per_col > 1.0001:
            return f"{self.per_col:,.0f}/col" if float(self.per_col).is_integer() else f"{self.per_col:,.1f}/col"
        if self.per_col < 0.9999:
            return f"{round(1 / self.per_col)} cols each"
        return ""

    def reduce(self, v: np.ndarray) -> np.ndarray:
        """Per-row values over ``[lo, hi)`` (last axis) -> the mean of each used column (NaN-aware)."""
        k = self.used
        if k == 0:
            return v[..., :0]
        idx = self.starts[:k] - self.lo
        if self.exact:
            return v
        if np.all(self.stops[:k] - self.starts[:k] == 1):
            return v[..., idx]
        finite = np.isfinite(v)
        sums = np.add.reduceat(np.where(finite, v, 0.0), idx, axis=-1)
        counts = np.add.reduceat(finite.astype(np.float64), idx, axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan)

    def remap(self, edges: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Values of bins with ``edges`` (last axis) -> one per used column: the bin holding the
        column's first row."""
        k = self.used
        if values.shape[-1] == 0:
            return np.full((*values.shape[:-1], k), np.nan)
        idx = np.clip(np.searchsorted(edges, self.starts[:k], side="right") - 1, 0, values.shape[-1] - 1)
        return values[..., idx]

    @property
    def coarse(self) -> bool:
        """Columns of :data:`COARSE` rows or more: every view reads them from the run's tiered
        history (exact bins, the same for every view) instead of the rows."""
        k = self.used
        return k > 0 and (self.hi - self.lo) / k >= COARSE

    def values(self, run: RunModel, names: tuple[str, ...] | list[str]) -> dict[str, np.ndarray]:
        """Per-column means of token columns over the shown rows (``[used]`` each; NaN where a
        column has no value): from the rows themselves while they are held at full resolution
        (and columns are narrower than :data:`COARSE` rows), else from exact bins of
        :meth:`RunModel.series`."""
        k = self.used
        if k <= 0:
            return {name: np.zeros(0) for name in names}
        tok = run.tokens
        if self.lo >= tok.start and not self.coarse:
            return {name: self.reduce(np.asarray(tok.view(name, self.lo, self.hi), dtype=np.float64))
                    for name in names}
        s: Series = run.series(names, self.lo, self.hi, bins=k)
        return {name: self.remap(s.edges, s.mean(name)) for name in names}


@dataclass
class Playback:
    """The cursor over ``run`` (see the module docstring)."""

    run: RunModel
    cursor: int = 0
    playing: bool = False
    speed_index: int = ONE_X + 2
    follow: bool = False
    turn_by_turn: bool = False  # pause when playback reaches the end of a turn
    selected: int | None = None
    per_col: float = 1.0  # rows per column: 2**z (under 1: columns per row)
    fit: bool = False  # the whole run spread over the width
    view_end: int | None = None  # the window's right edge while it is held still
    _clock: float = field(default=0.0, repr=False)  # ms of run time elapsed past the cursor row
    _pace_cache: tuple[tuple[int, bool], np.ndarray] | None = field(default=None, repr=False)
    _turns_seen: int = field(default=-1, repr=False)
    _cols: int = field(default=0, repr=False)  # the width the views last asked for
    _n_at_turn: int = field(default=0, repr=False)  # rows at the last tick (a new turn follows from there)

    # ------------------------------------------------------------------------------ reading
    @property
    def speed(self) -> float:
        return SPEEDS[self.speed_index]

    def speed_label(self) -> str:
        s = self.speed
        return "max" if math.isinf(s) else f"{s:g}x"

    @property
    def n(self) -> int:
        """Rows of the run: token rows, or routed tokens for a route trace alone. A live source
        sends a token's routing before its progress line: that routing row is not a row of the
        run until its token row arrives (the views read token columns over ``[0, n)``)."""
        n = self.run.tokens.n
        return n if n else self.run.route_token_count()

    @property
    def live_source(self) -> bool:
        """The source may still send rows (the run's status says so)."""
        return self.run.status.live

    @property
    def sel(self) -> int:
        """The selected row (the newest shown when nothing is selected); -1 before any row."""
        if self.selected is not None:
            return min(self.selected, self.cursor - 1)
        return self.cursor - 1

    @property
    def behind(self) -> int:
        """Rows a slow-motion live view trails the newest by."""
        return max(0, self.n - self.cursor)

    def state(self) -> PlayState:
        if self.follow:
            return PlayState.LIVE if self.live_source else PlayState.ENDED
        if self.playing:
            return PlayState.PLAYING
        if self.cursor >= self.n and self.selected is None and not self.live_source:
            return PlayState.ENDED
        return PlayState.PAUSED

    def clamp(self) -> None:
        self.cursor = max(0, min(self.cursor, self.n))
        if self.selected is not None and not 0 <= self.selected < self.cursor - 1:
            self.selected = None

    # ------------------------------------------------------------------------------ the window
    def open_finished(self) -> None:
        """How a replay of a finished run opens: every row revealed, the whole run spread over the
        width (the ``0`` zoom), its last row selected: "ended" at the end, like ``less +G``, the
        same picture at any width. ``+`` zooms into the end, Home goes to the first row, space
        plays from the first row."""
        self.cursor = self.n
        self.follow = self.playing = False
        self.per_col = 1.0
        self.zoom_fit()

    def window(self, cols: int) -> TokenWindow:
        """The time window of ``cols`` columns (see :class:`TokenWindow`); keeps the selected row
        inside it, moving the window only when the selection leaves it."""
        cols = max(1, cols)
        self._cols = cols
        n = self.n
        sel = self.selected
        if self.fit:
            hi = max(0, min(self.cursor, n))
            return TokenWindow.make(0, hi, 1.0, cols, sel if sel is not None else (hi - 1 if hi else None), n,
                                    spread=True)
        pc = self.per_col
        held = sel is not None and self.view_end is not None and not (self.follow or self.playing)
        hi = min(self.view_end, self.cursor) if held and self.view_end is not None else self.cursor
        hi = max(0, min(hi, n))
        lo = self._lo_for(hi, cols)
        if sel is not None and sel >= 0 and not lo <= sel < hi:
            if sel < lo:  # scrolled out on the left: it becomes the first column
                span = self._span(cols)
                lo = (sel // int(pc)) * int(pc) if pc >= 1 else sel
                hi = min(self.cursor, lo + span)
            else:
                hi = min(self.cursor, (sel // int(pc) + 1) * int(pc) if pc >= 1 else sel + 1)
                lo = self._lo_for(hi, cols)
            self.view_end = hi
        return TokenWindow.make(lo, hi, pc, cols, sel if sel is not None else (hi - 1 if hi > 0 else None), n)

    def _span(self, cols: int) -> int:
        """Rows a window of ``cols`` columns holds at the current zoom."""
        if self.per_col >= 1:
            return cols * int(self.per_col)
        return max(1, cols // int(round(1 / self.per_col)))

    def _lo_for(self, hi: int, cols: int) -> int:
        """The first row of the window that ends at ``hi`` (aligned to whole bins when zoomed out)."""
        if hi <= 0:
            return 0
        if self.per_col >= 1:
            pc = int(self.per_col)
            last_bin = (hi - 1) // pc
            return max(0, last_bin - cols + 1) * pc
        return max(0, hi - self._span(cols))

    def hold(self) -> None:
        """Keep the window where it is now (the selection moves, the picture does not)."""
        if self.view_end is None or self.follow or self.playing:
            self.view_end = self.cursor

    # ------------------------------------------------------------------------------ keys
    def toggle(self) -> None:
        """Pause / resume. Live: leave following, or resume: from a row selected before the newest
        (after Home, an arrow, a seek) play on from there at the current pace and follow live again
        on reaching the newest row; at the newest row, follow at once. Replay: play from the
        selected row (from the start when at the end), or pause."""
        if self.live_source and not self.playing:
            if self.follow:
                self.pause()
                return
            if self.selected is None or self.selected >= self.n - 1:
                self.go_live()
                return
        if self.playing:
            self.playing = False
            self.hold()
            return
        start = self.selected + 1 if self.selected is not None else self.cursor
        if start >= self.n:
            start = 0
        self.cursor, self.selected, self.view_end = start, None, None
        self.playing, self.follow, self._clock = True, False, 0.0

    def pause(self) -> None:
        self.hold()
        self.follow = self.playing = False

    def go_live(self) -> None:
        """Follow the newest row (at 1x or faster: at once; in slow motion: trailing from here)."""
        self.follow, self.playing = True, False
        self.selected = self.view_end = None
        if self.speed >= 1.0:
            self.cursor = self.n
        self._clock = 0.0

    def faster(self) -> None:
        self.speed_index = min(self.speed_index + 1, len(SPEEDS) - 1)

    def slower(self) -> None:
        self.speed_index = max(self.speed_index - 1, 0)

    def step(self, k: int) -> None:
        """Move the selection ``k`` rows (revealing rows past the cursor of a paused replay)."""
        n = self.n
        if n == 0:
            return
        self.hold()
        self.follow = self.playing = False
        new = max(0, min(n - 1, self.sel + k))
        if new >= self.cursor - 1:
            self.cursor = new + 1
            self.selected = None
            self.view_end = max(self.view_end or 0, self.cursor)
        else:
            self.selected = new

    def select(self, row: int) -> None:
        """Select ``row`` (0-based; a click on a bar or a map cell); the window stays."""
        if self.n == 0:
            return
        self.hold()
        self.follow = self.playing = False
        row = max(0, min(self.n - 1, row))
        if row >= self.cursor:
            self.cursor = row + 1
        self.selected = None if row == self.cursor - 1 else row

    def seek(self, token: int) -> None:
        """Select token ``token`` (1-based, as users count them); the window moves to it."""
        self.follow = self.playing = False
        if self.n == 0:
            return
        row = max(0, min(self.n, token) - 1)
        if row + 1 > self.cursor:
            self.cursor = row + 1
        self.selected = None if row == self.cursor - 1 else row
        self.view_end = None
        if self.selected is not None:
            self._centre(row)

    def _centre(self, row: int) -> None:
        span = self._span(max(1, self._cols))
        self.view_end = min(self.cursor, max(row + 1, row + span // 2))

    def start(self) -> None:
        """Home: the first row."""
        self.follow = self.playing = False
        if self.n == 0:
            return
        self.cursor = max(1, self.cursor)
        self.selected = 0 if self.cursor > 1 else None
        self.view_end = min(self.cursor, self._span(max(1, self._cols)))

    def end(self) -> None:
        """End: the newest row; a live source is followed again, in real time (slow motion ends:
        space resumes at the current pace instead)."""
        if self.live_source:
            if self.speed < 1.0:
                self.speed_index = ONE_X
            self.go_live()
            self.cursor = self.n
            return
        self.follow = self.playing = False
        self.cursor = self.n
        self.selected = self.view_end = None

    def zoom(self, factor: int) -> None:
        """Zoom out (``factor`` 2) or in (``factor`` -2): rows per column doubled or halved (from
        one row per column in to four columns per row); the selected row stays in view. From the
        whole-run view, zooming starts at the zoom nearest to it."""
        if self.fit:
            self.per_col = float(fit_zoom(max(1, self.cursor), max(1, self._cols)))
            self.fit = False
            if factor > 0:
                return
        if factor > 0:
            self.per_col = min(float(ZOOM_MAX), self.per_col * factor)
        else:
            self.per_col = max(0.25, self.per_col / -factor)
        if self.selected is not None:
            self._centre(self.selected)

    def zoom_fit(self) -> None:
        """The whole run in the window (follows the run as it grows); the selected row stays
        selected (the whole run holds it): a zoom key never moves the selection."""
        self.fit = True
        self.view_end = None if (self.follow or self.playing) else self.cursor

    # ------------------------------------------------------------------------------ time
    def _durations_ms(self) -> np.ndarray:
        """Per-row duration at original pace (ms): a replay's timestamps, else wall_ms, else 100 ms."""
        n = self.n
        if self._pace_cache and self._pace_cache[0] == (n, self.follow):
            return self._pace_cache[1]
        tok = self.run.tokens
        d = np.full(n, 100.0)
        # a live feed appends rows while this runs: read under the run's lock, at most n rows
        with self.run.lock:
            w = np.array(tok.view("wall_ms")[:n], dtype=np.float64) if tok.has("wall_ms") else None
            t = np.array(tok.view("t")[:n], dtype=np.float64) * 1000.0 if tok.has("t") and not self.follow else None
        if w is not None:
            ok = np.isfinite(w) & (w >= 0)
            d[: len(w)][ok] = w[ok]
        if t is not None:  # recorded arrival times: prefill and gaps between turns
            dt = np.diff(t)
            ok = np.isfinite(dt) & (dt >= 0)
            d[1: len(t)][ok] = dt[ok]
        self._pace_cache = ((n, self.follow), d)
        return d

    def _advance(self, dt_s: float) -> None:
        n = self.n
        if math.isinf(self.speed):
            self.cursor = min(n, self.cursor + max(1, n // 100))
            return
        d = self._durations_ms()
        step = dt_s * 1000.0 * self.speed
        if self.playing and self.live_source:
            gap = float(d[self.cursor:n].sum()) - self._clock  # run time (ms) behind the newest row
            step += min(step, gap * (1.0 - math.exp(-dt_s / CATCH_UP_S)))
            if gap - step <= LIVE_SLACK_MS:
                self.cursor, self._clock = n, 0.0
                return
        self._clock += step
        while self.cursor < n and self._clock >= d[self.cursor]:
            self._clock -= d[self.cursor]
            self.cursor += 1
        if self.cursor >= n:
            self._clock = 0.0

    def tick(self, dt_s: float) -> bool:
        """Advance by ``dt_s`` seconds of screen time; returns True when the cursor moved."""
        n = self.n
        before = self.cursor
        turns = self.run.turn_count
        if self._turns_seen >= 0 and turns > self._turns_seen and not self.follow and not self.playing \
                and self.live_source and self.selected is None and self.cursor >= self._n_at_turn:
            self.go_live()  # a new turn began while the user sat at the newest row
        if turns != self._turns_seen:
            self._turns_seen = turns
        self._n_at_turn = n
        if self.follow:
            if self.speed >= 1.0:
                self.cursor = n
            else:
                self._advance(dt_s)
            return self.cursor != before
        if not self.playing:
            return False
        if self.cursor >= n:
            self._played_out()
            return False
        self._advance(dt_s)
        if self.turn_by_turn:
            for b in self.turn_ends():
                if before < b <= self.cursor:
                    self.cursor, self.playing, self._clock = b, False, 0.0
                    break
        if self.cursor >= n and self.playing:
            self._played_out()
        return self.cursor != before

    def _played_out(self) -> None:
        """Playing reached the newest row: a replay stops there; a live source is followed again."""
        self.playing = False
        if self.live_source:
            self.go_live()

    def turn_ends(self) -> list[int]:
        """Cursor positions where a turn ends (the next turn's first token)."""
        with self.run.lock:
            return [t.first_token for t in self.run.turns[1:] if t.first_token > 0]


def fit_zoom(n: int, cols: int) -> int:
    """The smallest power-of-two rows per column that shows ``n`` rows in ``cols`` columns."""
    pc = 1
    while pc * cols < n and pc < ZOOM_MAX:
        pc *= 2
    return pc
