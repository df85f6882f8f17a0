"""Per-token CSV: columns by name, comment metadata, one # summary per turn, bad rows reported
while their neighbours count, encodings."""

from __future__ import annotations

import codecs
import math

import numpy as np
import pytest
from helpers import FIXTURES

from bmoe_top.parsers import token_csv as tc
from bmoe_top.parsers.token_csv import load_token_csv

# every case runs with each fast reader (tests/parsers/conftest.py)
pytestmark = pytest.mark.usefixtures("both_readers")

FIX = FIXTURES / "parsers"


def test_two_turns_meta_and_summaries():
    t = load_token_csv((FIX / "tokens_two_turns.csv").read_bytes())
    assert t.problems == []
    assert t.meta["format"] == "bmoe_metrics v1"
    assert (t.meta["model"], t.meta["arch"], t.meta["n_layer"], t.meta["overlap"]) == (
        "tiny-moe.gguf", "qwen3moe", "4", "1")
    assert t.n_rows == 5
    assert t.header[-1] == "turn" and len(t.header) == 11
    assert t.columns["turn"].tolist() == [0, 0, 0, 1, 1]
    assert t.columns["io_ms"].tolist() == [300.25, 250.0, 100.0, 50.0, 0.0]
    assert t.columns["read_bytes"][0] == 1048576
    for col in t.columns.values():
        assert col.dtype == np.float64 and col.flags.c_contiguous and len(col) == 5
    assert [s["row"] for s in t.summaries] == [3, 5]
    s0, s1 = (s["summary"] for s in t.summaries)
    assert s0["tok_s"] == 5.65 and s0["resident_mib"] == 40.0 and s0["majflt/tok"] == 1.33
    assert s1["tokens"] == 2 and "stall_s_tok" not in s1  # absent, not zero
    assert t.summary is s1
    assert t.summaries[0]["raw"]["tok/s"] == "5.650"


@pytest.mark.parametrize("ncol", [7, 8, 9])
def test_column_subsets_are_read_by_name(ncol):
    names = "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms".split(",")[:ncol]
    rows = [",".join(str(i * 10 + j) for j in range(ncol)) for i in range(1, 4)]
    t = load_token_csv(("\n".join([",".join(names)] + rows) + "\n").encode())
    assert t.header == names and t.n_rows == 3 and not t.problems
    assert t.column("mgmt_ms") is None if ncol < 9 else t.column("mgmt_ms").tolist() == [18, 28, 38]
    assert t.columns["wall_ms"].tolist() == [12, 22, 32]


def test_columns_in_any_order():
    t = load_token_csv(b"wall_ms,step\n5.5,1\n6.5,2\n")
    assert t.columns["step"].tolist() == [1, 2] and t.columns["wall_ms"].tolist() == [5.5, 6.5]


def test_bad_cells_and_ragged_rows_are_problems_every_row_counts():
    data = (b"step,wall_ms,io_ms\n1,10,1\n2,oops,2\n3,30\n4,40,4,99\n5,,5\n\n6,60,6\n"
            b"step,wall_ms,io_ms\n7,70,7\nnot a row\n")
    t = load_token_csv(data)
    assert t.columns["step"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    wall, io = t.columns["wall_ms"], t.columns["io_ms"]
    assert math.isnan(wall[1]) and math.isnan(wall[4]) and wall[5] == 60
    assert math.isnan(io[2]) and io[3] == 4  # the short row's missing field is absent
    assert t.header == ["step", "wall_ms", "io_ms", "unnamed_4"]
    assert t.columns["unnamed_4"][3] == 99 and np.isnan(np.delete(t.columns["unnamed_4"], 3)).all()
    lines = {p.lineno: p.reason for p in t.problems}
    assert set(lines) == {3, 4, 5, 6, 11}
    assert "bad cell" in lines[3] and "2 fields" in lines[4] and "4 fields" in lines[5] and "bad cell" in lines[6]
    assert "unnamed_4" in lines[5] and "not a data row" in lines[11]


def test_bad_row_in_a_large_file_costs_only_its_chunk(monkeypatch):
    monkeypatch.setattr(tc, "_CHUNK", 256)
    rows = [f"{i},{i * 1.5:.1f}" for i in range(1, 2001)]
    rows[1500] = "1501,NOT_A_NUMBER"
    t = load_token_csv(("step,wall_ms\n" + "\n".join(rows) + "\n").encode())
    assert t.n_rows == 2000
    assert [p.lineno for p in t.problems] == [1502]
    assert math.isnan(t.columns["wall_ms"][1500]) and t.columns["wall_ms"][1999] == 2000 * 1.5


@pytest.mark.parametrize("enc,bom,nl", [
    ("utf-8", codecs.BOM_UTF8, "\r\n"), ("utf-16-le", codecs.BOM_UTF16_LE, "\n"),
    ("utf-16-be", codecs.BOM_UTF16_BE, "\r\n"), ("utf-8", b"", "\r"),
])
def test_encodings_and_line_endings(enc, bom, nl):
    text = (FIX / "tokens_two_turns.csv").read_text().replace("\n", nl)
    t = load_token_csv(bom + text.encode(enc))
    assert t.n_rows == 5 and not t.problems and t.meta["arch"] == "qwen3moe"
    assert len(t.summaries) == 2


def test_no_final_newline_and_invalid_utf8_in_comment():
    t = load_token_csv(b"# model=caf\xe9.gguf\nstep,wall_ms\n1,2\n2,3")
    assert t.n_rows == 2 and t.columns["wall_ms"].tolist() == [2, 3]
    assert t.meta["model"] == "caf\ufffd.gguf"


def test_empty_and_headerless_inputs():
    t = load_token_csv(b"")
    assert t.n_rows == 0 and t.columns == {} and t.problems == []
    t = load_token_csv(b"# summary tokens=0\n")
    assert t.n_rows == 0 and t.summaries[0]["summary"] == {"tokens": 0.0}
    t = load_token_csv(b"step,wall_ms\n")
    assert t.n_rows == 0 and t.columns["step"].shape == (0,)


def test_bad_summary_value_is_reported():
    t = load_token_csv(b"step\n1\n# summary tokens=1 tok/s=fast\n")
    assert t.summary == {"tokens": 1.0}
    assert t.problems[0].lineno == 3 and "tok/s" in t.problems[0].reason


def test_duplicate_column_names_are_kept_apart():
    t = load_token_csv(b"step,x,x\n1,2,3\n")
    assert t.header == ["step", "x", "x.2"] and t.columns["x.2"].tolist() == [3]


def test_only_a_summary_word_makes_a_summary_line():
    t = load_token_csv(b"# summary_version=2\nstep\n1\n# summary tokens=1\n")
    assert t.meta == {"summary_version": "2"} and len(t.summaries) == 1


def _turn_csv(turns: list[float], summaries_after: list[int]) -> bytes:
    """A CSV whose rows carry ``turns`` and with a ``# summary`` after each row index listed."""
    lines = ["step,wall_ms,turn"]
    for i, t in enumerate(turns):
        if i in summaries_after:
            lines += [f"# summary tokens={summaries_after.count(i)}"] * summaries_after.count(i)
        lines.append(f"{i + 1},10,{'' if t != t else int(t) if t == int(t) else t}")
    lines += [f"# summary tokens={summaries_after.count(len(turns))}"] * summaries_after.count(len(turns))
    return ("\n".join(lines) + "\n").encode()


def test_the_turn_column_counts_generated_turns_and_each_summary_is_its_turns():
    from helpers.cli_session import cli_session, six_requests

    t = load_token_csv(cli_session(six_requests()).csv)
    starts, why = tc.generated_turns(t)
    # six requests, the fourth refused: five generated turns of 9, 6, 11, 7 and 5 tokens
    assert why is None and starts == [0, 9, 15, 26, 33] and len(t.summaries) == 5
    assert [s["summary"]["tokens"] for s in t.summaries] == [9, 6, 11, 7, 5]
    # a turn cancelled before its first token has its summary and no row: turn 1 is empty
    t = load_token_csv(_turn_csv([0, 0, 2, 2], [2, 2, 4]))
    assert tc.generated_turns(t) == ([0, 2, 2], None)
    # the newest turn still running: rows after the last summary
    t = load_token_csv(_turn_csv([0, 1, 1], [1]))
    assert tc.generated_turns(t) == ([0, 1], None)
    # a missing cell belongs to the turn of the row before it
    t = load_token_csv(_turn_csv([0, float("nan"), 1], [2, 3]))
    assert tc.generated_turns(t) == ([0, 2], None)


def test_a_turn_column_that_is_no_counter_splits_where_it_changes_and_says_so():
    for turns in ([0, 1, 0], [3, 3, 4], [0, 0.5, 1]):
        starts, why = tc.generated_turns(load_token_csv(_turn_csv(turns, [])))
        assert why is not None and "not a counter" in why, turns
        assert starts == [0] + [i for i in range(1, 3) if turns[i] != turns[i - 1]]


def test_without_a_turn_column_the_summaries_split_the_turns():
    one = load_token_csv(b"step,wall_ms\n1,10\n2,10\n# summary tokens=2\n")
    assert tc.generated_turns(one) == ([0], None)
    two = load_token_csv(b"step,wall_ms\n1,10\n# summary tokens=1\n1,10\n2,10\n# summary tokens=2\n")
    assert tc.generated_turns(two) == ([0, 1], None)
    assert tc.generated_turns(load_token_csv(b"step,wall_ms\n1,10\n")) == ([0], None)
    assert tc.generated_turns(load_token_csv(b"step,wall_ms\n")) == ([], None)
