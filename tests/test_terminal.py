"""The terminal driver (tui/terminal.py): chosen for every app, and what its output does once the
terminal has gone away. The end-to-end cases (a real pane killed, idle and under a streaming run)
are in tests/screens/test_tmux_smoke.py."""

from __future__ import annotations

import os
import signal

import pytest
from textual.screen import Screen

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.terminal import HangupDriver, _Hangup, _TerminalOutput


def test_the_app_runs_on_the_hangup_driver(monkeypatch):
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert BmoeTopApp(Screen()).driver_class is HangupDriver


# "after\n" reaches the terminal in write (line buffered), "after" only in the flush
@pytest.mark.parametrize("text", ["after\n", "after"], ids=["in-write", "in-flush"])
def test_output_to_a_hung_up_terminal_raises_sighup_once_and_drops_what_follows(text):
    got: list[int] = []
    old = signal.signal(signal.SIGHUP, lambda sig, frame: got.append(sig))
    master, slave = os.openpty()
    try:
        out = _TerminalOutput(os.fdopen(slave, "w", buffering=1), _Hangup())
        assert out.write("before\n") == len("before\n")
        assert os.read(master, 100) == b"before\r\n"
        os.close(master)  # the terminal goes away: what reaches it next fails with EIO
        master = -1
        assert out.write(text) == len(text)
        out.flush()
        assert out.lost
        assert out.write("and more\n") == len("and more\n")
        out.flush()
        assert got == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, old)
        if master >= 0:
            os.close(master)
