"""BMOE line protocol: every tag, unknown fields/tags kept, absent is None, bad lines explained,
cumulative text and deltas rebuild the same answer (surrogate pairs split across records)."""

from __future__ import annotations

import json

import orjson
import pytest

from bmoe_top.parsers.bmoe_lines import (
    BadLine,
    Begin,
    Done,
    Error,
    Load,
    Progress,
    Ready,
    Resident,
    Route,
    TextAccumulator,
    TextLine,
    Unknown,
    parse_line,
)


def test_progress_all_fields_and_extras():
    r = parse_line('BMOE_PROGRESS {"step":3,"steps":16,"wall_ms":210.5,"io_ms":300,"compute_ms":120.25,'
                   '"mgmt_ms":10.0,"stall_ms":40.5,"read_mb":12.5,"cache_hit_pct":-1,"text":"hi",'
                   '"majflt":7,"cpu_ms":410.0,"dense_resident_frac":0.85}')
    assert isinstance(r, Progress)
    assert (r.step, r.steps, r.wall_ms, r.io_ms, r.compute_ms) == (3, 16, 210.5, 300.0, 120.25)
    assert isinstance(r.io_ms, float) and r.cache_hit_pct == -1.0
    assert (r.mgmt_ms, r.stall_ms, r.read_mb, r.text) == (10.0, 40.5, 12.5, "hi")
    assert r.extra == {"majflt": 7, "cpu_ms": 410.0, "dense_resident_frac": 0.85}
    assert r.prefix == "" and r.delta_text is None


def test_absent_and_null_fields_are_none_not_zero():
    r = parse_line('BMOE_PROGRESS {"step":1,"io_ms":null}')
    assert r.step == 1 and r.io_ms is None and r.wall_ms is None and r.mgmt_ms is None
    assert r.extra == {}


@pytest.mark.parametrize("line,cls,check", [
    ('BMOE_LOAD {"mb":12.5,"ms":8}', Load, lambda r: (r.mb, r.ms) == (12.5, 8.0)),
    ('BMOE_READY {"load_s":2.5,"arch":"qwen3moe","n_ctx":4096}', Ready,
     lambda r: (r.load_s, r.arch, r.n_ctx) == (2.5, "qwen3moe", 4096)),
    ('BMOE_BEGIN {"id":7}', Begin, lambda r: r.id == 7),
    ('BMOE_DONE {"id":7,"cancelled":false,"tokens":3,"tok_s":11.1,"prefill_s":0.4,"load_s":2.5,'
     '"cache_hit_pct":55.0,"n_prompt":5,"n_past":8,"cache_resident_mib":12.5,"cache_budget_mib":64,'
     '"spec_recall_pct":-1,"stall_s_tok":0.01,"mgmt_s_tok":0.002,"text":"ok"}', Done,
     lambda r: (r.id, r.cancelled, r.tokens, r.n_past, r.cache_budget_mib, r.spec_recall_pct, r.text)
     == (7, False, 3, 8, 64.0, -1.0, "ok")),
    ('BMOE_ERROR {"id":8,"fatal":true,"msg":"out of memory"}', Error,
     lambda r: (r.id, r.fatal, r.msg) == (8, True, "out of memory")),
    ('BMOE_ROUTE {"step":4,"turn":1,"phase":"decode","experts":[[1,2],[],[3,4]],"hit":[[1,0],[],[0,1]]}',
     Route, lambda r: r.experts == [[1, 2], [], [3, 4]] and r.hit[2] == [0, 1] and r.phase == "decode"),
    ('BMOE_ROUTE {"step":4,"phase":"decode","experts":[[1,2],[3]],"hit":[[1,0],[0]],"tier":[[0,1],[2]]}',
     Route, lambda r: r.tier == [[0, 1], [2]]),
    ('BMOE_ROUTE {"step":4,"phase":"decode","experts":[[1,2]],"hit":[[1,0]]}', Route, lambda r: r.tier is None),
    ('BMOE_RESIDENT {"step":4,"n_expert":8,"resident":[[1],[2,3]],"resident_mib":1.5,"budget_mib":64}',
     Resident, lambda r: r.resident == [[1], [2, 3]] and r.budget_mib == 64.0),
])
def test_every_tag(line, cls, check):
    r = parse_line(line)
    assert isinstance(r, cls), r
    assert check(r)


def test_unknown_tag_kept_with_all_fields():
    r = parse_line('BMOE_SPEC_STATS {"recall":71.5,"layers":[1,2]}')
    assert r == Unknown("SPEC_STATS", {"recall": 71.5, "layers": [1, 2]}, "")


def test_prefix_before_marker_is_kept():
    r = parse_line('llama_context: graph splits = 1BMOE_READY {"load_s":1.0}')
    assert isinstance(r, Ready) and r.prefix == "llama_context: graph splits = 1" and r.load_s == 1.0


def test_trailing_text_after_object_is_kept():
    r = parse_line('BMOE_BEGIN {"id":1} and then the answer started')
    assert isinstance(r, Begin) and r.id == 1
    assert r.extra["_suffix"] == "and then the answer started"


@pytest.mark.parametrize("line", [
    "plain answer text", "", "   ", "BMOE_", "mentions BMOE_PROGRESS in prose",
    "BMOE_lowercase {}", "the tag BMOE_DONE is documented",
])
def test_non_protocol_lines_are_text(line):
    assert parse_line(line) == TextLine(line)


@pytest.mark.parametrize("line,why", [
    ('BMOE_PROGRESS {"step":1,', "malformed JSON"),
    ("BMOE_PROGRESS [1,2]", "not a JSON object"),
    ('BMOE_PROGRESS "x"', "not a JSON object"),
    ("BMOE_DONE", "no JSON object"),
    ('BMOE_PROGRESS {"step":"three"}', "'step'"),
    ('BMOE_PROGRESS {"wall_ms":true}', "'wall_ms'"),
    ('BMOE_PROGRESS {"step":1.5}', "'step'"),
    ('BMOE_PROGRESS {"text":5}', "'text'"),
    ('BMOE_DONE {"cancelled":"no"}', "'cancelled'"),
    ('BMOE_ROUTE {"experts":[[1,"a"]]}', "'experts'"),
    ('BMOE_ROUTE {"experts":[1,2]}', "'experts'"),
    ('BMOE_ROUTE {"experts":[[1]],"tier":[[1.5]]}', "'tier'"),
    ('BMOE_ROUTE {"experts":[[1]],"tier":[[true]]}', "'tier'"),
    ('BMOE_ROUTE {"experts":[[1]],"tier":[' + ",".join(["[]"] * 1025) + "]}", "'tier': 1025 layers, over the cap"),
    ('BMOE_UNKNOWNTAG {broken', "malformed JSON"),
])
def test_bad_lines_say_why(line, why):
    r = parse_line(line)
    assert isinstance(r, BadLine), r
    assert why in r.reason and r.text == line


def test_integral_float_for_int_field_is_accepted():
    assert parse_line('BMOE_PROGRESS {"step":3.0}').step == 3


def test_lone_surrogate_payload_falls_back_to_stdlib():
    r = parse_line('BMOE_PROGRESS {"step":1,"text":"a\\ud83d"}')
    assert isinstance(r, Progress) and r.text == "a\ud83d"


# ---------------------------------------------------------------------------- TextAccumulator

ANSWER = "Experts é 😀 are\npicked by the router ✓ 🙂"


def _records(answer: str, mode: str) -> list[str]:
    """Protocol lines as a runtime writes them: JSON-escaped, 1-3 UTF-16 code units per token,
    so surrogate pairs get split between records."""
    units = answer.encode("utf-16-le")
    cut = [units[i:i + 2] for i in range(0, len(units), 2)]
    lines, acc = [], []
    i = 0
    step = 0
    while i < len(cut):
        n = 1 + (step % 3)
        piece = cut[i:i + n]
        i += n
        step += 1
        acc.extend(piece)

        def esc(us):
            return "".join("\\u%04x" % int.from_bytes(u, "little") for u in us)
        field = f'"text":"{esc(acc)}"' if mode == "text" else f'"delta_text":"{esc(piece)}"'
        lines.append(f'BMOE_PROGRESS {{"step":{step},{field}}}')
    return lines


@pytest.mark.parametrize("mode", ["text", "delta"])
def test_cumulative_and_delta_rebuild_the_same_answer(mode):
    acc = TextAccumulator()
    pieces = []
    for ln in _records(ANSWER, mode):
        r = parse_line(ln)
        assert isinstance(r, Progress)
        pieces.append(acc.feed(r))
    assert acc.text == ANSWER
    assert "".join(pieces) == ANSWER
    assert "\ufffd" not in acc.text and acc.rewrites == 0


def test_surrogate_pair_split_across_two_delta_records():
    acc = TextAccumulator()
    assert acc.feed(parse_line('BMOE_PROGRESS {"delta_text":"x\\ud83d"}')) == "x"
    assert acc.feed(parse_line('BMOE_PROGRESS {"delta_text":"\\ude00y"}')) == "😀y"
    assert acc.text == "x😀y"


def test_surrogate_pair_split_across_two_cumulative_records():
    acc = TextAccumulator()
    assert acc.feed(parse_line('BMOE_PROGRESS {"text":"x\\ud83d"}')) == "x"
    assert acc.feed(parse_line('BMOE_PROGRESS {"text":"x\\ud83d\\ude00"}')) == "😀"
    assert acc.text == "x😀"


def test_lone_low_surrogate_becomes_replacement_char():
    acc = TextAccumulator()
    acc.feed(parse_line('BMOE_PROGRESS {"delta_text":"a\\ude00b"}'))
    assert acc.text == "a\ufffdb"


def test_reasoning_goes_apart_and_reset_starts_over():
    acc = TextAccumulator()
    acc.feed(parse_line('BMOE_PROGRESS {"delta_reasoning":"hmm, ","delta_text":""}'))
    acc.feed(parse_line('BMOE_PROGRESS {"delta_reasoning":"ok","delta_text":"Yes"}'))
    assert (acc.text, acc.reasoning) == ("Yes", "hmm, ok")
    acc.reset()
    assert (acc.text, acc.reasoning) == ("", "")


def test_text_wins_over_delta_and_records_without_text_add_nothing():
    acc = TextAccumulator()
    assert acc.feed(parse_line('BMOE_PROGRESS {"text":"abc","delta_text":"zzz"}')) == "abc"
    assert acc.feed(parse_line('BMOE_PROGRESS {"step":2}')) == ""
    assert acc.text == "abc"


def test_rewritten_cumulative_text_is_followed():
    acc = TextAccumulator()
    acc.feed(parse_line('BMOE_PROGRESS {"text":"hello world"}'))
    assert acc.feed(parse_line('BMOE_PROGRESS {"text":"hello there"}')) == "there"
    assert acc.text == "hello there" and acc.rewrites == 1


def test_orjson_written_lines_round_trip():
    """Lines written by orjson (U+2028 unescaped, non-ASCII raw) parse to the same values."""
    rec = {"step": 1, "steps": 2, "wall_ms": 1.5, "text": "a\u2028b é 😀", "new_field": {"k": [1]}}
    line = "BMOE_PROGRESS " + orjson.dumps(rec).decode()
    r = parse_line(line)
    assert r.text == rec["text"] and r.extra == {"new_field": {"k": [1]}}
    line2 = "BMOE_PROGRESS " + json.dumps(rec)  # ASCII-escaped by the stdlib
    assert parse_line(line2) == r
