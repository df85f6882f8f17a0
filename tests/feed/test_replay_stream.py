"""A per-token CSV is replayed from the file in blocks (tui/feed/files.py ``FileFeed.stream``):
never held whole, so the whole-file size limit does not apply to it; its run is what its bytes
give; the file's kind is sniffed from its two ends."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import synth

from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.tui.feed.files import open_replay
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources import files as source_files
from bmoe_top.tui.sources.files import ReplayError


def test_a_csv_past_the_whole_file_limit_is_read_in_blocks(tmp_path, monkeypatch):
    data = synth.token_csv(3000, seed=4)
    csv = tmp_path / "run.csv"
    csv.write_bytes(data)
    log = tmp_path / "run.log"
    log.write_bytes(b"generation: 64 tokens, 0.317 s/token (3.152 tok/s)\n" * 4000)
    monkeypatch.setattr(source_files, "MAX_FILE_BYTES", 100_000)  # both files are larger
    run, not_runs = open_replay([str(csv)])
    want = load_token_csv(data)
    assert not not_runs and run.tokens.n == 3000
    assert np.array_equal(run.tokens.view("wall_ms"), want.columns["wall_ms"])
    assert run_summary(run)["tokens"] == 3000  # the file's own # summary line
    with pytest.raises(ReplayError, match="replay limit"):  # a format read whole keeps its limit
        open_replay([str(log)])


def test_a_large_blank_csv_is_not_a_run_and_says_what_it_holds(tmp_path):
    p = tmp_path / "blank.csv"
    p.write_bytes(b"\n" * 300_000 + b"\x00" * 1000 + b"  \n")
    _run, not_runs = open_replay([str(p)])
    assert not_runs == [(str(p), "the file holds only NUL bytes and white space: not a recorded run")]


def _semicolons(n: int, cols: int) -> bytes:
    names = ["step", "wall_ms", "io_ms", "compute_ms"][:cols]
    rows = [";".join([str(i), *(f"{i * k + 0.25:.2f}".replace(".", ",") for k in range(1, cols))])
            for i in range(1, n + 1)]
    return (";".join(names) + "\n" + "\n".join(rows) + "\n").encode()


@pytest.mark.parametrize("cols", [3, 4])
def test_a_semicolon_csv_with_decimal_commas_is_a_run(tmp_path, cols):
    """``1;1,25;2,25``: as many commas as semicolons. Split at the commas, no cell was a number, so
    no row was data: the file was refused as not a recorded run, or (3 columns) its last row was
    taken for the header and every row lost."""
    p = tmp_path / "decimal-comma.csv"
    p.write_bytes(_semicolons(20, cols))
    run, not_runs = open_replay([str(p)])
    assert not not_runs and run.tokens.n == 20 and run.problem_count == 0
    assert run.tokens.view("wall_ms")[:2].tolist() == [1.25, 2.25]
    assert run.tokens.view("step")[-1] == 20


def test_a_headerless_csv_the_loader_reads_is_replayed(tmp_path):
    """A body as wide as the contract's 7 columns and no header: the loader names the columns in
    the contract's order (and says so); the replay's sniffing refused the file (0 rows)."""
    rows = [f"{i},100,{100 + i}.5,{i}.25,{50 + i}.125,{1000 * i},{i * 0.9:.2f}" for i in range(1, 101)]
    p = tmp_path / "headerless.csv"
    p.write_bytes(("\n".join(rows) + "\n").encode())
    run, not_runs = open_replay([str(p)])
    assert not not_runs and run.tokens.n == 100
    assert run.tokens.view("wall_ms")[0] == 101.5
    assert any("no header row" in pr.reason for pr in run.problems)


def test_a_csv_whose_first_4_kib_are_zeros_keeps_the_rows_after_them(tmp_path):
    """A zero-filled block over the file's start (a crash): the rows after it are good, and the
    file is a recorded run, not binary data."""
    data = synth.token_csv(300, seed=9)
    p = tmp_path / "zeroed.csv"
    p.write_bytes(b"\x00" * 4096 + data[4096:])
    run, not_runs = open_replay([str(p)])
    whole_rows = data[4096:].split(b"\n", 1)[1].count(b"\n") - 1  # after the cut line, without the # summary
    assert not not_runs and run.tokens.n == whole_rows
    want = load_token_csv(data).columns["wall_ms"][-whole_rows:]
    assert np.array_equal(run.tokens.view("wall_ms"), want)
