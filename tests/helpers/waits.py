"""Waiting on conditions in tests: polls with a limit that only bounds a failure, never an
expected duration (the suite must pass on a fast idle machine and a loaded one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds a wait may take before it counts as a failure: generous, since a loaded machine is slow.
LIMIT_S = 120.0


def until(cond: Callable[[], Any], limit: float = LIMIT_S, every: float = 0.01) -> bool:
    """True as soon as ``cond()`` is truthy; after ``limit`` seconds, whether it is at that moment."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(every)
    return bool(cond())


def wait_until(cond: Callable[[], T], limit: float = LIMIT_S, what: str = "condition", every: float = 0.02) -> T:
    """The first truthy value of ``cond()``; AssertionError naming ``what`` after ``limit`` seconds."""
    end = time.monotonic() + limit
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not reached within {limit:g} s")
        time.sleep(every)


async def pilot_until(pilot: Any, cond: Callable[[], T], what: str = "condition", limit: float = LIMIT_S) -> T:
    """Let a Textual app run (``pilot.pause``) until ``cond()`` is truthy; its value.
    AssertionError naming ``what`` after ``limit`` seconds."""
    end = time.monotonic() + limit
    while not (v := cond()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await pilot.pause(0.05)
    return v


async def tab_to(pilot: Any, app: Any, widget: Any, what: str) -> None:
    """Press Tab until ``widget`` has the focus, at most once round the screen's focus chain;
    AssertionError naming ``what`` when Tab never reaches it."""
    for _ in range(len(app.screen.focus_chain) + 1):
        await pilot.press("tab")
        await pilot.pause()
        if app.focused is widget:
            return
    raise AssertionError(f"Tab never reached {what}: {app.screen.focus_chain}")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
