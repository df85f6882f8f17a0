"""Play a recording back at its pace (``bmoe-top play FILE``).

:class:`RecordingPlayer` feeds a :class:`~bmoe_top.parsers.recording.Recording`'s entries to a
callback at the recorded pace, ``speed`` times faster, or as fast as possible, and can stop at
each turn boundary (``BMOE_BEGIN``). :class:`RecordingSource` plays one through the live state
machine (:class:`~bmoe_top.tui.sources.live.LiveBase`): the same sinks and events as a live
session, so the live screen shows a recording the way it showed the run. The entries are read by
the one recording reader (:mod:`bmoe_top.parsers.recording`), as ``bmoe-top replay`` reads them.
No Textual import.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from bmoe_top.parsers.recording import PROTOCOL_SOURCES, Entry, Recording, request_of
from bmoe_top.tui.sources.events import LiveState, RequestSent
from bmoe_top.tui.sources.live import LiveBase

__all__ = ["RecordingPlayer", "RecordingSource"]


class RecordingPlayer:
    """Feed a recording's entries to ``on_entry(entry)`` at the recorded pace (or faster).

    ``speed``: 1.0 = recorded pace, 10.0 = ten times faster, ``math.inf`` = no waiting.
    ``turn_by_turn``: pause before each turn, the first too (each ``BMOE_BEGIN``), until
    :meth:`next_turn`; ``turn`` counts the turns started, so a pause is before turn ``turn + 1``.
    ``max_gap_s``: a longer pause in recorded time (a user thinking between
    prompts) is shortened to it. :meth:`start` plays in a daemon thread, :meth:`play` in the
    caller's. ``position`` is the index of the next entry; ``done`` is set at the end.
    """

    def __init__(self, recording: Recording, on_entry: Callable[[Entry], None], *, speed: float = 1.0,
                 turn_by_turn: bool = False, max_gap_s: float = 5.0) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed!r}")
        self.recording = recording
        self.on_entry = on_entry
        self.speed = speed
        self.turn_by_turn = turn_by_turn
        self.max_gap_s = max_gap_s
        self.position = 0
        self.turn = 0  # turns started so far
        self.done = threading.Event()
        self.paused_at_turn = threading.Event()
        self._go = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RecordingPlayer:
        self._thread = threading.Thread(target=self.play, name="recording-player", daemon=True)
        self._thread.start()
        return self

    def next_turn(self) -> None:
        """Release a player paused at a turn boundary."""
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def play(self) -> None:
        entries = self.recording.entries
        starts = set(self.recording.turn_starts)
        t0_wall = time.monotonic()
        first = next((e.t for e in entries if e.t is not None), 0.0)
        t0_rec = prev_t = first
        shift = 0.0  # recorded seconds skipped (long gaps, turn pauses)
        try:
            while self.position < len(entries) and not self._stop.is_set():
                i = self.position
                e = entries[i]
                t = e.t if e.t is not None else prev_t
                if i in starts:
                    if self.turn_by_turn:
                        self.paused_at_turn.set()
                        self._go.wait()
                        self._go.clear()
                        self.paused_at_turn.clear()
                        if self._stop.is_set():
                            break
                        t0_wall, t0_rec, shift, prev_t = time.monotonic(), t, 0.0, t  # restart the clock here
                    self.turn += 1
                gap = t - prev_t
                if gap > self.max_gap_s:
                    shift += gap - self.max_gap_s
                prev_t = t
                if not math.isinf(self.speed):
                    delay = t0_wall + (t - t0_rec - shift) / self.speed - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        break
                self.on_entry(e)
                self.position = i + 1
        finally:
            self.done.set()


class RecordingSource(LiveBase):
    """A recording played through the live state machine (see the module docstring).

    ``start()`` plays in a thread (``speed``, ``turn_by_turn`` as for :class:`RecordingPlayer`);
    :meth:`next_turn` releases a turn pause; ``generate``/``cancel`` are refused (None/False).
    A recorded request (``stdin``) is announced as :class:`~bmoe_top.tui.sources.events.RequestSent`
    with its JSON object, so each turn knows its prompt as in ``bmoe-top replay``. At the end the
    state is ``exited``, or ``aborted`` when the recording stops inside a turn.
    """

    kind = "recording"

    def __init__(self, recording: Recording, on_record: Callable[[Any, float], None] | None = None, *,
                 speed: float = 1.0, turn_by_turn: bool = False, name: str = "", **kw: Any) -> None:
        super().__init__(on_record, **kw)
        self.recording = recording
        self.name = name
        self.player = RecordingPlayer(recording, self._entry, speed=speed, turn_by_turn=turn_by_turn)

    def describe(self) -> str:
        return f"recording: {self.name}" if self.name else "recording"

    def send(self, obj: dict[str, Any]) -> bool:
        return False

    def _entry(self, e: Entry) -> None:
        t = e.t if e.t is not None else time.time()
        if e.src in PROTOCOL_SOURCES:
            self._protocol_line(e.line, t, e.src, record=False)
        elif e.src == "stderr":
            self._stderr_line(e.line, t)
        else:
            req = request_of(e)
            if req is not None:
                self._emit(RequestSent(req, t))

    def start(self) -> RecordingSource:
        self._set_state(LiveState.LOADING, "replaying")
        self.player.start()
        threading.Thread(target=self._finish_when_done, name="replay-finish", daemon=True).start()
        return self

    def _finish_when_done(self) -> None:
        self.player.done.wait()
        with self._lock:
            in_flight = self._in_flight_set
        if self.player.position >= len(self.recording.entries):
            if in_flight:
                self._set_state(LiveState.ABORTED, "recording ended during a turn (no BMOE_DONE)")
            else:
                self._set_state(LiveState.EXITED, "end of recording")

    def next_turn(self) -> None:
        self.player.next_turn()

    def close(self, timeout: float = 2.0) -> int | None:
        self.player.stop()
        self._stop.set()
        return None
