"""The fleet through a real Prometheus scraping real ``bmoe-run serve`` instances (and two
runtimes that are not ours) every second on loopback.

Completions are driven into the instances, the tests wait on what Prometheus stored (its API,
never a sleep), and the fleet's numbers are checked against each instance's own ``/metrics``
counters: ratios (hit %, ms per token) exactly, rates within the bounds of Prometheus' rate
window (``rate()`` extrapolates the increase between the window's first and last sample to the
window: ``n / range <= rate <= n / sampled``). Stopping an instance turns its row down, a
restarted instance's counter reset gives no negative rate, and the drill-down reaches back
before the fleet code started. The tests that stop or restart an instance run last.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.exporters import StrataMoeExporter
from helpers.llama_server import DEMO_MODEL, LlamaServer, llama_server_binary
from helpers.prometheus import WAIT_S, Prometheus, free_port, need_prometheus, wait_table
from helpers.serve import Serve, complete, scrape, scrape_value

from bmoe_top.parsers.prom import MIB
from bmoe_top.tui.fleet.queries import COLUMNS
from bmoe_top.tui.fleet.session import FleetSession
from bmoe_top.tui.fleet.table import CellState, FleetTable, InstanceState
from bmoe_top.tui.headless import exit_code, fleet_once
from bmoe_top.tui.sources.prometheus import PrometheusClient

S = 1.0  # the scrape interval of the generated config
BMOE = '{job="bmoe"}'


@dataclass
class Fleet:
    prom: Prometheus
    serves: dict[str, Serve]  # "a", "b" (cache), "c" (no cache)
    stock: LlamaServer | None  # a real stock llama-server --metrics (None: it cannot be built here)
    stock_skip: str
    strata: StrataMoeExporter
    model: Path

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.serves[name].port}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def fleet(tiny, tmp_path_factory):
    need_prometheus()
    with ExitStack() as stack:
        serves: dict[str, Serve] = {}
        stack.callback(lambda: [s.stop() for s in serves.values()])  # a restarted one included
        for name, args in (("a", ("--cache-mb", "0.5")), ("b", ("--cache-mb", "0.5")), ("c", ("--no-moe-stream",))):
            serves[name] = Serve(tiny, *args)
        stock: LlamaServer | None = None
        why = ""
        try:
            stock = LlamaServer(llama_server_binary(), DEMO_MODEL, "--metrics")
            stack.callback(stock.stop)
        except pytest.skip.Exception as e:  # no compiler to build it: only its test skips
            why = str(e)
        strata = StrataMoeExporter(n_layer=4)
        stack.callback(strata.close)
        foreign = [strata.target] + ([f"127.0.0.1:{stock.port}"] if stock is not None else [])
        prom = Prometheus(tmp_path_factory.mktemp("prom"),
                          {"bmoe": [f"127.0.0.1:{s.port}" for s in serves.values()], "foreign": foreign})
        stack.callback(prom.stop)
        yield Fleet(prom, serves, stock, why, strata, tiny)


@pytest.fixture
def client(fleet):
    c = PrometheusClient(fleet.prom.url, timeout=30)
    yield c
    c.close()



def settle(fleet: Fleet, name: str, own_tokens: float) -> float:
    """Wait until Prometheus stored ``own_tokens`` for instance ``name`` and one more scrape
    after that; the time of that scrape."""
    sel = f'llamacpp:tokens_predicted_total{{instance="{fleet.target(name)}"}}'
    fleet.prom.wait_value(sel, own_tokens)
    return fleet.prom.wait_sample_after(f'up{{instance="{fleet.target(name)}"}}', time.time())


def test_every_instance_has_a_row_and_says_what_it_exports(fleet, client):
    session = FleetSession(client, selector=BMOE, window_s=60)
    # right after the first scrapes a rate has no value yet (it needs two samples in its range): no_data
    table = wait_table(session, lambda t: len(t.rows) == 3 and all(
        r.state is InstanceState.UP and r.cells["tok_s"].state is CellState.OK for r in t.rows),
        "three instances up, with rates")
    assert table.scrape_interval_s == S
    assert table.rate_interval_s >= 4 * S and table.rate_interval_s >= table.step_s + S
    first = FleetSession(client, selector=BMOE, window_s=60)
    # up, targets, up range, 14 columns, restarts, exported series, alerts; then the interval is known
    assert first.refresh().n_queries == 20 and first.refresh().n_queries == 19
    assert {r.instance for r in table.rows} == {fleet.target(n) for n in "abc"}
    own_a = scrape(fleet.serves["a"].url)
    a = table.row(fleet.target("a"))
    assert a.cells["budget_experts"].value == own_a.get("slots")
    assert a.cells["budget_mib"].value == own_a.get("cache_bytes") / MIB
    assert a.cells["requests_deferred"].value == 0 and a.cells["requests_deferred"].state is CellState.OK
    # what the cache holds now (no request in flight: the gauge stands still)
    assert a.cells["resident_experts"].value == scrape_value(fleet.serves["a"].url, "llamacpp:moe_cache_resident")
    assert a.cells["resident_mib"].value == \
        scrape_value(fleet.serves["a"].url, "llamacpp:moe_cache_resident_bytes") / MIB
    c = table.row(fleet.target("c"))  # --no-moe-stream: no llamacpp:moe_cache_* series
    for k in ("hit_pct", "read_mib_s", "resident_experts", "resident_mib", "budget_experts", "budget_mib"):
        assert c.cells[k].state is CellState.NOT_EXPORTED and c.cells[k].value is None, k
    assert c.cells["tok_s"].value == 0.0


def test_refresher_never_refreshes_faster_than_the_scrape_interval(fleet, client):
    import threading

    session = FleetSession(client, selector=BMOE, window_s=30)
    tables: list[FleetTable] = []
    errors: list = []
    got = threading.Event()

    def on_result(t: FleetTable) -> None:
        tables.append(t)
        if len(tables) >= 3:
            got.set()

    th = session.refresher(on_result, errors.append, every=0.0)
    th.start()
    try:
        assert got.wait(WAIT_S)
    finally:
        th.stop()
        th.join(WAIT_S)
    assert not errors and all(len(t.rows) == 3 for t in tables)
    assert np.diff(th.starts).min() >= S - 1e-3
    assert all(b.at - a.at >= S - 1e-3 for a, b in zip(tables, tables[1:]))


def test_rates_and_ratios_agree_with_the_instances_own_counters(fleet, client):
    a = fleet.serves["a"]
    for i in range(3):  # warm-up: each counter starts the window above what the burst adds
        complete(a.url, f"Warm the cache {i}", 24)
    tok_sel = f'llamacpp:tokens_predicted_total{{instance="{fleet.target("a")}"}}'
    r_min = 8 * S
    warm = ("hits", "misses", "timed_tokens", "wall_s")
    for _ in range(5):  # a burst slower than the whole warm-up (wall_s, on a loaded machine) warms it further
        s0 = scrape(a.url)
        settle(fleet, "a", s0.get("tokens_predicted"))
        [(_, pts)] = fleet.prom.raw(f"{tok_sel}[1m]", time.time())
        t_first_c0 = min(t for t, v in pts if v == s0.get("tokens_predicted"))
        # r_min of stored samples at the pre-burst value, so that the window below holds no older one
        fleet.prom.wait_sample_after(f'up{{instance="{fleet.target("a")}"}}', t_first_c0 + r_min)
        b0 = time.time()
        r = complete(a.url, "The burst that the fleet must see", 24)
        b1 = time.time()
        assert r.status_code == 200
        s1 = scrape(a.url)
        d = {k: s1.get(k) - s0.get(k) for k in ("tokens_predicted", "prompt_tokens", "hits", "misses",
                                                 "upload_bytes", "timed_tokens", "wall_s", "compute_s", "mgmt_s")}
        if all(s0.get(k) >= d[k] for k in warm):
            break
    assert d["tokens_predicted"] == 24 and d["hits"] + d["misses"] > 0
    for k in warm:
        assert s0.get(k) >= d[k], f"warm-up left {k} below the burst's increase"
    at = b1 + 2 * S
    settle(fleet, "a", s1.get("tokens_predicted"))
    fleet.prom.wait_sample_after(f'up{{instance="{fleet.target("a")}"}}', at)
    # the rate window: from before the burst (at least one sample at the pre-burst value, none
    # older than the first of them) to after it
    rng = math.ceil(max(r_min, at - b0 + 3 * S) * 1000) / 1000
    assert at - rng >= t_first_c0
    session = FleetSession(client, selector=BMOE, window_s=4 * (rng - S), points=5)
    table = session.refresh(at=at)
    assert table.rate_interval_s == rng and table.at == at
    row = table.row(fleet.target("a"))
    assert row.state is InstanceState.UP

    [(_, pts)] = fleet.prom.raw(f"{tok_sel}[{int(rng * 1000)}ms]", at)
    assert pts[0][1] == s0.get("tokens_predicted") and pts[-1][1] == s1.get("tokens_predicted")
    sampled = round(pts[-1][0] - pts[0][0], 3)  # Prometheus keeps milliseconds; epoch floats are coarser

    def within(key: str, n: float, scale: float = 1.0) -> None:
        v = row.cells[key].value
        assert row.cells[key].state is CellState.OK, key
        assert n / rng / scale * (1 - 1e-9) <= v <= n / sampled / scale * (1 + 1e-9), (key, v, n, rng, sampled)

    within("tok_s", d["tokens_predicted"])
    within("prompt_tok_s", d["prompt_tokens"])
    within("read_mib_s", d["upload_bytes"], MIB)
    # ratios of counters scraped together: the window's extrapolation cancels, exact
    cells = row.cells
    assert cells["hit_pct"].value == pytest.approx(100 * d["hits"] / (d["hits"] + d["misses"]), rel=1e-9)
    assert cells["wall_ms"].value == pytest.approx(1000 * d["wall_s"] / d["timed_tokens"], rel=1e-9)
    assert cells["compute_ms"].value == pytest.approx(1000 * d["compute_s"] / d["timed_tokens"], rel=1e-9)
    assert cells["mgmt_ms"].value == pytest.approx(1000 * d["mgmt_s"] / d["timed_tokens"], rel=1e-9)
    flash = 1000 * (d["wall_s"] - d["compute_s"] - d["mgmt_s"]) / d["timed_tokens"]
    assert cells["flash_ms"].value == pytest.approx(max(flash, 0.0), rel=1e-6, abs=1e-9)
    assert cells["stall_share"].value == pytest.approx(100 * cells["flash_ms"].value / cells["wall_ms"].value)
    # wall = compute + flash wait + mgmt
    assert cells["wall_ms"].value == pytest.approx(
        cells["compute_ms"].value + cells["flash_ms"].value + cells["mgmt_ms"].value, rel=1e-9)
    # an instance nobody sent anything: a real 0 tok/s, and no hit % (no lookups), never 0 %
    idle = table.row(fleet.target("c"))
    assert idle.cells["tok_s"].value == 0.0
    assert table.row(fleet.target("b")).cells["hit_pct"].state in (CellState.UNDEFINED, CellState.OK)


def test_drill_down_reaches_back_before_the_fleet_code_started(fleet):
    a = fleet.serves["a"]
    complete(a.url, "History the drill-down must show", 16)
    own = scrape(a.url)
    settle(fleet, "a", own.get("tokens_predicted"))
    t_start = time.time()
    doc = fleet_once(fleet.prom.url, selector=BMOE, window_s=120, instance=fleet.target("a"))
    assert exit_code(doc) == 0, doc.get("error") or doc.get("drill_error")
    drill = doc["drill"]
    t = np.array(drill["t"])
    tok = np.array([np.nan if v is None else v for v in drill["series"]["tok_s"]])
    assert drill["first_t"] < t_start - 10 * S
    before = t < t_start
    assert np.nanmax(tok[before]) > 0  # generation seen by Prometheus before this code ran
    assert drill["step_s"] == S and len(t) <= 2000
    # the heatmap: one row per MoE layer the instance exports, hit % where it had lookups
    assert drill["layers"] == sorted(own.layers["layer_hits"])
    pct = np.array([[np.nan if v is None else v for v in row] for row in drill["layer_hit_pct"]])
    assert pct.shape == (len(drill["layers"]), len(t))
    assert np.isfinite(pct[:, before]).any() and np.nanmin(pct) >= 0 and np.nanmax(pct) <= 100
    # counters since start: exactly the instance's own
    for k in ("tokens_predicted", "prompt_tokens", "hits", "misses", "upload_bytes", "wall_s"):
        assert drill["totals"][k] == own.get(k), k
    # the flash terms apart (serial: the wait is io, no stall), so a breakdown knows its mode
    io = np.array([np.nan if v is None else v for v in drill["series"]["io_ms"]])
    stall = np.array([np.nan if v is None else v for v in drill["series"]["stall_ms"]])
    assert np.nanmax(io[before]) > 0 and np.nanmax(stall) == 0
    # now: aligned (a screen's successive drills share their grid points): the grid ends on a step multiple
    c = PrometheusClient(fleet.prom.url, timeout=30)
    try:
        session = FleetSession(c, selector=BMOE, window_s=120)
        d1, d2 = session.drill(fleet.target("a")), session.drill(fleet.target("a"))
    finally:
        c.close()
    for d in (d1, d2):
        assert d.t[-1] == d.at and d.at == pytest.approx(round(d.at / d.step_s) * d.step_s, abs=1e-6)
    assert np.isin(d2.t, d1.t).sum() >= d1.t.size - 1 - (d2.at - d1.at) / d1.step_s
    assert drill["totals"]["swaps"] == own.get("swaps")
    assert not drill["errors"]


def stored_jump(fleet: Fleet, target: str, value: float) -> float:
    """Wait until Prometheus stored ``value`` of ``target``'s tokens counter and one scrape more;
    the time of the first sample with it plus one interval (a rate window ending there holds the
    sample before the jump and the jump)."""
    sel = f'llamacpp:tokens_predicted_total{{instance="{target}"}}'
    fleet.prom.wait_value(sel, value)
    [(_, pts)] = fleet.prom.raw(f"{sel}[1m]", time.time())
    t_jump = min(t for t, v in pts if v == value)
    fleet.prom.wait_sample_after(f'up{{instance="{target}"}}', t_jump + S)
    return t_jump + S


def test_extended_strata_moe(fleet, client):
    strata = fleet.strata
    strata.generate(50, hits=60, misses=20, seconds=0.5)
    at = stored_jump(fleet, strata.target, strata.values["llamacpp:tokens_predicted_total"])
    session = FleetSession(client, selector='{job="foreign"}', window_s=60)
    sm = session.refresh(at=at).row(strata.target)
    assert sm.state is InstanceState.UP and sm.cells["tok_s"].value > 0
    assert sm.cells["wall_ms"].value == pytest.approx(1000 * 0.5 / 50)  # llama-server's own generation time
    assert sm.cells["hit_pct"].value == pytest.approx(75.0)
    assert sm.cells["budget_experts"].state is CellState.OK
    for k in ("flash_ms", "compute_ms", "mgmt_ms", "stall_share", "resident_experts"):  # no bmoe:* series
        assert sm.cells[k].state is CellState.NOT_EXPORTED, k
    drill = session.drill(strata.target, at=at)
    assert drill.layers == [0, 1, 2, 3]
    assert np.allclose(drill.layer_hit_pct[:, -1], 75.0)
    assert drill.totals["hits"] == 60 and drill.totals["timed_tokens"] is None
    assert "flash_ms" in drill.not_exported


def test_stock_llama_server(fleet, client):
    if fleet.stock is None:
        pytest.skip(fleet.stock_skip)
    ls = fleet.stock
    target = f"127.0.0.1:{ls.port}"
    s0 = scrape(ls.url)
    assert s0.get("tokens_predicted") == 0  # its first request: every counter starts the window at 0
    assert complete(ls.url, "def fibonacci(n):", 16).status_code == 200
    t0 = time.monotonic()
    while (s1 := scrape(ls.url)).get("tokens_predicted") == 0 and time.monotonic() - t0 < WAIT_S:
        time.sleep(0.05)
    n = s1.get("tokens_predicted")
    assert n > 0
    at = stored_jump(fleet, target, n)
    session = FleetSession(client, selector='{job="foreign"}', window_s=60)
    st = session.refresh(at=at).row(target)
    assert st.state is InstanceState.UP and st.cells["tok_s"].value > 0
    # its own generation time per token (both counters jumped together, from 0: exact)
    assert st.cells["wall_ms"].value == pytest.approx(1000 * s1.get("tokens_predicted_seconds") / n, rel=1e-6)
    for k in ("hit_pct", "read_mib_s", "budget_experts", "budget_mib", "flash_ms", "compute_ms", "stall_share"):
        assert st.cells[k].state is CellState.NOT_EXPORTED and st.cells[k].value is None, k
    assert st.cells["requests_processing"].value == 0
    d = session.drill(target, at=at)
    assert d.layers == [] and d.layer_hit_pct.shape == (0, d.t.size)
    assert d.totals["tokens_predicted"] == n and d.totals["hits"] is None
    assert "hit_pct" in d.not_exported


def test_grafana_table_queries_give_the_fleet_table_numbers(fleet, client):
    """The dashboard's instances table, its variables filled in, evaluated by the same
    Prometheus at the same time: the same value in every cell the fleet table has."""
    from bmoe_top.tui.fleet.grafana import dashboard
    from bmoe_top.tui.sources.prometheus import format_duration

    complete(fleet.serves["a"].url, "For the dashboard", 12)
    at = fleet.prom.wait_sample_after(f'up{{instance="{fleet.target("a")}"}}', time.time() + 2 * S)
    table = FleetSession(client, selector=BMOE, window_s=60).refresh(at=at)
    panel = next(p for p in dashboard()["panels"] if p["type"] == "table")
    keys = ["up", *(c.key for c in COLUMNS), "stall_share"]
    assert len(panel["targets"]) == len(keys)
    n_checked = 0
    for key, target in zip(keys, panel["targets"]):
        expr = (target["expr"].replace("$job", "bmoe").replace("$instance", ".+")
                .replace("$__rate_interval", format_duration(table.rate_interval_s)))
        got = {(m["job"], m["instance"]): v for m, v, _t in fleet.prom.query(expr, at=at)}
        for row in table.rows:
            if key == "up":
                assert got[row.key] == 1.0
                continue
            cell = row.cells[key]
            if cell.state is CellState.OK:
                assert got[row.key] == pytest.approx(cell.value, rel=1e-9), (key, row.instance)
                n_checked += 1
            elif cell.state is CellState.NOT_EXPORTED:
                assert row.key not in got, (key, row.instance)
    assert n_checked >= 2 * len(COLUMNS)


def test_error_classes_are_shown_as_such(fleet):
    bad = fleet_once(fleet.prom.url, selector="{job=bmoe}")
    assert bad["status"] == "bad_data" and "{job=bmoe}" in bad["error"]["query"] and exit_code(bad) == 1
    assert "parse error" in bad["error"]["message"] and bad["table"] is None
    empty = fleet_once(fleet.prom.url, selector='{job="no-such-job"}')
    assert empty["status"] == "empty" and 'job="no-such-job"' in empty["error"]["query"]
    gone = fleet_once(f"http://127.0.0.1:{free_port()}", selector=BMOE)
    assert gone["status"] == "unreachable" and exit_code(gone) == 1
    missing = fleet_once(fleet.prom.url, selector=BMOE, instance="127.0.0.1:1")
    assert missing["status"] == "ok" and missing["drill"] is None and missing["drill_error"]["kind"] == "empty"
    assert exit_code(missing) == 1


def test_cli_prints_the_same_document(fleet):
    at = fleet.prom.wait_sample_after(f'up{{instance="{fleet.target("a")}"}}', time.time()) - 0.5
    cmd = [sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--prometheus", fleet.prom.url, "--selector", BMOE,
           "--window", "1m", "--once", "--json", "--instance", fleet.target("a"), "--at", f"{at:.3f}"]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    doc = orjson.loads(p.stdout)
    lib = orjson.loads(orjson.dumps(fleet_once(fleet.prom.url, selector=BMOE, window_s=60,
                                               instance=fleet.target("a"), at=round(at, 3))))
    for d in (doc, lib):  # the one field that depends on the client's cache, not the data
        d["table"].pop("queries_per_refresh")
        d["drill"].pop("queries_per_refresh")
    assert doc == lib
    assert len(doc["table"]["instances"]) == 3
    usage = subprocess.run([*cmd[:8], "--once"], capture_output=True, timeout=120)
    assert usage.returncode == 2 and b"--once --json" in usage.stderr
    # a selector of the right form that Prometheus refuses (a regular expression that does not
    # parse): its bad_data answer, said; one that is not label matchers is refused before (exit 2)
    bad = subprocess.run([*cmd[:7], '{job=~"("}', "--once", "--json"], capture_output=True, timeout=120)
    assert bad.returncode == 1 and orjson.loads(bad.stdout)["status"] == "bad_data"
    assert bad.stderr.count(b"\n") == 1 and bad.stderr.startswith(b"bmoe-top: fleet ") and b"bad_data" in bad.stderr
    unquoted = subprocess.run([*cmd[:7], "{job=bmoe}", "--once", "--json"], capture_output=True, timeout=120)
    assert unquoted.returncode == 2 and b"label matchers" in unquoted.stderr


def test_restarted_instance_gives_no_negative_rate(fleet, client):
    b = fleet.serves["b"]
    port = b.port
    complete(b.url, "Before the restart", 30)
    before = scrape(b.url)
    settle(fleet, "b", before.get("tokens_predicted"))
    b.stop()
    target = fleet.target("b")
    fleet.prom.wait_value(f'up{{instance="{target}"}}', 0)
    nb = Serve(fleet.model, "--cache-mb", "0.5", port=port)
    fleet.serves["b"] = nb
    fleet.prom.wait_value(f'up{{instance="{target}"}}', 1)
    complete(nb.url, "After", 5)
    after = scrape(nb.url)
    assert after.get("tokens_predicted") < before.get("tokens_predicted")  # the counter went back: a reset
    settle(fleet, "b", after.get("tokens_predicted"))
    session = FleetSession(client, selector=BMOE, window_s=120)
    table = session.refresh()
    row = table.row(target)
    assert row.state is InstanceState.UP and row.restarts is not None and row.restarts >= 1
    for key in ("tok_s", "prompt_tok_s", "read_mib_s"):
        spark = row.spark[key]
        assert np.nanmin(spark) >= 0, key
    drill = session.drill(target)
    for key in ("tok_s", "prompt_tok_s", "read_mib_s"):
        s = drill.series[key]
        assert np.isfinite(s).any() and np.nanmin(s) >= 0, key
    # the raw counter did go down inside the window
    [(_, pts)] = fleet.prom.raw(f'llamacpp:tokens_predicted_total{{instance="{target}"}}[120s]', table.at)
    vals = [v for _, v in pts]
    assert any(y < x for x, y in zip(vals, vals[1:]))


def test_stopped_instance_turns_down_within_two_scrapes(fleet, client):
    c = fleet.serves["c"]
    target = fleet.target("c")
    session = FleetSession(client, selector=BMOE, window_s=60)
    assert wait_table(session, lambda t: t.row(target).state is InstanceState.UP, "c up").row(target)
    c.stop()
    t_exit = time.time()  # the process has exited: from here its port refuses
    table = wait_table(session, lambda t: t.row(target).state is InstanceState.DOWN, "c down")
    row = table.row(target)
    assert "down" in row.flags and table.rows[0].state is InstanceState.DOWN  # the worst is first
    # its last good values stay, with their age
    assert row.cells["tok_s"].state in (CellState.OK, CellState.STALE) and row.cells["tok_s"].value is not None
    assert row.cells["hit_pct"].state is CellState.NOT_EXPORTED  # exported while up: no cache series
    assert row.last_up_age_s is not None and row.last_up_age_s >= 0
    # Prometheus' own timestamps: the first failed scrape came within two intervals of the exit
    [(_, pts)] = fleet.prom.raw(f'up{{instance="{target}"}}[2m]', table.at)
    last_up = max(t for t, v in pts if v == 1)  # the server may stop answering before its process exits
    first_down = min(t for t, v in pts if v == 0 and t > last_up)
    assert first_down - last_up <= 2 * S + 1e-3 and first_down <= t_exit + 2 * S
    # a refresh at that very sample already says down
    assert session.refresh(at=first_down).row(target).state is InstanceState.DOWN
    assert session.refresh(at=last_up).row(target).state is InstanceState.UP
