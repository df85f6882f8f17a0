"""The compiled number reader of :func:`~.token_csv.read_numeric_csv` for large bodies (numba,
cached on disk after the first call; imported only when a body is large enough to repay loading
numba, ``token_csv._KERNEL_MIN_BYTES``).

:func:`parse_rows` reads a run of well-formed rows (every line exactly ``ncol`` numbers, nothing
else) straight into column-major float64 storage. A number is exact here when its digits fit
2**53 and its decimal exponent is within 10**22 (one correctly rounded multiply or divide, the
classic fast path of every strtod); any other number is left for Python's ``float`` as a fix-up,
so every value equals ``float(cell)``. Anything that is not a well-formed run of rows is refused
and the caller reads the chunk another way. docs/telemetry-contract.md "Per-token CSV".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

F = TypeVar("F", bound=Callable[..., Any])

#: parse_rows' refusals (a non-negative result is the number of rows read)
MALFORMED = -1  # a byte, a field count or a number form that is not a well-formed row
FIXUPS_FULL = -2  # more inexact numbers than the fix-up table holds

_EXACT_MANTISSA = 1 << 53  # integers up to here are exact float64 values
P10 = np.array([10.0 ** k for k in range(23)], dtype=np.float64)


def _jit(fn: F) -> F:
    """numba ``njit`` with the on-disk cache, typed for mypy."""
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


@_jit
def parse_rows(buf: npt.NDArray[np.uint8], ncol: int, delim: int, dec: int, out: npt.NDArray[np.float64],
               row0: int, fix: npt.NDArray[np.int64], p10: npt.NDArray[np.float64]) -> tuple[int, int]:
    """Read ``buf`` (whole lines, ending with LF) into ``out[0:ncol, row0:row0 + rows]``.

    ``delim``/``dec`` are the field separator and decimal mark bytes. A number accepted is
    ``[+-]? digits* (dec digits*)? ([eE] [+-]? digits+)?`` with at least one mantissa digit.
    Numbers that cannot be converted exactly here are written as NaN and listed in ``fix`` as
    (row, column, first byte, end byte). Returns (rows read or MALFORMED or FIXUPS_FULL, fix-ups
    used). ``out`` must have room for every line of ``buf`` from ``row0``.
    """
    n = buf.shape[0]
    if n == 0 or buf[n - 1] != 10:
        return MALFORMED, 0
    i = 0
    row = row0
    col = 0
    nfix = 0
    cap = fix.shape[0]
    while i < n:
        start = i
        neg = False
        c = buf[i]
        if c == 45:
            neg = True
            i += 1
        elif c == 43:
            i += 1
        m = np.uint64(0)
        digits = 0
        exp10 = 0
        big = False
        while i < n and 48 <= buf[i] <= 57:
            if m < np.uint64(100_000_000_000_000_000):
                m = m * np.uint64(10) + np.uint64(buf[i] - 48)
            else:
                big = True
                exp10 += 1
            digits += 1
            i += 1
        if i < n and buf[i] == dec:
            i += 1
            while i < n and 48 <= buf[i] <= 57:
                if m < np.uint64(100_000_000_000_000_000):
                    m = m * np.uint64(10) + np.uint64(buf[i] - 48)
                    exp10 -= 1
                else:
                    big = True
                digits += 1
                i += 1
        if digits == 0:
            return MALFORMED, nfix
        if i < n and (buf[i] == 101 or buf[i] == 69):
            i += 1
            eneg = False
            if i < n and (buf[i] == 45 or buf[i] == 43):
                eneg = buf[i] == 45
                i += 1
            e = 0
            edigits = 0
            while i < n and 48 <= buf[i] <= 57:
                if e < 100_000:
                    e = e * 10 + (buf[i] - 48)
                edigits += 1
                i += 1
            if edigits == 0:
                return MALFORMED, nfix
            exp10 += -e if eneg else e
        if i >= n or col >= ncol:
            return MALFORMED, nfix
        if m == 0 and not big:
            v = 0.0
        elif not big and m <= np.uint64(_EXACT_MANTISSA) and -22 <= exp10 <= 22:
            v = float(m)
            if exp10 >= 0:
                v = v * p10[exp10]
            else:
                v = v / p10[-exp10]
        else:
            if nfix >= cap:
                return FIXUPS_FULL, nfix
            fix[nfix, 0] = row
            fix[nfix, 1] = col
            fix[nfix, 2] = start
            fix[nfix, 3] = i
            nfix += 1
            v = np.nan
        out[col, row] = -v if neg else v
        c = buf[i]
        i += 1
        if c == delim:
            col += 1
        elif c == 10:
            if col != ncol - 1:
                return MALFORMED, nfix
            col = 0
            row += 1
        else:
            return MALFORMED, nfix
    return row - row0, nfix
