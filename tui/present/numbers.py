"""The one number formatter, the one JSON emitter and the one text writer, for every view
(screen and headless).

Terminal safety (docs/telemetry.md "Terminal safety"): :func:`to_json` writes every character a
terminal could act on or that reorders text (C1 controls, bidi overrides and isolates, invisible
format characters, line/paragraph separators) as a JSON ``\\uXXXX`` escape, so a JSON document on a
terminal is inert and reads back to the same strings; :func:`text_line` / :func:`print_lines` pass
each text line through :func:`bmoe_top.parsers.sanitize.sanitize`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from typing import IO, Any

import orjson

from bmoe_top.parsers.sanitize import SHOWN, sanitize
from bmoe_top.tui.model.quantities import Form, Quantity

__all__ = ["FORM_RULES", "MISSING", "count", "diff", "fmt", "mib", "ms", "num", "print_json", "print_lines",
           "safe_rows", "show", "shown_as", "sig", "size", "text_line", "to_json", "unit_text", "whole"]

#: What a value the source did not send reads as.
MISSING = "missing"

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def fmt(v: float | int | None, digits: int = 1, unit: str = "") -> str:
    """A number for display, or ``missing`` when the source did not send it (None or NaN).

    Integers (and integral values from 1,000 up) get thousands separators; small non-zero values
    keep two significant digits (0.039 MiB is not shown as 0.0); ``unit`` follows after a space."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and (abs(v) >= 1000 or digits == 0)):
        s = f"{int(v):,}"
    else:
        if v and abs(v) < 10 ** -digits * 10:
            digits = max(digits, 1 - int(math.floor(math.log10(abs(v)))))
        s = f"{v:,.{digits}f}"
    return f"{s} {unit}".rstrip()


def count(v: float | int | None, unit: str = "") -> str:
    """A count (tokens, hits, requests) as an integer with thousands separators, or ``missing``."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    return f"{round(v):,} {unit}".rstrip()


def _missing(v: float | int | None) -> bool:
    return v is None or isinstance(v, bool) or not math.isfinite(float(v))


def sig(v: float | int | None, digits: int = 3, unit: str = "") -> str:
    """``v`` to ``digits`` significant digits (rates: ``3.94``, ``45.6``, ``456``, ``4,560``),
    thousands separated; ``missing`` when absent; ``unit`` after a space."""
    if _missing(v):
        return MISSING
    x = float(v)  # type: ignore[arg-type]
    if x == 0:
        s = "0"
    else:
        mag = math.floor(math.log10(abs(x)))
        dec = max(0, digits - 1 - mag)
        s = f"{round(x, dec):,.{dec}f}"
    return f"{s} {unit}".rstrip()


def mib(v: float | int | None, digits: int = 3) -> str:
    """A size given in MiB in human units: MiB up to 1024 MiB, then GiB, then TiB (``digits``
    significant digits: ``812 MiB``, ``1.59 GiB``, ``163 GiB``, ``1.20 TiB``)."""
    if _missing(v):
        return MISSING
    x = float(v)  # type: ignore[arg-type]
    for unit in ("MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return sig(x, digits, unit)
        x /= 1024
    return sig(x, digits, "TiB")  # pragma: no cover - the loop returns


def ms(v: float | int | None, digits: int = 3) -> str:
    """The one duration formatter, for a duration given in ms: ``245 ms``, ``12.3 ms``,
    ``0.412 ms``; from 1 s up in s (``1.23 s``, ``12.5 s``)."""
    if _missing(v):
        return MISSING
    x = float(v)  # type: ignore[arg-type]
    if abs(x) >= 1000:
        return sig(x / 1000.0, digits, "s")
    return sig(x, digits, "ms")


def size(v: float | int | None) -> str:
    """The one size formatter for a size given in bytes: MiB, GiB, TiB as :func:`mib` shows them."""
    if _missing(v):
        return MISSING
    return mib(float(v) / 1048576.0)  # type: ignore[arg-type]


#: Count units a value shows (the other counts are the nouns their labels name: hits, experts).
_COUNT_UNITS = {"tokens": "tok"}


def unit_text(quantity: Quantity) -> str:
    """The unit a value of ``quantity`` shows after it (``""`` when its label already says it:
    ``tok/s``, or a count of what the label names)."""
    if quantity.form is Form.COUNT:
        return _COUNT_UNITS.get(quantity.unit, "")
    if quantity.unit and quantity.unit in quantity.label:
        return ""
    return quantity.unit


def show(quantity: Quantity, v: float | int | None) -> str:
    """``v`` as the catalogue says ``quantity`` is shown (``bmoe_top.tui.model.quantities.Form``),
    with its unit; ``missing`` when the source did not send it (None or NaN)."""
    if _missing(v):
        return MISSING
    x = float(v)  # type: ignore[arg-type]
    form, unit = quantity.form, unit_text(quantity)
    if form is Form.COUNT:
        return count(x, unit)
    if form is Form.MIB:
        return mib(x)
    if form is Form.BYTES:
        return size(x)
    if form is Form.PCT:
        return fmt(x, 1, "%")
    if form in (Form.MS, Form.SECONDS):
        text = ms(x * 1000.0 if form is Form.SECONDS else x)
        per = quantity.unit.partition("/")[2]
        return f"{text}/{'tok' if per == 'token' else per}" if per else text
    if form is Form.CELSIUS:
        return f"{x:.1f} °C"
    if form is Form.MIB_RATE:
        return sig(x, 3, "MiB/s")
    return sig(x, 3, unit)


#: How :func:`show` writes each form, in words, and values it is shown with in the user guide's
#: table of numbers (``shown as``: :func:`shown_as`, so the page says what the code does).
FORM_RULES: dict[Form, tuple[str, tuple[float, ...]]] = {
    Form.COUNT: ("a whole number, thousands separated", (42.0, 3520.0)),
    Form.RATE: ("3 significant digits, whatever a file printed", (6.4, 45.63, 4563.0)),
    Form.PCT: ("one decimal", (79.31, 100.0)),
    Form.MIB: ("3 significant digits, in MiB up to 1,023, then GiB, TiB", (0.0954, 149.3, 1628.0)),
    Form.BYTES: ("3 significant digits of the bytes in MiB up to 1,023, then GiB, TiB", (156567552.0,)),
    Form.MIB_RATE: ("3 significant digits", (420.37,)),
    Form.MS: ("3 significant digits, in ms below 1 s, then s", (0.4123, 245.0, 1234.0)),
    Form.SECONDS: ("3 significant digits, in ms below 1 s, then s", (0.0412, 6.525, 24.419)),
    Form.CELSIUS: ("one decimal", (41.04,)),
    Form.NUMBER: ("3 significant digits", (0.0391, 2.5)),
}


def shown_as(quantity: Quantity) -> str:
    """How values of ``quantity`` are shown, in words, with examples made by :func:`show`
    (``3 significant digits, whatever a file printed: 6.40, 45.6, 4,560``)."""
    words, samples = FORM_RULES[quantity.form]
    return f"{words}: " + ", ".join(f"`{show(quantity, v)}`" for v in samples)


def diff(quantity: Quantity, a: float | int | None, b: float | int | None) -> str:
    """The change from ``a`` to ``b``: a percentage's in points (``+35.5 pt``, never a relative
    change of a percentage), any other quantity's as its signed difference in its own form and
    the relative change (``+4.92 tok/s (+223 %)``)."""
    if _missing(a) or _missing(b):
        return MISSING
    x, y = float(a), float(b)  # type: ignore[arg-type]
    d = y - x
    if quantity.form is Form.PCT:
        return f"{d:+.1f} pt"
    sign = "+" if d >= 0 else "-"
    text = sign + show(quantity, abs(d))
    if quantity.form is Form.RATE and quantity.unit not in text:
        text += f" {quantity.unit}"
    return text + (f" ({100.0 * d / abs(x):+.0f} %)" if x else "")


def num(v: Any) -> float | None:
    """A JSON-safe number: None for an absent, non-numeric or non-finite value (never NaN)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


#: The largest integer every float below it holds exactly (2**53): a count above it is no exact count.
EXACT_INT = 2 ** 53


def whole(v: Any) -> int | float | None:
    """A count for a JSON document: ``v`` truncated to an int while ``|v| <= 2**53`` (every such
    float is an exact count, and JSON's 64-bit integers hold it), the float itself beyond (a
    counter of 1e20 stays 1e+20: no 64-bit integer holds it), None when absent or not finite."""
    f = num(v)
    if f is None:
        return None
    return int(f) if -EXACT_INT <= f <= EXACT_INT else f


# What JSON text must not carry raw to a terminal: DEL and every code point the sanitizer shows as
# <U+XXXX> (orjson already escapes C0 controls but not DEL; lone surrogates never reach its output).
_JSON_UNSAFE = re.compile("[\x7f" + "".join(f"\\U{cp:08x}" for cp in sorted(SHOWN) if not 0xD800 <= cp < 0xE000)
                          + "]")


def _json_escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    cp -= 0x10000
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


def to_json(obj: Any) -> str:
    """Indented JSON of a document (NaN and infinities become null, numpy arrays lists, every
    key a string, DEL and C1/bidi/format characters as ``\\uXXXX`` escapes): what every ``--json``
    output prints."""
    raw = orjson.dumps(obj, option=_JSON_OPTIONS)
    text = raw.decode()
    return text if raw.isascii() and b"\x7f" not in raw else _JSON_UNSAFE.sub(_json_escape, text)


def print_json(obj: Any, file: IO[str] | None = None) -> None:
    """Write :func:`to_json` of ``obj`` and a newline to ``file`` (default stdout)."""
    (file or sys.stdout).write(to_json(obj) + "\n")


def text_line(value: object) -> str:
    """One line of text output made safe for a terminal (``str()`` then ``sanitize``)."""
    return sanitize(value if type(value) is str else str(value))


def print_lines(lines: str | Iterable[str], file: IO[str] | None = None) -> None:
    """Write text output line by line, each through :func:`text_line` (a ``str`` is split at its
    line breaks first)."""
    out = file or sys.stdout
    for line in (lines.split("\n") if isinstance(lines, str) else lines):
        out.write(text_line(line) + "\n")


def safe_rows(rows: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Panel rows (label, value, kind) with label and value made safe to draw (:func:`text_line`)."""
    return [(text_line(a), text_line(b), c) for a, b, c in rows]
