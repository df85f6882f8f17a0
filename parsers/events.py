"""The event log's format: one JSON object per line (docs/events.md "Format").

An event is a change of state worth keeping after the session ends: an alert's state, the
diagnosis, a source's state (connected, busy, down, restarted) or a turn boundary::

    {"t": 1764912345.123456, "kind": "source", "subject": "metrics", "old": "ok",
     "new": "refused", "detail": "connection refused", "source": "metrics: http://...", "run": "3f2a9c01d4e5"}

``t`` unix seconds (float); ``kind`` one of :data:`KINDS`; ``subject`` what changed (an alert's
name, ``source``, ``turn 3``); ``old`` its state before (null when it had none) and ``new`` after;
``detail`` one line about it; ``source`` the run's source as the screen names it; ``run`` the id
of the bmoe-top run model that wrote it (one per screen session: a restart starts a new one).

:class:`Event` is the one definition of an event (``bmoe_top.tui.model.events`` keeps them in
memory); :func:`event_line` writes one line and :func:`parse_event_line` /
:func:`parse_events` read them back. Reading never raises on bad content: a line that is not an
event is counted and its first :data:`MAX_PROBLEMS` kept with their line numbers, and the lines
around it still count. Every string read is passed through
:func:`~bmoe_top.parsers.sanitize.sanitize` (one line) and cut to :data:`MAX_FIELD` characters,
so a log written by anyone draws nothing on a terminal. No Textual import.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .sanitize import sanitize
from .textio import Problem

__all__ = ["KINDS", "MAX_FIELD", "MAX_PROBLEMS", "Event", "EventRead", "event_line", "parse_event_line",
           "parse_events"]

#: What an event is about: an alert's state, the diagnosis line, a source's state, a turn boundary.
KINDS = ("alert", "diagnosis", "source", "turn")
#: Characters kept of each string field (a longer one is cut and ends with ``…``).
MAX_FIELD = 1000
#: Bad lines kept with their text (all are counted).
MAX_PROBLEMS = 100


@dataclass(frozen=True, slots=True)
class Event:
    """One event (the format in the module docstring); every string already one safe line."""

    t: float
    kind: str
    subject: str
    old: str | None
    new: str
    detail: str = ""
    source: str = ""
    run: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The event as its JSON object (the keys of the format, in its order)."""
        return {"t": round(self.t, 6), "kind": self.kind, "subject": self.subject, "old": self.old,
                "new": self.new, "detail": self.detail, "source": self.source, "run": self.run}


def clean(text: str) -> str:
    """A field as kept: one safe line of at most :data:`MAX_FIELD` characters."""
    if len(text) > MAX_FIELD:
        text = text[:MAX_FIELD - 1] + "…"
    return sanitize(text)


def event_line(event: Event) -> bytes:
    """One line of the log (with its ``\\n``). A lone surrogate (orjson refuses it) is written
    as U+FFFD."""
    try:
        return orjson.dumps(event.to_dict()) + b"\n"
    except TypeError:
        d = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if isinstance(v, str) else v
             for k, v in event.to_dict().items()}
        return orjson.dumps(d) + b"\n"


def _text(obj: dict[str, Any], key: str, default: str | None) -> str | None:
    v = obj.get(key, default)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f'"{key}" must be a string')
    return clean(v)


def parse_event_line(text: str) -> Event:
    """The event of one line. Raises ``ValueError`` saying why a line is not one: not JSON, not
    an object, ``t`` not a finite number, ``kind`` not one of :data:`KINDS`, ``subject`` or
    ``new`` missing, a field of the wrong type."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    t = obj.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ValueError('"t" must be a number (unix seconds)')
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ValueError(f'"kind" must be one of {", ".join(KINDS)}')
    subject, new = _text(obj, "subject", None), _text(obj, "new", None)
    if subject is None or new is None:
        raise ValueError('"subject" and "new" are required strings')
    return Event(float(t), kind, subject, _text(obj, "old", None), new, _text(obj, "detail", "") or "",
                 _text(obj, "source", "") or "", _text(obj, "run", "") or "")


@dataclass(slots=True)
class EventRead:
    """What :func:`parse_events` read: ``events`` in file order, ``bad_lines`` (every line that is
    not an event) and ``problems`` (the first :data:`MAX_PROBLEMS` of them: where, the text, why;
    ``where`` names the file when several were read)."""

    events: list[Event] = field(default_factory=list)
    bad_lines: int = 0
    problems: list[tuple[str, Problem]] = field(default_factory=list)

    def add_bad(self, where: str, lineno: int, text: str, reason: str) -> None:
        self.bad_lines += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((sanitize(where), Problem(lineno, sanitize(text), sanitize(reason))))


def parse_events(lines: Iterable[tuple[int, str]], where: str = "", into: EventRead | None = None) -> EventRead:
    """Read ``(lineno, text)`` pairs (:func:`~bmoe_top.parsers.textio.iter_lines` of a file's
    bytes) into ``into`` (a new :class:`EventRead` when None); blank lines are skipped."""
    out = EventRead() if into is None else into
    for lineno, text in lines:
        raw = text.strip()
        if not raw:
            continue
        try:
            out.events.append(parse_event_line(raw))
        except ValueError as exc:
            out.add_bad(where, lineno, raw, str(exc))
    return out
