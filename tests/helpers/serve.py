"""``bmoe-run serve`` as a real child process on loopback, and the HTTP calls tests make to it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bmoe_top.parsers.prom import parse_exposition

PY = sys.executable


class Serve:
    """A `bmoe-run serve` child process; ``url`` once it listens."""

    def __init__(self, model: Path, *args: str, port: int = 0, wait: bool = True):
        self.cmd = [PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(model), "--port", str(port),
                    "-t", "1", "-c", "512", *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._t.join(5)
        return self.proc.returncode


def scrape(url, **kw):
    r = httpx.get(url + "/metrics", trust_env=False, **kw)
    r.raise_for_status()
    return parse_exposition(r.content, time.monotonic())


def complete(url, prompt, n, stream=False, **kw):
    return httpx.post(url + "/completion", json={"prompt": prompt, "n_predict": n, "stream": stream},
                      timeout=60, trust_env=False, **kw)
