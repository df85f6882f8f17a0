"""The one number formatter, and the one JSON emitter, for every view (screen and headless)."""

from __future__ import annotations

import math
import sys
from typing import IO, Any

import orjson

__all__ = ["MISSING", "fmt", "num", "print_json", "to_json"]

#: What a value the source did not send reads as.
MISSING = "missing"

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def fmt(v: float | int | None, digits: int = 1, unit: str = "") -> str:
    """A number for display, or ``missing`` when the source did not send it (None or NaN).

    Integers (and integral values from 1,000 up) get thousands separators; small non-zero values
    keep two significant digits (0.039 MiB is not shown as 0.0); ``unit`` follows after a space."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        s = f"{int(v):,}"
    else:
        if v and abs(v) < 10 ** -digits * 10:
            digits = max(digits, 1 - int(math.floor(math.log10(abs(v)))))
        s = f"{v:,.{digits}f}"
    return f"{s} {unit}".rstrip()


def num(v: Any) -> float | None:
    """A JSON-safe number: None for an absent, non-numeric or non-finite value (never NaN)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def to_json(obj: Any) -> str:
    """Indented JSON of a document (NaN and infinities become null, numpy arrays lists, every
    key a string): what every ``--json`` output prints."""
    return orjson.dumps(obj, option=_JSON_OPTIONS).decode()


def print_json(obj: Any, file: IO[str] | None = None) -> None:
    """Write :func:`to_json` of ``obj`` and a newline to ``file`` (default stdout)."""
    (file or sys.stdout).write(to_json(obj) + "\n")
