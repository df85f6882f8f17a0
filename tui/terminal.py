"""The terminal driver of bmoe-top: Textual's Linux driver, plus an end when the terminal goes away.

When the terminal hangs up (its tmux pane or window closed, an ssh connection dropped), the
kernel sends SIGHUP to the session leader only. A leader that waits for its children (``make
run``) leaves bmoe-top without a signal, and Textual's own driver does not notice the hangup: its
output thread dies on the first write (EIO), the app's loop then blocks once that thread's queue is
full (so no signal handler of the loop ever runs again), and its input thread reads end-of-file
in a loop. :class:`HangupDriver` turns a hangup into the SIGHUP a session leader gets: every
screen then ends as it does on SIGHUP (status 129; the live screen closes its runtime child first:
docs/user-guide.md "Exit status").
"""

from __future__ import annotations

import io
import os
import select
import signal
import threading
from typing import IO, Any, cast

from textual.drivers.linux_driver import LinuxDriver

#: What poll(2) reports on a terminal that has hung up (or a descriptor no longer open).
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL
#: Milliseconds between two looks for a hangup (each look is one poll(2) that waits this long).
_POLL_MS = 250


class _Hangup:
    """Raise SIGHUP in this process once, the first time :meth:`__call__` runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.raised = False

    def __call__(self) -> None:
        with self._lock:
            if self.raised:
                return
            self.raised = True
        os.kill(os.getpid(), signal.SIGHUP)


class _TerminalOutput:
    """The driver's output file: writes and flushes reach ``file`` until one fails with
    :class:`OSError` (EIO once the terminal has hung up); from then on ``hangup`` has been called
    and every write is dropped, so Textual's output thread lives and its queue keeps draining."""

    def __init__(self, file: IO[str], hangup: _Hangup) -> None:
        self._file = file
        self._hangup = hangup
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._file.write(text)
            except OSError:
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._file.flush()
            except OSError:
                self._lose()

    def _lose(self) -> None:
        self.lost = True
        self._hangup()

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return self._file.isatty()


class HangupDriver(LinuxDriver):
    """Textual's :class:`~textual.drivers.linux_driver.LinuxDriver` whose output survives a
    terminal that has gone away, and which raises SIGHUP in this process once it has: when a
    write to the terminal fails, or when poll(2) on its input reports a hangup (a thread looks
    every 250 ms while the app is in application mode, when the input is a terminal)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hangup = _Hangup()
        if self._file is not None:  # Textual's writer thread uses write, flush, fileno and isatty only
            self._file = cast(io.TextIOWrapper, _TerminalOutput(self._file, self.hangup))
        self._watch_stop = threading.Event()

    def start_application_mode(self) -> None:
        super().start_application_mode()
        if os.isatty(self.fileno):
            self._watch_stop.clear()
            threading.Thread(target=self._watch_hangup, name="bmoe-top hangup", daemon=True).start()

    def stop_application_mode(self) -> None:
        self._watch_stop.set()
        super().stop_application_mode()

    def _watch_hangup(self) -> None:
        poller = select.poll()
        poller.register(self.fileno, 0)  # no input events: poll(2) reports a hangup whatever is asked
        while not self._watch_stop.is_set():
            if any(ev & _GONE for _fd, ev in poller.poll(_POLL_MS)):
                self.hangup()
                return
