"""Record a live source to JSONL as lines arrive (``bmoe-top launch|attach --record FILE``).

The format is :mod:`bmoe_top.parsers.recording` (docs/telemetry.md "Recordings"): one
``{"t", "src", "line"}`` object per line, each written at once with ``os.write`` so a crash loses
at most the entry being written. The file is opened with :func:`bmoe_top.outfile.open_output`:
never through a symbolic link, never over an existing file unless ``force`` (docs/architecture.md
"Output files"). No Textual import.
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType

import orjson

from bmoe_top.outfile import OutputFile, OutputFileError, open_output

__all__ = ["Recorder"]


class Recorder:
    """Write received lines to ``path`` as JSONL, one write per line (thread-safe).

    Opening raises :class:`~bmoe_top.outfile.OutputFileError` (an ``OSError``) with the reason:
    a symbolic link, an existing file without ``force``, a missing folder, a read-only file
    system. A write error later (disk full, EIO) stops recording, keeps the reason in
    :attr:`error` and makes :meth:`write` return False (once; the source reports it at once as an
    event), never raises into a reader thread. ``entries``: lines written.
    """

    def __init__(self, path: str | os.PathLike[str], *, force: bool = False) -> None:
        self.path = os.fspath(path)
        self._out: OutputFile | None = open_output(self.path, force=force, buffer_size=0)
        self._lock = threading.Lock()
        self.entries = 0
        self.error: str | None = None

    def write(self, src: str, line: str, t: float | None = None) -> bool:
        """Record one line from ``src`` received at unix time ``t`` (now when None). Returns False
        when this write failed (recording stops; :attr:`error` says why), True otherwise (also
        after recording stopped: the failure is reported once)."""
        if t is None:
            t = time.time()
        try:
            data = orjson.dumps({"t": round(t, 6), "src": src, "line": line}) + b"\n"
        except TypeError:  # lone surrogates: orjson refuses them; keep the line, escaped
            text = line.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            data = orjson.dumps({"t": round(t, 6), "src": src, "line": text}) + b"\n"
        with self._lock:
            if self._out is None:
                return True
            try:
                self._out.write(data)
                self.entries += 1
            except OutputFileError as e:
                self.error = f"recording stopped: {e} after {self.entries} lines"
                self._close_locked()
                return False
        return True

    def close(self) -> None:
        """Close the file; a write error the close reports (NFS, some devices) is kept in :attr:`error`."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        try:
            out.close()
        except OutputFileError as e:
            if self.error is None:
                self.error = f"recording stopped: {e} after {self.entries} lines"

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
