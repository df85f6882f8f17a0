"""The BMOE line protocol: ``BMOE_<TAG> {json}`` lines on a runtime's stdout.

Contract: docs/telemetry.md, sections "Per-token lines" (``BMOE_LOAD``, ``BMOE_PROGRESS``) and
"Session mode" (``BMOE_READY``, ``BMOE_BEGIN``, ``BMOE_DONE``, ``BMOE_ERROR``), and the additive
extensions ``BMOE_ROUTE`` and ``BMOE_RESIDENT``.

Rules every record follows:

* A field the source did not send (or sent as ``null``) is ``None``, never 0.
* Fields the contract does not name are kept in ``extra`` (real runtimes already send
  ``majflt``, ``cpu_ms``, ``dense_resident_frac``, ...); an unknown tag becomes
  :class:`Unknown` with all its fields. Nothing is dropped.
* ``prefix`` is the text before the ``BMOE_`` marker on the same line (a runtime's stdout
  interleaves the answer and llama.cpp's log with protocol lines, and a line may not start
  with the marker). The caller treats the prefix as ordinary text.
* A ``BMOE_`` line whose JSON is malformed, is not an object, or has a known field of the wrong
  type becomes :class:`BadLine` (with the reason); lines that are not protocol lines become
  :class:`TextLine`. :func:`parse_line` never raises.
* Sizes a reader allocates by are within the caps of :mod:`~bmoe_top.parsers.limits`: a
  ``BMOE_ROUTE`` or ``BMOE_RESIDENT`` line with more layers, an expert id or ``n_expert`` over
  the caps, or a layer's list longer than the experts there can be, is a :class:`BadLine` that
  says which (docs/telemetry.md "Sizes from input").

Units: ``*_ms`` milliseconds, ``read_mb``/``mb`` megabytes as the runtime reports them,
``*_mib`` MiB, ``*_s`` seconds, ``*_pct`` percent (``cache_hit_pct`` is -1 when no cache).

Speed: the per-token lines (``BMOE_PROGRESS``, ``BMOE_LOAD``) have a hand-written fast path
(benchmarks/bench_ingest.py measures it against bare ``orjson.loads``); :class:`Progress` and
:class:`Load` keep the decoded JSON object whole (``raw``) and work out ``extra`` only when asked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

import orjson

from .limits import MAX_EXPERTS, MAX_LAYERS
from .sanitize import brief

__all__ = [
    "Load", "Progress", "Ready", "Begin", "Done", "Error", "Route", "Resident", "Unknown",
    "TextLine", "BadLine", "Record", "parse_line", "TextAccumulator", "TextBuffer",
    "KNOWN_TAGS",
]

# ---------------------------------------------------------------------------------------------
# field kinds: i = int, f = float, s = str, b = bool, L = list[list[int]]

_EXACT: dict[str, type] = {"i": int, "f": float, "s": str, "b": bool}
_KIND_NAMES = {"i": "integer", "f": "number", "s": "string", "b": "boolean", "L": "list of integer lists"}


_INT = frozenset({int})
_LIST = frozenset({list})


class _WrongType(Exception):
    pass


def _convert(name: str, v: Any, kind: str) -> Any:
    """Field ``name`` whose value ``v`` is not of the exact type ``kind`` asks for: the converted
    value (an int for a number field, an integral float for an integer field), else _WrongType."""
    t = type(v)
    if kind == "f" and t is int:
        return float(v)
    if kind == "i" and t is float and v.is_integer():
        return int(v)
    if kind == "L" and t is list and set(map(type, v)) <= _LIST \
            and set(map(type, chain.from_iterable(v))) <= _INT:  # exactly ints (not bools, floats)
        return v
    raise _WrongType(f"field {name!r}: expected {_KIND_NAMES[kind]}, got {t.__name__} {brief(v):.40}")


# ---------------------------------------------------------------------------------------------
# per-token records: the JSON object is kept whole (``raw``)

class _RawRecord:
    """Base of :class:`Progress` and :class:`Load`: named fields (``FIELDS``, with kinds) read from
    ``raw``, the decoded JSON object itself; ``extra`` is ``raw`` without the named fields."""

    __slots__ = ("raw", "prefix")
    FIELDS: tuple[tuple[str, str], ...] = ()
    NAMES: frozenset[str] = frozenset()

    raw: dict[str, Any]
    prefix: str

    def __init__(self, **fields: Any) -> None:
        extra = fields.pop("extra", None) or {}
        self.prefix = fields.pop("prefix", "")
        unknown = set(fields) - self.NAMES
        if unknown:
            raise TypeError(f"unknown field(s) {sorted(unknown)}")
        raw = dict(extra)
        for name, _kind in self.FIELDS:
            v = fields.get(name)
            setattr(self, name, v)
            if v is not None:
                raw[name] = v
        self.raw = raw

    @property
    def extra(self) -> dict[str, Any]:
        """The fields the contract does not name (``raw`` minus the named fields; a new dict)."""
        names = self.NAMES
        return {k: v for k, v in self.raw.items() if k not in names}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _RawRecord) or type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n, _ in self.FIELDS) and (
            self.extra == other.extra and self.prefix == other.prefix)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = [f"{n}={getattr(self, n)!r}" for n, _ in self.FIELDS if getattr(self, n) is not None]
        if self.extra:
            parts.append(f"extra={self.extra!r}")
        if self.prefix:
            parts.append(f"prefix={self.prefix!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class Load(_RawRecord):
    """``BMOE_LOAD``: experts were read from flash this token. ``mb`` megabytes read, ``ms`` read
    time in milliseconds."""

    __slots__ = ("mb", "ms")
    FIELDS = (("mb", "f"), ("ms", "f"))
    NAMES = frozenset(n for n, _ in FIELDS)
    mb: float | None
    ms: float | None


class Progress(_RawRecord):
    """``BMOE_PROGRESS``: one generated token.

    ``step``/``steps`` 1-based index / target token count; ``wall_ms`` total token time;
    ``io_ms`` flash read time (serial: wall time blocked on reads; overlap: summed lane-busy time,
    may exceed ``wall_ms``); ``compute_ms`` the residual; ``mgmt_ms`` cache management;
    ``stall_ms`` wall time compute lost to reads under overlap; ``read_mb`` flash MB read this
    token; ``cache_hit_pct`` cumulative hit rate (-1 = no cache); ``text`` the cumulative answer
    so far; ``delta_text``/``delta_reasoning`` incremental answer / reasoning text (extension
    sent by newer runtimes); ``pagecache_mb`` of ``read_mb``, the MB the page cache served
    (bmoe-run's additive field; None when absent: docs/memory.md "The three tiers in bmoe-run").
    """

    __slots__ = ("step", "steps", "wall_ms", "io_ms", "compute_ms", "mgmt_ms", "stall_ms", "read_mb",
                 "cache_hit_pct", "text", "delta_text", "delta_reasoning", "pagecache_mb")
    FIELDS = (
        ("step", "i"), ("steps", "i"), ("wall_ms", "f"), ("io_ms", "f"), ("compute_ms", "f"),
        ("mgmt_ms", "f"), ("stall_ms", "f"), ("read_mb", "f"), ("cache_hit_pct", "f"),
        ("text", "s"), ("delta_text", "s"), ("delta_reasoning", "s"), ("pagecache_mb", "f"))
    NAMES = frozenset(n for n, _ in FIELDS)
    step: int | None
    steps: int | None
    wall_ms: float | None
    io_ms: float | None
    compute_ms: float | None
    mgmt_ms: float | None
    stall_ms: float | None
    read_mb: float | None
    cache_hit_pct: float | None
    text: str | None
    delta_text: str | None
    delta_reasoning: str | None
    pagecache_mb: float | None


# ---------------------------------------------------------------------------------------------
# session records

@dataclass(slots=True)
class Ready:
    """``BMOE_READY``: the session's model is loaded. ``load_s`` seconds, ``arch`` the GGUF
    architecture, ``n_ctx`` context length in tokens."""

    load_s: float | None = None
    arch: str | None = None
    n_ctx: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Begin:
    """``BMOE_BEGIN``: generation ``id`` started."""

    id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Done:
    """``BMOE_DONE``: end-of-generation summary (session mode). Seconds, tokens/s, MiB, percent;
    ``spec_recall_pct`` is -1 when spec-gating is off; ``n_prompt`` tokens prefilled this turn,
    ``n_past`` context length after the turn; ``text`` the full answer."""

    id: int | None = None
    cancelled: bool | None = None
    tokens: int | None = None
    tok_s: float | None = None
    prefill_s: float | None = None
    load_s: float | None = None
    cache_hit_pct: float | None = None
    n_prompt: int | None = None
    n_past: int | None = None
    cache_resident_mib: float | None = None
    cache_budget_mib: float | None = None
    spec_recall_pct: float | None = None
    stall_s_tok: float | None = None
    mgmt_s_tok: float | None = None
    text: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Error:
    """``BMOE_ERROR``: ``fatal`` false = request rejected, session usable; true = process ending."""

    id: int | None = None
    fatal: bool | None = None
    msg: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Route:
    """``BMOE_ROUTE`` (extension): per layer (index = layer), the routed expert ids and, aligned
    with them, 1 when the expert was resident (hit) / 0 (miss). ``phase`` is "prefill" or
    "decode" as sent. A layer without MoE has an empty list. ``tier`` (bmoe-run, decode, when its
    reads tell): aligned the same way, the tier that served each expert, 0 the expert cache, 1
    the page cache, 2 the disk (docs/memory.md "The three tiers in bmoe-run"); None when absent."""

    step: int | None = None
    turn: int | None = None
    phase: str | None = None
    experts: list[list[int]] | None = None
    hit: list[list[int]] | None = None
    tier: list[list[int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Resident:
    """``BMOE_RESIDENT`` (extension): per layer, the expert ids resident in the cache;
    ``resident_mib``/``budget_mib`` in MiB."""

    step: int | None = None
    n_expert: int | None = None
    resident: list[list[int]] | None = None
    resident_mib: float | None = None
    budget_mib: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Unknown:
    """A well-formed ``BMOE_<TAG> {json}`` line with a tag this version does not know: kept."""

    tag: str
    fields: dict[str, Any]
    prefix: str = ""


@dataclass(slots=True)
class TextLine:
    """A line that is not a protocol line (answer streamed inline, loader log, ...)."""

    text: str


@dataclass(slots=True)
class BadLine:
    """A ``BMOE_`` line that could not be used; ``reason`` says why."""

    text: str
    reason: str


Record = Load | Progress | Ready | Begin | Done | Error | Route | Resident | Unknown

#: Session records: dataclass, fields in constructor order (the general path builds them).
_SCHEMAS: dict[str, tuple[Any, tuple[tuple[str, str], ...]]] = {
    "LOAD": (Load, Load.FIELDS),
    "PROGRESS": (Progress, Progress.FIELDS),
    "READY": (Ready, (("load_s", "f"), ("arch", "s"), ("n_ctx", "i"))),
    "BEGIN": (Begin, (("id", "i"),)),
    "DONE": (Done, (
        ("id", "i"), ("cancelled", "b"), ("tokens", "i"), ("tok_s", "f"), ("prefill_s", "f"),
        ("load_s", "f"), ("cache_hit_pct", "f"), ("n_prompt", "i"), ("n_past", "i"),
        ("cache_resident_mib", "f"), ("cache_budget_mib", "f"), ("spec_recall_pct", "f"),
        ("stall_s_tok", "f"), ("mgmt_s_tok", "f"), ("text", "s"))),
    "ERROR": (Error, (("id", "i"), ("fatal", "b"), ("msg", "s"))),
    "ROUTE": (Route, (("step", "i"), ("turn", "i"), ("phase", "s"), ("experts", "L"), ("hit", "L"),
                        ("tier", "L"))),
    "RESIDENT": (Resident, (("step", "i"), ("n_expert", "i"), ("resident", "L"),
                            ("resident_mib", "f"), ("budget_mib", "f"))),
}

KNOWN_TAGS = frozenset(_SCHEMAS)

_TAG = re.compile(r"BMOE_([A-Z][A-Z0-9_]*)[ \t]*")
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_std_decoder = json.JSONDecoder()


# ---------------------------------------------------------------------------------------------
# parsing

def _build(tag: str, d: dict[str, Any], prefix: str) -> Any:
    """A record of a known tag from its JSON object (raises _WrongType for a wrong field type)."""
    cls, fields = _SCHEMAS[tag]
    if issubclass(cls, _RawRecord):  # Progress, Load: the object stays whole, values converted in it
        rec = object.__new__(cls)
        for name, kind in fields:
            v = d.get(name)
            if v is not None and type(v) is not _EXACT[kind]:
                v = d[name] = _convert(name, v, kind)
            setattr(rec, name, v)
        rec.raw, rec.prefix = d, prefix
        return rec
    vals = []
    for name, kind in fields:
        v = d.pop(name, None)
        if v is not None and (kind == "L" or type(v) is not _EXACT[kind]):
            v = _convert(name, v, kind)
        vals.append(v)
    return cls(*vals, d, prefix)


def _lists_problem(name: str, lists: list[list[int]] | None) -> str | None:
    """Why per-layer id lists ``lists`` would size a table over the caps, else None."""
    if not lists:
        return None
    if len(lists) > MAX_LAYERS:
        return f"field {name!r}: {len(lists)} layers, over the cap of {MAX_LAYERS} (parsers/limits.py)"
    if max(map(len, lists)) > MAX_EXPERTS:
        return f"field {name!r}: a layer lists more than {MAX_EXPERTS} experts (parsers/limits.py)"
    top = max(map(max, filter(None, lists)), default=0)
    if top >= MAX_EXPERTS:
        return f"field {name!r}: expert id {top} is over the cap of {MAX_EXPERTS} experts (parsers/limits.py)"
    return None


def _route_problem(rec: Route) -> str | None:
    return _lists_problem("experts", rec.experts) or (
        f"field 'hit': {len(rec.hit)} layers, over the cap of {MAX_LAYERS} (parsers/limits.py)"
        if rec.hit and len(rec.hit) > MAX_LAYERS else None) or (
        f"field 'tier': {len(rec.tier)} layers, over the cap of {MAX_LAYERS} (parsers/limits.py)"
        if rec.tier and len(rec.tier) > MAX_LAYERS else None)


def _resident_problem(rec: Resident) -> str | None:
    if rec.n_expert is not None and not 0 <= rec.n_expert <= MAX_EXPERTS:
        return f"field 'n_expert': {rec.n_expert} is not within 0-{MAX_EXPERTS} (parsers/limits.py)"
    return _lists_problem("resident", rec.resident)


#: Per tag: why a record of that tag would size a reader's tables over the caps (None: fine).
_SIZE_CHECKS: dict[str, Any] = {"ROUTE": _route_problem, "RESIDENT": _resident_problem}


def _find_marker(line: str) -> tuple[int, str, int] | None:
    """Locate ``BMOE_<TAG>`` starting a protocol line.

    Any tag followed by ``{`` is a protocol line; a known tag also when it starts the line or
    nothing (or ``[``) follows it, so a broken payload becomes a BadLine, while prose that
    mentions ``BMOE_PROGRESS`` mid-sentence stays text.
    Returns (marker start, tag, payload start) or None.
    """
    pos = line.find("BMOE_")
    while pos >= 0:
        m = _TAG.match(line, pos)
        if m is not None:
            tag, end = m.group(1), m.end()
            nxt = line[end:end + 1]
            if nxt == "{" or (tag in _SCHEMAS and (pos == 0 or nxt in ("", "["))):
                return pos, tag, end
        pos = line.find("BMOE_", pos + 5)
    return None


def _decode_payload(payload: str) -> tuple[Any, str]:
    """JSON object from payload; returns (value, trailing text). Raises ValueError."""
    try:
        return _loads(payload), ""
    except _JSONDecodeError as exc:
        first_err = exc
    # orjson rejects lone UTF-16 surrogates (a pair split across two records) and trailing text
    # after the object: the stdlib decoder accepts both, and it is only used on this rare path.
    try:
        value, end = _std_decoder.raw_decode(payload)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than orjson's 1024 levels
        raise ValueError(f"malformed JSON: {first_err}") from None
    return value, payload[end:].strip()


def _parse_general(line: str) -> Any:
    """Any tag, prefix text before the marker, text after the object, explained failures."""
    found = _find_marker(line)
    if found is None:
        return TextLine(line)
    start, tag, pstart = found
    payload, prefix = line[pstart:], line[:start]
    suffix = ""
    try:
        d, suffix = _decode_payload(payload)
    except ValueError as exc:
        return BadLine(line, f"BMOE_{tag}: {exc}" if payload.strip() else
                       f"BMOE_{tag}: no JSON object after the tag")
    if type(d) is not dict:
        return BadLine(line, f"BMOE_{tag}: payload is {type(d).__name__}, not a JSON object")
    if suffix:
        d["_suffix"] = suffix  # kept with the unknown fields
    if tag not in _SCHEMAS:
        return Unknown(tag, d, prefix)
    try:
        rec = _build(tag, d, prefix)
    except _WrongType as exc:
        return BadLine(line, f"BMOE_{tag}: {exc}")
    check = _SIZE_CHECKS.get(tag)
    problem = check(rec) if check is not None else None
    return rec if problem is None else BadLine(line, f"BMOE_{tag}: {problem}")


_new = object.__new__
_progress_numbers = itemgetter("step", "steps", "wall_ms", "io_ms", "compute_ms", "mgmt_ms", "stall_ms",
                               "read_mb", "cache_hit_pct")
_load_numbers = itemgetter("mb", "ms")


def parse_line(line: str) -> Any:
    """Parse one line (terminator already stripped) into a record, :class:`TextLine` or
    :class:`BadLine`. Never raises.

    Record types: Load, Progress, Ready, Begin, Done, Error, Route, Resident, Unknown. Text after
    the JSON object on the same line (rare) is kept in ``extra["_suffix"]``.

    The fast path takes a per-token line that starts with its marker and carries every number the
    contract names with its exact JSON type; anything else (a field missing or null, an integer
    where a float is due, a prefix, broken JSON) takes the general path, which gives the same
    record or says why not.
    """
    if line[:15] == "BMOE_PROGRESS {":
        try:
            d = _loads(line[14:])
        except _JSONDecodeError:
            return _parse_general(line)
        try:
            step, steps, wall, io, comp, mgmt, stall, read, hit = _progress_numbers(d)
        except (KeyError, TypeError):
            return _slow(line, "PROGRESS", d)
        text = d.get("text")
        dtext = d.get("delta_text")
        dreason = d.get("delta_reasoning")
        pcache = d.get("pagecache_mb")
        if (type(step) is int and type(steps) is int and type(wall) is float and type(io) is float
                and type(comp) is float and type(mgmt) is float and type(stall) is float
                and type(read) is float and type(hit) is float and (text is None or type(text) is str)
                and (dtext is None or type(dtext) is str) and (dreason is None or type(dreason) is str)
                and (pcache is None or type(pcache) is float)):
            p = _new(Progress)
            p.step = step
            p.steps = steps
            p.wall_ms = wall
            p.io_ms = io
            p.compute_ms = comp
            p.mgmt_ms = mgmt
            p.stall_ms = stall
            p.read_mb = read
            p.cache_hit_pct = hit
            p.text = text
            p.delta_text = dtext
            p.delta_reasoning = dreason
            p.pagecache_mb = pcache
            p.raw = d
            p.prefix = ""
            return p
        return _slow(line, "PROGRESS", d)
    if line[:11] == "BMOE_LOAD {":
        try:
            d = _loads(line[10:])
        except _JSONDecodeError:
            return _parse_general(line)
        try:
            mb, ms = _load_numbers(d)
        except (KeyError, TypeError):
            return _slow(line, "LOAD", d)
        if type(mb) is float and type(ms) is float:
            r = _new(Load)
            r.mb = mb
            r.ms = ms
            r.raw = d
            r.prefix = ""
            return r
        return _slow(line, "LOAD", d)
    return _parse_general(line)


def _slow(line: str, tag: str, d: Any) -> Any:
    """A per-token line decoded by the fast path whose fields need conversion or are missing."""
    if type(d) is not dict:
        return BadLine(line, f"BMOE_{tag}: payload is {type(d).__name__}, not a JSON object")
    try:
        return _build(tag, d, "")
    except _WrongType as exc:
        return BadLine(line, f"BMOE_{tag}: {exc}")


# ---------------------------------------------------------------------------------------------
# answer text

_SURROGATE = re.compile("[\ud800-\udfff]")


def _is_high(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def _fix_surrogates(s: str) -> str:
    """Join surrogate pairs into characters; a lone surrogate becomes U+FFFD."""
    if _SURROGATE.search(s) is None:
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class TextBuffer:
    """A growing text whose append is O(1) amortised: pieces are kept in a list and joined when
    the whole text is read (:attr:`value`, then cached as one piece), or when the pieces added
    since the last join outgrow the text joined then (so joins copy O(length) per doubling, and
    the pieces never take more than about the text itself). ``len()`` is O(1); :meth:`tail` reads
    the end without joining."""

    __slots__ = ("_pieces", "_len", "_joined")

    def __init__(self, text: str = "") -> None:
        self._pieces: list[str] = [text] if text else []
        self._len = len(text)
        self._joined = len(text)  # characters in the first piece after the last join

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, piece: str) -> None:
        if piece:
            self._pieces.append(piece)
            self._len += len(piece)
            if len(self._pieces) > 64 and self._len > 2 * self._joined:
                self.compact()

    def set(self, text: str) -> None:
        """Replace the whole text."""
        self._pieces = [text] if text else []
        self._len = self._joined = len(text)

    def compact(self) -> None:
        """Join the pieces into one (O(length))."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        self._joined = self._len

    @property
    def value(self) -> str:
        self.compact()
        p = self._pieces
        return p[0] if p else ""

    def tail(self, n: int) -> str:
        """The last ``n`` characters (at most)."""
        if n <= 0:
            return ""
        out: list[str] = []
        size = 0
        for piece in reversed(self._pieces):
            out.append(piece)
            size += len(piece)
            if size >= n:
                break
        return "".join(reversed(out))[-n:]

    def prefix(self, n: int) -> str:
        """The first ``n`` characters."""
        return self.value if n >= self._len else self.value[: max(0, n)]


class _Stream:
    """One growing text (answer or reasoning) fed by cumulative snapshots or by deltas.

    A delta's code units are joined into characters with a high surrogate at its end held back
    until its low half arrives. A snapshot that extends the previous snapshot as sent adds only
    its new part the same way (a decoder may join a pair the previous snapshot had cut, which
    supersedes the half held back); any other snapshot (after deltas, or a lone surrogate
    decoded differently) is made whole and compared with the text rebuilt so far, so a pair split
    across two snapshots, or a lone surrogate earlier in the text, is never taken for a rewrite.
    """

    __slots__ = ("text", "pending", "rewrites", "_raw")

    def __init__(self) -> None:
        self.text = TextBuffer()
        self.pending = ""  # a high surrogate waiting for its low half
        self.rewrites = 0
        self._raw: str | None = ""  # the previous snapshot as sent (without a held half); None after a delta

    def delta(self, s: str) -> str:
        self._raw = None
        if not self.pending and s.isascii():  # no surrogate can be involved
            self.text.append(s)
            return s
        if self.pending:
            s = self.pending + s
            self.pending = ""
        if s and _is_high(s[-1]):
            self.pending = s[-1]
            s = s[:-1]
        s = _fix_surrogates(s)
        self.text.append(s)
        return s

    def snapshot(self, s: str) -> str:
        hold = ""
        if s and _is_high(s[-1]):
            hold, s = s[-1], s[:-1]
        prev = self._raw
        self._raw = s
        if prev is not None and s.startswith(prev):
            added = s[len(prev):]
            if self.pending and added and "\udc00" <= added[0] <= "\udfff":
                added = self.pending + added
            self.pending = hold
            if not added.isascii():
                added = _fix_surrogates(added)
            self.text.append(added)
            return added
        self.pending = hold
        new = s if s.isascii() else _fix_surrogates(s)
        cur = self.text.value
        if new.startswith(cur):
            added = new[len(cur):]
            self.text.append(added)
            return added
        # the source rewrote earlier text (e.g. a new generation without reset): follow it
        n = 0
        for x, y in zip(cur, new):
            if x != y:
                break
            n += 1
        self.rewrites += 1
        self.text.set(new)
        return new[n:]

    def close(self, s: str) -> str:
        """The final full text (``BMOE_DONE.text``): a snapshot, then a held half is U+FFFD."""
        out = self.snapshot(s)
        if self.pending:
            self.pending = ""
            self.text.append("\ufffd")
            self._raw = None
            out += "\ufffd"
        return out


class TextAccumulator:
    """Rebuild the answer (and reasoning) from a sequence of :class:`Progress` records.

    ``feed(progress) -> str`` returns the answer text this record added. The cumulative ``text``
    field (contract) and the incremental ``delta_text`` (extension) rebuild the same answer; when
    a record has both, ``text`` wins. ``delta_reasoning`` (or a cumulative ``reasoning`` field in
    ``extra``) goes to ``.reasoning``. A UTF-16 surrogate pair split across two records
    (``"\\ud83d"`` then ``"\\ude00"``, as deltas or as snapshots) is joined into one character; a
    lone surrogate becomes U+FFFD. If a cumulative ``text`` stops extending the previous one,
    ``.text`` follows the new text, ``feed`` returns the part after the common prefix, and
    ``rewrites`` is incremented (the caller replaces its copy with ``.text``). A ``Done`` record's
    ``text`` is the final text. ``reset()`` starts a new generation. Appending is O(1) amortised
    however long the answer (the text is held in pieces: :class:`TextBuffer`).
    """

    __slots__ = ("_answer", "_reasoning")

    def __init__(self) -> None:
        self._answer = _Stream()
        self._reasoning = _Stream()

    @property
    def text(self) -> str:
        return self._answer.text.value

    @property
    def reasoning(self) -> str:
        return self._reasoning.text.value

    @property
    def rewrites(self) -> int:
        return self._answer.rewrites + self._reasoning.rewrites

    def reset(self) -> None:
        self._answer = _Stream()
        self._reasoning = _Stream()

    def feed_reasoning(self, rec: Progress | Done) -> str:
        """Take the reasoning of one record (``delta_reasoning``, or a cumulative ``reasoning``
        field among the extras); return the reasoning text it added."""
        raw = rec.raw if isinstance(rec, Progress) else rec.extra
        r = raw.get("reasoning")
        if type(r) is str:
            return self._reasoning.snapshot(r)
        if isinstance(rec, Progress) and rec.delta_reasoning:
            return self._reasoning.delta(rec.delta_reasoning)
        return ""

    def feed_answer(self, rec: Progress | Done) -> str:
        """Take the answer text of one record; return the answer text it added."""
        t = rec.text
        if isinstance(rec, Done):
            return "" if t is None else self._answer.close(t)
        if t is not None:
            return self._answer.snapshot(t)
        dt = rec.delta_text
        if dt:
            return self._answer.delta(dt)
        return ""

    def feed(self, rec: Progress | Done) -> str:
        """Take one Progress (or Done) record (reasoning and answer); return the answer text added."""
        self.feed_reasoning(rec)
        return self.feed_answer(rec)
