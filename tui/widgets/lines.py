"""What every line-API widget shares: run-length merging of cells into segments, and a frame
cache (the lines are rebuilt only when what they depend on changed)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

__all__ = ["FrameCache", "segments"]


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
            out.append(Segment("".join(buf), style))
        buf, style = [ch], st
    if buf:
        out.append(Segment("".join(buf), style))
    return out


class FrameCache:
    """The lines of one widget, rebuilt by ``build(width, height)`` only when the key changes."""

    def __init__(self, build: Callable[[int, int], list[Strip]]) -> None:
        self._build = build
        self._key: Hashable = None
        self.lines: list[Strip] = []

    def get(self, key: Hashable, width: int, height: int) -> list[Strip]:
        if key != self._key:
            self._key = key
            self.lines = self._build(width, height)
        return self.lines

    def invalidate(self) -> None:
        self._key = None
