"""textio: BOM sniffing, line endings across chunk boundaries, invalid UTF-8, huge lines."""

from __future__ import annotations

import codecs

import pytest

from bmoe_top.parsers.textio import LineSplitter, Problem, decode_bytes, iter_lines, split_text

TEXT = "first line\nsecond: é 😀\n\nfourth BMOE_PROGRESS {\"text\":\"a\\u2028b\"}\u2028 stays"


def feed_all(data: bytes, size: int, **kw) -> tuple[list[str], LineSplitter]:
    sp = LineSplitter(**kw)
    out: list[str] = []
    for i in range(0, len(data), size):
        out.extend(sp.feed(data[i:i + size]))
    last = sp.flush()
    if last is not None:
        out.append(last)
    return out, sp


EXPECTED = split_text(TEXT)


@pytest.mark.parametrize("encoding,bom", [
    ("utf-8", b""), ("utf-8", codecs.BOM_UTF8),
    ("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
])
@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 4096])
def test_splitter_any_encoding_newline_chunking(encoding, bom, newline, chunk):
    data = bom + TEXT.replace("\n", newline).encode(encoding)
    lines, _ = feed_all(data, chunk)
    assert lines == EXPECTED
    assert [t for _, t in iter_lines(data)] == EXPECTED


def test_expected_lines_keep_u2028_inside_a_line():
    assert len(EXPECTED) == 4
    assert EXPECTED[1] == "second: é 😀"
    assert EXPECTED[2] == ""
    assert "\u2028" in EXPECTED[3]


def test_final_newline_gives_no_empty_line_and_missing_one_gives_partial():
    sp = LineSplitter()
    assert sp.feed(b"a\nb") == ["a"]
    assert sp.flush() == "b"
    sp = LineSplitter()
    assert sp.feed(b"a\nb\n") == ["a", "b"]
    assert sp.flush() is None
    assert list(iter_lines(b"a\nb")) == [(1, "a"), (2, "b")]
    assert list(iter_lines(b"")) == []


def test_crlf_split_exactly_between_cr_and_lf():
    sp = LineSplitter()
    assert sp.feed(b"one\r") == ["one"]
    assert sp.feed(b"\ntwo\r") == ["two"]
    assert sp.feed(b"\n") == []
    assert sp.feed(b"three") == []
    assert sp.flush() == "three"
    assert sp.lines_out == 3


def test_lone_cr_at_end_of_stream_ends_the_line():
    sp = LineSplitter()
    assert sp.feed(b"progress 50%\r") == ["progress 50%"]
    assert sp.flush() is None


def test_invalid_utf8_is_replaced_never_raises():
    data = b"ok \xff\xfe bad\n\xc3\x28 also bad\nend \xe2\x82"  # truncated 3-byte char at EOF
    lines, _ = feed_all(data, 1)
    assert lines[0] == "ok \ufffd\ufffd bad"
    assert lines[1].startswith("\ufffd(")
    assert lines[2].startswith("end ") and lines[2].endswith("\ufffd")
    assert decode_bytes(data).count("\ufffd") >= 4


def test_multibyte_character_split_across_chunks():
    data = "😀é€\n".encode()
    for cut in range(1, len(data)):
        sp = LineSplitter()
        out = sp.feed(data[:cut]) + sp.feed(data[cut:])
        assert out == ["😀é€"]


def test_utf8_bom_only_stripped_at_start():
    data = codecs.BOM_UTF8 + b"a\n" + codecs.BOM_UTF8 + b"b\n"
    lines = [t for _, t in iter_lines(data)]
    assert lines == ["a", "\ufeffb"]  # a BOM in the middle is content, not a marker
    assert decode_bytes("\ufeffx") == "x"


def test_tiny_inputs_that_look_like_bom_prefixes():
    for data in (b"\xef", b"\xef\xbb", b"\xff", b"\xfe"):
        sp = LineSplitter()
        assert sp.feed(data) == []
        out = sp.flush()
        assert out is not None and set(out) == {"\ufffd"}


@pytest.mark.parametrize("size", [100_000, 3_000_000])
def test_huge_lines_work(size):
    line = "x" * size
    data = ("BMOE_PROGRESS " + line + "\nnext\n").encode()
    lines, _ = feed_all(data, 65536)
    assert len(lines) == 2 and len(lines[0]) == size + 14 and lines[1] == "next"


def test_max_line_cuts_and_reports_but_keeps_reading():
    data = b"short\n" + b"y" * 10_000 + b"\nafter\n" + b"z" * 50
    lines, sp = feed_all(data, 333, max_line=100)
    assert lines == ["short", "y" * 100, "after", "z" * 50]
    assert len(sp.problems) == 1
    p = sp.problems[0]
    assert isinstance(p, Problem) and p.lineno == 2 and "10000" in p.reason
    assert len(p.text) <= 201


def test_max_line_on_unterminated_last_line():
    sp = LineSplitter(max_line=10)
    sp.feed(b"a" * 25)
    assert sp.flush() == "a" * 10
    assert sp.problems[0].lineno == 1 and "25" in sp.problems[0].reason


def test_problem_text_is_truncated():
    assert len(Problem(1, "q" * 1000, "why").text) < 210
