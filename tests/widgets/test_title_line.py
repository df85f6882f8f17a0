"""A screen's title line (tui/widgets/panels.py ``TitleLine``): a text that fits is drawn over the
widget's own colours as a Static draws it, an update shows the new text, and one that does not
fit ends in an ellipsis after its last part or word that fits whole (a Static wrapped it at a
word and dropped the rest; an ellipsis at the width cut words: ``hit 90.0 % run tot…``)."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static

from bmoe_top.tui.widgets.panels import TitleLine, word_cut

CSS = "TitleLine, Static { width: 24; height: 1; background: #223344; color: #ddeeff; padding: 0 1; }"


class _TitleApp(App[None]):
    CSS = CSS

    def compose(self) -> ComposeResult:
        yield TitleLine(id="t")
        yield Static(id="s")


def _drawn(widget) -> list:
    return list(widget.render_lines(Region(0, 0, widget.outer_size.width, 1))[0])


def _cells(segments) -> list:
    """Each cell's character and what shows of it: its colours and attributes (a blank shows
    only its background; click metadata shows nothing)."""
    return [(ch, str(seg.style.bgcolor) if ch == " " else str(seg.style)) for seg in segments for ch in seg.text]


async def test_the_title_line_draws_what_a_static_draws_and_cuts_with_an_ellipsis():
    app = _TitleApp()
    async with app.run_test(size=(40, 4)) as pilot:
        line, static = app.query_one("#t", TitleLine), app.query_one("#s", Static)
        for text in (Text("short", style="bold #e5c07b"),
                     Text.assemble(("bmoe-top ", "bold #e5c07b"), ("● live", "#98c379"), "  t 12")):
            text.no_wrap, text.overflow = True, "ellipsis"
            line.update(text)
            static.update(text)
            await pilot.pause()
            assert line.plain == text.plain
            ours, theirs = _drawn(line), _drawn(static)
            assert "".join(s.text for s in ours) == "".join(s.text for s in theirs)
            assert _cells(ours) == _cells(theirs)
        long = Text.assemble(("bmoe-top ", "bold #e5c07b"), ("● live", "#98c379"), "  tokens 1,234 (turn 9)")
        long.no_wrap, long.overflow = True, "ellipsis"
        line.update(long)
        await pilot.pause()
        drawn = "".join(s.text for s in _drawn(line))
        assert len(drawn) == line.outer_size.width and drawn.rstrip().endswith("● live…")


def test_a_title_too_long_is_cut_after_a_whole_part_else_a_whole_word():
    title = Text("bmoe-top x  ■ ended   │ run: 100 tok/s · hit 90.0 % total · flash/wall 20.0 %")
    assert word_cut(title, 200).plain == title.plain
    assert word_cut(title, 50).plain == "bmoe-top x  ■ ended   │ run: 100 tok/s…"
    assert word_cut(title, 70).plain == "bmoe-top x  ■ ended   │ run: 100 tok/s · hit 90.0 % total…"
    assert word_cut(Text("bmoe-top replay-of-a-long-name"), 20).plain == "bmoe-top…"
    for width in range(10, 90):
        shown = word_cut(title, width).plain
        assert len(shown) <= width and (shown == title.plain or shown.endswith("…"))
        assert shown.rstrip("…").split()[-1] in title.plain.split()


class _CountingTitle(TitleLine):
    """A title line that counts the lines it is asked to draw."""

    drawn = 0

    def render_line(self, y: int):
        self.drawn += 1
        return super().render_line(y)


class _CountingApp(App[None]):
    CSS = CSS

    def compose(self) -> ComposeResult:
        yield _CountingTitle(id="t")


async def test_an_update_to_the_same_text_repaints_nothing_and_a_changed_one_repaints():
    app = _CountingApp()
    async with app.run_test(size=(40, 4)) as pilot:
        line = app.query_one("#t", _CountingTitle)

        def title(tokens: int, style: str = "bold #e5c07b") -> Text:
            return Text.assemble(("bmoe-top ", style), ("● live", "#98c379"), f"  tokens {tokens}")

        line.update(title(1))
        await pilot.pause()
        drawn = line.drawn
        assert drawn > 0 and line.plain.endswith("tokens 1")
        for _ in range(3):  # a new Text object that draws the same (the screen builds one per repaint)
            line.update(title(1))
            await pilot.pause()
        assert line.drawn == drawn
        line.update(title(1, style="bold #ff0000"))  # same characters, another colour
        await pilot.pause()
        assert line.drawn > drawn
        drawn = line.drawn
        line.update(title(2))
        await pilot.pause()
        assert line.drawn > drawn and line.plain.endswith("tokens 2")
