"""Driving a real terminal for the tests: one tmux server per test, on its own socket."""

from __future__ import annotations

import os
import subprocess


def run_tmux(sock: str, *args: str, check: bool = True) -> str:
    """``tmux -L sock ARGS``; its stdout. RuntimeError with tmux's message when it fails and
    ``check``. The server's panes inherit this environment: a COLUMNS/LINES left by an in-process
    Textual test would pin the app to that size whatever the pane's, so they are dropped."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    r = subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=20, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout
