"""A live session's events -> the run model: the one place its status comes from.

:class:`LiveFeed` is what :func:`bmoe_top.tui.feed.bind.bind` wires to a live session source (a
child process, a session socket, a recording played at its pace): records go through a
:class:`~bmoe_top.tui.feed.records.RecordFeed`, stderr lines to the log, and every event through
:attr:`LiveFeed.EVENTS`. The run's status is :data:`LIVE_STATUS` of the source's state, with the
source's message as the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bmoe_top.tui.feed.loader_log import loader_facts
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.model.health import SessionHealth
from bmoe_top.tui.model.run import ProcessMemory
from bmoe_top.tui.sources.events import (
    Connected,
    Disconnected,
    Exited,
    LiveState,
    NewSession,
    ProblemFound,
    ReadyTimeout,
    RecordingFailed,
    Rejected,
    RequestSent,
    Stalled,
    StateChanged,
)
from bmoe_top.tui.sources.live import LiveBase, LiveStatus
from bmoe_top.tui.sources.procfs import ProcessGone, ProcReader, mem_available

__all__ = ["LIVE_STATUS", "LiveFeed", "session_health"]

#: A live source's state -> the run's status.
LIVE_STATUS: dict[LiveState, Status] = {
    LiveState.STARTING: Status.LOADING,
    LiveState.CONNECTING: Status.CONNECTING,
    LiveState.LOADING: Status.LOADING,
    LiveState.READY: Status.READY,
    LiveState.GENERATING: Status.GENERATING,
    LiveState.CLOSING: Status.DONE,
    LiveState.DISCONNECTED: Status.DISCONNECTED,
    LiveState.EXITED: Status.DONE,
    LiveState.ABORTED: Status.ABORTED,
    LiveState.FAILED: Status.ABORTED,
    LiveState.CLOSED: Status.DONE,
}

#: Seconds between two readings of a live child's memory (when a record arrives, and on a timer
#: while the session is idle).
MEMORY_EVERY_S = 1.0

#: Where a problem comes from when a sink failed (it also gets a log line).
SINK_WHERE = frozenset({"record", "stderr", "event", "lines"})
#: The source kind of a recording played at its pace (``RecordingSource``): nothing is live.
RECORDING_KIND = "recording"


def session_health(st: LiveStatus) -> SessionHealth:
    """A live source's status as the frozen snapshot the run model keeps."""
    ready = st.ready
    return SessionHealth(
        kind=st.kind, state=str(st.state), message=st.message, exit_code=st.exit_code,
        ready=None if ready is None else {"load_s": ready.load_s, "arch": ready.arch, "n_ctx": ready.n_ctx},
        last_error=st.last_error, turns_done=st.turns_done,
        problems=tuple(f"line {p.lineno}: {p.reason}" for p in st.problems),
        recording=st.kind == RECORDING_KIND)


class LiveFeed:
    """``source`` -> ``run`` (see the module docstring); built by ``bind``."""

    def __init__(self, source: LiveBase, run: RunModel) -> None:
        self.source = source
        self.run = run
        self.records = RecordFeed(run, source.kind)
        self._proc: ProcReader | None = None
        self._mem_t = -MEMORY_EVERY_S
        self._mem_lock = threading.Lock()
        self._mem_stop = threading.Event()
        #: The thread that reads the child's memory while it idles (:meth:`_memory_timer`).
        self.memory_timer: threading.Thread | None = None
        #: Readings of the child's memory taken so far (by records and by the timer).
        self.memory_readings = 0
        self.events: dict[type, Callable[[Any], None]] = {
            StateChanged: self._state,
            Exited: self._exited,
            RequestSent: self._request,
            ProblemFound: self._problem,
            ReadyTimeout: self._ready_timeout,
            RecordingFailed: self._recording_failed,
            NewSession: self._new_session,
            Rejected: self._seen,  # the state change that follows carries the reason
            Stalled: self._seen,  # the live status line says "no telemetry for N s" itself
            Connected: self._seen,
            Disconnected: self._seen,
        }
        run.add_source(source.describe())
        run.set_status(LIVE_STATUS[source.state], "")
        self.publish()
        # the lines of one read are written under one hold of the run's lock (re-entrant)
        source.connect(self.record, on_stderr=self.stderr, on_event=self.event, batch=lambda: run.lock)

    def record(self, rec: Any, t: float) -> None:
        self.records.apply(rec, t)
        self._sample_memory()

    def _sample_memory(self) -> bool:
        """A live child's RSS split and MemAvailable into the run (``RunModel.process_memory``), at
        most every :data:`MEMORY_EVERY_S` s, read as ``attach --pid`` reads them
        (:class:`~bmoe_top.tui.sources.procfs.ProcReader`). False once the child is gone (the last
        reading stays)."""
        pid = getattr(self.source, "pid", None)
        with self._mem_lock:
            now = time.monotonic()
            if pid is None or now - self._mem_t < MEMORY_EVERY_S:
                return True
            self._mem_t = now
            if self._proc is None or self._proc.pid != pid:
                self._proc = ProcReader(pid)
            try:
                anon, file = self._proc.rss_split()
            except (ProcessGone, OSError):
                return False
            pm = ProcessMemory(anon, file, mem_available())
            self.memory_readings += 1
        # outside the reading's lock: a record holds the run's lock when it reads (one lock order)
        self.run.set_process_memory(pm)
        return True

    def _memory_timer(self) -> None:
        """While a child runs, its memory is read every :data:`MEMORY_EVERY_S` s also when no
        record arrives (a loaded model waiting for a prompt, between turns); ends with the child."""
        if self.memory_timer is not None or getattr(self.source, "pid", None) is None:
            return
        stop = self._mem_stop

        def loop() -> None:
            while self._sample_memory() and not stop.wait(MEMORY_EVERY_S):
                pass

        self.memory_timer = threading.Thread(target=loop, name="bmoe-top memory", daemon=True)
        self.memory_timer.start()

    def stderr(self, line: str, t: float) -> None:
        """A stderr line: the log pane, and the run header facts a loader line gives (model, arch,
        layers, experts: ``bmoe_top.tui.feed.loader_log``) where the run header lacks them."""
        run = self.run
        with run.lock:
            run.add_log(line)
            facts = loader_facts(line)
            if facts:
                run.update_meta(facts, overwrite=False)

    def event(self, ev: Any) -> None:
        with self.run.lock:
            self.events[type(ev)](ev)
            self.publish()

    def publish(self) -> None:
        """The source's status into the run model (``RunModel.session_health``)."""
        self.run.set_session_health(session_health(self.source.status()))

    def _state(self, ev: StateChanged) -> None:
        self.run.set_status(LIVE_STATUS[ev.state], ev.message)
        if LIVE_STATUS[ev.state].live:
            self._memory_timer()
        else:
            self._mem_stop.set()

    def _exited(self, ev: Exited) -> None:
        self.run.set_status(LIVE_STATUS[ev.state], ev.message)
        self._mem_stop.set()

    def _request(self, ev: RequestSent) -> None:
        """A request is being sent: noted with its time (``sent_t``, unix s) for the turn's TTFT."""
        self.run.note_request({**ev.request, "sent_t": ev.t})

    def _problem(self, ev: ProblemFound) -> None:
        p = ev.problem
        self.run.add_problem(self.source.kind, p.lineno, p.text, p.reason)
        if ev.where in SINK_WHERE:
            self.run.add_log(f"bmoe-top: {p.reason}")

    def _recording_failed(self, ev: RecordingFailed) -> None:
        """A failed ``--record`` write is shown at once: the banner, a problem and a log line."""
        with self.run.lock:
            self.run.add_alert(f"{ev.path}: {ev.message}")
            self.run.add_problem("record", 0, "", ev.message)
            self.run.add_log(f"bmoe-top: {ev.path}: {ev.message}")

    def _ready_timeout(self, ev: ReadyTimeout) -> None:
        self.run.set_status(Status.LOADING, f"no BMOE_READY after {ev.after_s:g} s")

    def _new_session(self, ev: NewSession) -> None:
        with self.run.lock:
            self.run.add_log(f"bmoe-top: the runtime restarted (session {ev.previous} -> {ev.session})")
            self.run.note_restart(f"session {ev.previous} -> {ev.session}")

    def _seen(self, ev: Any) -> None:
        """An event the run model has nothing to add for (see the table above)."""
