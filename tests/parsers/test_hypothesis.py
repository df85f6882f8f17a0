"""Property tests: every parser survives random bytes, and truncated/mutated lines never cost
the good lines around them (each good line is still counted, each bad one is reported)."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.bmoe_lines import BadLine, TextAccumulator, parse_line
from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import hit_matrix, load_route_trace
from bmoe_top.parsers.sniff import KINDS, sniff
from bmoe_top.parsers.summary_lines import parse_summary_line
from bmoe_top.parsers.textio import LineSplitter, iter_lines
from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.parsers.transcript import parse_transcript

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GOOD_BMOE = [
    'BMOE_LOAD {"mb":12.5,"ms":8.25}',
    'BMOE_PROGRESS {"step":1,"steps":4,"wall_ms":210.5,"io_ms":80.0,"text":"Ex é 😀","majflt":3}',
    'BMOE_READY {"load_s":2.5,"arch":"qwen3moe","n_ctx":2048}',
    'BMOE_BEGIN {"id":7}',
    'BMOE_DONE {"id":7,"cancelled":false,"tokens":3,"tok_s":11.1,"text":"Hi"}',
    'BMOE_ERROR {"id":8,"fatal":false,"msg":"too long"}',
    'BMOE_ROUTE {"step":1,"turn":0,"phase":"decode","experts":[[1,5],[]],"hit":[[1,0],[]]}',
    'BMOE_RESIDENT {"step":3,"n_expert":8,"resident":[[1,5],[]],"resident_mib":12.5}',
    'BMOE_NEWTHING {"x":[1,2,{"y":null}]}',
]

# text without line breaks and without the protocol marker
plain = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
                max_size=60).filter(lambda s: "BMOE_" not in s)


@FAST
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data):
    for kind_fn in (load_token_csv, load_route_trace, parse_transcript):
        r = kind_fn(data)
        assert isinstance(r.problems, list)
    reqs, problems = parse_requests(data)
    assert isinstance(reqs, list)
    assert sniff(data) in KINDS
    for _, line in iter_lines(data):
        parse_line(line)
        parse_summary_line(line)


@FAST
@given(st.binary(max_size=3000), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_splitter_matches_whole_file_split_for_any_chunking(data, cuts):
    sp = LineSplitter()
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = cuts[i % len(cuts)]
        out.extend(sp.feed(data[pos:pos + n]))
        pos += n
        i += 1
    last = sp.flush()
    if last is not None:
        out.append(last)
    assert out == [line for _, line in iter_lines(data)]


@FAST
@given(st.text(max_size=40))
def test_parse_line_any_text(s):
    r = parse_line(s.replace("\n", " ").replace("\r", " "))
    assert r is not None


def _truncations(line: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(line) - 1).map(lambda k: line[:k])


bad_bmoe = st.sampled_from(GOOD_BMOE).flatmap(_truncations)
mutated_bmoe = st.tuples(st.sampled_from(GOOD_BMOE), st.integers(0, 200), st.characters()).map(
    lambda t: t[0][:t[1] % len(t[0])] + t[2] + t[0][t[1] % len(t[0]) + 1:])


@FAST
@given(st.lists(st.one_of(
    st.tuples(st.just("good"), st.sampled_from(GOOD_BMOE)),
    st.tuples(st.just("cut"), bad_bmoe),
    st.tuples(st.just("text"), plain),
    st.tuples(st.just("prefixed"), st.tuples(plain, st.sampled_from(GOOD_BMOE)).map("".join)),
), max_size=40), st.sampled_from(["\n", "\r\n"]))
def test_transcript_counts_every_good_line(items, nl):
    data = nl.join(line for _, line in items).encode()
    tr = parse_transcript(data)
    want = [i + 1 for i, (k, _) in enumerate(items) if k in ("good", "prefixed")]
    assert tr.record_lines == want
    bad = {p.lineno for p in tr.problems}
    assert not bad & set(want)


@FAST
@given(st.lists(mutated_bmoe, max_size=20))
def test_mutated_lines_are_records_textlines_or_badlines(lines):
    for ln in lines:
        r = parse_line(ln.replace("\n", " ").replace("\r", " "))
        assert r is not None
        if isinstance(r, BadLine):
            assert r.reason.startswith("BMOE_")


@FAST
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=80),
       st.lists(st.integers(1, 4), min_size=1, max_size=10), st.booleans())
def test_text_and_delta_rebuild_any_text(text, sizes, cumulative):
    units = text.encode("utf-16-le")
    cu = [units[i:i + 2] for i in range(0, len(units), 2)]
    acc, got, pos, i = TextAccumulator(), [], 0, 0
    seen: list[bytes] = []
    while pos < len(cu):
        piece = cu[pos:pos + sizes[i % len(sizes)]]
        pos += len(piece)
        i += 1
        seen.extend(piece)
        esc = "".join("\\u%04x" % int.from_bytes(u, "little") for u in (seen if cumulative else piece))
        key = "text" if cumulative else "delta_text"
        got.append(acc.feed(parse_line(f'BMOE_PROGRESS {{"{key}":"{esc}"}}')))
    assert acc.text == text and "".join(got) == text


cell = st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda f: f"{f:.3f}")
# a line that is no row: one field that is not a number (and not a comment)
garbage = st.text(st.characters(blacklist_characters="\r\n,;\t\x00", blacklist_categories=("Cs",)),
                  max_size=30).map(lambda s: "q" + s)


@FAST
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.one_of(st.lists(cell, min_size=n, max_size=n).map(lambda c: ("good", c)),
                       st.lists(cell, min_size=1, max_size=n - 1).map(lambda c: ("short", c)),
                       st.lists(cell, min_size=n + 1, max_size=n + 3).map(lambda c: ("long", c)),
                       garbage.map(lambda s: ("bad", s))), max_size=60))))
def test_token_csv_counts_every_good_row(arg):
    """Every numeric row counts with its values where they are (short rows: the rest NaN; long
    rows: the extras as unnamed columns); every line that is not a row is reported, by line."""
    ncol, rows = arg
    names = ["step"] + [f"c{j}" for j in range(1, ncol)]
    text = [r if k == "bad" else ",".join(r) for k, r in rows]
    t = load_token_csv("\n".join([",".join(names)] + text).encode())
    numeric = [r for k, r in rows if k != "bad"]
    assert t.n_rows == len(numeric)
    assert t.header[:ncol] == names
    widest = max([ncol] + [len(r) for r in numeric])
    assert t.header[ncol:] == [f"unnamed_{j + 1}" for j in range(ncol, widest)]
    for i, r in enumerate(numeric):
        for j in range(widest):
            v = t.columns[t.header[j]][i]
            assert (v == float(r[j])) if j < len(r) else (v != v)
    bad_lines = {i + 2 for i, (k, _) in enumerate(rows) if k == "bad"}
    assert bad_lines <= {p.lineno for p in t.problems}
    ragged = sum(1 for k, _ in rows if k in ("short", "long"))
    noted = sum(int(p.reason.split(" ", 1)[0]) for p in t.problems if " fields, the header has" in p.reason)
    assert noted == ragged


@FAST
@given(st.lists(st.one_of(
    st.tuples(st.integers(0, 1), st.integers(0, 20), st.integers(0, 3), st.integers(0, 7),
              st.integers(0, 1)).map(lambda t: ("good", f"0,{t[0]},{t[1]},{t[2]},0,{t[3]},0.5,{t[4]},0")),
    garbage.map(lambda s: ("bad", s)),
), max_size=50))
def test_route_trace_counts_every_good_row(rows):
    data = ("# n_layer=4 n_expert=8\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
            + "\n".join(r for _, r in rows)).encode()
    t = load_route_trace(data)
    assert t.n_rows == sum(1 for k, _ in rows if k == "good")
    steps, share = hit_matrix(t)
    assert share.shape == (4, len(steps))


good_req = st.builds(lambda i, p: orjson.dumps({"cmd": "generate", "id": i, "prompt": p}).decode(),
                     st.integers(0, 10**6), st.text(max_size=30))


@FAST
@given(st.lists(st.one_of(good_req.map(lambda s: ("good", s)),
                          st.sampled_from(['{"cmd": 5}', "[1]", '{"cmd":"generate","id":"x"}',
                                           '{"cmd":"generate"', "nope"]).map(lambda s: ("bad", s))),
                max_size=30))
def test_requests_count_every_good_line(lines):
    reqs, problems = parse_requests("\n".join(s for _, s in lines).encode())
    assert len(reqs) == sum(1 for k, _ in lines if k == "good")
    assert [p.lineno for p in problems] == [i + 1 for i, (k, _) in enumerate(lines) if k == "bad"]


@FAST
@given(st.binary(max_size=3000), st.lists(st.integers(1, 64), min_size=1, max_size=20),
       st.integers(1, 40))
def test_max_line_cuts_exactly_the_long_lines(data, cuts, max_line):
    sp = LineSplitter(max_line=max_line)
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = cuts[i % len(cuts)]
        out.extend(sp.feed(data[pos:pos + n]))
        pos += n
        i += 1
    last = sp.flush()
    if last is not None:
        out.append(last)
    whole = [line for _, line in iter_lines(data)]
    assert out == [line[:max_line] for line in whole]
    assert [p.lineno for p in sp.problems] == [k + 1 for k, line in enumerate(whole) if len(line) > max_line]
