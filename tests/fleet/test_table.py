"""The instances table and the drill-down built from range-query answers (pure): cell states and
ages, down rows keeping their last good values, the worst-instance ranking, sort and filter, and
the ``--once --json`` document against its golden file.

Golden files: ``tests/fleet/golden/*.json``; after a deliberate change of the document, rewrite
them with ``BMOE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/fleet/test_table.py`` and
review the diff."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import orjson
import pytest

from bmoe_top.tui.fleet.drill import build_drill
from bmoe_top.tui.fleet.queries import COLUMN_SERIES, COLUMNS
from bmoe_top.tui.fleet.table import (
    CellState,
    FleetState,
    Grid,
    InstanceState,
    RankMemory,
    align,
    build_table,
    grouping,
    search_cells,
    sort_rows,
)
from bmoe_top.tui.present.fleet import fleet_document
from bmoe_top.tui.screens.fleet import filter_rows
from bmoe_top.tui.sources.prometheus import (
    PromError,
    PromErrorKind,
    QueryResult,
    RangeResult,
    RangeSeries,
    Sample,
    decode_alerts,
)

GOLDEN = Path(__file__).parent / "golden"
GRID = Grid(start=1000.0, step=10.0, n=6)
AT = GRID.end
NAN = math.nan


def series(job: str, inst: str, values, **labels) -> RangeSeries:
    """A series on GRID; ``None`` = no point at that step."""
    t = [GRID.start + i * GRID.step for i, v in enumerate(values) if v is not None]
    v = [v for v in values if v is not None]
    return RangeSeries(labels={"job": job, "instance": inst, **labels}, t=np.array(t, dtype=float),
                       v=np.array(v, dtype=float))


def result(*ss: RangeSeries, query: str = "q") -> RangeResult:
    return RangeResult(query=query, start=GRID.start, end=GRID.end, step=GRID.step, series=list(ss))


def fleet_answers():
    up = result(
        series("bmoe", "a:1", [1, 1, 1, 1, 1, 1]),
        series("bmoe", "b:1", [1, 1, 1, 1, 0, 0]),          # stopped: down since t=1040
        series("bmoe", "c:1", [1, 1, 1, None, None, None]),  # removed from the targets
        series("bmoe", "d:1", [0, 0, 0, 0, 0, 0]),          # never up
        series("stock", "e:1", [1, 1, 1, 1, 1, 1]),         # llama-server without a MoE cache
        series("bmoe", "f:1", [1, 1, 1, 1, 1, 1]),
    )
    per = {c.key: [] for c in COLUMNS}
    per["tok_s"] = [series("bmoe", "a:1", [0, 0, 5, 6, 7, 8]), series("bmoe", "b:1", [3, 3, 3, 4, 4, 4]),
                    series("bmoe", "c:1", [1, 1, 1, None, None, None]), series("stock", "e:1", [0, 0, 0, 0, 0, 0]),
                    series("bmoe", "f:1", [2, 2, 2, 2, 2, 2])]
    per["hit_pct"] = [series("bmoe", "a:1", [NAN, NAN, 50, 60, 70, NAN]), series("bmoe", "b:1", [80] * 6),
                      series("bmoe", "f:1", [40] * 6)]
    per["wall_ms"] = [series("bmoe", "a:1", [NAN, NAN, 2, 2, 2, 2]), series("bmoe", "b:1", [4] * 6),
                      series("stock", "e:1", [NAN, 9, 9, 9, 9, 9]), series("bmoe", "f:1", [10] * 6)]
    per["flash_ms"] = [series("bmoe", "a:1", [NAN, NAN, 1, 1, 1, 1]), series("bmoe", "b:1", [1] * 6),
                       series("bmoe", "f:1", [2] * 6)]
    per["budget_experts"] = [series("bmoe", "a:1", [40, 40, 40, 40, None, None]), series("bmoe", "f:1", [40] * 6)]
    cols: dict[str, RangeResult | PromError] = {k: result(*v) for k, v in per.items()}
    cols["requests_deferred"] = PromError(PromErrorKind.EXECUTION, "boom", query="q_deferred", http_status=422,
                                          error_type="execution")
    restarts = QueryResult(query="r", at=AT, samples=[Sample({"job": "bmoe", "instance": "a:1"}, AT, 1.0),
                                                      Sample({"job": "bmoe", "instance": "f:1"}, AT, 0.0)])
    return up, cols, restarts, exported_answer()


def exported_answer() -> QueryResult:
    """a:1 exports everything but the upload bytes; e:1 is a stock llama-server; c:1 and d:1
    export nothing now (gone, down)."""
    stock = [n for n in COLUMN_SERIES if n.startswith("llamacpp:") and "moe_cache" not in n]
    names = {"a:1": [n for n in COLUMN_SERIES if "upload_bytes" not in n], "b:1": list(COLUMN_SERIES),
             "e:1": stock, "f:1": list(COLUMN_SERIES)}
    return QueryResult(query="e", at=AT, samples=[
        Sample({"job": "stock" if i == "e:1" else "bmoe", "instance": i, "__name__": n}, AT, 1.0)
        for i, ns in names.items() for n in ns])


def make_table():
    up, cols, restarts, exported_now = fleet_answers()
    return build_table(selector='{job=~"bmoe|stock"}', at=AT, window_s=50.0, grid=GRID, rate_interval_s=11.0,
                       scrape_interval_s=1.0, up=up, columns=cols, restarts=restarts, exported_now=exported_now,
                       queries={"up": "up_q"}, n_queries=16)


def test_align_puts_points_on_their_step_and_drops_others():
    s = RangeSeries({}, np.array([1000.0, 1020.0, 1025.0, 2000.0]), np.array([1.0, 2.0, 9.0, 9.0]))
    vals, have = align(s, GRID)
    assert have.tolist() == [True, False, True, False, False, False]
    assert vals[0] == 1 and vals[2] == 2 and np.isnan(vals[1])


def test_cells_say_what_they_are():
    t = make_table()
    a = t.row("a:1")
    assert a.state is InstanceState.UP and a.last_up_age_s == 0 and a.restarts == 1
    assert a.cells["tok_s"].value == 8 and a.cells["tok_s"].state is CellState.OK and a.cells["tok_s"].age_s == 0
    assert a.cells["hit_pct"].state is CellState.UNDEFINED and a.cells["hit_pct"].value is None  # no lookups now
    assert a.cells["budget_experts"].state is CellState.STALE
    assert a.cells["budget_experts"].value == 40 and a.cells["budget_experts"].age_s == 20
    assert a.cells["read_mib_s"].state is CellState.NOT_EXPORTED  # no such series at all
    assert a.cells["prompt_tok_s"].state is CellState.NO_DATA  # exported, but no rate in the window yet
    assert a.cells["requests_deferred"].state is CellState.ERROR and "requests_deferred" in t.errors
    assert a.cells["stall_share"].value == pytest.approx(50.0)
    # a stock llama-server: its own numbers, "not exported" for the MoE cache and the split
    e = t.row("e:1")
    assert e.cells["tok_s"].value == 0.0 and e.cells["tok_s"].state is CellState.OK  # a real zero
    assert e.cells["wall_ms"].value == 9
    for k in ("hit_pct", "flash_ms", "stall_share", "budget_experts"):
        assert e.cells[k].state is CellState.NOT_EXPORTED and e.cells[k].value is None, k
    assert e.restarts is None
    # without the exported-series answer nothing is claimed "not exported"
    up, cols, restarts, _ = fleet_answers()
    t2 = build_table(selector="", at=AT, window_s=50.0, grid=GRID, rate_interval_s=11.0, scrape_interval_s=1.0,
                     up=up, columns=cols, restarts=restarts, exported_now=PromError(PromErrorKind.EXECUTION, "x"))
    assert t2.row("e:1").cells["hit_pct"].state is CellState.NO_DATA and "exported" in t2.errors


def test_down_rows_keep_their_last_good_values_with_age():
    t = make_table()
    b = t.row("b:1")
    assert b.state is InstanceState.DOWN and b.last_up_age_s == 20
    assert b.cells["tok_s"].value == 4 and b.cells["tok_s"].age_s == 20  # at the last up point, not after
    assert b.cells["tok_s"].state is CellState.STALE  # old values say so, with their age
    assert b.cells["stall_share"].state is CellState.STALE and b.cells["stall_share"].value == 25
    c = t.row("c:1")
    assert c.state is InstanceState.GONE and c.last_up_age_s == 30 and c.cells["tok_s"].value == 1
    assert c.cells["tok_s"].state is CellState.STALE and c.cells["tok_s"].age_s == 30
    d = t.row("d:1")
    assert d.state is InstanceState.DOWN and d.last_up_age_s is None
    assert all(cell.state in (CellState.NO_DATA, CellState.ERROR) for cell in d.cells.values())


def test_sparklines_are_nan_where_there_is_nothing():
    t = make_table()
    a = t.row("a:1")
    assert t.t.tolist() == [1000, 1010, 1020, 1030, 1040, 1050]
    assert np.isnan(a.spark["hit_pct"][[0, 1, 5]]).all() and a.spark["hit_pct"][3] == 60
    assert np.isnan(a.spark["read_mib_s"]).all()
    assert a.spark["up"].tolist() == [1] * 6
    assert np.isnan(t.row("c:1").spark["up"][3:]).all()


def test_worst_first_down_then_stall_then_hit():
    t = make_table()
    order = [r.instance for r in t.rows]
    assert order[:3] == ["b:1", "c:1", "d:1"]  # down / gone / down, by name
    # up rows: a has 50 % stall share, f 20 %, e none
    assert order[3:] == ["a:1", "f:1", "e:1"]
    assert [r.rank for r in t.rows] == [1, 2, 3, 4, 5, 6]
    assert t.worst is t.rows[0] and t.rows[0].flags[0] == "down"
    assert "highest_stall" in t.row("a:1").flags and "lowest_hit" in t.row("f:1").flags
    assert t.row("c:1").flags == ("gone",)


def _ranked_table(values: dict[str, tuple[float, float]], memory: RankMemory, down: str | None = None):
    """A table of up instances with (stall share %, hit %) each (down: that one stopped)."""
    up = result(*(series("bmoe", i, [1, 1, 1, 1, 1, 0 if i == down else 1]) for i in values))
    per = {c.key: result() for c in COLUMNS}
    per["wall_ms"] = result(*(series("bmoe", i, [10.0] * 6) for i in values))
    per["flash_ms"] = result(*(series("bmoe", i, [s / 10] * 6) for i, (s, _h) in values.items()))
    per["hit_pct"] = result(*(series("bmoe", i, [h] * 6) for i, (_s, h) in values.items()))
    return build_table(selector="", at=AT, window_s=50.0, grid=GRID, rate_interval_s=11.0, scrape_interval_s=1.0,
                       up=up, columns=per, memory=memory)


def test_worst_first_moves_rows_only_on_a_real_change():
    base = {"a:1": (40.0, 60.0), "b:1": (38.0, 70.0), "c:1": (36.0, 65.0), "d:1": (10.0, 90.0)}
    memory = RankMemory()
    first = [r.instance for r in _ranked_table(base, memory).rows]
    assert first == ["a:1", "b:1", "c:1", "d:1"]
    # a 1 s scrape's noise: every share and hit % moves by up to 4 points, every refresh, in turn
    for k in range(30):
        noisy = {i: (s + 4.0 * math.sin(k + 2 * j), h - 4.0 * math.cos(k + j)) for j, (i, (s, h)) in
                 enumerate(base.items())}
        t = _ranked_table(noisy, memory)
        assert [r.instance for r in t.rows] == first, k
        assert t.rows[0].flags == ("highest_stall", "lowest_hit")  # by the values it ranks by
    # without the memory, the same noise reorders (what the hysteresis is for)
    assert [r.instance for r in _ranked_table(noisy, RankMemory()).rows] != first
    # a real change moves the row at once: c's stall share doubles; b stops
    changed = {**base, "c:1": (72.0, 65.0)}
    assert [r.instance for r in _ranked_table(changed, memory).rows] == ["c:1", "a:1", "b:1", "d:1"]
    down = [r.instance for r in _ranked_table(changed, memory, down="b:1").rows]
    assert down == ["b:1", "c:1", "a:1", "d:1"]
    # the memory holds only the rows of the last ranking
    _ranked_table({"a:1": (1.0, 99.0)}, memory)
    assert set(memory.values) == {("bmoe", "a:1")}


def test_two_prometheus_servers_holding_one_instance_name_stay_two_rows():
    """Two Prometheus servers with their external_labels writing into one store: the label that
    differs between two targets of one job and instance is a grouping label, so the rows never
    merge; labels that never tell two targets apart are not."""
    targets = [{"__name__": "up", "job": "bmoe", "instance": "node:8080", "prometheus": p, "env": "prod"}
               for p in ("east", "west")] + [{"job": "bmoe", "instance": "solo:1", "prometheus": "east", "env": "prod"}]
    by = grouping(targets)
    assert by == ("job", "instance", "prometheus")
    assert grouping(targets[1:]) == ("job", "instance")  # nothing shared: job and instance suffice
    up = result(series("bmoe", "node:8080", [1] * 6, prometheus="east"),
                series("bmoe", "node:8080", [1, 1, 1, 1, 0, 0], prometheus="west"),
                series("bmoe", "solo:1", [1] * 6, prometheus="east"))
    cols = {c.key: result() for c in COLUMNS}
    cols["tok_s"] = result(series("bmoe", "node:8080", [5.0] * 6, prometheus="east"),
                           series("bmoe", "node:8080", [9.0] * 6, prometheus="west"))
    t = build_table(selector="", at=AT, window_s=50.0, grid=GRID, rate_interval_s=11.0, scrape_interval_s=1.0,
                    up=up, columns=cols, by=by)
    assert len(t.rows) == 3 and t.by == by
    east, west = t.row("node:8080", labels={"prometheus": "east"}), t.row("node:8080", labels={"prometheus": "west"})
    assert east.key == ("bmoe", "node:8080", "east") and west.key == ("bmoe", "node:8080", "west")
    assert east.state is InstanceState.UP and east.cells["tok_s"].value == 5.0
    assert west.state is InstanceState.DOWN and west.cells["tok_s"].value == 9.0
    assert [r.key for r in filter_rows(t.rows, "WEST")] == [west.key]
    doc = fleet_document(prometheus="u", selector="", window_s=50.0, table=t)["table"]
    assert doc["by"] == ["job", "instance", "prometheus"]
    assert [(r["instance"], r["labels"]) for r in doc["instances"][:2]] == [
        ("node:8080", {"prometheus": "west"}), ("node:8080", {"prometheus": "east"})]


def test_sort_and_filter_keep_absent_last():
    t = make_table()
    asc = [r.instance for r in sort_rows(t.rows, "hit_pct")]
    desc = [r.instance for r in sort_rows(t.rows, "hit_pct", descending=True)]
    assert asc[:2] == ["f:1", "b:1"] and desc[:2] == ["b:1", "f:1"]
    assert set(asc[2:]) == set(desc[2:]) == {"a:1", "c:1", "d:1", "e:1"}
    assert [r.instance for r in sort_rows(t.rows, "instance")][:2] == ["a:1", "b:1"]
    assert [r.instance for r in filter_rows(t.rows, "STOCK")] == ["e:1"]
    assert len(filter_rows(t.rows, "")) == 6
    assert filter_rows(t.rows, "e:1.*") == [] and search_cells(t.rows[0])[0] == t.rows[0].instance  # literal


def test_state_keeps_the_last_good_table_on_failure():
    st = FleetState()
    assert st.age_s(AT) is None
    t = make_table()
    st.apply(t)
    st.fail(PromError(PromErrorKind.UNREACHABLE, "refused"), AT + 7)
    assert st.table is t and st.error.kind is PromErrorKind.UNREACHABLE and st.age_s(AT + 7) == 7
    assert (st.n_ok, st.n_failed) == (1, 1)
    st.apply(t)
    assert st.error is None


def make_drill():
    up = result(series("bmoe", "a:1", [1, 1, 1, 1, 1, 1]))
    cols = {c.key: result() for c in COLUMNS}
    cols["tok_s"] = result(series("bmoe", "a:1", [None, 2, 3, 4, 5, 6]))
    cols["wall_ms"] = result(series("bmoe", "a:1", [NAN, 4, 4, 4, 4, 4]))
    cols["flash_ms"] = result(series("bmoe", "a:1", [NAN, 1, 1, 2, 2, 2]))
    hits = result(*(RangeSeries({"layer": str(il)}, GRID.t, np.array([0, 1, 2, 3, 4, 5.0]) * (il + 1))
                    for il in (2, 0, 1)), RangeSeries({"layer": "x"}, GRID.t, np.ones(6)))
    misses = result(*(RangeSeries({"layer": str(il)}, GRID.t, np.array([0, 1, 1, 1, 1, 1.0])) for il in range(3)))
    totals = QueryResult(query="t", at=AT, samples=[
        Sample({"__name__": "llamacpp:tokens_predicted_total"}, AT, 123.0),
        Sample({"__name__": "bmoe:token_wall_seconds_total"}, AT, 0.5),
        Sample({"__name__": "something_else_total"}, AT, 9.0)])
    return build_drill(job="bmoe", instance="a:1", at=AT, window_s=50.0, grid=GRID, rate_interval_s=11.0,
                       scrape_interval_s=1.0, up=up, columns=cols, layer_hits=hits, layer_misses=misses,
                       totals=totals, exported_now=QueryResult(query="e", at=AT, samples=[
                           Sample({"job": "bmoe", "instance": "a:1", "__name__": n}, AT, 1.0)
                           for n in COLUMN_SERIES if "moe_cache_hits" not in n]),
                       queries={"up": "up_q"}, n_queries=17)


def test_drill_heatmap_per_layer():
    d = make_drill()
    assert d.layers == [0, 1, 2]  # sorted; a non-numeric layer label is not a layer
    assert d.layer_hits.shape == (3, 6) and d.layer_hit_pct.shape == (3, 6)
    assert np.isnan(d.layer_hit_pct[:, 0]).all()  # no lookups at all: undefined, not 0
    assert d.layer_hit_pct[2, 1] == pytest.approx(100 * 3 / 4)
    assert d.series["stall_share"][1] == 25 and np.isnan(d.series["stall_share"][0])
    assert d.first_t == 1000.0  # up at the first point
    assert d.totals["tokens_predicted"] == 123 and d.totals["wall_s"] == 0.5 and d.totals["misses"] is None
    assert "hit_pct" in d.not_exported and "tok_s" not in d.not_exported
    assert "prompt_tok_s" in d.no_data and "prompt_tok_s" not in d.not_exported


def _golden(name: str, doc: dict) -> None:
    path = GOLDEN / name
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"
    if os.environ.get("BMOE_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{name} differs from its golden file (see this module's docstring)"


#: ``/api/v1/alerts``'s data as Prometheus 2.x answers it: one firing alert, one pending.
ALERTS_ANSWER = {"alerts": [
    {"labels": {"alertname": "InstanceDown", "job": "bmoe", "instance": "c:1", "severity": "critical"},
     "annotations": {"summary": "Prometheus cannot scrape the instance."}, "state": "firing",
     "activeAt": "2026-12-05T06:00:01.5Z", "value": "0e+00"},
    {"labels": {"alertname": "CacheHitLow", "job": "bmoe", "instance": "a:1", "severity": "warning"},
     "annotations": {}, "state": "pending", "activeAt": "2026-12-05T06:00:30Z", "value": "2.5e+01"}]}


def test_alerts_decode_and_a_malformed_answer_is_an_error():
    firing, pending = decode_alerts(ALERTS_ANSWER)
    assert (firing.name, firing.state, firing.labels["instance"], firing.value) == (
        "InstanceDown", "firing", "c:1", 0.0)
    assert "alertname" not in firing.labels and firing.active_at == pytest.approx(1796450401.5)
    assert pending.value == 25.0 and pending.annotations == {}
    for bad in ({}, {"alerts": [{"labels": [], "value": "1"}]}, {"alerts": [{"value": 3}]}):
        with pytest.raises(PromError) as e:
            decode_alerts(bad)
        assert e.value.kind is PromErrorKind.MALFORMED


def test_document_golden():
    table = make_table()
    table.alerts = decode_alerts(ALERTS_ANSWER)
    doc = fleet_document(prometheus="http://127.0.0.1:9090", selector='{job=~"bmoe|stock"}', window_s=50.0,
                         table=table, drill=make_drill(), instance="a:1")
    assert [(a["alert"], a["state"], a["severity"], a["instance"]) for a in doc["table"]["alerts"]] == [
        ("InstanceDown", "firing", "critical", "c:1"), ("CacheHitLow", "pending", "warning", "a:1")]
    assert doc["status"] == "ok" and doc["table"]["queries_per_refresh"] == 16
    cells = doc["table"]["instances"][3]["cells"]
    assert cells["hit_pct"] == {"value": None, "state": "undefined", "age_s": 0.0}
    _golden("fleet_document.json", doc)


def test_document_of_a_failed_refresh_golden():
    err = PromError(PromErrorKind.BAD_DATA, 'invalid parameter "query": 1:8: parse error', query="up{job=bmoe}",
                    http_status=400, error_type="bad_data")
    doc = fleet_document(prometheus="http://127.0.0.1:9090", selector="{job=bmoe}", window_s=300.0, error=err)
    assert doc["status"] == "bad_data" and doc["table"] is None and doc["error"]["query"] == "up{job=bmoe}"
    _golden("fleet_document_error.json", doc)
