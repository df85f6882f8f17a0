"""Playback over a run model: which tokens are visible (the cursor), at what pace. No Textual.

Original pace (1x) comes from the line timestamps (``t``, recordings) when present, else from
the tokens' own ``wall_ms`` (a CSV sink's tokens take their measured time). ``MAX`` speed moves
through the run as fast as the screen repaints (1 % of the run per tick, at least one token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bmoe_top.tui.model import RunModel

SPEEDS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, math.inf)


@dataclass
class Playback:
    """Cursor = number of tokens shown (0..n). ``follow`` pins it to the newest token (live)."""

    run: RunModel
    cursor: int = 0
    playing: bool = False
    speed_index: int = 3
    follow: bool = False
    turn_by_turn: bool = False  # pause when playback reaches the end of a turn
    _clock: float = field(default=0.0, repr=False)  # ms of run time elapsed past the cursor token
    _pace_cache: tuple[int, np.ndarray] | None = field(default=None, repr=False)

    @property
    def speed(self) -> float:
        return SPEEDS[self.speed_index]

    def speed_label(self) -> str:
        s = self.speed
        return "max" if math.isinf(s) else f"{s:g}x"

    @property
    def n(self) -> int:
        """Tokens in the run: token rows, or routed tokens for a route trace alone."""
        return max(self.run.tokens.n, self.run.route_token_count())

    def clamp(self) -> None:
        self.cursor = max(0, min(self.cursor, self.n))

    def toggle(self) -> None:
        if not self.playing and self.cursor >= self.n:
            self.cursor = 0
        self.playing = not self.playing
        self.follow = False
        self._clock = 0.0

    def faster(self) -> None:
        self.speed_index = min(self.speed_index + 1, len(SPEEDS) - 1)

    def slower(self) -> None:
        self.speed_index = max(self.speed_index - 1, 0)

    def step(self, k: int) -> None:
        self.follow = False
        self.playing = False
        self.cursor += k
        self.clamp()

    def seek(self, token: int) -> None:
        """Show tokens [0, token] (1-based token number as users count them)."""
        self.follow = False
        self.cursor = token
        self.clamp()

    def start(self) -> None:
        self.seek(0)

    def end(self) -> None:
        self.follow = False
        self.playing = False
        self.cursor = self.n

    def _durations_ms(self) -> np.ndarray:
        """Per-token duration at original pace (ms): from timestamps, else wall_ms, else 100 ms."""
        n = self.n
        if self._pace_cache and self._pace_cache[0] == n:
            return self._pace_cache[1]
        tok = self.run.tokens
        d = np.full(n, 100.0)
        if tok.has("wall_ms"):
            w = tok.view("wall_ms")
            ok = np.isfinite(w) & (w >= 0)
            d[ok] = w[ok]
        if tok.has("t"):  # recorded arrival times win: they include prefill and gaps between turns
            t = tok.view("t") * 1000.0
            dt = np.diff(t)
            ok = np.isfinite(dt) & (dt >= 0)
            d[1:][ok] = dt[ok]
        self._pace_cache = (n, d)
        return d

    def tick(self, dt_s: float) -> bool:
        """Advance by ``dt_s`` seconds of screen time; returns True when the cursor moved."""
        n = self.n
        if self.follow:
            moved = self.cursor != n
            self.cursor = n
            return moved
        if not self.playing:
            return False
        before = self.cursor
        if self.cursor >= n:
            self.playing = False
            return False
        if math.isinf(self.speed):
            self.cursor = min(n, self.cursor + max(1, n // 100))
        else:
            d = self._durations_ms()
            self._clock += dt_s * 1000.0 * self.speed
            while self.cursor < n and self._clock >= d[self.cursor]:
                self._clock -= d[self.cursor]
                self.cursor += 1
        if self.turn_by_turn:
            for b in self.turn_ends():
                if before < b <= self.cursor:
                    self.cursor, self.playing, self._clock = b, False, 0.0
                    break
        if self.cursor >= n:
            self.playing = False
        return self.cursor != before

    def turn_ends(self) -> list[int]:
        """Cursor positions where a turn ends (the next turn's first token)."""
        with self.run.lock:
            return [t.first_token for t in self.run.turns[1:] if t.first_token > 0]
