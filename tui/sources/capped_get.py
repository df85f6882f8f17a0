"""One HTTP GET read whole under two limits (docs/metrics.md "Limits of a scrape"): a deadline for
the whole request (connect, headers and every byte of the body together, however slowly they
trickle in) and a cap on the body's size (declared by ``Content-Length`` or counted as it arrives,
after ``Content-Encoding`` is undone: a chunked body that never ends stops at the cap).

httpx's timeouts bound each read; a server that sends a byte every second never trips them. Here
a timer shuts the connection's socket down at the deadline (the socket is learned from httpx's
``trace`` extension when the connection is made), which wakes the blocked read at once. Each
request asks for ``Connection: close``, so every request makes its own connection and the socket
the timer holds is always the one in use. No Textual.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["BODY_SIZE", "DEADLINE", "Answer", "LimitHit", "get_capped"]

#: Names of the limits, as :attr:`LimitHit.limit` and the documents' ``limit`` field give them.
DEADLINE = "deadline"
BODY_SIZE = "body_size"


class LimitHit(Exception):
    """The request ended at a limit: ``limit`` (:data:`DEADLINE` or :data:`BODY_SIZE`),
    ``n_bytes`` (body bytes read by then), ``declared`` (the ``Content-Length`` when it alone
    was over the cap, else None); ``str()`` says which in one line."""

    def __init__(self, limit: str, message: str, n_bytes: int = 0, declared: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.n_bytes = n_bytes
        self.declared = declared


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: status, headers and the body (decoded, at most the cap)."""

    status_code: int
    headers: httpx.Headers
    content: bytes


class _Watch:
    """Shuts the request's socket down when the deadline passes (a ``threading.Timer``)."""

    def __init__(self, timeout: float) -> None:
        self.end = time.monotonic() + timeout
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, timeout), self.fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with self._lock:
                    self._sock = sock
                    if self.fired:
                        _shut(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                _shut(self._sock)

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.end

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        # the plain socket's shutdown (an SSL socket's own would also unwrap it under the reader)
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def get_capped(client: httpx.Client, url: str, timeout: float, max_bytes: int) -> Answer:
    """GET ``url`` with ``client`` and read the whole answer within ``timeout`` seconds in all,
    keeping at most ``max_bytes`` of body. Raises :class:`LimitHit` at either limit, else what
    ``client`` raises (``httpx.HTTPError``, ``OSError``)."""
    watch = _Watch(timeout)
    n = 0
    try:
        with client.stream("GET", url, headers={"Connection": "close"}, extensions={"trace": watch.trace}) as r:
            declared = _content_length(r.headers)
            if declared is not None and declared > max_bytes:
                raise LimitHit(BODY_SIZE, f"answer of {declared:,} bytes (Content-Length) is over the "
                                          f"{_size(max_bytes)} body cap", 0, declared)
            parts: list[bytes] = []
            for chunk in r.iter_bytes():
                n += len(chunk)
                if n > max_bytes:
                    raise LimitHit(BODY_SIZE, f"answer over the {_size(max_bytes)} body cap (read stopped there)", n)
                parts.append(chunk)
                if watch.expired():
                    raise _late(timeout, n)
            if watch.expired():
                raise _late(timeout, n)
            return Answer(r.status_code, r.headers, b"".join(parts))
    except (httpx.HTTPError, OSError) as exc:
        if watch.fired:
            raise _late(timeout, n) from exc
        raise
    finally:
        watch.cancel()


def _late(timeout: float, n: int) -> LimitHit:
    got = f"{n:,} body bytes by then" if n else "no body by then"
    return LimitHit(DEADLINE, f"answer not complete within {timeout:g} s ({got})", n)


def _content_length(headers: httpx.Headers) -> int | None:
    v = headers.get("content-length")
    return int(v) if v is not None and v.strip().isdigit() else None


def _size(n: int) -> str:
    return f"{n / 1048576:g} MiB" if n >= 1048576 else f"{n:,} bytes"
