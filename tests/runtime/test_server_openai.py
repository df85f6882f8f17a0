"""The OpenAI-compatible API of ``bmoe-run serve`` driven by the official ``openai`` Python client
(a test extra): /v1/models, /v1/completions and /v1/chat/completions with the model's chat
template, with and without streaming; ``/metrics`` counts exactly the tokens the ``usage``
objects report; stop strings cut the answer the same way streamed and not."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from helpers.serve import Serve, scrape

KEY = "openai-test-key"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def server(tiny):
    s = Serve(tiny, "--cache-mb", "0.5", "--api-key", KEY)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60,
                      http_client=httpx.Client(trust_env=False, timeout=60))
    yield c
    c.close()


def counts(server) -> tuple[int, int]:
    m = scrape(server.url, headers={"Authorization": f"Bearer {KEY}"})
    return int(m.get("prompt_tokens")), int(m.get("tokens_predicted"))


def test_openai_client_and_metrics_count_exactly_its_tokens(server, client):
    model = client.models.list().data[0].id
    assert model == "tiny-q8_0.gguf"
    p0, g0 = counts(server)
    usage = []
    # completions, not streamed and streamed (greedy: the same text)
    c = client.completions.create(model=model, prompt="Hello, experts!", max_tokens=7)
    assert c.object == "text_completion" and len(c.choices) == 1 and c.choices[0].finish_reason in ("length", "stop")
    usage.append((c.usage.prompt_tokens, c.usage.completion_tokens))
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    parts, su = [], None
    for ch in client.completions.create(model=model, prompt="Hello, experts!", max_tokens=7, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.usage is not None:
            su = ch.usage
        for choice in ch.choices:
            parts.append(choice.text)
    assert "".join(parts) == c.choices[0].text and su is not None
    assert (su.prompt_tokens, su.completion_tokens) == usage[-1]
    usage.append((su.prompt_tokens, su.completion_tokens))
    # chat: the model's chat template through llama.cpp (chatml: this model carries none)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=9)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    want = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
    assert r.usage.prompt_tokens == len(want.encode())  # the byte-level test vocabulary: one token per byte
    usage.append((r.usage.prompt_tokens, r.usage.completion_tokens))
    deltas, roles, su, finish = [], [], None, None
    for ch in client.chat.completions.create(model=model, messages=msgs, max_tokens=9, stream=True,
                                             stream_options={"include_usage": True}):
        assert ch.object == "chat.completion.chunk"
        if ch.usage is not None:
            su = ch.usage
        for choice in ch.choices:
            roles.append(choice.delta.role)
            deltas.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert roles[0] == "assistant" and "".join(deltas) == r.choices[0].message.content
    assert finish == r.choices[0].finish_reason and su is not None
    usage.append((su.prompt_tokens, su.completion_tokens))
    # a stream without include_usage still counts on /metrics (its counts come from a twin request)
    n_plain = sum(1 for _ in client.chat.completions.create(model=model, messages=msgs, max_tokens=9, stream=True))
    assert n_plain >= 2
    usage.append(usage[-1])
    p1, g1 = counts(server)
    assert p1 - p0 == sum(u[0] for u in usage)
    assert g1 - g0 == sum(u[1] for u in usage)


def test_stop_strings_cut_the_answer_streamed_and_not(server, client):
    model = client.models.list().data[0].id
    full = client.completions.create(model=model, prompt="stop strings", max_tokens=24).choices[0].text
    stop = next((full[i:i + 2] for i in range(4, len(full) - 2) if full[i:i + 2].strip()), None)
    if stop is None:
        pytest.skip("the greedy answer has no printable pair to stop on")
    want = full[: full.find(stop)]
    c = client.completions.create(model=model, prompt="stop strings", max_tokens=24, stop=[stop])
    assert c.choices[0].text == want and c.choices[0].finish_reason == "stop"
    got = "".join(ch.choices[0].text for ch in client.completions.create(
        model=model, prompt="stop strings", max_tokens=24, stop=stop, stream=True) if ch.choices)
    assert got == want


def test_errors_are_openai_errors(server, client):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0,
                        http_client=httpx.Client(trust_env=False, timeout=30))
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    bad.close()
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="m", prompt="x" * 600, max_tokens=4)  # > n_ctx 512
    assert "n_ctx" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[], max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt="x", max_tokens=4, temperature=-1)
    # per-request sampling: a seed makes a sampled answer reproducible
    a, b = (client.completions.create(model="m", prompt="sample", max_tokens=8, temperature=0.9, seed=7)
            .choices[0].text for _ in range(2))
    assert a == b
