"""BMOE records into the run model (tui/feed/records.py): one table entry per record type, each
tried with the lines a runtime writes."""

from __future__ import annotations

import json
import math

import numpy as np
from helpers import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.bmoe_lines import parse_line
from bmoe_top.parsers.recording import parse_recording
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.summary import run_summary, summary_rows


def feed_lines(lines: list[str], run: RunModel | None = None) -> RunModel:
    run = run if run is not None else RunModel()
    feed = RecordFeed(run, "test")
    for i, line in enumerate(lines, 1):
        feed.apply(parse_line(line), t=1000.0 + i, lineno=i)
    return run


def test_a_session_turn():
    run = RunModel()
    run.note_request({"cmd": "generate", "id": 3, "prompt": "why experts?"})
    feed_lines([
        'loader noise BMOE_READY {"load_s":1.5,"arch":"qwen3moe","n_ctx":512,"n_layer":2,"n_expert":8,"model":"m"}',
        'BMOE_BEGIN {"id":3}',
        'BMOE_ROUTE {"step":1,"turn":0,"phase":"prefill","experts":[[1,2,3],[4]],"hit":[[0,0,0],[0]]}',
        'BMOE_ROUTE {"step":1,"turn":0,"phase":"decode","experts":[[1,2],[4,5]],"hit":[[1,0],[1,0]]}',
        'BMOE_LOAD {"mb":2.5,"ms":3.0}',
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10.0,"io_ms":2.0,"compute_ms":7.0,"mgmt_ms":1.0,'
        '"stall_ms":0.0,"read_mb":2.5,"cache_hit_pct":50.0,"text":"Ex","majflt":3,"note":"x"}',
        'BMOE_PROGRESS {"step":2,"steps":2,"wall_ms":12.0,"io_ms":2.0,"compute_ms":9.0,"mgmt_ms":1.0,'
        '"stall_ms":0.0,"read_mb":0.0,"cache_hit_pct":60.0,"text":"Experts"}',
        'BMOE_ROUTE {"step":2,"turn":0,"phase":"decode","experts":[[2,3],[5,6]],"hit":[[1,1],[1]]}',
        'BMOE_RESIDENT {"step":2,"n_expert":8,"resident":[[1,2,3],[4,5,6]],"resident_mib":3.0,"budget_mib":4.0}',
        'BMOE_DONE {"id":3,"cancelled":false,"tokens":2,"tok_s":90.9,"prefill_s":0.2,"cache_hit_pct":60.0,'
        '"n_prompt":4,"n_past":6,"cache_resident_mib":3.0,"cache_budget_mib":4.0,"text":"Experts!","read_mib":2.5}',
        'BMOE_FUTURE {"x":1}',
        'BMOE_PROGRESS {"step":"three"}',
    ], run)
    assert run.ready["arch"] == "qwen3moe" and run.meta["n_ctx"] == "512" and run.meta["model"] == "m"
    assert (run.n_layer, run.n_expert) == (2, 8) and run.summary["load_s"] == 1.5
    turn = run.turns[0]
    assert turn.id == 3 and turn.prompt == "why experts?" and turn.text == "Experts!" and not turn.cancelled
    assert turn.done["n_past"] == 6
    tok = run.tokens
    assert tok.n == 2 and tok.view("wall_ms").tolist() == [10.0, 12.0] and tok.view("read_mib").tolist() == [2.5, 0.0]
    assert tok.view("load_mib").tolist()[0] == 2.5 and math.isnan(tok.view("load_mib")[1])
    assert tok.view("majflt")[0] == 3 and not tok.has("note")  # numeric extras only
    assert tok.view("text_end").tolist() == [2.0, 7.0] and tok.view("t").tolist() == [1006.0, 1007.0]
    # the route before token 1's progress and the one after token 2's both land on their token
    assert run.routes.tok.tolist() == [-1] * 4 + [0] * 4 + [1] * 4
    share = run.hit_matrix()
    assert share[:, 0].tolist() == [0.5, 0.5] and share[:, 1].tolist() == [1.0, 1.0]
    assert run.top_k == 2  # decode rows only (a prefill row is the union over the batch)
    assert run.resident.sum() == 6 and run.resident_mib == 3.0 and run.budget_mib == 4.0
    assert run.summary["tokens"] == 2 and run.summary["read_mib_per_tok"] == 1.25
    assert run.summary["s_per_tok"] == 1 / 90.9
    assert "loader noise " in run.log and "BMOE_FUTURE {'x': 1}" in run.log
    assert run.problem_count == 1 and run.problems[0].lineno == 12 and run.problems[0].source == "test"


def test_a_rejected_request_is_turn_less_and_one_shot_tokens_open_a_turn():
    progress = ('BMOE_PROGRESS {"step":1,"steps":1,"wall_ms":1.0,"io_ms":0.5,"compute_ms":0.5,"mgmt_ms":0.0,'
                '"stall_ms":0.0,"read_mb":0.0,"cache_hit_pct":-1.0,"delta_text":"a"}')
    run = feed_lines([
        progress,
        'BMOE_BEGIN {"id":9}',
        'BMOE_ERROR {"id":9,"fatal":false,"msg":"prompt plus n_predict exceeds n_ctx"}',
        'BMOE_BEGIN {"id":10}',
        progress,
    ])
    # the refused request opened no turn: the next one is turn 2 and its token is labelled so
    assert [t.id for t in run.turns] == [None, 10] and run.turn_count == 2 and run.turns[0].text == "a"
    assert run.tokens.view("turn").tolist() == [0.0, 1.0]
    (r,) = run.turnless
    assert (r.id, r.status, r.reason, r.after) == (9, "rejected", "prompt plus n_predict exceeds n_ctx", 1)
    assert any("BMOE_ERROR id=9" in line for line in run.log)


def test_a_request_refused_before_its_begin_is_turn_less_once_the_session_is_ready():
    run = RunModel()
    run.note_request({"cmd": "generate", "id": 3, "prompt": "far too long"})
    feed = RecordFeed(run, "test")
    feed.apply(parse_line('BMOE_ERROR {"id":0,"fatal":true,"msg":"cannot open the model"}'))
    assert not run.turnless  # before BMOE_READY: the session's error, no request's
    feed.apply(parse_line('BMOE_READY {"load_s":1.0,"arch":"qwen3moe","n_ctx":64}'))
    feed.apply(parse_line('BMOE_ERROR {"id":3,"fatal":false,"msg":"prompt + n_predict exceeds n_ctx"}'))
    feed.apply(parse_line('BMOE_ERROR {"id":null,"fatal":false,"msg":"malformed JSON request"}'))
    (r,) = run.turnless  # bmoe-run checks a request before its BMOE_BEGIN
    assert (r.id, r.prompt, r.status, r.after) == (3, "far too long", "rejected", 0) and not run.turns
    # refused while another request generates: that turn keeps its tokens, its text and its end
    for line in ('BMOE_BEGIN {"id":4}', 'BMOE_PROGRESS {"step":1,"steps":2,"delta_text":"a"}',
                 'BMOE_ERROR {"id":5,"fatal":false,"msg":"generate: \'prompt\' must be a string"}',
                 'BMOE_PROGRESS {"step":2,"steps":2,"delta_text":"b"}', 'BMOE_DONE {"id":4,"tokens":2,"tok_s":5.0}'):
        feed.apply(parse_line(line))
    (t,) = run.turns
    assert (t.id, t.text, t.done["tokens"], t.error, run.tokens.n) == (4, "ab", 2, None, 2)
    assert [(r.id, r.after) for r in run.turnless] == [(3, 0), (5, 1)]


def test_an_error_after_tokens_stays_on_its_turn():
    run = feed_lines([
        'BMOE_BEGIN {"id":4}',
        'BMOE_PROGRESS {"step":1,"steps":4,"wall_ms":1.0,"delta_text":"a"}',
        'BMOE_ERROR {"id":4,"fatal":true,"msg":"decode failed"}',
    ])
    assert [t.id for t in run.turns] == [4] and run.turns[0].error == "decode failed" and not run.turnless


def test_a_pair_cut_between_records_reaches_the_turn_whole():
    run = RunModel()
    feed = RecordFeed(run, "test")
    for line in ('BMOE_PROGRESS {"step":1,"text":"a\\ud800b \\ud83d"}',
                 'BMOE_PROGRESS {"step":2,"text":"a\\ud800b \\ud83d\\ude00"}'):
        feed.apply(parse_line(line))
    t = run.turns[0]
    assert t._text._pieces == ["a\ufffdb ", "😀"]  # appended piece by piece, never rebuilt
    feed.apply(parse_line('BMOE_DONE {"id":1,"text":"a\\ud800b \\ud83d\\ude00!"}'))
    assert t.text == "a\ufffdb 😀!" and t.done is not None
    assert run.tokens.view("text_end").tolist() == [4.0, 5.0]
    assert np.isnan(run.tokens.view("wall_ms")).all()  # absent, not 0


def test_the_additive_fields_bmoe_run_sends_reach_the_summary(tmp_path):
    """A recorded session of bmoe-run (docs/telemetry.md "Additive fields"): READY's threads, I/O
    lanes, O_DIRECT and expert bank go to the run header; the cache is known from the first token;
    the end record's TTFT, both hit % and both MiB definitions, evictions, re-reads, RSS and the
    per-token faults and CPU reach the summary and its rows."""
    rec = parse_recording(synth.session_recording(turns=2, n=10, additive=True))
    run = RunModel()
    feed = RecordFeed(run, "test")
    first_token = next(i for i, e in enumerate(rec.entries) if e.line.startswith("BMOE_PROGRESS"))
    for e in rec.entries[:first_token + 1]:
        if e.src == "stdout":
            feed.apply(parse_line(e.line), t=e.t)
    # before any BMOE_DONE: the cache, the run so far
    assert (run.resident_mib, run.budget_mib) == (2.0, 4.0)
    s = run_summary(run)
    assert s["derived"]["resident_mib"] == 2.0 and s["derived"]["budget_mib"] == 4.0
    assert s["extra"]["hit_pct_since_load"] == 55.0 and s["extra"]["rss_mib"] == 220.0
    assert run.meta["threads"] == "2" and run.meta["io_threads"] == "1" and run.meta["o_direct"] == "True"
    assert run.meta["expert_bank_MiB"] == "12.0"

    path = tmp_path / "run.rec.jsonl"
    path.write_bytes(synth.session_recording(turns=2, n=10, additive=True))
    s = run_summary(open_paths([str(path)]))
    assert s["ttft_s"] == 0.15 and s["prefill_tps"] == 50.0  # the runtime's own figures win
    assert s["compute_s_tok"] == 0.044 and s["io_s_tok"] == 0.005 and s["read_mib_per_tok"] == 0.5
    extra = s["extra"]
    assert extra["hit_pct_decode"] == 60.0 and extra["hit_pct_since_load"] == 56.0  # the newest turn's
    assert extra["xfer_mib"] == 5.625 and extra["xfer_mib_tok"] == 0.5625 and extra["decode_tok_s"] == 22.2
    assert extra["cache_evictions"] == 7 and extra["cache_rereads"] == 3
    assert extra["majflt/tok"] == 2.0 and math.isclose(extra["cpu_s/tok"], 0.09)
    assert extra["rss_mib"] == 230.0 and extra["peak_rss_mib"] == 240.0
    rows = {label: text for label, text, _kind in summary_rows(s)}
    assert rows["TTFT/turn"] == "150 ms" and rows["hit decode"] == "60.0 %" and rows["hit since load"] == "56.0 %"
    assert rows["payload/tok"] == "0.500 MiB" and rows["aligned/tok"] == "0.562 MiB"  # 3 significant digits
    assert rows["evictions"] == "7" and rows["re-reads"] == "3" and rows["peak RSS"] == "240 MiB"
    assert rows["majflt/token"] == "2.00" and rows["cpu/token"] == "90.0 ms"


def test_ttft_is_measured_from_the_request_when_the_runtime_does_not_send_it():
    """bmoe-cli's BMOE_DONE has no TTFT: it is the time from the request being sent (its
    ``sent_t``) to the turn's first token; with neither time known it stays absent."""
    run = RunModel()
    run.note_request({"cmd": "generate", "id": 1, "prompt": "p", "sent_t": 1000.5})
    feed_lines([
        'BMOE_BEGIN {"id":1}',  # t = 1001
        'BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10.0,"text":"a"}',  # t = 1002: the first token
        'BMOE_PROGRESS {"step":2,"steps":2,"wall_ms":10.0,"text":"ab"}',
        'BMOE_DONE {"id":1,"tokens":2,"tok_s":100.0,"text":"ab"}',
    ], run)
    assert run.summary["ttft_s"] == 1.5
    assert run.summary_notes["ttft_s"].startswith("per turn") and "load not included" in run.summary_notes["ttft_s"]
    untimed = RunModel()
    untimed.note_request({"cmd": "generate", "id": 1, "prompt": "p"})
    feed_lines(['BMOE_BEGIN {"id":1}', 'BMOE_PROGRESS {"step":1,"text":"a"}', 'BMOE_DONE {"id":1,"tokens":1}'],
               untimed)
    assert "ttft_s" not in untimed.summary and "ttft_s" not in untimed.summary_notes  # absent, not 0


def test_a_contract_only_session_shows_prefill_rate_and_per_token_times_from_its_rows(tmp_path):
    """bmoe-cli's BMOE_DONE has no prefill tok/s, compute or I/O per token: the turn's own numbers
    and token rows give them, marked as derived."""
    path = tmp_path / "cli.rec.jsonl"
    path.write_bytes(synth.session_recording(turns=2, n=10))
    s = run_summary(open_paths([str(path)]))
    assert s["compute_s_tok"] is None and s["io_s_tok"] is None  # the source's own: not sent
    d = s["derived"]
    assert math.isclose(d["compute_s_tok"], 0.044) and math.isclose(d["io_s_tok"], 0.005)
    assert math.isclose(d["prefill_tps"], 50.0)
    rows = {label: (text, kind) for label, text, kind in summary_rows(s)}
    assert rows["compute/token"] == ("44.0 ms (from token rows)", "derived")
    assert rows["flash io/token"] == ("5.00 ms (from token rows)", "derived")
    assert rows["prefill tok/s"][1] == "derived"


@settings(max_examples=150, deadline=None)
@given(resident=st.lists(st.lists(st.integers(-3, 12), max_size=10), max_size=6),
       n_expert=st.one_of(st.none(), st.integers(1, 10)), before=st.integers(0, 8))
def test_resident_lists_become_the_same_matrix_as_one_layer_at_a_time(resident, n_expert, before):
    """BMOE_RESIDENT's lists -> the bool [layer, expert] matrix (ids outside [0, n_expert) left
    out; n_expert from the line, else the run's, else the largest id + 1; the run's layers kept)."""
    run = RunModel()
    if before:
        run.set_dims(n_layer=before)
    fields = {"step": 1, "resident": resident, **({"n_expert": n_expert} if n_expert is not None else {})}
    feed_lines(["BMOE_RESIDENT " + json.dumps(fields)], run)
    ne = n_expert if n_expert is not None else max(0, 1 + max((max(r) for r in resident if r), default=-1))
    want = np.zeros((max(len(resident), before), ne), dtype=bool)
    for il, row in enumerate(resident):
        want[il, [e for e in row if 0 <= e < ne]] = True
    assert run.resident is not None and np.array_equal(run.resident, want)
