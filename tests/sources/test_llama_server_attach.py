"""``attach --metrics`` against a real, stock llama-server (the fixture builds it from the vendored
llama.cpp; tests skip only without a compiler), on the demo model: what this server really does.

* It adds a request's tokens to ``tokens_predicted_total`` only when the request ends: while
  requests are processing and the counter did not move, the interval says so; with ``/slots``
  the slots' decoded-token counts give live progress.
* Without ``--metrics`` it answers 501 with a hint: its own state, the hint whole, no backoff.
* Its ``Process-Start-Time-Unix`` header tells a restart even when the new process's counters
  are above the old ones; after it no rate of the dead process is shown.
* Its generation time starts after a request's first token: tok/s counts tokens over the time
  that made them (prompt time included), never 1,000,000 tok/s for five 1-token requests.
* Series bmoe-top does not know are kept and listed; cached prompt tokens sit beside the prompt
  numbers; counts are integers; its throughput gauges (since the last scrape) have their own key.
"""

from __future__ import annotations

import threading

import httpx
import pytest
from helpers.llama_server import DEMO_MODEL, LlamaServer, llama_server_binary
from helpers.waits import until

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.metrics import metrics_document, metrics_panel_rows
from bmoe_top.tui.present.summary import run_summary, summary_rows
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


def complete(url: str, prompt: str, n: int, **extra) -> dict:
    with httpx.Client(trust_env=False, timeout=300) as c:
        r = c.post(url + "/completion", json={"prompt": prompt, "n_predict": n, **extra})
        assert r.status_code == 200, r.text
        return r.json()


def busy_slot(url: str) -> dict | None:
    """The first processing slot with its decoded count, or None."""
    with httpx.Client(trust_env=False, timeout=30) as c:
        for s in c.get(url + "/slots").json():
            if s.get("is_processing") and s.get("next_token"):
                return {"task": s.get("id_task"), "n": s["next_token"][0]["n_decoded"]}
    return None


@pytest.fixture(scope="module")
def slots_server():
    """The demo model with --metrics --slots, one slot, the model's whole 2,048-token context."""
    ls = LlamaServer(llama_server_binary(), DEMO_MODEL, "--metrics", "--slots", ctx=2048)
    yield ls
    ls.stop()


def test_counts_at_request_end_and_live_progress_from_slots(slots_server):
    url = slots_server.url
    # three long requests queued on one slot: for seconds a request is processing while the
    # server's counter stands still (it counts at the request's end)
    threads = [threading.Thread(target=complete, args=(url, f"def f{i}(", 1900), kwargs={"ignore_eos": True})
               for i in range(3)]
    for t in threads:
        t.start()
    poller = MetricsPoller(url + "/metrics", interval=0.05, timeout=30, slots=True)
    run = bind(poller, RunModel()).run
    try:
        doc = None
        for _attempt in range(30):  # an interval in which a request ended does not show it: take another
            if not until(lambda: (busy_slot(url) or {"n": 0})["n"] >= 20):
                break
            poller.scrape_once()
            first = busy_slot(url)
            if first is None:
                continue
            # the slot decodes on: wait for its count to grow (an event, not a duration)
            until(lambda first=first: (busy_slot(url) or {"task": None, "n": 0})["n"] >= first["n"] + 20
                     or (busy_slot(url) or {"task": None})["task"] != first["task"])
            poller.scrape_once()
            doc = metrics_document(run)
            r = doc["rates"]
            if r and r["counted_at_end"] and r["slot_tokens"]:
                break
        assert doc is not None
        r = doc["rates"]
        assert r["counted_at_end"] is True and r["tokens"] == 0 and r["processing"] >= 1
        assert "counts tokens when a request ends" in r["note"]
        assert r["slot_tokens"] > 0 and r["slot_tok_s"] > 0 and "/slots" in r["slot_tok_s_basis"]
        assert "all slots" in r["tok_s_basis"]
        rows = metrics_panel_rows(doc)
        assert ("", "server counts at request end", "") in rows
        assert any(label == "live tok/s" for label, _v, _k in rows)
        assert any(label.startswith("slot ") and "so far" in v for label, v, _k in rows)
        assert doc["slots"] and any(s["processing"] for s in doc["slots"])
    finally:
        for t in threads:
            t.join(300)
        poller.client.close()


def test_without_metrics_the_501_hint_is_its_own_state():
    with LlamaServer(llama_server_binary(), DEMO_MODEL) as ls:
        poller = MetricsPoller(ls.url + "/metrics", interval=0.5, timeout=30)
        run = bind(poller, RunModel()).run
        for _ in range(4):
            poller.scrape_once()
        assert poller.state.status == "disabled" and poller.state.http_status == 501
        assert "Start it with `--metrics`" in poller.state.detail  # llama-server's hint, whole
        assert poller.next_wait() == pytest.approx(0.5)  # asked again every interval, not after 30 s
        assert run.status == "disabled" and not run.status.live
        poller.client.close()


def test_a_restart_is_seen_by_its_start_header_even_when_counters_grew():
    exe = llama_server_binary()
    a = LlamaServer(exe, DEMO_MODEL, "--metrics")
    port = a.port
    poller = MetricsPoller(a.url + "/metrics", interval=0.05, timeout=30)
    run = bind(poller, RunModel()).run
    try:
        complete(a.url, "def a(", 4)
        poller.scrape_once()
        complete(a.url, "def b(", 6)
        poller.scrape_once()
        assert run.tokens.n == 1 and poller.state.start_time
        first_start = poller.state.start_time
        a.stop()
        b = LlamaServer(exe, DEMO_MODEL, "--metrics", port=port)
        try:
            done = complete(b.url, "def c(x, y):", 40)  # more tokens than the old process had counted
            d = poller.scrape_once()
            assert d is not None and d.reset  # a new baseline although no counter went down
            assert poller.state.start_time != first_start and poller.state.n_resets == 1
            doc = metrics_document(run)
            assert doc["rates"] == {"interval_s": d.dt_s, "reset": True} and doc["restarts"] == 1
            s = run_summary(run)
            assert s["tokens"] == done["tokens_predicted"]  # the new process's totals only
            assert run.epochs == 2 and run.epoch_start == 1 and s["derived"]["epoch_rows"] == 0
            assert s["derived"].get("tok_s") is None  # no rate of the dead process beside the new tokens
            complete(b.url, "def d(", 5)
            poller.scrape_once()
            assert run.tokens.n == 2 and metrics_document(run)["rates"]["reset"] is False
        finally:
            b.stop()
    finally:
        a.stop()
        poller.client.close()


def test_tok_s_counts_tokens_over_the_time_that_made_them(llama_server):
    poller = MetricsPoller(llama_server.url + "/metrics", interval=0.05, timeout=30)
    run = bind(poller, RunModel()).run
    before = httpx.get(llama_server.url + "/metrics", trust_env=False).text
    assert "tokens_predicted_total" in before
    for i in range(5):
        complete(llama_server.url, f"x{i} = ", 1)  # five 1-token requests
    poller.scrape_once()
    v = poller.state.last.values
    s = run_summary(run)
    spent = v["tokens_predicted_seconds"] + v["prompt_seconds"]
    assert s["tok_s"] == pytest.approx(v["tokens_predicted"] / spent)
    assert s["tok_s"] <= v["tokens_predicted"] / v["prompt_seconds"]  # bounded by the prompt passes that made them
    if v["tokens_predicted_seconds"] > 0:
        assert s["tok_s"] < v["tokens_predicted"] / v["tokens_predicted_seconds"]  # the old, one-step-short figure
    assert s["summary_notes"]["tok_s"].startswith("per stream")
    rows = {label: text for label, text, _k in summary_rows(s)}
    assert rows["tok/s (since start)"].endswith(" per stream")
    poller.client.close()


def test_unknown_series_cached_prompts_counts_and_gauges(llama_server):
    prompt = "def fibonacci(n):\n    " * 6
    complete(llama_server.url, prompt, 4)
    complete(llama_server.url, prompt, 4)  # the same prompt again: most of it comes from the cache
    poller = MetricsPoller(llama_server.url + "/metrics", interval=0.05, timeout=30)
    run = bind(poller, RunModel()).run
    poller.scrape_once()
    complete(llama_server.url, prompt, 3)
    poller.scrape_once()
    doc = metrics_document(run)
    tot = doc["totals"]
    assert isinstance(tot["tokens_predicted"], int) and isinstance(tot["prompt_tokens"], int)  # counts: integers
    assert isinstance(tot["requests_processing"], int)
    assert tot["prompt_tokens_cached"] > 0
    assert "predicted_tok_s_since_last_scrape" in tot and "predicted_tokens_seconds" not in tot
    assert doc["gauge_window"] == "since_last_scrape"
    others = doc["other_series"]
    assert "llamacpp:n_busy_slots_per_decode" in others and "llamacpp:prompt_tokens_cached_total" in others
    rows = metrics_panel_rows(doc)
    labels = [label for label, _v, _k in rows]
    # beside the prompt numbers since start, and in the interval (each label names its scope)
    assert labels[labels.index("prompt") + 1] == "prompt cached"
    at = next(i for i, label in enumerate(labels) if label.startswith("prompt tok/s (all slots, "))
    assert labels[at + 1] == "prompt cached"
    assert any(label.startswith("other series") for label in labels)
    assert any(label == "llamacpp:n_busy_slots_per_decode" for label in labels)
    assert doc["rates"]["prompt_cached"] is not None and doc["rates"]["prompt_cached"] > 0
    s = run_summary(run)
    assert s["extra"]["n_prompt_cached"] == tot["prompt_tokens_cached"]
    assert ("prompt cached", f"{tot['prompt_tokens_cached']:,} tok", "") in summary_rows(s)
    # a value the server does not export reads one way everywhere
    assert ("hits", "not exported", "missing") in rows
    assert any(label.startswith("hit (") and v == "not exported" for label, v, _k in rows)
    panel = dict((label, v) for label, v, _k in summary_rows(s))
    assert panel["read (since start)"] == "not exported" and panel["cache hit"] == "not exported"
    assert s["mode"] is None  # no per-token times: no mode
    poller.client.close()
