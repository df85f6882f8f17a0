"""``bmoe-run serve`` as a real child process on loopback, and the HTTP calls tests make to it.

Tests never assume how fast the machine is: :func:`helpers.waits.wait_until` polls a condition (a count from
``/metrics``, a state) up to a generous deadline that only bounds a failure, and ``env=
{"BMOE_TOKEN_DELAY_MS": "N"}`` slows the child's decode so a test can act mid-generation."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bmoe_top.parsers.prom import parse_exposition

from .procs import stop_process

PY = sys.executable


class Serve:
    """A `bmoe-run serve` child process; ``url`` once it listens."""

    def __init__(self, model: Path, *args: str, port: int = 0, wait: bool = True, env: dict[str, str] | None = None,
                 preexec_fn=None):
        self.cmd = [PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(model), "--port", str(port),
                    "-t", "1", "-c", "512", *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        self.err_lines: list[str] = []
        self.url = None
        self._listening = threading.Event()
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()
        if wait:
            t0 = time.monotonic()
            while not self._listening.wait(0.05):
                if self.proc.poll() is not None or time.monotonic() - t0 > 60:
                    self.stop()
                    raise AssertionError("server did not start: " + "".join(self.err_lines))

    def _drain(self):
        for line in self.proc.stderr:
            self.err_lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                self._listening.set()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, sig=signal.SIGTERM) -> int:
        code = stop_process(self.proc, sig)
        self._t.join(5)
        return code



def scrape(url, **kw):
    r = httpx.get(url + "/metrics", trust_env=False, **kw)
    r.raise_for_status()
    return parse_exposition(r.content, time.monotonic())


def scrape_value(url, name: str, labels: dict[str, str] | None = None, **kw) -> float | None:
    """One sample of ``/metrics`` by its exposed name and labels (None when absent), read with
    prometheus-client's parser (for series outside the shared catalogue, e.g. ``bmoe:http_*``)."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(url + "/metrics", trust_env=False, timeout=kw.pop("timeout", 30), **kw)
    r.raise_for_status()
    for fam in text_string_to_metric_families(r.text):
        for smp in fam.samples:
            if smp.name == name and (labels is None or all(smp.labels.get(k) == v for k, v in labels.items())):
                return smp.value
    return None


def complete(url, prompt, n, stream=False, **kw):
    return httpx.post(url + "/completion", json={"prompt": prompt, "n_predict": n, "stream": stream},
                      timeout=60, trust_env=False, **kw)


class Raw:
    """One HTTP/1.1 request on a plain socket, for what httpx will not do: send a head and hold
    the body back, hang up mid-request, keep a connection idle. ``send_head`` / ``send`` /
    ``response()`` (status, headers, body: read to Content-Length or to the close) / ``close()``."""

    def __init__(self, url: str, timeout: float = 60.0):
        import socket

        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.host = host
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buf = b""

    def send_head(self, method: str, path: str, headers: dict[str, str] | None = None) -> Raw:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return self

    def send(self, data: bytes) -> Raw:
        self.sock.sendall(data)
        return self

    def post_json(self, path: str, body: dict, headers: dict[str, str] | None = None) -> Raw:
        import orjson

        data = orjson.dumps(body)
        self.send_head("POST", path, {"Content-Type": "application/json", "Content-Length": str(len(data)),
                                      **(headers or {})})
        return self.send(data)

    def _fill(self) -> bool:
        b = self.sock.recv(65536)
        self.buf += b
        return bool(b)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"closed before a response head ({self.buf[:80]!r})")
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        if "content-length" in headers:
            n = int(headers["content-length"])
            self.buf = rest
            while len(self.buf) < n and self._fill():
                pass
            body, self.buf = self.buf[:n], self.buf[n:]
        else:
            self.buf = rest
            while self._fill():
                pass
            body, self.buf = self.buf, b""
        return status, headers, body

    def closed_by_server(self) -> bool:
        """Wait (up to the socket timeout) for the server to close; True when it did."""
        try:
            while self._fill():
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        return True

    def close(self) -> None:
        self.sock.close()
