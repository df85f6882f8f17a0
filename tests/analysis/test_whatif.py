"""The what-if report on a synthetic trace: shape, consistency between its parts, orjson."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from helpers.routing import random_lookups

from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.skew import routing_skew
from bmoe_top.tui.analysis.whatif import recommend_budget, whatif


def test_report_parts_agree() -> None:
    rng = np.random.default_rng(7)
    lk = random_lookups(rng, n_tokens=60, n_layer=3, n_expert=10, k=2, prefill_tokens=6, layer_bytes=[2, 3, 2])
    run_budget = 30
    w = whatif(lk, run_budget=run_budget, read_mib_s=500.0)
    d = orjson.loads(orjson.dumps(w))
    assert {c["policy"] for c in d["curves"]} == set(C.POLICIES)
    for c in d["curves"]:
        assert len(c["budgets_mib"]) == len(c["decode_hit_pct"]) == len(c["read_mib_per_token"]) == len(
            c["io_s_per_token"])
        assert run_budget / C.MIB in c["budgets_mib"]
    by = {c["policy"]: c for c in d["curves"]}
    assert d["belady_gap_pct"] == pytest.approx(
        [b - a for a, b in zip(by["lru"]["decode_hit_pct"], by["belady"]["decode_hit_pct"])])
    assert d["token_cycle_mib"] == pytest.approx(lk.token_cycle_bytes / C.MIB)
    assert d["focus_budget_mib"] == pytest.approx(run_budget / C.MIB)
    assert sum(r["misses"] for r in d["layers"]) == lk.n_decode_lookups - int(
        C.lru_curve(lk, [run_budget]).decode_hits[0])
    assert d["recorded"] is None  # synthetic routing records no residency
    assert d["skew"] == orjson.loads(orjson.dumps(routing_skew(lk)))
    assert d["allocation"]["allocated_hit_pct"] >= d["allocation"]["equal_hit_pct"]


@pytest.mark.parametrize("run_budget", [None, 30])
def test_report_is_the_same_on_one_thread_and_on_several(run_budget: int | None) -> None:
    # one thread runs the dense LRU (and queues the sweep) before the profile's split: the
    # profile curves are queued by whichever of the two ends last, so they are there either way
    rng = np.random.default_rng(11)
    lk = random_lookups(rng, n_tokens=80, n_layer=3, n_expert=10, k=2, prefill_tokens=6, layer_bytes=[2, 3, 2])
    docs = [orjson.dumps(whatif(lk, run_budget=run_budget, threads=t)) for t in (1, 2, 3)]
    assert docs[0] == docs[1] == docs[2]
    assert {c["policy"] for c in orjson.loads(docs[0])["curves"]} == set(C.POLICIES)


def test_recommend_and_errors() -> None:
    rng = np.random.default_rng(1)
    lk = random_lookups(rng, n_tokens=40, n_layer=2, n_expert=8, k=2)
    curve = C.lru_curve(lk, np.arange(0, lk.bank_bytes + 1))
    r = recommend_budget(curve, 0.9)
    j = int(np.searchsorted(curve.budgets, r))
    assert curve.decode_hits[j] >= 0.9 * curve.decode_hits[-1]
    assert j == 0 or curve.decode_hits[j - 1] < 0.9 * curve.decode_hits[-1]
    with pytest.raises(ValueError):
        whatif(lk, policies=("mru",))


def test_skew_on_a_known_trace() -> None:
    from bmoe_top.tui.analysis.lookups import from_routing

    # one layer, 4 experts, top-1: expert 0 five times, expert 1 once, expert 2 twice
    dec = np.array([0, 0, 2, 0, 1, 0, 2, 0]).reshape(-1, 1, 1)
    s = routing_skew(from_routing(dec, [1], 4))
    assert s.unique_experts == 3 and s.unique_per_layer == 3
    assert s.top8_share_pct == 100.0
    p = np.array([5, 1, 2]) / 8
    assert s.entropy_bits == pytest.approx(float(-(p * np.log2(p)).sum()))
    assert s.entropy_max_bits == 2.0
    # reuse gaps: expert 0 at tokens 0,1,3,5,7 -> 1,2,2,2; expert 2 at 2,6 -> 4
    assert s.reuse_tokens_p50 == 2.0
    assert s.never_reused_pct == pytest.approx(100 / 3)


def test_lookups_from_route_rows_equal_the_trace_reader() -> None:
    """Rows as a run model holds them (prefill tok = -1 - turn, decode tok = token row) give the
    lookups the route-trace reader gives for the same routing."""
    from bmoe_top.parsers.route_trace import load_route_trace
    from bmoe_top.tui.analysis.lookups import from_route_rows, from_route_trace

    lines = ["# route_trace v1", "# layer=0 expert_bytes=100", "# layer=1 expert_bytes=200",
             "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes"]
    rows = []  # (tok, layer, expert, hit)
    for turn in range(2):
        for slot, (il, e) in enumerate([(0, 1), (0, 2), (1, 3), (0, 1), (1, 0)]):
            lines.append(f"{turn},prefill,0,{il},{slot},{e},0.5,0,{100 * (il + 1)}")
            rows.append((-1 - turn, il, e, 0))
        for step in range(1, 4):
            for il in range(2):
                for slot in range(2):
                    e = (step * 3 + il + slot + turn) % 4
                    lines.append(f"{turn},decode,{step},{il},{slot},{e},0.5,{slot},{100 * (il + 1)}")
                    rows.append((turn * 3 + step - 1, il, e, slot))
    ref = from_route_trace(load_route_trace(("\n".join(lines) + "\n").encode()))
    t, lay, ex, hit = (np.array(c) for c in zip(*rows))
    got = from_route_rows(t, lay, ex, hit, 2, 4, [100, 200], 2)
    for name in ("item", "batch", "decode", "token", "recorded_hit", "item_bytes"):
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name
    with pytest.raises(ValueError):
        from_route_rows(t, lay, ex + 4, hit, 2, 4, [100, 200], 2)
    with pytest.raises(ValueError):
        from_route_rows([], [], [], [], 2, 4, [100, 200], 2)
