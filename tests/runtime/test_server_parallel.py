"""``bmoe-run serve --parallel 2`` as a real process on loopback: two requests decoded together
(``llamacpp:requests_processing`` shows 2 while both decode) answer what each answers alone on a
one-slot server, each response and audit record names its own slot, and the run's totals agree
exactly between ``/metrics``, the audit log (its request records' sum and its exit record) and
the CSV (whole turns, one row per generated token)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from helpers.serve import Serve, complete, scrape, scrape_value
from helpers.waits import wait_until

from bmoe_top.parsers.audit import check_exact_sum, read_audit_file
from bmoe_top.parsers.token_csv import generated_turns, load_token_csv

#: (prompt, n_predict): the first is long enough to be decoding when the second joins
REQUESTS = [("The first request, a long one", 200), ("and the second", 24)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def alone(tiny) -> list[str]:
    """Each request's answer on a one-slot server, one after the other."""
    srv = Serve(tiny, "--cache-mb", "0.5", "-c", "256")
    try:
        return [complete(srv.url, p, n).json()["content"] for p, n in REQUESTS]
    finally:
        srv.stop()


def _together(url: str) -> list[dict]:
    """The two requests, the second sent once the first decodes; both decoding at once is waited for."""
    out: list[dict] = [{}, {}]

    def send(i: int) -> None:
        p, n = REQUESTS[i]
        out[i] = complete(url, p, n).json()

    a = threading.Thread(target=send, args=(0,))
    a.start()
    wait_until(lambda: scrape_value(url, "llamacpp:requests_processing") == 1, what="the first decoding")
    b = threading.Thread(target=send, args=(1,))
    b.start()
    wait_until(lambda: scrape_value(url, "llamacpp:requests_processing") == 2, what="both slots decoding")
    a.join(120)
    b.join(120)
    return out


def test_two_slots_decode_together(tiny, alone, tmp_path):
    audit, csv = tmp_path / "audit.jsonl", tmp_path / "run.csv"
    srv = Serve(tiny, "--parallel", "2", "--cache-mb", "0.5", "--moe-cache-audit", str(audit), "--csv", str(csv),
                env={"BMOE_TOKEN_DELAY_MS": "15"})
    try:
        got = _together(srv.url)
        assert [g["content"] for g in got] == alone  # greedy: byte-identical to each alone
        assert [g["id_slot"] for g in got] == [0, 1]
        assert [g["tokens_predicted"] for g in got] == [n for _, n in REQUESTS]
        v = scrape(srv.url).values
        assert v["requests_processing"] == 0
        # a prompt longer than one slot's context (512 / 2) is refused before it is queued
        r = httpx.post(srv.url + "/completion", json={"prompt": "x" * 300, "n_predict": 4}, trust_env=False,
                       timeout=60)
        assert r.status_code == 400 and "slot's context" in r.json()["error"]["message"]
    finally:
        code = srv.stop()
    assert code == 0
    [run] = read_audit_file(audit).runs
    reqs = sorted(run.requests, key=lambda r: r.data["task"])
    assert [r.data["slot"] for r in reqs] == [0, 1]
    assert check_exact_sum(run) == []  # each lookup charged to one request: the sum is exit minus ready
    ex = run.exit.counters
    assert ex["hits"] == int(v["hits"]) and ex["misses"] == int(v["misses"])
    assert ex["bytes_upload"] == int(v["upload_bytes"])
    assert sum(r.data["req_hits"] + r.data["req_misses"] for r in reqs) == int(v["hits"] + v["misses"])
    assert all(r.data["req_hits"] + r.data["req_misses"] > 0 for r in reqs)
    assert sum(r.data["n_gen"] for r in reqs) == int(v["tokens_predicted"]) == sum(n for _, n in REQUESTS)
    # the CSV: each request's rows together with its summary, the turns in the order they ended
    table = load_token_csv(csv.read_bytes())
    assert table.n_rows == int(v["tokens_predicted"]) and len(table.summaries) == 2
    starts, why = generated_turns(table)
    assert why is None
    assert starts == [0, REQUESTS[1][1]]  # the second request ended first: its rows come first
    assert [int(x) for x in table.columns["turn"][:table.n_rows]] == [0] * REQUESTS[1][1] + [1] * REQUESTS[0][1]


def test_shutdown_with_two_slots_busy(tiny, tmp_path):
    """SIGTERM while two requests decode together: each client gets its answer so far, each
    request gets its record, and the records still add up to exit minus ready."""
    audit = tmp_path / "audit.jsonl"
    srv = Serve(tiny, "--parallel", "2", "--cache-mb", "0.5", "--moe-cache-audit", str(audit),
                env={"BMOE_TOKEN_DELAY_MS": "15"})
    out: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda p=p: out.append(complete(srv.url, p, 200))) for p, _ in REQUESTS]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: scrape_value(srv.url, "llamacpp:requests_processing") == 2, what="both slots decoding")
    finally:
        code = srv.stop()
    for t in threads:
        t.join(60)
    assert code == 0
    assert sorted(r.status_code for r in out) == [200, 200]
    assert all(r.json()["tokens_predicted"] < 200 for r in out)
    [run] = read_audit_file(audit).runs
    assert sorted(r.data["slot"] for r in run.requests) == [0, 1] and run.exit is not None
    assert check_exact_sum(run) == []


def test_a_client_gone_ends_its_slot_only(tiny, alone, tmp_path):
    """The first client hangs up while both slots decode: its slot is freed at the next step, the
    second request still answers what it answers alone, and both records are written."""
    audit = tmp_path / "audit.jsonl"
    srv = Serve(tiny, "--parallel", "2", "--cache-mb", "0.5", "--moe-cache-audit", str(audit),
                env={"BMOE_TOKEN_DELAY_MS": "15"})
    second: list[dict] = []
    try:
        body = {"prompt": REQUESTS[0][0], "n_predict": REQUESTS[0][1], "stream": True}
        with httpx.stream("POST", srv.url + "/completion", json=body, trust_env=False, timeout=60) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # the first decodes
            b = threading.Thread(target=lambda: second.append(complete(srv.url, *REQUESTS[1]).json()))
            b.start()
            wait_until(lambda: scrape_value(srv.url, "llamacpp:requests_processing") == 2, what="both slots decoding")
        wait_until(lambda: scrape_value(srv.url, "bmoe:requests_cancelled_total") == 1, what="the hang-up seen")
        b.join(120)
        assert second[0]["content"] == alone[1] and second[0]["id_slot"] == 1
    finally:
        code = srv.stop()
    assert code == 0
    [run] = read_audit_file(audit).runs
    reqs = sorted(run.requests, key=lambda r: r.data["task"])
    assert [r.data["slot"] for r in reqs] == [0, 1]
    assert reqs[0].data["n_gen"] < REQUESTS[0][1] and reqs[1].data["n_gen"] == REQUESTS[1][1]
    assert check_exact_sum(run) == []
