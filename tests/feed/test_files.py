"""Recorded files into one run model (tui/feed/files.py): formats merged into one run, overlap
never stacks io on wall, transcripts with routing and residency, clear errors, tolerant text."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from helpers import synth

from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources.files import ReplayError


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    r = tmp_path / "run.route.csv"
    r.write_bytes(synth.route_trace(64))
    return [str(p), str(r)]


def test_csv_and_route_trace_merge_into_one_run(csv_run):
    run = open_paths(csv_run)
    assert run.tokens.n == 64
    assert run.n_layer == 8 and run.n_expert == 32 and run.top_k == 2
    share = run.hit_matrix()
    assert share.shape == (8, 64)
    assert np.nanmax(share) <= 1.0 and np.nanmin(share) >= 0.0
    counts, hits = run.expert_counts()
    # 4 prefill steps + 64 decode steps, 8 layers, top-2
    assert counts.sum() == (4 + 64) * 8 * 2
    assert (hits <= counts).all()
    s = run_summary(run)
    assert s["tokens"] == 64 and s["mode"] == "serial"


def test_overlap_never_stacks_io_on_wall(tmp_path):
    p = tmp_path / "ov.csv"
    p.write_bytes(synth.token_csv(32, overlap=True))
    run = open_paths([str(p)])
    mode, why = run.mode()
    assert mode == "overlap" and "overlap=1" in why
    b = run.breakdown()
    io = run.tokens.view("io_ms")
    assert (io > b["wall"]).all()  # lane-busy time exceeds wall under overlap
    np.testing.assert_allclose(b["flash"], run.tokens.view("stall_ms"))
    np.testing.assert_allclose(b["compute"] + b["flash"] + b["mgmt"], b["wall"], atol=0.01)


def test_progress_transcript_with_route_and_resident(tmp_path):
    p = tmp_path / "stdout.txt"
    p.write_bytes(synth.progress_transcript(24))
    run = open_paths([str(p)])
    assert run.tokens.n == 24
    assert run.resident is not None and run.resident.shape == (4, 16)
    assert run.routes.n == 24 * 4 * 2
    assert run.turns[0].text.startswith("The router picks")
    # the first token's routing is all misses, later ones hit
    share = run.hit_matrix()
    assert np.all(share[:, 0] == 0.0)
    assert np.nanmean(share[:, -1]) > 0.0


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(ReplayError, match="no such file"):
        open_paths([str(tmp_path / "nope.csv")])


def test_stray_nul_byte_keeps_a_transcript_readable(tmp_path):
    p = tmp_path / "nul.txt"
    body = synth.progress_transcript(6).replace(b"=== perf ===", b"note\x00here\n=== perf ===")
    p.write_bytes(body)
    run = open_paths([str(p)])
    assert run.tokens.n == 6


def test_mode_from_summary_without_rows_and_unknown_without_either(tmp_path):
    p = tmp_path / "log.txt"
    p.write_bytes(b"generation: 10 tokens, 0.1 s/token (10.0 tok/s)\n"
                  b"moe-stream: read 5.0 MiB (0.50 MiB/token), decode 0.1 s/token (compute 0.05 + cache mgmt "
                  b"0.01 + flash I/O 0.08 s/token, 60 MiB/s) stall_s/tok=0.020\n")
    run = open_paths([str(p)])
    assert run.mode()[0] == "overlap"
    q = tmp_path / "reqs.jsonl"
    q.write_bytes(b'{"cmd":"generate","id":1,"prompt":"x"}\n{"cmd":"close"}\n')
    assert open_paths([str(q)]).mode()[0] == "unknown"


def rec(event, pid, n, **extra):
    r = {"event": event, "time": f"2026-11-29T12:00:{n % 60:02d}.{n % 1000:03d}Z", "pid": pid,
         "hybrid": False, "hits": n, "hits_profile": 0, "misses": n, "bytes_upload": 0, "bytes_cpu": 0,
         "copies": 0, "bytes_copy": 0, "swaps": 0, "seq": n}
    r.update(extra)
    return orjson.dumps(r) + b"\n"


def append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


def test_replay_audit_and_strp(tmp_path):
    from bmoe_top.parsers.strp import StrpProfile, write_strp

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


def _csv_and_log(tmp_path, ttft_line: str):
    """A CSV sink whose ``# summary`` gives load and prefill but no TTFT, and its log."""
    csv = tmp_path / "q.csv"
    csv.write_text("step,wall_ms,compute_ms,io_ms,read_bytes,cache_hit_pct\n"
                   + "".join(f"{i},100,60,40,1048576,50\n" for i in range(4))
                   + "# summary tokens=4 s/tok=0.100 tok/s=10.0 n_prompt=34 load_s=16.062 prefill_s=11.775 "
                     "prefill_tps=2.89\n")
    log = tmp_path / "q.log"
    log.write_text("generation: 4 tokens, 0.100 s/token (10.0 tok/s)\n"
                   f"prefill: 34 tokens, 11.775 s (2.9 tok/s) | model load 16.062 s{ttft_line}\n")
    return str(csv), str(log)


def test_a_ttft_the_log_states_beats_the_csvs_load_plus_prefill(tmp_path):
    """CSV + log of one real run gave ``ttft_s`` 27.837000000000003: the CSV's load + prefill
    (binary float noise included) in place of the 27.836 s the log prints."""
    csv, log = _csv_and_log(tmp_path, " | TTFT 27.836 s")
    for paths in ([csv, log], [log, csv]):
        run = open_paths(paths)
        assert run.tokens.n == 4 and run_summary(run)["ttft_s"] == 27.836, paths
    # the CSV alone: load + prefill, as the decimals add up
    assert run_summary(open_paths([csv]))["ttft_s"] == 27.837
    assert orjson.dumps(run_summary(open_paths([csv]))["ttft_s"]) == b"27.837"
    # a log without a TTFT of its own leaves the derived one
    csv2, log2 = _csv_and_log(tmp_path, "")
    assert run_summary(open_paths([csv2, log2]))["ttft_s"] == 27.837


def test_no_derived_number_of_the_real_runs_carries_float_noise(real_runs):
    """Every ``replay --summary --json`` figure of the real CSV + log pairs is the decimal the
    files add up to (no ``...000000000003``)."""
    import re

    d = real_runs / "bigmoeonedge-2026-07-12"
    for stem, ttft in (("qwen_c4000_l4_ov", 27.836), ("gemma_stream", 30.944)):
        files = sorted(str(p) for p in d.glob(f"{stem}.*"))
        doc = run_summary(open_paths(files))
        assert doc["ttft_s"] == ttft
        text = orjson.dumps(doc).decode()
        assert not re.search(r"\d\.\d*(0{6,}|9{6,})\d", text), re.findall(r"\d+\.\d*(?:0{6,}|9{6,})\d+", text)
