"""The fleet past one Prometheus: two real Prometheus servers, each with its own
``external_labels`` (``prometheus="east"`` / ``"west"``), scrape real ``bmoe-run serve``
instances every second and ``remote_write`` into one real VictoriaMetrics (single node), which
bmoe-top reads through the same query API (docs/fleet.md "Several Prometheus servers").

East and west each hold an instance named ``node:8080`` (two different runtimes: a 0.5 MiB and a
1 MiB cache): they must stay two rows, each with its own numbers, and each drill-down must
read its own runtime's counters and the history from before the fleet code ran. East also
scrapes a runtime without a cache under its address. VictoriaMetrics lists no scrape targets: the
scrape interval is estimated from the stored samples. Every wait is on what the store holds.
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import orjson
import pytest
from helpers.prometheus import Prometheus, VictoriaMetrics, need_prometheus, need_victoria, wait_table
from helpers.serve import Serve, complete, scrape
from helpers.waits import pilot_until

from bmoe_top.parsers.prom import MIB
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.fleet.session import FleetSession
from bmoe_top.tui.fleet.table import CellState, InstanceState
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen
from bmoe_top.tui.sources.prometheus import PrometheusClient
from bmoe_top.tui.widgets.fleet_table import FleetTableView

BMOE = '{job="bmoe"}'
NAME = "node:8080"  # the instance name both Prometheus servers give their runtime
EAST = {"prometheus": "east"}
WEST = {"prometheus": "west"}


@dataclass
class Fleet:
    vm: VictoriaMetrics
    east: Prometheus
    west: Prometheus
    serves: dict[str, Serve]  # "east", "west" (both named node:8080), "plain" (east, no cache)

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.serves['plain'].port}"

    def tokens(self, side: dict[str, str]) -> str:
        return f'llamacpp:tokens_predicted_total{{instance="{NAME}", prometheus="{side["prometheus"]}"}}'


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    need_prometheus()
    need_victoria()
    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)
    with ExitStack() as stack:
        vm = VictoriaMetrics(tmp_path_factory.mktemp("vm"))
        stack.callback(vm.stop)  # stopped last: the Prometheus servers flush into it as they stop
        serves: dict[str, Serve] = {}
        stack.callback(lambda: [s.stop() for s in serves.values()])
        serves["east"] = Serve(model, "--cache-mb", "0.5")
        serves["west"] = Serve(model, "--cache-mb", "1")
        serves["plain"] = Serve(model, "--no-moe-stream")
        east_t, west_t, plain_t = (f"127.0.0.1:{serves[k].port}" for k in ("east", "west", "plain"))
        east = Prometheus(tmp_path_factory.mktemp("east"), {"bmoe": [east_t, plain_t]}, external_labels=EAST,
                          remote_write=vm.write_url, target_labels={east_t: {"instance": NAME}})
        stack.callback(east.stop)
        west = Prometheus(tmp_path_factory.mktemp("west"), {"bmoe": [west_t]}, external_labels=WEST,
                          remote_write=vm.write_url, target_labels={west_t: {"instance": NAME}})
        stack.callback(west.stop)
        # every target stored for a while (the history the drill-downs must show, and the samples
        # the scrape interval is estimated from)
        vm.wait_for(f"count_over_time(up{BMOE}[15s]) >= 12", lambda r: len(r) == 3, "15 s of all three targets")
        yield Fleet(vm, east, west, serves)


@pytest.fixture
def client(fleet):
    c = PrometheusClient(fleet.vm.url, timeout=30)
    yield c
    c.close()



def stored(fleet: Fleet, side: dict[str, str], name: str) -> float:
    """Until the store holds the runtime's tokens counter as it is now, and one scrape more; the
    time of that scrape."""
    own = scrape(fleet.serves[name].url).get("tokens_predicted")
    fleet.vm.wait_value(fleet.tokens(side), own)
    sel = f'up{{instance="{NAME}", prometheus="{side["prometheus"]}"}}'
    return fleet.vm.wait_sample_after(sel, time.time())


def test_two_prometheus_servers_in_one_store_stay_apart(fleet, client):
    complete(fleet.serves["east"].url, "Only east generates", 24)
    stored(fleet, EAST, "east")
    session = FleetSession(client, selector=BMOE, window_s=60)
    table = wait_table(session, lambda t: len(t.rows) == 3 and all(r.state is InstanceState.UP for r in t.rows)
                       and t.row(NAME, labels=EAST).cells["tok_s"].value, "three rows up, east generating")
    assert table.by == ("job", "instance", "prometheus")
    assert table.scrape_interval_s == 1.0  # no targets list in the store: estimated from its samples
    east, west = table.row(NAME, labels=EAST), table.row(NAME, labels=WEST)
    assert east.key == ("bmoe", NAME, "east") and west.key == ("bmoe", NAME, "west")
    # each row is its own runtime: the budgets differ, each exactly its own
    for row, name in ((east, "east"), (west, "west")):
        own = scrape(fleet.serves[name].url)
        assert row.cells["budget_mib"].value == own.get("cache_bytes") / MIB, name
        assert row.cells["budget_experts"].value == own.get("slots"), name
    assert east.cells["budget_mib"].value != west.cells["budget_mib"].value
    assert east.cells["tok_s"].value > 0 and west.cells["tok_s"].value == 0.0  # only east generated
    plain = table.row(fleet.plain)
    assert plain.labels == EAST and plain.cells["hit_pct"].state is CellState.NOT_EXPORTED
    # the whole command: the same three rows, each with its labels
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--prometheus", fleet.vm.url,
                        "--selector", BMOE, "--window", "1m", "--once", "--json"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    doc = orjson.loads(p.stdout)["table"]
    assert doc["by"] == ["job", "instance", "prometheus"] and doc["scrape_interval_s"] == 1.0
    assert sorted((r["instance"], r["labels"]["prometheus"]) for r in doc["instances"]) == [
        (fleet.plain, "east"), (NAME, "east"), (NAME, "west")]


def test_each_side_drills_down_to_its_own_runtime_with_history(fleet, client):
    complete(fleet.serves["west"].url, "West generates too", 16)
    at = stored(fleet, WEST, "west")
    t_start = time.time()
    session = FleetSession(client, selector=BMOE, window_s=120)
    for side, name in ((WEST, "west"), (EAST, "east")):
        own = scrape(fleet.serves[name].url)
        d = session.drill(NAME, labels=side, at=at)
        assert d.labels == side and d.job == "bmoe"
        for k in ("tokens_predicted", "prompt_tokens", "hits", "misses"):  # counters since start: its own
            assert d.totals[k] == own.get(k), (name, k)
        assert d.totals["wall_s"] == pytest.approx(own.get("wall_s"), rel=1e-11)  # stored to 12 digits
        assert d.first_t is not None and d.first_t < t_start - 10  # stored before this code ran
        assert d.layers == sorted(own.layers["layer_hits"])
        tok = d.series["tok_s"]
        assert np.nanmax(tok) > 0, name
        assert not d.errors, d.errors
    # without its labels, an instance name held by both is the first target by its labels: east
    assert session.drill(NAME, at=at).labels == EAST
    # the command picks a side with --label
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--prometheus", fleet.vm.url,
                        "--selector", BMOE, "--window", "2m", "--once", "--json", "--instance", NAME,
                        "--label", "prometheus=west", "--at", f"{at:.3f}"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    drill = orjson.loads(p.stdout)["drill"]
    assert drill["labels"] == WEST and drill["totals"]["tokens_predicted"] == \
        scrape(fleet.serves["west"].url).get("tokens_predicted")


async def test_screen_tells_the_sides_apart_and_drills_into_west(fleet):
    complete(fleet.serves["west"].url, "West before the screen", 16)
    stored(fleet, WEST, "west")
    own = scrape(fleet.serves["west"].url)
    t_start = time.time()
    screen = FleetScreen(fleet.vm.url, BMOE, 120)
    app = BmoeTopApp(screen)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_until(pilot, lambda: len(screen.shown) == 3, "three rows")
        view = screen.query_one(FleetTableView)

        def jobs() -> list[str]:
            return sorted(view.get_row("\x00".join(r.key))[1].plain.split("\n")[0].strip() for r in screen.shown)

        # the columns widen to the rows when they are first drawn: until that paint, cells are
        # shortened to the headers' widths ("b…t")
        want = ["bmoe prometheus=east", "bmoe prometheus=east", "bmoe prometheus=west"]
        await pilot_until(pilot, lambda: jobs() == want, f"the job cells drawn whole: {want}")
        view.move_cursor(row=view.keys.index(("bmoe", NAME, "west")))
        await pilot.press("enter")
        drill = await pilot_until(pilot, lambda: isinstance(app.screen, FleetDrillScreen) and app.screen.model.tokens.n
                                  and app.screen, "west's drill-down")
        assert drill.labels == WEST and "prometheus=west" in drill.source_title
        run = drill.model
        t = run.tokens.view("t", 0, run.tokens.n)
        assert t[0] < t_start - 10  # the history from before the app started
        assert run.summary["tokens"] == own.get("tokens_predicted")  # west's own counter, not east's
        await pilot.press("escape")
        assert app.screen is screen
