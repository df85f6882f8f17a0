"""Recorded files -> the run model: one loader per format (docs/telemetry.md), chosen from the
file's content (:func:`bmoe_top.parsers.sniff.sniff`) through :data:`FILE_FEEDS`.

Several files may describe one run (the CSV sink, the route trace and the console log of the
same run): each adds what it holds to the same model. Files of different runs are not merged
silently: :func:`open_paths` parses every file first, reads the run each says it is from
(:func:`run_facts`: model, arch, layers, experts, the end-of-run numbers; compared by
:func:`identity_conflict`), checks that no two files of token rows hold the same token
(:func:`step_collision`), and refuses a mix with :class:`MixedRunsError` naming both, unless
``allow_mixed`` (or ``keep_first``: the first file's run is loaded, the others are left out with
an alert). A file that is not a recorded run at all is a problem and an alert on the
run (the banner, and ``replay --summary`` exits non-zero with the reason), never an exception.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bmoe_top.parsers.audit import parse_audit_records
from bmoe_top.parsers.bmoe_lines import Begin, Done, Error, Load, Progress, Ready, parse_line
from bmoe_top.parsers.recording import PROTOCOL_SOURCES, Recording, parse_recording, request_of
from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import RouteTrace, load_route_trace
from bmoe_top.parsers.sniff import TEXT_NOT_A_RUN, blank_reason, sniff, sniff_reason
from bmoe_top.parsers.strp import StrpError, parse_strp
from bmoe_top.parsers.token_csv import TokenTable, generated_turns, load_token_csv
from bmoe_top.parsers.transcript import Transcript, is_loader_noise, parse_transcript
from bmoe_top.tui.feed.audit import load_audit
from bmoe_top.tui.feed.loader_log import loader_facts
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.feed.session_files import attach_requests, merge_transcript
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.sources.files import ReplayError, is_blank, open_path, read_path, read_sample, reader_map

__all__ = ["FILE_FEEDS", "LOAD_ORDER", "FileFeed", "MixedRunsError", "identity_conflict", "load_data",
           "log_facts", "open_paths", "open_replay", "run_facts", "step_collision"]

_MIB = float(1 << 20)


def _replay(run: RunModel) -> None:
    """A file was loaded: the run is a replay unless a source already said otherwise."""
    if run.status in (Status.EMPTY, Status.READY, Status.GENERATING):
        run.set_status(Status.REPLAY, run.status_detail)


def load_token_table(run: RunModel, table: TokenTable, source: str) -> None:
    """The per-token CSV sink (docs/telemetry.md "CSV sink"): token rows, one turn per generated
    turn (:func:`~bmoe_top.parsers.token_csv.generated_turns`: the ``turn`` column's 0-based
    counter, else one turn, split by ``# summary`` lines), each turn's ``# summary``, the newest
    summary as the run's. A CSV turn has no request id: the session's stdout or request log gives
    it (:mod:`bmoe_top.tui.feed.session_files`)."""
    with run.lock:
        run.add_source(source)
        run.update_meta(table.meta)
        n = table.n_rows
        cols: dict[str, Any] = {("read_mib" if k == "read_bytes" else k): (v / _MIB if k == "read_bytes" else v)
                                for k, v in table.columns.items()}
        starts, why = generated_turns(table)  # read before the run adopts the table's columns
        base = run.add_token_rows(cols, n, adopt=True)  # the parsed table is not written after this
        if why is not None:
            run.add_problem(source, 0, "turn", why)
        turns = [run.begin_turn(first_token=base + s) for s in starts]
        extra: dict[str, str] = {}
        for j, summ in enumerate(table.summaries):
            canon = summ.get("summary", {})
            if j < len(turns):
                run.finish_turn(canon, turn=turns[j])
            extra.update({k: v for k, v in summ.get("raw", {}).items() if k not in canon})
        run.update_summary_extra(extra)
        if table.summaries:
            last = table.summaries[-1]
            run.update_summary(last.get("summary", {}), derived=last.get("derived", ()))
        for p in table.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        if table.impossible:
            plural = "" if table.impossible == 1 else "s"
            run.add_alert(f"{os.path.basename(source) or source}: {table.impossible:,} impossible value{plural} read "
                          "as missing", listed=True)
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


#: The records of a transcript that a CSV of the same run already turned into token rows and turns.
_TURN_RECORDS = (Progress, Load, Begin, Done, Error)


def load_transcript_into(run: RunModel, tr: Transcript, source: str) -> None:
    """A whole stdout capture or console log: its BMOE records (token rows and turns only when no
    CSV of the same run gave them; else its generations go into the CSV's turns:
    :func:`~bmoe_top.tui.feed.session_files.merge_transcript`), end-of-run numbers (only filling
    gaps after a CSV, and replacing what the CSV only derived: a TTFT the log prints beats the
    CSV's load + prefill), sidecar, answer, reasoning and prompt, log lines and problems."""
    with run.lock:
        run.add_source(source)
        had_tokens = run.tokens.n > 0
        merging = bool(run.turns)  # a CSV of the same run opened its turns (with or without token rows)
        feed = RecordFeed(run, source)
        for rec, ln in zip(tr.records, tr.record_lines):
            if merging and isinstance(rec, _TURN_RECORDS):
                continue  # merged below
            feed.apply(rec, lineno=ln)
        if merging:
            merge_transcript(run, tr, source)
        run.update_summary(tr.summary, fill_only=had_tokens or merging, derived=tr.derived)
        run.update_meta(log_facts(tr.text_lines), overwrite=False)
        run.update_sidecar(tr.sidecar)
        if (tr.answer or tr.reasoning or tr.prompt or tr.summary or run.turns) and \
                not any(t.text_len or t.reasoning for t in run.turns):
            turn = run.ensure_turn()  # a one-shot log's text or numbers: its turn (refused requests alone: none)
            run.set_answer(tr.answer or None, tr.reasoning or None, turn=turn)
            if tr.prompt and not turn.prompt:
                run.set_prompt(tr.prompt, turn=turn)
        if not merging and tr.summary_lines and tr.summary and len(run.turns) == 1 and run.turns[0].done is None:
            run.finish_turn(tr.summary, turn=run.turns[0])  # a one-shot run: its end-of-run lines end its turn
        run.add_log_lines(tr.text_lines)
        for p in tr.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        if run.status in (Status.EMPTY, Status.READY):
            run.set_status(Status.REPLAY, run.status_detail)


def log_facts(lines: Sequence[str]) -> dict[str, str]:
    """Run-header facts of a log's lines (:func:`~bmoe_top.tui.feed.loader_log.loader_facts`), the
    first value of each key."""
    out: dict[str, str] = {}
    for line in lines:
        for k, v in loader_facts(line).items():
            out.setdefault(k, v)
    return out


def _sidecar(run: RunModel, tr: Transcript, source: str) -> None:
    """A ``key=value`` device sidecar (peak RSS, available memory, temperatures)."""
    with run.lock:
        run.add_source(source)
        run.update_sidecar(tr.sidecar)
        for p in tr.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)


def _recording(run: RunModel, rec: Recording, source: str) -> None:
    """A ``--record`` file (:mod:`bmoe_top.parsers.recording`): protocol lines go through the
    BMOE records with their time, stderr lines to the log (and the run header facts they give),
    a request (``stdin``) is noted so its turn knows its prompt. ``bmoe-top play`` reads the same
    entries through the live source."""
    with run.lock:
        run.add_source(source)
        run.update_meta({f"recording_{k}": v for k, v in rec.meta.items() if k in ("source", "command")})
        feed = RecordFeed(run, source)
        facts: dict[str, str] = {}
        for e in rec.entries:
            if e.src in PROTOCOL_SOURCES:
                feed.apply(parse_line(e.line), e.t, e.lineno)
            elif e.src == "stderr":
                run.add_log(e.line)
                for k, v in loader_facts(e.line).items():
                    facts.setdefault(k, v)
            else:
                req = request_of(e)
                if req is not None:
                    run.note_request({**req, "sent_t": e.t} if e.t is not None else req)
        run.update_meta(facts, overwrite=False)
        for p in rec.problems:
            run.add_problem(source, p.lineno, p.text, p.reason)
        _replay(run)


def _recording_identity(rec: Recording) -> dict[str, str]:
    """The recorded session's ``BMOE_READY`` (arch, model), else its stderr's loader facts."""
    facts: dict[str, str] = {}
    for e in rec.entries:
        if e.src in PROTOCOL_SOURCES and "BMOE_READY" in e.line:
            r = parse_line(e.line)
            if isinstance(r, Ready):
                out = {"arch": r.arch} if isinstance(r.arch, str) else {}
                if isinstance(r.extra.get("model"), str):
                    out["model"] = r.extra["model"]
                return {**{k: facts[k] for k in ("model", "arch") if k in facts}, **out}
        elif e.src == "stderr":
            for k, v in loader_facts(e.line).items():
                facts.setdefault(k, v)
    return {k: facts[k] for k in ("model", "arch") if k in facts}


def _transcript_identity(tr: Transcript) -> dict[str, str]:
    facts = log_facts(tr.text_lines)
    return {**{k: facts[k] for k in ("model", "arch") if k in facts}, **tr.identity}


def _audit_identity(data: bytes) -> dict[str, str]:
    """The model of the audit log's first ``load`` record (path, else name)."""
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if b'"load"' not in line:
            continue
        records, _ = parse_audit_records(line, lineno)
        for r in records:
            m = r.data.get("model") if r.event == "load" else None
            if isinstance(m, dict) and isinstance(m.get("path") or m.get("name"), str):
                return {"model": str(m.get("path") or m.get("name"))}
    return {}


def _requests(run: RunModel, parsed: tuple[list[Any], list[Any]], source: str) -> None:
    """Session requests JSONL: every request is noted; once every file is loaded each ``generate``
    request gives its turn (or turn-less request) its prompt
    (:func:`~bmoe_top.tui.feed.session_files.attach_requests`)."""
    reqs, problems = parsed
    with run.lock:
        run.add_source(source)
        for r in reqs:
            run.note_request({"cmd": r.cmd, "id": r.id, "prompt": r.prompt, "n_predict": r.n_predict,
                              "think": r.think, "clear_kv": r.clear_kv})
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
        run.set_resident(mat, after_row=-1)  # the profile's plan: the cache from the first row on
        run.add_log_lines(f"{source}: {w}" for w in prof.warnings)
        run.add_log(f"{source}: STRP v{prof.version}, {prof.n_layers} layers x {prof.n_expert} experts, "
                    f"{prof.n_ranked} ranked, made for {prof.slots} slots")
        for il, experts in sorted(prof.per_layer().items()):
            run.add_log(f"L{il}: " + " ".join(map(str, experts[:64])) + (" ..." if len(experts) > 64 else ""))
        run.set_status(Status.REPLAY if run.status == Status.EMPTY else run.status,
                       f"STRP profile: {prof.n_ranked} ranked experts, {prof.slots} slots")


@dataclass(frozen=True, slots=True)
class FileFeed:
    """How one format is loaded: ``parse(data)`` -> a parsed object, ``apply(run, parsed, source)``
    adds it to the run, ``identity(parsed)`` the run it says it is from (``model``, ``arch``);
    ``stream(file)``, when the format has it, parses an open binary file in blocks (a file is then
    never held whole, and has no size limit)."""

    parse: Callable[[bytes], Any]
    apply: Callable[[RunModel, Any, str], None]
    identity: Callable[[Any], Mapping[str, str]] = lambda _parsed: {}
    stream: Callable[[io.BufferedIOBase], Any] | None = None


def _raw(data: bytes) -> bytes:
    return data


#: Sniffed kind -> its :class:`FileFeed`.
FILE_FEEDS: dict[str, FileFeed] = {
    "token_csv": FileFeed(load_token_csv, load_token_table, lambda t: t.identity,
                          lambda f: load_token_csv(f, pmap=reader_map())),
    "route_trace": FileFeed(load_route_trace, load_trace, lambda t: t.identity),
    "transcript": FileFeed(parse_transcript, load_transcript_into, _transcript_identity),
    "sidecar": FileFeed(parse_transcript, _sidecar),
    "recording": FileFeed(parse_recording, _recording, _recording_identity),
    "requests": FileFeed(parse_requests, _requests),
    "audit": FileFeed(_raw, _audit, _audit_identity),
    "strp": FileFeed(_raw, _strp),
}

#: Token rows first (CSV, recording), then the route trace, then logs: logs then only add what is
#: missing. Kinds not listed come last (a request log: its prompts are matched once all are in).
LOAD_ORDER = {"token_csv": 0, "recording": 0, "route_trace": 1, "transcript": 2}


class MixedRunsError(ReplayError):
    """Files of different runs given together without ``allow_mixed``: another model, arch,
    shape or end-of-run summary, or token rows of the same tokens twice."""


def _model_name(model: str) -> str:
    name = model.replace("\\", "/").rsplit("/", 1)[-1].strip().lower()
    return name[:-5] if name.endswith(".gguf") else name


#: The end-of-run numbers two files of one run both state identically (the CSV sink's ``# summary``
#: and the log's ``generation:``/``prefill:`` lines are printed from the same figures): integers
#: exactly, seconds to the 3 decimals both print (with a little room for rounding).
_SUMMARY_FACTS = {"tokens": "end-of-run tokens", "n_prompt": "prompt tokens", "load_s": "load s",
                  "prefill_s": "prefill s"}
_DIM_FACTS = ("n_layer", "n_expert")


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _facts_of(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k in _DIM_FACTS:
        v = _number(meta.get(k))
        if v is not None and v > 0:
            out[k] = f"{v:g}"
    for k in _SUMMARY_FACTS:
        v = _number(summary.get(k))
        if v is not None and v >= 0:
            out[k] = f"{v:g}"
    return out


def _ready_of(records: Sequence[Any]) -> Ready | None:
    return next((r for r in records if isinstance(r, Ready)), None)


def run_facts(kind: str, parsed: Any) -> dict[str, str]:
    """What a parsed file says about the run it is from: ``model`` and ``arch`` (the file's
    ``identity``), ``n_layer`` and ``n_expert`` when its header or ``BMOE_READY`` states them (never
    guessed from the rows), and the end-of-run ``tokens``, ``n_prompt``, ``load_s``, ``prefill_s``
    of its last summary (of a file of several turns, ``load_s`` alone). Values as text; a key the
    file does not state is absent."""
    feed = FILE_FEEDS.get(kind)
    if feed is None or parsed is None:
        return {}
    out = dict(feed.identity(parsed))
    if isinstance(parsed, TokenTable):
        out.update(_facts_of(parsed.meta, _run_wide(parsed.summary, len(parsed.summaries))))
    elif isinstance(parsed, RouteTrace):
        out.update(_facts_of(parsed.meta, {}))
    elif isinstance(parsed, Transcript):
        ready = _ready_of(parsed.records)
        out.update(_facts_of(ready.extra if ready is not None else {},
                             _run_wide(parsed.summary, len(parsed.generations))))
    return out


def _run_wide(summary: Mapping[str, Any], turns: int) -> Mapping[str, Any]:
    """The end-of-run numbers that hold for the whole run: of a file of several turns (a session)
    only the model load; its last turn's tokens and prefill are not the other file's last when one
    of the two ends earlier (session_files compares them turn by turn)."""
    return summary if turns <= 1 else {k: v for k, v in summary.items() if k == "load_s"}


def identity_conflict(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """Why two files' facts (:func:`run_facts`) are different runs (``"model X vs Y"``), None when
    they may be one run: a key both state must agree (the model by its file name, case aside;
    layers and experts exactly; the end-of-run numbers as :data:`_SUMMARY_FACTS` says). A key only
    one file states proves nothing."""
    for key in ("model", "arch"):
        x, y = a.get(key), b.get(key)
        if x and y and (_model_name(x) != _model_name(y) if key == "model" else x.strip() != y.strip()):
            return f"{key} {x} vs {y}"
    for key in (*_DIM_FACTS, *_SUMMARY_FACTS):
        fx, fy = _number(a.get(key)), _number(b.get(key))
        if fx is None or fy is None:
            continue
        room = 0.0015 + 0.005 * max(abs(fx), abs(fy)) if key.endswith("_s") else 0.0
        if abs(fx - fy) > room:
            return f"{_SUMMARY_FACTS.get(key, key)} {fx:,g} vs {fy:,g}"
    return None


def _token_keys(parsed: Any) -> np.ndarray | None:
    """The (turn, step) of every token row a per-token CSV adds, as ``turn << 32 | step`` (turn 0
    without a ``turn`` column); None when the file holds no such rows."""
    if not isinstance(parsed, TokenTable) or not parsed.n_rows or "step" not in parsed.columns:
        return None
    step = parsed.columns["step"][: parsed.n_rows]
    turn_col = parsed.columns.get("turn")
    turn = turn_col[: parsed.n_rows] if turn_col is not None else np.zeros(parsed.n_rows)
    ok = np.isfinite(step) & np.isfinite(turn) & (step >= 0) & (step < 1 << 32) & (turn >= 0) & (turn < 1 << 30)
    return np.unique(turn[ok].astype(np.int64) * (1 << 32) + step[ok].astype(np.int64))


def step_collision(a: Any, b: Any) -> str | None:
    """Why two parsed files cannot both be token rows of one run: each holds a row for the same
    token (turn and step), so loading both would count those tokens twice (two runs, or one file
    given twice). None when either adds no token rows or their tokens are disjoint."""
    ka, kb = _token_keys(a), _token_keys(b)
    if ka is None or kb is None:
        return None
    both = np.intersect1d(ka, kb, assume_unique=True)
    if not len(both):
        return None
    first = int(both[0])
    return (f"both hold token rows for turn {first >> 32}, step {first & 0xFFFFFFFF}"
            f"{f' and {len(both) - 1:,} more tokens' if len(both) > 1 else ''}")


def _describe(facts: Mapping[str, str]) -> str:
    parts = [f"{k} {facts[k]}" for k in ("model", "arch") if facts.get(k)]
    if not parts:
        parts.append("no model or arch")
    if facts.get("tokens"):
        parts.append(f"{_number(facts['tokens']) or 0:,g} tokens")
    return ", ".join(parts)


def measures_a_run(tr: Transcript) -> bool:
    """Whether a text capture holds anything of a run: BMOE lines, end-of-run lines, a number in a
    ``key=value`` line, or a loader log line. Prose alone (a ``--help`` or ``--version`` output, a
    ``.txt`` of notes) does not: its summary would be every field missing."""
    if tr.records or tr.summary or tr.info or tr.unparsed:
        return True
    if any(sl.kind != "sidecar" for _n, sl in tr.summary_lines):
        return True
    if any(_number(v) is not None for v in tr.sidecar.values()):
        return True
    return any(is_loader_noise(line) for line in tr.text_lines)


def load_data(run: RunModel, data: bytes, source: str, kind: str | None = None, parsed: Any = None) -> str:
    """Add one file's content to ``run`` (``kind``/``parsed`` when the caller sniffed and parsed it
    already); returns the sniffed kind. A file that is not a recorded run becomes a problem and an
    alert (``<file> is not a recorded run: <why>``)."""
    if kind is None:
        kind = sniff(data, source)
    feed = FILE_FEEDS.get(kind)
    if feed is None:
        _kind, why = sniff_reason(data, source)
        why = why or blank_reason(data)
        run.add_problem(source, 0, data[:120].decode("utf-8", "replace"), why)
        run.add_alert(f"{os.path.basename(source) or source}: {why}")
    else:
        feed.apply(run, feed.parse(data) if parsed is None else parsed, source)
    run.add_source(source)
    return kind


def open_paths(paths: Sequence[str], run: RunModel | None = None, *, allow_mixed: bool = False) -> RunModel:
    """Load every path into one run model (:func:`open_replay` without the list of files that are
    not recorded runs: those are problems and alerts on the run)."""
    return open_replay(paths, run, allow_mixed=allow_mixed)[0]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _mixed(pa: str, fa: Mapping[str, str], pa_parsed: Any, pb: str, fb: Mapping[str, str],
           pb_parsed: Any) -> str | None:
    """Why the files ``pa`` and ``pb`` cannot be loaded as one run, None when they may be one."""
    differs = identity_conflict(fa, fb) or step_collision(pa_parsed, pb_parsed)
    if differs is not None and _same_file(pa, pb):
        return "the same file given twice: its rows would count twice"
    return differs


def open_replay(paths: Sequence[str], run: RunModel | None = None, *, allow_mixed: bool = False,
                keep_first: bool = False) -> tuple[RunModel, list[tuple[str, str]]]:
    """Load every path into one run model; returns it and ``(path, why)`` for each file that is
    not a recorded run. Raises :class:`~bmoe_top.tui.sources.files.ReplayError` for a path that
    cannot be read, and :class:`MixedRunsError` (naming both files and what differs) for files
    of different runs (:func:`identity_conflict`, :func:`step_collision`). With ``allow_mixed``
    every file is loaded and the run gets an alert that it mixes runs; with ``keep_first`` (the
    replay screen) the files of the first file's run are loaded and each other file is left out
    with an alert that says why."""
    run = run if run is not None else RunModel()
    loaded: list[tuple[str, bytes, str, Any, Mapping[str, str]]] = []
    not_runs: list[tuple[str, str]] = []
    for p in paths:
        # the kind from the file's ends; a format read in blocks never holds the file whole
        data, size = read_sample(p)
        kind, why = sniff_reason(data, str(p))
        if is_blank(p, data, size):  # an empty .csv sniffs as a CSV by its name; it holds no run
            kind, why = "unknown", blank_reason(data)
        feed = FILE_FEEDS.get(kind)
        parsed = None
        if feed is not None:
            if feed.stream is not None:
                with open_path(p) as f:
                    parsed = feed.stream(f)
            else:
                data = read_path(p)
                parsed = feed.parse(data)
            if isinstance(parsed, Transcript) and not measures_a_run(parsed):
                kind, why, feed, parsed = "unknown", TEXT_NOT_A_RUN, None, None
        if feed is None:
            not_runs.append((str(p), why))
        loaded.append((str(p), data, kind, parsed, run_facts(kind, parsed)))
    kept: list[tuple[str, bytes, str, Any, Mapping[str, str]]] = []
    for entry in loaded:
        pb, _d, _k, parsed_b, fb = entry
        clash = next(((pa, fa, differs) for pa, _da, _ka, parsed_a, fa in kept
                      if (differs := _mixed(pa, fa, parsed_a, pb, fb, parsed_b)) is not None), None)
        if clash is None:
            kept.append(entry)
            continue
        pa, fa, differs = clash
        if allow_mixed:
            run.add_alert(f"files of different runs loaded together: {os.path.basename(pa)} ({_describe(fa)}), "
                          f"{os.path.basename(pb)} ({_describe(fb)}): {differs}")
            kept.append(entry)
        elif keep_first:
            run.add_alert(f"{os.path.basename(pb)} left out: not the run of {os.path.basename(pa)} ({differs}; "
                          "--allow-mixed loads them together)")
        elif _same_file(pa, pb):
            raise MixedRunsError(f"{pb}: {differs}: not merged")
        else:
            raise MixedRunsError(f"{pa} ({_describe(fa)}) and {pb} ({_describe(fb)}) are from different runs "
                                 f"({differs}): not merged (--allow-mixed loads them together anyway)")
    kept.sort(key=lambda x: LOAD_ORDER.get(x[2], 3))
    for p, data, kind, parsed, _facts in kept:
        load_data(run, data, p, kind, parsed)
    attach_requests(run)
    _replay(run)
    return run, not_runs
