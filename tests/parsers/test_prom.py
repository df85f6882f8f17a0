"""parsers/prom.py: every exposition edge case of issue #5, and the rates between scrapes."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.parsers.prom import (
    SERIES,
    SERIES_BY_KEY,
    PromFormatError,
    _series_text,
    compute_delta,
    parse_exposition,
    split_series,
)


def body(hits=100, misses=50, tokens=10, n_layer=4, layer_hits=None, layer_misses=None, extra=""):
    lines = [
        "# HELP llamacpp:moe_cache_hits_total n_hit",
        "# TYPE llamacpp:moe_cache_hits_total counter",
        f"llamacpp:moe_cache_hits_total {hits}",
        "# HELP llamacpp:moe_cache_misses_total n_miss",
        "# TYPE llamacpp:moe_cache_misses_total counter",
        f"llamacpp:moe_cache_misses_total {misses}",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total {tokens}",
        "# TYPE llamacpp:moe_cache_layer_hits_total counter",
    ]
    lh = layer_hits or [10 * (i + 1) for i in range(n_layer)]
    lm = layer_misses or [5] * n_layer
    lines += [f'llamacpp:moe_cache_layer_hits_total{{layer="{i}"}} {v}' for i, v in enumerate(lh)]
    lines.append("# TYPE llamacpp:moe_cache_layer_misses_total counter")
    lines += [f'llamacpp:moe_cache_layer_misses_total{{layer="{i}"}} {v}' for i, v in enumerate(lm)]
    return "\n".join(lines) + "\n" + extra


def test_basic_values_and_layers():
    s = parse_exposition(body(), t=1.0)
    assert s.get("hits") == 100 and s.get("misses") == 50 and s.get("tokens_predicted") == 10
    assert s.layers["layer_hits"] == {0: 10, 1: 20, 2: 30, 3: 40}
    assert s.layer_count() == 4
    assert s.types["hits"] == "counter"
    assert not s.bad_lines and not s.json_quoted


def test_not_exported_is_none_never_zero():
    s = parse_exposition(body(), t=1.0)
    assert s.get("swaps") is None
    assert not s.exported("swaps")
    assert "layer_hits_profile" not in s.layers
    s2 = parse_exposition(body(tokens=20), t=2.0)
    d = compute_delta(s, s2)
    assert d.swaps is None  # not exported -> no number
    assert d.read_mib_s is None
    assert d.token_ms == {"wall": None, "io": None, "stall": None, "mgmt": None, "compute": None}
    assert d.tok_s == pytest.approx(10.0)


def test_nan_and_inf_values():
    extra = (
        "# TYPE llamacpp:moe_cache_hit_ratio gauge\nllamacpp:moe_cache_hit_ratio nan\n"
        "# TYPE llamacpp:moe_cache_bytes gauge\nllamacpp:moe_cache_bytes +Inf\n"
        "# TYPE llamacpp:moe_cache_slots gauge\nllamacpp:moe_cache_slots -Inf\n"
        "# TYPE llamacpp:moe_cache_copies_total counter\nllamacpp:moe_cache_copies_total -nan\n"
    )
    s = parse_exposition(body(extra=extra), t=1)
    assert math.isnan(s.get("hit_ratio"))
    assert s.get("cache_bytes") == math.inf
    assert s.get("slots") == -math.inf
    assert math.isnan(s.get("copies"))
    # hit % since start falls back to the counters when the gauge is NaN
    s2 = parse_exposition(body(hits=130, misses=70, tokens=12, extra=extra), t=2)
    d = compute_delta(s, s2)
    assert d.hit_pct_total == pytest.approx(100 * 130 / 200)
    assert d.hit_pct == pytest.approx(100 * 30 / 50)
    assert "copies" not in d.d  # NaN counter gives no difference


def test_extra_and_reordered_labels_device():
    text = (
        "# TYPE llamacpp:moe_cache_hits_total counter\n"
        'llamacpp:moe_cache_hits_total{device="CUDA0"} 60\n'
        'llamacpp:moe_cache_hits_total{device="CUDA1"} 40\n'
        "# TYPE llamacpp:moe_cache_layer_hits_total counter\n"
        'llamacpp:moe_cache_layer_hits_total{device="CUDA0",layer="3"} 7\n'
        'llamacpp:moe_cache_layer_hits_total{layer="3",device="CUDA1"} 5\n'
        'llamacpp:moe_cache_layer_hits_total{ layer="1" , model="x"} 2\n'
    )
    s = parse_exposition(text, 0)
    assert s.get("hits") == 100
    assert s.layers["layer_hits"] == {3: 12, 1: 2}
    assert s.layer_count() == 4


def test_escaped_label_values():
    text = (
        "# TYPE llamacpp:moe_cache_layer_misses_total counter\n"
        'llamacpp:moe_cache_layer_misses_total{layer="2",device="a \\"quoted\\" \\\\ back\\nslash"} 9\n'
        'llamacpp:moe_cache_layer_misses_total{device="},{=",layer="0"} 4\n'
    )
    s = parse_exposition(text, 0)
    assert s.layers["layer_misses"] == {2: 9, 0: 4}
    assert not s.bad_lines


def test_total_suffix_renamed_by_parser():
    # counter declared without _total: the parser appends it to the sample; declared with
    # _total: the family is renamed; untyped: name kept. All land on the reference's series.
    text = (
        "# TYPE llamacpp:moe_cache_hits counter\nllamacpp:moe_cache_hits 5\n"
        "# TYPE llamacpp:moe_cache_misses_total counter\nllamacpp:moe_cache_misses_total 6\n"
        "llamacpp:moe_cache_swaps_total 7\n"
        "llamacpp:tokens_predicted 8\n"
    )
    s = parse_exposition(text, 0)
    assert (s.get("hits"), s.get("misses"), s.get("swaps"), s.get("tokens_predicted")) == (5, 6, 7, 8)
    assert s.types["swaps"] == "unknown"


def test_json_quoted_body_decoded_once():
    inner = body()
    quoted = orjson.dumps(inner)
    s = parse_exposition(quoted, 3.0)
    assert s.json_quoted
    assert s.get("hits") == 100 and s.layers["layer_hits"][3] == 40
    # decoded once only: a JSON string holding a JSON string stays one level decoded -> malformed
    with pytest.raises(PromFormatError):
        parse_exposition(orjson.dumps(orjson.dumps(inner).decode()), 0)


def test_bad_line_counted_neighbours_kept():
    text = body().replace('llamacpp:moe_cache_layer_hits_total{layer="1"} 20',
                          'llamacpp:moe_cache_layer_hits_total{layer="1} 20')
    s = parse_exposition(text, 0)
    assert len(s.bad_lines) == 1
    lineno, msg = s.bad_lines[0]
    assert text.split("\n")[lineno - 1].startswith('llamacpp:moe_cache_layer_hits_total{layer="1}')
    assert s.layers["layer_hits"] == {0: 10, 2: 30, 3: 40}
    assert s.get("hits") == 100 and s.get("misses") == 50


def test_bad_layer_label_counted():
    text = "# TYPE llamacpp:moe_cache_layer_hits_total counter\nllamacpp:moe_cache_layer_hits_total{layer=\"x\"} 1\n"
    s = parse_exposition(text, 0)
    assert s.bad_lines and s.bad_lines[0][0] >= 1
    assert "layer_hits" not in s.layers


def test_garbage_is_malformed_empty_is_not():
    with pytest.raises(PromFormatError) as ei:
        parse_exposition("<html><body>502 Bad Gateway</body></html>", 0)
    assert "line 1" in str(ei.value)
    with pytest.raises(PromFormatError):
        parse_exposition(b'{"error": "nope"}', 0)
    s = parse_exposition("", 0)
    assert s.n_samples == 0 and s.get("hits") is None


def test_bytes_with_bom_and_crlf():
    s = parse_exposition(b"\xef\xbb\xbf" + body().replace("\n", "\r\n").encode(), 0)
    assert s.get("hits") == 100 and s.layers["layer_misses"][0] == 5


def test_counter_goes_down_is_new_baseline_never_negative():
    a = parse_exposition(body(hits=1000, misses=500, tokens=200), 1)
    b = parse_exposition(body(hits=30, misses=10, tokens=4), 2)
    d = compute_delta(a, b)
    assert d.reset
    assert d.tok_s is None and d.hit_pct is None and d.read_mib_s is None
    assert all(v is None for v in d.layer_hit_pct)
    c = parse_exposition(body(hits=60, misses=20, tokens=8), 3)
    d2 = compute_delta(b, c)
    assert not d2.reset and d2.tok_s == pytest.approx(4.0) and d2.hit_pct == pytest.approx(75.0)


def test_layer_only_reset_detected():
    a = parse_exposition(body(layer_hits=[10, 20, 30, 40]), 1)
    b = parse_exposition(body(layer_hits=[11, 2, 31, 41]), 2)
    assert compute_delta(a, b).reset


def test_process_start_change_is_reset():
    ex1 = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1000\n"
    ex2 = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 2000\n"
    a = parse_exposition(body(extra=ex1), 1)
    b = parse_exposition(body(hits=200, extra=ex2), 2)
    assert compute_delta(a, b).reset


def test_rates_and_time_breakdown():
    def full(k):
        return (
            body(hits=100 * k, misses=25 * k, tokens=10 * k,
                 layer_hits=[3 * k, 0, 5 * k, 1 * k], layer_misses=[1 * k, 0, 5 * k, 0])
            + "# TYPE llamacpp:moe_cache_upload_bytes_total counter\n"
            + f"llamacpp:moe_cache_upload_bytes_total {k * 8 * 1048576}\n"
            + f"# TYPE bmoe:timed_tokens_total counter\nbmoe:timed_tokens_total {10 * k}\n"
            + f"# TYPE bmoe:token_wall_seconds_total counter\nbmoe:token_wall_seconds_total {0.5 * k}\n"
            + f"# TYPE bmoe:token_io_seconds_total counter\nbmoe:token_io_seconds_total {0.2 * k}\n"
            + f"# TYPE bmoe:token_mgmt_seconds_total counter\nbmoe:token_mgmt_seconds_total {0.05 * k}\n"
            + f"# TYPE bmoe:token_compute_seconds_total counter\nbmoe:token_compute_seconds_total {0.25 * k}\n"
        )
    a, b = parse_exposition(full(1), 10.0), parse_exposition(full(3), 12.0)
    d = compute_delta(a, b)
    assert d.dt_s == 2.0 and not d.reset
    assert d.tok_s == pytest.approx(10.0)
    assert d.hit_pct == pytest.approx(80.0)
    assert d.read_mib_s == pytest.approx(8.0)
    assert d.layer_hit_pct[0] == pytest.approx(75.0)
    assert d.layer_hit_pct[1] is None  # no lookups in that layer: no number, not 0
    assert d.layer_hit_pct[2] == pytest.approx(50.0)
    assert d.layer_hit_pct[3] == pytest.approx(100.0)
    assert d.token_ms["wall"] == pytest.approx(50.0)
    assert d.token_ms["io"] == pytest.approx(20.0)
    assert d.token_ms["mgmt"] == pytest.approx(5.0)
    assert d.token_ms["compute"] == pytest.approx(25.0)
    assert d.token_ms["stall"] is None  # not exported


def test_series_catalogue_names_are_exact():
    names = {s.name for s in SERIES}
    for n in ("llamacpp:moe_cache_hits_total", "llamacpp:moe_cache_hits_profile_total",
              "llamacpp:moe_cache_misses_total", "llamacpp:moe_cache_upload_bytes_total",
              "llamacpp:moe_cache_cpu_bytes_total", "llamacpp:moe_cache_copies_total",
              "llamacpp:moe_cache_swaps_total", "llamacpp:moe_cache_hit_ratio", "llamacpp:moe_cache_slots",
              "llamacpp:moe_cache_prefilled", "llamacpp:moe_cache_bytes", "llamacpp:moe_cache_hybrid",
              "llamacpp:moe_cache_layer_hits_total", "llamacpp:moe_cache_layer_hits_profile_total",
              "llamacpp:moe_cache_layer_misses_total", "llamacpp:prompt_tokens_total",
              "llamacpp:tokens_predicted_total", "llamacpp:prompt_seconds_total",
              "llamacpp:tokens_predicted_seconds_total"):
        assert n in names
    for s in SERIES:
        assert (s.type == "counter") == s.name.endswith("_total"), s.name
    assert SERIES_BY_KEY["layer_hits"].per_layer


def test_roundtrip_through_prometheus_client_writer_any_label_text():
    """Property: whatever label text a server puts beside ``layer`` (quotes, backslashes,
    newlines, unicode), what prometheus-client writes parses back to the same per-layer sums."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily
    from prometheus_client.registry import Collector

    values = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)

    @settings(max_examples=60, deadline=None)
    @given(devs=st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=3, unique=True),
           vals=st.lists(st.lists(values, min_size=3, max_size=3), min_size=3, max_size=3))
    def check(devs, vals):
        class C(Collector):
            def collect(self):
                f = CounterMetricFamily("llamacpp:moe_cache_layer_hits", "h", labels=["device", "layer"])
                for d, dev in enumerate(devs):
                    for il in range(3):
                        f.add_metric([dev, str(il)], vals[d][il])
                yield f

        reg = CollectorRegistry()
        reg.register(C())
        snap = parse_exposition(generate_latest(reg), 0)
        assert not snap.bad_lines
        for il in range(3):
            want = sum(vals[d][il] for d in range(len(devs)))
            assert math.isclose(snap.layers["layer_hits"][il], want, rel_tol=1e-12, abs_tol=1e-6)

    check()


def test_duplicate_series_last_wins_with_a_note_never_the_sum():
    text = ("# TYPE llamacpp:moe_cache_hits_total counter\n"
            "llamacpp:moe_cache_hits_total 100\nllamacpp:moe_cache_hits_total 250\n"
            "# TYPE llamacpp:moe_cache_layer_hits_total counter\n"
            'llamacpp:moe_cache_layer_hits_total{layer="0"} 5\nllamacpp:moe_cache_layer_hits_total{layer="0"} 7\n'
            'llamacpp:moe_cache_layer_hits_total{layer="1",device="a"} 1\n'
            'llamacpp:moe_cache_layer_hits_total{layer="1",device="b"} 2\n'
            "# TYPE llamacpp:tokens_predicted_total counter\n"
            'llamacpp:tokens_predicted_total{slot="0"} 3\nllamacpp:tokens_predicted_total{slot="1"} 4\n')
    s = parse_exposition(text, 0)
    assert s.get("hits") == 250  # not 350
    assert s.layers["layer_hits"] == {0: 7, 1: 3}  # the duplicate replaced; two devices summed
    assert s.get("tokens_predicted") == 7  # two label sets: summed, not a duplicate
    assert len(s.notes) == 2 and all("duplicate series" in n and "last value" in n for n in s.notes)
    assert any("llamacpp:moe_cache_hits_total" in n for n in s.notes)
    assert not s.bad_lines


def test_duplicates_across_blocks_of_a_body_that_needs_the_slow_path():
    text = ("# TYPE llamacpp:moe_cache_misses_total counter\nllamacpp:moe_cache_misses_total 10\n"
            "this line is broken {\n"
            "# TYPE llamacpp:moe_cache_misses_total counter\nllamacpp:moe_cache_misses_total 12\n")
    s = parse_exposition(text, 0)
    assert s.get("misses") == 12 and s.bad_lines and s.notes


def test_series_the_parser_does_not_know_are_kept():
    text = ("# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total 64\n"
            "# TYPE vendor_temp gauge\n"
            'vendor_temp{sensor="gpu",zone="a\\"b"} 71.5\nvendor_temp{sensor="cpu"} 55\n'
            "llamacpp:moe_cache_hits_total 1\n")
    s = parse_exposition(text, 0)
    assert s.others == {"llamacpp:prompt_tokens_cached_total": 64.0,
                        'vendor_temp{sensor="gpu",zone="a\\"b"}': 71.5, 'vendor_temp{sensor="cpu"}': 55.0}
    assert s.other_types["vendor_temp"] == "gauge"
    assert "vendor_temp" in s.unknown and s.get("hits") == 1


def test_absurd_layer_label_is_refused_and_allocates_nothing():
    text = ("# TYPE llamacpp:moe_cache_layer_hits_total counter\n"
            'llamacpp:moe_cache_layer_hits_total{layer="4000000000"} 5\n'
            'llamacpp:moe_cache_layer_hits_total{layer="1"} 5\n')
    s = parse_exposition(text, 0)
    assert s.layer_count() == 2
    assert s.bad_lines and "cap" in s.bad_lines[0][1] and s.bad_lines[0][0] == 2
    d = compute_delta(s, parse_exposition(text, 1))
    assert len(d.layer_hit_pct) == 2


@given(name=st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True),
       labels=st.dictionaries(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
                              st.text(max_size=12), max_size=4))
def test_split_series_reads_back_what_a_series_is_named(name, labels):
    assert split_series(_series_text(name, labels)) == (name, labels)
