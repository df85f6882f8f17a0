"""Route trace: header comments, typed columns, hit matrix, per-expert counts."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, synth

from bmoe_top.parsers.route_trace import (
    PHASE_DECODE,
    PHASE_PREFILL,
    expert_counts,
    expert_hits,
    hit_matrix,
    load_route_trace,
)

FIX = FIXTURES / "parsers"


def load():
    return load_route_trace((FIX / "route_small.csv").read_bytes())


def test_header_and_columns():
    t = load()
    assert t.problems == []
    assert (t.n_layer, t.n_expert, t.top_k, t.n_rows) == (3, 4, 2, 10)
    assert t.meta["format"] == "route_trace v1" and t.meta["arch"] == "qwen3moe"
    assert t.layer_info[2] == {"expert_bytes": 2000, "dense_bytes": 6000}
    assert t.layer.dtype == np.int32 and t.weight.dtype == np.float32 and t.expert_bytes.dtype == np.int64
    assert t.phase.tolist() == [0] * 4 + [1] * 6
    assert t.expert_bytes[:2].tolist() == [1000, 1000]


def test_hit_matrix_decode():
    steps, share = hit_matrix(load())
    assert steps.tolist() == [1, 2]
    assert share.shape == (3, 2)
    assert share[0].tolist() == [0.5, 1.0]
    assert np.isnan(share[1]).all()  # layer 1 routed nothing: no data, not 0
    assert share[2, 0] == 1.0 and np.isnan(share[2, 1])


def test_hit_matrix_prefill_and_both():
    steps, share = hit_matrix(load(), PHASE_PREFILL)
    assert steps.tolist() == [0] and share[0, 0] == 0.0 and share[2, 0] == 0.0
    steps, share = hit_matrix(load(), None)
    assert steps.tolist() == [0, 1, 2]


def test_expert_counts_and_hits():
    t = load()
    c = expert_counts(t)
    assert c.shape == (3, 4) and c.sum() == 10
    assert c[0].tolist() == [0, 3, 2, 1]
    assert expert_counts(t, PHASE_DECODE).sum() == 6
    h = expert_hits(t)
    assert h[0].tolist() == [0, 2, 1, 0] and h[2].tolist() == [1, 0, 0, 1]
    assert (h <= c).all()


def test_string_phases_bad_rows_and_out_of_range():
    data = (b"# n_layer=2 n_expert=4\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
            b"0,decode,1,0,0,1,0.5,1,0\n0,prefill,0,1,0,2,0.5,0,10\n0,1,1,1,0,x,0.5,1,0\n"
            b"0,1,1,7,0,1,0.5,1,0\n0,1,2,1\n")
    t = load_route_trace(data)
    assert t.phase.tolist() == [1, 0]
    assert t.expert.tolist() == [1, 2]
    reasons = " | ".join(p.reason for p in t.problems)
    assert "bad cell" in reasons and "outside 2 layers x 4 experts" in reasons and "4 fields" in reasons


def test_missing_required_column_is_a_problem_not_a_crash():
    t = load_route_trace(b"turn,step,layer\n0,1,2\n")
    assert t.n_rows == 0 and "expert" in t.problems[0].reason
    steps, share = hit_matrix(t)
    assert steps.size == 0


def test_optional_columns_missing():
    t = load_route_trace(b"step,layer,expert\n1,0,3\n2,1,0\n")
    assert t.n_layer == 2 and t.n_expert == 4
    assert t.residency.tolist() == [-1, -1] and np.isnan(t.weight).all()
    steps, share = hit_matrix(t)  # residency not recorded: no hit data at all
    assert steps.size == 0


@pytest.mark.parametrize("value", ["1000000000000000000000", "1e21", "-5", "1.5", "nan"])
def test_a_layer_size_out_of_range_is_refused_with_one_line(value):
    data = synth.route_trace(8, n_layer=4).replace(b"# layer=2 expert_bytes=1048576",
                                                   b"# layer=2 expert_bytes=" + value.encode())
    tr = load_route_trace(data)
    assert 2 not in tr.layer_info and tr.layer_info[1] == {"expert_bytes": 1048576, "dense_bytes": 4194304}
    (p,) = tr.problems
    assert p.lineno == 5 and p.reason == (f"layer header refused: expert_bytes={value} is not a size from 0 to 1 TiB "
                                          "(parsers/limits.py)")
    assert tr.n_rows == 4 * 2 * 12  # every row still counts


def test_a_row_size_over_the_cap_drops_that_row():
    lines = synth.route_trace(8, n_layer=4).decode().splitlines()
    i = next(i for i, x in enumerate(lines) if x.endswith(",1048576"))
    lines[i] = lines[i][: -len("1048576")] + "1000000000000000000000"
    tr = load_route_trace(("\n".join(lines) + "\n").encode())
    assert tr.n_rows == 4 * 2 * 12 - 1 and int(tr.expert_bytes.max()) == 1048576
    assert any("expert_bytes 1 TiB" in p.reason for p in tr.problems)
