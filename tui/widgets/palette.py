"""Fixed colour scales and glyphs shared by every chart (so a colour means the same thing everywhere).

Scales are fixed, not normalised to the data on screen: a cell's colour is comparable across
layers, tokens, runs and sessions.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from rich.style import Style

#: Glyph for a cell with no data (nothing routed, value not sent). Never a colour of the scale.
NO_DATA_GLYPH = "·"
NO_DATA_STYLE = Style(color="#5c6370")
CELL_GLYPH = "█"
MISS_GLYPH = "░"  # routed, not resident
BLANK = Style()
DIM = Style(color="#7f848e")
LABEL = Style(color="#abb2bf")
TITLE = Style(color="#e5c07b", bold=True)

#: Hit share 0 % -> 100 %, 11 bins (0-5 %, ..., 95-100 %): red through amber to green.
HIT_COLORS = [
    "#b3261e", "#c8401f", "#d65a20", "#e07826", "#e6952e", "#e8b336",
    "#c9c23c", "#9cc743", "#6fbd4a", "#45ad52", "#23985a",
]
HIT_STYLES = [Style(color=c) for c in HIT_COLORS]

#: Routing heat relative to a uniform router: log2(count / expected) from -3 (cold) to +3 (hot).
HEAT_COLORS = [
    "#1b2a49", "#23406e", "#2c5a8f", "#3f7aa8", "#6b97b4", "#a9a9a9",
    "#d6a06a", "#e58446", "#ec6431", "#ea4426", "#ff2a1a",
]
HEAT_STYLES = [Style(color=c) for c in HEAT_COLORS]

COMPUTE = "#4e8fd6"
FLASH = "#e0823d"
MGMT = "#b45bcf"
SERIES_STYLE = {"compute": Style(color=COMPUTE), "flash": Style(color=FLASH), "mgmt": Style(color=MGMT)}
TREND_STYLE = Style(color="#56b6c2")

EIGHTHS = " ▁▂▃▄▅▆▇█"

#: Every state word a status line shows (run model :class:`~bmoe_top.tui.model.Status`, a live
#: source's, a poller's, a followed file's: all string enums) -> its style.
STATUS_STYLE: dict[str, str] = {
    "ok": "bold #98c379", "ready": "bold #98c379", "generating": "bold #61afef",
    "loading": "bold #e5c07b", "connecting": "bold #e5c07b", "waiting": "bold #e5c07b", "starting": "bold #e5c07b",
    "unreachable": "bold #e06c75", "unauthorized": "bold #e06c75", "error": "bold #e06c75",
    "disconnected": "bold #e06c75", "aborted": "bold #e06c75", "failed": "bold #e06c75",
    "malformed": "bold #d19a66",
    "closing": "#7f848e", "exited": "#7f848e", "closed": "#7f848e", "done": "#7f848e", "replay": "#7f848e",
}

#: Row kinds of ``bmoe_top.tui.present`` rows -> style ("" = plain).
KIND_STYLE: dict[str, str] = {
    "": "", "missing": "#7f848e italic", "derived": "#d19a66", "name": "bold", "problem": "bold #e06c75",
    "section": "bold #e5c07b", "good": "#98c379", "bad": "#e06c75",
}


def hit_bin(share: np.ndarray) -> np.ndarray:
    """Hit share (0..1, NaN = no data) -> bin index 0..10, -1 for no data."""
    out = np.full(share.shape, -1, dtype=np.int16)
    ok = ~np.isnan(share)
    out[ok] = np.clip(np.rint(share[ok] * 10), 0, 10).astype(np.int16)
    return out


def heat_bin(count: np.ndarray, expected: np.ndarray | float) -> np.ndarray:
    """Routed counts vs the uniform expectation -> bin 0..10; -1 where never routed."""
    out = np.full(count.shape, -1, dtype=np.int16)
    ok = count > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log2(count / expected)
    out[ok] = np.clip(np.rint((r[ok] + 3.0) / 6.0 * 10), 0, 10).astype(np.int16)
    return out


def legend_segments(styles: list[Style], lo: str, hi: str) -> list[Segment]:
    segs = [Segment(lo + " ", DIM)]
    segs += [Segment(CELL_GLYPH, s) for s in styles]
    segs.append(Segment(" " + hi, DIM))
    return segs

