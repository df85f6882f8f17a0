"""The native number reader of :func:`~.token_csv.read_numeric_csv` (``csv_native.c`` next to this
file, the C extension ``bmoe_top.parsers._csv_native`` compiled when the package is installed:
bmoe_top/native_ext.py).

:func:`reader` returns :class:`Reader`, or None when the library was not built (no C compiler at
install) or is stale (:data:`native_error` says why); read_numeric_csv then reads every
well-formed chunk with orjson.
Both give every number exactly as ``float()`` does. docs/telemetry.md "Per-token CSV".
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np

from bmoe_top.native_ext import load

__all__ = ["FIXUPS_FULL", "MALFORMED", "NO_ROOM", "Buffer", "Reader", "native_error", "reader"]

#: Reader.rows' refusals (a non-negative result is the number of rows read)
MALFORMED = -1  # a byte, a field count or a number form that is not a well-formed row
FIXUPS_FULL = -2  # more inexact numbers than the fix-up table holds
NO_ROOM = -3  # more lines than the columns have rows for

_reader: Reader | None = None
_tried = False
native_error: str | None = None

_I64P = ctypes.POINTER(ctypes.c_int64)
#: what a chunk may be: any object with the buffer protocol of bytes
Buffer: TypeAlias = bytes | bytearray | memoryview


class Reader:
    """``bmoe_csv_rows`` of the compiled library (the GIL is released while it runs; one reader
    serves every thread). A chunk is any buffer (bytes, a memoryview of a
    mapped file): it is read in place, never copied."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        fn = lib.bmoe_csv_rows
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                       ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, _I64P]
        fn.restype = ctypes.c_int64
        self._fn = fn

    def rows(self, chunk: Buffer, ncol: int, delim: int, dec: int, out: np.ndarray | Sequence[np.ndarray],
             row0: int, fix: np.ndarray) -> tuple[int, int]:
        """Read ``chunk`` (whole lines, ending with LF; every line ``ncol`` numbers separated by
        the byte ``delim``, decimal mark ``dec``) into rows ``row0 .. row0 + rows`` of the columns
        ``out``: a C-contiguous float64 ``(ncol, rows)`` array, or ``ncol`` contiguous float64
        arrays. Numbers that need ``float()`` are NaN in ``out`` and listed in ``fix`` (int64
        (k, 4): row, column, first byte, end byte). Returns (rows read, or MALFORMED, FIXUPS_FULL
        or NO_ROOM when the columns are shorter than the lines; fix-ups used)."""
        cols = list(out)
        assert len(cols) >= ncol and fix.flags.c_contiguous and fix.dtype == np.int64
        for c in cols[:ncol]:
            assert c.dtype == np.float64 and c.flags.c_contiguous
        cap = min((c.shape[0] for c in cols[:ncol]), default=0)
        buf = np.frombuffer(chunk, dtype=np.uint8)
        ptrs = (ctypes.c_void_p * ncol)(*(c.ctypes.data for c in cols[:ncol]))
        nfix = ctypes.c_int64(0)  # per call: threads share this reader, and the call runs without the GIL
        got = self._fn(buf.ctypes.data, len(buf), ncol, delim, dec, ptrs, row0, cap, fix.ctypes.data,
                       fix.shape[0], ctypes.byref(nfix))
        return int(got), int(nfix.value)


def reader() -> Reader | None:
    """The compiled reader, loaded the first time it is asked for; None when it was not built."""
    global _reader, _tried, native_error
    if not _tried:
        _tried = True
        try:
            _reader = Reader(load("bmoe_top.parsers._csv_native"))
        except OSError as e:
            native_error = str(e)
    return _reader
