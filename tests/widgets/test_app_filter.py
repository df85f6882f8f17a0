"""The app's remembering ANSI-to-truecolor filter gives the same segments as Textual's own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.segment import ControlType, Segment
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from textual.color import Color
from textual.filter import ANSIToTruecolor

from bmoe_top.tui.widgets.lines import MemoTruecolor

STYLES = [
    None, Style(), Style(color="red"), Style(color="bright_white", bgcolor="blue"), Style(color="#61afef"),
    Style(bgcolor="#203040", color="#ffffff", bold=True), Style(dim=True, color="yellow"), Style(dim=True),
    Style(color="color(200)"), Style(italic=True, color="#7f848e"), Style(bgcolor="default", color="default"),
]
BACKGROUNDS = [Color(0, 0, 0), Color(30, 30, 46), Color(255, 255, 255)]

segment = st.builds(lambda text, i: Segment(text, STYLES[i]), st.text(min_size=1, max_size=4),
                    st.integers(0, len(STYLES) - 1))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.lists(segment, max_size=12), min_size=1, max_size=4),
       bg=st.sampled_from(BACKGROUNDS), control_at=st.integers(-1, 11))
def test_same_segments_as_textual(lines: list[list[Segment]], bg: Color, control_at: int) -> None:
    inner = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
    memo = MemoTruecolor(inner)
    for line in lines:
        if 0 <= control_at < len(line):  # a control segment: Textual drops its control codes
            line[control_at] = Segment(line[control_at].text, line[control_at].style, [(ControlType.BELL,)])
        for _ in range(2):  # the second pass answers from the memo
            assert memo.apply(line, bg) == inner.apply(line, bg)


def test_truecolor_line_comes_back_as_it_is() -> None:
    line = [Segment("ab", Style(color="#61afef")), Segment("cd", Style(bgcolor="#203040", color="#ffffff"))]
    memo = MemoTruecolor(ANSIToTruecolor(DEFAULT_TERMINAL_THEME))
    assert memo.apply(line, Color(0, 0, 0)) is line
    assert memo.apply([Segment("x", Style(color="red"))], Color(0, 0, 0))[0].style.color.triplet is not None


def test_memo_is_bounded() -> None:
    memo = MemoTruecolor(ANSIToTruecolor(DEFAULT_TERMINAL_THEME))
    bg = Color(0, 0, 0)
    for i in range(MemoTruecolor.MAX_STYLES + 10):
        memo.apply([Segment("x", Style(color=f"#{i % 256:02x}{i // 256 % 256:02x}00"))], bg)
    assert memo.held() <= MemoTruecolor.MAX_STYLES + 1


def test_styles_built_afresh_each_frame_add_no_entries() -> None:
    """A chart builds its cells' styles anew every frame: equal styles share one entry, so the
    memo (and the styles it holds) stays at one entry per distinct style over any number of
    frames instead of growing by a frame's styles until the cap (the live What-if chart at 300
    tokens/s)."""
    memo = MemoTruecolor(ANSIToTruecolor(DEFAULT_TERMINAL_THEME))
    bg = Color(0, 0, 0)
    looks = [dict(color="red"), dict(color="#61afef", bold=True), dict(color="white", bgcolor="#203040"),
             dict(dim=True, color="yellow")]
    for frame in range(500):
        line = [Segment(f"{frame}", Style(**look)) for look in looks]  # new Style objects each frame
        out = memo.apply(line, bg)
        assert out == ANSIToTruecolor(DEFAULT_TERMINAL_THEME).apply(line, bg)
        assert memo.held() == len(looks)


def test_no_color_memo_holds_one_entry_per_distinct_style() -> None:
    from bmoe_top.tui.app import NoColorFilter

    f = NoColorFilter()
    bg = Color(0, 0, 0)
    for _ in range(500):
        out = f.apply([Segment("x", Style(color="red", bgcolor="#ffffff")), Segment("y", Style(bold=True))], bg)
        assert [s.style.color.is_default for s in out if s.style is not None and s.style.color] == [True, True]
        assert len(f._memo) == 2


def test_ascii_filter_keeps_every_line_ascii_and_its_cells() -> None:
    """The ASCII look's filter: text outside ASCII becomes its stand-in in as many cells (a wide
    character two, a combining one none), styles and ASCII segments untouched."""
    from rich.cells import cell_len

    from bmoe_top.tui.app import AsciiFilter

    style = Style(bold=True)
    line = [Segment("ok", style), Segment("Δ 5% ± 2 ≈ ← ▶ │ 日本 e\u0301", style)]
    out = AsciiFilter().apply(line, Color(0, 0, 0))
    assert out[0] is line[0]
    assert out[1].text == "d 5% + 2 ~ < > | ???? e" and out[1].style is style
    assert cell_len(out[1].text) == cell_len(line[1].text)
