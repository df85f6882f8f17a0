"""The one number formatter, and the one JSON emitter, for every view (screen and headless)."""

from __future__ import annotations

import math
import sys
from typing import IO, Any

import orjson

__all__ = ["MISSING", "fmt", "mib", "ms", "num", "print_json", "sig", "to_json"]

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
    """A duration given in ms: ``245 ms``, ``12.3 ms``, ``0.412 ms``; from 10 s up in s (``12.5 s``)."""
    if _missing(v):
        return MISSING
    x = float(v)  # type: ignore[arg-type]
    if abs(x) >= 10_000:
        return sig(x / 1000.0, digits, "s")
    return sig(x, digits, "ms")


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
