"""Snapshots (pytest-textual-snapshot) of the fleet screen and its drill-down at a narrow (80x24)
and a wide (160x48) size, on deterministic data: a real Prometheus serving TSDB blocks that
``promtool`` made from a generated fleet (tests/helpers/fleet_data.py: a healthy instance, a slow
one, one down for the last minute, a stock llama-server, a label value with an escape sequence),
evaluated at the fixed time the data ends (``--at``). Also on that data: ``bmoe-top fleet --once
--json`` (the real command) agrees cell by cell with what the screen draws, and label values
reach the terminal inert.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/fleet/test_fleet_snapshots.py --snapshot-update
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import orjson
import pytest
from helpers.fleet_data import AT, SNAPSHOT_FLEET, snapshot_blocks
from helpers.prometheus import PROMTOOL, WAIT_S, Prometheus, need_prometheus
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.fleet.table import Cell, CellState
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen
from bmoe_top.tui.widgets.fleet_table import VIEW_COLUMNS, FleetTableView, row_key, row_values, value_of

SIZES = {"narrow": (80, 24), "wide": (160, 48)}
#: The snapshots' sizes: the smallest and largest supported and one between.
SNAP_SIZES = {"narrow": (80, 24), "mid": (120, 40), "wide": (200, 60)}
WINDOW_S = 300.0


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    need_prometheus()
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian's prometheus package ships it)")
    tmp = tmp_path_factory.mktemp("fleet-blocks")
    data = snapshot_blocks(PROMTOOL, tmp)
    p = Prometheus(tmp / "prom", {}, data=data, wait_up=False)
    try:
        end = time.monotonic() + WAIT_S
        while not (r := p.query("count(up)", at=AT)) or r[0][1] != len(SNAPSHOT_FLEET):
            assert time.monotonic() < end, "the blocks did not load"
            time.sleep(0.1)
        yield p
    finally:
        p.stop()


def table_screen(prom, **kw) -> FleetScreen:
    return FleetScreen(prom.url, "", WINDOW_S, at=AT, label="prometheus (generated fleet)", **kw)



@pytest.fixture(params=["colour", "no-color"])
def colours(request, monkeypatch) -> str:
    """Each screen in colour and under NO_COLOR (no-color.org: the environment variable, read when
    the app is made)."""
    if request.param == "no-color":
        monkeypatch.setenv("NO_COLOR", "1")
    return str(request.param)

@pytest.mark.parametrize("size", SNAP_SIZES)
def test_table(snap_compare, colours, prom, size):
    screen = table_screen(prom)

    async def shown(pilot):
        await pilot_until(pilot, lambda: screen.n_applied, "the table")
        await pilot.pause(0.2)

    assert snap_compare(BmoeTopApp(screen), terminal_size=SNAP_SIZES[size], run_before=shown)


@pytest.mark.parametrize("size", SNAP_SIZES)
def test_drill_down(snap_compare, colours, prom, size):
    screen = table_screen(prom, drill=("bmoe", "10.0.0.2:8080", {}))  # the slow one

    async def drilled(pilot):
        d = await pilot_until(pilot, lambda: isinstance(pilot.app.screen, FleetDrillScreen) and pilot.app.screen.last
                        and pilot.app.screen.model.tokens.n and pilot.app.screen, "the drill-down")
        await pilot.pause(0.2)
        d.refresh_views(force=True)
        await pilot.pause(0.2)

    assert snap_compare(BmoeTopApp(screen), terminal_size=SNAP_SIZES[size], run_before=drilled)


async def test_once_json_agrees_with_the_screen(prom):
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--prometheus", prom.url,
                        "--window", "5m", "--once", "--json", "--at", str(AT)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    doc = orjson.loads(p.stdout)
    screen = table_screen(prom)
    async with BmoeTopApp(screen).run_test(size=SIZES["wide"]) as pilot:
        await pilot_until(pilot, lambda: screen.n_applied, "the table")
        view = screen.query_one(FleetTableView)
        assert [(r["job"], r["instance"]) for r in doc["table"]["instances"]] == view.keys
        assert doc["table"]["worst"]["instance"] == "10.0.0.3:8080"  # down: first
        for r in doc["table"]["instances"]:
            row = screen.state.table.row(r["instance"], r["job"])
            for key, c in r["cells"].items():
                assert Cell(c["value"], CellState(c["state"]), c["age_s"]) == row.cells[key], (r["instance"], key)
            want = [row_values(row)[c.key][0].strip() for c in VIEW_COLUMNS]
            # the columns widen to the rows when they are first drawn: until that paint, cells are
            # shortened to the headers' widths
            await pilot_until(pilot, lambda r=r, want=want: [value_of(cell) for cell in view.get_row(
                row_key(r["job"], r["instance"]))] == want, f"the row of {r['instance']} drawn whole")
        stock = dict(zip((c.key for c in VIEW_COLUMNS), map(value_of, view.get_row(row_key("llama", "10.0.0.9:8080")))))
        assert stock["hit_pct"] == stock["flash_ms"] == stock["resident"] == "not exported"


async def test_label_values_are_drawn_inert(prom):
    screen = table_screen(prom)
    async with BmoeTopApp(screen).run_test(size=SIZES["wide"]) as pilot:
        await pilot_until(pilot, lambda: screen.n_applied, "the table")
        view = screen.query_one(FleetTableView)
        evil = "edge\x1b[31m-7:8080"
        # the columns widen to the rows when they are first drawn: until that paint, the cell is
        # shortened to its header's width
        def cell() -> str:
            return view.get_row(row_key("bmoe", evil))[0].plain

        await pilot_until(pilot, lambda: "…" not in cell(), "the row drawn whole")
        drawn = cell()
        assert "\x1b" not in drawn and "edge␛[31m-7:8080" in drawn
        await pilot.press("slash", "e", "d", "g", "e", "enter")
        await pilot_until(pilot, lambda: view.keys == [("bmoe", evil)], "the filtered table")
        assert "\x1b" not in screen.title_text().plain


def test_a_fleet_past_the_detail_rows_reads_the_same_numbers(prom):
    """Read as a large fleet (instant queries for every row, range queries for the rows in
    detail only), the generated fleet's table has the same rows in the same order and the same
    cells as read whole in detail; the rows outside the detail have no sparklines."""
    from bmoe_top.tui.fleet.session import FleetSession
    from bmoe_top.tui.present.fleet import fleet_document
    from bmoe_top.tui.sources.prometheus import PrometheusClient

    with PrometheusClient(prom.url, timeout=60) as client:
        whole = FleetSession(client, window_s=WINDOW_S).refresh(at=AT)
        large = FleetSession(client, window_s=WINDOW_S, detail_rows=2).refresh(at=AT)
        picked = FleetSession(client, window_s=WINDOW_S, detail_rows=2).refresh(
            at=AT, detail=lambda rows: [r.key for r in rows if r.job == "llama"])
    assert len(whole.detail) == len(whole.rows) == len(SNAPSHOT_FLEET)
    assert [r.key for r in large.rows] == [r.key for r in whole.rows]
    assert large.detail == {r.key for r in whole.rows[:2]}  # worst first: the down one and the next
    assert large.n_queries > whole.n_queries and "exported" in large.queries  # the stock server lacks columns
    for w, g in zip(whole.rows, large.rows):
        assert (g.state, g.flags, g.restarts) == (w.state, w.flags, w.restarts), w.instance
        if g.key in large.detail:
            assert g.cells == w.cells and g.last_up_age_s == w.last_up_age_s, w.instance
            assert all(np.array_equal(g.spark[k], w.spark[k], equal_nan=True) for k in w.spark)
        else:
            assert g.spark == {}
            for k, cell in w.cells.items():  # an up row's value now is the same number; no earlier one
                stale = cell.state is CellState.STALE and g.cells[k].state is CellState.NO_DATA
                assert g.cells[k] == cell or stale, (w.instance, k)
    assert picked.detail == {("llama", "10.0.0.9:8080")} and picked.row("10.0.0.9:8080").spark
    doc = fleet_document(prometheus=prom.url, selector="", window_s=WINDOW_S, table=large)["table"]
    assert doc["detail_rows"] == 2 and [bool(r["spark"]) for r in doc["instances"]] == [True, True, False, False, False]
    assert doc["instances"][2]["cells"] == {k: {"value": c.value, "state": c.state.value, "age_s": c.age_s}
                                            for k, c in large.rows[2].cells.items()}


async def test_the_title_leaves_out_whole_parts_never_cuts_one(prom):
    screen = table_screen(prom)
    async with BmoeTopApp(screen).run_test(size=SIZES["narrow"]) as pilot:
        await pilot_until(pilot, lambda: screen.n_applied, "the table")
        whole = screen.title_text().plain
        assert "window 5m" in whole and whole.endswith("sorted worst first")
        for width in (78, 60):
            fit = screen.title_text(width).plain
            assert len(fit) <= width and fit.startswith("bmoe-top  fleet") and "◆ fixed time" in fit, width
            assert all(part in whole for part in fit.split("  ") if part), fit  # each part whole
        tight = screen.title_text(40).plain  # what is read, shortened with a rule
        assert len(tight) <= 40 and "…" in tight and "◆ fixed time" in tight
        assert screen.title_text(110).plain.endswith("sorted worst first")  # the sort goes after the rules
        assert screen.title_text(78).plain.endswith("5 instances")
