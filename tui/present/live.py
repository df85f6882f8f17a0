"""The headless documents of a live session (``launch --once --json``, ``attach --session --once
--json``): the run summary plus a ``live`` block with the source's state, its turns and text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from bmoe_top.parsers.bmoe_lines import Ready
from bmoe_top.parsers.textio import Problem
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.summary import run_summary

__all__ = ["LiveSourceStatus", "failure_document", "live_block", "live_document"]


class LiveSourceStatus(Protocol):
    """What these documents read of a live source's status
    (:class:`bmoe_top.tui.sources.live.LiveStatus`, its snapshot)."""

    @property
    def state(self) -> str: ...

    @property
    def message(self) -> str: ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def ready(self) -> Ready | None: ...

    @property
    def last_error(self) -> str | None: ...

    @property
    def problems(self) -> Sequence[Problem]: ...


def live_block(st: LiveSourceStatus, run: RunModel, request_id: int | None) -> dict[str, Any]:
    """``state``, ``message``, ``exit_code``, ``request_id`` (the prompt sent, if any), ``ready``
    (load_s, arch, n_ctx or None), ``turns`` (each finished turn's end record), ``error`` (the
    last error message), ``text`` (the newest turn's answer), ``problems`` (``line N: reason``)."""
    with run.lock:
        turns = [dict(t.done) for t in run.turns if t.done is not None]
        text = run.turns[-1].text if run.turns else ""
    ready = st.ready
    return {
        "state": st.state, "message": st.message, "exit_code": st.exit_code, "request_id": request_id,
        "ready": None if ready is None else {"load_s": ready.load_s, "arch": ready.arch, "n_ctx": ready.n_ctx},
        "turns": turns, "error": st.last_error, "text": text,
        "problems": [f"line {p.lineno}: {p.reason}" for p in st.problems],
    }


def live_document(st: LiveSourceStatus, run: RunModel, request_id: int | None, **extra: Any) -> dict[str, Any]:
    """:func:`~bmoe_top.tui.present.summary.run_summary` of the run with the ``live`` block
    (``extra`` keys added to it, e.g. ``wall_s``)."""
    return {**run_summary(run), "live": {**live_block(st, run, request_id), **extra}}


def failure_document(message: str, run: RunModel, st: LiveSourceStatus) -> dict[str, Any]:
    """What ``launch --once --json`` prints when the child fails before a turn could run."""
    return {"status": "failed", "error": message, "sources": list(run.sources),
            "live": {"state": st.state, "exit_code": st.exit_code}}
