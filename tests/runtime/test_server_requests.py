"""Every field ``bmoe-run serve`` reads from a request body, on every endpoint, is checked as
llama-server reads it: a value of another type or out of range is 400 with the field's name and
why (never a 500, never read as something else: ``"stream": "false"`` is a string, not false),
and the values llama-server gives a meaning to work (``seed`` -1 is a random seed,
``repeat_last_n`` -1 the whole context, a temperature of 1e-320 is all but greedy)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers.serve import Serve

CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def server(tiny):
    s = Serve(tiny, "--cache-mb", "0.5")
    yield s
    s.stop()


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, trust_env=False, timeout=60)


ENDPOINTS = {"/completion": {"prompt": "hi", "n_predict": 3}, "/v1/completions": {"prompt": "hi", "max_tokens": 3},
             "/v1/chat/completions": {"messages": CHAT, "max_tokens": 3}}

BAD = [
    ({"stream": "false"}, '"stream" must be true or false, got string "false"'),
    ({"stream": 0}, '"stream" must be true or false, got number 0'),
    ({"temperature": "0.5"}, '"temperature" must be a number, got string "0.5"'),
    ({"temperature": -1}, '"temperature" must be >= 0, got -1'),
    ({"top_k": 40.0}, '"top_k" must be an integer, got number 40.0'),
    ({"top_k": -3}, '"top_k" must be >= 0, got -3'),
    ({"top_p": 1.5}, '"top_p" must be in (0, 1], got 1.5'),
    ({"top_p": True}, '"top_p" must be a number, got true'),
    ({"repeat_penalty": 0}, '"repeat_penalty" must be > 0, got 0'),
    ({"repeat_last_n": -2}, '"repeat_last_n" must be >= 0, got -2'),
    ({"seed": -2}, '"seed" must be -1 (a random seed) or a non-negative integer, got -2'),
    ({"seed": 1.5}, '"seed" must be an integer, got number 1.5'),
    ({"stop": 5}, '"stop" must be a string or a list of strings'),
]


@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize("field,why", BAD)
def test_a_field_of_another_type_or_out_of_range_is_400_with_why(server, path, field, why):
    r = post(server, path, {**ENDPOINTS[path], **field})
    assert r.status_code == 400 and r.json()["error"] == {"code": 400, "message": why,
                                                          "type": "invalid_request_error"}


@pytest.mark.parametrize("path,body,why", [
    ("/completion", {"prompt": "hi", "n_predict": -7}, '"n_predict" must be at least -1 (-1: no limit), got -7'),
    ("/completion", {"prompt": "hi", "n_predict": "3"}, '"n_predict" must be an integer, got string "3"'),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -2}, '"max_tokens" must be at least -1 (-1: no limit), got -2'),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": [3]},
     '"max_completion_tokens" must be an integer, got a list'),
    ("/v1/chat/completions", {"messages": CHAT, "n": True}, '"n" must be an integer, got true'),
    ("/v1/chat/completions", {"messages": CHAT, "stream_options": "yes"},
     '"stream_options" must be an object, got string "yes"'),
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "stream_options": {"include_usage": "yes"}},
     '"stream_options.include_usage" must be true or false, got string "yes"'),
])
def test_the_endpoints_own_fields(server, path, body, why):
    r = post(server, path, body)
    assert r.status_code == 400 and r.json()["error"]["message"] == why


def test_llama_servers_special_values_work(server):
    greedy = post(server, "/completion", {"prompt": "hi", "n_predict": 6, "temperature": 0}).json()["content"]
    # was a 500 (NaN probabilities): the logits overflowed at 1e-320, now only the top one stays
    assert post(server, "/completion", {"prompt": "hi", "n_predict": 6, "temperature": 1e-320}).json()["content"] \
        == greedy
    for body in ({"seed": -1, "temperature": 0.8},  # was a 500 ("expected non-negative integer")
                 {"repeat_last_n": -1, "repeat_penalty": 1.3},
                 {"repeat_penalty": 1e-300, "temperature": 0.7}):
        r = post(server, "/completion", {"prompt": "hi", "n_predict": 4, **body})
        # sampled with a random seed, the end-of-text token may come before the fourth
        assert r.status_code == 200 and 1 <= r.json()["tokens_predicted"] <= 4, (body, r.text)
    r = post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 3, "stream": False, "seed": -1,
                                              "temperature": 1e-320})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
