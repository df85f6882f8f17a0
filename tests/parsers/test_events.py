"""The event log's reader (parsers/events.py): what the writer writes reads back, a bad line is
counted and shown while its neighbours still count, and no field reaches a terminal with its
escape sequences."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.events import KINDS, MAX_FIELD, MAX_PROBLEMS, Event, event_line, parse_event_line, parse_events
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.parsers.textio import iter_lines

FAST = settings(max_examples=150, deadline=None)

_line_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60).map(sanitize)
events = st.builds(Event, t=st.floats(0, 4e9, allow_nan=False), kind=st.sampled_from(KINDS), subject=_line_text,
                   old=st.none() | _line_text, new=_line_text, detail=_line_text, source=_line_text,
                   run=st.text("0123456789abcdef", min_size=12, max_size=12))


@FAST
@given(st.lists(events, max_size=20))
def test_written_events_read_back(evs: list[Event]) -> None:
    data = b"".join(event_line(e) for e in evs)
    got = parse_events(iter_lines(data))
    assert got.bad_lines == 0
    assert [(e.kind, e.subject, e.old, e.new, e.detail, e.source, e.run) for e in got.events] == \
        [(e.kind, e.subject, e.old, e.new, e.detail, e.source, e.run) for e in evs]
    assert [round(e.t, 6) for e in evs] == [e.t for e in got.events]


@FAST
@given(st.lists(events, min_size=1, max_size=10), st.lists(st.binary(max_size=40), min_size=1, max_size=5),
       st.data())
def test_a_bad_line_never_costs_its_neighbours(evs: list[Event], junk: list[bytes], data: st.DataObject) -> None:
    lines = [event_line(e) for e in evs]
    bad = 0
    for j in junk:
        j = j.replace(b"\n", b" ").replace(b"\r", b" ")
        try:
            parse_event_line(j.decode("utf-8", "replace").strip())
            continue  # random bytes that happen to be an event (never in practice)
        except ValueError:
            pass
        if not j.strip() or j.strip() in (b"\xef\xbb\xbf",):
            continue  # blank lines are skipped, not bad
        lines.insert(data.draw(st.integers(0, len(lines))), j + b"\n")
        bad += 1
    got = parse_events(iter_lines(b"".join(lines)))
    assert len(got.events) == len(evs)
    assert got.bad_lines == bad
    assert len(got.problems) == min(bad, MAX_PROBLEMS)


@FAST
@given(st.text(max_size=200))
def test_any_text_is_an_event_or_a_reason(text: str) -> None:
    try:
        ev = parse_event_line(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert ev.kind in KINDS


def test_escape_sequences_are_shown_not_sent() -> None:
    line = orjson.dumps({"t": 1.5, "kind": "source", "subject": "src\x1b]0;pwned\x07", "old": "ok\x9b2J",
                         "new": "refused\u202e", "detail": "a\nb", "source": "metrics: \x1b[31mred"})
    ev = parse_event_line(line.decode())
    for field in (ev.subject, ev.old, ev.new, ev.detail, ev.source):
        assert field is not None
        assert "\x1b" not in field and "\x9b" not in field and "\u202e" not in field and "\n" not in field
    assert ev.subject == "src␛]0;pwned␇"
    assert ev.detail == "a␤b"


def test_a_long_field_is_cut() -> None:
    ev = parse_event_line(orjson.dumps({"t": 1, "kind": "turn", "subject": "x" * 5000, "new": "done"}).decode())
    assert len(ev.subject) == MAX_FIELD and ev.subject.endswith("…")


def test_what_is_not_an_event_says_why() -> None:
    cases = {
        '{"t": "now", "kind": "turn", "subject": "t", "new": "done"}': '"t" must be a number',
        '{"t": 1, "kind": "weather", "subject": "t", "new": "done"}': '"kind" must be one of',
        '{"t": 1, "kind": "turn", "new": "done"}': '"subject" and "new" are required',
        '{"t": 1, "kind": "turn", "subject": "t", "new": 3}': '"new" must be a string',
        '[1, 2]': "not a JSON object",
        '{"t": 1, "kind"': "not JSON",
        '{"t": 1e999, "kind": "turn", "subject": "t", "new": "done"}': 'infinity',
    }
    got = parse_events(enumerate(cases, 1), where="events.jsonl")
    assert got.events == [] and got.bad_lines == len(cases)
    for (where, problem), want in zip(got.problems, cases.values()):
        assert where == "events.jsonl"
        assert want in problem.reason, (problem.text, problem.reason)


def test_old_is_optional_and_null() -> None:
    ev = parse_event_line('{"t": 2, "kind": "turn", "subject": "turn 1", "old": null, "new": "started"}')
    assert ev.old is None and ev.detail == "" and ev.source == "" and ev.run == ""
