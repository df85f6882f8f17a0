"""Issue #5's "done when", in real terminals: `bmoe-run serve --moe-cache-audit a.jsonl`, then
`bmoe-top attach --metrics URL` and `bmoe-top attach --audit a.jsonl` in tmux panes, a completion
sent over HTTP: both screens show the request's tokens and cache behaviour; q restores the
terminal. Skipped when tmux is missing."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers.serve import Serve
from helpers.waits import wait_until

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
    pytest.mark.skipif(not BMOE_TOP.exists(), reason="bmoe-top not installed"),
]


class Pane:
    def __init__(self, sock: str, name: str, cmd: str):
        self.sock, self.name = sock, name
        env = "env -u COLUMNS -u LINES TERM=xterm-256color "  # a leaked COLUMNS/LINES would pin the app to 80x24
        self.tmux("new-session", "-d", "-s", name, "-x", "140", "-y", "40", env + cmd)

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=20)
        return r.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def wait(self, *needles: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        s = ""
        while time.monotonic() < end:
            s = self.screen()
            if all(n in s for n in needles):
                return s
            time.sleep(0.2)
        raise AssertionError(f"{needles!r} not all on screen after {timeout} s:\n{s}")


def test_done_when_two_terminals(tmp_path):
    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)
    audit = tmp_path / "a.jsonl"
    srv = Serve(model, "--cache-mb", "0.5", "--moe-cache-audit", str(audit))
    sock = f"bmoe-s-{os.getpid()}"
    try:
        top = shlex.quote(str(BMOE_TOP))
        m = Pane(sock, "metrics", f"{top} attach --metrics {srv.url}/metrics")
        a = Pane(sock, "audit", f"{top} attach --audit {shlex.quote(str(audit))}")
        m.wait("connected")
        a.wait("following")
        r = httpx.post(srv.url + "/completion", json={"prompt": "long request a", "n_predict": 64},
                       timeout=60, trust_env=False).json()
        n = r["tokens_predicted"]
        s = m.wait(f"{n} tok", "hits", "misses", "L0", "L1")  # tokens, cache behaviour, per-layer map
        hits_line = [ln for ln in s.splitlines() if ln.lstrip().startswith("hits ")][0]
        assert "not exported" not in hits_line
        a.wait("requests 1")  # the audit-run panel counts the request
        a.tmux("send-keys", "-t", a.name, "C-r")  # the Requests tab
        s = a.wait("Requests", f" {n} ")  # the request row with its n_gen
        assert str(srv.proc.pid) in s
        for p in (m, a):
            p.tmux("send-keys", "-t", p.name, "q")

        # the apps exited: no session left (tmux closes a session whose command ended)
        def sessions_gone() -> bool:
            left = subprocess.run(["tmux", "-L", sock, "ls"], capture_output=True, text=True).stdout
            return "metrics" not in left and "audit" not in left

        wait_until(sessions_gone, limit=30, what="both apps quit on q", every=0.1)
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        srv.stop()
