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


def test_a_large_blank_csv_is_empty_not_a_run(tmp_path):
    p = tmp_path / "blank.csv"
    p.write_bytes(b"\n" * 300_000 + b"\x00" * 1000 + b"  \n")
    _run, not_runs = open_replay([str(p)])
    assert not_runs == [(str(p), "the file is empty: not a recorded run")]
