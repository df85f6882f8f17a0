"""A real HTTP server on loopback whose answers are scripted, for the ``/metrics`` poller tests."""

from __future__ import annotations

import http.server
import threading
import time

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


class Scripted:
    """A real HTTP server whose next answers are scripted: (status, body, delay_s)."""

    def __init__(self):
        self.answers: list[tuple[int, bytes, float]] = []
        self.default = (200, exposition(0, 0, 0).encode(), 0.0)
        self.seen: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        lock = threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
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
                try:
                    self.send_response(st)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
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
