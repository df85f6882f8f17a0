"""What every live source shares: protocol state tracking, watchdog, stderr log, counters.

A live source (``ChildSession``: a child process over pipes; ``SessionSocketClient``: a
running session over a Unix socket) turns lines into parser records
(``bmoe_top.parsers.bmoe_lines.parse_line``, telemetry-contract.md "Per-token lines" and
"Session mode") and hands each record to a sink ``on_record(record, t)`` (``t`` = unix
seconds of arrival; the lead's ``RunModel.ingest`` fits). It keeps a small state machine
that the UI polls with ``status()``:

    starting -> loading -> ready <-> generating -> exited | aborted | failed
    (socket clients also: connecting, disconnected)

plus two watchdog flags: ``ready_timeout`` (no ``BMOE_READY`` within ``ready_timeout_s``)
and ``stalled`` (a generation is in flight and no stdout line for ``stall_after_s``: "no
telemetry for N s", so a stalled or block-buffering child never looks finished).

Threads call into this class; every public method is thread-safe. No Textual import.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bmoe_top.parsers import bmoe_lines as _bl

try:  # helper P's Problem dataclass; a local twin until it exists
    from bmoe_top.parsers.textio import Problem
except Exception:  # noqa: BLE001

    @dataclass(slots=True)
    class Problem:  # type: ignore[no-redef]
        lineno: int
        text: str
        reason: str


RecordSink = Callable[[Any, float], None]
LineSink = Callable[[str, float], None]
EventSink = Callable[[str, dict], None]

#: States in which the source is finished for good (no more lines will arrive).
FINAL_STATES = frozenset({"exited", "aborted", "failed", "closed"})


@dataclass(slots=True)
class LiveStatus:
    """A snapshot of a live source for the UI (all times in seconds).

    ``state``: starting | connecting | loading | ready | generating | closing | disconnected |
    exited | aborted | failed | closed. ``message``: one human line describing it (e.g.
    "aborted: exit code -9 during turn 2", "no telemetry for 7 s"). ``ready`` is the
    ``Ready`` record (load_s, arch, n_ctx) or None. ``quiet_s``: seconds since the last
    stdout/socket line (None before the first). ``exit_code``: child exit status (negative =
    killed by that signal) or None while running / for sockets.
    """

    kind: str
    state: str
    message: str
    ready: Any = None
    exit_code: int | None = None
    quiet_s: float | None = None
    stalled: bool = False
    ready_timeout: bool = False
    lines: int = 0
    bad_lines: int = 0
    stderr_lines: int = 0
    turns_done: int = 0
    in_flight_id: int | None = None
    last_error: str | None = None
    problems: list = field(default_factory=list)
    connects: int = 0


class LiveBase:
    """Shared state machine for live sources; subclasses do the I/O.

    Args:
        on_record: sink for every parsed stdout/socket record, ``(record, t)``; records are
            the ``bmoe_lines`` dataclasses, ``TextLine`` and ``BadLine`` included.
        on_stderr: sink for each stderr line ``(line, t)`` (the log pane).
        on_event: optional ``(kind, info)`` callback for state changes: "state", "ready",
            "begin", "done", "error", "rejected", "stalled", "ready_timeout", "problem",
            "request" (a generate request about to be sent: ``info["request"]``),
            "connected", "disconnected", "new_session", "exit".
        recorder: optional ``Recorder``; every received line is written with its source.
        ready_timeout_s: seconds to wait for ``BMOE_READY`` before flagging a timeout.
        stall_after_s: "no telemetry" threshold while loading or generating.
        stderr_keep: how many stderr lines to keep for the log pane (a bounded deque).
    """

    kind = "live"

    def __init__(
        self,
        on_record: RecordSink | None = None,
        *,
        on_stderr: LineSink | None = None,
        on_event: EventSink | None = None,
        recorder=None,
        ready_timeout_s: float = 120.0,
        stall_after_s: float = 5.0,
        stderr_keep: int = 2000,
        max_problems: int = 200,
    ) -> None:
        self._on_record = on_record
        self._on_stderr = on_stderr
        self._on_event = on_event
        self.recorder = recorder
        self.ready_timeout_s = ready_timeout_s
        self.stall_after_s = stall_after_s
        self._lock = threading.RLock()
        self._state = "starting"
        self._message = "starting"
        self._ready = None
        self._exit_code: int | None = None
        self._t_start = time.monotonic()
        self._t_last: float | None = None
        self._stalled = False
        self._ready_timeout = False
        self._lines = 0
        self._bad = 0
        self._stderr_n = 0
        self._turns_done = 0
        self._in_flight: int | None = None
        self._in_flight_set = False
        self._last_error: str | None = None
        self._problems: collections.deque = collections.deque(maxlen=max_problems)
        self._connects = 0
        #: the last ``stderr_keep`` stderr lines, for the log pane (read under no lock: deque appends are atomic)
        self.stderr_log: collections.deque[str] = collections.deque(maxlen=stderr_keep)
        #: the last 200 ``Done`` records in arrival order, for a turns table
        self.turns: collections.deque = collections.deque(maxlen=200)
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # ---- public API -----------------------------------------------------------------
    def connect(self, on_record: RecordSink | None = None, *, on_stderr: LineSink | None = None,
                on_event: EventSink | None = None) -> None:
        """Set (replace) the sinks; call before ``start()`` (e.g. the live screen wires its run model)."""
        if on_record is not None:
            self._on_record = on_record
        if on_stderr is not None:
            self._on_stderr = on_stderr
        if on_event is not None:
            self._on_event = on_event

    @property
    def started(self) -> bool:
        return self._watchdog is not None or self._state != "starting"

    def status(self) -> LiveStatus:
        """A consistent snapshot; cheap enough for a 10 Hz UI timer."""
        with self._lock:
            quiet = None if self._t_last is None else time.monotonic() - self._t_last
            return LiveStatus(
                kind=self.kind,
                state=self._state,
                message=self._describe(quiet),
                ready=self._ready,
                exit_code=self._exit_code,
                quiet_s=quiet,
                stalled=self._stalled,
                ready_timeout=self._ready_timeout,
                lines=self._lines,
                bad_lines=self._bad,
                stderr_lines=self._stderr_n,
                turns_done=self._turns_done,
                in_flight_id=self._in_flight,
                last_error=self._last_error,
                problems=list(self._problems),
                connects=self._connects,
            )

    @property
    def state(self) -> str:
        return self._state

    def generate(
        self,
        prompt: str,
        n_predict: int | None = None,
        *,
        clear_kv: bool = True,
        think: bool | None = None,
        id: int | None = None,  # noqa: A002 - protocol field name
    ) -> int | None:
        """Send a ``generate`` request (telemetry-contract.md "Session mode").

        Returns the request id, or None when the request could not be sent (source closed).
        """
        rid = next(self._ids) if id is None else id
        req: dict[str, Any] = {"cmd": "generate", "id": rid, "prompt": prompt, "clear_kv": bool(clear_kv)}
        if n_predict is not None:
            req["n_predict"] = int(n_predict)
        if think is not None:
            req["think"] = bool(think)
        self._emit("request", {"request": req})  # before sending: the sink knows the prompt before BEGIN
        if not self.send(req):
            return None
        with self._lock:
            if self._state == "ready":
                # in flight from now on (BMOE_BEGIN will confirm; a rejection returns to ready)
                self._state, self._message = "generating", f"request {rid} sent"
                self._in_flight, self._in_flight_set = rid, True
                self._t_last = time.monotonic()
        return rid

    def cancel(self) -> bool:
        """Send ``{"cmd":"cancel"}``: interrupt the in-flight generation; the session stays loaded."""
        return self.send({"cmd": "cancel"})

    def send(self, obj: dict) -> bool:  # pragma: no cover - subclasses implement
        raise NotImplementedError

    def wait_state(self, states, timeout: float) -> bool:
        """Block until ``state`` is in ``states`` (a str or a set) or ``timeout`` s pass."""
        if isinstance(states, str):
            states = {states}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._state in states:
                return True
            time.sleep(0.01)
        return self._state in states

    # ---- for subclasses -------------------------------------------------------------
    def _start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._watch, name=f"{self.kind}-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            events = []
            with self._lock:
                now = time.monotonic()
                if self._state == "loading" and not self._ready_timeout and self._ready is None:
                    if now - self._t_start > self.ready_timeout_s:
                        self._ready_timeout = True
                        events.append(("ready_timeout", {"after_s": self.ready_timeout_s}))
                busy = self._state in ("loading", "generating")
                ref = self._t_last if self._t_last is not None else self._t_start
                stalled = busy and (now - ref) > self.stall_after_s
                if stalled != self._stalled:
                    self._stalled = stalled
                    events.append(("stalled", {"stalled": stalled, "quiet_s": now - ref}))
            for kind, info in events:
                self._emit(kind, info)

    def _set_state(self, state: str, message: str | None = None) -> None:
        with self._lock:
            changed = state != self._state
            self._state = state
            self._message = message or state
            if state not in ("loading", "generating"):
                self._stalled = False
        if changed:
            self._emit("state", {"state": state, "message": message or state})

    def _emit(self, kind: str, info: dict) -> None:
        cb = self._on_event
        if cb is not None:
            try:
                cb(kind, info)
            except Exception:  # noqa: BLE001 - a UI callback must never kill a reader thread
                pass

    def _problem(self, lineno: int, text: str, reason: str) -> None:
        p = Problem(lineno, text[:200], reason)
        with self._lock:
            self._problems.append(p)
        self._emit("problem", {"problem": p})

    def _stderr_line(self, line: str, t: float) -> None:
        if self.recorder is not None:
            self.recorder.write("stderr", line, t)
        with self._lock:
            self._stderr_n += 1
        self.stderr_log.append(line if len(line) <= 4096 else line[:4096] + f"... [{len(line)} chars]")
        cb = self._on_stderr
        if cb is not None:
            try:
                cb(line, t)
            except Exception:  # noqa: BLE001
                pass

    def _protocol_line(self, line: str, t: float, src: str = "stdout", *, record: bool = True):
        """Parse one stdout/socket line, update the state machine, hand the record to the sink."""
        if record and self.recorder is not None:
            self.recorder.write(src, line, t)
        rec = _bl.parse_line(line)
        self._track(rec, line)
        sink = self._on_record
        if sink is not None:
            sink(rec, t)
        return rec

    def _track(self, rec, line: str) -> None:
        ev = None
        with self._lock:
            self._lines += 1
            self._t_last = time.monotonic()
            if isinstance(rec, _bl.BadLine):
                self._bad += 1
                self._problems.append(Problem(self._lines, line[:200], rec.reason))
            elif isinstance(rec, _bl.Ready):
                self._ready = rec
                self._ready_timeout = False
                if self._state in ("starting", "loading", "connecting"):
                    self._state, self._message = "ready", "ready"
                ev = ("ready", {"record": rec})
            elif isinstance(rec, _bl.Begin):
                self._in_flight = rec.id
                self._in_flight_set = True
                self._state, self._message = "generating", "generating"
                ev = ("begin", {"record": rec})
            elif isinstance(rec, (_bl.Progress, _bl.Load)):
                if self._state in ("ready", "loading", "starting", "connecting"):
                    # one-shot --progress output (no BEGIN): a generation is in flight
                    self._state, self._message = "generating", "generating"
                    self._in_flight_set = True
            elif isinstance(rec, _bl.Done):
                self._turns_done += 1
                self.turns.append(rec)
                self._in_flight = None
                self._in_flight_set = False
                if self._state == "generating":
                    self._state, self._message = "ready", "ready"
                ev = ("done", {"record": rec})
            elif isinstance(rec, _bl.Error):
                self._last_error = rec.msg
                if rec.fatal:
                    ev = ("error", {"record": rec})
                else:
                    ev = ("rejected", {"record": rec})
                    if self._state == "generating" and (rec.id is None or rec.id == self._in_flight):
                        self._state, self._message = "ready", "ready"
                        self._in_flight = None
                        self._in_flight_set = False
            elif isinstance(rec, _bl.TextLine) and self._in_flight_set and self._in_flight is None:
                # one-shot --progress output (no session): the end-of-run lines close the run
                if rec.text.startswith(("=== perf ===", "generation:")):
                    self._in_flight_set = False
                    self._turns_done += 1
                    if self._state == "generating":
                        self._state, self._message = "ready", "run finished (end-of-run summary)"
                    ev = ("done", {"record": None})
            if self._stalled:
                self._stalled = False
        if ev is not None:
            self._emit(*ev)

    def _describe(self, quiet: float | None) -> str:
        st = self._state
        if self._ready_timeout and self._ready is None and st == "loading":
            waited = time.monotonic() - self._t_start
            return f"no BMOE_READY after {waited:.0f} s (timeout {self.ready_timeout_s:g} s)"
        if self._stalled:
            q = quiet if quiet is not None else time.monotonic() - self._t_start
            return f"{st}: no telemetry for {q:.0f} s"
        return self._message
