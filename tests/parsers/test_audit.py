"""parsers/audit.py: records of moe-cache-reference.md "Audit log", bad lines, runs, exact sum."""

from __future__ import annotations

import orjson
import pytest

from bmoe_top.parsers.audit import (
    AuditLineError,
    AuditRuns,
    check_exact_sum,
    parse_audit_line,
    read_audit_file,
)

BASE = {"time": "2026-11-29T12:00:00.123Z", "hybrid": False, "copies": 0, "bytes_copy": 0, "swaps": 0,
        "bytes_cpu": 0}


def rec(event, pid=100, hits=0, hp=0, misses=0, up=0, **extra):
    r = dict(BASE, event=event, pid=pid, hits=hits, hits_profile=hp, misses=misses, bytes_upload=up)
    r.update(extra)
    return orjson.dumps(r).decode()


def req(pid, hits, hp, misses, up, rh, rhp, rm, rup, slot=0, task=1):
    return rec("request", pid, hits, hp, misses, up, slot=slot, task=task, n_prompt=5, n_gen=8,
               t_prompt_ms=1.5, t_gen_ms=20.0, req_hits=rh, req_hits_profile=rhp, req_misses=rm,
               req_bytes_upload=rup, req_bytes_cpu=0)


def test_parse_fields():
    r = parse_audit_line(rec("load", layers=[{"il": 0, "slots": 4, "hits": 0, "hits_profile": 0,
                                               "misses": 0, "resident": [1, 2]}]), 7)
    assert r.event == "load" and r.pid == 100 and r.lineno == 7
    assert r.counters["hits"] == 0 and r.hybrid is False
    assert r.ts == pytest.approx(1795953600.123)
    assert r.layers()[0]["resident"] == [1, 2]


@pytest.mark.parametrize("line,needle", [
    ('{"event":"load","pid":1,"time":"x","hits":NaN}', "not JSON"),
    ("[1,2]", "not a JSON object"),
    ('{"event":"boot","pid":1,"time":"x"}', "unknown event"),
    ('{"event":"load","pid":"1","time":"x"}', "pid"),
    ('{"event":"load","pid":1}', "time"),
    ('{"event":"load","pid":1,"time":"x","hits":-3}', "hits"),
    ('{"event":"load","pid":1,"time":"x","misses":1.5}', "misses"),
    ('{"event":"load","pid":1,', "not JSON"),
])
def test_bad_lines_raise_with_line_number(line, needle):
    with pytest.raises(AuditLineError) as ei:
        parse_audit_line(line, 12)
    assert ei.value.lineno == 12 and needle in str(ei.value) and "line 12" in str(ei.value)


def test_missing_counter_is_none_not_zero():
    r = parse_audit_line('{"event":"ready","pid":3,"time":"2026-01-01T00:00:00.000Z","hits":4}', 1)
    assert r.counters["hits"] == 4 and r.counters["misses"] is None


def test_runs_grouped_by_pid_and_exact_sum(tmp_path):
    lines = [
        rec("load", 1, layers=[{"il": 0, "slots": 2, "hits": 0, "hits_profile": 0, "misses": 0, "resident": [3]}]),
        rec("load", 2),
        rec("ready", 1, 5, 0, 5, 50),
        rec("ready", 2, 1, 0, 1, 10),
        req(1, 15, 0, 7, 70, 10, 0, 2, 20),
        "this is not json",
        req(2, 3, 0, 2, 20, 2, 0, 1, 10),
        req(1, 18, 0, 9, 90, 3, 0, 2, 20),
        rec("exit", 1, 18, 0, 9, 90, layers=[{"il": 0, "slots": 2, "hits": 18, "hits_profile": 0,
                                              "misses": 9, "resident": [3, 5]}]),
        rec("exit", 2, 4, 0, 2, 20),  # pid 2: counters moved outside a request -> sum broken
    ]
    p = tmp_path / "a.jsonl"
    p.write_text("\n".join(lines) + "\n" + rec("load", 3)[:20])  # partial last line left out
    runs = read_audit_file(p)
    assert runs.pids() == [1, 2]
    assert runs.bad == [(6, runs.bad[0][1])] and "not JSON" in runs.bad[0][1]
    r1, r2 = runs.runs
    assert r1.pid == 1 and len(r1.requests) == 2 and r1.exited
    assert check_exact_sum(r1) == []
    assert r1.resident() == {0: [3, 5]}
    assert r1.layer_hits() == {0: (18, 0, 9)}
    problems = check_exact_sum(r2)
    assert problems and "req_hits" in problems[0]


def test_new_load_same_pid_is_new_run():
    runs = AuditRuns()
    for i, line in enumerate([rec("load", 9), rec("ready", 9), rec("exit", 9), rec("load", 9),
                              rec("ready", 9)], 1):
        runs.feed_line(line, i)
    assert len(runs.runs) == 2 and runs.runs[0].exited and not runs.runs[1].exited
    assert check_exact_sum(runs.runs[1]) == ["pid 9: no exit record"]
