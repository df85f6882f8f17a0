"""Hostile strings (what an outside source can put in a model name, a label value, an error body,
a file name or a log line to take over a terminal) and the check that a screen or a text output
carries none of their controls raw (docs/telemetry.md "Terminal safety")."""

from __future__ import annotations

import re
from typing import Any

#: Each one a way to take over a terminal or to disguise text.
PAYLOADS = {
    "osc52": "\x1b]52;c;cHduZWQ=\x07",  # write the clipboard
    "title": "\x1b]0;PWNED-TITLE\x07\x1b]2;PWNED-TITLE\x1b\\",  # set the window / icon title
    "csi": "\x1b[2J\x1b[H\x1b[?1049l\x1b[31m",  # clear the screen, home, leave the alternate screen, red
    "c1": "\u009b2J\u009d0;PWNED-TITLE\u009c\u0090q\u009c",  # 8-bit CSI, OSC ... ST, DCS
    "bidi": "\u202eevil.gguf\u202c\u2066x\u2069\u200f",  # right-to-left override, isolate, mark
    "controls": "a\x00b\x07c\x08d\x7fe\x0b",  # NUL, BEL, BS, DEL, VT
}
#: All of them in one string (as one value), marked so a test can find where it is drawn.
HOSTILE = "H0ST" + "".join(PAYLOADS.values()) + "TSOH"
#: :data:`HOSTILE` as a file or folder name can hold it (no NUL, no '/').
HOSTILE_NAME = HOSTILE.replace("/", "_").replace("\x00", "")

_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def raw_controls(text: str, *, multiline: bool = True) -> list[str]:
    """The control, C1 and bidi characters ``text`` carries raw (LF and tab allowed when
    ``multiline``), as ``U+XXXX`` strings (empty = inert)."""
    found = {f"U+{ord(c):04X}" for c in _RAW.findall(text)}
    if not multiline:
        found |= {f"U+{ord(c):04X}" for c in text if c in "\n\t"}
    return sorted(found)


def screen_text(app: Any) -> str:
    """Every line the app's current screen draws (the compositor's strips, as text)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)
