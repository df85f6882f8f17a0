"""Alert rules that wait (bmoe_top.tui.model.alerts, docs/alerts.md): for: semantics on the run's
own clock, absent never fires, row-at-a-time and block evaluation agree."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.alerts import (
    DEFAULT_RULES,
    AlertEngine,
    AlertState,
    Rule,
    Severity,
    alert_series,
    firing_text,
    run_clock,
)

I, P, F, R = AlertState.INACTIVE, AlertState.PENDING, AlertState.FIRING, AlertState.RESOLVED
LOW_HIT = Rule("low", "token.cache_hit_pct", "<", 30.0, 10.0, Severity.WARNING)


def run_steps(engine: AlertEngine, seq: list[tuple[float | None, float]]) -> list[tuple[str, str, int]]:
    out = []
    for v, t in seq:
        out += [(tr.old.value, tr.new.value, tr.row) for tr in engine.step({"token.cache_hit_pct": v}, t)]
    return out


def test_a_condition_held_for_the_whole_for_fires_once_and_resolves():
    e = AlertEngine([LOW_HIT])
    seq = [(20.0, t) for t in range(0, 12)] + [(40.0, 12.0)]
    assert run_steps(e, seq) == [("inactive", "pending", 0), ("pending", "firing", 10), ("firing", "resolved", 12)]
    assert e.state("low") is R and not e.active()


def test_a_flap_shorter_than_for_never_fires():
    e = AlertEngine([LOW_HIT])
    # below for 9 s, above once, below 9 s again: never 10 s in a row
    seq = [(20.0, float(t)) for t in range(10)] + [(50.0, 10.0)] + [(20.0, float(t)) for t in range(11, 20)]
    got = run_steps(e, seq)
    assert ("pending", "firing") not in {(a, b) for a, b, _ in got}
    assert got == [("inactive", "pending", 0), ("pending", "inactive", 10), ("inactive", "pending", 11)]
    assert e.state("low") is P and e.active()[0].since == 11.0


def test_absent_is_not_zero_it_never_fires_and_ends_a_hold():
    e = AlertEngine([LOW_HIT])
    assert run_steps(e, [(None, float(t)) for t in range(100)]) == []
    assert run_steps(e, [(math.nan, 100.0)]) == []
    e2 = AlertEngine([LOW_HIT])
    got = run_steps(e2, [(10.0, 0.0), (10.0, 10.0), (None, 11.0)])
    assert got == [("inactive", "pending", 0), ("pending", "firing", 1), ("firing", "resolved", 2)]


def test_for_zero_fires_at_once_and_a_resolved_alert_waits_again():
    e = AlertEngine([Rule("now", "token.cache_hit_pct", "<", 30.0, 0.0)])
    assert run_steps(e, [(10.0, 0.0), (40.0, 1.0), (10.0, 2.0)]) == [
        ("inactive", "firing", 0), ("firing", "resolved", 1), ("resolved", "firing", 2)]
    e = AlertEngine([LOW_HIT])
    run_steps(e, [(10.0, 0.0), (10.0, 10.0), (40.0, 11.0)])
    assert run_steps(e, [(10.0, 12.0)]) == [("resolved", "pending", 3)]


def test_a_rule_refuses_what_it_cannot_compare():
    for bad in ({"op": "=~"}, {"threshold": math.inf}, {"for_s": -1.0}, {"key": "token.nope"}):
        kw = {"name": "x", "key": "token.cache_hit_pct", "op": "<", "threshold": 1.0, **bad}
        with pytest.raises((ValueError, KeyError)):
            Rule(**kw)  # type: ignore[arg-type]


def test_the_defaults_cover_what_users_ask_for():
    keys = {r.key for r in DEFAULT_RULES}
    assert {"token.cache_hit_pct", "recent.stall_pct", "recent.flash_pct", "token.mem_available_mib",
            "device.cpu_temp_max", "recent.tok_s_pct_first"} <= keys
    assert len({r.name for r in DEFAULT_RULES}) == len(DEFAULT_RULES)


def reference(rule: Rule, values: list[float], times: list[float]) -> list[tuple[str, str, int]]:
    """The for: semantics written out the plain way (per row, from the definition)."""
    state, since, out = "inactive", 0.0, []
    for i, (v, t) in enumerate(zip(values, times)):
        holds = not math.isnan(v) and v < rule.threshold
        new = state
        if holds and state in ("inactive", "resolved"):
            since = t
            new = "firing" if rule.for_s == 0 else "pending"
        elif holds and state == "pending" and t >= since + rule.for_s:
            new = "firing"
        elif not holds and state == "pending":
            new = "inactive"
        elif not holds and state == "firing":
            new = "resolved"
        if new != state:
            out.append((state, new, i))
            state = new
    return out


values_st = st.lists(st.one_of(st.floats(0, 100, allow_nan=False), st.just(math.nan)), min_size=0, max_size=80)


@settings(max_examples=300)
@given(values=values_st, gaps=st.lists(st.floats(0, 5, allow_nan=False), min_size=80, max_size=80),
       for_s=st.sampled_from([0.0, 0.5, 3.0, 10.0]), cuts=st.lists(st.integers(0, 80), max_size=5))
def test_block_evaluation_equals_row_by_row_and_the_definition(values, gaps, for_s, cuts):
    rule = Rule("r", "token.cache_hit_pct", "<", 40.0, for_s)
    times = list(np.cumsum(gaps[: len(values)]))
    want = reference(rule, values, times)
    one = AlertEngine([rule])
    got_rows = run_steps(one, [(None if math.isnan(v) else v, t) for v, t in zip(values, times)])
    assert got_rows == want
    # the same rows in blocks (a live refresh reads what arrived since the last one)
    blocks = AlertEngine([rule])
    got: list[tuple[str, str, int]] = []
    edges = sorted({0, len(values), *(c for c in cuts if c <= len(values))})
    for a, b in zip(edges, edges[1:]):
        got += [(tr.old.value, tr.new.value, tr.row) for tr in
                blocks.advance(np.array(times[a:b]), {"token.cache_hit_pct": np.array(values[a:b])})]
    assert got == want
    assert blocks.state("r") is one.state("r")


def token_run(walls: list[float], hits: list[float], mem: list[float] | None = None) -> RunModel:
    run = RunModel()
    n = len(walls)
    cols = {"wall_ms": walls, "io_ms": [w * 0.5 for w in walls], "cache_hit_pct": hits}
    if mem is not None:
        cols["mem_available_mib"] = mem
    run.add_token_rows(cols, n)
    return run


def test_the_run_clock_is_the_tokens_own_time_and_live_equals_replay():
    walls = [100.0] * 300  # 10 tok/s: 0.1 s a token
    hits = [80.0] * 100 + [10.0] * 200  # the hit rate falls at row 100 (t = 10.1 s)
    run = token_run(walls, hits)
    t = run_clock(run, 0, 300)
    assert t[0] == pytest.approx(0.1) and t[-1] == pytest.approx(30.0)
    whole = AlertEngine(DEFAULT_RULES).advance_run(run)
    live = AlertEngine(DEFAULT_RULES)
    grown = RunModel()
    seen = []
    for a in range(0, 300, 7):  # rows arrive a few at a time, the screen evaluates each refresh
        b = min(300, a + 7)
        grown.add_token_rows({"wall_ms": walls[a:b], "io_ms": [w * 0.5 for w in walls[a:b]],
                              "cache_hit_pct": hits[a:b]}, b - a)
        seen += live.advance_run(grown)
    assert seen == whole
    low = [(tr.new, tr.row) for tr in whole if tr.rule == "CacheHitLow"]
    # pending at the first low row, firing 60 s of run clock later: 600 tokens at 0.1 s: not yet
    assert low == [(P, 100)]
    assert {tr.rule for tr in whole} == {"CacheHitLow"}  # flash wait is 50 % of wall: under 70 %


def test_absent_columns_give_no_alert_and_no_cache_is_not_zero_hit():
    run = token_run([100.0] * 50, [-1.0] * 50)  # -1: no cache
    _, values = alert_series(run, 0, 50, {"token.cache_hit_pct", "token.mem_available_mib"})
    assert np.isnan(values["token.cache_hit_pct"]).all() and np.isnan(values["token.mem_available_mib"]).all()
    e = AlertEngine([r for r in DEFAULT_RULES if r.name in ("CacheHitLow", "MemAvailableLow", "TemperatureHigh")])
    assert e.advance_run(run) == [] and e.rows == 50


def test_mem_available_low_fires_after_its_for_and_tok_s_collapse_needs_the_first_window():
    n = 400
    walls = [50.0] * 200 + [200.0] * 200  # 20 tok/s, then 5 tok/s (25 %)
    mem = [4096.0] * 100 + [300.0] * 300
    run = token_run(walls, [90.0] * n, mem)
    e = AlertEngine(DEFAULT_RULES)
    trs = e.advance_run(run)
    mem_tr = [(tr.new, tr.row) for tr in trs if tr.rule == "MemAvailableLow"]
    # 300 MiB from row 100 (t = 5.05 s); 10 s later is row 200 (t = 10.0 + 0.2 = 10.2 s) ... its row:
    t = run_clock(run, 0, n)
    due = int(np.searchsorted(t, t[100] + 10.0))
    assert mem_tr == [(P, 100), (F, due)]
    coll = [(tr.new, tr.value) for tr in trs if tr.rule == "TokSCollapse"]
    assert coll[0][0] is P and coll[-1][0] is F and coll[-1][1] == pytest.approx(25.0)
    assert firing_text(e.active()) == "▲ MemAvailableLow +1"
    assert firing_text(e.active(), ascii_only=True).startswith("! ")
    assert firing_text([]) == ""


def test_the_doc_lists_every_default_rule_as_it_is():
    """docs/alerts.md "The default rules": one row per rule, its condition, for: and severity."""
    from pathlib import Path

    from bmoe_top.tui.sources.prometheus import format_duration

    page = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    section = page.split("## The default rules", 1)[1].split("\n## ", 1)[0]
    rows = {cells[1].strip("` "): cells[2:5] for cells in (line.split("|") for line in section.splitlines())
            if len(cells) > 5 and cells[1].strip().startswith("`")}
    assert set(rows) == {r.name for r in DEFAULT_RULES}
    for r in DEFAULT_RULES:
        cond, for_, sev = (c.strip() for c in rows[r.name])
        assert cond == f"`{r.expr}`" and sev == r.severity
        assert for_ == (format_duration(r.for_s) if r.for_s else "0s"), r.name
