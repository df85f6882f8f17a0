"""A real HTTP server on loopback whose answers are scripted, for the ``/metrics`` poller tests."""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import dataclass, field

import pytest


def exposition(hits, misses, tokens):
    return (
        "# TYPE llamacpp:moe_cache_hits_total counter\n"
        f"llamacpp:moe_cache_hits_total {hits}\n"
        "# TYPE llamacpp:moe_cache_misses_total counter\n"
        f"llamacpp:moe_cache_misses_total {misses}\n"
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {tokens}\n"
    )


@dataclass
class Stream:
    """A hostile body, written as it goes: ``piece`` every ``every_s`` seconds, ``count`` times
    (None: until the client goes away). ``length``: the ``Content-Length`` declared (None: chunked
    transfer encoding). ``slow_head``: the status line and headers too go out a byte every
    ``every_s``. The server sets ``sent`` (body bytes written) and ``ended`` (all written, or the
    client went away: ``broken``)."""

    piece: bytes
    count: int | None = None
    every_s: float = 0.0
    length: int | None = None
    slow_head: bool = False
    sent: int = 0
    broken: bool = False
    ended: threading.Event = field(default_factory=threading.Event)

    def write(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        head = [b"HTTP/1.1 200 OK", b"Content-Type: text/plain; version=0.0.4", b"Connection: close"]
        head.append(b"Transfer-Encoding: chunked" if self.length is None else b"Content-Length: %d" % self.length)
        raw = b"\r\n".join(head) + b"\r\n\r\n"
        out = handler.wfile
        handler.close_connection = True
        try:
            if self.slow_head:
                for i in range(len(raw)):
                    out.write(raw[i:i + 1])
                    out.flush()
                    time.sleep(self.every_s)
            else:
                out.write(raw)
            n = 0
            while self.count is None or n < self.count:
                out.write(self.piece if self.length is not None else b"%x\r\n%s\r\n" % (len(self.piece), self.piece))
                out.flush()
                self.sent += len(self.piece)
                n += 1
                if self.every_s:
                    time.sleep(self.every_s)
            if self.length is None:
                out.write(b"0\r\n\r\n")
        except OSError:
            self.broken = True
        finally:
            self.ended.set()


class Scripted:
    """A real HTTP server whose next answers are scripted: (status, body, delay_s), the body bytes
    or a :class:`Stream`. ``/health``
    answers ``health`` (status, body; None: scripted like any path) without taking an answer;
    ``/slots`` answers ``slots`` the same way when set; ``headers`` are added to every other
    answer (e.g. llama-server's ``Process-Start-Time-Unix``)."""

    def __init__(self):
        self.answers: list[tuple[int, bytes | Stream, float]] = []
        self.default = (200, exposition(0, 0, 0).encode(), 0.0)
        self.health: tuple[int, bytes] | None = (200, b'{"status":"ok"}')
        self.slots: tuple[int, bytes] | None = None
        self.headers: dict[str, str] = {}
        self.seen: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        lock = threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                fixed = {"/health": outer.health, "/slots": outer.slots}.get(self.path.split("?")[0])
                if fixed is not None:
                    with lock:
                        outer.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
                    self._answer(fixed[0], fixed[1], {})
                    return
                with lock:
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                    outer.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
                    st, body, delay = outer.answers.pop(0) if outer.answers else outer.default
                time.sleep(delay)
                # out of flight before the client can have the whole answer: a next request sent
                # on receipt must not look like an overlap because this thread had not run yet
                with lock:
                    outer.inflight -= 1
                    headers = dict(outer.headers)
                if isinstance(body, Stream):
                    body.write(self)
                    return
                self._answer(st, body, headers)

            def _answer(self, st, body, headers):
                try:
                    self.send_response(st)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def srv():
    s = Scripted()
    yield s
    s.close()
