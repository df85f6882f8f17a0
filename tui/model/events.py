"""The event log of a run: changes of state worth keeping (docs/events.md), held in memory and
handed to listeners (the JSONL writer of ``bmoe_top.tui.jobs.event_file``) as they happen.

The run model records two kinds itself (``RunModel.events``): ``source`` (its status changed:
connected, busy, down; a restarted server) and ``turn`` (a turn started, finished or was
cancelled). The alert rules and the diagnosis record theirs through the same call, one line per
change::

    run.events.record("alert", rule.name, old_state, new_state, detail)      # each transition
    run.events.record("diagnosis", "diagnosis", old_line, new_line)          # the line changed

:class:`EventLog` keeps the newest :data:`MAX_EVENTS` (memory stays flat over a long session;
every event is counted in :attr:`EventLog.total`). Thread-safe: a poller or reader thread
records while the screen reads. Every string recorded is made one safe line
(:func:`bmoe_top.parsers.events.clean`). No Textual import.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable

from bmoe_top.parsers.events import KINDS, Event, clean

__all__ = ["KINDS", "MAX_EVENTS", "Event", "EventLog", "Listener"]

#: Events kept in memory (the newest; older ones stay in the JSONL file).
MAX_EVENTS = 5_000

#: Called with each event recorded (after it is kept), on the recording thread; what it returns is ignored.
Listener = Callable[[Event], object]

_log = logging.getLogger(__name__)


class EventLog:
    """The newest :data:`MAX_EVENTS` events of a run, oldest first, and the listeners that see
    each new one. ``run``: this log's id (12 hex digits, new per log); ``source``: the run's
    source as events name it (set by the run model from its first source)."""

    def __init__(self, capacity: int = MAX_EVENTS, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._events: deque[Event] = deque(maxlen=capacity)
        self._listeners: list[Listener] = []
        self._clock = clock
        self.total = 0
        self.version = 0
        self.run = uuid.uuid4().hex[:12]
        self.source = ""

    def record(self, kind: str, subject: str, old: str | None, new: str, detail: str = "",
               t: float | None = None) -> Event:
        """Record one change: ``kind`` one of :data:`KINDS` (``ValueError`` otherwise),
        ``subject`` what changed, its state before (``old``, None when it had none) and after
        (``new``), ``detail`` one line, ``t`` unix seconds (now when None). Returns the event."""
        if kind not in KINDS:
            raise ValueError(f"event kind {kind!r}: one of {', '.join(KINDS)}")
        ev = Event(self._clock() if t is None else float(t), kind, clean(str(subject)),
                   None if old is None else clean(str(old)), clean(str(new)), clean(str(detail)),
                   self.source, self.run)
        with self._lock:
            self._events.append(ev)
            self.total += 1
            self.version += 1
            listeners = tuple(self._listeners)
        for fn in listeners:
            try:
                fn(ev)
            except Exception:  # a listener's failure never stops the source that recorded
                _log.exception("event listener %r failed", fn)
        return ev

    def preload(self, events: Iterable[Event]) -> None:
        """Keep events of earlier sessions (read back from the file) before the new ones, without
        handing them to the listeners (they are written already)."""
        with self._lock:
            old = list(events)[-(self._events.maxlen or 0):]
            new = list(self._events)
            self._events.clear()
            self._events.extend(old)
            self._events.extend(new)
            self.version += 1

    def listen(self, fn: Listener, *, past: bool = False) -> None:
        """Hand every event recorded from now on to ``fn``; with ``past``, first the events kept
        of this log's own run (not those :meth:`preload` gave it), none lost or repeated between
        the two."""
        with self._lock:
            if past:
                for ev in self._events:
                    if ev.run == self.run:
                        fn(ev)
            self._listeners.append(fn)

    def unlisten(self, fn: Listener) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def snapshot(self) -> tuple[Event, ...]:
        """The events kept, oldest first."""
        with self._lock:
            return tuple(self._events)

    def __len__(self) -> int:
        return len(self._events)
