"""Session requests (JSONL on a ``--session`` runtime's stdin).

Contract: ../shared/seeds/telemetry-contract.md "Session mode", Requests:
``{"cmd":"generate","id":<int>,"prompt":"<string>","n_predict":<int>,"think":<bool>,
"clear_kv":<bool>}``, ``{"cmd":"cancel"}``, ``{"cmd":"close"}``. ``n_predict``/``think``/
``clear_kv`` are optional (None = not sent: the process's flags / true apply). docs/telemetry.md
"Parsers".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from .textio import Problem, iter_lines

__all__ = ["Request", "parse_requests", "parse_request_line", "KNOWN_COMMANDS"]

KNOWN_COMMANDS = frozenset({"generate", "cancel", "close"})

_FIELDS: tuple[tuple[str, type], ...] = (
    ("id", int), ("prompt", str), ("n_predict", int), ("think", bool), ("clear_kv", bool),
)


@dataclass(slots=True)
class Request:
    """One session request. Fields the line did not carry are None; other keys go to ``extra``
    (an unknown ``cmd`` is kept as is: the runtime decides what to do with it)."""

    cmd: str
    id: int | None = None
    prompt: str | None = None
    n_predict: int | None = None
    think: bool | None = None
    clear_kv: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parse_request_line(line: str) -> Request | str:
    """One JSONL line -> Request, or a string saying why it is not one. Never raises."""
    try:
        d: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            d = json.loads(line)  # lone surrogates in a prompt: stdlib accepts them
        except ValueError as exc:
            return f"malformed JSON: {exc}"
        except RecursionError:
            return "malformed JSON: nested too deep"
    if type(d) is not dict:
        return f"not a JSON object ({type(d).__name__})"
    cmd = d.pop("cmd", None)
    if type(cmd) is not str:
        return "no string \"cmd\" field"
    kw: dict[str, Any] = {}
    for name, typ in _FIELDS:
        v = d.pop(name, None)
        if v is None:
            continue
        if type(v) is not typ:
            if typ is int and type(v) is float and v.is_integer():
                v = int(v)
            else:
                return f"field {name!r}: expected {typ.__name__}, got {type(v).__name__}"
        kw[name] = v
    return Request(cmd, extra=d, **kw)


def parse_requests(data: bytes | str) -> tuple[list[Request], list[Problem]]:
    """Parse a requests JSONL file (any encoding/line ending textio accepts). Blank lines are
    skipped; a bad line becomes a Problem with its line number and the others still count."""
    out: list[Request] = []
    problems: list[Problem] = []
    for lineno, line in iter_lines(data):
        if not line.strip():
            continue
        r = parse_request_line(line)
        if isinstance(r, str):
            problems.append(Problem(lineno, line, r))
        else:
            out.append(r)
    return out, problems
