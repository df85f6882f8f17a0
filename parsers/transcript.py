"""Whole-run text captures: a runtime's stdout, a console log, ``--progress`` output, or a
no-progress output (answer streamed inline, then the summary).

Combines the BMOE line protocol (bmoe_lines.py, telemetry-contract.md "Per-token lines" and
"Session mode") with the end-of-run lines (summary_lines.py, "End-of-run lines") and the
llama.cpp loader log that real captures interleave with both (see
../shared/data/real-runs/bigmoeonedge-2026-07-15/qwen.log).

Where the answer comes from, in order:

1. an ``=== answer ===`` block (``--progress`` mode), up to ``=== perf ===``;
2. the BMOE records: the cumulative ``text`` / ``delta_text`` of ``BMOE_PROGRESS`` (or
   ``BMOE_DONE.text``) of the last generation that has text (each generation is in ``generations``);
3. otherwise (no-progress mode) the text lines before the first summary line, minus
   llama.cpp/bmoe loader lines. The CLI echoes the prompt without a newline before generating:
   text that precedes loader output or ``<think>`` on the first text line becomes ``prompt``.

A ``<think>...</think>`` block (or an unterminated ``<think>``) moves from the answer to
``reasoning``; reasoning sent separately (``delta_reasoning``) lands there too.
docs/telemetry.md "Transcripts".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .bmoe_lines import BadLine, Begin, Done, Error, Progress, Ready, Record, TextAccumulator, TextLine, parse_line
from .summary_lines import SummaryLine, derive_summary, parse_summary_line
from .textio import Problem, decode_bytes, split_text

__all__ = ["Transcript", "parse_transcript", "is_loader_noise", "split_reasoning"]

# llama.cpp / ggml / bmoe-cli log lines: "identifier: ..." with a snake_case identifier or a
# known name, and the loader's progress dots.
_NOISE_LINE = re.compile(
    r"(?:[a-z][a-z0-9]*_[a-z0-9_]*|bmoe|main|build|load|system_info|srv|slot|sampler|generate)"
    r"\s*:(?:\s|$)|\.{3,}\s*$"
)
# loader output glued to the end of a text line (the prompt echo has no newline)
_NOISE_EMBED = re.compile(
    r"~?(?:llama_[a-z_]+|ggml_[a-z_]+|gguf_[a-z_]+|llm_load_[a-z_]+|print_info|load_tensors):\s")

_DONE_TO_SUMMARY = (
    ("tokens", "tokens"), ("tok_s", "tok_s"), ("prefill_s", "prefill_s"), ("load_s", "load_s"),
    ("cache_hit_pct", "cache_hit_pct"), ("n_prompt", "n_prompt"),
    ("cache_resident_mib", "resident_mib"), ("cache_budget_mib", "budget_mib"),
    ("spec_recall_pct", "spec_recall_pct"), ("stall_s_tok", "stall_s_tok"),
    ("mgmt_s_tok", "mgmt_s_tok"),
)


@dataclass(slots=True)
class Transcript:
    """A parsed capture.

    ``records`` BMOE records in order, ``record_lines`` their 1-based line numbers (parallel);
    ``summary`` canonical summary keys (summary_lines.CANONICAL_KEYS; from the end-of-run lines,
    else from the last ``BMOE_DONE``); ``derived`` the keys of ``summary`` no line states, computed
    from others (summary_lines.derive_summary); ``info`` string-valued summary facts (``mode``,
    ``prefetch_mode``); ``sidecar`` key=value lines as strings; ``answer``/``reasoning``/
    ``prompt`` (None when not detectable) as described in the module doc; ``text_lines`` every
    line that is not a protocol or summary line, with ``text_line_numbers`` (parallel) (a
    protocol line's ``prefix`` text is included); ``summary_lines`` (lineno, SummaryLine);
    ``generations`` one dict per ``BMOE_BEGIN`` (or one-shot generation), in order: {"id", "answer",
    "reasoning", "tokens": its ``BMOE_PROGRESS`` count, "done": Done | None, "error": the
    ``BMOE_ERROR`` for it or None, "lineno"} (a request refused before its first token has an
    error, no tokens and no done; one refused before its ``BMOE_BEGIN``, after ``BMOE_READY``, is a
    generation of its own); ``unparsed`` (lineno, text) of the lines that look like end-of-run lines of an
    unknown shape (shown as they are; each is also a problem); ``problems`` bad lines.
    """

    records: list[Record] = field(default_factory=list)
    record_lines: list[int] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    derived: set[str] = field(default_factory=set)
    info: dict[str, str] = field(default_factory=dict)
    sidecar: dict[str, str] = field(default_factory=dict)
    answer: str = ""
    reasoning: str = ""
    prompt: str | None = None
    text_lines: list[str] = field(default_factory=list)
    text_line_numbers: list[int] = field(default_factory=list)
    summary_lines: list[tuple[int, SummaryLine]] = field(default_factory=list)
    generations: list[dict[str, Any]] = field(default_factory=list)
    unparsed: list[tuple[int, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def identity(self) -> dict[str, str]:
        """The run this capture is from: ``arch`` and ``model`` of its first ``BMOE_READY``, when
        it has one and they are strings."""
        for rec in self.records:
            if isinstance(rec, Ready):
                out = {"arch": rec.arch} if isinstance(rec.arch, str) else {}
                model = rec.extra.get("model")
                if isinstance(model, str):
                    out["model"] = model
                return out
        return {}


def is_loader_noise(line: str) -> bool:
    """True for llama.cpp / ggml / bmoe-cli log lines (``llama_model_loader: ...``,
    ``print_info: ...``, ``bmoe: ...``, loader progress dots)."""
    return _NOISE_LINE.match(line) is not None


def split_reasoning(text: str) -> tuple[str, str]:
    """``(answer, reasoning)``: the ``<think>...</think>`` block (or an unterminated
    ``<think>`` to the end) moved out of ``text``; ``("text", "")`` when there is none."""
    i = text.find("<think>")
    if i < 0:
        return text, ""
    j = text.find("</think>", i + 7)
    if j < 0:
        return text[:i].rstrip(), text[i + 7:].strip("\n")
    return (text[:i] + text[j + 8:]).strip("\n"), text[i + 7:j].strip("\n")


def _maybe_summary(line: str) -> SummaryLine | None:
    # cheap pre-check: every summary line has ':' or '=' (banners have '===')
    if ":" not in line and "=" not in line:
        return None
    return parse_summary_line(line)


def parse_transcript(data: bytes | str) -> Transcript:
    """Parse a whole capture (bytes in any encoding textio accepts, or str). Never raises on
    bad content: bad BMOE lines and unknown summary-like lines become ``problems``."""
    tr = Transcript()
    text = decode_bytes(data)
    items: list[tuple[int, str]] = []  # non-protocol text, with line numbers
    for lineno, line in enumerate(split_text(text), 1):
        if "BMOE_" in line:
            r = parse_line(line)
            t = type(r)
            if t is BadLine:
                tr.problems.append(Problem(lineno, line, r.reason))
                continue
            if t is not TextLine:
                tr.records.append(r)
                tr.record_lines.append(lineno)
                if r.prefix:
                    items.append((lineno, r.prefix))
                continue
        items.append((lineno, line))

    # classify text items
    kinds: list[SummaryLine | None] = [_maybe_summary(line) for _, line in items]
    answer_start = answer_end = None
    for i, s in enumerate(kinds):
        if s is not None and s.kind == "banner":
            if s.values["name"] == "answer" and answer_start is None:
                answer_start = i
            elif s.values["name"] == "perf" and answer_start is not None and answer_end is None:
                answer_end = i
    if answer_start is not None and answer_end is None:
        answer_end = next((i for i in range(answer_start + 1, len(items))
                           if (kd := kinds[i]) is not None and kd.kind not in ("banner", "sidecar", "unparsed")),
                          len(items))
    in_block = (lambda i: answer_start < i < answer_end) if answer_start is not None else (lambda i: False)
    first_summary = next((i for i, s in enumerate(kinds)
                          if s is not None and s.kind not in ("banner", "sidecar", "unparsed")
                          and not in_block(i)), None)

    answer_items: list[tuple[int, str]] = []
    for i, (lineno, line) in enumerate(items):
        s = kinds[i]
        if in_block(i):
            answer_items.append((lineno, line))
            tr.text_lines.append(line)
            tr.text_line_numbers.append(lineno)
            continue
        if s is not None and s.kind == "sidecar" and (first_summary is None or i > first_summary):
            k, v = next(iter(s.values.items()))
            tr.sidecar[k] = line.strip().lstrip("\ufeff").split("=", 1)[1]
            tr.summary_lines.append((lineno, s))
            continue
        if s is not None and s.kind not in ("sidecar", "unparsed"):
            tr.summary_lines.append((lineno, s))
            for k, v in s.values.items():
                if s.kind == "banner":
                    break
                if isinstance(v, str):
                    tr.info[k] = v
                else:
                    tr.summary[k] = v
            continue
        if s is not None and s.kind == "unparsed":
            tr.unparsed.append((lineno, line))
            why = s.values.get("why")
            tr.problems.append(Problem(lineno, line, f"'{s.values['kind']}:' end-of-run line not read: {why}" if why
                                       else f"looks like a '{s.values['kind']}:' end-of-run line but its format "
                                            "is unknown"))
        tr.text_lines.append(line)
        tr.text_line_numbers.append(lineno)

    _generations(tr)
    done = next((g["done"] for g in reversed(tr.generations) if g["done"] is not None), None)
    if not tr.summary and done is not None:  # the last generation that ended (a refused one did not)
        for src, dst in _DONE_TO_SUMMARY:
            v = getattr(done, src)
            if v is not None:
                tr.summary[dst] = float(v)
    derive_summary(tr.summary, tr.derived)

    if answer_start is not None:
        tr.answer = "\n".join(line for _, line in answer_items).strip("\n")
        tr.answer, tr.reasoning = split_reasoning(tr.answer)
    elif any(g["answer"] or g["reasoning"] for g in tr.generations):
        g = next(g for g in reversed(tr.generations) if g["answer"] or g["reasoning"])
        tr.answer, think = split_reasoning(g["answer"])
        tr.reasoning = g["reasoning"] or think
    else:
        _inline_answer(tr, items, kinds, first_summary)
    return tr


def _generations(tr: Transcript) -> None:
    acc = TextAccumulator()
    cur: dict[str, Any] | None = None
    step: tuple[int, int] | None = None  # (step, line number) of the generation's newest BMOE_PROGRESS
    ready = False  # an error before BMOE_READY is the session's, not a request's
    gaps: list[Problem] = []
    for rec, lineno in zip(tr.records, tr.record_lines):
        if isinstance(rec, Begin):
            acc.reset()
            cur = _generation(rec.id, lineno)
            tr.generations.append(cur)
            step = None
        elif isinstance(rec, Error):
            if cur is not None and cur["done"] is None and cur["error"] is None and cur["id"] == rec.id:
                cur["error"] = rec
            elif ready and type(rec.id) is int:  # refused before its BMOE_BEGIN (bmoe-run checks first)
                refused = _generation(rec.id, lineno)  # beside the generation in flight, if one is
                refused["error"] = rec
                tr.generations.append(refused)
        elif isinstance(rec, Ready):
            ready = True
        elif isinstance(rec, (Progress, Done)):
            if cur is None or cur["done"] is not None or cur["error"] is not None:  # one-shot: no BMOE_BEGIN
                acc.reset()
                cur = _generation(None, lineno)
                tr.generations.append(cur)
                step = None
            if isinstance(rec, Progress):
                cur["tokens"] += 1
                if type(rec.step) is int:
                    if step is not None and rec.step > step[0] + 1:
                        gaps.append(_step_gap(step, rec.step, lineno))
                    step = (rec.step, lineno)
                acc.feed(rec)
            else:
                if rec.text is not None:
                    acc.feed(rec)
                cur["done"] = rec
                if cur["id"] is None:
                    cur["id"] = rec.id
            cur["answer"] = acc.text
            cur["reasoning"] = acc.reasoning
    if gaps:
        tr.problems = sorted(tr.problems + gaps, key=lambda p: p.lineno)


def _generation(request_id: int | None, lineno: int) -> dict[str, Any]:
    return {"id": request_id, "answer": "", "reasoning": "", "tokens": 0, "done": None, "error": None,
            "lineno": lineno}


def _step_gap(prev: tuple[int, int], step: int, lineno: int) -> Problem:
    """The problem of a generation's BMOE_PROGRESS steps that jump from ``prev`` (step, line) to
    ``step`` at ``lineno``: the lines of the steps between are lost, or other text replaced them."""
    first, last = prev[0] + 1, step - 1
    what = f"step {first}" if first == last else f"steps {first}-{last} ({last - first + 1} tokens)"
    where = "the lines between hold no BMOE_PROGRESS" if lineno > prev[1] + 1 else "no line between"
    return Problem(lineno, f"step {prev[0]} (line {prev[1]}) then step {step} (line {lineno})",
                   f"BMOE_PROGRESS {what} missing: {where} (lost, or replaced by other text)")


def _inline_answer(tr: Transcript, items: list[tuple[int, str]],
                   kinds: list[SummaryLine | None], first_summary: int | None) -> None:
    stop = first_summary if first_summary is not None else len(items)
    out: list[str] = []
    first_text = True
    for i in range(stop):
        lineno, line = items[i]
        s = kinds[i]
        if s is not None and s.kind in ("sidecar", "banner"):
            continue
        if is_loader_noise(line):
            continue
        m = _NOISE_EMBED.search(line)
        if m is not None:
            head = line[: m.start()]
            if first_text and lineno == 1 and head.strip():
                tr.prompt = head
                first_text = False
                continue
            line = head
            if not line.strip():
                continue
        if first_text and line.strip():
            first_text = False
            k = line.find("<think>")
            if k > 0 and tr.prompt is None:
                tr.prompt = line[:k]
                line = line[k:]
        out.append(line)
    text = "\n".join(out).strip("\n")
    tr.answer, tr.reasoning = split_reasoning(text)
