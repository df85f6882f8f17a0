"""tui/present/numbers.py: counts print as integers, JSON output carries no raw C1 / bidi / format
character (escaped, so it reads back to the same strings), text lines are sanitized."""

from __future__ import annotations

import io

import orjson

from bmoe_top.tui.present.numbers import count, fmt, print_lines, safe_rows, text_line, to_json

HOSTILE = "m\x1b]0;title\x07\u009b2J\u202eevil\u2066\U000e0041\u2028\ufeff"


def test_counts_are_integers():
    assert fmt(5.0, 0) == "5" and fmt(248.0, 0) == "248" and fmt(1234.0, 0) == "1,234"
    assert count(3.0) == "3" and count(12345.0, "tok") == "12,345 tok" and count(None) == "missing"
    assert fmt(0.5, 0) == "0.50"  # a small fraction still keeps two significant digits
    assert fmt(float("inf")) == "∞"


def test_json_escapes_what_a_terminal_acts_on_and_reads_back():
    doc = {"model": HOSTILE, "n": [1, 2.5], "ok": "café ✓ 日本"}
    text = to_json(doc)
    for cp in ("\x1b", "\x07", "\u009b", "\u202e", "\u2066", "\U000e0041", "\u2028", "\ufeff"):
        assert cp not in text
    assert "café ✓ 日本" in text  # printable text is written as it is
    assert orjson.loads(text) == doc
    ascii_del = {"name": "a\x7fb"}  # all ASCII: orjson leaves DEL raw
    assert to_json(ascii_del) == '{\n  "name": "a\\u007fb"\n}' and orjson.loads(to_json(ascii_del)) == ascii_del


def test_text_output_is_sanitized():
    assert text_line(HOSTILE) == "m␛]0;title␇<U+009B>2J<U+202E>evil<U+2066><U+E0041><U+2028><U+FEFF>"
    buf = io.StringIO()
    print_lines(f"a\n{HOSTILE}", buf)
    assert buf.getvalue().split("\n")[:2] == ["a", text_line(HOSTILE)]
    assert safe_rows([(HOSTILE, HOSTILE, "name")]) == [(text_line(HOSTILE), text_line(HOSTILE), "name")]


def test_one_quantity_one_format_across_tables_and_panels():
    """The audit Requests table showed tok/s with one decimal (200.0) and tokens without
    thousands separators (1024) beside panels and Turns tables at the catalogue's precision
    (200, 1,024)."""
    from bmoe_top.tui.present.audit import request_row

    row = request_row({"pid": 7, "task": 1, "time": "", "n_prompt": 1536, "n_gen": 1024, "tok_s": 200.0,
                       "t_prompt_ms": 1234.5, "t_gen_ms": 5120.0, "cache_hit_pct": 79.31, "req_hits": 12345,
                       "req_misses": 678, "req_hits_profile": 0, "req_bytes_upload": 156567552})
    assert row[3:] == ("1,536", "1,024", "200", "1,234", "5,120", "79.3", "12,345", "678", "0", "149")
