"""One real workload read every way bmoe-top reads it: the numbers agree.

A ``bmoe-run serve --parallel 2`` on the tiny model (expert cache, audit log, per-token CSV) is
driven with requests streaming and not, two of them decoded together (``/metrics`` shows both
slots processing; one ``llama_decode`` per step holds a row of each, and the cache's lookups of a
shared step are charged to the request that routed them first), and a real Prometheus scrapes it
every second. The same
quantities are then read through ``attach --metrics --once --json``, ``attach --audit --once
--json``, ``replay --summary --json`` (of the CSV and of the audit log), ``fleet --once --json``
and the attach screens' panels and titles: counters and sums agree exactly, ratios of the same
counters exactly, rates within what their windows allow (the CSV's per-token wall times are
written to the microsecond, the catalogue's definitions say which figures include the prompts).
The server is stopped last: its audit ``exit`` record then holds the same totals.

Nothing waits on time: every wait is on a count (``/metrics``, Prometheus' stored samples).
"""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest
from helpers.prometheus import Prometheus, need_prometheus
from helpers.serve import Serve, complete, scrape, scrape_value
from helpers.waits import wait_until

from bmoe_top.parsers.prom import MIB
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.cli import main
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.metrics import metrics_document
from bmoe_top.tui.present.numbers import show, size
from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.tail import FileTail
from bmoe_top.tui.widgets.panels import RunPanel

#: How close the CSV's per-stream tok/s is to the server's: the CSV writes each wall time to the
#: microsecond, the server sums the unrounded times.
CSV_REL = 1e-3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


def cli(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return orjson.loads(out)


def drive(url: str) -> list[int]:
    """Requests streaming and not, then two decoded together: the second joins while the first
    (long enough to be decoding still) runs, and both slots are seen processing at once. Returns
    the two's ``id_slot``."""
    assert complete(url, "The first request", 12).status_code == 200
    assert complete(url, "A streamed one", 10, stream=True).status_code == 200
    answers: dict[str, httpx.Response] = {}
    a = threading.Thread(target=lambda: answers.setdefault("a", complete(url, "Two at once, the first", 160,
                                                                         stream=True)))
    a.start()
    wait_until(lambda: scrape_value(url, "llamacpp:requests_processing") == 1, what="the first decoding")
    b = threading.Thread(target=lambda: answers.setdefault("b", complete(url, "and the second", 12)))
    b.start()
    wait_until(lambda: scrape_value(url, "llamacpp:requests_processing") == 2, what="both slots decoding")
    a.join(120)
    b.join(120)
    assert [answers[k].status_code for k in "ab"] == [200, 200]
    last = orjson.loads(answers["a"].text.strip().rsplit("data: ", 1)[1])
    return [last["id_slot"], answers["b"].json()["id_slot"]]


def rows(pairs) -> dict[str, str]:
    return {label: value for label, value, kind in pairs if kind != "section"}


async def test_one_workload_reads_the_same_everywhere(tiny, tmp_path, capsys):
    need_prometheus()
    audit, csv = tmp_path / "audit.jsonl", tmp_path / "run.csv"
    srv = Serve(tiny, "--parallel", "2", "--cache-mb", "0.5", "--moe-cache-audit", str(audit), "--csv", str(csv),
                env={"BMOE_TOKEN_DELAY_MS": "15"})
    prom = None
    try:
        target = f"127.0.0.1:{srv.port}"
        prom = Prometheus(tmp_path / "prom", {"bmoe": [target]})
        assert drive(srv.url) == [0, 1]  # the second took slot 1: slot 0 was busy
        own = scrape(srv.url)
        v = own.values
        T, P = int(v["tokens_predicted"]), int(v["prompt_tokens"])
        hits, misses, up = int(v["hits"]), int(v["misses"]), int(v["upload_bytes"])
        assert T > 20 and hits + misses > 0 and up > 0
        # Prometheus stored the final counters, and one scrape after them
        prom.wait_value(f'llamacpp:tokens_predicted_total{{instance="{target}"}}', T)
        prom.wait_value(f'llamacpp:moe_cache_upload_bytes_total{{instance="{target}"}}', up)

        m = cli(capsys, "attach", "--metrics", srv.url + "/metrics", "--once", "--json")
        a = cli(capsys, "attach", "--audit", str(audit), "--once", "--json")
        ra = cli(capsys, "replay", "--summary", "--json", str(audit))
        c = cli(capsys, "replay", "--summary", "--json", str(csv))

        def fleet_with_final_counters() -> dict | None:
            # a live grid ends on a multiple of its step: the drill-down sees the final scrape
            # once a grid point falls after it
            doc = cli(capsys, "fleet", "--prometheus", prom.url, "--once", "--json", "--window", "2m",
                      "--instance", target)
            return doc if (doc["drill"] or {}).get("totals", {}).get("tokens_predicted") == T else None

        f = wait_until(fleet_with_final_counters, what="a drill-down grid point after the final scrape", every=0.5)

        # -- counters and sums: exactly ------------------------------------------------------------
        tot, audit_run, drill = m["totals"], a["runs"][-1], f["drill"]["totals"]
        reqs = audit_run["requests"]
        assert len(reqs) == 4
        assert sorted(r["slot"] for r in reqs) == [0, 0, 0, 1]
        assert tot["tokens_predicted"] == m["run"]["tokens"] == T
        assert sum(r["n_gen"] for r in reqs) == a["run"]["tokens"] == ra["tokens"] == T
        assert c["derived"]["token_rows"] == T  # one CSV row per generated token
        # the CSV holds whole turns (a request's rows are written together when it ends): the two
        # decoded together are two turns, not one interleaved run of rows
        assert c["turns"] == len(reqs) == 4 and c["problems"] == 0
        assert drill["tokens_predicted"] == T
        assert tot["prompt_tokens"] == m["run"]["n_prompt"] == sum(r["n_prompt"] for r in reqs) == P
        assert a["run"]["n_prompt"] == drill["prompt_tokens"] == P
        for key, ck, rk, own_v in (("hits", "hits", "req_hits", hits), ("misses", "misses", "req_misses", misses),
                                   ("upload_bytes", "bytes_upload", "req_bytes_upload", up)):
            assert tot[key] == audit_run["counters"][ck] == sum(r[rk] for r in reqs) == drill[key] == own_v, key
        assert m["run"]["read_mib"] == a["run"]["read_mib"] == ra["read_mib"] == up / MIB
        # the CSV's rows are the decode tokens' reads; the server's counter has the prompts' too
        assert 0 < c["derived"]["read_mib"] <= up / MIB
        # -- ratios of the same counters: exactly --------------------------------------------------
        hit = 100.0 * hits / (hits + misses)
        for x in (tot["hit_pct"], m["run"]["cache_hit_pct"], audit_run["hit_pct"], a["run"]["cache_hit_pct"]):
            assert x == pytest.approx(hit, rel=1e-12)
        # one stream's speed since start: the server's time sums, and the CSV's rows to the microsecond
        per_stream = v["timed_tokens"] / v["wall_s"]
        assert m["run"]["tok_s"] == pytest.approx(per_stream, rel=1e-12)
        assert drill["timed_tokens"] / drill["wall_s"] == pytest.approx(per_stream, rel=1e-12)
        assert c["derived"]["tok_s"] == pytest.approx(per_stream, rel=CSV_REL)
        # the fleet's rate: the tokens Prometheus stored in its window, over the window (rate()
        # extrapolates to the window's ends: n / range <= rate <= n / the span sampled)
        table = f["table"]
        cell = next(r for r in table["instances"] if r["instance"] == target)["cells"]["tok_s"]
        rng = table["rate_interval_s"]
        [(_, pts)] = prom.raw(f'llamacpp:tokens_predicted_total{{instance="{target}"}}[{int(rng * 1000)}ms]',
                              table["at"])
        n, sampled = pts[-1][1] - pts[0][1], round(pts[-1][0] - pts[0][0], 3)
        assert cell["state"] == "ok" and sampled > 0
        assert n / rng * (1 - 1e-9) <= cell["value"] <= n / sampled * (1 + 1e-9)
        # what each figure covers, as the documents say it
        assert m["run"]["summary_scope"] == "since start"
        assert a["run"]["summary_scope"] == f"since load (pid {audit_run['pid']})"

        # -- the screens: the attach panels, the run panel and the title say the same numbers -----
        poller = MetricsPoller(srv.url + "/metrics", interval=1.0, timeout=30)
        screen = MetricsAttachScreen(poller, start_poller=False, run=RunModel())
        app = BmoeTopApp(screen)
        async with app.run_test(size=(200, 60)) as pilot:
            poller.scrape_once()
            assert complete(srv.url, "One more, inside the interval", 8).status_code == 200
            poller.scrape_once()  # the interval holds that request's tokens
            screen.refresh_views(force=True)
            await pilot.pause()
            v = scrape(srv.url).values  # the totals now (nothing runs any more)
            T, P, hits, misses, up = (int(v[k]) for k in ("tokens_predicted", "prompt_tokens", "hits", "misses",
                                                           "upload_bytes"))
            hit, per_stream = 100.0 * hits / (hits + misses), v["timed_tokens"] / v["wall_s"]
            side, panel = rows(screen.panel_rows()), rows(app.query_one(RunPanel).rows())
            title = app.query_one("#title").plain
            assert side["generated"] == panel["tokens"] == f"{T:,} tok"
            assert side["read (since start)"] == panel["read (since start)"] == size(up)
            assert side["hits"] == f"{hits:,}" and side["misses"] == f"{misses:,}"
            assert side["hit (since start)"] == panel["cache hit"] == f"{hit:.1f} %"
            assert panel["tok/s (since start)"] == show(q("summary.tok_s"), per_stream) + " per stream"
            # the interval's rate, all slots: the tokens the counter gained over the interval's time
            rates = metrics_document(screen.model)["rates"]
            assert rates["tokens"] > 0 and rates["tok_s"] == pytest.approx(rates["tokens"] / rates["interval_s"])
            rate = next(x for k, x in side.items() if k.startswith("tok/s (all slots, "))
            assert rate == show(q("interval.tok_s"), rates["tok_s"])
            assert f"run: {rate} tok/s (all slots)" in title  # one interval: the title's rows are the panel's
        poller.client.close()

        tail = FileTail(audit, poll_s=0.2)
        screen2 = AuditAttachScreen(tail, start_tail=False, run=RunModel())
        app2 = BmoeTopApp(screen2)
        async with app2.run_test(size=(200, 60)) as pilot:
            tail.read_to_end()
            screen2.refresh_views(force=True)
            await pilot.pause()
            side, panel = rows(screen2.panel_rows()), rows(app2.query_one(RunPanel).rows())
            text = app2.query_one(RunPanel).text()
            assert f"since load (pid {audit_run['pid']})" in text and "turn 4" not in text
            assert side["read (since load)"] == panel["read (since load)"] == size(up)
            assert side["hit (since load)"] == panel["cache hit"] == f"{hit:.1f} %"
            assert panel["tokens"] == f"{T:,} tok" and side["requests"] == "5"
    finally:
        code = srv.stop()
        if prom is not None:
            prom.stop()
    assert code == 0
    # the exit record: the same totals, and the reference's exact sum holds
    a2 = cli(capsys, "attach", "--audit", str(audit), "--once", "--json")
    last = a2["runs"][-1]
    assert last["state"] == "exited" and last["exact_sum"] == []
    assert last["perf"]["n_gen"] == T and last["perf"]["n_prompt"] == P
    assert last["counters"]["bytes_upload"] == up and a2["run"]["tokens"] == T
