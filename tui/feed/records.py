"""BMOE records -> the run model: one table entry per record type (docs/telemetry.md).

:class:`RecordFeed` takes what :func:`bmoe_top.parsers.bmoe_lines.parse_line` returns (records,
:class:`~bmoe_top.parsers.bmoe_lines.TextLine`, :class:`~bmoe_top.parsers.bmoe_lines.BadLine`) and
writes it to one :class:`~bmoe_top.tui.model.RunModel` through the model's write API. It keeps
what a stream of records needs across lines (the answer being rebuilt, a ``BMOE_LOAD`` waiting
for its token, the step of the newest token) and nothing else. It never sets the run's status:
a file loader or a live source's state does (``bmoe_top.tui.feed.live``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.parsers.sanitize import brief
from bmoe_top.tui.model import RunModel

__all__ = ["DONE_FIELDS", "DONE_SUMMARY", "TTFT_TURN", "RecordFeed"]

#: ``BMOE_DONE`` fields kept in the turn's ``done``.
DONE_FIELDS = ("id", "cancelled", "tokens", "tok_s", "prefill_s", "load_s", "cache_hit_pct", "n_prompt", "n_past",
               "cache_resident_mib", "cache_budget_mib", "spec_recall_pct", "stall_s_tok", "mgmt_s_tok")
#: ``BMOE_DONE`` field -> run summary key (the newest turn's end record is the run's summary):
#: the contract's fields, and the additive ones real runtimes send (bmoe-cli in session mode:
#: prefill tok/s, compute and I/O per token; bmoe-run: TTFT, both hit % definitions, payload and
#: page-aligned MiB, evictions and re-reads, RSS; docs/telemetry.md "Additive fields").
DONE_SUMMARY = {
    "tokens": "tokens", "tok_s": "tok_s", "prefill_s": "prefill_s", "load_s": "load_s",
    "cache_hit_pct": "cache_hit_pct", "n_prompt": "n_prompt", "cache_resident_mib": "resident_mib",
    "cache_budget_mib": "budget_mib", "stall_s_tok": "stall_s_tok", "mgmt_s_tok": "mgmt_s_tok",
    "spec_recall_pct": "spec_recall_pct", "read_mib": "read_mib",
    "prefill_tps": "prefill_tps", "compute_s_tok": "compute_s_tok", "io_s_tok": "io_s_tok", "ttft_s": "ttft_s",
    "read_mib_tok": "read_mib_per_tok", "xfer_mib": "xfer_mib", "xfer_mib_tok": "xfer_mib_tok",
    "hit_pct_decode": "hit_pct_decode", "hit_pct_since_load": "hit_pct_since_load",
    "cache_evictions": "cache_evictions", "cache_rereads": "cache_rereads", "decode_tok_s": "decode_tok_s",
    "rss_mib": "rss_mib", "peak_rss_mib": "peak_rss_mib",
}
#: ``BMOE_DONE`` totals of the turn -> per-token summary keys (divided by the turn's tokens).
DONE_PER_TOKEN = {"majflt": "majflt/tok", "cpu_s": "cpu_s/tok"}
#: ``BMOE_READY`` extras that are run-header entries (-> the header's name).
READY_META = {"n_layer": "n_layer", "n_expert": "n_expert", "n_expert_used": "n_expert_used", "model": "model",
              "n_threads": "threads", "io_threads": "io_threads", "o_direct": "o_direct",
              "expert_bank_mib": "expert_bank_MiB"}

#: How a session's TTFT is counted (``RunModel.summary_notes``): per turn, without the model load
#: that bmoe-cli's end-of-run ``TTFT`` (and a CSV ``# summary``) adds to it.
TTFT_TURN = "per turn: from the request to the turn's first token; model load not included"

Handler = Callable[[Any, "float | None", int], None]


def _number(v: Any) -> float | None:
    """``v`` when it is a JSON number (not a bool, not NaN), else None."""
    if type(v) is int or type(v) is float:
        return None if v != v else float(v)
    return None


class RecordFeed:
    """Apply BMOE records to ``run`` (see the module docstring). ``source`` names the input in
    problem entries (a path, ``child``, ``socket``)."""

    def __init__(self, run: RunModel, source: str = "") -> None:
        self.run = run
        self.source = source
        self._acc = bl.TextAccumulator()
        self._load: tuple[float | None, float | None] | None = None  # a BMOE_LOAD for the next token
        self._turn_tokens = 0  # tokens of the current turn so far
        self._first_t: float | None = None  # arrival time of the current turn's first token
        self._last_step = math.nan  # step of the newest token
        self._handlers: dict[type, Handler] = {
            bl.TextLine: self._text_line,
            bl.BadLine: self._bad_line,
            bl.Ready: self._ready,
            bl.Begin: self._begin,
            bl.Load: self._load_line,
            bl.Progress: self._progress,
            bl.Done: self._done,
            bl.Error: self._error,
            bl.Route: self._route,
            bl.Resident: self._resident,
            bl.Unknown: self._unknown,
        }

    def apply(self, rec: Any, t: float | None = None, lineno: int = 0) -> None:
        """Apply one record; ``t`` is the unix time its line arrived (live sources, recordings),
        ``lineno`` its line number (files)."""
        handler = self._handlers.get(type(rec))
        with self.run.lock:
            self.run.mark_line()
            if handler is None:
                self.run.add_log(str(rec))
            else:
                handler(rec, t, lineno)

    # -- one method per record type ----------------------------------------------------------------
    def _prefix(self, rec: Any) -> None:
        if rec.prefix:
            self.run.add_log(rec.prefix)

    def _text_line(self, rec: bl.TextLine, t: float | None, lineno: int) -> None:
        self.run.add_log(rec.text)

    def _bad_line(self, rec: bl.BadLine, t: float | None, lineno: int) -> None:
        self.run.add_problem(self.source, lineno, rec.text, rec.reason)

    def _unknown(self, rec: bl.Unknown, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        self.run.add_log(f"BMOE_{rec.tag} {brief(rec.fields)}")

    def _ready(self, rec: bl.Ready, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        run = self.run
        run.set_ready({"load_s": rec.load_s, "arch": rec.arch, "n_ctx": rec.n_ctx, **rec.extra})
        if rec.arch:
            run.update_meta({"arch": rec.arch}, overwrite=False)
        run.update_meta({"n_ctx": rec.n_ctx, **{dst: rec.extra.get(src) for src, dst in READY_META.items()}})
        if rec.load_s is not None:
            run.update_summary({"load_s": rec.load_s})

    def _begin(self, rec: bl.Begin, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        req = self.run.find_request(rec.id)
        prompt = req.get("prompt") if req is not None else None
        self.run.begin_turn(id=rec.id, prompt=prompt if isinstance(prompt, str) else None)
        self._new_turn()

    def _new_turn(self) -> None:
        self._acc.reset()
        self._turn_tokens = 0
        self._first_t = None

    def _load_line(self, rec: bl.Load, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        self._load = (rec.mb, rec.ms)

    def _text(self, rec: bl.Progress | bl.Done) -> None:
        """The record's answer and reasoning into the current turn (a rewrite replaces them)."""
        acc = self._acc
        before = acc.rewrites
        reasoning = acc.feed_reasoning(rec)
        answer = acc.feed_answer(rec)
        if acc.rewrites != before:
            self.run.set_answer(acc.text, acc.reasoning)
        elif answer or reasoning:
            self.run.append_answer(answer, reasoning)

    def _progress(self, rec: bl.Progress, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        run = self.run
        turn = run.ensure_turn()
        self._text(rec)
        row: dict[str, float | int | None] = {
            "step": rec.step, "steps": rec.steps, "turn": turn.index, "t": t,
            "wall_ms": rec.wall_ms, "io_ms": rec.io_ms, "compute_ms": rec.compute_ms,
            "mgmt_ms": rec.mgmt_ms, "stall_ms": rec.stall_ms, "read_mib": rec.read_mb,
            "cache_hit_pct": rec.cache_hit_pct, "text_end": turn.text_len,
        }
        if rec.pagecache_mb is not None:  # the tiers (docs/memory.md "The three tiers in bmoe-run")
            row["pagecache_mib"] = rec.pagecache_mb
            if rec.read_mb is not None:
                row["disk_mib"] = max(0.0, rec.read_mb - rec.pagecache_mb)
            misses, pc = rec.raw.get("misses"), rec.raw.get("misses_pagecache")
            if type(misses) is int and type(pc) is int:
                row["misses_disk"] = max(0, misses - pc)
        if self._load is not None:
            row["load_mib"], row["load_ms"] = self._load
            self._load = None
        names = bl.Progress.NAMES
        for k, v in rec.raw.items():
            if (type(v) is float or type(v) is int) and k not in names:
                row[k] = v
        run.add_token_row(row)
        if not self._turn_tokens:
            self._first_t = t
        resident, budget = _number(rec.raw.get("resident_mib")), _number(rec.raw.get("budget_mib"))
        if resident is not None or budget is not None:  # the cache from the first token on
            run.set_cache_mib(resident_mib=resident, budget_mib=budget)
        self._turn_tokens += 1
        self._last_step = math.nan if rec.step is None else float(rec.step)

    def _done(self, rec: bl.Done, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        run = self.run
        turn = run.ensure_turn()
        fields: dict[str, Any] = {k: getattr(rec, k) for k in DONE_FIELDS}
        fields.update(rec.extra)
        if rec.text is not None and len(rec.text) >= turn.text_len:
            self._text(rec)
        run.finish_turn(fields, cancelled=bool(rec.cancelled))
        summary: dict[str, float | int | None] = {}
        for src, dst in DONE_SUMMARY.items():
            v = fields.get(src)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                summary[dst] = v
        if rec.tok_s:
            summary["s_per_tok"] = 1.0 / float(rec.tok_s)
        read = fields.get("read_mib")
        if isinstance(read, (int, float)) and rec.tokens and "read_mib_per_tok" not in summary:
            summary["read_mib_per_tok"] = float(read) / float(rec.tokens)
        for src, dst in DONE_PER_TOKEN.items():
            v = fields.get(src)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and rec.tokens:
                summary[dst] = float(v) / float(rec.tokens)
        if "ttft_s" not in summary:  # measured: from the request to this turn's first token
            ttft = self._measured_ttft(rec.id)
            if ttft is not None:
                summary["ttft_s"] = ttft
        run.update_summary(summary)
        if "ttft_s" in summary:
            run.set_summary_notes({**run.summary_notes, "ttft_s": TTFT_TURN})
        run.set_cache_mib(resident_mib=rec.cache_resident_mib, budget_mib=rec.cache_budget_mib)
        self._new_turn()

    def _measured_ttft(self, request_id: int | None) -> float | None:
        """Seconds from sending request ``request_id`` (its ``sent_t``) to this turn's first token,
        when both times are known (a live session, a recording)."""
        req = self.run.find_request(request_id)
        sent = req.get("sent_t") if req is not None else None
        if self._first_t is None or not isinstance(sent, (int, float)) or self._first_t < sent:
            return None
        return float(self._first_t - sent)

    def _error(self, rec: bl.Error, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        msg = rec.msg or "(no message)"
        self.run.add_log(f"BMOE_ERROR id={rec.id} fatal={rec.fatal}: {msg}")
        if self.run.reject_request(rec.id, msg, fatal=bool(rec.fatal)):
            self._new_turn()  # refused before its first token: no turn

    def _route(self, rec: bl.Route, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        run = self.run
        experts = rec.experts or []
        hits = rec.hit or []
        if rec.phase == "prefill":
            turn = run.current_turn()
            tok = -1 - (turn.index if turn is not None else 0)
        else:  # the line for a token precedes or follows its BMOE_PROGRESS: key by the step
            tok = run.tokens.n if self._route_before_progress(rec) else run.tokens.n - 1
        if not any(experts):
            run.set_dims(n_layer=len(experts), grow=True)
            return
        run.add_route_lists(tok, experts, hits, rec.tier)
        run.set_dims(n_layer=len(experts), grow=True)
        if rec.phase != "prefill" and "n_expert_used" not in run.meta:
            run.set_dims(top_k=max(map(len, experts)), grow=True)  # a prefill row is the union over the batch

    def _route_before_progress(self, rec: bl.Route) -> bool:
        """True when a decode BMOE_ROUTE belongs to the token whose BMOE_PROGRESS is still to come."""
        if not self._turn_tokens or not self.run.tokens.n:
            return True
        return rec.step is None or math.isnan(self._last_step) or rec.step > self._last_step

    def _resident(self, rec: bl.Resident, t: float | None, lineno: int) -> None:
        self._prefix(rec)
        run = self.run
        resident = rec.resident or []
        n_layer = max(len(resident), run.n_layer or 0)
        n_expert = rec.n_expert or run.n_expert
        if n_expert is None:
            n_expert = max(0, 1 + max(map(max, filter(None, resident)), default=-1))  # ids below 0 size nothing
        lens = list(map(len, resident))
        expert = np.fromiter(chain.from_iterable(resident), dtype=np.int64, count=sum(lens))
        layer = np.repeat(np.arange(len(resident), dtype=np.int64), lens)
        ok = (expert >= 0) & (expert < n_expert)
        m = np.zeros((n_layer, n_expert), dtype=bool)
        m[layer[ok], expert[ok]] = True
        run.set_dims(n_layer=n_layer, n_expert=n_expert)
        run.set_resident(m, resident_mib=rec.resident_mib, budget_mib=rec.budget_mib)
