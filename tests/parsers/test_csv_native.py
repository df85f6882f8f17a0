"""The native reader of well-formed CSV rows (parsers/csv_native.c): every number it accepts is
exactly ``float(cell)``, every form it does not accept is refused for the line reader, and a
chunk with more long numbers than it fixes up goes to the orjson reader."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers import csv_native
from bmoe_top.parsers import token_csv as tc
from bmoe_top.parsers.csv_native import FIXUPS_FULL, MALFORMED

READER = csv_native.reader()
pytestmark = pytest.mark.skipif(READER is None, reason=f"no native CSV reader: {csv_native.native_error}")

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(text: str, ncol: int, delim: str = ",", dec: str = ".", fixups: int = 64):
    out = np.full((ncol, text.count("\n") + 1), -7.0)
    fix = np.zeros((fixups, 4), dtype=np.int64)
    assert READER is not None
    got, nfix = READER.rows(text.encode(), ncol, ord(delim), ord(dec), out, 0, fix)
    return got, out, fix[:nfix]


def bits(v: float) -> bytes:
    return struct.pack("<d", v)


# numbers in the forms writers use: fixed decimals, repr (up to 17 digits), exponents, integers,
# signs, leading zeros, a bare fraction or a bare point
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
cell = st.one_of(
    finite.map(repr),
    finite.filter(lambda v: abs(v) < 1e12).map(lambda v: f"{v:.3f}"),
    finite.map(lambda v: f"{v:e}"),
    finite.map(lambda v: f"{v:.17E}"),
    st.integers(-(10 ** 25), 10 ** 25).map(str),
    st.tuples(st.sampled_from(["", "+", "-"]), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6),
              st.sampled_from(["", "e5", "E-3", "e+022", "e-400", "e0"])).map(
        lambda t: f"{t[0]}{t[1]:07d}.{t[2]}{t[3]}"),
    st.sampled_from([".5", "5.", "-.25", "+7", "0", "-0", "-0.0", "00012", "1e22", "1e23", "9007199254740993",
                     "123456789012345678901234567890", "0.1e-21", "4.9406564584124654e-324", "1e-400"]),
)


@FAST
@given(st.integers(1, 6).flatmap(lambda n: st.lists(st.lists(cell, min_size=n, max_size=n),
                                                    min_size=1, max_size=20)))
def test_every_accepted_number_is_what_float_reads(rows):
    ncol = len(rows[0])
    text = "".join(",".join(r) + "\n" for r in rows)
    got, out, fix = run(text, ncol, fixups=ncol * len(rows))
    assert got == len(rows)
    for r, c, a, b in fix.tolist():
        assert math.isnan(out[c, r])
        out[c, r] = float(text[a:b])
    for i, row in enumerate(rows):
        for j, s in enumerate(row):
            assert bits(out[j, i]) == bits(float(s)), s


@pytest.mark.parametrize("text", [
    "1,2\n3\n",            # a short row
    "1,2,3\n",             # a long row
    "1,,2\n",              # an empty field
    "1,2,\n",              # a trailing separator
    "1,x\n",               # a letter
    "1,2",                 # no final line end
    "1,-\n",               # a sign alone
    "1,.\n",               # a point alone
    "1,1e\n",              # an exponent without digits
    "1,1.2.3\n",           # two points
    "1,--2\n",             # two signs
    "1, 2\n",              # a space
    "1,nan\n", "1,inf\n",  # not numbers here: the line reader decides what they are
])
def test_rows_that_are_not_well_formed_are_refused(text):
    assert run(text, 2)[0] == MALFORMED


def test_decimal_comma_with_a_semicolon_separator():
    got, out, _ = run("1;2,5;-0,125\n2;3,0;7\n", 3, delim=";", dec=",")
    assert got == 2
    assert out[:, :2].T.tolist() == [[1.0, 2.5, -0.125], [2.0, 3.0, 7.0]]


def test_more_long_numbers_than_the_fixup_table_holds_is_its_own_refusal():
    text = "0.30000000000000004,0.1\n" * 5
    assert run(text, 2, fixups=4)[0] == FIXUPS_FULL
    got, out, fix = run(text, 2, fixups=5)
    assert got == 5 and len(fix) == 5 and (out[1, :5] == 0.1).all()


def _body(lines: list[str]) -> bytes:
    return ("step,wall_ms,io_ms\n" + "".join(lines)).encode()


def test_long_numbers_past_the_fixup_table_are_read_by_orjson_and_equal(monkeypatch):
    monkeypatch.setattr(tc, "_NATIVE_FIXUPS", 3)
    lines = [f"{i},{i / 7!r},{i * 0.1!r}\n" for i in range(1, 3000)]
    t = tc.load_token_csv(_body(lines))
    assert t.n_rows == 2999 and not t.problems
    assert [bits(v) for v in t.columns["wall_ms"]] == [bits(i / 7) for i in range(1, 3000)]


def test_a_number_too_large_for_a_double_is_the_line_readers_problem():
    lines = [f"{i},{i}.5,1\n" for i in range(1, 101)]
    lines[40] = "41,1e400,1\n"
    t = tc.load_token_csv(_body(lines))
    assert t.n_rows == 100
    assert [p.lineno for p in t.problems] == [42] and "not finite" in t.problems[0].reason
    assert math.isnan(t.columns["wall_ms"][40]) and t.columns["io_ms"][40] == 1
    assert t.columns["wall_ms"][99] == 100.5


def test_every_well_formed_chunk_goes_to_the_native_reader(monkeypatch):
    """With the reader built, read_numeric_csv hands it every well-formed chunk (the orjson reader
    is not called), and the columns equal the orjson reader's."""
    monkeypatch.setattr(tc, "_CHUNK", 4096)
    lines = [f"{i},{i}.25,{i % 7}\n" for i in range(1, 20001)]
    data = _body(lines)
    orjson_calls: list[int] = []
    real = tc._fast_block

    def counted(chunk, ncol):
        orjson_calls.append(len(chunk))
        return real(chunk, ncol)

    monkeypatch.setattr(tc, "_fast_block", counted)
    native = tc.load_token_csv(data)
    assert not orjson_calls and native.n_rows == 20000
    monkeypatch.setattr(csv_native, "reader", lambda: None)
    plain = tc.load_token_csv(data)
    assert sum(orjson_calls) == len(data) - len("step,wall_ms,io_ms\n")
    for k in plain.columns:
        assert np.array_equal(plain.columns[k], native.columns[k])


def test_threads_reading_at_once_get_their_own_fixups():
    """The reader runs without the GIL and is shared: two threads loading files with long numbers
    at once each get exactly their own values."""
    import threading

    files = [_body([f"{i},{(i + k) / 7!r},{i}.5\n" for i in range(1, 4001)]) for k in (1, 2)]
    want = [[bits((i + k) / 7) for i in range(1, 4001)] for k in (1, 2)]
    bad: list[str] = []

    def load(j: int) -> None:
        for _ in range(15):
            t = tc.load_token_csv(files[j])
            if [bits(v) for v in t.columns["wall_ms"]] != want[j] or t.problems:
                bad.append(f"file {j}")

    threads = [threading.Thread(target=load, args=(j,)) for j in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []
