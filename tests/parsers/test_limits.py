"""Sizes read from input never drive an allocation unchecked (parsers/limits.py): a 24-byte STRP file
claiming 65535 x 65535, an audit record with expert id 4e9, CSV and route-trace headers with an
absurd n_expert are refused or capped with a message, and opening them stays within a few GiB of
address space."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import orjson
import pytest

from bmoe_top.parsers.audit import parse_audit_line
from bmoe_top.parsers.limits import MAX_EXPERTS, MAX_LAYERS, dims_problem, int_within
from bmoe_top.parsers.route_trace import expert_counts, load_route_trace
from bmoe_top.parsers.strp import StrpError, parse_strp
from bmoe_top.parsers.token_csv import load_token_csv

HUGE_STRP = struct.pack("<4sIIIII", b"STRP", 1, 65535, 65535, 0, 0)
AUDIT = {"event": "load", "time": "2026-11-29T12:00:00.123Z", "pid": 5, "hybrid": False, "hits": 0,
         "hits_profile": 0, "misses": 0, "bytes_upload": 0, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0,
         "swaps": 0, "model": {"path": "m.gguf", "n_layer": 4, "n_expert": 4_000_000_000},
         "layers": [{"il": 0, "slots": 4, "hits": 0, "hits_profile": 0, "misses": 0, "resident": [1, 4_000_000_000]},
                    {"il": 3, "slots": 4, "hits": 0, "hits_profile": 0, "misses": 0, "resident": [2]},
                    {"il": 70_000, "slots": 4, "hits": 0, "hits_profile": 0, "misses": 0, "resident": [2]}]}
HUGE_AUDIT = orjson.dumps(AUDIT) + b"\n"
HUGE_CSV = (b"# bmoe_metrics v1\n# model=m.gguf arch=qwen3moe n_layer=4 n_expert=4000000000 n_expert_used=2\n"
            b"step,steps,wall_ms\n1,2,10.5\n2,2,11.0\n")
HUGE_LIVE = (b'BMOE_READY {"load_s": 1, "arch": "qwen3moe", "n_ctx": 512}\n'
             b'BMOE_ROUTE {"step": 1, "turn": 0, "phase": "decode", "experts": [[1, 2]], "hit": [[1, 0]]}\n'
             b'BMOE_PROGRESS {"step": 1, "steps": 3, "wall_ms": 5.0, "text": "a "}\n'
             b'BMOE_ROUTE {"step": 2, "turn": 0, "phase": "decode", "experts": [[1, 4000000000]], "hit": [[0, 1]]}\n'
             b'BMOE_RESIDENT {"step": 2, "n_expert": 4000000000, "resident": [[1]]}\n'
             b'BMOE_RESIDENT {"step": 2, "n_expert": 8, "resident": [[1, 70000]]}\n'
             b'BMOE_PROGRESS {"step": 2, "steps": 3, "wall_ms": 6.0, "text": "a b "}\n')
HUGE_ROUTE = (b"# route_trace v1\n# model=m.gguf arch=qwen3moe n_layer=48 n_expert=4000000000 n_expert_used=6\n"
              b"turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
              b"0,1,1,0,0,5,0.5,1,0\n0,1,1,1,0,4000000000,0.5,1,0\n0,1,1,9000000,0,3,0.5,1,0\n"
              b"0,1,99999999999,2,0,3,0.5,1,0\n")


def test_the_caps_and_their_messages():
    assert dims_problem(n_layer=61, n_expert=384, top_k=8) is None
    assert dims_problem(n_expert=4_000_000_000) == (
        "n_expert=4000000000 is over the cap of 4096 experts (parsers/limits.py)")
    assert "not a non-negative integer" in dims_problem(n_layer="x")
    assert int_within("48", MAX_LAYERS) == 48 and int_within(-1, MAX_LAYERS) is None and int_within(True, 9) is None


def test_a_24_byte_strp_claiming_huge_dimensions_is_refused():
    with pytest.raises(StrpError, match="refused: n_layer=65535 is over the cap of 1024 layers"):
        parse_strp(HUGE_STRP, "huge.strp")
    ok = struct.pack("<4sIIIII", b"STRP", 1, MAX_LAYERS, MAX_EXPERTS, 0, 0)
    assert parse_strp(ok).rank_map().shape == (MAX_LAYERS, MAX_EXPERTS)  # 16 MiB at the caps


def test_an_audit_record_with_expert_id_4e9_is_capped_with_notes():
    rec = parse_audit_line(HUGE_AUDIT, 1)
    assert [lay["il"] for lay in rec.layers()] == [0, 3]
    assert rec.layers()[0]["resident"] == [1]
    assert "n_expert" not in rec.data["model"] and rec.data["model"]["n_layer"] == 4
    assert len(rec.notes) == 3 and any("4000000000" in n for n in rec.notes)


def test_a_csv_header_with_an_absurd_n_expert_is_ignored_with_a_problem():
    t = load_token_csv(HUGE_CSV)
    assert t.n_rows == 2 and "n_expert" not in t.meta and t.meta["n_layer"] == "4"
    assert any("n_expert=4000000000 is over the cap" in p.reason for p in t.problems)


def test_live_lines_over_the_caps_are_bad_lines_and_their_neighbours_count():
    """A runtime's BMOE_ROUTE with expert id 4e9 or 2,000 layers and a BMOE_RESIDENT claiming 4e9
    experts asked for 4-30 GiB tables in the run model; now each is a bad line naming the cap."""
    from bmoe_top.parsers import bmoe_lines as bl
    from bmoe_top.tui.feed.records import RecordFeed
    from bmoe_top.tui.model import RunModel

    recs = [bl.parse_line(line) for line in HUGE_LIVE.decode().splitlines()]
    bad = [r for r in recs if isinstance(r, bl.BadLine)]
    assert [r.reason.split(":")[0] for r in bad] == ["BMOE_ROUTE", "BMOE_RESIDENT", "BMOE_RESIDENT"]
    assert all("over the cap" in r.reason or "not within 0-4096" in r.reason for r in bad)
    wide = bl.parse_line('BMOE_ROUTE {"step": 1, "experts": ' + str([[1]] * 2000) + "}")
    assert isinstance(wide, bl.BadLine) and "2000 layers" in wide.reason
    run = RunModel()
    feed = RecordFeed(run, "child")
    for i, r in enumerate(recs, 1):
        feed.apply(r, 0.0, i)
    assert run.tokens.n == 2 and run.problem_count == 3 and run.n_expert == 3
    assert run.expert_aggregates().routed.shape[1] <= MAX_EXPERTS


def test_a_route_trace_with_absurd_sizes_keeps_its_good_rows():
    t = load_route_trace(HUGE_ROUTE)
    assert t.n_rows == 1 and t.expert.tolist() == [5] and t.n_expert == 6 and t.n_layer == 48
    assert "n_expert" not in t.meta
    assert expert_counts(t).shape == (48, 6)
    reasons = " | ".join(p.reason for p in t.problems)
    assert "n_expert=4000000000 is over the cap" in reasons and "3 route row(s) dropped" in reasons


OPEN = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from bmoe_top.tui.cli import main
sys.exit(main(["replay", "--summary", "--json", sys.argv[1]]))
"""


@pytest.mark.parametrize("name,data", [("huge.strp", HUGE_STRP), ("huge.jsonl", HUGE_AUDIT),
                                       ("huge.csv", HUGE_CSV), ("huge.route.csv", HUGE_ROUTE),
                                       ("huge.out", HUGE_LIVE)])
def test_opening_them_stays_within_4_gib_of_address_space(tmp_path, name, data):
    """The whole replay path (sniff, parse, the run model) under a 4 GiB address-space limit: today's
    code needed 15-16 GiB for the STRP and audit files (MemoryError)."""
    path = tmp_path / name
    path.write_bytes(data)
    r = subprocess.run([sys.executable, "-c", OPEN, str(path)], capture_output=True, text=True, timeout=300)
    assert "MemoryError" not in r.stderr and r.returncode == 0, r.stderr[-2000:]
    s = orjson.loads(r.stdout)
    assert s["problems"] >= 1
    assert (s["n_expert"] or 0) <= MAX_EXPERTS and (s["n_layer"] or 0) <= MAX_LAYERS


def test_a_csv_can_not_ask_for_more_cells_than_the_cap(monkeypatch):
    from bmoe_top.parsers import token_csv as tc
    monkeypatch.setattr(tc, "MAX_CSV_CELLS", 4000)
    rows = "\n".join(f"{i},{i}.5" for i in range(5000))
    t = load_token_csv(("step,wall_ms\n" + rows + "\n").encode())
    assert t.n_rows == 2000 and np.array_equal(t.columns["step"], np.arange(2000))
    assert any("over the cap" in p.reason for p in t.problems)
