"""Child processes of the tests: stopping one the way a service manager does."""

from __future__ import annotations

import signal
import subprocess


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 30.0) -> int:
    """Send ``sig`` to ``proc`` if it still runs, wait ``grace`` s, then SIGKILL; returns its exit
    status (negative: the signal that ended it)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
