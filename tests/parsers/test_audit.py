"""parsers/audit.py: records of moe-cache-reference.md "Audit log", bad lines, runs, exact sum."""

from __future__ import annotations

import orjson
import pytest

from bmoe_top.parsers.audit import (
    AuditLineError,
    AuditRuns,
    check_exact_sum,
    parse_audit_line,
    parse_audit_records,
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


def _two_slot_run(first_hits: int) -> AuditRuns:
    """Two requests decoded together (slots 0 and 1): task 2 ends first; the context's counters
    at its record hold task 1's work so far too."""
    runs = AuditRuns()
    lines = [rec("load", 5), rec("ready", 5),
             req(5, 9, 0, 3, 30, 4, 0, 1, 10, slot=1, task=2),
             req(5, 14, 0, 4, 40, first_hits, 0, 3, 30, slot=0, task=1),
             rec("exit", 5, 14, 0, 4, 40)]
    for i, line in enumerate(lines, 1):
        runs.feed_line(line, i)
    return runs


def test_two_slots_busy_the_sum_still_holds():
    """With two slots busy at once each record's own counters are not the context's change since
    the record before (that holds both requests' work); their sum over the run still is exit
    minus ready, and a wrong sum is still found."""
    assert check_exact_sum(_two_slot_run(10).runs[0]) == []
    problems = check_exact_sum(_two_slot_run(9).runs[0])
    assert problems == ["pid 5: sum of req_hits = 13 but exit - ready hits = 14"]


def test_new_load_same_pid_is_new_run():
    runs = AuditRuns()
    for i, line in enumerate([rec("load", 9), rec("ready", 9), rec("exit", 9), rec("load", 9),
                              rec("ready", 9)], 1):
        runs.feed_line(line, i)
    assert len(runs.runs) == 2 and runs.runs[0].exited and not runs.runs[1].exited
    assert check_exact_sum(runs.runs[1]) == ["pid 9: no exit record"]


def test_records_glued_on_one_line_are_split_and_all_kept(tmp_path):
    glued = rec("load", 1) + rec("ready", 2) + " " + req(3, 5, 0, 1, 10, 5, 0, 1, 10)
    lines = [rec("load", 9), glued, rec("exit", 9)]
    p = tmp_path / "a.jsonl"
    p.write_text("\n".join(lines) + "\n")
    runs = read_audit_file(p)
    assert runs.n_records == 5 and runs.bad == [] and runs.n_split == 1
    assert sorted((r.pid, r.event) for r in _all(runs)) == [
        (1, "load"), (2, "ready"), (3, "request"), (9, "exit"), (9, "load")]
    assert {r.lineno for r in _all(runs) if r.pid in (1, 2, 3)} == {2}


def test_a_cut_record_costs_only_itself():
    whole = rec("ready", 2)
    line = rec("load", 1)[:25] + whole + rec("exit", 3)
    recs, errors = parse_audit_records(line, 7)
    assert [(r.pid, r.event) for r in recs] == [(2, "ready"), (3, "exit")]
    assert len(errors) == 1 and errors[0].lineno == 7 and "not JSON" in errors[0].msg
    assert parse_audit_records("not json at all", 3)[0] == []


def _all(runs):
    from bmoe_top.parsers.audit import iter_records
    return list(iter_records(runs))


WRITER = r"""
import os, sys, orjson
path, n, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(f"{go}.{os.getpid()}", "wb").close()  # ready
while not os.path.exists(go):  # all three start writing at once
    pass
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
pid = os.getpid()
for i in range(n):
    rec = {"event": "request", "time": "2026-11-29T12:00:00.123Z", "pid": pid, "hybrid": False,
           "hits": i, "hits_profile": 0, "misses": i, "bytes_upload": 0, "bytes_cpu": 0, "copies": 0,
           "bytes_copy": 0, "swaps": 0, "task": i, "slot": 0}
    os.write(fd, orjson.dumps(rec))  # the record and its newline in two writes: another writer's
    os.sched_yield()                 # record can land between them, on the same line
    os.write(fd, b"\n")
os.close(fd)
"""


def test_three_concurrent_writer_processes_lose_no_record(tmp_path):
    import subprocess
    import sys
    import time

    path, go = tmp_path / "audit.jsonl", tmp_path / "go"
    path.write_bytes(b"")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), "1000", str(go)]) for _ in range(3)]
    while not all((tmp_path / f"go.{p.pid}").exists() or p.poll() is not None for p in procs):
        time.sleep(0.01)
    go.write_bytes(b"")
    for p in procs:
        assert p.wait(timeout=300) == 0
    runs = read_audit_file(path)
    assert runs.bad == []
    got = sorted((r.pid, r.data["task"]) for r in _all(runs))
    assert got == sorted((p.pid, i) for p in procs for i in range(1000))
    assert runs.n_records == 3000
