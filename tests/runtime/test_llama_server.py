"""The stock llama-server fixture (tests/helpers/llama_server.py) works: built from the vendored
llama.cpp, serving the demo model with ``--metrics`` on loopback, and its ``/metrics`` parses with
:func:`bmoe_top.parsers.prom.parse_exposition`. llama-server counts a request's tokens when the
request ends, so after one finished completion the counters equal its own numbers."""

from __future__ import annotations

import time

import httpx

from bmoe_top.parsers.prom import parse_exposition


def test_llama_server_metrics_parse(llama_server):
    with httpx.Client(trust_env=False, timeout=120) as c:
        r = c.post(llama_server.url + "/completion", json={"prompt": "def add(a, b):", "n_predict": 8})
        assert r.status_code == 200, r.text
        done = r.json()
        m = c.get(llama_server.url + "/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    snap = parse_exposition(m.content, time.monotonic())
    assert snap.bad_lines == [] and snap.n_samples > 0 and not snap.json_quoted
    assert snap.get("tokens_predicted") == done["tokens_predicted"] > 0
    assert snap.get("prompt_tokens") == done["tokens_evaluated"] > 0
    assert snap.get("requests_processing") == 0 and snap.get("requests_deferred") == 0
    assert not snap.exported("hits")  # a stock build has no MoE cache series: not exported, never 0
