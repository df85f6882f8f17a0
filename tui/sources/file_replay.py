"""Replay source: recorded files of every format, sniffed from content, into one :class:`RunModel`.

Several paths may describe one run (the CSV sink, the route trace and the console log of the same
run): each adds what it holds. No Textual import.

Errors: :class:`ReplayError` (one clear sentence) for a path that cannot be read at all. A file
that reads but holds nothing usable is recorded as a problem on the run, not raised.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from bmoe_top.tui.run import RunModel


class ReplayError(Exception):
    """A path that cannot be replayed (missing, unreadable, a directory)."""


#: Recordings bigger than this are refused rather than read whole (2 GiB).
MAX_FILE_BYTES = 2 << 30


def read_path(path: str | os.PathLike) -> bytes:
    """The bytes of ``path``; raises :class:`ReplayError` with a one-line reason."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ReplayError(f"{p}: is a directory, not a recorded run")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ReplayError(f"{p}: {size / 2**30:.1f} GiB is larger than the 2 GiB replay limit")
        return p.read_bytes()
    except FileNotFoundError:
        raise ReplayError(f"{p}: no such file") from None
    except PermissionError:
        raise ReplayError(f"{p}: permission denied") from None
    except OSError as e:
        raise ReplayError(f"{p}: cannot read ({e.strerror or e})") from None


def load_recording(run: RunModel, data: bytes, source: str) -> None:
    """A ``--record`` file: one JSON object per line ``{"t": unix_s, "src": ..., "line": str}``.

    stdout/socket lines go through the BMOE line parser with their timestamp; stderr lines go to
    the log; a request line (``src == "stdin"``) is noted so turns know their prompt.
    """
    from bmoe_top.parsers.bmoe_lines import parse_line
    from bmoe_top.parsers.textio import iter_lines

    for lineno, text in iter_lines(data):
        if not text.strip():
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            run.add_problem(source, lineno, text, "not a JSON object")
            continue
        if not isinstance(obj, dict):
            run.add_problem(source, lineno, text, "not a JSON object")
            continue
        if "recording" in obj and "line" not in obj:
            with run.lock:
                for k in ("source", "command"):
                    if k in obj:
                        run.meta[f"recording_{k}"] = str(obj[k])
            continue
        line = obj.get("line")
        if not isinstance(line, str):
            run.add_problem(source, lineno, text, "recording line without a string 'line'")
            continue
        t = obj.get("t")
        t = float(t) if isinstance(t, (int, float)) else None
        src = obj.get("src", "stdout")
        if src == "stderr":
            with run.lock:
                run.log.append(line)
                run.touch()
        elif src == "stdin":
            try:
                req = orjson.loads(line)
            except orjson.JSONDecodeError:
                req = None
            if isinstance(req, dict):
                run.note_request(req)
        else:
            run.ingest(parse_line(line), t=t, lineno=lineno, source=source)


def load_data(run: RunModel, data: bytes, source: str) -> str:
    """Add one file's content to ``run``; returns the sniffed kind."""
    from bmoe_top.parsers.sniff import sniff

    kind = sniff(data, source)
    if kind == "token_csv":
        from bmoe_top.parsers.token_csv import load_token_csv

        run.load_token_table(load_token_csv(data), source)
    elif kind == "route_trace":
        from bmoe_top.parsers.route_trace import load_route_trace

        run.load_route_trace(load_route_trace(data), source)
    elif kind == "transcript":
        from bmoe_top.parsers.transcript import parse_transcript

        run.load_transcript(parse_transcript(data), source)
    elif kind == "sidecar":
        from bmoe_top.parsers.transcript import parse_transcript

        tr = parse_transcript(data)
        run.load_sidecar(tr.sidecar, source)
        for p in tr.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
    elif kind == "recording":
        load_recording(run, data, source)
    elif kind == "requests":
        from bmoe_top.parsers.requests import parse_requests

        reqs, problems = parse_requests(data)
        run.load_requests(reqs, problems, source)
    elif kind == "audit":
        from bmoe_top.tui.sources.audit_tail import load_audit_into_run

        load_audit_into_run(run, data, source)
    elif kind == "strp":
        from bmoe_top.tui.sources.audit_tail import load_strp_into_run

        load_strp_into_run(run, data, source)
    else:
        run.add_problem(source, 0, data[:120].decode("utf-8", "replace"),
                        "unrecognised format (not a BMOE transcript, token CSV, route trace, "
                        "recording, request log, audit log or STRP profile)")
    with run.lock:
        if source not in run.sources:
            run.sources.append(source)
        run.touch()
    return kind


def open_paths(paths: list[str], run: RunModel | None = None) -> RunModel:
    """Load every path into one run model (raises :class:`ReplayError` for an unreadable path)."""
    run = run or RunModel()
    # Token rows first (CSV), then the route trace, then logs: logs then only add what is missing.
    loaded = [(p, read_path(p)) for p in paths]
    from bmoe_top.parsers.sniff import sniff

    order = {"token_csv": 0, "recording": 0, "route_trace": 1, "transcript": 2}
    loaded.sort(key=lambda pd: order.get(sniff(pd[1], str(pd[0])), 3))
    for p, data in loaded:
        load_data(run, data, str(p))
    with run.lock:
        if run.status in ("empty", "ready", "generating"):
            run.status = "replay"
        run.touch()
    return run
