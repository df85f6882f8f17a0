"""Every real recorded run in ../shared/data/real-runs: sniffed right, parsed without exception,
no problems (these files are clean), and the numbers the files state. Skips when the folder is
absent (a fresh clone has no ../shared)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import REAL_RUNS as REAL

from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import expert_counts, expert_hits, hit_matrix, load_route_trace
from bmoe_top.parsers.sniff import sniff
from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.parsers.transcript import parse_transcript

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/real-runs is absent")

KINDS = {
    "bigmoeonedge-2026-07-12/gemma_stream.csv": "token_csv",
    "bigmoeonedge-2026-07-12/gemma_stream.log": "transcript",
    "bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.csv": "token_csv",
    "bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.log": "transcript",
    "bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.metrics": "sidecar",
    "bigmoeonedge-2026-07-12-pr23/gemma_base.csv": "token_csv",
    "bigmoeonedge-2026-07-12-pr23/gemma_base.log": "transcript",
    "bigmoeonedge-2026-07-15/qwen.log": "transcript",
    "bigmoeonedge-2026-07-15/qwen.metrics": "token_csv",
    "bigmoeonedge-2026-07-15/qwen.route.csv": "route_trace",
    "bigmoeonedge-2026-07-17/qwen_k6.out": "transcript",
    "bigmoeonedge-2026-07-21/bmoe-20260721-090406.csv": "token_csv",
    "bigmoeonedge-2026-07-22/bmoe-20260722-142300.csv": "token_csv",
    "bigmoeonedge-2026-07-22/session-requests.jsonl": "requests",
}


def _files() -> list[str]:
    if not REAL.is_dir():
        return sorted(KINDS)
    return sorted(str(p.relative_to(REAL)) for p in REAL.rglob("*") if p.is_file() and p.name != "README.md")


def parse(kind: str, data: bytes):
    if kind == "token_csv":
        return load_token_csv(data)
    if kind == "route_trace":
        return load_route_trace(data)
    if kind in ("transcript", "sidecar"):
        return parse_transcript(data)
    if kind == "requests":
        reqs, problems = parse_requests(data)

        class R:
            pass
        r = R()
        r.requests, r.problems = reqs, problems
        return r
    raise AssertionError(f"no parser for {kind}")


@pytest.mark.parametrize("rel", _files())
def test_every_real_file_sniffs_and_parses_clean(rel):
    data = (REAL / rel).read_bytes()
    assert rel in KINDS, f"new file in real-runs, add its expected kind: {rel}"
    kind = sniff(data, Path(rel).name)
    assert kind == KINDS[rel]
    assert sniff(data) == kind  # content alone decides
    result = parse(kind, data)
    assert result.problems == []


def test_headline_run_1469_tokens_3938_tok_s():
    t = load_token_csv((REAL / "bigmoeonedge-2026-07-22/bmoe-20260722-142300.csv").read_bytes())
    assert t.n_rows == 1469 and len(t.header) == 22
    assert t.summary["tok_s"] == 3.938 and t.summary["tokens"] == 1469
    assert t.columns["step"][0] == 1 and t.columns["step"][-1] == 1469
    assert t.meta["format"] == "bmoe_metrics v1"
    assert (t.meta["arch"], t.meta["n_layer"], t.meta["n_expert"], t.meta["overlap"]) == (
        "qwen35moe", "40", "256", "1")
    assert t.summary["experts_dropped"] == 66582  # non-canonical keys survive verbatim
    assert set(t.columns["turn"]) == {0.0}


@pytest.mark.parametrize("rel", [k for k, v in KINDS.items() if v == "token_csv"])
def test_every_token_csv_row_count_matches_its_summary(rel):
    t = load_token_csv((REAL / rel).read_bytes())
    assert len(t.summaries) == 1
    assert t.n_rows == t.summary["tokens"]
    assert not np.isnan(t.columns["wall_ms"]).any()
    # mean wall time per token agrees with the summary's s/tok (rounded to ms in the file)
    assert np.mean(t.columns["wall_ms"]) / 1000 == pytest.approx(t.summary["s_per_tok"], abs=0.002)


def test_column_variants():
    eight = load_token_csv((REAL / "bigmoeonedge-2026-07-12/gemma_stream.csv").read_bytes())
    assert len(eight.header) == 8 and eight.column("mgmt_ms") is None
    assert eight.summary["cache_hit_pct"] == -1.0  # no cache, kept as -1
    nine = load_token_csv((REAL / "bigmoeonedge-2026-07-12-pr23/gemma_base.csv").read_bytes())
    assert len(nine.header) == 9
    assert (nine.columns["io_ms"] > nine.columns["wall_ms"]).any()  # overlap: lane-busy io_ms
    eleven = load_token_csv((REAL / "bigmoeonedge-2026-07-15/qwen.metrics").read_bytes())
    assert eleven.header[-2:] == ["majflt", "cpu_ms"]


def test_log_and_csv_of_the_same_run_agree():
    for log, csv in [("bigmoeonedge-2026-07-12-pr23/gemma_base.log", "bigmoeonedge-2026-07-12-pr23/gemma_base.csv"),
                     ("bigmoeonedge-2026-07-15/qwen.log", "bigmoeonedge-2026-07-15/qwen.metrics"),
                     ("bigmoeonedge-2026-07-12/gemma_stream.log", "bigmoeonedge-2026-07-12/gemma_stream.csv")]:
        a = parse_transcript((REAL / log).read_bytes()).summary
        b = load_token_csv((REAL / csv).read_bytes()).summary
        for k in ("tokens", "s_per_tok", "tok_s", "read_mib", "compute_s_tok", "io_s_tok", "n_prompt",
                  "load_s", "prefill_s", "ttft_s"):
            assert a[k] == pytest.approx(b[k], rel=1e-3), (log, k)
        assert a["read_mib_s"] == pytest.approx(b["read_mib_s"], abs=1.0)


def test_logs_with_bom_sidecar_and_overlap_line():
    tr = parse_transcript((REAL / "bigmoeonedge-2026-07-12-pr23/gemma_base.log").read_bytes())
    assert tr.summary["stall_s_tok"] == 0.133 and tr.summary["mgmt_s_tok"] == 0.046
    assert tr.sidecar["peak_rss_kb"] == "5949324" and tr.sidecar["cpu_temp_max_mC"] == "74100"
    assert tr.answer == "" and tr.text_lines == []


def test_console_log_with_loader_noise():
    tr = parse_transcript((REAL / "bigmoeonedge-2026-07-15/qwen.log").read_bytes())
    assert tr.prompt == "Explain how a mixture-of-experts model decides which experts handle each token."
    assert tr.answer.startswith("A **mixture-of-experts (MoE)** model")
    assert "llama_" not in tr.answer and "print_info" not in tr.answer
    assert tr.summary["tokens"] == 128 and tr.summary["cpu_s/tok"] == 0.5831
    assert len(tr.text_lines) > 800  # the loader log is kept as text, not dropped


def test_no_progress_output_reasoning_inline():
    tr = parse_transcript((REAL / "bigmoeonedge-2026-07-17/qwen_k6.out").read_bytes())
    assert tr.prompt.startswith("Write a long detailed essay")
    assert tr.reasoning.startswith("Okay, I need to write")
    assert tr.summary["tokens"] == 256 and tr.summary["tok_s"] == 4.168
    assert tr.summary["majflt/tok"] == 1188.73


def test_route_trace_48_layers_128_experts_top6():
    t = load_route_trace((REAL / "bigmoeonedge-2026-07-15/qwen.route.csv").read_bytes())
    assert (t.n_layer, t.n_expert, t.top_k) == (48, 128, 6)
    assert len(t.layer_info) == 48 and t.layer_info[0]["expert_bytes"] == 3059712
    assert set(np.unique(t.phase)) == {0, 1}
    steps, share = hit_matrix(t)
    assert share.shape == (48, len(steps)) and len(steps) == 128  # 128 decode tokens, as the CSV says
    assert np.nanmin(share) >= 0 and np.nanmax(share) <= 1
    counts = expert_counts(t, phase=1)
    assert counts.shape == (48, 128) and (counts.sum(axis=1) == 128 * 6).all()
    assert (expert_hits(t, phase=1) <= counts).all()


def test_real_session_requests():
    reqs, problems = parse_requests((REAL / "bigmoeonedge-2026-07-22/session-requests.jsonl").read_bytes())
    assert problems == [] and len(reqs) == 16
    assert all(r.cmd == "generate" for r in reqs[:-1]) and reqs[-1].cmd == "close"
    assert "\n" in reqs[0].prompt and reqs[0].n_predict == 400 and reqs[0].think is False


GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "parsers" / "real_runs_digest.json"


@pytest.mark.parametrize("rel", sorted(KINDS))
def test_every_real_file_parses_to_the_recorded_numbers(rel):
    """Row counts, column sums and hashes, summaries, metadata and answers of every real file are the
    ones recorded in the golden digest (a parser change that moves a number fails here)."""
    import orjson
    from helpers.digest import digest

    want = orjson.loads(GOLDEN.read_bytes())[rel]
    got = orjson.loads(orjson.dumps(digest((REAL / rel).read_bytes(), Path(rel).name)))
    assert got == want
