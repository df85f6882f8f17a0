"""Reading a recorded file for replay: its bytes, its first and last bytes (to sniff its kind), or
the open file for a parser that reads in blocks; each error as one clear sentence."""

from __future__ import annotations

import io
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["MAX_FILE_BYTES", "SAMPLE_BYTES", "ReplayError", "is_blank", "open_path", "read_path", "read_sample",
           "reader_map", "regular_file"]

#: Files bigger than this are refused rather than read whole (2 GiB); a parser that reads in
#: blocks (:func:`open_path`) has no such limit.
MAX_FILE_BYTES = 2 << 30
#: Bytes :func:`read_sample` reads from each end of a file.
SAMPLE_BYTES = 64 * 1024

_BLOCK = 1 << 22
_FILLED = re.compile(rb"[^ \t\r\n\x00]")
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


class ReplayError(Exception):
    """A path that cannot be replayed (missing, unreadable, a directory, too large)."""


def _refused(p: Path, e: OSError) -> ReplayError:
    """The one-line reason an OSError gives for ``p``."""
    if isinstance(e, FileNotFoundError):
        return ReplayError(f"{p}: no such file")
    if isinstance(e, PermissionError):
        return ReplayError(f"{p}: permission denied")
    return ReplayError(f"{p}: cannot read ({e.strerror or e})")


def regular_file(p: Path) -> None:
    """Refuse what is not a regular file before opening it: a directory, and a pipe, socket or
    device (opening a FIFO with no writer waits forever; a device may never end)."""
    mode = p.stat().st_mode
    if stat.S_ISDIR(mode):
        raise ReplayError(f"{p}: is a directory, not a recorded run")
    if not stat.S_ISREG(mode):
        raise ReplayError(f"{p}: is not a regular file (a pipe, socket or device), not a recorded run")


def read_path(path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``path``; raises :class:`ReplayError` with a one-line reason."""
    p = Path(path)
    try:
        regular_file(p)
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ReplayError(f"{p}: {size / 2**30:.1f} GiB is larger than the 2 GiB replay limit")
        return p.read_bytes()
    except OSError as e:
        raise _refused(p, e) from None


def read_sample(path: str | os.PathLike[str]) -> tuple[bytes, int]:
    """``(sample, size)``: the whole file when it is at most twice :data:`SAMPLE_BYTES`, else its
    first and last :data:`SAMPLE_BYTES` joined (what ``parsers.sniff.sniff`` reads of a file), and
    the file's size. Raises :class:`ReplayError`."""
    p = Path(path)
    try:
        regular_file(p)
        with p.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= 2 * SAMPLE_BYTES:
                data = f.read()
                return data, len(data)
            head = f.read(SAMPLE_BYTES)
            f.seek(size - SAMPLE_BYTES)
            return head + f.read(SAMPLE_BYTES), size
    except OSError as e:
        raise _refused(p, e) from None


def is_blank(path: str | os.PathLike[str], sample: bytes, size: int) -> bool:
    """True when the file holds nothing but white space and NUL bytes (``sample``, ``size``: from
    :func:`read_sample`; a larger file is read in blocks only when its sample is blank). Raises
    :class:`ReplayError`."""
    if _FILLED.search(sample):
        return False
    if size <= len(sample):
        return True
    p = Path(path)
    try:
        with p.open("rb") as f:
            while block := f.read(_BLOCK):
                if _FILLED.search(block):
                    return False
    except OSError as e:
        raise _refused(p, e) from None
    return True


@contextmanager
def open_path(path: str | os.PathLike[str]) -> Iterator[io.BufferedReader]:
    """``path`` open for reading in binary (for a parser that reads it in blocks); an error
    opening or reading it is a :class:`ReplayError`."""
    p = Path(path)
    try:
        regular_file(p)
        with p.open("rb") as f:
            yield f
    except OSError as e:
        raise _refused(p, e) from None


def reader_map() -> Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]] | None:
    """``map`` over the file readers' threads (one per CPU, at most 4; made once), for a parser
    whose native reader runs without the GIL (``parsers.token_csv.read_numeric_csv``'s ``pmap``);
    None on one CPU."""
    global _POOL
    workers = min(os.cpu_count() or 1, 4)
    if workers < 2:
        return None
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="bmoe-file-reader")
    return _POOL.map
