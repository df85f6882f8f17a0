"""The network attach sources feed the one run model (tui/feed/metrics.py, tui/feed/audit.py): a
metrics scrape interval is a token row, per-layer counts go to the same (layer, row) counts the
heatmap reads, a counter reset adds no row, a series not exported stays NaN; the followed audit file
and ``bmoe-top replay a.jsonl`` share one code path; the headless documents print the run model's
summary. Real HTTP on loopback, real files."""

from __future__ import annotations

import math
import time

import numpy as np
import orjson
import pytest

from bmoe_top.tui.feed.audit import load_audit
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.present.metrics import metrics_document
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.tail import FileTail


def test_add_layer_counts_feeds_the_heatmap_and_playback():
    run = RunModel()
    run.add_token_row({"wall_ms": 10.0})
    run.add_token_row({"wall_ms": 12.0})
    run.add_layer_counts(1, np.array([3, np.nan, 0]), np.array([1, 2, 4]))
    assert run.n_layer == 3 and run.route_token_count() == 2 and Playback(run).n == 2
    m = run.hit_matrix()
    assert m.shape == (3, 2) and np.isnan(m[:, 0]).all()
    assert m[0, 1] == 0.75 and math.isnan(m[1, 1]) and m[2, 1] == 0.0  # NaN layer: not known
    run.add_layer_counts(1, np.array([1, 0, 0]), np.array([0, 0, 0]))  # adds to the same cell
    assert run.hit_matrix()[0, 1] == 0.8
    run.add_layer_counts(0, np.array([-1.0]), np.array([5.0]))  # a counter that went down: nothing
    assert np.isnan(run.hit_matrix()[0, 0])
    assert run.routes.n == 0 and run.expert_counts()[0].sum() == 0  # no routing rows invented


def bmoe_exposition(k: int, *, start: float = 1.0) -> str:
    """bmoe-run serve's series after k tokens: 8 ms wall per token (2 io, 1 mgmt, 5 compute),
    3 of 4 lookups hit, 1 MiB read per token, per-layer counters for 2 layers."""
    c = [
        ("llamacpp:moe_cache_hits_total", 3 * k), ("llamacpp:moe_cache_misses_total", k),
        ("llamacpp:moe_cache_upload_bytes_total", k << 20), ("llamacpp:tokens_predicted_total", k),
        ("bmoe:timed_tokens_total", k), ("bmoe:token_wall_seconds_total", 0.008 * k),
        ("bmoe:token_io_seconds_total", 0.002 * k), ("bmoe:token_mgmt_seconds_total", 0.001 * k),
        ("bmoe:token_compute_seconds_total", 0.005 * k),
    ]
    lines = []
    for name, v in c:
        lines += [f"# TYPE {name} counter", f"{name} {v}"]
    lines += ["# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {start}"]
    lines.append("# TYPE llamacpp:moe_cache_layer_hits_total counter")
    lines += [f'llamacpp:moe_cache_layer_hits_total{{layer="{i}"}} {k * (i + 1)}' for i in range(2)]
    lines.append("# TYPE llamacpp:moe_cache_layer_misses_total counter")
    lines += [f'llamacpp:moe_cache_layer_misses_total{{layer="{i}"}} {k}' for i in range(2)]
    return "\n".join(lines) + "\n"


def test_metrics_intervals_are_token_rows(srv):
    srv.answers = [(200, bmoe_exposition(k).encode(), 0) for k in (10, 30, 30)]
    srv.answers.append((200, bmoe_exposition(4, start=2.0).encode(), 0))  # restarted
    srv.answers.append((200, bmoe_exposition(9, start=2.0).encode(), 0))
    p = MetricsPoller(srv.url, interval=0.05, timeout=2)
    run = bind(p, RunModel()).run
    p.scrape_once()
    assert run.tokens.n == 0 and run.status == "ok" and run.row_unit == "interval"
    time.sleep(0.02)  # not a wait: the clock moves between two scrapes (a rate needs it)
    p.scrape_once()
    tok = run.tokens
    assert tok.n == 1
    for name, want in (("wall_ms", 8.0), ("io_ms", 2.0), ("mgmt_ms", 1.0), ("compute_ms", 5.0),
                       ("read_mib", 1.0), ("cache_hit_pct", 75.0), ("tokens_in_interval", 20)):
        assert tok.last(name) == pytest.approx(want), name
    assert tok.last("tok_s") > 0 and tok.last("t") == pytest.approx(time.time(), abs=5)
    assert not tok.has("stall_ms")  # not exported: NaN, never 0
    assert run.hit_matrix()[:, 0].tolist() == pytest.approx([20 / 40, 40 / 60])
    time.sleep(0.02)  # not a wait: the clock moves between two scrapes
    p.scrape_once()  # an idle interval: a row whose per-token means are missing
    assert tok.n == 2 and math.isnan(tok.last("wall_ms")) and tok.last("tokens_in_interval") == 0
    assert np.isnan(run.hit_matrix()[:, 1]).all()  # no lookups in the interval
    time.sleep(0.02)  # not a wait: the clock moves between two scrapes
    p.scrape_once()  # restart: a new baseline, no row (never a negative one)
    assert tok.n == 2 and p.state.n_resets == 1 and metrics_document(run)["rates"]["reset"] is True
    time.sleep(0.02)  # not a wait: the clock moves between two scrapes
    p.scrape_once()
    assert tok.n == 3 and tok.last("tokens_in_interval") == 5 and tok.last("wall_ms") == pytest.approx(8.0)
    assert np.all(np.nan_to_num(tok.view("wall_ms")) >= 0)
    # the run panel's numbers: totals since the (restarted) server started
    s = run_summary(run)
    assert s["tokens"] == 9 and s["cache_hit_pct"] == pytest.approx(75.0) and s["s_per_tok"] == pytest.approx(0.008)
    assert s["io_s_tok"] == pytest.approx(0.002) and s["stall_s_tok"] is None
    # the headless twin's rates are the newest row of the run model
    h = metrics_document(run)
    assert h["rates"]["token_ms"]["wall"] == pytest.approx(8.0) and h["rates"]["token_ms"]["stall"] is None
    assert h["rates"]["layer_hit_pct"] == pytest.approx([50.0, 100 * 10 / 15])
    assert h["run"]["tokens"] == 9 and h["intervals"] == 3
    # the server goes away: status and reason in the run model, the rows stay
    srv.close()
    p.scrape_once()
    assert run.status == "refused" and run.status_detail and tok.n == 3
    p.client.close()


def rec(event, pid, n, hits, misses, **extra) -> bytes:
    r = {"event": event, "time": f"2026-11-29T12:00:{n:02d}.000Z", "pid": pid, "hybrid": False,
         "hits": hits, "hits_profile": 0, "misses": misses, "bytes_upload": 0, "bytes_cpu": 0, "copies": 0,
         "bytes_copy": 0, "swaps": 0}
    r.update(extra)
    return orjson.dumps(r) + b"\n"


def lay(h0, m0, h1, m1, res0=(0,), res1=(3,)):
    return [{"il": 0, "slots": 1, "hits": h0, "hits_profile": 0, "misses": m0, "resident": list(res0)},
            {"il": 1, "slots": 1, "hits": h1, "hits_profile": 0, "misses": m1, "resident": list(res1)}]


def request(pid, n, hits, misses, rh, rm, task):
    return rec("request", pid, n, hits, misses, slot=0, task=task, n_prompt=3, n_gen=8, t_prompt_ms=4.0,
               t_gen_ms=40.0, req_hits=rh, req_hits_profile=0, req_misses=rm, req_bytes_upload=2 << 20,
               req_bytes_cpu=0)


AUDIT = (rec("load", 1, 1, 0, 0, model={"name": "m", "n_layer": 2}, params={"n_ctx": 512}, layers=lay(0, 0, 0, 0))
         + rec("load", 2, 2, 0, 0, model={"name": "m", "n_layer": 2}, layers=lay(0, 0, 0, 0))
         + request(1, 3, 6, 2, 6, 2, 1) + b"not json\n" + request(2, 5, 1, 3, 1, 3, 1)
         + request(1, 6, 9, 7, 3, 5, 2)
         + rec("exit", 1, 7, 9, 7, layers=lay(5, 3, 4, 4, (0, 1), (3,))))


def test_audit_tail_and_replay_share_one_code_path(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(AUDIT)
    replay = RunModel()
    load_audit(replay, AUDIT, "a.jsonl")
    tail = FileTail(p)
    live = bind(tail, RunModel()).run
    tail.poll_once()
    tail.close()
    for run in (replay, live):
        assert run.row_unit == "request" and run.tokens.n == 3 and len(run.turns) == 3
        assert [t.done["pid"] for t in run.turns] == [1, 2, 1]  # pids told apart
        assert run.tokens.view("pid").tolist() == [1, 2, 1]
        assert run.tokens.view("wall_ms").tolist() == [5.0, 5.0, 5.0]  # 40 ms / 8 tokens
        assert run.tokens.view("read_mib").tolist() == [0.25, 0.25, 0.25]
        assert run.tokens.view("cache_hit_pct").tolist() == pytest.approx([75.0, 25.0, 9 / 16 * 100])
        assert run.turns[2].done["cache_hit_pct"] == pytest.approx(37.5)  # the request's own 3/(3+5)
        assert run.turns[0].done["n_gen"] == 8 and run.turns[0].done["t_gen_ms"] == 40.0
        assert run.problem_count == 1 and run.problems[0].lineno == 4
        assert run.resident.shape == (2, 4) and run.resident[0, 1] and run.resident[1, 3]
        assert run.meta["model"] == "m" and run.meta["n_ctx"] == "512"
        # pid 1's exit: per-layer counts since its load on its last request row (row 2)
        m = run.hit_matrix()
        assert np.isnan(m[:, :2]).all() and m[:, 2].tolist() == [5 / 8, 0.5]
    assert replay.tokens.view("turn").tolist() == live.tokens.view("turn").tolist()
    assert len(replay.log) == len(live.log) == 6
    assert {k: v for k, v in run_summary(replay).items() if k not in ("status", "status_detail", "sources")} == \
        {k: v for k, v in run_summary(live).items() if k not in ("status", "status_detail", "sources")}


def test_headless_audit_twin_prints_the_run_model(tmp_path):
    from bmoe_top.tui.headless import audit_once
    from bmoe_top.tui.present.numbers import to_json

    p = tmp_path / "a.jsonl"
    p.write_bytes(AUDIT)
    d = audit_once(p)
    assert d["status"] == "ok" and d["run"]["row_unit"] == "request"
    assert d["run"]["derived"]["token_rows"] == 3 and d["run"]["problems"] == 1
    assert d["run"]["tokens"] == 8  # the newest run (pid 2, opened last): its one request's n_gen
    orjson.loads(to_json(d))


def test_audit_records_sharing_a_line_are_all_applied_and_notes_are_problems(tmp_path):
    # two writers' records glued on one line, one cut record, one resident id over the cap
    glued = (request(1, 3, 6, 2, 6, 2, 1).rstrip(b"\n") + request(2, 5, 1, 3, 1, 3, 1).rstrip(b"\n")
             + b'{"event": "requ' + b"\n")
    data = (rec("load", 1, 1, 0, 0, model={"name": "m", "n_layer": 2}, layers=lay(0, 0, 0, 0))
            + rec("load", 2, 2, 0, 0, model={"name": "m", "n_layer": 2}, layers=lay(0, 0, 0, 0))
            + glued + request(1, 6, 9, 7, 3, 5, 2)
            + rec("exit", 1, 7, 9, 7, layers=lay(5, 3, 4, 4, (0, 1), (3, 4_000_000_000))))
    p = tmp_path / "a.jsonl"
    p.write_bytes(data)
    replay = RunModel()
    load_audit(replay, data, "a.jsonl")
    tail = FileTail(p)
    live = bind(tail, RunModel()).run
    tail.poll_once()
    tail.close()
    for run in (replay, live):
        assert run.tokens.n == 3 and [t.done["pid"] for t in run.turns] == [1, 2, 1]
        assert sorted(pr.lineno for pr in run.problems) == [3, 5]  # the cut record, the capped id
        assert any("resident expert id" in pr.reason for pr in run.problems)
        assert run.resident[1, 3] and run.resident.shape[1] < 4_000_000_000
