"""Decoding Prometheus API answers and durations (pure, hypothesis): any body is either data or
a classified PromError, never another exception; durations round-trip."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.tui.sources.prometheus import (
    BODY_MAX,
    PromError,
    PromErrorKind,
    decode_answer,
    decode_matrix,
    decode_vector,
    format_duration,
    parse_duration,
)

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                           max_leaves=20)


@given(status=st.sampled_from([200, 400, 404, 422, 500, 502, 503]), body=st.binary(max_size=300))
def test_any_body_is_data_or_a_classified_error(status, body):
    try:
        decode_answer(status, body, "q")
    except PromError as e:
        assert isinstance(e.kind, PromErrorKind) and e.query == "q"
        assert e.body is None or len(e.body) <= BODY_MAX


@given(data=json_values)
def test_any_json_data_decodes_or_is_malformed(data):
    for fn in (decode_vector, decode_matrix):
        try:
            fn(data, "q")
        except PromError as e:
            assert e.kind is PromErrorKind.MALFORMED


@given(doc=st.fixed_dictionaries({"status": st.just("error"), "errorType": st.text(max_size=20),
                                  "error": st.text(max_size=50)}))
def test_error_documents_keep_their_type_and_message(doc):
    with pytest.raises(PromError) as ei:
        decode_answer(400, orjson.dumps(doc), "q")
    e = ei.value
    assert e.error_type == (doc["errorType"] or None)
    expected = {"bad_data": PromErrorKind.BAD_DATA, "timeout": PromErrorKind.TIMEOUT,
                "execution": PromErrorKind.EXECUTION}.get(doc["errorType"], PromErrorKind.ERROR)
    if expected is PromErrorKind.EXECUTION and "too many samples" in doc["error"]:
        expected = PromErrorKind.TOO_MANY_SAMPLES
    assert e.kind is expected


def test_known_shapes():
    data, warn = decode_answer(200, b'{"status":"success","data":{"resultType":"vector","result":['
                                    b'{"metric":{"job":"x"},"value":[1.5,"NaN"]}]},"warnings":["w"]}')
    assert warn == ["w"]
    [s] = decode_vector(data)
    assert s.labels == {"job": "x"} and s.t == 1.5 and math.isnan(s.v)
    [r] = decode_matrix({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "+Inf"], [2, "3"]]}]})
    assert r.t.tolist() == [1, 2] and r.v.tolist() == [math.inf, 3]
    with pytest.raises(PromError) as ei:
        decode_answer(502, b"<html>bad gateway</html>")
    assert ei.value.kind is PromErrorKind.HTTP and ei.value.body == "<html>bad gateway</html>"
    with pytest.raises(PromError) as ei:
        decode_vector({"resultType": "matrix", "result": []})
    assert ei.value.kind is PromErrorKind.MALFORMED
    with pytest.raises(PromError):
        decode_vector({"resultType": "vector", "result": [{"metric": {"a": 1}, "value": [1, "1"]}]})
    with pytest.raises(PromError):
        decode_matrix({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "x"]]}]})
    with pytest.raises(PromError) as ei:
        decode_answer(500, b"x" * (BODY_MAX * 3))
    assert len(ei.value.body) == BODY_MAX


@pytest.mark.parametrize(("text", "s"), [("1s", 1), ("500ms", 0.5), ("1m30s", 90), ("2h", 7200), ("1d", 86400),
                                         ("1h2m3s4ms", 3723.004)])
def test_durations(text, s):
    assert parse_duration(text) == pytest.approx(s)


@pytest.mark.parametrize("bad", ["", "1", "1.5s", "s", "1s1", "-1s", "1 s", "1S"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@given(ms=st.integers(1, 10**11))
def test_duration_round_trip(ms):
    assert parse_duration(format_duration(ms / 1000)) == pytest.approx(ms / 1000)


@given(text=st.text(max_size=20))
def test_parse_duration_raises_only_value_error(text):
    try:
        assert parse_duration(text) >= 0
    except ValueError:
        pass


def test_format_duration_refuses_nonpositive():
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError):
            format_duration(bad)
