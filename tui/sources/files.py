"""Reading a recorded file whole, for replay: the bytes, or one clear sentence why not."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MAX_FILE_BYTES", "ReplayError", "read_path"]

#: Files bigger than this are refused rather than read whole (2 GiB).
MAX_FILE_BYTES = 2 << 30


class ReplayError(Exception):
    """A path that cannot be replayed (missing, unreadable, a directory, too large)."""


def read_path(path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``path``; raises :class:`ReplayError` with a one-line reason."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ReplayError(f"{p}: is a directory, not a recorded run")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ReplayError(f"{p}: {size / 2**30:.1f} GiB is larger than the 2 GiB replay limit")
        return p.read_bytes()
    except FileNotFoundError:
        raise ReplayError(f"{p}: no such file") from None
    except PermissionError:
        raise ReplayError(f"{p}: permission denied") from None
    except OSError as e:
        raise ReplayError(f"{p}: cannot read ({e.strerror or e})") from None
