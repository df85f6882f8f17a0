"""Which telemetry format a file holds, decided from its CONTENT (the name only breaks ties).

Kinds: "token_csv" (``--csv`` sink: header with ``step`` and ``wall_ms``, or a
``# bmoe_metrics`` header; ../shared's ``qwen.metrics`` is one), "route_trace" (header with
``layer``, ``expert`` and ``residency``, or ``# route_trace``), "transcript" (BMOE protocol lines,
end-of-run summary lines, llama.cpp logs, stdout captures), "sidecar" (only ``key=value`` lines),
"recording" (JSONL from ``bmoe-top --record``: objects with "t", "src", "line"), "requests"
(session requests JSONL: objects with "cmd"), "audit" (``--moe-cache-audit`` JSONL: objects with
"event" in load/ready/request/exit; moe-cache-reference.md "Audit log"), "strp" (expert profile,
magic ``STRP``; moe-cache-reference.md "Profile format"), "unknown".
"""

from __future__ import annotations

import orjson

from .bmoe_lines import BadLine, TextLine, parse_line
from .summary_lines import parse_summary_line
from .textio import decode_bytes, split_text
from .transcript import is_loader_noise

__all__ = ["sniff", "KINDS"]

KINDS = ("token_csv", "route_trace", "transcript", "sidecar", "recording", "requests", "audit",
         "strp", "unknown")

_SAMPLE = 64 * 1024
_AUDIT_EVENTS = frozenset({"load", "ready", "request", "exit"})


def _csv_kind(header: str) -> str | None:
    cols = {c.strip() for c in header.split(",")}
    if len(cols) < 3:
        return None
    if {"layer", "expert"} <= cols and ("residency" in cols or "slot" in cols):
        return "route_trace"
    if "step" in cols and ({"wall_ms", "io_ms", "compute_ms"} & cols):
        return "token_csv"
    return None


def _jsonl_kind(lines: list[str]) -> str | None:
    votes: dict[str, int] = {}
    n = bad = 0
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if not s.startswith("{"):
            bad += 1  # a stray non-JSON line does not change what the file is
            continue
        n += 1
        try:
            d = orjson.loads(s)
        except orjson.JSONDecodeError:
            continue  # a truncated last line in the sample, or one bad line: keep looking
        if not isinstance(d, dict):
            continue
        if {"t", "src", "line"} <= d.keys():
            k = "recording"
        elif isinstance(d.get("cmd"), str):
            k = "requests"
        elif d.get("event") in _AUDIT_EVENTS:
            k = "audit"
        else:
            continue
        votes[k] = votes.get(k, 0) + 1
        if n >= 20:
            break
    if not votes or sum(votes.values()) < 2 * bad:
        return None
    return max(votes, key=votes.__getitem__)


def sniff(data: bytes, name: str = "") -> str:
    """Return the format kind of ``data`` (see the module doc); never raises.

    Looks at the first and last 64 KiB. ``name`` (a file name) only decides between kinds the
    content supports equally (e.g. an empty file called ``*.csv``).
    """
    if data[:4] == b"STRP":
        return "strp"
    head = decode_bytes(data[:_SAMPLE])
    tail = decode_bytes(data[-_SAMPLE:]) if len(data) > _SAMPLE else ""
    window = head[:4096]
    if window.count("\x00") > max(4, len(window) // 100):
        return "unknown"  # binary we do not know (a stray NUL in text does not make it binary)
    lines = split_text(head)
    if len(data) > _SAMPLE and lines:
        lines.pop()  # possibly cut mid-line
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    lname = name.lower()

    # comment-headed CSVs
    for ln in lines:
        s = ln.strip()
        if not s:
            continue
        if s.startswith("#"):
            low = s[1:].strip().lower()
            if low.startswith("route_trace"):
                return "route_trace"
            if low.startswith("bmoe_metrics"):
                return "token_csv"
            continue
        k = _csv_kind(s)
        if k:
            return k
        break

    if first.startswith("{"):
        k = _jsonl_kind(lines[:50])
        if k:
            return k

    # transcript evidence: protocol lines, summary lines, loader log
    text_lines = lines + (split_text(tail)[1:] if tail else [])
    kv = other = 0
    for ln in text_lines:
        s = ln.strip()
        if not s:
            continue
        if "BMOE_" in s and not isinstance(parse_line(s), (TextLine, BadLine)):
            return "transcript"
        sl = parse_summary_line(s)
        if sl is not None:
            if sl.kind == "sidecar":
                kv += 1
                continue
            if sl.kind not in ("unparsed",):
                return "transcript"
        if is_loader_noise(s):
            return "transcript"
        other += 1
    if kv and not other:
        return "sidecar"
    if not first:
        if lname.endswith(".csv"):
            return "token_csv"
        return "unknown"
    if lname.endswith((".log", ".out", ".txt")):
        return "transcript"
    return "unknown"
