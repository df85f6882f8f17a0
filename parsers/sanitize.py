"""Make any string from outside safe to draw on a terminal: :func:`sanitize`, the one function every
widget and text writer calls on model and arch names, label values, error bodies, file names, problem
texts, log lines and answer text (docs/telemetry.md "Terminal safety").

The policy (what :func:`sanitize` does to each kind of character):

* Printable text is returned unchanged (the same object): letters, digits, punctuation, spaces, emoji,
  combining marks, CJK, right-to-left letters (an Arabic or Hebrew name is shown as written).
* C0 controls (U+0000-U+001F) become their Unicode control pictures (``ESC`` -> ``␛``, ``BEL`` -> ``␇``,
  ``NUL`` -> ``␀``), ``DEL`` becomes ``␡``: the terminal never receives them, the reader sees that they
  were there. So ``\\x1b[31m`` shows as ``␛[31m`` and an OSC 52 clipboard write or a title change
  (``\\x1b]52;c;...\\x07``, ``\\x1b]0;title\\x07``) is inert text.
* C1 controls (U+0080-U+009F, including the 8-bit CSI U+009B, OSC U+009D, DCS U+0090, SOS U+0098,
  PM U+009E, APC U+009F and ST U+009C) become visible code points: ``<U+009B>``.
* With ``escapes="strip"`` whole escape sequences are removed instead (ECMA-48: CSI ``ESC [`` ...
  final byte; OSC ``ESC ]``, DCS ``ESC P``, SOS ``ESC X``, PM ``ESC ^``, APC ``ESC _`` up to BEL or
  ST; other ``ESC`` + intermediates + final; and their 8-bit C1 forms). A sequence that is not
  complete is not removed: its ``ESC`` is shown as ``␛`` like any control.
* Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), the marks U+200E, U+200F,
  U+061C, and the other invisible format characters (zero-width space U+200B, word joiner U+2060,
  invisible operators U+2061-U+2064, BOM U+FEFF, soft hyphen U+00AD, Mongolian vowel separator
  U+180E, interlinear annotations U+FFF9-U+FFFB, tag characters U+E0001 and U+E0020-U+E007F, and the
  other invisible format controls listed in :data:`SHOWN`) become visible code points: ``<U+202E>``.
  Zero-width joiner and non-joiner (U+200D, U+200C) are kept: emoji sequences and several scripts
  need them, and they cannot reorder or hide text. Line and paragraph separators (U+2028, U+2029)
  and lone surrogates (which no terminal encoding can write) become ``<U+2028>``, ``<U+DC80>``.
* Line breaks depend on ``multiline``. ``multiline=False`` (labels, status lines, table cells: one
  line): CRLF, LF and CR each become one ``␤`` and a tab becomes a space. ``multiline=True`` (answer
  text, log panes): LF and tab are kept, CRLF becomes LF, a lone CR becomes ``␍`` (it would move the
  cursor back over the line).

Everything else (private-use and unassigned code points, non-breaking and other spaces) is kept.
The result never contains a C0 control other than LF and tab (multiline), a C1 control, ESC, or a
bidi control. Speed: one C-level scan (``str.isprintable``) for clean text;
benchmarks/bench_sanitize.py measures it against ``str.translate``.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any, Literal

__all__ = ["sanitize", "brief", "SHOWN", "BIDI_CONTROLS"]

#: Bidirectional embedding/override/isolate controls and the directional marks.
BIDI_CONTROLS: frozenset[int] = frozenset(
    [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C])

# Invisible format characters (Unicode category Cf) shown as code points; the Cf characters left out
# are ZWNJ/ZWJ (U+200C/U+200D) and the prepended concatenation marks (U+0600-U+0605, U+06DD, U+070F,
# U+0890-U+0891, U+08E2, U+110BD, U+110CD), which are drawn as visible signs.
_FORMAT: tuple[int, ...] = (
    0x00AD, 0x180E, 0x200B, *range(0x2060, 0x2065), *range(0x206A, 0x2070), 0xFEFF,
    *range(0xFFF9, 0xFFFC), *range(0x13430, 0x13440), *range(0x1BCA0, 0x1BCA4),
    *range(0x1D173, 0x1D17B), 0xE0001, *range(0xE0020, 0xE0080),
)

#: Every code point that :func:`sanitize` replaces by a visible ``<U+XXXX>`` (besides C0 and DEL,
#: which become control pictures, and line breaks / tabs, which follow ``multiline``).
SHOWN: frozenset[int] = frozenset(
    [*range(0x80, 0xA0), *BIDI_CONTROLS, *_FORMAT, 0x2028, 0x2029, *range(0xD800, 0xE000)])


def _code(cp: int) -> str:
    return f"<U+{cp:04X}>"


_PICTURE: dict[int, str] = {i: chr(0x2400 + i) for i in range(0x20)}
_PICTURE[0x7F] = "\u2421"

_MULTI: dict[int, str] = {**_PICTURE, **{cp: _code(cp) for cp in SHOWN}}
del _MULTI[0x0A], _MULTI[0x09]  # kept as they are; CR keeps its picture
_SINGLE: dict[int, str] = {**_PICTURE, **{cp: _code(cp) for cp in SHOWN}, 0x0A: "\u2424", 0x0D: "\u2424",
                           0x09: " "}


# ASCII bytes that multi-line text may keep as they are (printable, LF, tab)
_ASCII_KEEP = bytes(range(0x20, 0x7F)) + b"\n\t"

_ST = r"(?:\x07|\x1b\\|\x9c)"
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"           # CSI ... final
    rf"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*{_ST}"  # OSC, DCS, SOS, PM, APC ... BEL/ST
    r"|\x1b[\x20-\x2f]*[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]"     # other ESC sequences, ST itself
)


def sanitize(text: str, *, multiline: bool = False, escapes: Literal["show", "strip"] = "show") -> str:
    """``text`` made safe to write to a terminal, by the policy in this module's docstring.

    ``multiline``: False for one-line labels (line breaks become ``␤``, tabs spaces), True for text
    shown over several lines (LF and tab kept, CRLF -> LF, a lone CR -> ``␍``). ``escapes``: "show"
    (default) turns ESC and every other control into a visible picture or code point, so an escape
    sequence is shown as inert text (``␛[31m``); "strip" removes complete escape sequences first.
    Returns ``text`` itself when it is all printable. Raises ``TypeError`` for a non-``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"sanitize() takes a str, not {type(text).__name__}")
    if text.isprintable():  # stops at the first character that is not (a line break, often)
        return text
    if multiline:
        if "\r" not in text:
            if text.isascii():
                if not text.encode("ascii").translate(None, _ASCII_KEEP):
                    return text
            else:
                flat = text.replace("\n", " ")
                if "\t" in flat:
                    flat = flat.replace("\t", " ")
                if flat.isprintable():
                    return text
        table = _MULTI
    else:
        table = _SINGLE
    if escapes == "strip":
        text = _SEQUENCE.sub("", text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(table)


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxdict, _BRIEF.maxlist, _BRIEF.maxstring, _BRIEF.maxother = 6, 32, 32, 200, 200


def brief(value: Any) -> str:
    """A value from outside (a decoded JSON field) as a short ``repr`` for a message or a log line:
    at most 6 levels deep, 32 items a level, strings cut to 200 characters (``reprlib``). Never
    raises: ``repr()`` of a list nested 1,000 deep raises ``RecursionError``. Not made safe to
    draw: that is :func:`sanitize`'s job where the text is drawn."""
    return _BRIEF.repr(value)
