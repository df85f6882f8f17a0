"""JSON nested deeper than any decoder recurses (orjson stops at 1,024 levels, the stdlib decoder
at Python's recursion limit, ``repr()`` as well): a BMOE line, a request line or an audit record
so nested is one bad line with its reason, never a RecursionError, and the lines around it
still count."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.parsers.audit import parse_audit_records
from bmoe_top.parsers.requests import parse_request_line, parse_requests
from bmoe_top.parsers.sanitize import brief
from bmoe_top.parsers.transcript import parse_transcript

TEMPLATES = [
    'BMOE_ROUTE {"step":1,"experts":%s,"hit":%s}',
    'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":%s,"x":%s}',
    'BMOE_RESIDENT {"step":1,"n_expert":8,"resident":%s,"resident_mib":%s}',
    'BMOE_FUTURE {"x":%s,"y":%s}',
    'BMOE_READY {"load_s":%s,"arch":%s}',
    'noise BMOE_DONE {"id":%s,"text":%s}',
]


def nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@settings(max_examples=80, deadline=None)
@given(depth=st.integers(0, 4000), template=st.sampled_from(TEMPLATES))
@example(depth=1100, template=TEMPLATES[0])  # the reported line: 1,100 nested '['
@example(depth=1024, template=TEMPLATES[3])
@example(depth=1025, template=TEMPLATES[1])
@example(depth=999, template=TEMPLATES[2])
def test_a_line_of_any_depth_is_a_record_or_one_bad_line(depth, template):
    line = template % (nest(depth), nest(depth))
    rec = bl.parse_line(line)
    assert not isinstance(rec, bl.TextLine)
    if isinstance(rec, bl.BadLine):
        assert rec.reason.startswith("BMOE_") and len(rec.reason) < 300


def test_the_lines_around_a_deep_line_still_count():
    deep = nest(1100)
    text = "\n".join([
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10,"text":"a"}',
        'BMOE_ROUTE {"step":1,"experts":%s}' % deep,
        'BMOE_FUTURE {"x":%s}' % nest(1000),  # within orjson's depth: an unknown record, kept
        'BMOE_PROGRESS {"step":2,"steps":2,"wall_ms":10,"text":"ab"}',
    ]) + "\n"
    tr = parse_transcript(text.encode())
    assert [p.lineno for p in tr.problems] == [2]
    assert "depth limit exceeded" in tr.problems[0].reason
    assert len(tr.records) == 3


def test_a_deep_request_line_is_refused_with_its_reason():
    bad = '{"cmd":"generate","prompt":%s}' % nest(100_000)
    assert parse_request_line(bad).startswith("malformed JSON")
    reqs, problems = parse_requests((bad + '\n{"cmd":"generate","prompt":"hi"}\n').encode())
    assert [r.prompt for r in reqs] == ["hi"] and len(problems) == 1


def test_a_deep_audit_field_is_one_bad_record():
    bad = '{"event":"load","pid":%s,"time":"2026-01-01T00:00:00Z"}' % nest(1020)
    recs, problems = parse_audit_records(bad, 2)
    assert recs == [] and len(problems) == 1 and "pid missing or not an integer ([[[[[[" in str(problems[0])
    deep_model = '{"event":"load","pid":7,"time":"2026-01-01T00:00:00Z","model":%s}' % nest(1000)
    recs, problems = parse_audit_records(deep_model, 3)  # a field read as data, not as a number
    assert len(recs) == 1 and problems == []


def test_brief_never_recurses():
    v: list = []
    for _ in range(5000):
        v = [v]
    assert brief(v).startswith("[[[[[[") and len(brief(v)) < 40
    assert brief("x" * 1000).endswith("'") and len(brief("x" * 1000)) <= 200
