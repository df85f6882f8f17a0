"""Property tests for every parser module (textio, bmoe_lines, summary_lines, token_csv,
route_trace, requests, transcript, sniff, prom, audit, strp, limits) and the sanitizer: each
survives random bytes, truncated/mutated lines never cost the good lines around them (each good
line is still counted, each bad one is reported), and what a writer writes reads back."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.audit import EVENTS, parse_audit_records
from bmoe_top.parsers.bmoe_lines import BadLine, TextAccumulator, parse_line
from bmoe_top.parsers.limits import MAX_EXPERTS, int_within
from bmoe_top.parsers.prom import SERIES, PromFormatError, parse_exposition
from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import hit_matrix, load_route_trace
from bmoe_top.parsers.sanitize import BIDI_CONTROLS, sanitize
from bmoe_top.parsers.sniff import KINDS, sniff
from bmoe_top.parsers.strp import StrpError, StrpProfile, parse_strp, strp_bytes
from bmoe_top.parsers.summary_lines import parse_summary_line
from bmoe_top.parsers.textio import LineSplitter, decode_bytes, iter_lines
from bmoe_top.parsers.token_csv import VALID_RANGES, load_token_csv
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
    'BMOE_ROUTE {"step":2,"turn":0,"phase":"decode","experts":[[1,5],[]],"hit":[[1,0],[]],"tier":[[0,1],[]]}',
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
    rows: the extras as unnamed columns; an impossible step NaN); every line that is not a row is
    reported, by line. The file has no line end after its last line: a short row there is one
    cut off while it was written, reported and not read."""
    ncol, rows = arg
    names = ["step"] + [f"c{j}" for j in range(1, ncol)]
    text = [r if k == "bad" else ",".join(r) for k, r in rows]
    t = load_token_csv("\n".join([",".join(names)] + text).encode())
    if rows and rows[-1][0] == "short":
        assert [p.lineno for p in t.problems if "ends inside" in p.reason] == [len(rows) + 1]
        rows = rows[:-1]
    numeric = [r for k, r in rows if k != "bad"]
    assert t.n_rows == len(numeric)
    assert t.header[:ncol] == names
    widest = max([ncol] + [len(r) for r in numeric])
    assert t.header[ncol:] == [f"unnamed_{j + 1}" for j in range(ncol, widest)]
    lo, hi, _sentinel, _why = VALID_RANGES["step"]
    for i, r in enumerate(numeric):
        for j in range(widest):
            v = t.columns[t.header[j]][i]
            possible = j > 0 or lo <= float(r[j]) <= hi  # a negative step is impossible: missing, a problem
            assert (v == float(r[j])) if j < len(r) and possible else (v != v)
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


# --- the sanitizer ------------------------------------------------------------------------------



def _unsafe(out: str, multiline: bool) -> list[str]:
    keep = "\n\t" if multiline else ""
    return [c for c in out if (ord(c) < 0x20 and c not in keep) or 0x7F <= ord(c) <= 0x9F
            or ord(c) in BIDI_CONTROLS or 0xD800 <= ord(c) <= 0xDFFF]


@FAST
@given(st.text(max_size=200), st.booleans(), st.sampled_from(["show", "strip"]))
def test_sanitize_output_never_holds_a_control_escape_or_bidi_character(s, multiline, escapes):
    out = sanitize(s, multiline=multiline, escapes=escapes)
    assert not _unsafe(out, multiline)
    assert "\x1b" not in out and "\r" not in out
    assert sanitize(out, multiline=multiline) == out  # idempotent: what it shows is already safe
    if not multiline:
        assert "\n" not in out


@FAST
@given(st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn")), max_size=200))
def test_sanitize_keeps_printable_text_as_it_is(s):
    assert sanitize(s) is s or sanitize(s) == s
    assert sanitize(s, multiline=True) == s


@FAST
@given(st.lists(st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), max_size=30),
                min_size=1, max_size=8))
def test_sanitize_multiline_keeps_line_structure(lines):
    text = "\n".join(lines)
    assert sanitize(text, multiline=True).split("\n") == [sanitize(ln) for ln in lines]


# --- /metrics -----------------------------------------------------------------------------------


SCALARS = [s for s in SERIES if not s.per_layer]
finite = st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False)


@FAST
@given(st.binary(max_size=2000))
def test_prom_any_bytes_parse_or_are_refused_cleanly(data):
    try:
        snap = parse_exposition(data, 0)
    except PromFormatError:
        return
    assert snap.n_samples >= 0 and isinstance(snap.notes, list)


@FAST
@given(st.dictionaries(st.sampled_from(SCALARS), finite, min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 95), finite, finite), max_size=20),
       st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True), finite, max_size=5))
def test_prom_what_a_server_writes_reads_back(values, layers, other):
    lines = []
    for spec, v in values.items():
        lines += [f"# TYPE {spec.name} {spec.type}", f"{spec.name} {v!r}"]
    lines.append("# TYPE llamacpp:moe_cache_layer_hits_total counter")
    lines += [f'llamacpp:moe_cache_layer_hits_total{{layer="{il}"}} {h!r}' for il, h, _ in layers]
    lines += [f"x_{k} {v!r}" for k, v in other.items()]
    snap = parse_exposition("\n".join(lines) + "\n", 0)
    for spec, v in values.items():
        assert snap.get(spec.key) == v
    want: dict[int, float] = {}
    for il, h, _ in layers:
        want[il] = h  # a repeated layer: the last value, never the sum
    assert snap.layers.get("layer_hits", {}) == want
    assert snap.others == {f"x_{k}": v for k, v in other.items()}
    repeated = {il for il, _, _ in layers if [x[0] for x in layers].count(il) > 1}
    assert sum(1 for n in snap.notes if "duplicate" in n) == len(repeated)


# --- audit log ----------------------------------------------------------------------------------


audit_rec = st.builds(
    lambda ev, pid, hits, extra: orjson.dumps({"event": ev, "time": "2026-11-29T12:00:00.123Z", "pid": pid,
                                               "hits": hits, "misses": 0, **extra}),
    st.sampled_from(EVENTS), st.integers(1, 2**31), st.integers(0, 2**40),
    st.dictionaries(st.sampled_from(["slot", "task", "n_gen"]), st.integers(0, 99), max_size=3))


@FAST
@given(st.binary(max_size=500))
def test_audit_any_line_never_raises(line):
    recs, errors = parse_audit_records(line, 1)
    assert isinstance(recs, list) and all(e.lineno == 1 for e in errors)


@FAST
@given(st.lists(st.tuples(audit_rec, st.sampled_from([b"", b" ", b", "])), min_size=1, max_size=6),
       st.lists(st.binary(max_size=12).filter(lambda b: b"{" not in b and b"\n" not in b), max_size=3))
def test_audit_records_glued_on_one_line_are_all_recovered(parts, junk):
    line = b"".join(r + sep for r, sep in parts)
    recs, errors = parse_audit_records(line, 4)
    assert [orjson.dumps(r.data) for r in recs] == [r for r, _ in parts] and not errors
    if junk:  # garbage before a glued pair costs only itself
        line = b"".join(junk) + b"\x00" + parts[0][0] + parts[-1][0]
        recs, _ = parse_audit_records(line, 4)
        assert [orjson.dumps(r.data) for r in recs][-2:] == [parts[0][0], parts[-1][0]] or len(parts) == 1


# --- STRP ---------------------------------------------------------------------------------------




@FAST
@given(st.integers(1, 40).flatmap(lambda nl: st.integers(1, 64).flatmap(lambda ne: st.tuples(
    st.just(nl), st.just(ne), st.lists(st.tuples(st.integers(0, nl - 1), st.integers(0, ne - 1)), unique=True,
                                       max_size=60), st.integers(0, 500)))))
def test_strp_round_trip(arg):
    nl, ne, pairs, slots = arg
    prof = StrpProfile(nl, ne, slots, np.array(pairs, dtype=np.int64).reshape(-1, 2))
    back = parse_strp(strp_bytes(prof))
    assert (back.n_layers, back.n_expert, back.slots) == (nl, ne, slots)
    assert back.pairs.tolist() == [list(p) for p in pairs] and not back.warnings
    assert np.array_equal(back.ranks, prof.rank_map())


@FAST
@given(st.binary(max_size=300), st.booleans())
def test_strp_any_bytes_are_a_profile_or_one_clear_error(data, magic):
    try:
        p = parse_strp((b"STRP\x01\x00\x00\x00" + data) if magic else data, "x.strp")
    except StrpError as exc:
        assert str(exc).startswith("x.strp: ")
        return
    assert p.rank_map().shape == (p.n_layers, p.n_expert)


# --- summary lines, CSV number formats, encodings, limits ----------------------------------------


pos = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)


@FAST
@given(st.integers(1, 10**6), pos, pos)
def test_summary_generation_line_exact_and_drifted(n, s, t):
    exact = parse_summary_line(f"generation: {n} tokens, {s:.3f} s/token ({t:.3f} tok/s)")
    assert exact.exact and exact.values == {"tokens": n, "s_per_tok": float(f"{s:.3f}"), "tok_s": float(f"{t:.3f}")}
    drift = parse_summary_line(f"generation: {n} tokens in {s:.2f} s, {t:.2f} tok/s")
    assert not drift.exact and drift.values["tokens"] == n and drift.values["generation_s"] == float(f"{s:.2f}")
    assert drift.values["tok_s"] == float(f"{t:.2f}")


@FAST
@given(st.lists(st.tuples(st.integers(1, 10**6), pos, st.integers(0, 10**9), pos), min_size=3, max_size=30),
       st.sampled_from([";", "\t"]))
def test_token_csv_decimal_commas_read_as_the_dot_file(rows, sep):
    head = "step,wall_ms,read_bytes,io_ms"
    dot = "\n".join([head] + [f"{a},{b:.3f},{c},{d:.2f}" for a, b, c, d in rows]) + "\n"
    comma = "\n".join([head.replace(",", sep)] + [sep.join([str(a), f"{b:.3f}".replace(".", ","), str(c),
                                                               f"{d:.2f}".replace(".", ",")]) for a, b, c, d in rows])
    x, y = load_token_csv(dot.encode()), load_token_csv(comma.encode())
    assert x.n_rows == y.n_rows == len(rows) and not y.problems
    for name in x.header:
        assert np.array_equal(x.columns[name], y.columns[name])


@FAST
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFFFF, blacklist_categories=("Cs", "Cc")),
               min_size=8, max_size=200).filter(lambda s: sum(c.isascii() for c in s) > 0.8 * len(s)),
       st.sampled_from(["utf-16-le", "utf-16-be"]))
@example("0000000\ud7c7", "utf-16-le")  # an unassigned code point in a short file is still text
@example("0000000\ufffd", "utf-16-le")  # so is a U+FFFD the file holds (not one the decoding made)
def test_utf16_without_a_bom_is_read(text, codec):
    assert decode_bytes(text.encode(codec)) == text


@FAST
@given(st.one_of(st.integers(-10, 10**12), st.floats(allow_nan=True), st.text(max_size=12), st.booleans(), st.none()))
def test_int_within_is_an_int_in_range_or_none(v):
    r = int_within(v, MAX_EXPERTS)
    assert r is None or (isinstance(r, int) and 0 <= r <= MAX_EXPERTS)
