"""parsers/sanitize.py: nothing from outside reaches the terminal raw (controls, escape sequences,
bidi overrides, invisible format characters), printable text is untouched."""

from __future__ import annotations

import unicodedata

import pytest

from bmoe_top.parsers.sanitize import BIDI_CONTROLS, SHOWN, sanitize

ESC = "\x1b"
# the attacks of the issue: window title, OSC 52 clipboard write, leaving the alternate screen
ATTACKS = {
    "title": f"{ESC}]0;pwned{ESC}\\",
    "title_bel": f"{ESC}]2;pwned\x07",
    "osc52": f"{ESC}]52;c;SGVsbG8gd29ybGQ=\x07",
    "alt_screen_off": f"{ESC}[?1049l",
    "clear": f"{ESC}[2J{ESC}[H",
    "sgr": f"{ESC}[1;31m",
    "dcs": f"{ESC}P1$r0m{ESC}\\",
    "apc": f"{ESC}_Gf=100;AAAA{ESC}\\",
    "pm": f"{ESC}^private{ESC}\\",
    "sos": f"{ESC}Xstring{ESC}\\",
    "csi_8bit": "\x9b31m",
    "osc_8bit": "\x9d0;pwned\x9c",
    "reset": f"{ESC}c",
    "charset": f"{ESC}(0",
}


def _dangerous(s: str) -> list[str]:
    return [c for c in s if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
            or ord(c) in BIDI_CONTROLS]


def test_the_answer_text_policy_of_the_widget():
    # the rendering tui/widgets/panels.visible_text gives answer text today
    assert sanitize("a\x1b[31mred\x07", multiline=True) == "a␛[31mred␇"
    assert sanitize("line\nnext\ttab", multiline=True) == "line\nnext\ttab"
    assert sanitize("\x00\x01\x7f", multiline=True) == "␀␁␡"


@pytest.mark.parametrize("name", sorted(ATTACKS))
@pytest.mark.parametrize("multiline", [False, True])
def test_every_escape_sequence_is_inert_shown_or_stripped(name, multiline):
    seq = ATTACKS[name]
    s = f"model{seq}.gguf"
    shown = sanitize(s, multiline=multiline)
    assert not _dangerous(shown)
    assert shown.startswith("model") and shown.endswith(".gguf")
    stripped = sanitize(s, multiline=multiline, escapes="strip")
    assert stripped == "model.gguf"


def test_show_makes_the_sequence_visible():
    assert sanitize(ATTACKS["osc52"]) == "␛]52;c;SGVsbG8gd29ybGQ=␇"
    assert sanitize("\x9b31m") == "<U+009B>31m"
    assert sanitize("a\x85b") == "a<U+0085>b"  # NEL, a C1 line break


def test_incomplete_sequence_is_shown_not_swallowed():
    # an OSC without its terminator would swallow what follows on a terminal; here it stays visible
    assert sanitize(f"x{ESC}]0;no end", escapes="strip") == "x␛]0;no end"
    assert sanitize(f"x{ESC}[12", escapes="strip") == "x␛[12"


@pytest.mark.parametrize("cp", sorted(BIDI_CONTROLS))
def test_bidi_controls_are_visible_code_points(cp):
    s = f"invoice{chr(cp)}fdp.exe"
    assert sanitize(s) == f"invoice<U+{cp:04X}>fdp.exe"
    assert sanitize(s, multiline=True) == f"invoice<U+{cp:04X}>fdp.exe"


def test_other_invisible_format_characters_are_visible():
    assert sanitize("a\u200bb\u2060c\ufeffd\u00ade") == "a<U+200B>b<U+2060>c<U+FEFF>d<U+00AD>e"
    assert sanitize("tag\U000e0041\U000e007f") == "tag<U+E0041><U+E007F>"
    assert sanitize("\u2028\u2029") == "<U+2028><U+2029>"
    assert sanitize("lone \udc80 \ud83d") == "lone <U+DC80> <U+D83D>"


def test_every_format_character_is_shown_or_a_documented_joiner_or_mark():
    kept = {0x200C, 0x200D, *range(0x600, 0x606), 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0x110BD, 0x110CD}
    cf = {cp for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Cf"}
    assert cf - SHOWN <= kept, sorted(hex(c) for c in cf - SHOWN - kept)
    assert all(not chr(cp).isprintable() for cp in SHOWN)  # the fast path cannot miss one


def test_printable_text_is_unchanged_and_the_same_object():
    for s in ["Qwen3-30B-A3B-Q4_K_M.gguf", "Modèle été 😀", "العربية עברית", "中文 日本語", "e\u0301", ""]:
        assert sanitize(s) is s
    for s in ["👨\u200d👩\u200d👧", "a\u00a0b", "a\u3000b", "\ue000private"]:  # not printable, but harmless
        assert sanitize(s) == s
    text = "line one\n\tline two é\nline three"
    assert sanitize(text, multiline=True) is text


def test_newlines_follow_the_flag():
    assert sanitize("a\nb\r\nc\rd") == "a␤b␤c␤d"
    assert sanitize("a\tb") == "a b"
    assert sanitize("a\nb\r\nc\rd", multiline=True) == "a\nb\nc␍d"
    assert sanitize("a\r\n", multiline=True) == "a\n"


def test_only_strings():
    with pytest.raises(TypeError):
        sanitize(b"bytes")  # type: ignore[arg-type]
