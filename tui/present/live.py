"""The headless documents of a live session (``launch --once --json``, ``attach --session --once
--json``): the ``run`` block every ``--once --json`` document carries (the run summary,
:func:`~bmoe_top.tui.present.summary.run_summary`, as ``replay --summary --json`` prints it) and a
``live`` block with the source's state (the run model's ``session_health``, published by the
feed), its turns and text."""

from __future__ import annotations

from typing import Any

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.health import SessionHealth
from bmoe_top.tui.present.summary import run_summary

__all__ = ["failure_document", "live_block", "live_document"]


def live_block(run: RunModel, request_id: int | None) -> dict[str, Any]:
    """``state``, ``message``, ``exit_code``, ``request_id`` (the prompt sent, if any), ``ready``
    (load_s, arch, n_ctx or None), ``turns`` (each finished turn's end record), ``error`` (the
    last error message), ``text`` (the newest turn's answer), ``problems`` (``line N: reason``)."""
    with run.lock:
        st = run.session_health or SessionHealth()
        turns = [dict(t.done) for t in run.turns if t.done is not None]
        text = run.turns[-1].text if run.turns else ""
    return {
        "state": st.state, "message": st.message, "exit_code": st.exit_code, "request_id": request_id,
        "ready": None if st.ready is None else dict(st.ready),
        "turns": turns, "error": st.last_error, "text": text, "problems": list(st.problems),
    }


def live_document(run: RunModel, request_id: int | None, **extra: Any) -> dict[str, Any]:
    """``run`` (:func:`~bmoe_top.tui.present.summary.run_summary`: the block ``attach --metrics``,
    ``attach --audit`` and ``replay --summary --json`` give) and ``live`` (:func:`live_block`, with
    the ``extra`` keys, e.g. ``wall_s``)."""
    return {"run": run_summary(run), "live": {**live_block(run, request_id), **extra}}


def failure_document(message: str, run: RunModel) -> dict[str, Any]:
    """What ``launch --once --json`` prints when the child fails before a turn could run: ``status``
    ``failed``, ``error``, ``sources``, the ``run`` block (what the child sent before it failed)
    and ``live`` (its state and exit code)."""
    with run.lock:
        st = run.session_health or SessionHealth()
        return {"status": "failed", "error": message, "sources": list(run.sources), "run": run_summary(run),
                "live": {"state": st.state, "exit_code": st.exit_code}}
