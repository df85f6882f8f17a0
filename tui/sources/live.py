"""What every live session source shares: the one state machine, the watchdog, the counters.

A live source (:class:`~bmoe_top.tui.sources.child_session.ChildSession`: a child process over
pipes; :class:`~bmoe_top.tui.sources.session_socket.SessionSocketClient`: a running session over
a Unix socket; :class:`~bmoe_top.tui.sources.replay.RecordingSource`: a recording at its pace)
turns lines into records (:func:`bmoe_top.parsers.bmoe_lines.parse_line`, docs/telemetry.md
"Per-token lines" and "Session mode") and hands them to three sinks:

* ``on_record(record, t)`` for every parsed stdout/socket line (``t`` unix seconds of arrival);
* ``on_stderr(line, t)`` for each stderr line;
* ``on_event(event)`` for every :mod:`~bmoe_top.tui.sources.events` event (state changes,
  requests, problems, ...).

Lines are handed over in batches: the lines of one read (a pipe or socket chunk) go to the sinks
inside one ``batch()`` context (``connect(batch=...)``; the live feed passes the run model's
lock), so the model takes a chunk under one lock and a view never sees half of it (a token's
routing without its progress line). Each line still goes through the sinks one by one: a line a
sink fails on is reported, its neighbours still count. A reader holds the per-token lines
(``BMOE_PROGRESS``, ``BMOE_ROUTE``, ``BMOE_RESIDENT``, ``BMOE_LOAD``) of its reads for up to
:data:`HOLD_S` and hands them over together (:class:`LineBatch`): a token's lines cost a fraction
when several go through the parser and the model at once, and nothing draws them sooner (the
title and the answer's tail follow every half second); a large hand-over goes in ``batch()``
holds of :data:`BATCH_LINES` lines or :data:`BATCH_S` seconds, each ending with a whole token.
Any other line hands over what is held, then itself, at once, in order; every line keeps the
time its read arrived.

The state machine (:class:`~bmoe_top.tui.sources.events.LiveState`)::

    starting -> loading -> ready <-> generating -> exited | aborted | failed
    (socket clients also: connecting, disconnected; closing, closed)

Every change goes through :meth:`LiveBase._transition` and is announced with a
:class:`~bmoe_top.tui.sources.events.StateChanged`. Two watchdog flags sit beside it:
``ready_timeout`` (no ``BMOE_READY`` within ``ready_timeout_s``) and ``stalled`` (a generation is
in flight and no line came for ``stall_after_s``: "no telemetry for N s", so a stalled or
block-buffering child never looks finished).

Strings from the source that :meth:`LiveBase.status` hands to a view (the state message, the last
error, the READY arch, problem texts) are made safe to draw when they are stored
(``parsers.sanitize``). Threads call into this class; every public method is thread-safe. No
Textual import.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.sources.events import (
    FINAL_STATES,
    LiveState,
    Problem,
    ProblemFound,
    ReadyTimeout,
    RecordingFailed,
    Rejected,
    RequestSent,
    Sinks,
    Stalled,
    StateChanged,
)
from bmoe_top.tui.sources.recorder import Recorder

__all__ = ["BATCH_LINES", "BATCH_S", "HOLD_S", "InputWait", "LineBatch", "LiveBase", "LiveStatus", "RecordSink",
           "LineSink", "EventSink"]

RecordSink = Callable[[Any, float], None]
LineSink = Callable[[str, float], None]
EventSink = Callable[[Any], None]

#: Longest line kept whole (bytes); a longer one is cut and the cut reported as a problem.
MAX_LINE_CHARS = 16 * 1024 * 1024
#: Lines kept of an over-long stderr line in ``stderr_log``.
STDERR_KEEP_CHARS = 4096
#: Seconds a reader holds per-token lines before it hands them over (:class:`LineBatch`).
HOLD_S = 0.25
#: Lines handed over under one hold of ``batch()`` at most (and the rest of a token's): at 3,000
#: tokens/s a :data:`HOLD_S` hand-over is over 2,000 lines, and under one hold of the run's lock
#: the screen stood still for up to 1.4 s while they went in.
BATCH_LINES = 256
#: Seconds of a hand-over under one hold of ``batch()`` at most (and the rest of a token's).
BATCH_S = 0.02
#: The tags whose lines a reader may hold: one token's records, never a state change.
PER_TOKEN_TAGS = ("BMOE_PROGRESS ", "BMOE_ROUTE ", "BMOE_RESIDENT ", "BMOE_LOAD ")

Held = list[tuple[list[str], float]]


#: Why a live child's stdout can stay empty while it runs (said when a wait for a line ends).
UNFLUSHED = ("a child that writes through C stdio to a pipe without fflush() delivers its lines only "
             "when it exits (flush after each line, or run it under stdbuf -oL)")


class LineBatch:
    """The per-token lines of a reader's reads, held up to ``hold_s`` seconds and handed over
    together to ``hand_over(held)`` as ``[(lines, t), ...]`` in arrival order (``t``: unix time of
    the read). A read with any other line (a state change, text, a broken line) hands over what is
    held and itself at once; so does ``hold_s`` 0. Used by one reader thread only."""

    def __init__(self, hand_over: Callable[[Held], None], hold_s: float = HOLD_S) -> None:
        self._hand_over = hand_over
        self.hold_s = hold_s
        self._held: Held = []
        self._due = 0.0

    def add(self, lines: list[str], t: float) -> None:
        """The lines of one read (``t`` its arrival, unix s)."""
        if not lines:
            return
        if not self._held:
            self._due = time.monotonic() + self.hold_s
        self._held.append((lines, t))
        if self.hold_s <= 0 or not all(line.startswith(PER_TOKEN_TAGS) for line in lines):
            self.flush()

    def wait_s(self) -> float | None:
        """Seconds the reader may wait for more input before :meth:`flush` is due (0: due now;
        None: nothing held, wait as long as it takes)."""
        return max(0.0, self._due - time.monotonic()) if self._held else None

    def flush(self) -> None:
        """Hand over what is held (nothing when nothing is)."""
        held, self._held = self._held, []
        if held:
            self._hand_over(held)


class InputWait:
    """Waits for input on one file descriptor (a reader's pipe or socket): ``wait(timeout_s)`` is
    whether input (or its end) came within ``timeout_s`` seconds (None: wait for it)."""

    def __init__(self, fd: int) -> None:
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLPRI)

    def wait(self, timeout_s: float | None) -> bool:
        return bool(self._poller.poll(None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))))


@dataclass(slots=True)
class LiveStatus:
    """A snapshot of a live source for the UI (times in seconds).

    ``state`` (:class:`~bmoe_top.tui.sources.events.LiveState`); ``message``: one human line about
    it (e.g. "aborted: exit code -9 during a turn", "no telemetry for 7 s"); ``ready``: the
    ``Ready`` record or None; ``quiet_s``: seconds since the last stdout/socket line (None before
    the first); ``exit_code``: the child's exit status (negative = killed by that signal), None
    while running and for sockets.
    """

    kind: str
    state: LiveState
    message: str
    ready: bl.Ready | None = None
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
    problems: list[Problem] = field(default_factory=list)
    connects: int = 0


class LiveBase:
    """The shared state machine of live sources; subclasses do the I/O.

    Args:
        on_record, on_stderr, on_event: the sinks (see the module docstring); :meth:`connect`
            sets them later.
        recorder: a :class:`~bmoe_top.tui.sources.recorder.Recorder`: every line received (and
            every request sent) is written with its source.
        ready_timeout_s: seconds to wait for ``BMOE_READY`` before flagging a timeout.
        stall_after_s: "no telemetry" threshold while loading or generating.
        hold_s: seconds a reader holds per-token lines (:class:`LineBatch`; 0: none held).
        stderr_keep: stderr lines kept for the log pane.
        max_problems: problems kept in :meth:`status` (all are reported to the event sink).
    """

    kind = "live"

    def __init__(self, on_record: RecordSink | None = None, *, on_stderr: LineSink | None = None,
                 on_event: EventSink | None = None, recorder: Recorder | None = None,
                 ready_timeout_s: float = 120.0, stall_after_s: float = 5.0, hold_s: float = HOLD_S,
                 stderr_keep: int = 2000, max_problems: int = 200) -> None:
        self.sinks = Sinks(type(self).__name__)
        self._on_record = on_record
        self._on_stderr = on_stderr
        self.sinks.on_event = on_event
        self.recorder = recorder
        self.ready_timeout_s = ready_timeout_s
        self.stall_after_s = stall_after_s
        self.hold_s = hold_s
        self._lock = threading.RLock()
        self._state = LiveState.STARTING
        self._message = "starting"
        self._ready: bl.Ready | None = None
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
        self._problems: deque[Problem] = deque(maxlen=max_problems)
        self._connects = 0
        #: the newest ``stderr_keep`` stderr lines (deque appends are atomic: read without a lock)
        self.stderr_log: deque[str] = deque(maxlen=stderr_keep)
        #: the newest 200 ``Done`` records, in arrival order
        self.turns: deque[bl.Done] = deque(maxlen=200)
        self._ids: Iterator[int] = itertools.count(1)
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._batch: Callable[[], AbstractContextManager[Any]] = nullcontext

    # ---- wiring ---------------------------------------------------------------------------
    def connect(self, on_record: RecordSink | None = None, *, on_stderr: LineSink | None = None,
                on_event: EventSink | None = None,
                batch: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        """Set (replace) the sinks; call before :meth:`start`. ``batch()`` gives the context the
        lines of one read are handed over in (see the module docstring; default none)."""
        if batch is not None:
            self._batch = batch
        if on_record is not None:
            self._on_record = on_record
        if on_stderr is not None:
            self._on_stderr = on_stderr
        if on_event is not None:
            self.sinks.on_event = on_event

    def describe(self) -> str:
        """What this source is, for the run's source list (``child: CMD``, ``socket: PATH``)."""
        return self.kind

    @property
    def started(self) -> bool:
        return self._watchdog is not None or self._state != LiveState.STARTING

    @property
    def state(self) -> LiveState:
        return self._state

    def status(self) -> LiveStatus:
        """A consistent snapshot; cheap enough for a 10 Hz UI timer."""
        with self._lock:
            quiet = None if self._t_last is None else time.monotonic() - self._t_last
            return LiveStatus(
                kind=self.kind, state=self._state, message=self._describe(quiet), ready=self._ready,
                exit_code=self._exit_code, quiet_s=quiet, stalled=self._stalled,
                ready_timeout=self._ready_timeout, lines=self._lines, bad_lines=self._bad,
                stderr_lines=self._stderr_n, turns_done=self._turns_done, in_flight_id=self._in_flight,
                last_error=self._last_error, problems=list(self._problems), connects=self._connects,
            )

    # ---- requests -------------------------------------------------------------------------
    def generate(self, prompt: str, n_predict: int | None = None, *, clear_kv: bool = True,
                 think: bool | None = None, id: int | None = None) -> int | None:  # noqa: A002 - protocol field
        """Send a ``generate`` request (docs/telemetry.md "Session mode"). Returns the request
        id, or None when it could not be sent (source closed or not connected)."""
        rid = next(self._ids) if id is None else id
        req: dict[str, Any] = {"cmd": "generate", "id": rid, "prompt": prompt, "clear_kv": bool(clear_kv)}
        if n_predict is not None:
            req["n_predict"] = int(n_predict)
        if think is not None:
            req["think"] = bool(think)
        self.sinks.event(RequestSent(req, time.time()))  # before sending: the sink knows the prompt before BEGIN
        if not self.send(req):
            return None
        with self._lock:
            if self._state == LiveState.READY:
                # in flight from now on (BMOE_BEGIN confirms; a rejection returns to ready)
                ev = self._transition(LiveState.GENERATING, f"request {rid} sent")
                self._in_flight, self._in_flight_set = rid, True
                self._t_last = time.monotonic()
            else:
                ev = None
        self._emit(ev)
        return rid

    def cancel(self) -> bool:
        """Send ``{"cmd":"cancel"}``: interrupt the in-flight generation; the session stays loaded."""
        return self.send({"cmd": "cancel"})

    def start(self) -> LiveBase:
        """Start the source's threads; returns self. Subclasses implement."""
        raise NotImplementedError

    def send(self, obj: dict[str, Any]) -> bool:
        """Send one request; False when it cannot be sent. Subclasses implement."""
        raise NotImplementedError

    def close(self, timeout: float = 3.0) -> int | None:
        """End or detach; subclasses implement. Returns the exit code where there is one."""
        raise NotImplementedError

    def wait_state(self, states: LiveState | str | Iterable[LiveState | str], timeout: float) -> bool:
        """Block until the state is in ``states`` or ``timeout`` seconds pass."""
        want = {LiveState(states)} if isinstance(states, str) else {LiveState(s) for s in states}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._state in want:
                return True
            time.sleep(0.01)
        return self._state in want

    # ---- for subclasses -------------------------------------------------------------------
    def _transition(self, state: LiveState, message: str | None = None) -> StateChanged | None:
        """Move to ``state`` (under the lock); returns the event to emit after releasing it (None
        when neither the state nor its message changed)."""
        message = sanitize(message or state.value)  # it may quote the child's stderr or an error message
        changed = (state, message) != (self._state, self._message)
        self._state, self._message = state, message
        if state not in (LiveState.LOADING, LiveState.GENERATING):
            self._stalled = False
        return StateChanged(state, message) if changed else None

    def _emit(self, *events: Any) -> None:
        for ev in events:
            if ev is not None:
                self.sinks.event(ev)

    def _set_state(self, state: LiveState, message: str | None = None) -> None:
        with self._lock:
            ev = self._transition(state, message)
        self._emit(ev)

    def _start_watchdog(self) -> None:
        self._watchdog = threading.Thread(target=self._watch, name=f"{self.kind}-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        # a quarter of the shortest threshold, at most once a second: an idle source costs nothing
        period = max(0.05, min(1.0, min(self.stall_after_s, self.ready_timeout_s) / 4))
        while not self._stop.wait(period):
            events: list[Any] = []
            with self._lock:
                now = time.monotonic()
                if now - self._t_start > self.ready_timeout_s:
                    events.extend(self._ready_expired(self.ready_timeout_s))
                busy = self._state in (LiveState.LOADING, LiveState.GENERATING)
                ref = self._t_last if self._t_last is not None else self._t_start
                stalled = busy and (now - ref) > self.stall_after_s
                if stalled != self._stalled:
                    self._stalled = stalled
                    events.append(Stalled(stalled, now - ref))
            self._emit(*events)

    def _ready_expired(self, after_s: float) -> list[Any]:
        """The :class:`ReadyTimeout` event (``after_s`` seconds waited), once, while the source
        still loads without a ``BMOE_READY``; caller holds the lock."""
        if self._state == LiveState.LOADING and not self._ready_timeout and self._ready is None:
            self._ready_timeout = True
            return [ReadyTimeout(after_s)]
        return []

    def expire_ready(self, after_s: float) -> None:
        """Flag the ready timeout now, after ``after_s`` seconds of waiting (a caller whose own
        wait for ``BMOE_READY`` ran out): the run says why at once, not when the watchdog next
        looks; nothing when it was flagged already or the source is no longer loading."""
        with self._lock:
            events = self._ready_expired(after_s)
        self._emit(*events)

    def _record(self, src: str, line: str, t: float | None = None) -> None:
        """Write one line to the recorder (when there is one); a write that fails is reported at
        once as :class:`~bmoe_top.tui.sources.events.RecordingFailed`."""
        rec = self.recorder
        if rec is not None and not rec.write(src, line, t):
            self._emit(RecordingFailed(rec.path, sanitize(rec.error or "recording stopped")))

    def _problem(self, lineno: int, text: str, reason: str, where: str = "stdout") -> None:
        p = Problem(lineno, sanitize(text[:200]), sanitize(reason))
        with self._lock:
            self._problems.append(p)
        self._emit(ProblemFound(p, where))

    def _stderr_line(self, line: str, t: float) -> None:
        self._record("stderr", line, t)
        with self._lock:
            self._stderr_n += 1
        keep = line if len(line) <= STDERR_KEEP_CHARS else line[:STDERR_KEEP_CHARS] + f"... [{len(line)} chars]"
        self.stderr_log.append(keep)
        self.sinks.call("stderr", self._on_stderr, line, t)

    def _protocol_lines(self, lines: Iterable[str], t: float, on_line: Callable[[str, float], Any]) -> None:
        """The lines of one read, each through ``on_line(line, t)``, inside one ``batch()``."""
        with self._batch():
            for line in lines:
                on_line(line, t)

    def _held_lines(self, held: Held, on_line: Callable[[str, float], Any]) -> None:
        """The lines of several reads (a :class:`LineBatch` hand-over), each through
        ``on_line(line, t)`` with its read's time, in ``batch()`` holds of :data:`BATCH_LINES`
        lines or :data:`BATCH_S` seconds and the rest of a token (a hold ends after a
        ``BMOE_PROGRESS`` line), so a reader that fell behind never keeps the run from the screen
        for long."""
        it = ((line, t) for lines, t in held for line in lines)
        more = True
        while more:
            more = False
            with self._batch():
                n, end = 0, time.monotonic() + BATCH_S
                for line, t in it:
                    on_line(line, t)
                    n += 1
                    if line.startswith("BMOE_PROGRESS ") and (n >= BATCH_LINES or time.monotonic() > end):
                        more = True
                        break
            if more:
                time.sleep(0)  # let go of the GIL too: a thread waiting for the lock takes it now

    def _protocol_line(self, line: str, t: float, src: str = "stdout", *, record: bool = True) -> Any:
        """Parse one stdout/socket line, move the state machine, hand the record to the sink."""
        if record:
            self._record(src, line, t)
        rec = bl.parse_line(line)
        self._track(rec, line)
        self.sinks.call("record", self._on_record, rec, t)
        return rec

    def _track(self, rec: Any, line: str) -> None:
        events: list[Any] = []
        t = type(rec)
        with self._lock:
            self._lines += 1
            self._t_last = time.monotonic()
            if self._stalled:
                self._stalled = False
                events.append(Stalled(False, 0.0))
            if t is bl.BadLine:
                self._bad += 1
                self._problems.append(Problem(self._lines, sanitize(line[:200]), sanitize(rec.reason)))
            elif t is bl.Ready:
                self._ready = rec if rec.arch is None else dataclasses.replace(rec, arch=sanitize(rec.arch))
                self._ready_timeout = False
                if self._state in (LiveState.STARTING, LiveState.LOADING, LiveState.CONNECTING):
                    events.append(self._transition(LiveState.READY, "ready"))
            elif t is bl.Begin:
                self._in_flight, self._in_flight_set = rec.id, True
                self._last_error = None  # a request was taken: an older refusal is no longer the news
                events.append(self._transition(LiveState.GENERATING, "generating"))
            elif t is bl.Progress or t is bl.Load:
                if self._state in (LiveState.READY, LiveState.LOADING, LiveState.STARTING, LiveState.CONNECTING):
                    # one-shot --progress output (no BEGIN): a generation is in flight
                    events.append(self._transition(LiveState.GENERATING, "generating"))
                    self._in_flight_set = True
            elif t is bl.Done:
                self._turns_done += 1
                self.turns.append(rec)
                self._in_flight, self._in_flight_set = None, False
                if self._state == LiveState.GENERATING:
                    events.append(self._transition(LiveState.READY, "ready"))
            elif t is bl.Error:
                self._last_error = None if rec.msg is None else sanitize(rec.msg)
                if not rec.fatal:
                    msg = f"request rejected: {rec.msg or '(no message)'}"
                    events.append(Rejected(rec.id, rec.msg or ""))
                    in_flight = rec.id is None or rec.id == self._in_flight
                    if self._state == LiveState.READY or (self._state == LiveState.GENERATING and in_flight):
                        events.append(self._transition(LiveState.READY, msg))
                        self._in_flight, self._in_flight_set = None, False
            elif t is bl.TextLine and self._in_flight_set and self._in_flight is None:
                # one-shot --progress output (no session): the end-of-run lines close the run
                if rec.text.startswith(("=== perf ===", "generation:")):
                    self._in_flight_set = False
                    self._turns_done += 1
                    if self._state == LiveState.GENERATING:
                        events.append(self._transition(LiveState.READY, "run finished (end-of-run summary)"))
        self._emit(*events)

    def _describe(self, quiet: float | None) -> str:
        st = self._state
        if self._ready_timeout and self._ready is None and st == LiveState.LOADING:
            waited = time.monotonic() - self._t_start
            return f"no BMOE_READY after {waited:.0f} s (timeout {self.ready_timeout_s:g} s): " + \
                self._stdout_seen(0, quiet)
        if self._stalled:
            q = quiet if quiet is not None else time.monotonic() - self._t_start
            return f"{st}: no telemetry for {q:.0f} s"
        return self._message

    def stdout_seen(self, since_lines: int = 0) -> str:
        """What the source's stdout gave after its first ``since_lines`` lines, for a message that
        says what is missing: ``"no line on stdout yet; <UNFLUSHED>"`` or ``"7 lines on stdout,
        the newest 12 s ago"``."""
        with self._lock:
            quiet = None if self._t_last is None else time.monotonic() - self._t_last
            return self._stdout_seen(since_lines, quiet)

    def _stdout_seen(self, since_lines: int, quiet: float | None) -> str:
        n = self._lines - since_lines
        if n <= 0:
            return ("no line on stdout yet" if since_lines == 0 else "no line on stdout since then") + \
                f" ({self._stderr_n} on stderr); {UNFLUSHED}"
        ago = f", the newest {quiet:.0f} s ago" if quiet is not None else ""
        return f"{n} line{'s' if n != 1 else ''} on stdout{' since then' if since_lines else ''}{ago}"

    @property
    def finished(self) -> bool:
        """True once no more lines will arrive."""
        return self._state in FINAL_STATES
