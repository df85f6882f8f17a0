"""The run model's write API and derived reads: every write bumps the version, the status is an
enum that reads as its word, problems are capped and cut in one place, turns keep their text in
O(1) pieces, a bounded model keeps the whole run's statistics while holding the newest rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.model import KEEP_ALL, LIVE, MAX_PROBLEMS, Retention, RowUnit, RunModel, Status


def test_every_write_bumps_the_version():
    run = RunModel()
    writes = [
        lambda: run.set_status(Status.READY, "loaded"),
        lambda: run.set_row_unit(RowUnit.INTERVAL),
        lambda: run.add_source("a.csv"),
        lambda: run.update_meta({"arch": "qwen3moe"}),
        lambda: run.set_dims(n_layer=4, n_expert=8, top_k=2),
        lambda: run.set_ready({"load_s": 1.0}),
        lambda: run.update_summary({"tokens": 3}),
        lambda: run.update_summary_extra({"x": "1"}),
        lambda: run.update_sidecar({"temp": "40"}),
        lambda: run.add_problem("s", 1, "t", "why"),
        lambda: run.add_log("line"),
        lambda: run.note_request({"cmd": "generate", "id": 1}),
        lambda: run.add_token_row({"wall_ms": 1.0}),
        lambda: run.add_token_rows({"wall_ms": [1.0, 2.0]}, 2),
        lambda: run.add_routes(np.array([0]), np.array([1]), np.array([2]), np.array([1])),
        lambda: run.add_layer_counts(0, np.array([1.0]), np.array([1.0])),
        lambda: run.set_resident(np.ones((4, 8), bool), resident_mib=1.0),
        lambda: run.set_cache_mib(budget_mib=2.0),
        lambda: run.set_expert_rank(np.zeros((4, 8), np.int32)),
        lambda: run.begin_turn(id=1, prompt="p"),
        lambda: run.append_answer("a"),
        lambda: run.set_answer("b"),
        lambda: run.set_prompt("q"),
        lambda: run.finish_turn({"tokens": 1}),
    ]
    for w in writes:
        v = run.version
        w()
        assert run.version > v, w


def test_status_is_an_enum_that_reads_as_its_word():
    run = RunModel()
    assert run.status is Status.EMPTY and run.status == "empty"
    run.set_status(Status.ABORTED, "exit code -9")
    assert run.status == "aborted" and f"{run.status}" == "aborted" and run.status_detail == "exit code -9"
    v = run.version
    run.set_status(Status.ABORTED, "exit code -9")  # no change, no repaint
    assert run.version == v
    with pytest.raises(ValueError):
        run.set_status("nonsense")  # type: ignore[arg-type]
    assert Status.GENERATING.live and not Status.DONE.live


def test_problems_are_counted_capped_and_cut_in_one_place():
    run = RunModel()
    for i in range(MAX_PROBLEMS + 5):
        run.add_problem("f.csv", i + 1, "x" * 500, "bad row")
    assert run.problem_count == MAX_PROBLEMS + 5 and len(run.problems) == MAX_PROBLEMS
    assert len(run.problems[0].text) == 200 and run.problems[0].lineno == 1


def test_reads_are_read_only():
    run = RunModel()
    run.update_meta({"model": "m.gguf", "n_layer": "6", "n_expert": "16", "n_expert_used": "2"})
    assert (run.n_layer, run.n_expert, run.top_k) == (6, 16, 2)
    with pytest.raises(TypeError):
        run.meta["model"] = "other"  # type: ignore[index]
    run.set_resident(np.zeros((6, 16), bool))
    with pytest.raises(ValueError):
        run.resident[0, 0] = True  # type: ignore[index]
    run.add_token_row({"wall_ms": 3.0})
    with pytest.raises(ValueError):
        run.tokens.view("wall_ms")[0] = 1.0
    run.begin_turn(done={"tokens": 1})
    with pytest.raises(TypeError):
        run.turns[0].done["tokens"] = 2  # type: ignore[index]
    with pytest.raises(AttributeError):
        run.turns[0].text = "x"  # type: ignore[misc]


def test_turns_text_in_pieces_and_the_request_prompt():
    run = RunModel()
    run.note_request({"cmd": "generate", "id": 7, "prompt": "hello"})
    assert run.find_request(7)["prompt"] == "hello" and run.find_request(8) is None
    t = run.begin_turn(id=7, prompt=run.find_request(7)["prompt"])
    for piece in ("The ", "router ", "picks"):
        run.append_answer(piece)
    assert t._text._pieces == ["The ", "router ", "picks"]  # appended, never re-copied
    assert t.text == "The router picks" and t.text_len == 16 and t.text_tail(5) == "picks"
    assert t.text_prefix(3) == "The"
    run.finish_turn({"tokens": 3, "id": 7}, cancelled=True)
    assert t.cancelled and t.done["tokens"] == 3
    run.set_turn_error(7, "rejected")
    assert t.error == "rejected"
    assert run.ensure_turn() is t


def test_a_request_refused_before_its_first_token_is_turn_less():
    run = RunModel()
    run.note_request({"cmd": "generate", "id": 3, "prompt": "too long"})
    run.begin_turn(id=1)
    run.add_token_row({"wall_ms": 1.0})
    run.finish_turn({"tokens": 1})
    run.begin_turn(id=3, prompt="too long")
    v = run.version
    assert run.reject_request(3, "prompt + n_predict exceeds the session n_ctx (4096)")
    assert run.version > v and run.turn_count == 1 and [t.id for t in run.turns] == [1]
    (r,) = run.turnless
    assert (r.id, r.prompt, r.status, r.after) == (3, "too long", "rejected", 1)
    assert r.reason.startswith("prompt + n_predict")
    # the next turn takes the number the refused request did not use
    assert run.begin_turn(id=4).index == 1
    # a turn that produced something keeps its error: it ran
    run.add_token_row({"wall_ms": 1.0})
    assert not run.reject_request(4, "decode failed", fatal=True)
    assert run.turns[-1].error == "decode failed" and len(run.turnless) == 1
    # an error for a request that is not the newest turn's changes no turn: before READY it is the
    # session's; once ready, a request refused before its BMOE_BEGIN (bmoe-run) is turn-less
    assert not run.reject_request(99, "?") and run.turn_count == 2 and len(run.turnless) == 1
    run.set_ready({"arch": "qwen3moe"})
    assert run.reject_request(99, "too long") and run.turnless[-1].id == 99 and run.turn_count == 2
    assert not run.reject_request(None, "malformed request")
    run.begin_turn(id=5)
    assert run.reject_request(5, "backend lost", fatal=True) and run.turnless[-1].status == "failed"
    run.add_turnless(6, "p", "unanswered")
    assert run.turnless[-1].after == 2 and run.turnless[-1].reason == "" and len(run.turnless) == 4
    with pytest.raises(ValueError, match="turn-less status"):
        run.add_turnless(7, None, "lost")
    # a live model keeps the newest requests without a turn and counts them all
    live = RunModel(Retention(requests=2))
    for i in range(7):
        live.add_turnless(i, None, "rejected")
    assert live.turnless_count == 7 and [r.id for r in live.turnless] == [3, 4, 5, 6]


def test_a_turn_matched_to_its_request_gets_its_id_and_prompt():
    run = RunModel()
    t = run.begin_turn(first_token=0)
    run.set_turn_request(t, 12, "hello")
    assert (t.id, t.prompt) == (12, "hello")
    run.set_turn_request(t, 12, "other")
    assert t.prompt == "hello"  # a prompt it has is kept


def test_a_finished_turn_keeps_its_text_as_one_string():
    run = RunModel()
    t = run.begin_turn()
    for i in range(1000):
        run.append_answer(f"{i} ")
    assert t.text_len == sum(len(f"{i} ") for i in range(1000)) and t.text_tail(4) == "999 "
    run.finish_turn({"tokens": 1000})
    assert len(t._text._pieces) == 1 and t.text.startswith("0 1 2 ")


def test_mode_breakdown_and_the_overlap_evidence():
    run = RunModel()
    run.add_token_rows({"wall_ms": np.array([10.0, 10.0]), "io_ms": np.array([4.0, 4.0]),
                        "mgmt_ms": np.array([1.0, 1.0]), "stall_ms": np.zeros(2)}, 2)
    assert run.mode()[0] == "serial"
    b = run.breakdown()
    assert b["compute"].tolist() == [5.0, 5.0] and b["flash"].tolist() == [4.0, 4.0]
    run.add_token_row({"wall_ms": 10.0, "io_ms": 16.0, "stall_ms": 2.0})
    mode, why = run.mode()
    assert mode == "overlap" and "1/3" in why
    assert run.breakdown(2, 3)["flash"].tolist() == [2.0]
    empty = RunModel()
    assert empty.mode()[0] == "unknown"
    empty.update_summary({"stall_s_tok": 0.02})
    assert empty.mode()[0] == "overlap"


def test_add_layer_counts_feeds_the_heatmap():
    run = RunModel()
    run.add_token_row({"wall_ms": 10.0})
    run.add_token_row({"wall_ms": 12.0})
    run.add_layer_counts(1, np.array([3, np.nan, 0]), np.array([1, 2, 4]))
    assert run.n_layer == 3 and run.route_token_count() == 2
    m = run.hit_matrix()
    assert m.shape == (3, 2) and np.isnan(m[:, 0]).all()
    assert m[0, 1] == 0.75 and math.isnan(m[1, 1]) and m[2, 1] == 0.0
    assert run.layer_series().share[0, -1] == 0.75


def test_routes_grow_the_dimensions_and_aggregate():
    run = RunModel()
    run.add_routes(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([3, 5, 3, 9]), np.array([0, 0, 1, 1]))
    assert (run.n_layer, run.n_expert) == (2, 10) and run.route_token_count() == 2
    routed, hits = run.expert_counts()
    assert routed[0, 3] == 2 and hits[0, 3] == 1 and routed.sum() == 4
    assert run.last_routing_hit(1)[0, 3] == 0 and run.last_routing_hit()[0, 3] == 1
    assert run.expert_aggregates().as_of is None


def test_bounded_model_keeps_the_whole_run_statistics():
    run = RunModel(LIVE)
    assert LIVE.bounded and not KEEP_ALL.bounded
    n = 60_000
    for i in range(n):
        run.add_token_row({"step": i + 1, "wall_ms": float(i % 100), "turn": i // 512})
    assert run.tokens.n == n and run.tokens.start > 0
    s = run.column_stats("wall_ms")
    assert s.count == n and s.min == 0.0 and s.max == 99.0 and s.mean == pytest.approx(49.5)
    series = run.series(["wall_ms"], bins=50)
    assert series.count["wall_ms"].sum() == n and series.edges[0] == 0 and series.edges[-1] == n
    assert np.isnan(run.tokens.view("wall_ms", 0, 10)).all()  # dropped at full resolution: absent, not 0


def test_bounded_turns_and_requests():
    run = RunModel(Retention(token_rows=1024, turns=10, requests=10))
    for i in range(100):
        run.note_request({"cmd": "generate", "id": i})
        run.begin_turn(id=i)
    assert run.turn_count == 100 and 10 <= len(run.turns) <= 20 and run.turns[-1].index == 99
    assert 10 <= len(run.requests) <= 20 and run.find_request(99) is not None


def test_routing_rows_held_for_a_batch_are_seen_by_every_reader():
    """Live tokens' routing rows wait to go into the route store as one block; every reader (the
    route store itself, the hit matrix, the layer series, the expert counts) sees all of them,
    and per-layer counts added meanwhile keep their order."""
    import numpy as np

    from bmoe_top.tui.model.run import PENDING_ROUTES

    run = RunModel()
    L, K = 3, 2
    for t in range(PENDING_ROUTES + 5):  # one flush on the way, the rest still held
        run.add_token_row({"step": t + 1, "wall_ms": 1.0})
        ids = (np.arange(L * K) % 4).reshape(L, K).tolist()
        hit = (np.arange(L * K) % 2).reshape(L, K).tolist()
        run.add_route_lists(t, ids, hit)
    n = PENDING_ROUTES + 5
    assert run.n_layer == L and run.n_expert == 4
    assert run.routes.max_tok == n - 1 and run.routes.tok.shape[0] == n * L * K
    routed, hits = run.expert_counts()
    assert routed.sum() == n * L * K and hits.sum() == n * L * K // 2
    assert np.allclose(run.hit_matrix(n), 0.5)
    run.add_route_lists(n, [[0] * K] * L, [[1] * K] * L)
    run.add_layer_counts(n + 1, np.array([2.0, 2.0, 2.0]), np.array([0.0, 0.0, 0.0]))
    share = run.hit_matrix(n + 2)
    assert np.allclose(share[:, n], 1.0) and np.allclose(share[:, n + 1], 1.0)
    assert run.layer_series(0, n + 2, bins=n + 2).lookups.sum() == (n + 1) * L * K + 6


def _one_line_arrays(tok, experts, hits, tiers):
    """One BMOE_ROUTE line's rows, the way a single line was always read (the reference); a line
    without tiers has -1 on each row."""
    import numpy as np

    lens = [len(r) for r in experts]
    layer = np.repeat(np.arange(len(experts)), lens)
    expert = np.array([e for r in experts for e in r], dtype=np.int64)

    def aligned(values):
        return np.array([vrow[j] if j < len(vrow) else -1
                         for vrow, n in zip(values + [[]] * (len(experts) - len(values)), lens) for j in range(n)],
                        dtype=np.int64)

    return (np.full(len(expert), tok, dtype=np.int64), layer, expert, aligned(hits),
            aligned(tiers if tiers is not None else []))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 50),
                          st.lists(st.lists(st.integers(0, 9), max_size=4), max_size=5),
                          st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=8))
def test_routing_lines_read_as_one_block_equal_each_line_read_alone(lines):
    """Lines held and converted together give the rows each line gives alone, in order, with
    hit lists that match, are shorter, miss layers or are longer than their experts, and tier
    lists present, absent or shorter."""
    import numpy as np

    from bmoe_top.tui.model.run import route_arrays

    held = []
    for tok, experts, shape, tier_shape in lines:
        hits = [[1] * len(r) for r in experts]
        if shape == 1 and hits:
            hits = hits[:-1]  # a layer without hits
        elif shape == 2 and hits and hits[0]:
            hits[0] = hits[0][:-1]  # a shorter hit list
        elif shape == 3 and hits:
            hits[-1] = [*hits[-1], 0]  # a longer one
        tiers = None if tier_shape == 0 else [[2 * (e % 2) for e in r] for r in experts]
        if tier_shape == 2 and tiers:
            tiers = tiers[:-1]  # a layer without tiers
        held.append((tok, experts, hits, tiers))
    want = [np.concatenate(c) for c in zip(*(_one_line_arrays(*x) for x in held))]
    got = route_arrays(held)
    if all(x[3] is None for x in held):
        assert got[4] is None
        got = (*got[:4], np.full(len(got[0]), -1, np.int64))
    for g, w in zip(got, want):
        assert g is not None and g.dtype == np.int64 and np.array_equal(g, w)


def test_the_resident_map_at_an_earlier_row_is_the_one_sent_by_then():
    # the expert map drew the cache's experts now at every viewed row, also far back in the run
    from bmoe_top.tui.model import run as run_module

    run = RunModel()
    assert run.resident_at(0) == (None, None)
    a = np.zeros((2, 4), bool)
    a[0, 1] = True
    run.set_resident(a)  # after the load: before the first row
    run.add_token_rows({"wall_ms": [1.0] * 10}, 10)
    b = a.copy()
    b[1, 3] = True
    run.set_resident(b)  # after row 9
    run.set_resident(b.copy())  # the same map again: nothing new kept
    run.add_token_rows({"wall_ms": [1.0] * 10}, 10)
    c = np.ones((2, 4), bool)
    run.set_resident(c)  # after row 19 (the newest)
    with run.lock:
        m, row = run.resident_at(5)
        assert row == -1 and (m == a).all() and not m.flags.writeable
        m, row = run.resident_at(10)  # rows 0-9 shown: the map sent after row 9
        assert row == 9 and (m == b).all()
        m, row = run.resident_at(19)
        assert row == 9 and (m == b).all()
        m, row = run.resident_at(20)  # the newest row: the map now
        assert row is None and m is run.resident and (m == c).all()
        assert len(run._resident_kept) == 3
    # bounded: past RESIDENT_KEPT maps the older half is thinned, the newest are all kept
    for i in range(run_module.RESIDENT_KEPT + 10):
        run.add_token_rows({"wall_ms": [1.0]}, 1)
        m = np.zeros((2, 4), bool)
        m.flat[i % 8] = True
        m[1, 0] = i % 2 == 0
        run.set_resident(m)
    with run.lock:
        kept = run._resident_kept
        assert len(kept) <= run_module.RESIDENT_KEPT
        rows = [r for r, _s, _b in kept]
        assert rows == sorted(rows) and rows[-1] == run.tokens.n - 1
        newest, row = run.resident_at(run.tokens.n - 1)
        assert row == run.tokens.n - 2  # the map sent after the row before
