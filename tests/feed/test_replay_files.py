"""``bmoe-top replay`` end to end for damaged and foreign files: every good row of a damaged CSV
reaches the run summary (the damage cases of tests/parsers/test_token_csv_damage.py, through
``replay --summary --json``); a file that is not a recorded run exits non-zero with the reason
(the summary of the other files is still printed) and is an alert on the run (the banner); files
of different runs (another model or arch) are refused with a message naming both, unless
``--allow-mixed``; the real recorded runs of one run still merge."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import orjson
import pytest
from helpers import REAL_RUNS, synth

from bmoe_top.tui.cli import main
from bmoe_top.tui.feed.files import MixedRunsError, identity_conflict, open_paths, open_replay

N = 1000
CLEAN = synth.token_csv(N, seed=5)
LINES = CLEAN.decode().split("\n")
HEADER_AT = next(i for i, ln in enumerate(LINES) if ln.startswith("step,"))
HEADER = LINES[HEADER_AT]


def _lines(fn) -> bytes:
    ls = list(LINES)
    fn(ls)
    return "\n".join(ls).encode("utf-8", "surrogateescape")


def _row(i: int) -> int:
    return HEADER_AT + 1 + i


def _header(new: str) -> bytes:
    return _lines(lambda ls: ls.__setitem__(HEADER_AT, new))


def _decimal_commas(sep: str, quote: bool) -> bytes:
    def conv(ls):
        for i in range(HEADER_AT, HEADER_AT + 1 + N):
            cells = ls[i].split(",")
            if i > HEADER_AT:
                cells = [re.sub(r"(\d)\.(\d)", r"\1,\2", c) for c in cells]
                if quote:
                    cells = [f'"{c}"' if "," in c else c for c in cells]
            ls[i] = sep.join(cells)
    return _lines(conv)


def _zero_block() -> bytes:
    start = CLEAN.index(LINES[_row(400)].encode()) + 10
    end = CLEAN.index(LINES[_row(410)].encode()) + 5
    return CLEAN[:start] + b"\x00" * (end - start) + CLEAN[end:]


def _nul_cells() -> bytes:
    def put(ls):
        for i in (7, 100, 555, 999):
            cells = ls[_row(i)].split(",")
            cells[3] = cells[3][:2] + "\x00" + cells[3][2:]
            ls[_row(i)] = ",".join(cells)
    return _lines(put)


def _short_rows() -> bytes:
    def cut(ls):
        for i in (0, 50, 51, 998):
            ls[_row(i)] = ",".join(ls[_row(i)].split(",")[:6])
    return _lines(cut)


#: case -> (damaged file, token rows every good row gives)
CASES = {
    "clean": (CLEAN, N),
    "header_letter": (_header(HEADER.replace("wall_ms", "wXll_ms")), N),
    "header_comma_to_dot": (_header(HEADER.replace("io_ms,compute_ms", "io_ms.compute_ms")), N),
    "header_cut_by_comma": (_header(HEADER.replace("wall_ms", "wa,l_ms")), N),
    "header_nul": (_header(HEADER.replace("stall_ms", "st\x00ll_ms")), N),
    "header_invalid_utf8": (_header(HEADER.replace("mgmt_ms", "mgm\udcff_ms")), N),
    "header_split_by_newline": (_header(HEADER.replace("wall_ms", "wall\nms")), N),
    "stray_line_before_header": (_lines(lambda ls: ls.insert(HEADER_AT, "Saving results to run.csv ... done")), N),
    "lost_hash_on_comment": (_lines(lambda ls: ls.__setitem__(1, ls[1].lstrip("# "))), N),
    "nul_in_cells": (_nul_cells(), N),
    "zero_filled_block": (_zero_block(), N - 11),
    "nul_padding_after_crash": (CLEAN + b"\x00" * 8192, N),
    "utf16_without_bom": (CLEAN.decode().encode("utf-16-le"), N),
    "decimal_comma_semicolon": (_decimal_commas(";", False), N),
    "decimal_comma_tab": (_decimal_commas("\t", False), N),
    "decimal_comma_quoted": (_decimal_commas(",", True), N),
    "decimal_comma_unquoted": (_decimal_commas(",", False), N),
    "short_rows": (_short_rows(), N),
    "long_row": (_lines(lambda ls: ls.__setitem__(_row(3), ls[_row(3)] + ",7")), N),
    "older_shorter_header": (_header(",".join(HEADER.split(",")[:8])), N),
}


def summary_json(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(["replay", "--summary", "--json", *argv])
    cap = capsys.readouterr()
    return code, (orjson.loads(cap.out) if cap.out.strip() else None), cap.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_good_row_of_a_damaged_csv_reaches_the_summary(case, tmp_path, capsys):
    data, rows = CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(data)
    code, doc, err = summary_json(capsys, str(path))
    assert code == 0, err
    assert doc["derived"]["token_rows"] == rows
    assert doc["tokens"] == N  # the run's own summary line survives too
    assert doc["meta"]["model"] == "synthetic-moe.gguf" and doc["n_layer"] == 8


def test_a_file_that_is_not_a_recorded_run_exits_non_zero_with_the_reason(tmp_path, capsys):
    binary = tmp_path / "photo.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    code, doc, err = summary_json(capsys, str(binary))
    assert code == 1 and doc is None
    assert "photo.bin" in err and "binary data" in err and "not a recorded run" in err
    prose = tmp_path / "notes.md"  # (prose in a .txt or .log is read as a captured stdout)
    prose.write_text("Shopping list: apples, pears.\nCall the bank.\n")
    code, doc, err = summary_json(capsys, str(prose))
    assert code == 1 and "notes.md" in err and "not a recorded run" in err
    main(["replay", "--summary", str(prose)])  # the text form too
    assert "not a recorded run" in capsys.readouterr().err


def test_a_run_beside_a_foreign_file_still_prints_its_summary_but_exits_1(tmp_path, capsys):
    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(40))
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    code, doc, err = summary_json(capsys, str(csv), str(empty))
    assert code == 1 and "empty.csv" in err and "empty" in err
    assert doc["derived"]["token_rows"] == 40
    assert any("empty.csv" in a and "not a recorded run" in a for a in doc["alerts"])  # the banner's line
    run, not_runs = open_replay([str(csv), str(empty)])
    assert [p for p, _ in not_runs] == [str(empty)] and run.alerts


def other_model_csv() -> bytes:
    return synth.token_csv(30).replace(b"model=synthetic-moe.gguf arch=qwen3moe", b"model=other.gguf arch=mixtral")


def test_files_of_different_runs_are_not_merged_silently(tmp_path, capsys):
    a = tmp_path / "a.csv"
    a.write_bytes(synth.token_csv(40))
    b = tmp_path / "b.csv"
    b.write_bytes(other_model_csv())
    code, doc, err = summary_json(capsys, str(a), str(b))
    assert code == 1 and doc is None
    assert "a.csv" in err and "b.csv" in err and "synthetic-moe.gguf" in err and "other.gguf" in err
    assert "--allow-mixed" in err
    with pytest.raises(MixedRunsError):
        open_paths([str(a), str(b)])
    code, doc, err = summary_json(capsys, "--allow-mixed", str(a), str(b))
    assert code == 0 and doc["derived"]["token_rows"] == 70
    assert any("different runs" in x for x in doc["alerts"])


def _no_meta(data: bytes) -> bytes:
    """The file without its model and arch (its layers and experts stay)."""
    return data.replace(b"model=synthetic-moe.gguf arch=qwen3moe ", b"")


@pytest.mark.parametrize("case", ["tokens", "steps", "n_layer", "log"])
def test_files_of_different_runs_without_a_model_name_are_not_merged(tmp_path, capsys, case):
    # neither file names another model: the runs differ in what else they state
    a = tmp_path / "a.csv"
    a.write_bytes(_no_meta(synth.token_csv(40)))
    b = tmp_path / "b.csv"
    if case == "tokens":  # two CSV sinks, each with its `# summary`
        b.write_bytes(synth.token_csv(30, seed=9))
        why = "end-of-run tokens 40 vs 30"
    elif case == "steps":  # no summaries: both hold tokens 1..30 of turn 0
        b.write_bytes(b"step,wall_ms,io_ms,compute_ms\n" + b"".join(b"%d,30,10,20\n" % i for i in range(1, 31)))
        why = "both hold token rows for turn 0, step 1 and 29 more tokens"
    elif case == "n_layer":  # a route trace of a model of another shape
        b = tmp_path / "b.route.csv"
        b.write_bytes(synth.route_trace(40, n_layer=4).replace(b"model=synthetic-moe.gguf arch=qwen3moe ", b""))
        why = "n_layer 8 vs 4"
    else:  # the console log of another run
        b = tmp_path / "b.log"
        b.write_bytes(b"generation: 40 tokens, 0.030 s/token (33.3 tok/s)\n"
                      b"prefill: 12 tokens, 0.400 s (30.0 tok/s) | model load 9.250 s | TTFT 9.650 s\n")
        why = "load s 1.5 vs 9.25"
    code, doc, err = summary_json(capsys, str(a), str(b))
    assert code != 0 and doc is None
    assert "a.csv" in err and b.name in err and why in err and "not merged" in err, err
    with pytest.raises(MixedRunsError):
        open_paths([str(a), str(b)])
    code, doc, err = summary_json(capsys, "--allow-mixed", str(a), str(b))
    assert code == 0 and any("different runs" in x and why in x for x in doc["alerts"])


def test_the_log_of_the_same_run_still_merges(tmp_path, capsys):
    a = tmp_path / "a.csv"
    a.write_bytes(_no_meta(synth.token_csv(40)))
    log = tmp_path / "a.log"  # the numbers the CSV's `# summary` states, as the log prints them
    log.write_bytes(b"generation: 40 tokens, 0.030 s/token (33.3 tok/s)\n"
                    b"prefill: 12 tokens, 0.400 s (30.0 tok/s) | model load 1.500 s | TTFT 1.900 s\n")
    code, doc, err = summary_json(capsys, str(a), str(log))
    assert code == 0, err
    assert doc["derived"]["token_rows"] == 40 and not doc["alerts"]


def test_one_file_given_twice_is_not_counted_twice(tmp_path, capsys):
    a = tmp_path / "a.csv"
    a.write_bytes(synth.token_csv(40))
    code, doc, err = summary_json(capsys, str(a), str(a))
    assert code != 0 and doc is None and "given twice" in err


def test_the_screen_opens_on_the_first_run_and_says_what_it_left_out(tmp_path):
    a = tmp_path / "a.csv"
    a.write_bytes(_no_meta(synth.token_csv(40)))
    b = tmp_path / "b.csv"
    b.write_bytes(synth.token_csv(30, seed=9))
    run, not_runs = open_replay([str(a), str(b)], keep_first=True)
    assert run.tokens.n == 40 and not not_runs
    assert list(run.sources) == [str(a)]
    assert any("b.csv left out" in x and "end-of-run tokens 40 vs 30" in x and "--allow-mixed" in x
               for x in run.alerts)


@pytest.mark.skipif(not REAL_RUNS.is_dir(), reason="../shared/data/real-runs not present")
def test_the_newcomers_two_real_runs_are_not_merged(capsys):
    # gemma_stream.csv names no model; the other is a Qwen session of 1,469 tokens
    a = REAL_RUNS / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    b = REAL_RUNS / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    code, doc, err = summary_json(capsys, str(a), str(b))
    assert code != 0 and doc is None
    assert "gemma_stream.csv" in err and "bmoe-20260722-142300.csv" in err and "256 vs 1,469" in err
    code = main(["replay", "--summary", str(a), str(b)])  # the text form too
    cap = capsys.readouterr()
    assert code != 0 and not cap.out and "not merged" in cap.err


def test_files_of_one_run_merge():
    # the same model named by a path in one file and by its file name in another
    path, name = {"model": "/data/m/Qwen3-30B.gguf", "arch": "qwen3moe"}, {"model": "qwen3-30b.gguf"}
    assert identity_conflict(path, name) is None
    assert identity_conflict({"arch": "qwen3moe"}, {"model": "x.gguf"}) is None  # nothing to compare
    assert identity_conflict({"arch": "qwen3moe"}, {"arch": "gemma4"}) == "arch qwen3moe vs gemma4"


@pytest.mark.skipif(not REAL_RUNS.is_dir(), reason="../shared/data/real-runs not present")
def test_the_real_files_of_one_traced_run_merge(capsys):
    d = REAL_RUNS / "bigmoeonedge-2026-07-15"
    code, doc, err = summary_json(capsys, str(d / "qwen.metrics"), str(d / "qwen.route.csv"), str(d / "qwen.log"))
    assert code == 0, err
    assert doc["derived"]["token_rows"] == 128 and doc["n_layer"] == 48 and not doc["alerts"]
    assert doc["meta"]["arch"] == "qwen3moe"


def test_impossible_values_are_problems_an_alert_and_not_in_the_numbers(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_bytes(b"step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                  b"1,4,100,40,60,1000,10,0\n2,4,-5,40,60,1000,20,0\n3,4,inf,40,60,1e99,200,0\n"
                  b"4,4,1e99,40,60,1000,30,0\n")
    code, doc, err = summary_json(capsys, str(p))
    assert code == 0, err  # a damaged file still replays: its good cells count
    assert doc["derived"]["token_rows"] == 4 and doc["problems"] == 5
    assert "bad.csv: 5 impossible values read as missing" in doc["alerts"]  # no key of the screen in it
    text = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(p)],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "alert: bad.csv: 5 impossible values read as missing\n" in text.stdout, text.stdout
    assert "lists them" not in text.stdout  # "4" is the screen's Problems tab: nothing headless
    run = open_paths([str(p)])
    assert np.isnan(run.tokens.view("wall_ms")[1:]).all() and run.tokens.view("io_ms").tolist() == [40] * 4
    # the title's flash share is of the tokens that have each time: 40 ms of a 100 ms wall, not 160 / 100
    from bmoe_top.tui.widgets.palette import Look
    from bmoe_top.tui.widgets.panels import header_parts

    assert "flash/wall 40.0 %" in [text for text, _ in header_parts(run, Look())]


def test_a_request_log_alone_has_no_summary_to_print(tmp_path, capsys):
    reqs = tmp_path / "session-requests.jsonl"
    reqs.write_bytes(b'{"cmd":"generate","id":1,"prompt":"hi","n_predict":8}\n'
                     b'{"cmd":"generate","id":2,"prompt":"more","n_predict":8}\n')
    code, doc, err = summary_json(capsys, str(reqs))
    assert code == 1 and doc is None  # it printed every field "missing" and exited 0
    assert "session requests only" in err and "no measurements" in err
    csv = tmp_path / "run.csv"  # beside the run's CSV it adds the prompts
    csv.write_bytes(synth.token_csv(20))
    code, doc, err = summary_json(capsys, str(csv), str(reqs))
    assert code == 0 and doc["derived"]["token_rows"] == 20, err


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("header", [b"step,wall_ms,io_ms\n", b"# route_trace v1\n"])
def test_a_csv_header_alone_has_nothing_to_summarize(tmp_path, capsys, as_json, header):
    # it printed every field "missing" and exited 0, where an empty file exits 1 (a route trace's
    # format line alone too: its format was the run details)
    csv = tmp_path / "header.csv"
    csv.write_bytes(header)
    code = main(["replay", "--summary", *(["--json"] if as_json else []), str(csv)])
    cap = capsys.readouterr()
    assert code == 1 and cap.out == "" and "nothing to summarize" in cap.err
