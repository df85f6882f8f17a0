"""``bmoe-run serve`` as a real process on loopback, driven over real HTTP: scrape, completion
(JSON and SSE), counters moved by what the completion did, /metrics and /health during a decode,
queued requests, restart => baseline reset, api key on/off, bind policy, audit exact sum,
profile and adaptive cache."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
from helpers.serve import PY, Raw, Serve, complete, scrape, scrape_value
from helpers.waits import wait_until

from bmoe_top.parsers.audit import check_exact_sum, read_audit_file
from bmoe_top.parsers.prom import compute_delta
from bmoe_top.parsers.strp import StrpProfile, read_strp, write_strp
from bmoe_top.tui.present.metrics import not_exported
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    d = tmp_path_factory.mktemp("models")
    return make_model(d / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    audit = tmp_path_factory.mktemp("audit") / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit))
    s.audit = audit
    yield s
    s.stop()


def test_completion_moves_counters_by_what_it_did(server):
    s0 = scrape(server.url)
    assert s0.get("tokens_predicted") == 0 or s0.get("tokens_predicted") is not None
    r = complete(server.url, "Hello, experts!", 12)
    assert r.status_code == 200
    body = r.json()
    assert body["stop"] is True and body["tokens_predicted"] == 12
    t = body["timings"]
    assert t["predicted_n"] == 12 and t["prompt_n"] == body["tokens_evaluated"] > 0
    assert t["predicted_per_second"] > 0
    s1 = scrape(server.url)
    d = compute_delta(s0, s1)
    assert not d.reset
    assert d.d["tokens_predicted"] == 12
    assert d.d["timed_tokens"] == 12
    assert d.d["prompt_tokens"] == body["tokens_evaluated"]
    assert d.d["hits"] + d.d["misses"] > 0
    # per-layer counters add up to the totals
    for key, tot in (("layer_hits", "hits"), ("layer_misses", "misses")):
        assert sum(s1.layers[key].values()) == s1.get(tot)
    # the time sums: wall = compute + io + mgmt (serial mode), in the same interval
    w = d.d["wall_s"]
    assert w > 0 and abs(d.d["compute_s"] + d.d["io_s"] + d.d["mgmt_s"] - w) < 1e-3 * 12 + 0.01 * w
    assert d.token_ms["wall"] == pytest.approx(1000 * w / 12)
    # the audit request record says the same as the metrics difference
    runs = read_audit_file(server.audit)
    req = runs.runs[-1].requests[-1]
    assert req.data["n_gen"] == 12
    assert req.data["req_hits"] == d.d["hits"] and req.data["req_misses"] == d.d["misses"]
    assert req.data["req_bytes_upload"] == d.d["upload_bytes"]


def test_stream_sse_same_text_as_json(server):
    j = complete(server.url, "Stream me", 8).json()
    with httpx.stream("POST", server.url + "/completion", json={"prompt": "Stream me", "n_predict": 8, "stream": True},
                      timeout=60, trust_env=False) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [orjson.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    toks = [e for e in events if not e["stop"]]
    final = events[-1]
    assert len(toks) == 8 and final["stop"] is True and final["tokens_predicted"] == 8
    assert "".join(e["content"] for e in toks) == j["content"]
    assert final["timings"]["predicted_n"] == 8


def test_metrics_and_health_answer_during_decode_and_requests_queue(tiny, tmp_path):
    # Event-driven: the child sleeps 100 ms per token, so request a (400 tokens) cannot end before
    # its client hangs up below; every wait is for a count on /metrics, never for a duration.
    audit = tmp_path / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit), env={"BMOE_TOKEN_DELAY_MS": "100"})
    try:
        a = Raw(s.url).post_json("/completion", {"prompt": "long request a", "n_predict": 400})
        wait_until(lambda: (scrape(s.url).get("tokens_predicted") or 0) > 0, what="a decodes")
        out = {}
        b = threading.Thread(target=lambda: out.update(r=complete(s.url, "request b", 5)))
        b.start()
        wait_until(lambda: scrape(s.url).get("requests_deferred") == 1, what="b waits in the queue")
        seen = set()

        def counters_move() -> bool:
            m = scrape(s.url, timeout=30)
            assert m.get("requests_processing") == 1 and m.get("requests_deferred") == 1
            assert httpx.get(s.url + "/health", trust_env=False, timeout=30).status_code == 200
            seen.add(m.get("tokens_predicted"))
            return len(seen) >= 3

        wait_until(counters_move, what="tokens_predicted took 3 values during a's decode")
        a.close()  # a's client hangs up: its generation is cancelled and b runs
        b.join(120)
        assert out["r"].status_code == 200 and out["r"].json()["tokens_predicted"] == 5
        m = scrape(s.url)
        assert m.get("requests_processing") == 0 and m.get("requests_deferred") == 0
        assert scrape_value(s.url, "bmoe:requests_cancelled_total") == 1
    finally:
        assert s.stop() == 0
    run = read_audit_file(audit).runs[0]
    n_a, n_b = (r.data["n_gen"] for r in run.requests)
    assert 0 < n_a < 400 and n_b == 5  # a was cut short by its client, still recorded
    assert check_exact_sum(run) == []


def test_bad_requests_are_clear_and_server_survives(server):
    r = httpx.post(server.url + "/completion", content=b"{not json", trust_env=False, timeout=10)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/completion", json={"prompt": 5}, trust_env=False, timeout=10)
    assert r.status_code == 400
    r = complete(server.url, "x" * 600, 10)  # > n_ctx 512
    assert r.status_code == 400 and "n_ctx" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/nope", trust_env=False).status_code == 404
    assert complete(server.url, "still fine", 3).json()["tokens_predicted"] == 3


def test_audit_exact_sum_after_exit(tiny, tmp_path):
    audit = tmp_path / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.4", "--moe-cache-audit", str(audit))
    try:
        for i, n in enumerate((5, 9, 0, 14)):
            assert complete(s.url, f"request number {i}", n).status_code == 200
    finally:
        assert s.stop() == 0
    raw = audit.read_bytes()
    assert b"NaN" not in raw and b"Infinity" not in raw
    runs = read_audit_file(audit)
    assert runs.bad == [] and len(runs.runs) == 1
    run = runs.runs[0]
    assert run.load and run.ready and run.exit and len(run.requests) == 4
    assert check_exact_sum(run) == []
    assert run.exit.data["perf"]["n_gen"] == 28
    assert run.load.data["model"]["n_layer"] == 2 and run.load.data["profile"] is None
    assert [len(x["resident"]) == x["slots"] for x in run.exit.layers()] == [True, True]


def test_restart_resets_baseline_for_the_poller(tiny):
    s = Serve(tiny, "--cache-mb", "0.5")
    port = s.port
    try:
        complete(s.url, "before restart", 20)
        poller = MetricsPoller(s.url + "/metrics", interval=0.05, timeout=5)
        poller.scrape_once()
        s.stop()
        poller.scrape_once()
        assert poller.state.status == "refused"  # nothing listens any more
        s = Serve(tiny, "--cache-mb", "0.5", port=port)
        complete(s.url, "after", 2)
        d = poller.scrape_once()
        assert d is not None and d.reset and d.tok_s is None
        complete(s.url, "after again", 4)
        d = poller.scrape_once()
        assert not d.reset and d.d["tokens_predicted"] == 4 and d.tok_s > 0
        assert poller.state.n_resets == 1
        poller.client.close()
    finally:
        s.stop()


def test_api_key_on_and_off(tiny):
    s = Serve(tiny, "--api-key", "k3y")
    try:
        assert httpx.get(s.url + "/health", trust_env=False).status_code == 200
        assert httpx.get(s.url + "/metrics", trust_env=False).status_code == 401
        def metrics_status(key: str) -> int:
            auth = {"Authorization": f"Bearer {key}"}
            return httpx.get(s.url + "/metrics", headers=auth, trust_env=False).status_code

        assert metrics_status("nope") == 401
        assert metrics_status("k3y") == 200
        assert complete(s.url, "hi", 2).status_code == 401
        assert complete(s.url, "hi", 2, headers={"Authorization": "Bearer k3y"}).json()["tokens_predicted"] == 2
        p = MetricsPoller(s.url + "/metrics")
        p.scrape_once()
        assert p.state.status == "unauthorized"
        p.client.close()
        p = MetricsPoller(s.url + "/metrics", api_key="k3y")
        p.scrape_once()
        assert p.state.status == "ok"
        p.client.close()
    finally:
        s.stop()


def test_non_loopback_bind_refused_without_key(tiny):
    r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tiny), "--host", "0.0.0.0",
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "refusing to bind 0.0.0.0" in r.stderr and "Traceback" not in r.stderr
    s = Serve(tiny, "--host", "0.0.0.0", "--insecure")
    try:
        assert httpx.get(f"http://127.0.0.1:{s.port}/health", trust_env=False).status_code == 200
    finally:
        s.stop()


def test_missing_model_is_one_line(tmp_path):
    r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tmp_path / "none.gguf"), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("bmoe-run serve: ") and "listening" not in ln]) == 1


def test_profile_fill_and_wrong_dims(tiny, tmp_path):
    # a profile for this model: layer 0 experts 7..4 hottest, then layer 1
    prof = StrpProfile(n_layers=2, n_expert=8, slots=4, pairs=np.array([[0, 7], [0, 6], [1, 5], [0, 5], [1, 1]]))
    good = tmp_path / "good.strp"
    write_strp(good, prof)
    wrong = tmp_path / "wrong.strp"
    write_strp(wrong, StrpProfile(n_layers=3, n_expert=8, slots=4, pairs=np.array([[0, 1]])))
    audit = tmp_path / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-profile", str(good), "--moe-cache-audit", str(audit))
    try:
        m = scrape(s.url)
        slots = int(m.get("slots"))
        assert m.get("prefilled") == min(slots, 5) > 0
        complete(s.url, "profile hits", 16)
        m = scrape(s.url)
        assert 0 <= m.get("hits_profile") <= m.get("hits")
        for il, v in m.layers["layer_hits_profile"].items():
            assert v <= m.layers["layer_hits"][il]
    finally:
        s.stop()
    load = read_audit_file(audit).runs[0].load
    assert load.data["cache"]["prefilled"] == min(slots, 5)
    assert load.data["profile"]["sha256"] and load.data["profile"]["bytes"] == good.stat().st_size
    res = {x["il"]: x["resident"] for x in load.layers()}
    assert 7 in res[0]  # the hottest pair is in
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-profile", str(wrong), "--moe-cache-audit", str(audit))
    try:
        m = scrape(s.url)
        assert m.get("prefilled") == 0
    finally:
        s.stop()
    assert any("profile refused" in ln and "warning" in ln for ln in s.err_lines)
    load2 = read_audit_file(audit).runs[-1].load
    assert "refused" in load2.data["profile"]["error"]
    assert all(x["resident"] == [] for x in load2.layers())


def test_adaptive_swaps_counted(tiny, tmp_path):
    audit = tmp_path / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-adaptive", "--moe-cache-audit", str(audit))
    try:
        complete(s.url, "adaptive cache follows the conversation", 96)
        m = scrape(s.url)
        assert m.get("swaps") > 0
    finally:
        s.stop()
    run = read_audit_file(audit).runs[0]
    assert run.exit.counters["swaps"] == m.get("swaps")
    assert run.load.data["params"]["moe_cache_adaptive"] is True
    assert check_exact_sum(run) == []
    assert any("adaptive:" in ln and "swapped in" in ln for ln in s.err_lines)


def test_make_profile_cli(tiny, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 20)
    out = tmp_path / "p.strp"
    r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "make-profile", str(tiny), str(text), "-o", str(out),
                        "-c", "256", "-t", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    p = read_strp(out)
    assert (p.n_layers, p.n_expert) == (2, 8) and p.n_ranked > 0
    # counts: every traced token picked n_expert_used experts per layer; hottest first
    assert "tokens traced" in r.stderr
    r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "make-profile", str(tiny), str(tmp_path / "none.txt"),
                        "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr




def test_headless_twins_against_the_server(server):
    from bmoe_top.tui.headless import audit_once, exit_code, metrics_once
    from bmoe_top.tui.present.numbers import to_json

    assert complete(server.url, "headless twin", 200).json()["tokens_predicted"] == 200
    d = metrics_once(server.url + "/metrics", interval=0.3)
    assert d["status"] == "ok" and exit_code(d) == 0
    assert d["totals"]["tokens_predicted"] >= 200 and d["n_layer"] == 2
    assert d["rates"] is not None and d["rates"]["interval_s"] > 0.2
    assert d["rates"]["tok_s"] is None or d["rates"]["tok_s"] >= 0
    assert len(d["totals"]["layer_hit_pct"]) == 2
    assert "llamacpp:moe_cache_hits_total" not in d["not_exported"]
    orjson.loads(to_json(d))
    a = audit_once(server.audit)
    assert a["status"] == "ok" and a["bad_lines"] == 0 and exit_code(a) == 0
    run = a["runs"][-1]
    assert run["state"] == "ready" and run["exact_sum"] is None and run["n_layer"] == 2
    assert run["requests"] and run["requests"][-1]["n_gen"] == 200
    dead = metrics_once("http://127.0.0.1:9/metrics", timeout=0.5)
    assert dead["status"] == "refused" and exit_code(dead) == 1


def test_port_in_use_is_one_line(tiny):
    s = Serve(tiny)
    try:
        r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tiny), "--port", str(s.port)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "cannot listen" in r.stderr and "Traceback" not in r.stderr
    finally:
        s.stop()


def test_sigterm_mid_request_keeps_the_exact_sum(tiny, tmp_path):
    audit = tmp_path / "a.jsonl"
    # 50 ms per token: 480 tokens take >= 24 s, so the SIGTERM below always lands mid-request
    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit), env={"BMOE_TOKEN_DELAY_MS": "50"})
    out = {}
    t = threading.Thread(target=lambda: out.update(r=complete(s.url, "long request a", 480)))
    try:
        t.start()
        wait_until(lambda: (scrape(s.url).get("tokens_predicted") or 0) >= 5, what="5 tokens decoded")
        assert s.stop() == 0
        t.join(30)
    finally:
        s.stop()
    r = out["r"]  # the client still got its answer, cut short
    assert r.status_code == 200 and r.json()["stop"] is True and 0 < r.json()["tokens_predicted"] < 480
    run = read_audit_file(audit).runs[0]
    assert run.exit is not None and len(run.requests) == 1
    assert run.requests[0].data["n_gen"] == r.json()["tokens_predicted"]  # cancelled by the shutdown, still recorded
    assert check_exact_sum(run) == []


def test_two_servers_share_one_audit_file(tiny, tmp_path):
    audit = tmp_path / "shared.jsonl"
    a = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit))
    b = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit))
    try:
        ts = [threading.Thread(target=lambda s=s, i=i: complete(s.url, f"shared file {i}", 20))
              for i in range(6) for s in (a, b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        a.stop()
        b.stop()
    runs = read_audit_file(audit)
    assert runs.bad == []  # no interleaved half-lines
    assert sorted(r.pid for r in runs.runs) == sorted([a.proc.pid, b.proc.pid])
    for run in runs.runs:
        assert len(run.requests) == 6 and check_exact_sum(run) == []


def test_no_cache_exports_no_moe_cache_series(tiny):
    s = Serve(tiny, "--no-moe-stream")
    try:
        n = complete(s.url, "long request a", 8).json()["tokens_predicted"]
        m = scrape(s.url)
        for key in ("hits", "misses", "slots", "hit_ratio", "upload_bytes"):
            assert not m.exported(key)  # not exported, never 0
        assert "layer_hits" not in m.layers
        assert m.get("tokens_predicted") == n and m.get("timed_tokens") == n
        p = MetricsPoller(s.url + "/metrics")
        p.scrape_once()
        p.client.close()
        assert "llamacpp:moe_cache_hits_total" in not_exported(p.state.last)
    finally:
        s.stop()
