"""The files a real bmoe-run writes (``--csv`` with its additive columns and ``# summary`` keys,
the ``--progress`` transcript with its extended end-of-run lines), read back by the file feeds:
every figure the runtime wrote reaches the summary with the name that says which definition it
is (docs/telemetry.md "Additive fields")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bmoe_top.parsers.summary_lines import parse_summary_line
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.present.summary import run_summary, summary_rows

BMOE_RUN = Path(sys.executable).with_name("bmoe-run")
pytestmark = pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, Path]:
    from bmoe_top.runtime.models import make_model

    d = tmp_path_factory.mktemp("rt-files")
    model = make_model(d / "tiny.gguf", preset="tiny", qtype="q8_0", seed=6)
    csv, transcript = d / "run.csv", d / "stdout.txt"
    r = subprocess.run([str(BMOE_RUN), "-m", str(model), "-p", "Hello", "-n", "8", "-c", "256", "--quiet",
                        "--progress", "--csv", str(csv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    transcript.write_text(r.stdout)
    return csv, transcript


@pytest.mark.parametrize("which", ["csv", "transcript"])
def test_the_additive_figures_of_a_real_run_reach_the_summary(written, which):
    path = written[0] if which == "csv" else written[1]
    s = run_summary(open_paths([str(path)]))
    assert s["tokens"] == 8 and s["problems"] == 0, s
    extra = s["extra"]
    assert 0 <= extra["hit_pct_decode"] <= 100 and 0 <= extra["hit_pct_since_load"] <= 100
    assert extra["hit_pct_decode"] == s["cache_hit_pct"]  # bmoe-run's contract field is the decode-only one
    assert extra["xfer_mib"] >= s["read_mib"] > 0
    assert isinstance(extra["cache_evictions"], int) and isinstance(extra["cache_rereads"], int)
    assert extra["cpu_s/tok"] >= 0 and extra["majflt/tok"] >= 0
    assert extra["decode_tok_s"] > 0
    # an end-of-run TTFT is bmoe-cli's: the model load included, under the plain label
    assert s["ttft_s"] >= s["load_s"] > 0 and "ttft_s" not in s["summary_notes"]
    labels = [label for label, _text, _kind in summary_rows(s)]
    assert "TTFT" in labels and "TTFT/turn" not in labels
    assert {"hit decode", "hit since load", "payload/tok", "aligned/tok", "evictions", "re-reads"} <= set(labels)


def test_the_extensions_are_read_only_where_a_line_carries_them():
    """bmoe-cli's lines (no extension) give the contract's numbers only; bmoe-run's give both."""
    cli = parse_summary_line("moe-cache: 46.88% hit, resident 0.797 MiB")
    run = parse_summary_line("moe-cache: 46.88% hit, resident 0.797 MiB | decode only; 38.46% hit since load")
    assert cli is not None and run is not None
    assert cli.values == {"cache_hit_pct": 46.88, "resident_mib": 0.797}
    assert run.values == {**cli.values, "hit_pct_decode": 46.88, "hit_pct_since_load": 38.46}
    gen = parse_summary_line("generation: 8 tokens, 0.0010 s/token (1033.55 tok/s) per-token wall; "
                             "1051.39 tok/s in llama_decode alone")
    assert gen is not None and gen.exact and gen.values["decode_tok_s"] == 1051.39 and gen.values["tok_s"] == 1033.55


def test_a_real_session_with_a_refused_request_replays_as_one_set_of_turns(real_runs, tmp_path):
    """bmoe-run --session over the first six requests of a real benchmark driver's request log
    (../shared), the fifth too long for the context: its CSV (a turn column from 0, a # summary per
    turn), its stdout (the refusal comes before any BMOE_BEGIN) and the request log, in any order,
    give five turns and one refused request, each with its real prompt."""
    import itertools

    import orjson

    from bmoe_top.runtime.models import make_model

    real = (real_runs / "bigmoeonedge-2026-07-22" / "session-requests.jsonl").read_bytes().splitlines()
    reqs = [orjson.loads(line) for line in real[:6]]
    for r in reqs:
        if r["id"] != 4:
            r["n_predict"] = 8  # byte tokens: id 4 keeps its real 400, and 685 + 400 exceed -c 720
    log = tmp_path / "session-requests.jsonl"
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*reqs, {"cmd": "close"}]))
    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=7)
    csv, stdout = tmp_path / "session.csv", tmp_path / "session.stdout"
    with log.open("rb") as stdin:
        r = subprocess.run([str(BMOE_RUN), "-m", str(model), "--session", "--quiet", "-c", "720", "-t", "2",
                            "--csv", str(csv)], stdin=stdin, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    stdout.write_bytes(r.stdout)
    assert b'BMOE_ERROR {"id":4' in r.stdout and b'BMOE_BEGIN {"id":4}' not in r.stdout
    done = {d["id"]: d for d in (orjson.loads(line.split(b" ", 1)[1]) for line in r.stdout.splitlines()
                                 if line.startswith(b"BMOE_DONE "))}
    want = [(None, 4, "rejected") if rq["id"] == 4 else (t, rq["id"], "done")
            for t, rq in zip([1, 2, 3, 4, None, 5], reqs)]
    for paths in itertools.permutations([csv, stdout, log]):
        s = run_summary(open_paths([str(p) for p in paths]))
        got = s["turn_list"]
        assert [(e["turn"], e["id"], e["status"]) for e in got] == want, paths
        assert [e["prompt"] for e in got] == [rq["prompt"] for rq in reqs] and not s["alerts"]
        for e in got:
            if e["turn"] is not None:
                d = done[e["id"]]
                assert (e["tokens"], e["tok_s"], e["cache_hit_pct"]) == (8, d["tok_s"], d["cache_hit_pct"])
        assert got[4]["reason"].startswith("prompt (685 tokens in context) plus n_predict (400) exceeds n_ctx")
        assert s["turns"] == 5


def test_a_run_s_own_log_merges_with_its_csv(tmp_path):
    # bmoe-run hands llama.cpp its model as /proc/self/fd/N when it streams, and the loader's
    # "loaded meta data ... from /proc/self/fd/4" line was read as the model: the log and the CSV
    # of one run were "from different runs" and not merged
    from bmoe_top.runtime.models import make_model
    from bmoe_top.tui.feed.loader_log import loader_facts

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=6)
    csv, log = tmp_path / "run.csv", tmp_path / "run.out"
    with open(log, "wb") as out:
        r = subprocess.run([str(BMOE_RUN), "-m", str(model), "-p", "Hello", "-n", "6", "-c", "256", "--progress",
                            "--csv", str(csv)], stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0
    assert "from /proc/self/fd/" in log.read_text(errors="replace")  # the loader's line is there
    s = run_summary(open_paths([str(csv), str(log)]))
    assert s["meta"]["model"] == "tiny.gguf" and s["tokens"] == 6 and not s["alerts"], s["alerts"]
    assert loader_facts("llama_model_loader: loaded meta data with 3 key-value pairs and 9 tensors from "
                        "/proc/self/fd/4 (version GGUF V3 (latest))") == {}
    assert loader_facts("llama_model_loader: loaded meta data with 3 key-value pairs and 9 tensors from "
                        "/m/qwen.gguf (version GGUF V3 (latest))") == {"model": "/m/qwen.gguf"}
