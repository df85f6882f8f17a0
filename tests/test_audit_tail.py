"""tui/sources/audit_tail.py: a real file appended, truncated and rotated while it is watched."""

from __future__ import annotations

import os
import time

import orjson

from bmoe_top.tui.sources.audit_tail import AuditState, AuditTail, read_to_end


def rec(event, pid, n, **extra):
    r = {"event": event, "time": f"2026-11-29T12:00:{n % 60:02d}.{n % 1000:03d}Z", "pid": pid,
         "hybrid": False, "hits": n, "hits_profile": 0, "misses": n, "bytes_upload": 0, "bytes_cpu": 0,
         "copies": 0, "bytes_copy": 0, "swaps": 0, "seq": n}
    r.update(extra)
    return orjson.dumps(r) + b"\n"


def append(path, data: bytes):
    # one open-append-close per record, like the runtime
    with open(path, "ab") as f:
        f.write(data)


def seqs(state: AuditState):
    with state.lock:
        return [r.data["seq"] for run in state.runs.runs
                for r in ([run.load, run.ready] + run.requests + [run.exit]) if r is not None]


def wait_for(pred, timeout=5.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_partial_line_waits_for_rest(tmp_path):
    p = tmp_path / "a.jsonl"
    tail = AuditTail(p)
    assert tail.poll_once() == 0 and tail.state.status == "waiting"
    line = rec("load", 1, 1)
    append(p, line[:25])
    assert tail.poll_once() == 0
    assert tail.state.runs.n_records == 0 and tail.state.n_bad == 0
    append(p, line[25:])
    assert tail.poll_once() == 1
    assert seqs(tail.state) == [1]
    tail.close()


def test_live_append_truncate_rotate_no_loss_no_repeat(tmp_path):
    p = tmp_path / "a.jsonl"
    state = AuditState(path=str(p))
    tail = AuditTail(p, state, poll_s=0.01)
    tail.start()
    try:
        # file appears late, records from two pids interleaved, one corrupt line
        time.sleep(0.05)
        append(p, rec("load", 11, 1))
        append(p, rec("load", 22, 2))
        append(p, b'{"event":"ready","pid":11,"time":"x","hits":NaN}\n')
        append(p, rec("ready", 11, 3))
        append(p, rec("ready", 22, 4))
        for n in range(5, 25):
            append(p, rec("request", 11 if n % 2 else 22, n))
        assert wait_for(lambda: state.runs.n_records == 24)
        assert state.n_bad == 1 and state.bad[0][1] == 3
        assert state.runs.pids() == [11, 22]
        assert [len(r.requests) for r in state.runs.runs] == [10, 10]

        # rotation: writer renames, then keeps writing to the new file; the record written to
        # the old name just before the rename must not be lost
        append(p, rec("request", 11, 25))
        os.rename(p, tmp_path / "a.jsonl.1")
        append(p, rec("exit", 11, 26))
        append(p, rec("exit", 22, 27))
        assert wait_for(lambda: state.runs.n_records == 27)
        assert state.n_rotations == 1

        # truncation in place (copytruncate style), then new records from the start
        with open(p, "r+b") as f:
            f.truncate(0)
        assert wait_for(lambda: state.n_truncations == 1)
        append(p, rec("load", 33, 28))
        append(p, rec("ready", 33, 29))
        assert wait_for(lambda: state.runs.n_records == 29)

        # truncate-and-refill between two polls, longer than what was read: first line changed
        tail_paused = state.runs.n_records
        with open(p, "wb") as f:
            f.write(rec("load", 44, 30) + rec("ready", 44, 31) + rec("request", 44, 32)
                    + rec("request", 44, 33) + rec("exit", 44, 34))
        assert wait_for(lambda: state.runs.n_records == tail_paused + 5)
        assert state.n_truncations == 2
    finally:
        tail.stop()
        tail.join(2)
    got = seqs(state)
    assert sorted(got) == list(range(1, 35)), got  # nothing lost, nothing repeated
    s = state.summary()
    assert s["pids"] == [11, 22, 33, 44] and s["bad_lines"] == 1
    assert s["runs"][0]["state"] == "exited" and len(s["runs"][0]["requests"]) == 11


def test_delete_then_recreate_is_rotation(tmp_path):
    p = tmp_path / "a.jsonl"
    append(p, rec("load", 5, 1))
    tail = AuditTail(p)
    assert tail.poll_once() == 1
    os.unlink(p)
    assert tail.poll_once() == 0  # gone: keep the old file, wait
    append(p, rec("load", 6, 2))
    assert tail.poll_once() == 1 and tail.state.n_rotations == 1
    tail.close()
    assert seqs(tail.state) == [1, 2]


def test_read_to_end_ignores_partial_last_line(tmp_path):
    p = tmp_path / "a.jsonl"
    append(p, rec("load", 1, 1) + rec("ready", 1, 2) + rec("exit", 1, 3)[:10])
    st = read_to_end(p)
    assert st.runs.n_records == 2 and st.n_bad == 0


def test_replay_audit_and_strp_through_file_replay(tmp_path):
    import numpy as np

    from bmoe_top.parsers.strp import StrpProfile, write_strp
    from bmoe_top.tui.run import run_summary
    from bmoe_top.tui.sources.file_replay import open_paths

    p = tmp_path / "a.jsonl"
    lay = [{"il": 0, "slots": 2, "hits": 3, "hits_profile": 0, "misses": 1, "resident": [1, 4]},
           {"il": 1, "slots": 1, "hits": 2, "hits_profile": 0, "misses": 2, "resident": [7]}]
    append(p, rec("load", 5, 1, model={"path": "/m/tiny.gguf", "n_layer": 2}, cache={"slots": 3, "bytes": 1 << 20},
                  load_ms=250.0, layers=lay))
    append(p, rec("ready", 5, 2))
    append(p, rec("request", 5, 3, n_prompt=4, n_gen=10, t_prompt_ms=8.0, t_gen_ms=40.0, req_hits=6, req_misses=2,
                  req_bytes_upload=1 << 20, task=1, slot=0))
    append(p, b"garbage\n")
    append(p, rec("exit", 5, 4, layers=lay, perf={"n_prompt": 4, "n_gen": 10, "t_prompt_ms": 8.0, "t_gen_ms": 40.0}))
    run = open_paths([str(p)])
    s = run_summary(run)
    assert s["tokens"] == 10 and s["tok_s"] == 250.0 and s["n_prompt"] == 4 and s["load_s"] == 0.25
    assert s["problems"] == 1 and run.problems[0].lineno == 4
    assert run.n_layer == 2 and run.resident[0, 4] and run.resident[1, 7] and run.resident.sum() == 3
    assert len(run.turns) == 1 and run.turns[0].done["tok_s"] == 250.0 and run.turns[0].done["cache_hit_pct"] == 75.0

    sp = tmp_path / "p.strp"
    write_strp(sp, StrpProfile(n_layers=2, n_expert=8, slots=2, pairs=np.array([[1, 3], [0, 5], [0, 6]])))
    run = open_paths([str(sp)])
    assert run.n_layer == 2 and run.n_expert == 8
    assert run.resident.sum() == 2 and run.resident[1, 3] and run.resident[0, 5]
    assert run.expert_rank[0, 6] == 2 and run.expert_rank[1, 3] == 0 and run.expert_rank[1, 0] == -1
    bad = tmp_path / "bad.strp"
    bad.write_bytes(b"STRP" + bytes(8))
    run = open_paths([str(bad)])
    assert run.problem_count == 1 and "too short" in run.problems[0].reason


def test_headless_bad_paths_are_clear(tmp_path):
    from bmoe_top.tui.headless_attach import audit_once, exit_code

    d = audit_once(tmp_path)
    assert d["status"] == "error" and "directory" in d["detail"] and exit_code(d) == 1
    d = audit_once(tmp_path / "none.jsonl")
    assert d["status"] == "waiting" and exit_code(d) == 1
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01binary\nnot json\n{}\n")
    d = audit_once(junk)
    assert d["status"] == "malformed" and d["bad_lines"] == 3 and "not an audit log" in d["detail"]


def test_any_chunking_of_appends_gives_every_record_once(tmp_path):
    """Property: however a writer's bytes are split across polls, the tail yields every record
    exactly once and counts no bad line."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    data = b"".join(rec("request" if i % 3 else "load", 100 + i % 2, i) for i in range(1, 31))

    @settings(max_examples=40, deadline=None)
    @given(cuts=st.lists(st.integers(min_value=1, max_value=len(data) - 1), max_size=25, unique=True))
    def check(cuts):
        p = tmp_path / f"c{len(list(tmp_path.iterdir()))}.jsonl"
        p.write_bytes(b"")
        tail = AuditTail(p)
        prev = 0
        for c in sorted(cuts) + [len(data)]:
            append(p, data[prev:c])
            tail.poll_once()
            prev = c
        tail.close()
        assert len(tail.state.run.log) == 30  # one log line per record, none repeated
        assert len(tail.state.run.turns) == 20 and tail.state.run.tokens.n == 20  # one per request
        got = sorted(r.data["seq"] for run in tail.state.runs.runs
                     for r in ([run.load] + run.requests) if r is not None)
        assert got == list(range(1, 31)) and tail.state.n_bad == 0

    check()
