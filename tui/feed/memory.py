"""The memory watcher's events into a :class:`~bmoe_top.tui.model.memory.MemoryModel`
(docs/memory.md). No Textual.

:func:`bind_memory` connects a :class:`~bmoe_top.tui.sources.memory.MemoryWatcher` (or
:class:`~bmoe_top.tui.sources.memory.MemoryPlayer`, which sends a recording's ``memory`` entries
as the same events) to a new model; :func:`apply_event` is the one type -> handler table.
"""

from __future__ import annotations

from typing import Any

from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.sources.events import (
    FilesWatched,
    MemoryNote,
    MemorySampled,
    ProblemFound,
    RecordingFailed,
    WatchStateChanged,
)
from bmoe_top.tui.sources.memory import MemoryPlayer

__all__ = ["apply_event", "bind_memory", "replay_memory"]


def apply_event(model: MemoryModel, ev: Any) -> None:
    """One watcher event into ``model`` (an event of another type is ignored)."""
    if isinstance(ev, MemorySampled):
        model.add_sample(ev.sample)
    elif isinstance(ev, FilesWatched):
        model.set_files(ev.files)
    elif isinstance(ev, WatchStateChanged):
        model.set_state(str(ev.state), ev.detail)
    elif isinstance(ev, MemoryNote):
        model.add_note(ev.key, ev.t, ev.text)
    elif isinstance(ev, ProblemFound):
        at = f"entry {ev.problem.lineno}: " if ev.problem.lineno else ""
        model.add_problem(f"{ev.where}: {at}{ev.problem.reason}")
    elif isinstance(ev, RecordingFailed):
        model.add_note("recording", None, f"{ev.path}: {ev.message}")


def bind_memory(source: Any, model: MemoryModel | None = None) -> MemoryModel:
    """A model fed by ``source``'s events (``source.connect(on_event)``)."""
    m = model if model is not None else MemoryModel()
    source.connect(lambda ev: apply_event(m, ev))
    return m


def replay_memory(entries: list[tuple[float | None, str]], model: MemoryModel | None = None) -> MemoryModel:
    """A recording's ``memory`` entries (``(t, line)``, in order) into a model at once, through
    :class:`~bmoe_top.tui.sources.memory.MemoryPlayer` (the screen's replay path): the residency
    history replays as it was sampled; a bad line is one problem, its neighbours still count."""
    player = MemoryPlayer(entries)
    m = bind_memory(player, model)
    player.play_all()
    return m
