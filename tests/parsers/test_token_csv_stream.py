"""A per-token CSV read from a file in blocks (never whole) gives exactly what its bytes give: the
same rows, problems, comments and summaries, wherever a block ends (inside a line, between the CR
and the LF of a line end, inside a UTF-16 character), and with chunks read by threads at once
(a damaged chunk, and the ones after it when it changed the row count, read again on their own);
and a file over the cell cap keeps its ``# summary`` and names the lines it left out."""

from __future__ import annotations

import codecs
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers.synth import token_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers import token_csv as tc
from bmoe_top.parsers.token_csv import load_token_csv

pytestmark = pytest.mark.usefixtures("both_readers")
POOL = ThreadPoolExecutor(2)

# past the lines the header search reads, so the body goes on in blocks after the first read
N = 12_000
LINES = token_csv(N, seed=11).decode().split("\n")[:-1]
BODY0 = next(i for i, ln in enumerate(LINES) if ln.startswith("step,")) + 1

DAMAGE = {
    "bad cell": lambda ln: ln.replace(",", ",x", 1),
    "short row": lambda ln: ln.rsplit(",", 3)[0],
    "long row": lambda ln: ln + ",7,8",
    "comment": lambda ln: "# note=" + ln[:10],
    "summary": lambda ln: "# summary tokens=5 s/tok=0.2",
    "blank": lambda ln: "",
    "NUL run": lambda ln: ln[:5] + "\x00" * 40 + ln[5:],
    "header again": lambda ln: LINES[BODY0 - 1],
    "impossible": lambda ln: ln.replace(",", ",-5", 1),
}


def same(a: tc.TokenTable, b: tc.TokenTable) -> None:
    assert a.header == b.header and a.n_rows == b.n_rows and a.meta == b.meta
    for k in a.columns:
        assert np.array_equal(a.columns[k], b.columns[k], equal_nan=True), k
    assert [(p.lineno, p.text, p.reason) for p in a.problems] == [(p.lineno, p.text, p.reason) for p in b.problems]
    assert a.summaries == b.summaries and a.comments == b.comments and a.impossible == b.impossible


# the fixture (which fast reader) is the same for every example; _READ is set per example
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(BODY0, N + BODY0 - 1), st.sampled_from(sorted(DAMAGE))), max_size=6),
       form=st.sampled_from(["utf-8", "crlf", "cr", "utf-8-bom", "utf-16-le", "utf-16-be"]),
       read=st.integers(16, 70_000), final_newline=st.booleans())
def test_a_file_read_in_blocks_gives_what_its_bytes_give(damage, form, read, final_newline):
    lines = list(LINES)
    for at, kind in damage:
        lines[at] = DAMAGE[kind](lines[at])
    nl = {"crlf": "\r\n", "cr": "\r"}.get(form, "\n")
    text = nl.join(lines) + (nl if final_newline else "")
    codec = form if form.startswith("utf-16") else "utf-8"
    bom = {"utf-8-bom": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
    data = bom.get(form, b"") + text.encode(codec)
    whole = load_token_csv(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tc, "_READ", read)
        same(load_token_csv(io.BytesIO(data)), whole)
        mp.setattr(tc, "_CHUNK", 2048)  # several chunks a window, read at once by two threads
        same(load_token_csv(io.BytesIO(data), pmap=POOL.map), whole)
    assert whole.n_rows >= N - len(damage)


def test_a_file_over_the_cell_cap_keeps_its_summary_and_names_what_it_left_out(monkeypatch, tmp_path):
    """The cap bounds the table; the lines past it are named (first, last, how many) and the file's
    own ``# summary`` after them is still read, from bytes and from a file alike."""
    monkeypatch.setattr(tc, "MAX_CSV_CELLS", 9 * 5000)
    monkeypatch.setattr(tc, "_READ", 4096)
    data = token_csv(8000, seed=3)
    path = tmp_path / "big.csv"
    path.write_bytes(data)
    header_line = next(i for i, ln in enumerate(data.decode().split("\n"), 1) if ln.startswith("step,"))
    with path.open("rb") as f:
        streamed = load_token_csv(f)
    for t in (load_token_csv(data), streamed):
        assert t.n_rows == 5000 and t.columns["step"][-1] == 5000
        assert t.summary["tokens"] == 8000  # the file's own end-of-run line, after the rows left out
        (cap,) = [p for p in t.problems if "over the cap" in p.reason]
        first, last = header_line + 5001, header_line + 8000
        assert cap.lineno == first
        assert f"lines {first:,} to {last:,} (3,000 lines) left out" in cap.reason
