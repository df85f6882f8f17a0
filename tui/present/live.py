"""The headless documents of a live session (``launch --once --json``, ``attach --session --once
--json``): the run summary plus a ``live`` block with the source's state, its turns and text."""

from __future__ import annotations

from typing import Any

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources.live import LiveStatus

__all__ = ["failure_document", "live_block", "live_document"]


def live_block(st: LiveStatus, run: RunModel, request_id: int | None) -> dict[str, Any]:
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


def live_document(st: LiveStatus, run: RunModel, request_id: int | None, **extra: Any) -> dict[str, Any]:
    """:func:`~bmoe_top.tui.present.summary.run_summary` of the run with the ``live`` block
    (``extra`` keys added to it, e.g. ``wall_s``)."""
    return {**run_summary(run), "live": {**live_block(st, run, request_id), **extra}}


def failure_document(message: str, run: RunModel, st: LiveStatus) -> dict[str, Any]:
    """What ``launch --once --json`` prints when the child fails before a turn could run."""
    return {"status": "failed", "error": message, "sources": list(run.sources),
            "live": {"state": st.state, "exit_code": st.exit_code}}
