"""The MoE-cache audit log (JSONL), moe-cache-reference.md "Audit log".

One JSON object per line. Every record has ``event`` (``load``/``ready``/``request``/``exit``),
``time`` (UTC ISO 8601 to the millisecond), ``pid``, ``hybrid`` and the context's counters since
creation: ``hits``, ``hits_profile``, ``misses``, ``bytes_upload``, ``bytes_cpu``, ``copies``,
``bytes_copy``, ``swaps``. ``load``/``exit`` add ``layers`` (per cached layer
``{il, slots, hits, hits_profile, misses, resident}``), ``request`` adds ``slot``, ``task``,
``n_prompt``, ``n_gen``, ``t_prompt_ms``, ``t_gen_ms`` and the request's own ``req_*`` counters.

* :func:`parse_audit_line` -> :class:`AuditRecord`, or :class:`AuditLineError` naming the line.
* :func:`parse_audit_records`: every record of one line. Records of concurrent writers can land
  on one line (a writer whose record and newline are two writes); they are split at the end of
  each JSON object and each is kept; a fragment that is no record (a record cut by another
  writer's bytes) is an error of its own and costs only itself.
* Sizes are checked against parsers/limits.py before anyone allocates from them: a ``layers``
  entry whose ``il`` is over :data:`~.limits.MAX_LAYERS`, a ``resident`` expert id over
  :data:`~.limits.MAX_EXPERTS`, a ``model`` ``n_layer``/``n_expert`` over its cap are removed from
  the record, each named in :attr:`AuditRecord.notes`.
* :class:`AuditRuns` groups records into runs (a run = one process from its ``load``; several
  pids share a file) incrementally, for a tail or a whole file.
* :func:`check_exact_sum`: the ``request`` records add up exactly to ``exit`` minus ``ready``
  (the reference's property with one slot; bmoe-run's with several, which charges each lookup
  to one request).

Pure: no threads, no files except :func:`read_audit_file`. As implemented: docs/metrics.md
"The audit log".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .limits import MAX_EXPERTS, MAX_LAYERS, dims_problem, int_within
from .sanitize import brief

__all__ = [
    "EVENTS",
    "COUNTERS",
    "REQ_COUNTERS",
    "AuditLineError",
    "AuditRecord",
    "AuditRun",
    "AuditRuns",
    "parse_audit_line",
    "parse_audit_records",
    "read_audit_file",
    "check_exact_sum",
]

EVENTS = ("load", "ready", "request", "exit")
# the context counters every record carries
COUNTERS = ("hits", "hits_profile", "misses", "bytes_upload", "bytes_cpu", "copies",
            "bytes_copy", "swaps")
# request record's own counters -> the context counter they add up to
REQ_COUNTERS = {
    "req_hits": "hits",
    "req_hits_profile": "hits_profile",
    "req_misses": "misses",
    "req_bytes_upload": "bytes_upload",
    "req_bytes_cpu": "bytes_cpu",
}


class AuditLineError(ValueError):
    """A line that is not a valid audit record. ``lineno`` is 1-based."""

    def __init__(self, lineno: int, msg: str):
        super().__init__(f"line {lineno}: {msg}")
        self.lineno = lineno
        self.msg = msg


def parse_time(s: str) -> float | None:
    """ISO 8601 (``2026-11-29T12:00:00.123Z``) -> seconds since the epoch, ``None`` if unparsable."""
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@dataclass(slots=True)
class AuditRecord:
    """One audit record. ``counters`` holds the context counters (``None`` when a record lacks
    one: absent is not zero). ``ts``: ``time`` as epoch seconds (``None`` if unparsable).
    ``data``: the whole decoded object (event-specific fields: ``layers``, ``model``, ``perf``,
    ``req_*`` ...), less the sizes over parsers/limits.py's caps, each named in ``notes``."""

    lineno: int
    event: str
    time: str
    ts: float | None
    pid: int
    hybrid: bool | None
    counters: dict[str, int | None]
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        """The record's field ``key`` (``default`` when absent)."""
        return self.data.get(key, default)

    def layers(self) -> list[dict[str, Any]]:
        """``layers`` of a load/exit record (empty list otherwise)."""
        v = self.data.get("layers")
        return v if isinstance(v, list) else []


def parse_audit_line(line: str | bytes, lineno: int = 0) -> AuditRecord:
    """Parse one line (without or with its newline). Raises :class:`AuditLineError` for
    invalid JSON (a bare ``NaN`` is invalid JSON), a non-object, an unknown ``event``, a
    missing/non-integer ``pid``, a non-string ``time`` or a counter that is not a
    non-negative integer."""
    if isinstance(line, str):
        line = line.encode("utf-8", errors="replace")
    line = line.strip()
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise AuditLineError(lineno, f"not JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(obj, dict):
        raise AuditLineError(lineno, f"not a JSON object ({type(obj).__name__})")
    ev = obj.get("event")
    if ev not in EVENTS:
        raise AuditLineError(lineno, f"unknown event {brief(ev)}")
    pid = obj.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise AuditLineError(lineno, f"pid missing or not an integer ({brief(pid)})")
    t = obj.get("time")
    if not isinstance(t, str):
        raise AuditLineError(lineno, f"time missing or not a string ({brief(t)})")
    counters: dict[str, int | None] = {}
    for k in COUNTERS:
        v = obj.get(k)
        if v is None:
            counters[k] = None
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            counters[k] = v
        else:
            raise AuditLineError(lineno, f"{k} is not a non-negative integer ({brief(v)})")
    hy = obj.get("hybrid")
    return AuditRecord(lineno=lineno, event=ev, time=t, ts=parse_time(t), pid=pid,
                       hybrid=hy if isinstance(hy, bool) else None, counters=counters, data=obj,
                       notes=_bound_sizes(obj))


def _bound_sizes(obj: dict[str, Any]) -> list[str]:
    """Remove (in place) the sizes of ``obj`` over parsers/limits.py's caps; say what went."""
    notes: list[str] = []
    model = obj.get("model")
    if isinstance(model, dict):
        for key, cap in (("n_layer", "n_layer"), ("n_expert", "n_expert"), ("n_expert_used", "top_k")):
            if key in model and model[key] is not None:
                why = dims_problem(**{cap: model[key]})
                if why is not None:
                    notes.append(f"model.{why.replace(cap + '=', key + '=', 1)}: ignored")
                    del model[key]
    layers = obj.get("layers")
    if isinstance(layers, list):
        kept: list[Any] = []
        dropped_layers = dropped_ids = 0
        for lay in layers:
            if not isinstance(lay, dict):
                kept.append(lay)
                continue
            il = lay.get("il")
            if isinstance(il, int) and not isinstance(il, bool) and int_within(il, MAX_LAYERS - 1) is None:
                dropped_layers += 1
                continue
            res = lay.get("resident")
            if isinstance(res, list):
                ok = [e for e in res if int_within(e, MAX_EXPERTS - 1) is not None and isinstance(e, int)]
                if len(ok) != len(res):
                    dropped_ids += len(res) - len(ok)
                    lay["resident"] = ok
            kept.append(lay)
        if dropped_layers:
            notes.append(f"{dropped_layers} layer entr{'y' if dropped_layers == 1 else 'ies'} with il outside "
                         f"0..{MAX_LAYERS - 1} (the layer cap, parsers/limits.py) ignored")
            obj["layers"] = kept
        if dropped_ids:
            notes.append(f"{dropped_ids} resident expert id(s) outside 0..{MAX_EXPERTS - 1} (the expert cap, "
                         "parsers/limits.py) ignored")
    return notes


_AFTER_DOCUMENT = "unexpected content after document"


def parse_audit_records(line: str | bytes, lineno: int = 0) -> tuple[list[AuditRecord], list[AuditLineError]]:
    """Every record on one line, in order, and an :class:`AuditLineError` for each part that is not
    a valid record. Records glued together by concurrent writers (``{...}{...}``, with or without
    space between) are split at the end of each JSON object; after a broken fragment the next
    record is the next JSON object with an ``event`` (a nested object is not one). Never raises."""
    if isinstance(line, str):
        line = line.encode("utf-8", errors="replace")
    line = line.strip()
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        return [parse_audit_line(line, lineno)], []
    except AuditLineError as exc:
        first = exc
    if b"}" not in line:
        return [], [first]
    records: list[AuditRecord] = []
    errors: list[AuditLineError] = []
    pos, n = 0, len(line)
    while pos < n:
        while pos < n and line[pos] in b" \t,":
            pos += 1
        if pos >= n:
            break
        end = n
        try:
            orjson.loads(line[pos:])
        except orjson.JSONDecodeError as exc:
            if exc.msg.startswith(_AFTER_DOCUMENT) and exc.pos > 0:
                end = pos + exc.pos
            else:
                nxt = _next_record(line, pos + 1)
                end = n if nxt < 0 else nxt
                errors.append(AuditLineError(lineno, f"not JSON ({exc.msg}): {_fragment(line[pos:end])}"))
                pos = end
                continue
        try:
            records.append(parse_audit_line(line[pos:end], lineno))
        except AuditLineError as exc:
            errors.append(exc)
        pos = end
    if not records:
        return [], [first]  # no record anywhere: the line's own error says it best
    return records, errors


def _next_record(line: bytes, start: int) -> int:
    """Offset of the next JSON object in ``line`` from ``start`` that is an audit record (has a
    known ``event``), or -1."""
    p = line.find(b'{"', start)
    while p >= 0:
        obj: Any = None
        try:
            obj = orjson.loads(line[p:])
        except orjson.JSONDecodeError as exc:
            if exc.msg.startswith(_AFTER_DOCUMENT) and exc.pos > 0:
                try:
                    obj = orjson.loads(line[p:p + exc.pos])
                except orjson.JSONDecodeError:
                    obj = None
        if isinstance(obj, dict) and obj.get("event") in EVENTS:
            return p
        p = line.find(b'{"', p + 1)
    return -1


def _fragment(b: bytes) -> str:
    text = b.decode("utf-8", "replace")
    return repr(text if len(text) <= 60 else text[:60] + "...")


@dataclass(slots=True)
class AuditRun:
    """The records of one process run, from its ``load`` (or from the first record seen of
    that pid when the log starts mid-run). ``exited``: an ``exit`` record closed it."""

    pid: int
    load: AuditRecord | None = None
    ready: AuditRecord | None = None
    requests: list[AuditRecord] = field(default_factory=list)
    exit: AuditRecord | None = None
    first_lineno: int = 0

    @property
    def exited(self) -> bool:
        """An ``exit`` record closed the run."""
        return self.exit is not None

    @property
    def identity(self) -> dict[str, str]:
        """The run's model (``model``: the load record's model path, else name) when it says."""
        m = self.load.data.get("model") if self.load is not None else None
        if isinstance(m, dict) and isinstance(m.get("path") or m.get("name"), str):
            return {"model": str(m.get("path") or m.get("name"))}
        return {}

    @property
    def last(self) -> AuditRecord | None:
        """The run's newest record (exit, else the last request, else ready, else load)."""
        if self.exit is not None:
            return self.exit
        if self.requests:
            return self.requests[-1]
        return self.ready or self.load

    def counters(self) -> dict[str, int | None]:
        """The context counters of the newest record of the run."""
        r = self.last
        return dict(r.counters) if r else {k: None for k in COUNTERS}

    def resident(self) -> dict[int, list[int]]:
        """Layer -> resident expert ids, from the newest ``exit`` or ``load`` record."""
        src = self.exit or self.load
        out: dict[int, list[int]] = {}
        if src is None:
            return out
        for lay in src.layers():
            if isinstance(lay, dict) and isinstance(lay.get("il"), int):
                res = lay.get("resident")
                out[lay["il"]] = [int(e) for e in res] if isinstance(res, list) else []
        return out

    def layer_hits(self) -> dict[int, tuple[int, int, int]]:
        """Layer -> (hits, hits_profile, misses), from the newest ``exit`` or ``load`` record."""
        src = self.exit or self.load
        out: dict[int, tuple[int, int, int]] = {}
        if src is None:
            return out
        for lay in src.layers():
            if isinstance(lay, dict) and isinstance(lay.get("il"), int):
                out[lay["il"]] = (int(lay.get("hits") or 0), int(lay.get("hits_profile") or 0),
                                  int(lay.get("misses") or 0))
        return out


class AuditRuns:
    """Incremental grouping of records into :class:`AuditRun` by pid.

    ``add(record)`` appends to the pid's open run; a ``load`` always opens a new run (a pid
    may be reused by a later process); a record after that pid's ``exit`` opens a new run too.
    ``runs``: every run in order of first record. ``n_records``, ``bad``: list of
    (line number, message) added with :meth:`add_bad`; ``notes``: (line number, message) for the
    sizes records lost to parsers/limits.py's caps; ``n_split``: lines that held several records.
    """

    def __init__(self) -> None:
        self.runs: list[AuditRun] = []
        self._open: dict[int, AuditRun] = {}
        self.n_records = 0
        self.n_split = 0
        self.bad: list[tuple[int, str]] = []
        self.notes: list[tuple[int, str]] = []

    def add_bad(self, lineno: int, msg: str) -> None:
        """Record a line (or part of one) that is not a valid record."""
        self.bad.append((lineno, msg))

    def add(self, rec: AuditRecord) -> AuditRun:
        """Add one parsed record to its pid's run (a ``load`` opens a new run); returns the run."""
        self.n_records += 1
        run = self._open.get(rec.pid)
        if rec.event == "load" or run is None or run.exited:
            run = AuditRun(pid=rec.pid, first_lineno=rec.lineno)
            self.runs.append(run)
            self._open[rec.pid] = run
        if rec.event == "load":
            run.load = rec
        elif rec.event == "ready":
            run.ready = rec
        elif rec.event == "request":
            run.requests.append(rec)
        else:
            run.exit = rec
        return run

    def feed(self, line: str | bytes, lineno: int) -> list[AuditRecord]:
        """Parse and add every record of one line (:func:`parse_audit_records`); a blank line
        gives none; each bad part is recorded in ``bad``, each capped size in ``notes``."""
        if not line.strip():
            return []
        recs, errors = parse_audit_records(line, lineno)
        for exc in errors:
            self.add_bad(exc.lineno, exc.msg)
        if len(recs) > 1:
            self.n_split += 1
        for rec in recs:
            self.notes.extend((lineno, note) for note in rec.notes)
            self.add(rec)
        return recs

    def feed_line(self, line: str | bytes, lineno: int) -> AuditRecord | None:
        """:meth:`feed`, returning the line's last record (None when it has none)."""
        recs = self.feed(line, lineno)
        return recs[-1] if recs else None

    def pids(self) -> list[int]:
        """Every pid seen, ascending."""
        return sorted({r.pid for r in self.runs})


def read_audit_file(path: str | Path) -> AuditRuns:
    """Read a whole audit file (only complete lines: a last line without its newline is left
    out, as a writer may still be appending it). Raises ``OSError`` if unreadable."""
    data = Path(path).read_bytes()
    runs = AuditRuns()
    end = data.rfind(b"\n")
    if end < 0:
        return runs
    for i, line in enumerate(data[: end + 1].split(b"\n")[:-1], start=1):
        runs.feed(line, i)
    return runs


def check_exact_sum(run: AuditRun) -> list[str]:
    """The reference's property, for one run: the ``request`` records' ``req_*`` counters add up
    exactly to ``exit`` minus ``ready`` for hits, hits_profile, misses, bytes_upload and
    bytes_cpu; when every request ran in slot 0 (never two slots busy at once) each request's
    counters also equal the difference of the context counters around it (with two slots busy,
    the counters between two records hold both requests' work; docs/metrics.md "Parallel
    slots"). Returns a list of problems (empty = holds). A run without ``ready`` or ``exit`` is
    reported as such."""
    problems: list[str] = []
    if run.ready is None:
        problems.append(f"pid {run.pid}: no ready record")
    if run.exit is None:
        problems.append(f"pid {run.pid}: no exit record")
    ready, exit_ = run.ready, run.exit
    if problems or ready is None or exit_ is None:
        return problems
    for rk, ck in REQ_COUNTERS.items():
        total = 0
        for r in run.requests:
            v = r.data.get(rk)
            if not isinstance(v, int):
                problems.append(f"pid {run.pid} line {r.lineno}: {rk} missing")
                v = 0
            total += v
        a, b = ready.counters.get(ck), exit_.counters.get(ck)
        if a is None or b is None:
            problems.append(f"pid {run.pid}: {ck} missing in ready/exit")
            continue
        if total != b - a:
            problems.append(f"pid {run.pid}: sum of {rk} = {total} but exit - ready {ck} = {b - a}")
    if any(r.data.get("slot", 0) != 0 for r in run.requests):
        return problems
    prev = ready
    for r in run.requests:
        for rk, ck in REQ_COUNTERS.items():
            a, b, v = prev.counters.get(ck), r.counters.get(ck), r.data.get(rk)
            if a is not None and b is not None and isinstance(v, int) and v != b - a:
                problems.append(f"pid {run.pid} line {r.lineno}: {rk} = {v} but counters moved by {b - a}")
        prev = r
    return problems


def iter_records(runs: AuditRuns) -> Iterable[AuditRecord]:
    """Every record of every run in line order."""
    recs: list[AuditRecord] = []
    for run in runs.runs:
        recs.extend(x for x in (run.load, run.ready) if x is not None)
        recs.extend(run.requests)
        if run.exit is not None:
            recs.append(run.exit)
    return sorted(recs, key=lambda r: r.lineno)
