"""The fleet screen (tui/screens/fleet.py) in a Textual pilot against a real Prometheus scraping
three real ``bmoe-run serve`` instances every second on loopback: every instance with live
numbers, sort by keys and by a header click, the ``/`` filter, the drill-down holding samples
from before the app started and Escape back, error states (bad_data with its query, an empty
result, Prometheus gone: disconnected with the last good table kept), ``--once --json`` agreeing
with what the screen draws, and a stopped instance shown down within two scrape intervals.

Every wait is on the screen's or Prometheus' state (generous overall limits bound a failure
only); the test that stops an instance runs last.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from helpers.prometheus import WAIT_S, Prometheus, need_prometheus
from helpers.serve import Serve, complete, scrape
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.fleet.table import Cell, CellState, InstanceState, sort_rows
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen
from bmoe_top.tui.widgets.fleet_table import VIEW_COLUMNS, FleetTableView, row_key, row_values, value_of
from bmoe_top.tui.widgets.grids import LayerHeatmap

S = 1.0  # the scrape interval
BMOE = '{job="bmoe"}'
SIZE = (160, 48)


@dataclass
class Fleet:
    prom: Prometheus
    serves: dict[str, Serve]
    model: Path

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.serves[name].port}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    need_prometheus()
    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)
    with ExitStack() as stack:
        serves: dict[str, Serve] = {}
        stack.callback(lambda: [s.stop() for s in serves.values()])
        # a decodes slowly (a generation lasts seconds: the screen sees it while it runs)
        serves["a"] = Serve(model, "--cache-mb", "0.5", env={"BMOE_TOKEN_DELAY_MS": "30"})
        serves["b"] = Serve(model, "--cache-mb", "0.5")
        serves["c"] = Serve(model, "--no-moe-stream")
        prom = Prometheus(tmp_path_factory.mktemp("prom"), {"bmoe": [f"127.0.0.1:{s.port}" for s in serves.values()]})
        stack.callback(prom.stop)
        yield Fleet(prom, serves, model)


def drawn(screen: FleetScreen, job: str, instance: str) -> dict[str, str]:
    """Column key -> the value line the table draws for that instance."""
    view = screen.query_one(FleetTableView)
    cells = view.get_row(row_key(job, instance))
    return {c.key: value_of(cell) for c, cell in zip(VIEW_COLUMNS, cells)}


def drawn_whole(screen: FleetScreen, job: str, instance: str) -> tuple[Any, dict[str, str]] | None:
    """(the table's row of ``instance``, :func:`drawn`) once what is drawn is that row; None before
    (the columns widen to a row at its first paint: until then its cells are cut to the headers)."""
    row = screen.state.table.row(instance) if screen.state.table is not None else None
    cells = drawn(screen, job, instance)
    return (row, cells) if row is not None and cells == {k: v.strip() for k, (v, _s) in row_values(row).items()} \
        else None


def shown_keys(screen: FleetScreen) -> list[tuple[str, str]]:
    return list(screen.query_one(FleetTableView).keys)


def row_of(screen: FleetScreen, instance: str):
    t = screen.state.table
    return None if t is None else t.row(instance)


def settle(fleet: Fleet, name: str) -> None:
    """Until Prometheus stored the instance's tokens counter as it is now, and one scrape more."""
    own = scrape(fleet.serves[name].url).get("tokens_predicted")
    fleet.prom.wait_value(f'llamacpp:tokens_predicted_total{{instance="{fleet.target(name)}"}}', own)
    fleet.prom.wait_sample_after(f'up{{instance="{fleet.target(name)}"}}', time.time())


class Generating:
    """Completions sent to one instance back to back until stopped (the screen must see one)."""

    def __init__(self, url: str, n: int = 40):
        self.stop = threading.Event()
        self.n = 0
        self.t = threading.Thread(target=self._run, args=(url, n), daemon=True)
        self.t.start()

    def _run(self, url: str, n: int) -> None:
        while not self.stop.is_set():
            assert complete(url, f"keep the fleet busy {self.n}", n).status_code == 200
            self.n += 1

    def close(self) -> None:
        self.stop.set()
        self.t.join(WAIT_S)


async def test_every_instance_shows_with_live_numbers(fleet):
    screen = FleetScreen(fleet.prom.url, BMOE, 60)
    app = BmoeTopApp(screen)
    gen = Generating(fleet.serves["a"].url)
    try:
        async with app.run_test(size=SIZE) as pilot:
            a = fleet.target("a")

            def live():
                r = row_of(screen, a)
                idle = row_of(screen, fleet.target("c"))  # a rate needs two samples: c's first may still miss one
                return r is not None and len(screen.shown) == 3 and r.cells["tok_s"].state is CellState.OK \
                    and r.cells["tok_s"].value > 0 and r.cells["requests_processing"].value == 1 \
                    and idle is not None and idle.cells["tok_s"].state is CellState.OK

            await pilot_until(pilot, live, "instance a generating, on the screen")
            await pilot.pause()
            table = screen.state.table
            assert {r.instance for r in table.rows} == {fleet.target(n) for n in "abc"}
            assert all(r.state is InstanceState.UP for r in table.rows)
            assert screen.view_state() == "live" and "● live" in screen.title_text().plain
            row, cells = await pilot_until(pilot, lambda: drawn_whole(screen, "bmoe", a), "a's row drawn whole")
            assert float(cells["tok_s"]) > 0 and cells["requests"].startswith("1/")
            # resident / budget of a cache that holds experts now; the instance without a cache
            assert row.cells["resident_mib"].value > 0 and cells["resident"].endswith(
                f"/{row.cells['budget_mib'].value:.2f}")
            c = drawn(screen, "bmoe", fleet.target("c"))
            assert c["hit_pct"] == "not exported" and c["resident"] == "not exported" and c["tok_s"] == "0.0"
            await pilot.press("r", "r", "r")  # asking for more never beats the scrape interval
            await pilot_until(pilot, lambda: screen._thread.n_refreshes >= 4, "more refreshes")
            assert np.diff(screen._thread.starts).min() >= S - 1e-3
    finally:
        gen.close()


async def test_sort_by_keys_and_header_click_and_filter(fleet):
    screen = FleetScreen(fleet.prom.url, BMOE, 60)
    app = BmoeTopApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: len(screen.shown) == 3, "three rows")
        table = screen.state.table

        def order_is(key: str, desc: bool) -> bool:
            t = screen.state.table
            return shown_keys(screen) == [r.key for r in sort_rows(t.rows, key, desc)]

        assert screen.sort == "rank" and shown_keys(screen) == [r.key for r in table.rows]  # worst first
        view = screen.query_one(FleetTableView)
        xs: list[int | None] = []

        def header_settled() -> int | None:
            """The tok/s header's x once two looks in a row agree (the columns fit the rows once drawn)."""
            xs.append(view.header_x("tok_s"))
            return xs[-1] if len(xs) > 1 and xs[-1] is not None and xs[-1] == xs[-2] else None

        x = await pilot_until(pilot, header_settled, "the tok/s header drawn") + 1
        await pilot.click(FleetTableView, offset=(x, 0))
        await pilot_until(pilot, lambda: screen.sort == "tok_s", "sorted by tok/s")
        assert screen.descending and order_is("tok_s", True)
        assert "tok/s ▼" in view.render_line(0).text
        await pilot.click(FleetTableView, offset=(x, 0))  # again: the other way
        await pilot_until(pilot, lambda: not screen.descending, "ascending")
        assert order_is("tok_s", False)
        await pilot.press("w")
        assert screen.sort == "rank" and shown_keys(screen) == [r.key for r in screen.state.table.rows]
        await pilot.press("s")  # the next column: instance, a to z
        assert screen.sort == "instance" and not screen.descending and order_is("instance", False)
        await pilot.press("i")
        assert screen.descending and order_is("instance", True)
        await pilot.press("less_than_sign")
        assert screen.sort == "rank"
        # / filter: part of b's address; Enter keeps it, Escape clears it
        port = str(fleet.serves["b"].port)
        await pilot.press("slash", *port, "enter")
        assert screen.filter_text == port and shown_keys(screen) == [("bmoe", fleet.target("b"))]
        assert "(1 shown)" in screen.title_text().plain
        await pilot_until(pilot, lambda: screen.state.n_ok >= 3, "refreshes keep the filter")
        assert shown_keys(screen) == [("bmoe", fleet.target("b"))]
        await pilot.press("escape")
        assert screen.filter_text == "" and len(shown_keys(screen)) == 3


async def test_drill_down_shows_the_history_from_before_the_app_started(fleet):
    a = fleet.serves["a"]
    complete(a.url, "History the drill-down must show", 24)
    settle(fleet, "a")
    t_start = time.time()
    screen = FleetScreen(fleet.prom.url, BMOE, 120)
    app = BmoeTopApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: len(screen.shown) == 3, "three rows")
        view = screen.query_one(FleetTableView)
        view.move_cursor(row=shown_keys(screen).index(("bmoe", fleet.target("a"))))
        await pilot.press("enter")
        drill = await pilot_until(pilot, lambda: isinstance(app.screen, FleetDrillScreen) and app.screen.model.tokens.n
                            and app.screen, "the drill-down's rows")
        run = drill.model
        n = run.tokens.n
        t = run.tokens.view("t", 0, n)
        tok = run.tokens.view("tok_s", 0, n)
        before = t < t_start
        assert t[0] < t_start - 10 * S and np.nanmax(tok[before]) > 0  # generated before the app existed
        assert run.row_unit == "interval" and np.all(np.diff(t) > 0)
        share = run.hit_matrix(n, 0)
        assert share.shape[0] == run.n_layer > 0 and np.isfinite(share[:, before]).any()
        heat = "\n".join(s.text for s in drill.query_one(LayerHeatmap).build(100, 12))
        assert "L0" in heat and "interval hit share" in heat
        assert "history from" in drill.status_text().plain and "● up" in drill.status_text().plain
        assert run.summary["tokens"] == scrape(a.url).get("tokens_predicted")  # since the runtime started
        # it keeps following: the next settled steps are appended, none twice
        await pilot_until(pilot, lambda: run.tokens.n > n, "new rows")
        t2 = run.tokens.view("t", 0, run.tokens.n)
        assert np.all(np.diff(t2) > 0)
        n_ok = screen.state.n_ok
        await pilot.press("escape")
        assert app.screen is screen
        await pilot_until(pilot, lambda: screen.state.n_ok > n_ok, "the table refreshes again")


async def test_error_states_are_shown_as_such(fleet, tmp_path):
    bad = FleetScreen(fleet.prom.url, "{job=bmoe}", 60)
    async with BmoeTopApp(bad).run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: bad.state.error is not None, "the bad_data answer")
        await pilot.pause()
        status = bad.status_text().plain
        assert bad.view_state() == "error" and "⚠ error" in bad.title_text().plain
        assert "bad_data" in status and "query: last_over_time(up{job=bmoe}[1m])" in status
    empty = FleetScreen(fleet.prom.url, '{job="no-such-job"}', 60)
    async with BmoeTopApp(empty).run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: empty.state.error is not None, "the empty answer")
        assert "empty: no series match" in empty.status_text().plain
    # a Prometheus that goes away: disconnected, the last good table stays with its age
    own = Prometheus(tmp_path / "own", {"bmoe": [fleet.target("b")]})
    screen = FleetScreen(own.url, BMOE, 60)
    try:
        async with BmoeTopApp(screen).run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: len(screen.shown) == 1, "one row")
            _row, before = await pilot_until(pilot, lambda: drawn_whole(screen, "bmoe", fleet.target("b")),
                                             "b's row drawn whole")
            own.stop()
            await pilot_until(pilot, lambda: screen.state.error is not None, "the failed refresh")
            await pilot.pause()
            assert screen.view_state() == "disconnected" and "✖ disconnected" in screen.title_text().plain
            status = screen.status_text().plain
            assert "unreachable" in status and "showing the last good table" in status
            assert drawn(screen, "bmoe", fleet.target("b")) == before  # the numbers stay
            await pilot.press("space")
            assert screen.view_state() == "paused" and "❚❚ paused" in screen.title_text().plain
    finally:
        own.stop()


async def test_once_json_agrees_with_the_screen(fleet):
    complete(fleet.serves["b"].url, "For the document", 12)
    settle(fleet, "b")
    at = round(fleet.prom.wait_sample_after(f'up{{instance="{fleet.target("b")}"}}', time.time()) - 0.5, 3)
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--prometheus", fleet.prom.url,
                        "--selector", BMOE, "--window", "1m", "--once", "--json", "--at", f"{at:.3f}"],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    doc = orjson.loads(p.stdout)
    screen = FleetScreen(fleet.prom.url, BMOE, 60, at=at)
    async with BmoeTopApp(screen).run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: screen.shown, "the table at that time")
        assert screen.view_state() == "fixed"
        assert [(r["job"], r["instance"]) for r in doc["table"]["instances"]] == shown_keys(screen)  # worst first
        for r in doc["table"]["instances"]:
            row = screen.state.table.row(r["instance"], r["job"])
            for key, c in r["cells"].items():
                cell = row.cells[key]
                assert Cell(c["value"], CellState(c["state"]), c["age_s"]) == cell, (r["instance"], key)
            assert r["flags"] == list(row.flags) and r["state"] == row.state.value
            want = {k: v.strip() for k, (v, _s) in row_values(row).items()}
            # the columns widen to the rows when they are first drawn: until that paint, cells are
            # shortened to the headers' widths
            await pilot_until(pilot, lambda r=r, want=want: drawn(screen, r["job"], r["instance"]) == want,
                              f"the row of {r['instance']} drawn whole")


async def test_stopped_instance_shows_down_within_two_scrape_intervals(fleet):
    c = fleet.serves["c"]
    target = fleet.target("c")
    screen = FleetScreen(fleet.prom.url, BMOE, 60)
    seen: list[tuple[float, InstanceState]] = []
    async with BmoeTopApp(screen).run_test(size=SIZE) as pilot:

        def state_of_c():
            t = screen.state.table
            if t is not None and (not seen or seen[-1][0] != t.at) and t.row(target) is not None:
                seen.append((t.at, t.row(target).state))
            return seen[-1][1] if seen else None

        await pilot_until(pilot, lambda: state_of_c() is InstanceState.UP, "c up on the screen")
        c.stop()
        t_exit = time.time()  # the process has exited: from here its port refuses
        await pilot_until(pilot, lambda: state_of_c() is InstanceState.DOWN, "c down on the screen")
        await pilot.pause()
        cells = drawn(screen, "bmoe", target)
        assert cells["instance"].startswith("✖") and cells["state"].startswith("down")
        assert shown_keys(screen)[0] == ("bmoe", target)  # worst first
        row = screen.state.table.row(target)
        assert row.cells["tok_s"].value is not None  # its last good values stay, with their age
        assert cells["hit_pct"] == "not exported"  # what it exported while up still tells (no cache)
        assert "down (last up" in screen.status_text().plain
    # Prometheus' own timestamps: the first failed scrape within two intervals of the exit, and
    # every table the screen drew from that sample on says down
    [(_, pts)] = fleet.prom.raw(f'up{{instance="{target}"}}[2m]', time.time())
    last_up = max(t for t, v in pts if v == 1)
    first_down = min(t for t, v in pts if v == 0 and t > last_up)
    assert first_down - last_up <= 2 * S + 1e-3 and first_down <= t_exit + 2 * S
    assert all(state is InstanceState.DOWN for at, state in seen if at >= first_down)
    assert all(state is InstanceState.UP for at, state in seen if at < last_up)


@pytest.mark.parametrize("argv, why", [
    (["--prometheus", "not a url"], "Prometheus URL"),
    (["--prometheus", "http://127.0.0.1:9", "--window", "0"], "--window must be > 0"),
    (["--prometheus", "http://127.0.0.1:9", "--window", "five"], "not a Prometheus duration"),
    (["--prometheus", "http://127.0.0.1:9", "--once"], "--once needs --json"),
    (["--prometheus", "http://127.0.0.1:9", "--instance", "x", "--label", "west"], "--label wants NAME=VALUE"),
])
def test_cli_usage_errors_are_one_line(argv, why):
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", *argv], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    err = p.stderr.decode()
    assert p.returncode == 2 and why in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
