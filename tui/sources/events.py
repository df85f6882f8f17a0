"""What sources tell their feed: small event dataclasses, the sources' own states, and the one way a
source calls its sinks (an exception in a sink is reported, never swallowed).

Live sessions (a child process, a session socket, a recording played at its pace) move through
:class:`LiveState`; a ``/metrics`` poller through :class:`ScrapeState`; a followed file through
:class:`TailState`. The run model's status is derived from these in one place
(``bmoe_top.tui.feed.bind``). No Textual import.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bmoe_top.parsers.memory_sample import MemorySample, WatchedFiles
from bmoe_top.parsers.prom import MetricsDelta, PromSnapshot
from bmoe_top.parsers.textio import Problem
from bmoe_top.tui.sources.slots import SlotsReading

__all__ = [
    "Connected", "Disconnected", "Exited", "FINAL_STATES", "FilesWatched", "LiveEvent", "LiveState", "MemoryEvent",
    "MemoryNote", "MemorySampled", "NewSession", "PartialLost", "WatchState", "WatchStateChanged",
    "PollEvent", "Problem", "ProblemFound", "ReadyTimeout", "RecordingFailed", "Rejected", "RequestSent", "Rotated",
    "ScrapeFailed", "ScrapeState", "Scraped", "Sinks", "Stalled", "StateChanged", "TailEvent", "TailState",
    "TailStateChanged", "Truncated",
]

log = logging.getLogger("bmoe_top.sources")


class LiveState(StrEnum):
    """A live session's state: ``starting -> loading -> ready <-> generating -> exited | aborted |
    failed`` (a socket also ``connecting``, ``disconnected``; ``closing`` once bmoe-top asked it
    to end; ``closed`` once detached)."""

    STARTING = "starting"
    CONNECTING = "connecting"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    CLOSING = "closing"
    DISCONNECTED = "disconnected"
    EXITED = "exited"
    ABORTED = "aborted"
    FAILED = "failed"
    CLOSED = "closed"


#: States in which a live source is finished for good (no more lines will arrive).
FINAL_STATES = frozenset({LiveState.EXITED, LiveState.ABORTED, LiveState.FAILED, LiveState.CLOSED})


class ScrapeState(StrEnum):
    """A ``/metrics`` poller's state: nothing answered yet, the last scrape parsed, or how it failed.

    Down (decided from the connection and ``/health``): ``refused`` (nothing listens on the port),
    ``unreachable`` (connect timeout, DNS, a reset, or a ``/metrics`` timeout while ``/health`` does
    not answer either). Up but not answering ``/metrics`` as asked: ``busy`` (``/metrics`` timed out
    while ``/health`` answers: the last values are kept and aged), ``server_error`` (HTTP 5xx),
    ``disabled`` (HTTP 501: llama-server started without ``--metrics``; the server's hint is the
    reason), ``unauthorized`` (HTTP 401/403), ``http_error`` (another HTTP status: ``HTTP 404 Not
    Found``, the URL names no endpoint), ``malformed`` (a 200 whose body is not an exposition).
    ``error``: the URL itself is unusable, nothing is requested."""

    CONNECTING = "connecting"
    OK = "ok"
    BUSY = "busy"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    SERVER_ERROR = "server_error"
    DISABLED = "disabled"
    UNAUTHORIZED = "unauthorized"
    HTTP_ERROR = "http_error"
    MALFORMED = "malformed"
    ERROR = "error"


class WatchState(StrEnum):
    """A memory watcher's state (``attach --pid``/``--gguf``): nothing read yet; sampling; the
    process maps no GGUF (yet); the process exited (its files are still sampled); a file was
    replaced, truncated or damaged (the last good map is kept, the file is tried again every
    interval); the watch cannot start (no such process, nothing to watch); a recording's readings
    were all replayed."""

    STARTING = "starting"
    OK = "ok"
    NO_MODEL = "no_model"
    EXITED = "exited"
    FILE_ERROR = "file_error"
    ERROR = "error"
    REPLAYED = "replayed"


class TailState(StrEnum):
    """A followed file's state: not there yet, being read, or unreadable."""

    WAITING = "waiting"
    OK = "ok"
    ERROR = "error"


# -- live sessions --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StateChanged:
    """The source moved to ``state``; ``message`` is one human line about it."""

    state: LiveState
    message: str


@dataclass(frozen=True, slots=True)
class RequestSent:
    """A request is about to be sent to the session (or was, in a recording): its JSON object and
    when it was sent (unix s; a recording's own time for it, on the clock of its records)."""

    request: Mapping[str, Any]
    t: float


@dataclass(frozen=True, slots=True)
class ProblemFound:
    """Something the source could not use (a line cut at EOF, a sink that failed): ``where`` it was."""

    problem: Problem
    where: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """The session rejected request ``request_id`` (a non-fatal ``BMOE_ERROR``); it stays usable."""

    request_id: int | None
    message: str


@dataclass(frozen=True, slots=True)
class ReadyTimeout:
    """No ``BMOE_READY`` within ``after_s`` seconds."""

    after_s: float


@dataclass(frozen=True, slots=True)
class Stalled:
    """A generation is in flight and no line came for ``quiet_s`` seconds (or lines came again)."""

    stalled: bool
    quiet_s: float


@dataclass(frozen=True, slots=True)
class Connected:
    """A socket client connected to ``path`` (``connects`` so far)."""

    path: str
    connects: int


@dataclass(frozen=True, slots=True)
class Disconnected:
    """A socket client lost its runtime."""

    reason: str


@dataclass(frozen=True, slots=True)
class NewSession:
    """A socket client reconnected to a different session (the runtime was restarted)."""

    session: str | None
    previous: str | None


@dataclass(frozen=True, slots=True)
class RecordingFailed:
    """Writing the ``--record`` file ``path`` failed (``message``: why, and after how many lines);
    recording stopped, the source goes on."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Exited:
    """A child process ended: its ``exit_code`` (negative: killed by that signal) and final state."""

    exit_code: int
    state: LiveState
    message: str


LiveEvent = (StateChanged | RequestSent | ProblemFound | Rejected | ReadyTimeout | Stalled | Connected | Disconnected
             | NewSession | Exited | RecordingFailed)


# -- /metrics poller --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Scraped:
    """A scrape parsed: the snapshot, the previous one (None for the first), the delta between
    them (None for the first; ``reset`` on a restart: a counter went down or the process start
    time changed), the unix time it arrived; ``restarted``: this scrape is from a new process;
    ``slots`` / ``previous_slots``: the ``/slots`` readings with this and the previous scrape
    (None when not read)."""

    snapshot: PromSnapshot
    previous: PromSnapshot | None
    delta: MetricsDelta | None
    wall_t: float
    slots: SlotsReading | None = None
    previous_slots: SlotsReading | None = None
    restarted: bool = False


@dataclass(frozen=True, slots=True)
class ScrapeFailed:
    """A scrape failed: how (``state``), why (``detail``) and the HTTP status when there was one."""

    state: ScrapeState
    detail: str
    http_status: int | None


PollEvent = Scraped | ScrapeFailed | ProblemFound


# -- memory watcher ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WatchStateChanged:
    """The watcher moved to ``state``; ``detail`` is one line saying why (empty when ok)."""

    state: WatchState
    detail: str


@dataclass(frozen=True, slots=True)
class FilesWatched:
    """The model files the watcher samples from now on (a first model, or a changed one)."""

    files: WatchedFiles


@dataclass(frozen=True, slots=True)
class MemorySampled:
    """One reading (:class:`~bmoe_top.parsers.memory_sample.MemorySample`)."""

    sample: MemorySample


@dataclass(frozen=True, slots=True)
class MemoryNote:
    """A line about the watch at unix time ``t`` (a figure the kernel refuses, a file replaced,
    O_DIRECT reads): shown and kept in the log; ``key`` names what it is about, so a view can
    keep the newest note of each."""

    t: float
    key: str
    text: str


MemoryEvent = WatchStateChanged | FilesWatched | MemorySampled | MemoryNote | ProblemFound


# -- followed file ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TailStateChanged:
    state: TailState
    detail: str


@dataclass(frozen=True, slots=True)
class Rotated:
    """The path now names another file (renamed away, or deleted and re-created)."""

    generation: int


@dataclass(frozen=True, slots=True)
class Truncated:
    """The file got shorter than what was read, or its first line changed."""

    generation: int


@dataclass(frozen=True, slots=True)
class PartialLost:
    """An incomplete last line was dropped when the file was rotated or cut (``why``)."""

    lineno: int
    partial: bytes
    why: str


TailEvent = TailStateChanged | Rotated | Truncated | PartialLost | ProblemFound


class Sinks:
    """How a source calls the callables it was given: :meth:`call` runs one; if it raises, the
    exception is logged (logger ``bmoe_top.sources``), kept in :attr:`errors` and reported once to
    the event sink as a :class:`ProblemFound` (``where`` the sink), never swallowed silently."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.on_event: Callable[[Any], None] | None = None
        self.errors: deque[Problem] = deque(maxlen=100)
        self._reporting = False

    def call(self, where: str, fn: Callable[..., None] | None, *args: Any) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - reported below; the reader thread must go on
            log.exception("%s: the %s sink failed", self.name, where)
            problem = Problem(0, "", f"{where} sink failed: {type(exc).__name__}: {exc}")
            self.errors.append(problem)
            if self._reporting or self.on_event is None:
                return
            self._reporting = True
            try:
                self.on_event(ProblemFound(problem, where))
            except Exception:  # noqa: BLE001 - the event sink itself failed: logged above and here
                log.exception("%s: the event sink failed while reporting a failed %s sink", self.name, where)
            finally:
                self._reporting = False

    def event(self, ev: Any) -> None:
        """Deliver one event to the event sink."""
        self.call("event", self.on_event, ev)
