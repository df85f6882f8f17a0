"""The event log on disk (docs/events.md): every event a run records, appended as one JSON line
(:mod:`bmoe_top.parsers.events`) to ``events.jsonl`` in the user's state folder
(``platformdirs``: ``$XDG_STATE_HOME/bmoe-top`` on Linux), so a session's events outlive it; and
the reader of those files for ``bmoe-top events`` and for a screen's Events table at start.

:class:`EventFile` rotates by size: a line that would take the file past ``max_bytes`` first
renames ``events.jsonl`` to ``events.jsonl.1`` (``.1`` to ``.2`` ..., the oldest of ``keep``
dropped). It opens the file with :func:`bmoe_top.outfile.open_output` (append, every line written
at once, never through a symbolic link: ``O_NOFOLLOW``). A write error (disk full, a link put in
the file's place, a read-only folder) stops the writing, is kept in :attr:`EventFile.error` and
handed once to ``on_error`` (the screen shows it on its banner); the session goes on. Several
bmoe-top processes may append to the same file (``O_APPEND``: each line is one ``write``).
No Textual import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import platformdirs

from bmoe_top.outfile import OutputFile, OutputFileError, open_output
from bmoe_top.parsers.events import Event, EventRead, event_line, parse_events
from bmoe_top.parsers.textio import iter_lines
from bmoe_top.tui.model.events import MAX_EVENTS, EventLog
from bmoe_top.tui.sources.files import ReplayError, read_path

__all__ = ["FILE_NAME", "KEEP", "MAX_BYTES", "EventFile", "default_path", "log_files", "read_events",
           "record_to_file"]

#: The log's name in the state folder.
FILE_NAME = "events.jsonl"
#: Bytes a log file grows to before it is rotated.
MAX_BYTES = 1 << 20
#: Rotated files kept beside it (``events.jsonl.1`` the newest).
KEEP = 3


def default_path() -> Path:
    """``events.jsonl`` in the user's state folder (``platformdirs.user_state_dir``)."""
    return Path(platformdirs.user_state_dir("bmoe-top", appauthor=False)) / FILE_NAME


def log_files(path: str | os.PathLike[str], keep: int = KEEP) -> list[Path]:
    """The files of the log at ``path`` that exist, oldest first: ``PATH.keep`` ... ``PATH.1``,
    ``PATH``."""
    p = Path(path)
    named = [p.with_name(f"{p.name}.{i}") for i in range(keep, 0, -1)] + [p]
    return [f for f in named if os.path.lexists(f)]


class EventFile:
    """Appends events to ``path`` (see the module docstring). ``write(event)`` is the listener an
    :class:`~bmoe_top.tui.model.events.EventLog` calls; thread-safe. ``written``: lines written
    by this object; ``rotations``: rotations it made; ``error``: why writing stopped (None while
    it goes on)."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES, keep: int = KEEP,
                 on_error: Callable[[str], None] | None = None) -> None:
        if max_bytes < 1 or keep < 1:
            raise ValueError("an event file needs max_bytes >= 1 and keep >= 1")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.on_error = on_error
        self.written = 0
        self.rotations = 0
        self.error: str | None = None
        self._out: OutputFile | None = None
        self._size = 0
        self._lock = threading.Lock()

    def _open(self) -> OutputFile:
        if self._out is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._out = open_output(self.path, append=True, buffer_size=0, mode=0o600)
            self._size = os.fstat(self._out.fileno()).st_size
        return self._out

    def _rotate(self) -> None:
        self._close()
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if os.path.lexists(older):
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))  # renames a link, never follows it
        if os.path.lexists(self.path):
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1

    def write(self, event: Event) -> bool:
        """Append ``event`` (rotating first when it would pass ``max_bytes``). Returns False when
        this write failed (writing stops: :attr:`error` says why, ``on_error`` hears it once);
        True otherwise, also after writing stopped."""
        line = event_line(event)
        with self._lock:
            if self.error is not None:
                return True
            try:
                out = self._open()
                if self._size and self._size + len(line) > self.max_bytes:
                    self._rotate()
                    out = self._open()
                out.write(line)
                self._size += len(line)
                self.written += 1
                return True
            except OSError as exc:
                err = exc if isinstance(exc, OutputFileError) else OutputFileError(str(self.path), str(exc))
                self.error = f"event log stopped: {err} ({self.written} events written)"
                self._close()
        if self.on_error is not None:
            self.on_error(self.error)
        return False

    def _close(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except OutputFileError as exc:
                if self.error is None:
                    self.error = f"event log stopped: {exc}"

    def close(self) -> None:
        with self._lock:
            self._close()


def read_events(paths: Sequence[str | os.PathLike[str]], *, newest: int | None = None) -> tuple[EventRead, list[str]]:
    """The events of ``paths`` in the order given (each file in its order), and the files that
    could not be read (one line each: why). A missing file is no error (the log may be empty).
    ``newest``: keep only the newest N events (files are read newest first until that many are
    found)."""
    out = EventRead()
    unread: list[str] = []
    order = list(paths)
    chunks: list[list[Event]] = []
    for p in reversed(order) if newest is not None else order:
        if not os.path.lexists(p):
            continue
        try:
            data = read_path(p)
        except ReplayError as exc:
            unread.append(str(exc))
            continue
        before = len(out.events)
        parse_events(iter_lines(data), where=os.fspath(p), into=out)
        chunks.append(out.events[before:])
        del out.events[before:]
        if newest is not None and sum(map(len, chunks)) >= newest:
            break
    if newest is not None:
        chunks.reverse()
    out.events = [e for c in chunks for e in c]
    if newest is not None:
        out.events = out.events[-newest:] if newest else []
    return out, unread


def record_to_file(events: EventLog, path: str | os.PathLike[str] | None = None, *,
                   on_error: Callable[[str], None] | None = None, preload: bool = True) -> EventFile:
    """Write ``events`` to the log at ``path`` (default :func:`default_path`) from now on: the
    events it holds already of its own run first, then each new one as it is recorded. With
    ``preload``, the newest events of earlier sessions (up to the in-memory capacity) are read
    back into ``events`` first, so a screen's Events table shows them after a restart. Returns
    the writer (close it when the screen ends; ``events.unlisten(writer.write)``)."""
    target = Path(path) if path is not None else default_path()
    if preload:
        read, _unread = read_events(log_files(target), newest=MAX_EVENTS)
        events.preload(e for e in read.events if e.run != events.run)
    writer = EventFile(target, on_error=on_error)
    events.listen(writer.write, past=True)
    return writer
