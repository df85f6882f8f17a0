"""Recordings: every line a live source received, as JSONL (``bmoe-top --record FILE``).

Format (docs/telemetry.md "Recordings"): one JSON object per line, written as each line arrives::

    {"t": 1764412345.123456, "src": "stdout", "line": "BMOE_READY {...}"}

``t`` is unix seconds (float) of arrival, ``src`` where the line came from: ``stdout``/``stderr``
(a child's pipes), ``socket`` (a session socket), ``stdin`` (a request bmoe-top sent, kept so
a replay knows each turn's prompt), or ``memory`` (a reading of ``attach --pid``/``--gguf``:
:mod:`bmoe_top.parsers.memory_sample`); ``line`` is the text without its terminator. An object with
a ``recording`` key and no ``line`` is a header (``source``, ``command``: kept in ``meta``).

This is the one reader of the format: ``bmoe-top replay`` (every line at once) and
``bmoe-top play`` (at the recorded pace) both read recordings through :func:`parse_recording`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .textio import Problem, iter_lines

__all__ = ["Entry", "Recording", "PROTOCOL_SOURCES", "SOURCES", "load_recording", "memory_entries", "parse_recording",
           "request_of"]

#: Sources whose lines carry the BMOE protocol.
PROTOCOL_SOURCES = frozenset({"stdout", "socket"})
#: Every source a recording line may name.
SOURCES = PROTOCOL_SOURCES | {"stderr", "stdin", "memory"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One recorded line: ``t`` unix seconds (None when the recording has no time for it),
    ``src`` (one of :data:`SOURCES`), ``line``, and ``lineno`` its line in the file (1-based)."""

    t: float | None
    src: str
    line: str
    lineno: int


@dataclass(slots=True)
class Recording:
    """A parsed recording: entries in file order, ``turn_starts`` (indexes of the entries that
    open a turn: a protocol ``BMOE_BEGIN`` line), header ``meta``, and ``problems`` (lines that are
    not recording entries, with their line numbers; the others still count)."""

    entries: list[Entry]
    turn_starts: list[int]
    meta: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        ts = [e.t for e in self.entries if e.t is not None]
        return ts[-1] - ts[0] if ts else 0.0

    @property
    def n_turns(self) -> int:
        return len(self.turn_starts)

    def turn_slices(self) -> list[tuple[int, int]]:
        """Entry index ranges ``[start, end)``: the preamble (up to the first turn, usually
        ending with ``BMOE_READY``) first, then one range per turn."""
        bounds = [0] + [i for i in self.turn_starts if i > 0] + [len(self.entries)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def parse_recording(data: bytes | str) -> Recording:
    """Parse a recording (the format in the module docstring). Never raises on bad content: a line
    that is not a JSON object, or whose ``t`` is not a number, ``src`` not one of :data:`SOURCES`
    or ``line`` not a string, is a problem with its line number."""
    rec = Recording([], [])
    for lineno, text in iter_lines(data):
        raw = text.strip()
        if not raw:
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            rec.problems.append(Problem(lineno, raw, f"not JSON: {exc}"))
            continue
        if not isinstance(obj, dict):
            rec.problems.append(Problem(lineno, raw, "not a JSON object"))
            continue
        if "recording" in obj and "line" not in obj:
            for k in ("recording", "source", "command"):
                if k in obj:
                    rec.meta[k] = str(obj[k])
            continue
        entry = _entry(obj, lineno)
        if isinstance(entry, str):
            rec.problems.append(Problem(lineno, raw, entry))
            continue
        if entry.src in PROTOCOL_SOURCES and "BMOE_BEGIN" in entry.line:
            rec.turn_starts.append(len(rec.entries))
        rec.entries.append(entry)
    return rec


def _entry(obj: dict[str, Any], lineno: int) -> Entry | str:
    """The entry of one object, or why it is not one."""
    t, src, line = obj.get("t"), obj.get("src", "stdout"), obj.get("line")
    if t is not None and (not isinstance(t, (int, float)) or isinstance(t, bool)):
        return '"t" must be a number (unix seconds)'
    if not isinstance(src, str) or src not in SOURCES:
        return f'"src" must be one of {", ".join(sorted(SOURCES))}'
    if not isinstance(line, str):
        return '"line" must be a string'
    return Entry(None if t is None else float(t), src, line, lineno)


def request_of(entry: Entry) -> dict[str, Any] | None:
    """The request a ``stdin`` entry recorded (a JSON object), or None."""
    if entry.src != "stdin":
        return None
    try:
        obj = orjson.loads(entry.line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read and parse a recording file (``OSError`` for a missing or unreadable file)."""
    return parse_recording(Path(path).read_bytes())


def memory_entries(rec: Recording) -> list[tuple[float | None, str]] | None:
    """``(t, line)`` of every entry of a recording made by ``attach --pid/--gguf --record`` (all of
    ``src`` ``memory``: docs/memory.md "Recording"), or None when it holds other lines too (a
    run's recording) or none."""
    if not rec.entries or any(e.src != "memory" for e in rec.entries):
        return None
    return [(e.t, e.line) for e in rec.entries]
