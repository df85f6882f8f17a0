"""The BMOE line protocol: ``BMOE_<TAG> {json}`` lines on a runtime's stdout.

Contract: ../shared/seeds/telemetry-contract.md, sections "Per-token lines" (``BMOE_LOAD``,
``BMOE_PROGRESS``) and "Session mode" (``BMOE_READY``, ``BMOE_BEGIN``, ``BMOE_DONE``,
``BMOE_ERROR``); our additive extensions ``BMOE_ROUTE`` and ``BMOE_RESIDENT`` are specified in
docs/architecture.md ("Telemetry extensions").

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

Units: ``*_ms`` milliseconds, ``read_mb``/``mb`` megabytes as the runtime reports them,
``*_mib`` MiB, ``*_s`` seconds, ``*_pct`` percent (``cache_hit_pct`` is -1 when no cache).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from dataclasses import fields as dc_fields
from typing import Any

import orjson

__all__ = [
    "Load", "Progress", "Ready", "Begin", "Done", "Error", "Route", "Resident", "Unknown",
    "TextLine", "BadLine", "Record", "parse_line", "TextAccumulator", "KNOWN_TAGS",
]


# ---------------------------------------------------------------------------------------------
# records

@dataclass(slots=True)
class Load:
    """``BMOE_LOAD``: experts were read from flash this token. ``mb`` megabytes read, ``ms`` read
    time in milliseconds."""

    mb: float | None = None
    ms: float | None = None
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Progress:
    """``BMOE_PROGRESS``: one generated token.

    ``step``/``steps`` 1-based index / target token count; ``wall_ms`` total token time;
    ``io_ms`` flash read time (serial: wall time blocked on reads; overlap: summed lane-busy time,
    may exceed ``wall_ms``); ``compute_ms`` the residual; ``mgmt_ms`` cache management;
    ``stall_ms`` wall time compute lost to reads under overlap; ``read_mb`` flash MB read this
    token; ``cache_hit_pct`` cumulative hit rate (-1 = no cache); ``text`` the cumulative answer
    so far; ``delta_text``/``delta_reasoning`` incremental answer / reasoning text (extension
    sent by newer runtimes).
    """

    step: int | None = None
    steps: int | None = None
    wall_ms: float | None = None
    io_ms: float | None = None
    compute_ms: float | None = None
    mgmt_ms: float | None = None
    stall_ms: float | None = None
    read_mb: float | None = None
    cache_hit_pct: float | None = None
    text: str | None = None
    delta_text: str | None = None
    delta_reasoning: str | None = None
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Ready:
    """``BMOE_READY``: the session's model is loaded. ``load_s`` seconds, ``arch`` the GGUF
    architecture, ``n_ctx`` context length in tokens."""

    load_s: float | None = None
    arch: str | None = None
    n_ctx: int | None = None
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Begin:
    """``BMOE_BEGIN``: generation ``id`` started."""

    id: int | None = None
    extra: dict = field(default_factory=dict)
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
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Error:
    """``BMOE_ERROR``: ``fatal`` false = request rejected, session usable; true = process ending."""

    id: int | None = None
    fatal: bool | None = None
    msg: str | None = None
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Route:
    """``BMOE_ROUTE`` (extension): per layer (index = layer), the routed expert ids and, aligned
    with them, 1 when the expert was resident (hit) / 0 (miss). ``phase`` is "prefill" or
    "decode" as sent. A layer without MoE has an empty list."""

    step: int | None = None
    turn: int | None = None
    phase: str | None = None
    experts: list[list[int]] | None = None
    hit: list[list[int]] | None = None
    extra: dict = field(default_factory=dict)
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
    extra: dict = field(default_factory=dict)
    prefix: str = ""


@dataclass(slots=True)
class Unknown:
    """A well-formed ``BMOE_<TAG> {json}`` line with a tag this version does not know: kept."""

    tag: str
    fields: dict
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


# ---------------------------------------------------------------------------------------------
# field schemas: kind codes  i = int, f = float, s = str, b = bool, L = list[list[int]]

_SCHEMAS: dict[str, tuple[type, tuple[tuple[str, str], ...]]] = {
    "LOAD": (Load, (("mb", "f"), ("ms", "f"))),
    "PROGRESS": (Progress, (
        ("step", "i"), ("steps", "i"), ("wall_ms", "f"), ("io_ms", "f"), ("compute_ms", "f"),
        ("mgmt_ms", "f"), ("stall_ms", "f"), ("read_mb", "f"), ("cache_hit_pct", "f"),
        ("text", "s"), ("delta_text", "s"), ("delta_reasoning", "s"))),
    "READY": (Ready, (("load_s", "f"), ("arch", "s"), ("n_ctx", "i"))),
    "BEGIN": (Begin, (("id", "i"),)),
    "DONE": (Done, (
        ("id", "i"), ("cancelled", "b"), ("tokens", "i"), ("tok_s", "f"), ("prefill_s", "f"),
        ("load_s", "f"), ("cache_hit_pct", "f"), ("n_prompt", "i"), ("n_past", "i"),
        ("cache_resident_mib", "f"), ("cache_budget_mib", "f"), ("spec_recall_pct", "f"),
        ("stall_s_tok", "f"), ("mgmt_s_tok", "f"), ("text", "s"))),
    "ERROR": (Error, (("id", "i"), ("fatal", "b"), ("msg", "s"))),
    "ROUTE": (Route, (("step", "i"), ("turn", "i"), ("phase", "s"), ("experts", "L"),
                      ("hit", "L"))),
    "RESIDENT": (Resident, (("step", "i"), ("n_expert", "i"), ("resident", "L"),
                            ("resident_mib", "f"), ("budget_mib", "f"))),
}

KNOWN_TAGS = frozenset(_SCHEMAS)

_TAG = re.compile(r"BMOE_([A-Z][A-Z0-9_]*)[ \t]*")
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_std_decoder = json.JSONDecoder()


class _WrongType(Exception):
    pass


def _num(name: str, v: Any, kind: str) -> Any:
    """Slow path of field conversion: ``v`` is not already of the exact expected type."""
    t = type(v)
    if kind == "f":
        if t is int:
            return float(v)
    elif kind == "i":
        if t is float and v.is_integer():
            return int(v)
    elif kind == "L":
        if t is list and all(type(row) is list and all(type(x) is int for x in row) for row in v):
            return v
    raise _WrongType(f"field {name!r}: expected {_KIND_NAMES[kind]}, got {t.__name__} {v!r:.40}")


_KIND_NAMES = {"i": "integer", "f": "number", "s": "string", "b": "boolean",
               "L": "list of integer lists"}


def _make_builder(cls: type, fields: tuple[tuple[str, str], ...]):
    """Compile a builder for one tag: positional construction, one exact-type check per field
    (the common case), the slow conversion only for a mismatch. Speed matters: this runs once
    per token per source."""
    lines = ["def build(d, prefix):"]
    names = []
    for i, (name, kind) in enumerate(fields):
        v = f"v{i}"
        names.append(v)
        lines.append(f"    {v} = d.pop({name!r}, None)")
        exact = {"i": "int", "f": "float", "s": "str", "b": "bool"}.get(kind)
        cond = f"type({v}) is not {exact}" if exact else "True"
        lines.append(f"    if {v} is not None and {cond}: {v} = _num({name!r}, {v}, {kind!r})")
    lines.append(f"    return cls({', '.join(names)}, d, prefix)")
    ns: dict[str, Any] = {"cls": cls, "_num": _num}
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the constant schemas above
    return ns["build"]


_BUILDERS = {tag: _make_builder(cls, fields) for tag, (cls, fields) in _SCHEMAS.items()}


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
    except ValueError:
        raise ValueError(f"malformed JSON: {first_err}") from None
    return value, payload[end:].strip()


def _fast_body(tag: str, marker: str, indent: str) -> list[str]:
    """Source of the inline fast path for one per-token tag (see _make_parse_line)."""
    _cls, fields = _SCHEMAS[tag]
    exact = {"i": "int", "f": "float", "s": "str", "b": "bool"}
    src = [f"{indent}try:",
           f"{indent}    d = loads(line[{len(marker) - 1}:])",
           f"{indent}except JSONDecodeError:",
           f"{indent}    d = None",
           f"{indent}if type(d) is dict:"]
    names = []
    for i, (name, kind) in enumerate(fields):
        v = f"v{i}"
        names.append(v)
        src.append(f"{indent}    {v} = d.pop({name!r}, None)")
        # exact type first: for a present field (the usual case) that is the only test
        src.append(f"{indent}    if type({v}) is not {exact[kind]} and {v} is not None:")
        src.append(f"{indent}        try:")
        src.append(f"{indent}            {v} = conv({name!r}, {v}, {kind!r})")
        src.append(f"{indent}        except WrongType as exc:")
        src.append(f"{indent}            return BadLine(line, 'BMOE_{tag}: ' + str(exc))")
    # build the instance without the __init__ call (measurably cheaper per line; the object
    # is the same: every slot is assigned, and these dataclasses have no __post_init__)
    src.append(f"{indent}    o = new({_cls.__name__})")
    for (name, _kind), v in zip(fields, names):
        src.append(f"{indent}    o.{name} = {v}")
    src.append(f"{indent}    o.extra = d")
    src.append(f"{indent}    o.prefix = ''")
    src.append(f"{indent}    return o")
    return src


def _make_parse_line():
    """Compile ``parse_line``: inline fast paths for the per-token lines (``BMOE_PROGRESS`` and
    ``BMOE_LOAD`` at the start of the line, JSON object, exact field types), the general path
    for everything else. Ingest speed is a goal (benchmarks/bench_ingest.py): one Python call
    per line, no dispatch tables on the fast path."""
    src = ["def parse_line(line):",
           "    if line.startswith('BMOE_PROGRESS {'):"]
    src += _fast_body("PROGRESS", "BMOE_PROGRESS {", "        ")
    src += ["    elif line.startswith('BMOE_LOAD {'):"]
    src += _fast_body("LOAD", "BMOE_LOAD {", "        ")
    src += ["    return general(line)"]
    for cls in (Progress, Load):  # the fast path assigns every slot itself
        assert not hasattr(cls, "__post_init__")
        assert [f.name for f in dc_fields(cls)] == [n for n, _ in _SCHEMAS[cls.__name__.upper()][1]] + [
            "extra", "prefix"]
    ns: dict[str, Any] = {"Progress": Progress, "Load": Load, "BadLine": BadLine, "loads": _loads,
                          "new": object.__new__,
                          "JSONDecodeError": _JSONDecodeError, "conv": _num,
                          "WrongType": _WrongType, "general": _parse_general}
    exec("\n".join(src), ns)  # noqa: S102 - generated from the constant schemas above
    fn = ns["parse_line"]
    fn.__doc__ = _PARSE_LINE_DOC
    fn.__module__ = __name__
    return fn


_PARSE_LINE_DOC = """Parse one line (terminator already stripped) into a record, :class:`TextLine` or
    :class:`BadLine`. Never raises.

    Record types: Load, Progress, Ready, Begin, Done, Error, Route, Resident, Unknown. Text after
    the JSON object on the same line (rare) is kept in ``extra["_suffix"]``.
    """


def _parse_general(line: str) -> Any:
    """The general path of :func:`parse_line` (any tag, prefix text, explained failures)."""
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
    b = _BUILDERS.get(tag)
    try:
        rec = b(d, prefix) if b is not None else Unknown(tag, d, prefix)
    except _WrongType as exc:
        return BadLine(line, f"BMOE_{tag}: {exc}")
    if suffix:
        (rec.fields if type(rec) is Unknown else rec.extra)["_suffix"] = suffix
    return rec


parse_line = _make_parse_line()


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


class _Stream:
    """One growing text (answer or reasoning) fed by cumulative snapshots or deltas."""

    __slots__ = ("text", "pending", "rewrites")

    def __init__(self) -> None:
        self.text = ""
        self.pending = ""  # a high surrogate waiting for its low half
        self.rewrites = 0

    def delta(self, s: str) -> str:
        if not self.pending and s.isascii():  # fast path: no surrogate can be involved
            self.text += s
            return s
        if self.pending:
            s = self.pending + s
            self.pending = ""
        if s and _is_high(s[-1]):
            self.pending = s[-1]
            s = s[:-1]
        s = _fix_surrogates(s)
        self.text += s
        return s

    def snapshot(self, s: str) -> str:
        cur = self.text
        if s.isascii() and s.startswith(cur):  # fast path: ASCII cannot hold surrogates
            self.pending = ""
            self.text = s  # == cur + new, without copying the whole text again
            return s[len(cur):]
        self.pending = ""  # the snapshot supersedes anything held back
        if s and _is_high(s[-1]):
            self.pending = s[-1]
            s = s[:-1]
        if s.startswith(cur):
            raw = s[len(cur):]
            new = _fix_surrogates(raw)
            self.text = s if new is raw else cur + new
            return new
        # the source rewrote earlier text (e.g. a new generation without reset): follow it
        s = _fix_surrogates(s)
        n = 0
        for a, b in zip(cur, s):
            if a != b:
                break
            n += 1
        self.rewrites += 1
        self.text = s
        return s[n:]


class TextAccumulator:
    """Rebuild the answer (and reasoning) from a sequence of :class:`Progress` records.

    ``feed(progress) -> str`` returns the answer text this record added. The cumulative ``text``
    field (contract) and the incremental ``delta_text`` (extension) rebuild the same answer; when
    a record has both, ``text`` wins. ``delta_reasoning`` (or a cumulative ``reasoning`` field in
    ``extra``) goes to ``.reasoning``. A UTF-16 surrogate pair split across two records
    (``"\\ud83d"`` then ``"\\ude00"``) is joined into one character; a lone surrogate becomes
    U+FFFD. If a cumulative ``text`` stops extending the previous one, ``.text`` follows the new
    text, ``feed`` returns the part after the common prefix, and ``rewrites`` is incremented.
    ``reset()`` starts a new generation.
    """

    __slots__ = ("_answer", "_reasoning")

    def __init__(self) -> None:
        self._answer = _Stream()
        self._reasoning = _Stream()

    @property
    def text(self) -> str:
        return self._answer.text

    @property
    def reasoning(self) -> str:
        return self._reasoning.text

    @property
    def rewrites(self) -> int:
        return self._answer.rewrites + self._reasoning.rewrites

    def reset(self) -> None:
        self._answer = _Stream()
        self._reasoning = _Stream()

    def feed(self, progress: Any) -> str:
        """Take one Progress (or Done) record; return the newly added answer text."""
        extra = getattr(progress, "extra", None) or {}
        r = extra.get("reasoning")
        if type(r) is str:
            self._reasoning.snapshot(r)
        else:
            dr = getattr(progress, "delta_reasoning", None)
            if dr:
                self._reasoning.delta(dr)
        t = progress.text
        if t is not None:
            return self._answer.snapshot(t)
        dt = getattr(progress, "delta_text", None)
        if dt:
            return self._answer.delta(dt)
        return ""
