"""Per-token CSVs damaged the ways real files get damaged keep every good row: a damaged header byte,
a stray line before the header, a lost ``#``, NUL bytes, decimal commas, ragged rows (issue: "Files
that lose nothing"). Each case starts from the same 1,000-row file and says which rows are good."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers.synth import token_csv

from bmoe_top.parsers.sniff import sniff
from bmoe_top.parsers.token_csv import load_token_csv

# every case runs with each fast reader (tests/parsers/conftest.py)
pytestmark = pytest.mark.usefixtures("both_readers")

N = 1000
CLEAN = token_csv(N, seed=5)
LINES = CLEAN.decode().split("\n")
HEADER_AT = next(i for i, ln in enumerate(LINES) if ln.startswith("step,"))
HEADER = LINES[HEADER_AT]
NAMES = HEADER.split(",")
GOOD = load_token_csv(CLEAN)


def _with_lines(fn) -> bytes:
    lines = list(LINES)
    fn(lines)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _rows(i: int) -> int:
    """Line index of data row i (0-based)."""
    return HEADER_AT + 1 + i


def _header(new: str) -> bytes:
    return _with_lines(lambda ls: ls.__setitem__(HEADER_AT, new))


def assert_same_rows(t, rows=range(N), names=NAMES):
    """Every row in ``rows`` has the clean file's values in every column of ``names``."""
    rows = list(rows)
    assert t.n_rows == len(rows), (t.n_rows, [(p.lineno, p.reason) for p in t.problems[:5]])
    for name in names:
        got = t.columns[name]
        want = GOOD.columns[name][rows]
        assert np.array_equal(got, want, equal_nan=True), name


def test_clean_file_is_what_the_cases_start_from():
    assert GOOD.n_rows == N and not GOOD.problems and GOOD.header == NAMES
    assert GOOD.summary["tokens"] == N


# --- one damaged byte in the header -------------------------------------------------------------

HEADER_DAMAGE = {
    "letter_in_step": HEADER.replace("step,", "stap,", 1),
    "letter_in_wall": HEADER.replace("wall_ms", "wXll_ms"),
    "comma_to_dot": HEADER.replace("io_ms,compute_ms", "io_ms.compute_ms"),
    "comma_to_semicolon": HEADER.replace("read_bytes,cache", "read_bytes;cache"),
    "letter_to_comma": HEADER.replace("wall_ms", "wa,l_ms"),
    "invalid_utf8": HEADER.replace("mgmt_ms", "mgm\udcff_ms"),
    "nul": HEADER.replace("stall_ms", "st\x00ll_ms"),
    "first_byte_hash": "#" + HEADER[1:],
    "space": HEADER.replace("compute_ms", "compute ms"),
}


@pytest.mark.parametrize("case", sorted(HEADER_DAMAGE))
def test_one_damaged_header_byte_keeps_every_row(case):
    data = _header(HEADER_DAMAGE[case])
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert t.header == NAMES
    assert_same_rows(t)
    assert any("header" in p.reason for p in t.problems)  # the repair is said, not silent


def test_header_split_by_a_newline_byte():
    data = _header(HEADER.replace("wall_ms", "wall\nms"))
    t = load_token_csv(data)
    assert sniff(data) == "token_csv" and t.header == NAMES
    assert_same_rows(t)


# --- stray lines, lost '#' ----------------------------------------------------------------------

@pytest.mark.parametrize("where", ["file_start", "before_header"])
def test_stray_line_before_the_header(where):
    at = 0 if where == "file_start" else HEADER_AT
    data = _with_lines(lambda ls: ls.insert(at, "Saving results to run.csv ... done"))
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert t.header == NAMES and t.meta["arch"] == "qwen3moe"
    assert_same_rows(t)
    assert [p.reason for p in t.problems if "stray" in p.reason]


@pytest.mark.parametrize("line", [0, 1, 2])
def test_lost_hash_on_a_header_comment(line):
    data = _with_lines(lambda ls: ls.__setitem__(line, ls[line].lstrip("# ")))
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert t.header == NAMES
    assert_same_rows(t)
    assert t.meta == GOOD.meta  # the line is still read as the comment it was
    assert any("'#'" in p.reason for p in t.problems)


def test_lost_hash_on_the_summary_line():
    at = next(i for i, ln in enumerate(LINES) if ln.startswith("# summary"))
    t = load_token_csv(_with_lines(lambda ls: ls.__setitem__(at, ls[at][2:])))
    assert_same_rows(t)
    assert t.summary == GOOD.summary


# --- NUL bytes ----------------------------------------------------------------------------------

def test_stray_nul_bytes_cost_only_their_cells():
    hit = [7, 100, 555, 999]

    def put(ls):
        for i in hit:
            cells = ls[_rows(i)].split(",")
            cells[3] = cells[3][:2] + "\x00" + cells[3][2:]  # io_ms
            ls[_rows(i)] = ",".join(cells)
    t = load_token_csv(_with_lines(put))
    assert_same_rows(t, names=[n for n in NAMES if n != "io_ms"])
    io = t.columns["io_ms"]
    assert np.isnan(io[hit]).all() and np.isfinite(np.delete(io, hit)).all()
    assert sorted(p.lineno for p in t.problems) == [_rows(i) + 1 for i in hit]


def test_zero_filled_block_loses_only_the_rows_it_overwrote():
    start = CLEAN.index(LINES[_rows(400)].encode()) + 10  # mid-row 400
    end = CLEAN.index(LINES[_rows(410)].encode()) + 5     # into row 410
    data = CLEAN[:start] + b"\x00" * (end - start) + CLEAN[end:]
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    good = [i for i in range(N) if not 400 <= i <= 410]
    assert_same_rows(t, good)
    assert t.summary == GOOD.summary
    assert any("NUL" in p.reason for p in t.problems)


def test_nul_padding_after_a_crash():
    data = CLEAN + b"\x00" * 8192
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert_same_rows(t)


def test_nul_block_over_the_file_start():
    data = b"\x00" * 4096 + CLEAN
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert_same_rows(t)


def test_utf16_without_a_byte_order_mark():
    data = CLEAN.decode().encode("utf-16-le")
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert_same_rows(t) and t.meta == GOOD.meta and not t.problems


# --- decimal commas -----------------------------------------------------------------------------

_DECIMAL = re.compile(r"(\d)\.(\d)")


def _decimal_comma_lines(sep: str, quote: bool) -> bytes:
    def conv(ls):
        for i in range(HEADER_AT, HEADER_AT + 1 + N):
            cells = ls[i].split(",")
            if i > HEADER_AT:
                cells = [_DECIMAL.sub(r"\1,\2", c) for c in cells]
                if quote:
                    cells = [f'"{c}"' if "," in c else c for c in cells]
            ls[i] = sep.join(cells)
    return _with_lines(conv)


@pytest.mark.parametrize("sep,quote", [(";", False), ("\t", False), (",", True), (",", False)],
                         ids=["semicolon", "tab", "comma_quoted", "comma_unquoted"])
def test_decimal_commas_from_locale_writers(sep, quote):
    data = _decimal_comma_lines(sep, quote)
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert t.header == NAMES
    assert_same_rows(t)


def test_decimal_comma_unquoted_with_an_integral_value_is_resolved_by_the_column_formats():
    # a row whose stall_ms was written without decimals: "0" instead of "0,000"
    data = _decimal_comma_lines(",", False)
    lines = data.decode().split("\n")
    cells = lines[_rows(10)].split(",")
    assert cells[-4:-2] == ["0", "000"]  # stall_ms = 0,000
    lines[_rows(10)] = ",".join(cells[:-3] + cells[-2:])
    t = load_token_csv("\n".join(lines).encode())
    assert_same_rows(t)


def test_dot_decimals_with_extra_fields_are_not_mistaken_for_decimal_commas():
    data = _with_lines(lambda ls: ls.__setitem__(_rows(3), ls[_rows(3)] + ",7"))
    t = load_token_csv(data)
    assert_same_rows(t)
    assert t.header == NAMES + ["unnamed_10"]
    extra = t.columns["unnamed_10"]
    assert extra[3] == 7 and np.isnan(np.delete(extra, 3)).all()


# --- ragged rows --------------------------------------------------------------------------------

def test_short_rows_keep_their_fields_the_missing_ones_are_absent():
    short = [0, 50, 51, 998]

    def cut(ls):
        for i in short:
            ls[_rows(i)] = ",".join(ls[_rows(i)].split(",")[:6])
    t = load_token_csv(_with_lines(cut))
    assert_same_rows(t, names=NAMES[:6])
    for name in NAMES[6:]:
        col = t.columns[name]
        assert np.isnan(col[short]).all()
        assert np.array_equal(np.delete(col, short), np.delete(GOOD.columns[name], short))
    notes = [p for p in t.problems if "fields" in p.reason]
    assert notes and sum(int(re.search(r"(\d+) rows?", p.reason).group(1)) for p in notes) == len(short)


def test_an_older_header_with_fewer_names_than_every_row():
    t = load_token_csv(_header(",".join(NAMES[:8])))
    assert t.header == NAMES[:8] + ["unnamed_9"]
    assert_same_rows(t, names=NAMES[:8])
    assert np.array_equal(t.columns["unnamed_9"], GOOD.columns["mgmt_ms"])


def test_extras_over_the_column_cap_are_dropped_with_a_note():
    from bmoe_top.parsers.limits import MAX_CSV_COLUMNS
    data = _with_lines(lambda ls: ls.__setitem__(_rows(2), ls[_rows(2)] + ",1" * (MAX_CSV_COLUMNS + 50)))
    t = load_token_csv(data)
    assert len(t.header) == MAX_CSV_COLUMNS
    assert_same_rows(t)
    assert any("cap" in p.reason for p in t.problems)


# --- the smallest per-token CSV -----------------------------------------------------------------

@pytest.mark.parametrize("timing", ["wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms"])
def test_step_and_one_timing_column_is_a_per_token_csv(timing):
    data = f"step,{timing}\n1,10.5\n2,11.25\n3,9\n".encode()
    assert sniff(data) == "token_csv"
    t = load_token_csv(data)
    assert t.n_rows == 3 and t.columns[timing].tolist() == [10.5, 11.25, 9.0] and not t.problems


def test_a_headerless_body_with_the_contract_width_gets_the_contract_names():
    body = "\n".join(LINES[HEADER_AT + 1:HEADER_AT + 1 + N]).encode()
    t = load_token_csv(body)
    assert t.header == NAMES
    assert_same_rows(t)
    assert any("no header" in p.reason for p in t.problems)


def test_values_are_exactly_what_float_reads():
    t = GOOD
    row = LINES[_rows(123)].split(",")
    for name, cell in zip(NAMES, row):
        v = t.columns[name][123]
        assert v == float(cell) and not math.isnan(v)


def test_not_a_recorded_run_says_why():
    from bmoe_top.parsers.sniff import RUN_KINDS, sniff_reason
    assert sniff_reason(CLEAN) == ("token_csv", "")
    assert "token_csv" in RUN_KINDS and "unknown" not in RUN_KINDS
    for data, word in [(b"", "empty"), (bytes(range(256)) * 8, "binary"), (b'{"a": 1}\n{"b": 2}\n', "JSON lines"),
                       (b"Dear diary,\ntoday was fine.\n", "text")]:
        kind, why = sniff_reason(data)
        assert kind == "unknown" and word in why and "not a recorded run" in why
    assert GOOD.identity == {"model": "synthetic-moe.gguf", "arch": "qwen3moe"}


def test_a_long_text_without_rows_is_searched_for_a_header_only_at_its_top():
    from bmoe_top.parsers import token_csv as tc
    data = ("step,wall_ms\n" + "not a row\n" * (tc._HEAD_LINES + 10) + "1,2\n").encode()
    t = load_token_csv(data)
    assert t.n_rows == 1 and t.columns["wall_ms"].tolist() == [2.0]
    assert sum(1 for p in t.problems if "not" in p.reason) == tc._HEAD_LINES + 10


def _cells(edits: dict[tuple[int, str], str]) -> bytes:
    def put(ls):
        for (row, name), value in edits.items():
            cells = ls[_rows(row)].split(",")
            cells[NAMES.index(name)] = value
            ls[_rows(row)] = ",".join(cells)
    return _with_lines(put)


IMPOSSIBLE = {(10, "wall_ms"): "-5", (20, "io_ms"): "inf", (30, "read_bytes"): "1e99",
              (40, "cache_hit_pct"): "200", (50, "stall_ms"): "nan", (60, "mgmt_ms"): "-0.5",
              (700, "compute_ms"): "1e999", (800, "wall_ms"): "86400001"}


def test_impossible_values_are_missing_cells_each_a_problem_of_its_line():
    t = load_token_csv(_cells(IMPOSSIBLE))
    assert t.n_rows == N and t.impossible == len(IMPOSSIBLE)
    for (row, name), _value in IMPOSSIBLE.items():
        assert math.isnan(t.columns[name][row]), (row, name)  # absent, not zero, not the value
        for other in NAMES:  # the neighbours are kept
            if other != name:
                assert t.columns[other][row] == GOOD.columns[other][row], (row, other)
    lines = {p.lineno for p in t.problems if p.reason.startswith("impossible")}
    assert lines == {_rows(row) + 1 for row, _ in IMPOSSIBLE}  # 1-based line numbers
    reasons = " ".join(p.reason for p in t.problems)
    assert "impossible wall_ms: a time per token is 0 to 24 h" in reasons
    assert "impossible cache_hit_pct: a hit rate is 0 to 100 %" in reasons
    assert "not finite" in reasons


def test_line_numbers_of_impossible_values_in_well_formed_blocks():
    # a big clean file goes through the one-row-a-line fast path; a comment in it shifts the lines
    big = token_csv(30_000, seed=7).decode().split("\n")
    at = next(i for i, ln in enumerate(big) if ln.startswith("step,"))
    big.insert(at + 1 + 15_000, "# a comment between rows")
    row = at + 1 + 25_000 + 1  # data row 25,000, one line further down for the comment
    cells = big[row].split(",")
    cells[NAMES.index("io_ms")] = "-1"
    big[row] = ",".join(cells)
    t = load_token_csv("\n".join(big).encode())
    bad = [p for p in t.problems if p.reason.startswith("impossible")]
    assert [(p.lineno, p.text) for p in bad] == [(row + 1, "io_ms=-1")]
    assert math.isnan(t.columns["io_ms"][25_000]) and t.columns["io_ms"][24_999] > 0


def test_the_sentinels_real_files_write_are_not_impossible():
    t = load_token_csv(_cells({(5, "cache_hit_pct"): "-1.00"}))
    assert t.columns["cache_hit_pct"][5] == -1 and not t.impossible and not t.problems


# --- a file cut off while it was written ---------------------------------------------------------

@pytest.mark.parametrize("form", ["bytes", "file", "crlf file", "utf-16 bytes"])
def test_a_last_row_cut_off_mid_write_is_a_problem_not_a_token(tmp_path, form):
    # a run killed while it wrote its CSV: the last line stops inside a row ("19,2048,237.8");
    # it was read as a token with most fields absent, so the run's hit % and read/token became
    # that of a row the runtime never finished
    body = "\n".join(LINES[: _rows(N - 1)])  # every row but the last, no # summary after
    last = LINES[_rows(N - 1)]
    cut = body + "\n" + last[: len(last) // 3]
    data = cut.replace("\n", "\r\n").encode() if "crlf" in form else cut.encode()
    if form == "utf-16 bytes":
        data = cut.encode("utf-16")
    if "file" in form:
        path = tmp_path / "cut.csv"
        path.write_bytes(data)
        with open(path, "rb") as f:
            t = load_token_csv(f)
    else:
        t = load_token_csv(data)
    assert_same_rows(t, rows=range(N - 1))
    [p] = [p for p in t.problems if "ends inside" in p.reason]
    assert p.lineno == _rows(N - 1) + 1 and "not read" in p.reason
    assert not [p for p in t.problems if "the missing fields are absent" in p.reason]
    # the same short row with its line end is a row whose missing fields are absent (kept)
    ended = load_token_csv((cut + "\n").encode())
    assert ended.n_rows == N and not [p for p in ended.problems if "ends inside" in p.reason]
