"""Follow a file like ``tail -F`` in a thread: complete lines, across rotation and truncation.

:class:`FileTail` reads ``path`` from its start and then every ``poll_s`` seconds:

* only complete lines count: a last line without its newline waits for the rest;
* rotation (the path now names another file: inode/device changed, or it was deleted and
  re-created) is detected: the old file is read to its end first, then the new one from its
  start, so no line is lost or repeated;
* truncation (the file got shorter than what was read, or its first line changed: truncated and
  refilled between two polls) restarts from the file's new start;
* a missing file is waited for.

Lines go to ``on_lines(lines, first_lineno, generation)`` (bytes without their newline; line
numbers count from 1 in each file; ``generation`` counts the files followed: a rotation or a
truncation starts a new one); state changes and rotations to ``on_event`` (see
:mod:`~bmoe_top.tui.sources.events`). ``kind`` names what the file holds (``audit``), for the feed
that reads it. No Textual import.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from bmoe_top.tui.sources.events import PartialLost, Rotated, Sinks, TailState, TailStateChanged, Truncated

__all__ = ["FileTail"]

_CHUNK = 1 << 20

LinesSink = Callable[[list[bytes], int, int], None]


class FileTail(threading.Thread):
    """Daemon thread following ``path`` every ``poll_s`` seconds (see the module docstring).

    :meth:`poll_once` does one round in the caller's thread (read to the current end, handle
    rotation and truncation) and returns the number of complete lines delivered; the headless
    document and tests use it without starting the thread."""

    def __init__(self, path: str | os.PathLike[str], *, kind: str = "audit", poll_s: float = 0.2,
                 on_lines: LinesSink | None = None, on_event: Callable[[Any], None] | None = None) -> None:
        super().__init__(name=f"bmoe-tail-{kind}", daemon=True)
        self.path = os.fspath(path)
        self.kind = kind
        self.poll_s = poll_s
        self.sinks = Sinks("FileTail")
        self.sinks.on_event = on_event
        self._on_lines = on_lines
        self.lock = threading.RLock()
        self.status = TailState.WAITING
        self.detail = ""
        self.n_rotations = 0
        self.n_truncations = 0
        self.generation = 0
        self.bytes_read = 0
        self._stop_ev = threading.Event()
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._lineno = 0
        self._head = b""  # first complete line of the current file (truncate-and-refill check)

    def connect(self, on_lines: LinesSink, on_event: Callable[[Any], None]) -> None:
        """Set the sinks (before the first poll)."""
        self._on_lines = on_lines
        self.sinks.on_event = on_event

    def describe(self) -> str:
        return f"{self.kind}: {self.path}"

    def stop(self) -> None:
        self._stop_ev.set()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading --------------------------------------------------------------------------------
    def _set_status(self, status: TailState, detail: str) -> None:
        with self.lock:
            if (self.status, self.detail) == (status, detail):
                return
            self.status, self.detail = status, detail
        self.sinks.event(TailStateChanged(status, detail))

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._set_status(TailState.ERROR, f"cannot open {self.path}: {exc.strerror or exc}")
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            self._set_status(TailState.ERROR, f"{self.path} is {kind}")
            return False
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        with self.lock:
            self.generation += 1
        return True

    def _read_available(self) -> int:
        """Read from the open file to its current end; returns complete lines delivered."""
        delivered = 0
        assert self._fd is not None
        while True:
            chunk = os.pread(self._fd, _CHUNK, self._offset)
            if not chunk:
                break
            self._offset += len(chunk)
            with self.lock:
                self.bytes_read += len(chunk)
            data = self._partial + chunk
            end = data.rfind(b"\n")
            if end < 0:
                self._partial = data
                continue
            self._partial = data[end + 1:]
            lines = data[: end + 1].split(b"\n")[:-1]
            if self._lineno == 0 and lines:
                self._head = lines[0]
            first = self._lineno + 1
            self._lineno += len(lines)
            self.sinks.call("lines", self._on_lines, lines, first, self.generation)
            delivered += len(lines)
            if len(chunk) < _CHUNK:
                break
        return delivered

    def _replaced_or_truncated(self) -> str | None:
        """``rotated``, ``truncated`` or None, comparing the path and the open file."""
        assert self._fd is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # deleted, not yet re-created: keep reading the old file
        if (st.st_dev, st.st_ino) != self._ident:
            return "rotated"
        if os.fstat(self._fd).st_size < self._offset:
            return "truncated"
        if self._head and os.pread(self._fd, len(self._head) + 1, 0) != self._head + b"\n":
            return "truncated"
        return None

    def poll_once(self) -> int:
        """One round; returns the number of complete lines delivered."""
        if self._fd is None:
            if not self._open():
                if self.status != TailState.ERROR:
                    self._set_status(TailState.WAITING, f"waiting for {self.path}")
                return 0
            self._set_status(TailState.OK, "")
        delivered = 0
        change = self._replaced_or_truncated()
        if change == "rotated":
            delivered += self._read_available()  # the old file's last lines first
            if self._partial:
                self._lose_partial("rotation")
            self.close()
            with self.lock:
                self.n_rotations += 1
            self.sinks.event(Rotated(self.generation + 1))
            if not self._open():
                return delivered
        elif change == "truncated":
            if self._partial:
                self._lose_partial("truncation")
            with self.lock:
                self.n_truncations += 1
                self.generation += 1
            self.sinks.event(Truncated(self.generation))
            self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        delivered += self._read_available()
        return delivered

    def _lose_partial(self, why: str) -> None:
        self.sinks.event(PartialLost(self._lineno + 1, self._partial, why))
        self._partial = b""

    def read_to_end(self) -> int:
        """One round in the caller's thread, then close the file; never raises ``OSError`` (the
        state says why the file cannot be read). Returns the lines delivered."""
        try:
            return self.poll_once()
        except OSError as exc:
            self._set_status(TailState.ERROR, f"{self.path}: {exc.strerror or exc}")
            return 0
        finally:
            self.close()

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set():
                try:
                    self.poll_once()
                except OSError as exc:
                    self._set_status(TailState.ERROR, f"{self.path}: {exc.strerror or exc}")
                    self.close()
                self._stop_ev.wait(self.poll_s)
        finally:
            self.close()
