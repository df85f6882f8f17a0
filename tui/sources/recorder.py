"""Record a live source to JSONL as lines arrive (``bmoe-top launch|attach --record FILE``).

The format is :mod:`bmoe_top.parsers.recording` (docs/telemetry.md "Recordings"): one
``{"t", "src", "line"}`` object per line, each written with one ``os.write`` so a crash loses at
most the entry being written. No Textual import.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import TracebackType

import orjson

__all__ = ["Recorder"]


class Recorder:
    """Append received lines to ``path`` as JSONL, one ``os.write`` per line (thread-safe).

    ``OSError`` from opening the file is raised to the caller (a bad path); a write error later
    (disk full) stops recording, sets :attr:`error` and never raises into a reader thread.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._lock = threading.Lock()
        self.entries = 0
        self.error: str | None = None

    def write(self, src: str, line: str, t: float | None = None) -> None:
        """Record one line from ``src`` received at unix time ``t`` (now when None)."""
        if t is None:
            t = time.time()
        try:
            data = orjson.dumps({"t": round(t, 6), "src": src, "line": line}) + b"\n"
        except TypeError:  # lone surrogates: orjson refuses them; keep the line, escaped
            text = line.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            data = orjson.dumps({"t": round(t, 6), "src": src, "line": text}) + b"\n"
        with self._lock:
            if self._fd is None:
                return
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                self.entries += 1
            except OSError as e:
                self.error = f"recording to {self.path} stopped: {e.strerror or e}"
                self._close_locked()

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
