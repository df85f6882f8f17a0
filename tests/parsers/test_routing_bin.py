"""The binary routing-trace reader (moe-cache-reference.md "Routing trace format"): round trips,
every record before a bad one kept, random bytes never raise, both record orders."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.routing_bin import K_MAX, looks_like_routing_bin, parse_routing_bin, routing_bin_bytes

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_layer = draw(st.integers(1, 6))
    n_tok = draw(st.integers(1, 8))
    k = draw(st.integers(1, 8))
    n_expert = draw(st.integers(k, 40))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    layer = np.tile(np.arange(n_layer), n_tok)
    experts = np.stack([rng.choice(n_expert, size=k, replace=False) for _ in layer])
    weights = rng.random(experts.shape).astype(np.float32)
    return layer, experts, weights


@FAST
@given(traces())
def test_round_trip(t: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    layer, experts, weights = t
    rb = parse_routing_bin(routing_bin_bytes(layer, experts, weights))
    assert not rb.problems
    assert np.array_equal(rb.layer, layer) and np.array_equal(rb.experts, experts)
    assert np.array_equal(rb.weights, weights)
    n_layer = int(layer.max()) + 1
    assert rb.n_layer == n_layer and rb.n_tokens == len(layer) // n_layer
    assert np.array_equal(rb.token, np.repeat(np.arange(rb.n_tokens), n_layer))
    r = rb.routing()
    assert r.shape == (rb.n_tokens, n_layer, experts.shape[1])
    assert np.array_equal(r.reshape(-1, experts.shape[1]), experts)


@FAST
@given(traces(), st.binary(min_size=1, max_size=64))
def test_good_records_survive_a_bad_tail(t: tuple[np.ndarray, np.ndarray, np.ndarray], tail: bytes) -> None:
    layer, experts, _w = t
    data = routing_bin_bytes(layer, experts) + tail
    rb = parse_routing_bin(data, n_expert=int(experts.max()) + 1)
    assert rb.n_records >= len(layer)
    assert np.array_equal(rb.experts[: len(layer), : experts.shape[1]], experts)
    if rb.bytes_used < len(data):
        assert len(rb.problems) == 1 and "byte" in rb.problems[0].text


@FAST
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes) -> None:
    rb = parse_routing_bin(data)
    assert rb.bytes_used <= len(data)
    assert rb.n_records == 0 or rb.k.max() <= K_MAX
    assert (rb.bytes_used == len(data)) or rb.problems
    looks_like_routing_bin(data)


def test_mixed_k_layer_major_and_cut_off() -> None:
    # a batch written layer by layer (two tokens), layer 1 with k = 3, then a cut-off record
    recs = [routing_bin_bytes([0], [[1, 2]]), routing_bin_bytes([0], [[3, 4]]),
            routing_bin_bytes([1], [[5, 6, 7]]), routing_bin_bytes([1], [[0, 1, 2]])]
    data = b"".join(recs) + routing_bin_bytes([0], [[9, 9]])[:10]
    rb = parse_routing_bin(data)
    assert rb.n_records == 4 and rb.k.tolist() == [2, 2, 3, 3]
    assert rb.token.tolist() == [0, 1, 0, 1]
    assert rb.experts.tolist() == [[1, 2, -1], [3, 4, -1], [5, 6, 7], [0, 1, 2]]
    assert len(rb.problems) == 1 and "cut-off" in rb.problems[0].reason
    assert rb.bytes_used == sum(len(r) for r in recs)
    r = rb.routing()
    assert r[1, 0].tolist() == [3, 4, -1] and r[0, 1].tolist() == [5, 6, 7]


def test_range_checks_with_the_model_shape() -> None:
    data = routing_bin_bytes([0, 1, 0], [[1, 2], [3, 9], [4, 5]])
    assert parse_routing_bin(data).n_records == 3
    rb = parse_routing_bin(data, n_expert=8)
    assert rb.n_records == 1 and "out of range" in rb.problems[0].reason
    assert parse_routing_bin(data, n_layer=1).n_records == 1
    assert not looks_like_routing_bin(b"# route_trace v1\nturn,phase,step\n")
    assert looks_like_routing_bin(data)
