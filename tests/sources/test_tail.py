"""tui/sources/tail.py (tail -F), bound to the audit feed: a real file appended, truncated and rotated
while it is watched; nothing lost, nothing repeated."""

from __future__ import annotations

import os
import time

import orjson
from helpers.waits import until

from bmoe_top.tui.feed.bind import TailBinding, bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.audit import audit_document
from bmoe_top.tui.sources.tail import FileTail


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


def follow(path, **kw) -> tuple[FileTail, TailBinding]:
    tail = FileTail(path, **kw)
    return tail, bind(tail, RunModel())


def seqs(b: TailBinding):
    with b.run.lock:
        return [r.data["seq"] for run in b.feed.runs.runs
                for r in ([run.load, run.ready] + run.requests + [run.exit]) if r is not None]

def test_partial_line_waits_for_rest(tmp_path):
    p = tmp_path / "a.jsonl"
    tail, b = follow(p)
    assert tail.poll_once() == 0 and tail.status == "waiting" and b.run.status == "waiting"
    line = rec("load", 1, 1)
    append(p, line[:25])
    assert tail.poll_once() == 0
    assert b.feed.runs.n_records == 0 and b.feed.n_bad == 0
    append(p, line[25:])
    assert tail.poll_once() == 1
    assert seqs(b) == [1]
    tail.close()


def test_live_append_truncate_rotate_no_loss_no_repeat(tmp_path):
    p = tmp_path / "a.jsonl"
    tail, b = follow(p, poll_s=0.01)
    state = b.feed
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
        assert until(lambda: state.runs.n_records == 24)
        assert state.n_bad == 1 and state.bad[0][1] == 3
        assert state.runs.pids() == [11, 22]
        assert [len(r.requests) for r in state.runs.runs] == [10, 10]

        # rotation: writer renames, then keeps writing to the new file; the record written to
        # the old name just before the rename must not be lost
        append(p, rec("request", 11, 25))
        os.rename(p, tmp_path / "a.jsonl.1")
        append(p, rec("exit", 11, 26))
        append(p, rec("exit", 22, 27))
        assert until(lambda: state.runs.n_records == 27)
        assert tail.n_rotations == 1

        # truncation in place (copytruncate style), then new records from the start
        with open(p, "r+b") as f:
            f.truncate(0)
        assert until(lambda: tail.n_truncations == 1)
        append(p, rec("load", 33, 28))
        append(p, rec("ready", 33, 29))
        assert until(lambda: state.runs.n_records == 29)

        # truncate-and-refill between two polls, longer than what was read: first line changed
        tail_paused = state.runs.n_records
        with open(p, "wb") as f:
            f.write(rec("load", 44, 30) + rec("ready", 44, 31) + rec("request", 44, 32)
                    + rec("request", 44, 33) + rec("exit", 44, 34))
        assert until(lambda: state.runs.n_records == tail_paused + 5)
        assert tail.n_truncations == 2
    finally:
        tail.stop()
        tail.join(2)
    got = seqs(b)
    assert sorted(got) == list(range(1, 35)), got  # nothing lost, nothing repeated
    s = audit_document(b.run)
    assert s["pids"] == [11, 22, 33, 44] and s["bad_lines"] == 1
    assert s["runs"][0]["state"] == "exited" and len(s["runs"][0]["requests"]) == 11


def test_delete_then_recreate_is_rotation(tmp_path):
    p = tmp_path / "a.jsonl"
    append(p, rec("load", 5, 1))
    tail, b = follow(p)
    assert tail.poll_once() == 1
    os.unlink(p)
    assert tail.poll_once() == 0  # gone: keep the old file, wait
    append(p, rec("load", 6, 2))
    assert tail.poll_once() == 1 and tail.n_rotations == 1
    tail.close()
    assert seqs(b) == [1, 2]


def test_read_to_end_ignores_partial_last_line(tmp_path):
    p = tmp_path / "a.jsonl"
    append(p, rec("load", 1, 1) + rec("ready", 1, 2) + rec("exit", 1, 3)[:10])
    tail, b = follow(p)
    tail.read_to_end()
    assert b.feed.runs.n_records == 2 and b.feed.n_bad == 0


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
        tail, b = follow(p)
        prev = 0
        for c in sorted(cuts) + [len(data)]:
            append(p, data[prev:c])
            tail.poll_once()
            prev = c
        tail.close()
        assert len(b.run.log) == 30  # one log line per record, none repeated
        assert len(b.run.turns) == 20 and b.run.tokens.n == 20  # one per request
        got = sorted(r.data["seq"] for run in b.feed.runs.runs
                     for r in ([run.load] + run.requests) if r is not None)
        assert got == list(range(1, 31)) and b.feed.n_bad == 0

    check()
