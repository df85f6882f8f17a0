"""The live what-if: LiveWhatIf follows the routing a run model receives (the model's routing
reader is the hook: no feed change) and its curve equals the offline replay of the same routing;
a model that dropped rows before the replay saw them says so; against a real ``bmoe-run
--session --route-telemetry`` child, the live replay at the run's budget equals the decode hit %
the runtime reports, turn after turn; the live screen's What-if tab draws it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.routing import random_routing

from bmoe_top.parsers.bmoe_lines import parse_line
from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.lookups import from_route_rows
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.jobs.live_whatif import LiveWhatIf
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.present.whatif import MIB

N_LAYER, N_EXPERT, K = 4, 16, 2
LAYER_BYTES = [1 << 20, 1 << 20, 2 << 20, 1 << 20]


def feed_run(run: RunModel, n_tokens: int, seed: int = 0, budget_mib: float = 12.0, resident: bool = False) -> None:
    """A live run's lines: READY, a prefill ROUTE, then a ROUTE and a PROGRESS per token."""
    rng = np.random.default_rng(seed)
    feed = RecordFeed(run, "child")
    lines = ['BMOE_READY ' + orjson.dumps({"load_s": 0.1, "arch": "qwen3moe", "n_ctx": 512, "n_layer": N_LAYER,
                                          "n_expert": N_EXPERT, "n_expert_used": K,
                                          "cache_budget_mib": budget_mib}).decode(),
             'BMOE_BEGIN {"id":1}']
    pre = random_routing(rng, 5, N_LAYER, N_EXPERT, K)
    union = [list(dict.fromkeys(pre[:, il, :].reshape(-1).tolist())) for il in range(N_LAYER)]
    lines.append("BMOE_ROUTE " + orjson.dumps({"step": 0, "turn": 0, "phase": "prefill", "experts": union,
                                              "hit": [[0] * len(u) for u in union]}).decode())
    dec = random_routing(rng, n_tokens, N_LAYER, N_EXPERT, K)
    for t in range(n_tokens):
        ex = dec[t].tolist()
        lines.append("BMOE_ROUTE " + orjson.dumps({"step": t + 1, "turn": 0, "phase": "decode", "experts": ex,
                                                  "hit": [[0] * K for _ in ex]}).decode())
        lines.append("BMOE_PROGRESS " + orjson.dumps({"step": t + 1, "steps": n_tokens, "wall_ms": 10.0,
                                                     "cache_hit_pct": 50.0}).decode())
        if resident and t % 8 == 7:
            lines.append("BMOE_RESIDENT " + orjson.dumps({"step": t + 1, "n_expert": N_EXPERT,
                                                         "resident": [[0, 1, 2], [3], [], [4, 5]],
                                                         "resident_mib": 6.0, "budget_mib": budget_mib}).decode())
    for ln in lines:
        feed.apply(parse_line(ln))


def offline(run: RunModel, layer_bytes, budgets) -> C.Curve:
    ro = run.routes
    lk = from_route_rows(ro.tok, ro.layer, ro.expert, ro.hit, N_LAYER, N_EXPERT, layer_bytes, K)
    return C.lru_curve(lk, budgets)


def test_follows_the_routing_exactly() -> None:
    run = RunModel(LIVE)
    lw = LiveWhatIf(run, sizes=lambda r: LAYER_BYTES)
    assert lw.view() is None and not lw.update()
    feed_run(run, 30)
    assert lw.update()
    v1 = lw.view()
    assert v1 is not None and v1.tokens == 30 and v1.unit == "MiB" and v1.sizes == "from the model file"
    feed_run_more = RecordFeed(run, "child")
    rng = np.random.default_rng(9)
    for t in range(30, 50):  # more tokens arrive: only they are replayed
        ex = random_routing(rng, 1, N_LAYER, N_EXPERT, K)[0].tolist()
        feed_run_more.apply(parse_line("BMOE_ROUTE " + orjson.dumps(
            {"step": t + 1, "turn": 0, "phase": "decode", "experts": ex, "hit": [[0] * K for _ in ex]}).decode()))
        feed_run_more.apply(parse_line('BMOE_PROGRESS {"step":%d,"steps":50,"wall_ms":10.0}' % (t + 1)))
    assert lw.update() and not lw.update()
    v = lw.view()
    assert v is not None and v.tokens == 50 and v.lookups == 50 * N_LAYER * K - 0  # top-k distinct per layer
    ref = offline(run, LAYER_BYTES, (v.budgets * MIB).astype(np.int64))
    assert np.array_equal(v.decode_hit_pct, ref.decode_hit_pct)
    assert np.allclose(v.read_per_token, ref.read_mib_per_token)
    assert v.run_budget == 12.0 and 12.0 in v.budgets  # the run's budget is replayed exactly
    j = int(np.flatnonzero(v.budgets == 12.0)[0])
    assert v.replay_at_budget == ref.decode_hit_pct[j]
    assert v.token_cycle == 10.0 and v.bank == 5 * 16.0  # 2 x (1+1+2+1) MiB; 16 experts x 5 MiB
    assert v.hit_at(v.bank) == ref.decode_hit_pct[-1]


def test_without_sizes_counts_expert_slots() -> None:
    run = RunModel(LIVE)
    feed_run(run, 40)
    lw = LiveWhatIf(run, sizes=None)
    lw.update()
    v = lw.view()
    assert v is not None and v.unit == "expert slots" and v.run_budget is None
    ref = offline(run, [1] * N_LAYER, v.budgets.astype(np.int64))
    assert np.array_equal(v.decode_hit_pct, ref.decode_hit_pct)
    # with BMOE_RESIDENT, slots become MiB at resident MiB / resident experts
    run2 = RunModel(LIVE)
    feed_run(run2, 40, resident=True)
    lw2 = LiveWhatIf(run2, sizes=None)
    lw2.update()
    v2 = lw2.view()
    assert v2 is not None and v2.unit == "MiB" and v2.sizes.startswith("estimated: 1.000 MiB per expert")
    assert np.array_equal(v2.decode_hit_pct, ref.decode_hit_pct) and v2.run_budget == 12.0


def test_rows_dropped_before_the_replay_are_counted() -> None:
    run = RunModel(LIVE)  # keeps the routing of the newest 2,048 tokens
    feed_run(run, 5000)
    lw = LiveWhatIf(run, sizes=lambda r: LAYER_BYTES)
    lw.update()
    v = lw.view()
    assert v is not None and v.skipped_rows > 0
    assert v.tokens == run.routes.n // (N_LAYER * K)


def test_lagging_when_the_routing_not_replayed_spans_half_the_window() -> None:
    """A hidden panel replays early when the rows it has not seen span over half the tokens the
    model keeps (they would be dropped before a replay sees them)."""
    run = RunModel(LIVE)  # keeps the routing of the newest 2,048 tokens
    lw = LiveWhatIf(run, sizes=lambda r: LAYER_BYTES)
    assert not lw.lagging()  # no routing at all
    feed_run(run, 1000)
    assert not lw.lagging()  # 1,000 tokens behind: under half of 2,048
    lw.update()
    assert not lw.lagging()  # caught up
    feed_run(run, 1100)  # a new run's lines in the same model: 1,100 tokens behind
    assert lw.lagging()
    lw.update()
    assert not lw.lagging() and lw.skipped_rows == 0


def test_a_bad_routing_row_is_counted_not_fatal() -> None:
    run = RunModel(LIVE)
    feed_run(run, 10)
    RecordFeed(run, "child").apply(parse_line('BMOE_ROUTE {"step":11,"turn":0,"phase":"decode",'
                                              '"experts":[[99,1],[2,3],[4,5],[6,7]],"hit":[]}'))
    lw = LiveWhatIf(run, sizes=lambda r: LAYER_BYTES)
    lw.update()
    v = lw.view()
    assert v is not None and v.problems == 1 and v.tokens == 10 and "n_expert" in lw.last_error


def test_a_token_routed_to_more_than_top_k_max_experts_is_counted_not_allocated() -> None:
    from bmoe_top.parsers.limits import MAX_TOP_K

    run = RunModel(LIVE)
    feed_run(run, 10)
    wide = [list(range(N_EXPERT)) * (MAX_TOP_K // N_EXPERT + 1)] + [[1, 2]] * (N_LAYER - 1)
    RecordFeed(run, "child").apply(parse_line("BMOE_ROUTE " + orjson.dumps(
        {"step": 11, "turn": 0, "phase": "decode", "experts": wide, "hit": []}).decode()))
    lw = LiveWhatIf(run, sizes=lambda r: LAYER_BYTES)
    lw.update()
    v = lw.view()
    assert v is not None and v.problems == 1 and v.tokens == 10 and f"more than {MAX_TOP_K}" in lw.last_error


def test_the_replay_in_small_grids_gives_the_same_curve(monkeypatch: pytest.MonkeyPatch) -> None:
    import bmoe_top.tui.jobs.live_whatif as W

    whole, parts = RunModel(LIVE), RunModel(LIVE)
    feed_run(whole, 60, seed=4)
    feed_run(parts, 60, seed=4)
    a = LiveWhatIf(whole, sizes=lambda r: LAYER_BYTES)
    a.update()
    monkeypatch.setattr(W, "GRID_CELLS", N_LAYER * K * 7)  # 7 tokens a grid
    b = LiveWhatIf(parts, sizes=lambda r: LAYER_BYTES)
    b.update()
    va, vb = a.view(), b.view()
    assert va is not None and vb is not None and va.tokens == vb.tokens == 60
    assert np.array_equal(va.decode_hit_pct, vb.decode_hit_pct) and va.lookups == vb.lookups


# ------------------------------------------------------------------------------ the runtime
@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "demo.gguf", preset="demo", qtype="q8_0", seed=2))


def _wait(cond, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.05)


def test_live_replay_equals_the_runtime(demo_model: Path) -> None:
    """bmoe-run --session --route-telemetry with a budget decode keeps evicting in: after each
    turn the live replay at the run's budget gives the decode hit % BMOE_DONE reports for that
    turn, and the session curve their lookup-weighted mean (both turns route 40 x 6 x 2)."""
    from bmoe_top.tui.cli import runtime_command
    from bmoe_top.tui.feed.bind import bind
    from bmoe_top.tui.sources.child_session import ChildSession

    cmd = runtime_command(str(demo_model), ["--cache-mb", "2.5", "-c", "512", "-t", "1", "--seed", "3"])
    src = ChildSession(cmd)
    run = bind(src, RunModel(LIVE)).run
    lw = LiveWhatIf(run)  # sizes from the model file BMOE_READY names
    per_turn: list[float] = []
    src.start()
    try:
        _wait(lambda: src.state == "ready")
        for turn, prompt in enumerate(("def fib(n):\n    if n < 2:\n        return n\n", "\nprint(fib(10))\n")):
            src.generate(prompt, 40, clear_kv=turn == 0)
            _wait(lambda t=turn: src.status().turns_done == t + 1)
            assert lw.update()
            v = lw.view()
            assert v is not None and v.sizes == "from the model file" and v.run_budget == 2.5
            done = run.turns[-1].done
            assert done is not None
            assert v.turn_at_budget is not None and v.turn_tokens == 40
            assert round(v.turn_at_budget, 2) == pytest.approx(done["cache_hit_pct"], abs=1e-9)
            per_turn.append(v.turn_at_budget)
            # the curve covers the session: the cache carried over, and so do its counts
            assert v.replay_at_budget == pytest.approx(sum(per_turn) / len(per_turn))
            assert 0 < v.replay_at_budget < 100 and v.tokens == 40 * (turn + 1)
    finally:
        src.close()


async def test_the_live_screen_draws_the_curve() -> None:
    """The What-if tab of the live screen (ctrl+o) over a recording played at full speed."""
    from helpers import synth

    from bmoe_top.parsers.recording import parse_recording
    from bmoe_top.tui.screens.live import live_app
    from bmoe_top.tui.sources.replay import RecordingSource
    from bmoe_top.tui.widgets.curves import CurveChart
    from bmoe_top.tui.widgets.live_whatif import LiveWhatIfPanel

    rec = parse_recording(synth.progress_recording(24))
    src = RecordingSource(rec, speed=float("inf"), name="t.rec.jsonl")
    app = live_app(src, title="play")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("ctrl+o")
            panel = app.main.query_one(LiveWhatIfPanel)
            end = time.monotonic() + 60
            while (panel.view is None or panel.view.tokens < 24) and time.monotonic() < end:
                await pilot.pause(0.1)
            assert panel.view is not None and panel.view.tokens == 24
            text = app.main.query_one("#lw-chart", CurveChart).text()
            assert "live: decode hit % if the cache were this big" in text and "LRU now" in text
            assert "run's budget 16 MiB" in text
            assert "now at the run's budget" in str(app.main.query_one(".lw-readout").render())
    finally:
        src.close()
