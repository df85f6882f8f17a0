"""When a run screen repaints what (the two tiers of :mod:`bmoe_top.tui.screens.base`), decided
apart from any widget: :class:`RepaintClock` takes the time and what the screen would draw from
(a :class:`ChangeKey`) at each tick, and answers one :class:`Repaint`.

- the views (overview strip, breakdown, trends, maps), the panels and the title repaint once
  ``refresh_s`` seconds have passed since their last repaint while something changed, and at
  every tick while a replay or a slow-motion view moves;
- between them, new rows alone repaint the answer's tail at most every :data:`FAST_S` seconds;
  on a screen that follows rows (a source of a few rows a second: a scrape, an audit record)
  new rows repaint the views, the panels and the title together at the next tick, so the
  title and the views never count the rows apart;
- any other change (a key, the playback, the state word, the size) repaints the title at the
  next tick;
- when the only change since the views' last repaint is a process-memory reading, their repaint
  is the run panel's alone (nothing else draws that reading);
- a tick with nothing new does nothing.

Pure: no Textual, no Rich (a contract in ``pyproject.toml``), so it is tested alone with a
made-up clock (tests/screens/test_clock.py).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, replace

__all__ = ["FAST_S", "ChangeKey", "Repaint", "RepaintClock", "Scene"]

#: Seconds between repaints of the title and the answer's tail while only the data moves (new
#: rows; a key, the playback or a state change repaints them at the next tick); never slower
#: than the views' ``refresh``. Each is a compositor pass of its own (Textual repaints the box
#: around everything refreshed together), so twice a second, not four times, halves what the
#: streaming screen costs beyond its views (docs/architecture.md "Repaint cost").
FAST_S = 0.5


@dataclass(frozen=True, slots=True)
class Scene:
    """What the title and the views draw from besides the run's rows and the cursor: the
    selection, the playback's pace and zoom, the state indicator, the look and the size."""

    selected: int | None
    playing: bool
    follow: bool
    speed_index: int
    per_col: float
    fit: bool
    quiet_s: int  # whole seconds a live source has been quiet (0: not quiet)
    turn_by_turn: bool
    status_word: str
    look: Hashable
    size: tuple[int, int]


@dataclass(frozen=True, slots=True)
class ChangeKey:
    """What a screen draws from at one tick: the run's ``version`` (rows added), the playback
    ``cursor``, the rest of the :class:`Scene`, and ``memory`` (the run's ``memory_version``: a
    process-memory reading, drawn by the run panel alone; data like a row, so it waits for the
    views' next repaint, where the views find their own keys unchanged)."""

    version: int
    cursor: int
    scene: Scene
    memory: int = 0

    def only_data(self, old: ChangeKey) -> bool:
        """Whether only the run's rows moved since ``old`` (the version, and the cursor while it
        follows the newest row): such a change may wait for the fast tier."""
        return self.scene == old.scene and (self.cursor == old.cursor or self.scene.follow)


class Repaint(enum.Enum):
    """What a tick repaints."""

    NOTHING = "nothing"
    TAILS = "tails"  # the answer's tail alone (new rows)
    FAST = "fast"  # the title, then the answer's tail
    VIEWS = "views"  # the views, the panels, the title and the tail together
    MEMORY = "memory"  # in the views' place: the run panel alone (only a memory reading is new)


class RepaintClock:
    """The repaint decisions of one screen (see the module docstring).

    ``refresh_s``: seconds between repaints of the views while data streams; ``follows_rows``:
    new rows repaint the views (and with them the panels and the title) at the next tick. Times
    are the caller's monotonic seconds.
    """

    def __init__(self, refresh_s: float, *, now: float, follows_rows: bool = False) -> None:
        self.refresh_s = refresh_s
        self.follows_rows = follows_rows
        self.seen: ChangeKey | None = None  # what the last tick (or repaint of the views) saw
        self.painted: ChangeKey | None = None  # what the views were last repainted from
        self.stale = False  # something changed since the views were last repainted
        self.views_at = 0.0  # time of the last repaint of the views
        self.fast_at = 0.0  # time of the last repaint of the title or the tail
        self._last_tick = now

    def elapsed(self, now: float) -> float:
        """Seconds since the previous call (the playback moves by them)."""
        dt, self._last_tick = now - self._last_tick, now
        return dt

    def tick(self, now: float, key: ChangeKey, animating: bool) -> Repaint:
        """What to repaint at ``now`` when the screen draws from ``key``; ``animating``: a
        replay plays or a slow-motion view moves (the views repaint at every tick)."""
        old = self.seen
        views_due = animating or now - self.views_at >= self.refresh_s
        if self.follows_rows and old is not None and key != old and key.only_data(old):
            views_due = True  # new rows: the whole screen follows them, in one repaint
        fast = key != old and (old is None or views_due or now - self.fast_at >= min(FAST_S, self.refresh_s)
                               or not key.only_data(old))
        if fast:
            self.seen = key
            self.fast_at = now
            self.stale = True
        if self.stale and views_due:
            if self.painted is not None and key.memory != self.painted.memory \
                    and replace(key, memory=self.painted.memory) == self.painted:
                return Repaint.MEMORY
            # the title and the answer's tail go with the views: one repaint, and the fast tier
            # keeps step with the views (a tail between them, not two of each)
            return Repaint.VIEWS
        if not fast:
            return Repaint.NOTHING
        if old is not None and key.only_data(old):
            return Repaint.TAILS  # new rows only: the title's numbers go with the views' next repaint
        return Repaint.FAST

    def views_painted(self, now: float, key: ChangeKey) -> None:
        """The views, the panels and the title were repainted at ``now`` from ``key`` (or, at a
        :attr:`Repaint.MEMORY`, the run panel alone: the rest draws the same from ``key``)."""
        self.stale = False
        self.views_at = now
        self.seen = key
        self.painted = key
