"""Driving a real terminal for the tests: one tmux server per test, on its own socket."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def run_tmux(sock: str, *args: str, check: bool = True) -> str:
    """``tmux -L sock ARGS``; its stdout. RuntimeError with tmux's message when it fails and
    ``check``. The server's panes inherit this environment: a COLUMNS/LINES left by an in-process
    Textual test would pin the app to that size whatever the pane's, so they are dropped."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    r = subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=20, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class Tmux:
    """One tmux server on its own socket (named from ``prefix``, the pid and a clock) with one
    session ``main`` whose pane runs a command; waits poll the pane, never assume a duration."""

    def __init__(self, prefix: str) -> None:
        self.sock = f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**6}"

    def __call__(self, *args: str, check: bool = True) -> str:
        return run_tmux(self.sock, *args, check=check)

    def start(self, cmd: str, size: tuple[int, int] = (160, 45), env: dict[str, str] | None = None) -> None:
        """Run ``cmd`` (a shell command line) in a ``size`` (columns, rows) pane with TERM=xterm-256color
        plus ``env``; the pane stays after the command exits so its status can be read."""
        extra = [a for k, v in {"TERM": "xterm-256color", **(env or {})}.items() for a in ("-e", f"{k}={v}")]
        self("-f", "/dev/null", "new-session", "-d", "-s", "main", "-x", str(size[0]), "-y", str(size[1]),
             *extra, cmd)
        self("set-option", "-t", "main", "remain-on-exit", "on")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "main")

    def fmt(self, f: str) -> str:
        return self("display-message", "-p", "-t", "main", f).strip()

    def wait_screen(self, needle: str, timeout: float = 60.0) -> str:
        """The pane's text once ``needle`` is on it; AssertionError with the screen after ``timeout`` s."""
        end = time.monotonic() + timeout
        s = ""
        while time.monotonic() < end:
            s = self.screen()
            if needle in s:
                return s
            time.sleep(0.2)
        size = self.fmt("#{pane_width}x#{pane_height}")
        raise AssertionError(f"{needle!r} not on screen after {timeout} s (pane {size}):\n{s}")

    def wait_dead(self, timeout: float = 40.0) -> str:
        """Wait until the pane's process has exited; returns its exit status as text.

        tmux marks the pane dead when the pty closes but may reap the process much later under
        load (the exit status stays empty meanwhile): then read the zombie's exit code from
        /proc (field 52 of /proc/PID/stat, the waitpid status)."""
        pid = self.fmt("#{pane_pid}")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.fmt("#{pane_dead}") == "1":
                status, sig = self.fmt("#{pane_dead_status}"), self.fmt("#{pane_dead_signal}")
                if status or sig:
                    return status or f"signal {sig}"
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
                except OSError:
                    fields = []
                if fields and fields[0] == "Z":
                    code = int(fields[-1])  # waitpid status of the zombie
                    return str(code >> 8) if code & 0x7F == 0 else f"signal {code & 0x7F}"
            time.sleep(0.1)
        raise AssertionError("the pane's command did not exit:\n" + self.screen())

    def close(self) -> None:
        self("kill-server", check=False)
