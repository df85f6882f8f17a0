"""The memory watcher's events into a :class:`~bmoe_top.tui.model.memory.MemoryModel`
(docs/memory.md). No Textual.

:func:`bind_memory` connects a :class:`~bmoe_top.tui.sources.memory.MemoryWatcher` (or anything
that sends the same events: :func:`replay_memory` reads a recording's ``memory`` entries) to a
new model; :func:`apply_event` is the one type -> handler table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bmoe_top.parsers.memory_sample import MemorySample, SampleDecoder, WatchedFiles
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.sources.events import (
    FilesWatched,
    MemoryNote,
    MemorySampled,
    ProblemFound,
    RecordingFailed,
    WatchStateChanged,
)

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
        model.add_problem(f"{ev.where}: {ev.problem.reason}")
    elif isinstance(ev, RecordingFailed):
        model.add_note("recording", None, f"{ev.path}: {ev.message}")


def bind_memory(source: Any, model: MemoryModel | None = None) -> MemoryModel:
    """A model fed by ``source``'s events (``source.connect(on_event)``)."""
    m = model if model is not None else MemoryModel()
    source.connect(lambda ev: apply_event(m, ev))
    return m


def replay_memory(lines: Iterable[tuple[float, str]], model: MemoryModel | None = None) -> MemoryModel:
    """A recording's ``memory`` entries (``(t, line)``, in order) into a model: the residency
    history replays as it was sampled. A bad line is one problem (counted, shown), its
    neighbours still count; a map that depended on it is unknown until the next whole one."""
    m = model if model is not None else MemoryModel()
    dec = SampleDecoder()
    for i, (t, line) in enumerate(lines, 1):
        try:
            got = dec.read(line)
        except ValueError as e:
            m.add_problem(sanitize(f"memory entry {i}: {e}"))
            continue
        if isinstance(got, WatchedFiles):
            m.set_files(got)
        elif isinstance(got, MemorySample):
            m.add_sample(got)
        else:
            nt, text = got
            m.add_note(f"note:{i}", nt if nt is not None else t, sanitize(text))
    return m
