"""Record a live source to JSONL, and play a recording back.

Recording format (one JSON object per line, written as each line arrives, flushed so a
crash loses at most the line being written)::

    {"t": 1764412345.123456, "src": "stdout", "line": "BMOE_READY {...}"}

``t`` is unix seconds (float) of arrival, ``src`` is where the line came from: "stdout",
"stderr" (a child's pipes), "socket" (a session socket), or "stdin" (a request bmoe-top sent;
kept so a replay shows what was asked). ``line`` is the text without its terminator.
``bmoe_top.parsers.sniff`` recognises the format as "recording".

Playback: ``load_recording(path)`` reads the whole file (bad lines are counted as problems
with their line number, the others still count); ``RecordingPlayer`` feeds the entries to
the same sinks a live source uses, at the original pace, ``speed`` times faster, or as fast
as possible, and can stop at each turn boundary (``BMOE_BEGIN``) so a multi-turn session
replays turn by turn. No Textual import.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bmoe_top.tui.sources.live_base import LiveBase

#: sources whose lines carry the protocol (parsed into records on playback)
PROTOCOL_SOURCES = frozenset({"stdout", "socket"})


class Recorder:
    """Append received lines to ``path`` as JSONL, one ``os.write`` per line (thread-safe).

    The file is opened with O_APPEND and each entry is written with a single ``os.write``
    call, so the kernel has it even if bmoe-top is killed right after; a crash loses at
    most the entry being written. ``OSError`` from open is raised to the caller (bad path);
    a write error later (disk full) stops recording, sets ``error`` and never raises into a
    reader thread.
    """

    def __init__(self, path: str | os.PathLike) -> None:
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
                    n = os.write(self._fd, view)
                    view = view[n:]
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

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(slots=True)
class Entry:
    """One recorded line: ``t`` unix seconds, ``src`` (stdout|stderr|socket|stdin), ``line``."""

    t: float
    src: str
    line: str


@dataclass(slots=True)
class Recording:
    """A loaded recording: entries in file order, ``turn_starts`` = indexes of the entries
    that open a turn (a protocol ``BMOE_BEGIN`` line), and problems (lineno, text, reason)."""

    entries: list[Entry]
    turn_starts: list[int]
    problems: list = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.entries[-1].t - self.entries[0].t if self.entries else 0.0

    @property
    def n_turns(self) -> int:
        return len(self.turn_starts)

    def turn_slices(self) -> list[tuple[int, int]]:
        """Entry index ranges ``[start, end)``: the preamble (up to the first turn, usually
        ending with ``BMOE_READY``) first, then one range per turn."""
        bounds = [0] + [i for i in self.turn_starts if i > 0] + [len(self.entries)]
        out = []
        for a, b in zip(bounds, bounds[1:]):
            if b > a:
                out.append((a, b))
        return out


def _problem(lineno: int, text: str, reason: str):
    from bmoe_top.tui.sources.live_base import Problem

    return Problem(lineno, text[:200], reason)


def parse_recording(data: bytes) -> Recording:
    """Parse recording bytes (the format in this module's docstring). Never raises on bad
    content: a line that is not a JSON object with numeric ``t``, string ``src`` and string
    ``line`` is reported as a problem with its 1-based line number."""
    entries: list[Entry] = []
    turns: list[int] = []
    problems = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            problems.append(_problem(lineno, raw.decode("utf-8", "replace"), f"not JSON: {e}"))
            continue
        if not isinstance(obj, dict):
            problems.append(_problem(lineno, raw.decode("utf-8", "replace"), "not a JSON object"))
            continue
        t, src, line = obj.get("t"), obj.get("src"), obj.get("line")
        t_ok = isinstance(t, (int, float)) and not isinstance(t, bool)
        if not (t_ok and isinstance(src, str) and isinstance(line, str)):
            why = 'needs "t" (number), "src" and "line" (strings)'
            problems.append(_problem(lineno, raw.decode("utf-8", "replace"), why))
            continue
        if src in PROTOCOL_SOURCES and "BMOE_BEGIN" in line:
            turns.append(len(entries))
        entries.append(Entry(float(t), src, line))
    return Recording(entries, turns, problems)


def load_recording(path: str | os.PathLike) -> Recording:
    """Read and parse a recording file (``OSError`` for a missing/unreadable file)."""
    return parse_recording(Path(path).read_bytes())


class RecordingPlayer:
    """Feed a recording to live-source sinks at its original pace (or faster).

    Args:
        recording: a ``Recording``.
        on_line: ``(src, line, t)`` for each entry, in order; ``t`` is the recorded unix time.
            Use ``LiveReplaySource`` below to get parsed records and the live status machine.
        speed: 1.0 = original pace, 10.0 = ten times faster, ``float("inf")`` = no waiting.
        turn_by_turn: pause after each turn (before the next ``BMOE_BEGIN``) until
            ``next_turn()`` is called.
        max_gap_s: a pause longer than this (in recorded time, e.g. a user thinking between
            prompts) is shortened to it.

    ``start()`` plays in a daemon thread; ``play()`` plays in the caller's thread.
    ``position`` is the index of the next entry; ``done`` is set at the end.
    """

    def __init__(
        self,
        recording: Recording,
        on_line: Callable[[str, str, float], None],
        *,
        speed: float = 1.0,
        turn_by_turn: bool = False,
        max_gap_s: float = 5.0,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed!r}")
        self.recording = recording
        self.on_line = on_line
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
        t0_rec = entries[0].t if entries else 0.0
        prev_t = t0_rec
        shift = 0.0  # recorded seconds skipped (long gaps, turn pauses)
        try:
            while self.position < len(entries) and not self._stop.is_set():
                i = self.position
                e = entries[i]
                if i in starts:
                    if self.turn_by_turn and self.turn > 0:
                        self.paused_at_turn.set()
                        self._go.wait()
                        self._go.clear()
                        self.paused_at_turn.clear()
                        if self._stop.is_set():
                            break
                        # restart the clock at this entry
                        t0_wall, t0_rec, shift, prev_t = time.monotonic(), e.t, 0.0, e.t
                    self.turn += 1
                gap = e.t - prev_t
                if gap > self.max_gap_s:
                    shift += gap - self.max_gap_s
                prev_t = e.t
                if self.speed != float("inf"):
                    due = t0_wall + (e.t - t0_rec - shift) / self.speed
                    delay = due - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        break
                self.on_line(e.src, e.line, e.t)
                self.position = i + 1
        finally:
            self.done.set()


class LiveReplaySource(LiveBase):
    """A recording played back through the live state machine (``LiveBase``): the same
    sinks and ``status()`` as a live source, so the live screen can show a replay.

    ``start()`` plays in a thread (``speed``, ``turn_by_turn`` as for ``RecordingPlayer``);
    ``next_turn()`` releases a turn pause; ``generate``/``cancel`` are refused (None/False).
    Recorded "stdin" lines (requests bmoe-top sent) go to ``on_event("request", ...)``.
    At the end the state is "exited", or "aborted" when the recording stops inside a turn.
    """

    kind = "recording"

    def __init__(self, recording: Recording, on_record=None, *, speed: float = 1.0,
                 turn_by_turn: bool = False, **kw) -> None:
        kw.pop("recorder", None)
        super().__init__(on_record, **kw)
        self.recording = recording
        self.player = RecordingPlayer(recording, self._feed, speed=speed, turn_by_turn=turn_by_turn)

    def send(self, obj: dict) -> bool:
        return False

    def _feed(self, src: str, line: str, t: float) -> None:
        if src in PROTOCOL_SOURCES:
            self._protocol_line(line, t, src, record=False)
        elif src == "stderr":
            self._stderr_line(line, t)
        else:
            self._emit("request", {"line": line, "t": t})

    def start(self) -> LiveReplaySource:
        self._set_state("loading", "replaying")
        self.player.start()
        threading.Thread(target=self._finish_when_done, name="replay-finish", daemon=True).start()
        return self

    def _finish_when_done(self) -> None:
        self.player.done.wait()
        with self._lock:
            in_flight = self._in_flight_set
        if self.player.position >= len(self.recording.entries):
            if in_flight:
                self._set_state("aborted", "recording ended during a turn (no BMOE_DONE)")
            else:
                self._set_state("exited", "end of recording")

    def next_turn(self) -> None:
        self.player.next_turn()

    def close(self, timeout: float = 2.0) -> None:
        self.player.stop()
        self._stop.set()
