"""Which telemetry format a file holds, decided from its CONTENT (the name only breaks ties).

Kinds:

* "token_csv": the ``--csv`` sink: a header with ``step`` and one timing column (``wall_ms``,
  ``io_ms``, ``compute_ms``, ``stall_ms``, ``mgmt_ms``), or a ``# bmoe_metrics`` header
  (../shared's ``qwen.metrics`` is one);
* "route_trace": a header with ``layer``, ``expert`` and ``residency`` or ``slot``, or
  ``# route_trace``. Both CSV kinds are found as the CSV reader finds them (token_csv.find_header:
  a damaged header byte, stray lines or a lost ``#`` above the header, NUL bytes, BOM-less UTF-16);
* "transcript": BMOE protocol lines, end-of-run summary lines, llama.cpp logs, stdout captures;
* "sidecar": only ``key=value`` lines;
* "recording": JSONL from ``bmoe-top --record`` (objects with "t", "src", "line");
* "requests": session requests JSONL (objects with "cmd");
* "audit": ``--moe-cache-audit`` JSONL (objects with "event" in load/ready/request/exit;
  moe-cache-reference.md "Audit log");
* "strp": an expert profile (magic ``STRP``; moe-cache-reference.md "Profile format");
* "unknown": none of these (not a recorded run; :func:`sniff_reason` says why).

docs/telemetry.md "Sniffing".
"""

from __future__ import annotations

import re

import orjson

from .bmoe_lines import BadLine, TextLine, parse_line
from .summary_lines import parse_summary_line
from .textio import decode_bytes, guess_encoding, split_text
from .token_csv import KNOWN_TOKEN_COLUMNS, find_header, headerless_contract
from .transcript import is_loader_noise

__all__ = ["blank_reason", "sniff", "sniff_reason", "KINDS", "RUN_KINDS", "TEXT_NOT_A_RUN"]

KINDS = ("token_csv", "route_trace", "transcript", "sidecar", "recording", "requests", "audit",
         "strp", "unknown")
#: The kinds that hold a recorded run (or a part of one) that bmoe-top can replay.
RUN_KINDS = frozenset(KINDS) - {"unknown"}

_SAMPLE = 64 * 1024
_AUDIT_EVENTS = frozenset({"load", "ready", "request", "exit"})


_TIMING = frozenset({"wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms"})
_ROUTE = frozenset({"turn", "phase", "step", "layer", "slot", "expert", "weight", "residency", "expert_bytes"})
_NULS = re.compile(rb"\x00+")
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def _csv_kind(names: list[str] | set[str]) -> str | None:
    cols = set(names)
    if {"layer", "expert"} <= cols and ("residency" in cols or "slot" in cols):
        return "route_trace"
    if "step" in cols and _TIMING & cols:
        return "token_csv"
    return None


def _csv_sniff(text: str) -> str | None:
    """token_csv / route_trace when the CSV reader finds such a header (or format comment) near the
    top of ``text``, else None."""
    data = "\n".join(split_text(text)[:400]).encode("utf-8", "surrogatepass") + b"\n"
    head = find_header(data, KNOWN_TOKEN_COLUMNS | _ROUTE)
    for _, c in head.comments:
        low = c.lower()
        if low.startswith("route_trace"):
            return "route_trace"
        if low.startswith("bmoe_metrics"):
            return "token_csv"
    if not head.header_lineno and head.body_lineno <= 64 and headerless_contract(head):
        return "token_csv"  # no header: the loader names a body as wide as the contract's columns
    if not head.header_lineno or head.header_lineno > 64:
        return None
    stray = sum(1 for p in head.problems if "stray line" in p.reason)
    return _csv_kind(head.header) if stray <= 8 else None


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
    raw = data[:_SAMPLE]
    if guess_encoding(raw)[0] == "utf-8" and b"\x00" in raw[:4096]:
        # NUL bytes: a zero-filled block or stray NULs in text leave text around them; binary we do
        # not know has other control bytes too
        rest = _NULS.sub(b"", raw[:4096])
        if len(_CONTROL.findall(rest)) > max(4, len(rest) // 100) or (not rest.strip() and len(data) <= 4096):
            return "unknown"
        raw = _NULS.sub(b"\n", raw)
    head = decode_bytes(raw)
    tail = decode_bytes(data[-_SAMPLE:]) if len(data) > _SAMPLE else ""
    if "\x00" in tail:
        tail = tail.replace("\x00", "")
    lines = split_text(head)
    if len(data) > _SAMPLE and lines:
        lines.pop()  # possibly cut mid-line
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    lname = name.lower()

    # comment-headed CSVs
    if not first.startswith("{"):
        k = _csv_sniff(head if len(data) <= _SAMPLE else "\n".join(lines))
        if k:
            return k

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


#: Why text is not a recorded run (:func:`sniff_reason`, and a transcript that measures nothing).
TEXT_NOT_A_RUN = ("text with none of the formats bmoe-top reads (a CSV header with step and a timing column, "
                  "a route-trace header, BMOE_ lines, end-of-run summary lines, key=value lines): not a "
                  "recorded run")


def blank_reason(sample: bytes) -> str:
    """Why a file of nothing but white space and NUL bytes (``sample``: what was read of it) is not
    a recorded run, in one sentence: empty, or what it holds."""
    if b"\x00" not in sample:
        return "the file is empty: not a recorded run"
    if sample.replace(b"\x00", b""):
        return "the file holds only NUL bytes and white space: not a recorded run"
    return "the file holds only NUL bytes: not a recorded run"


def sniff_reason(data: bytes, name: str = "") -> tuple[str, str]:
    """``(kind, reason)``: :func:`sniff`'s kind, and for "unknown" one sentence saying why the data is
    not a recorded run (for an exit message or a banner); "" for the other kinds. Never raises."""
    kind = sniff(data, name)
    if kind != "unknown":
        return kind, ""
    if not data.strip():
        return kind, blank_reason(data)
    raw = data[:4096]
    if guess_encoding(raw)[0] == "utf-8" and b"\x00" in raw:
        rest = _NULS.sub(b"", raw)
        if len(_CONTROL.findall(rest)) > max(4, len(rest) // 100) or (not rest.strip() and len(data) <= 4096):
            return kind, "binary data that is none of the formats bmoe-top reads (not STRP): not a recorded run"
    first = next((ln.strip() for ln in split_text(decode_bytes(data[:_SAMPLE])) if ln.strip()), "")
    if first.startswith("{"):
        return kind, ("JSON lines, but not a recording (t/src/line), session requests (cmd) or an audit log "
                      "(event load/ready/request/exit): not a recorded run")
    return kind, TEXT_NOT_A_RUN
