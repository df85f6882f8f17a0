"""Recorded files -> the run model: one loader per format (docs/telemetry.md), chosen from the
file's content (:func:`bmoe_top.parsers.sniff.sniff`) through :data:`FILE_FEEDS`.

Several files may describe one run (the CSV sink, the route trace and the console log of the
same run): each adds what it holds to the same model. A file that reads but holds nothing usable
is a problem on the run, not an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bmoe_top.parsers.bmoe_lines import Load, Progress, parse_line
from bmoe_top.parsers.recording import PROTOCOL_SOURCES, parse_recording, request_of
from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import RouteTrace, load_route_trace
from bmoe_top.parsers.sniff import sniff
from bmoe_top.parsers.strp import StrpError, parse_strp
from bmoe_top.parsers.token_csv import TokenTable, load_token_csv
from bmoe_top.parsers.transcript import Transcript, parse_transcript
from bmoe_top.tui.feed.audit import load_audit
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.sources.files import read_path

__all__ = ["FILE_FEEDS", "LOAD_ORDER", "load_data", "open_paths"]

_MIB = float(1 << 20)


def _replay(run: RunModel) -> None:
    """A file was loaded: the run is a replay unless a source already said otherwise."""
    if run.status in (Status.EMPTY, Status.READY, Status.GENERATING):
        run.set_status(Status.REPLAY, run.status_detail)


def load_token_table(run: RunModel, table: TokenTable, source: str) -> None:
    """The per-token CSV sink (docs/telemetry.md "CSV sink"): token rows, turns from the ``turn``
    column (else one turn, split by ``# summary`` lines), each turn's ``# summary``, the newest
    summary as the run's."""
    with run.lock:
        run.add_source(source)
        run.update_meta(table.meta)
        n = table.n_rows
        cols: dict[str, Any] = {("read_mib" if k == "read_bytes" else k): (v / _MIB if k == "read_bytes" else v)
                                for k, v in table.columns.items()}
        base = run.add_token_rows(cols, n)
        turn_col = cols.get("turn")
        if turn_col is not None and n and not np.all(np.isnan(turn_col[:n])):
            tv = np.nan_to_num(turn_col[:n], nan=-1)
            starts = np.flatnonzero(np.r_[True, tv[1:] != tv[:-1]])
            ids = tv[starts]
        else:
            starts = np.array([0]) if n else np.array([], dtype=int)
            ids = np.zeros(len(starts))
            # several `# summary` lines without a turn column also split turns
            rows = [s.get("row", n) for s in table.summaries]
            cuts = sorted({r for r in rows[:-1] if 0 < r < n})
            if cuts:
                starts = np.array([0, *cuts])
                ids = np.arange(len(starts), dtype=float)
        if not run.turns or run.turns[-1].first_token != base:
            for s, tid in zip(starts, ids):
                run.begin_turn(id=int(tid), first_token=base + int(s))
        extra: dict[str, str] = {}
        for j, summ in enumerate(table.summaries):
            canon = summ.get("summary", {})
            if j < len(run.turns):
                run.finish_turn(canon, turn=run.turns[j])
            extra.update({k: v for k, v in summ.get("raw", {}).items() if k not in canon})
        run.update_summary_extra(extra)
        if table.summaries:
            run.update_summary(table.summaries[-1].get("summary", {}))
        for p in table.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        run.set_status(Status.REPLAY, run.status_detail)


def load_trace(run: RunModel, trace: RouteTrace, source: str) -> None:
    """A route trace (per token, per layer, the routed experts): decode rows map to token rows
    in (turn, step) order; prefill rows get ``tok = -1 - turn``."""
    with run.lock:
        run.add_source(source)
        run.update_meta(trace.meta, overwrite=False)
        run.set_dims(n_layer=int(trace.n_layer or 0) or None, n_expert=int(trace.n_expert or 0) or None, grow=True)
        if trace.top_k:
            run.set_dims(top_k=int(trace.top_k))
        turn = np.asarray(trace.turn, dtype=np.int64)
        step = np.asarray(trace.step, dtype=np.int64)
        decode = np.asarray(trace.phase, dtype=np.int64) == 1
        key = turn * (1 << 32) + step
        uniq = np.unique(key[decode])
        tok = np.full(len(key), -1, dtype=np.int64)
        tok[decode] = np.searchsorted(uniq, key[decode])
        tok[~decode] = -1 - turn[~decode]
        run.add_routes(tok, np.asarray(trace.layer), np.asarray(trace.expert), np.asarray(trace.residency))
        for p in trace.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        _replay(run)


def load_transcript_into(run: RunModel, tr: Transcript, source: str) -> None:
    """A whole stdout capture or console log: its BMOE records (token rows only when no CSV of
    the same run gave them), end-of-run numbers (only filling gaps after a CSV), sidecar, answer,
    reasoning and prompt, log lines and problems."""
    with run.lock:
        run.add_source(source)
        had_tokens = run.tokens.n > 0
        feed = RecordFeed(run, source)
        for rec, ln in zip(tr.records, tr.record_lines):
            if had_tokens and isinstance(rec, (Progress, Load)):
                continue  # the CSV of the same run already gave the token rows
            feed.apply(rec, lineno=ln)
        run.update_summary(tr.summary, fill_only=had_tokens)
        run.update_sidecar(tr.sidecar)
        if not any(t.text_len or t.reasoning for t in run.turns):
            turn = run.ensure_turn()
            run.set_answer(tr.answer or None, tr.reasoning or None, turn=turn)
            if tr.prompt and not turn.prompt:
                run.set_prompt(tr.prompt, turn=turn)
        run.add_log_lines(tr.text_lines)
        for p in tr.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        if run.status in (Status.EMPTY, Status.READY):
            run.set_status(Status.REPLAY, run.status_detail)


def _token_csv(run: RunModel, data: bytes, source: str) -> None:
    load_token_table(run, load_token_csv(data), source)


def _route_trace(run: RunModel, data: bytes, source: str) -> None:
    load_trace(run, load_route_trace(data), source)


def _transcript(run: RunModel, data: bytes, source: str) -> None:
    load_transcript_into(run, parse_transcript(data), source)


def _sidecar(run: RunModel, data: bytes, source: str) -> None:
    """A ``key=value`` device sidecar (peak RSS, available memory, temperatures)."""
    tr = parse_transcript(data)
    with run.lock:
        run.add_source(source)
        run.update_sidecar(tr.sidecar)
        for p in tr.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)


def _recording(run: RunModel, data: bytes, source: str) -> None:
    """A ``--record`` file (:mod:`bmoe_top.parsers.recording`): protocol lines go through the
    BMOE records with their time, stderr lines to the log, a request (``stdin``) is noted so its
    turn knows its prompt. ``bmoe-top play`` reads the same entries through the live source."""
    rec = parse_recording(data)
    with run.lock:
        run.add_source(source)
        run.update_meta({f"recording_{k}": v for k, v in rec.meta.items() if k in ("source", "command")})
        feed = RecordFeed(run, source)
        for e in rec.entries:
            if e.src in PROTOCOL_SOURCES:
                feed.apply(parse_line(e.line), e.t, e.lineno)
            elif e.src == "stderr":
                run.add_log(e.line)
            else:
                req = request_of(e)
                if req is not None:
                    run.note_request(req)
        for p in rec.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        _replay(run)


def _requests(run: RunModel, data: bytes, source: str) -> None:
    """Session requests JSONL: each ``generate`` becomes a (not yet answered) turn with its prompt."""
    reqs, problems = parse_requests(data)
    with run.lock:
        run.add_source(source)
        for r in reqs:
            run.note_request({"cmd": r.cmd, "id": r.id, "prompt": r.prompt, "n_predict": r.n_predict,
                              "think": r.think, "clear_kv": r.clear_kv})
            if r.cmd == "generate" and not run.tokens.n:
                run.begin_turn(id=r.id, prompt=r.prompt, first_token=0)
        for p in problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        _replay(run)


def _audit(run: RunModel, data: bytes, source: str) -> None:
    load_audit(run, data, source)


def _strp(run: RunModel, data: bytes, source: str) -> None:
    """An STRP profile: dimensions, the experts the profile would put in the cache (the first
    ``slots`` pairs, or every ranked pair when slots is 0) as ``resident``, the rank map
    (``expert_rank``), and per layer the ranked experts, hottest first, in the log."""
    with run.lock:
        run.add_source(source)
        try:
            prof = parse_strp(data, source or "profile")
        except StrpError as exc:
            run.add_problem(source, 0, data[:24].hex(), str(exc))
            _replay(run)
            return
        run.set_dims(n_layer=prof.n_layers, n_expert=prof.n_expert)
        run.update_meta({"n_layer": prof.n_layers, "n_expert": prof.n_expert}, overwrite=False)
        run.update_meta({"profile": source, "profile_slots": prof.slots, "profile_ranked": prof.n_ranked})
        run.set_expert_rank(prof.rank_map())
        take = prof.pairs if not prof.slots else prof.pairs[: prof.slots]
        mat = np.zeros((prof.n_layers, prof.n_expert), dtype=bool)
        if len(take):
            mat[take[:, 0], take[:, 1]] = True
        run.set_resident(mat)
        run.add_log_lines(f"{source}: {w}" for w in prof.warnings)
        run.add_log(f"{source}: STRP v{prof.version}, {prof.n_layers} layers x {prof.n_expert} experts, "
                    f"{prof.n_ranked} ranked, made for {prof.slots} slots")
        for il, experts in sorted(prof.per_layer().items()):
            run.add_log(f"L{il}: " + " ".join(map(str, experts[:64])) + (" ..." if len(experts) > 64 else ""))
        run.set_status(Status.REPLAY if run.status == Status.EMPTY else run.status,
                       f"STRP profile: {prof.n_ranked} ranked experts, {prof.slots} slots")


#: Sniffed kind -> loader ``(run, data, source)``.
FILE_FEEDS: dict[str, Callable[[RunModel, bytes, str], None]] = {
    "token_csv": _token_csv,
    "route_trace": _route_trace,
    "transcript": _transcript,
    "sidecar": _sidecar,
    "recording": _recording,
    "requests": _requests,
    "audit": _audit,
    "strp": _strp,
}

#: Token rows first (CSV, recording), then the route trace, then logs: logs then only add what is
#: missing. Kinds not listed come last.
LOAD_ORDER = {"token_csv": 0, "recording": 0, "route_trace": 1, "transcript": 2}

UNRECOGNISED = ("unrecognised format (not a BMOE transcript, token CSV, route trace, recording, request log, "
                "audit log or STRP profile)")


def load_data(run: RunModel, data: bytes, source: str) -> str:
    """Add one file's content to ``run``; returns the sniffed kind."""
    kind = sniff(data, source)
    loader = FILE_FEEDS.get(kind)
    if loader is None:
        run.add_problem(source, 0, data[:120].decode("utf-8", "replace"), UNRECOGNISED)
    else:
        loader(run, data, source)
    run.add_source(source)
    return kind


def open_paths(paths: Sequence[str], run: RunModel | None = None) -> RunModel:
    """Load every path into one run model (raises
    :class:`~bmoe_top.tui.sources.files.ReplayError` for a path that cannot be read)."""
    run = run if run is not None else RunModel()
    loaded = [(str(p), read_path(p)) for p in paths]
    loaded.sort(key=lambda pd: LOAD_ORDER.get(sniff(pd[1], pd[0]), 3))
    for p, data in loaded:
        load_data(run, data, p)
    _replay(run)
    return run
