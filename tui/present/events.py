"""The event log's views (docs/events.md): the filter ``bmoe-top events`` and the Events table
share (:class:`EventFilter`), the headless text and ``--json`` document, and the table of the run
screens' Events tab. Every string comes from :mod:`bmoe_top.parsers.events` (read back or
recorded), already one safe line. No Textual.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bmoe_top.parsers.events import Event, EventRead
from bmoe_top.tui.present.tables import Column, Row, Table

__all__ = ["EventFilter", "event_time", "events_document", "events_lines", "events_table"]

#: Problems (bad lines) the text output lists under the events (all are counted).
SHOWN_PROBLEMS = 10


def event_time(t: float) -> str:
    """``t`` (unix s) as the views write it: UTC, ISO 8601 to the millisecond (``2026-12-05T05:43:12.125Z``)."""
    if not math.isfinite(t) or not -1e11 < t < 1e11:
        return f"{t!r}"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events to show: ``kinds`` (empty: every kind), ``since`` (unix s: at or after it;
    None: from the first), ``grep`` (text in any field, case-insensitive; "" : every event)."""

    kinds: tuple[str, ...] = ()
    since: float | None = None
    grep: str = ""

    def passes(self, e: Event) -> bool:
        if self.kinds and e.kind not in self.kinds:
            return False
        if self.since is not None and e.t < self.since:
            return False
        if self.grep:
            q = self.grep.lower()
            return any(q in (f or "").lower() for f in (e.kind, e.subject, e.old, e.new, e.detail, e.source, e.run))
        return True

    def select(self, events: Iterable[Event]) -> list[Event]:
        return [e for e in events if self.passes(e)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": list(self.kinds), "since": self.since, "grep": self.grep or None}


def _event_doc(e: Event) -> dict[str, Any]:
    return {**e.to_dict(), "time": event_time(e.t)}


def events_document(read: EventRead, files: Sequence[str], unread: Sequence[str], flt: EventFilter) -> dict[str, Any]:
    """``bmoe-top events --json``: ``files`` read (oldest first), ``unread`` (files that could not
    be read: why), ``filter``, ``read`` (events in the files), ``shown`` and ``events`` (those the
    filter passes, oldest first, each with ``time``: :func:`event_time`), ``bad_lines`` (lines
    that are not events) and ``problems`` (the first of them: ``file``, ``line``, ``text``,
    ``reason``)."""
    shown = flt.select(read.events)
    return {
        "files": list(files),
        "unread": list(unread),
        "filter": flt.to_dict(),
        "read": len(read.events),
        "shown": len(shown),
        "bad_lines": read.bad_lines,
        "problems": [{"file": where, "line": p.lineno, "text": p.text, "reason": p.reason}
                     for where, p in read.problems],
        "events": [_event_doc(e) for e in shown],
    }


def _change(e: Event) -> str:
    return e.new if e.old is None else f"{e.old} → {e.new}"


def events_lines(read: EventRead, files: Sequence[str], flt: EventFilter) -> list[str]:
    """``bmoe-top events``: one line per event the filter passes (time, kind, subject, change,
    detail, source), then how many were read, shown and bad, and the first bad lines. An empty
    or missing log says so."""
    shown = flt.select(read.events)
    where = ", ".join(files) if files else "no log file yet"
    if not read.events and not read.bad_lines:
        return [f"no events in {where} (the log is empty or does not exist yet)"]
    out = []
    for e in shown:
        line = f"{event_time(e.t)}  {e.kind:<9} {e.subject}: {_change(e)}"
        if e.detail:
            line += f"  ({e.detail})"
        if e.source:
            line += f"  [{e.source}]"
        out.append(line)
    tail = f"{len(shown)} of {len(read.events)} events shown ({where})"
    if read.bad_lines:
        tail += f"; {read.bad_lines} line{'s' if read.bad_lines != 1 else ''} not events, skipped"
    out.append(tail)
    for w, p in read.problems[:SHOWN_PROBLEMS]:
        out.append(f"  {w}:{p.lineno}: {p.reason}: {p.text[:80]}")
    return out


#: The Events table's columns (``[sort.events]`` keeps its sort by these keys).
EVENT_COLUMNS = (
    Column("time", "time (UTC)", numeric=False, short="time"),
    Column("kind", "kind", numeric=False),
    Column("subject", "subject", numeric=False),
    Column("old", "from", numeric=False, drop=2),
    Column("new", "to", numeric=False),
    Column("detail", "detail", numeric=False, drop=1),
    Column("source", "source", numeric=False, drop=3),
)

def events_table(events: Sequence[Event], total: int) -> Table:
    """The Events tab's table: one row per event kept (oldest first; the time to the second,
    UTC; a firing alert's row marked ``bad``; sort keys: the time as a number, the rest as text);
    ``total`` the events recorded (the note says how many are kept)."""
    rows = tuple(Row((event_time(e.t)[:19].replace("T", " "), e.kind, e.subject, e.old or "—", e.new,
                      e.detail, e.source),
                     (e.t, e.kind, e.subject, e.old or "", e.new, e.detail, e.source),
                     kind="bad" if e.kind == "alert" and e.new == "firing" else "")
                 for e in events)
    kept = len(events)
    note = ("alerts, the diagnosis, source states and turns as they change; written to the event log "
            "(bmoe-top events lists it)")
    if total > kept:
        note += f"; the newest {kept} of {total} kept here"
    return Table("Events", EVENT_COLUMNS, rows, note)
