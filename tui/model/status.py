"""What a run model's status and rows mean: :class:`Status` and :class:`RowUnit`.

Both are ``StrEnum``: a status compares equal to its word (``run.status == "ok"``) and prints as
it, so JSON documents and the screen show the same word.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """The state of the source that feeds a run model, in words the screen shows.

    Files: ``EMPTY`` (nothing loaded yet), ``REPLAY`` (a recorded run). Live sessions (a child
    process, a session socket, a recording played on the live screen): ``LOADING`` (waiting for
    ``BMOE_READY``), ``READY``, ``GENERATING``, ``DISCONNECTED`` (the runtime went away; it may come
    back), ``DONE`` (the source ended normally), ``ABORTED`` (it ended in the middle of something,
    or never started). Network attach sources: ``CONNECTING``, ``OK``, ``BUSY`` (the server is up
    but did not answer in time: the last values are kept and aged), ``REFUSED`` (nothing listens),
    ``UNREACHABLE``, ``SERVER_ERROR`` (HTTP 5xx), ``DISABLED`` (the server does not offer the
    endpoint: llama-server without ``--metrics``), ``UNAUTHORIZED``, ``HTTP_ERROR`` (another HTTP
    status: 404, 400, ...), ``MALFORMED`` (an answer that is not what was asked for), ``WAITING``
    (a file to follow does not exist yet), ``ERROR`` (the source cannot be used as given).
    """

    EMPTY = "empty"
    REPLAY = "replay"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    DISCONNECTED = "disconnected"
    DONE = "done"
    ABORTED = "aborted"
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
    WAITING = "waiting"
    ERROR = "error"

    @property
    def live(self) -> bool:
        """True while the source may still send rows (the views follow the newest row)."""
        return self in _LIVE


_LIVE = frozenset({Status.LOADING, Status.READY, Status.GENERATING, Status.CONNECTING, Status.OK,
                   Status.BUSY, Status.WAITING, Status.DISCONNECTED})


class RowUnit(StrEnum):
    """What one row of the token columns is; the views name their axis after it."""

    TOKEN = "token"  # a generated (decode) token
    INTERVAL = "interval"  # a /metrics scrape interval (per-token means over it)
    REQUEST = "request"  # an audit-log request record (per-token means over it)
