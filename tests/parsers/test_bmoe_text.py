"""TextAccumulator over cumulative ``text`` with surrogates (the C++ runtime escapes per UTF-16
code unit, so a character outside the BMP can be cut between two records), and TextBuffer."""

from __future__ import annotations

from bmoe_top.parsers.bmoe_lines import TextAccumulator, TextBuffer, parse_line


def feed_all(lines: list[str]) -> tuple[TextAccumulator, list[str]]:
    acc = TextAccumulator()
    return acc, [acc.feed(parse_line(ln)) for ln in lines]


def test_pair_split_across_cumulative_records_after_a_lone_surrogate():
    # a lone surrogate early in the answer (U+FFFD), then a pair cut between two snapshots: each
    # snapshot extends the previous one; none is a rewrite, and the pieces add up to the text
    lines = ['BMOE_PROGRESS {"text":"a\\ud800b"}', 'BMOE_PROGRESS {"text":"a\\ud800b \\ud83d"}',
             'BMOE_PROGRESS {"text":"a\\ud800b \\ud83d\\ude00"}', 'BMOE_PROGRESS {"text":"a\\ud800b \\ud83d\\ude00!"}']
    acc, pieces = feed_all(lines)
    assert acc.text == "a\ufffdb 😀!" and pieces == ["a\ufffdb", " ", "😀", "!"]
    assert acc.rewrites == 0


def test_snapshots_decoded_differently_at_the_cut_still_extend():
    # orjson joins an escaped pair; the stdlib decoder keeps a lone half: the same text, two forms
    acc, pieces = feed_all(['BMOE_PROGRESS {"text":"x\\ud83d"}', 'BMOE_PROGRESS {"text":"x\\ud83d\\ude00y"}',
                            'BMOE_PROGRESS {"text":"x😀y\\ud83d"}', 'BMOE_PROGRESS {"text":"x😀y😀"}'])
    assert acc.text == "x😀y😀" and "".join(pieces) == acc.text and acc.rewrites == 0


def test_deltas_then_the_done_text_add_nothing_twice():
    acc = TextAccumulator()
    acc.feed(parse_line('BMOE_PROGRESS {"delta_text":"Hi \\ud83d"}'))
    acc.feed(parse_line('BMOE_PROGRESS {"delta_text":"\\ude00"}'))
    assert acc.feed(parse_line('BMOE_DONE {"text":"Hi 😀"}')) == "" and acc.text == "Hi 😀"


def test_done_text_cut_in_a_pair_ends_with_a_replacement_character():
    acc = TextAccumulator()
    acc.feed(parse_line('BMOE_PROGRESS {"text":"x\\ud83d"}'))
    acc.feed(parse_line('BMOE_DONE {"id":1,"text":"x\\ud83d"}'))
    assert acc.text == "x\ufffd"


def test_text_buffer_appends_pieces_and_joins_once_per_doubling():
    b = TextBuffer()
    joins = 0
    for i in range(20_000):
        before = b._joined
        b.append(f"w{i} ")
        joins += b._joined != before
    assert len(b) == sum(len(f"w{i} ") for i in range(20_000))
    assert joins <= 12  # the text doubles between joins: O(length) copied in all, O(1) per append
    assert len(b._pieces) <= 20_000 // 2 + 64  # never more pieces than about half the text's pieces
    assert b.tail(7) == "w19999 " and b.value.startswith("w0 w1 ") and len(b._pieces) == 1
    b.append("x")
    assert b.tail(1) == "x" and len(b._pieces) == 2  # the end is read without a join
    assert b.prefix(3) == "w0 " and b.prefix(10**6) == b.value
    b.set("")
    assert not b and b.value == ""
