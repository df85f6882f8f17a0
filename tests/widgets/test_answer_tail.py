"""The answer tail wrapped per paragraph (:class:`TailWrap`) draws exactly the last lines of the
whole answer wrapped in one go (tests/helpers/answer_tail.py), as it grows, when the cursor moves
back, when the panel is resized and when the look changes; and a growing paragraph is wrapped
again only from one of its last lines."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich._wrap import divide_line
from rich.console import Console
from textual.app import App, ComposeResult
from textual.geometry import Region

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.status import Status
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import AnswerTail, TailWrap, answer_tail, answer_text
from tests.helpers.answer_tail import cells, reference_answer_text, reference_tail

CONSOLE = Console(width=200, force_terminal=True, color_system="truecolor")
LOOKS = [None, Look(), Look(colors="mono"), Look(colors="16", ascii=True)]

#: Pieces of answer text: words, long words, runs of spaces, line breaks, code indentation, tabs,
#: wide (CJK) and combining characters, emoji, CRLF, a lone CR, escape sequences and other controls.
PIECES = st.one_of(
    st.sampled_from(["the ", "word ", "a", " ", "   ", "\n", "\n\n", "    def f():\n", "\treturn 1\n",
                     "x" * 37, "漢字かな", "Ｆｕｌｌ", "é", "e\u0301", "👍🏽 ", "line\r\n", "\r", "\x1b[31m",
                     "\x0b", "\u200b", "\x85", "\xa0", "\u3000", "end."]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
)

# one step of a run: text added to the newest turn, or a turn ending (cancelled or not, with an
# error or not) and the next one starting (with a prompt or not, and reasoning or not)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("text"), st.lists(PIECES, min_size=1, max_size=5).map("".join)),
    st.tuples(st.just("reasoning"), st.lists(PIECES, min_size=1, max_size=3).map("".join)),
    st.tuples(st.just("turn"), st.tuples(st.booleans(), st.booleans(), st.sampled_from(["", "hi", "  Why?\n x "]))),
), min_size=1, max_size=40)


def _check(run: RunModel, wrap: TailWrap, cursor: int, width: int, height: int, look: Look | None) -> None:
    got = answer_tail(run, cursor, wrap, CONSOLE, width, height, look)
    want = reference_tail(run, cursor, CONSOLE, width, height, look)
    assert cells(got) == cells(want)
    assert len(got) == min(height, len(want))


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, width=st.integers(1, 70), height=st.integers(1, 30), look=st.sampled_from(LOOKS),
       first_prompt=st.sampled_from([None, "", "hello"]), live=st.booleans(), data=st.data())
def test_the_tail_is_the_end_of_the_whole_wrap(steps, width, height, look, first_prompt, live, data):
    run = RunModel()
    if live:
        run.set_status(Status.GENERATING)
    run.begin_turn(id=7, prompt=first_prompt)
    wrap = TailWrap()
    for kind, what in steps:
        if kind == "text":
            run.append_answer(what)
        elif kind == "reasoning":
            run.append_answer(reasoning=what)
        else:
            cancelled, error, prompt = what
            turn = run.current_turn()
            run.finish_turn({}, cancelled=cancelled)
            if error and turn is not None:
                run.set_turn_error(turn.id, "backend \x1b[31mfailed\x07\nat step")
            run.begin_turn(id=len(run.turns) + 7, prompt=prompt)
        turn = run.current_turn()
        assert turn is not None
        run.add_token_row({"text_end": turn.text_len, "turn": turn.index})
        _check(run, wrap, run.tokens.n, width, height, look)
    # the cursor moved back to an earlier token, then forward again
    back = data.draw(st.integers(0, run.tokens.n), label="seek")
    _check(run, wrap, back, width, height, look)
    _check(run, wrap, run.tokens.n, width, height, look)
    # a resize and a new look
    width2 = data.draw(st.integers(1, 70), label="width2")
    height2 = data.draw(st.integers(1, 30), label="height2")
    _check(run, wrap, run.tokens.n, width2, height2, look)
    _check(run, wrap, run.tokens.n, width2, height2, data.draw(st.sampled_from(LOOKS), label="look2"))


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, look=st.sampled_from(LOOKS),
       cursor_back=st.integers(0, 5))
def test_the_text_tab_shows_the_whole_answer(steps, look, cursor_back):
    run = RunModel()
    run.begin_turn(prompt="q")
    for kind, what in steps:
        if kind == "text":
            run.append_answer(what)
        elif kind == "reasoning":
            run.append_answer(reasoning=what)
        else:
            run.finish_turn({}, cancelled=what[0])
            run.begin_turn(prompt=what[2])
        turn = run.current_turn()
        assert turn is not None
        run.add_token_row({"text_end": turn.text_len, "turn": turn.index})
    cursor = max(0, run.tokens.n - cursor_back)
    want = reference_answer_text(run, cursor, look)
    got = answer_text(run, cursor, look=look)
    assert got.plain == want.plain
    assert cells(list(CONSOLE.render_lines(got, pad=False))) == cells(list(CONSOLE.render_lines(want, pad=False)))


def test_a_growing_paragraph_is_wrapped_again_from_its_last_lines_only():
    """An answer without line breaks, a word per token: each repaint gives Rich about one line
    of text, not the whole tail, and still draws the whole wrap's last lines."""
    run = RunModel()
    run.begin_turn(prompt="go")
    wrap = TailWrap()
    width, height = 60, 27
    per_build = []
    for i in range(600):
        run.append_answer(f"w{i} ")
        run.add_token_row({"text_end": len(run.current_turn().text)})
        before = wrap.wrapped
        lines = answer_tail(run, run.tokens.n, wrap, CONSOLE, width, height)
        per_build.append(wrap.wrapped - before)
    assert cells(lines) == cells(reference_tail(run, run.tokens.n, CONSOLE, width, height))
    assert len(run.current_turn().text) > (width + 1) * height  # more than the panel holds
    late = per_build[300:]
    assert max(late) <= 3 * (width + 1), late  # the last line or two plus a token, never the tail
    # the lines that did not change are the same objects: nothing was drawn again
    again = answer_tail(run, run.tokens.n, wrap, CONSOLE, width, height)
    assert all(a is b for a, b in zip(again, lines, strict=True))


@settings(max_examples=25, deadline=None)
@example(word="x" * 25, width=27, height=2, seeks=[47])  # every line a word that fills it but for its space
@given(word=st.sampled_from(["w", "word", "漢字", "x" * 25, "a  b", "ab\u3000"]), width=st.integers(3, 60),
       height=st.integers(1, 20), seeks=st.lists(st.integers(1, 250), min_size=1, max_size=5))
def test_a_seek_back_in_a_long_paragraph_wraps_about_a_panel(word, width, height, seeks):
    """The cursor moved back to an earlier token of an answer without line breaks: the lines are
    the whole wrap's, and Rich is given about a panel of text, not the paragraph."""
    run = RunModel()
    run.begin_turn(prompt="go")
    wrap = TailWrap()
    for i in range(250):
        run.append_answer(f"{word}{i} ")
        turn = run.current_turn()
        assert turn is not None
        run.add_token_row({"text_end": turn.text_len, "turn": 0})
    answer_tail(run, run.tokens.n, wrap, CONSOLE, width, height)
    for cursor in sorted(seeks, reverse=True):  # each one further back
        before = wrap.wrapped
        _check(run, wrap, cursor, width, height, None)
        shown = sum(len(w) + len(str(i)) + 1 for i, w in enumerate([word] * cursor))
        cost = wrap.wrapped - before
        assert cost <= shown + 40  # never more than the text up to the cursor (and the turn head, prompt)
        panel = (height + TailWrap.SPARE * 2 + 4) * (width + 4)  # a panel of lines, and a few more
        if shown > 3 * panel:  # about a panel when the text is longer
            assert cost <= panel + 40


def test_a_finished_paragraph_is_not_wrapped_again():
    run = RunModel()
    run.begin_turn(prompt="go")
    wrap = TailWrap()
    run.append_answer("first paragraph, long enough to wrap over a few lines of the panel\n" * 3)
    run.add_token_row({"text_end": run.current_turn().text_len})
    answer_tail(run, run.tokens.n, wrap, CONSOLE, 30, 20)
    before = wrap.wrapped
    run.append_answer("more")
    answer_tail(run, run.tokens.n, wrap, CONSOLE, 30, 20)
    assert wrap.wrapped - before == len("more")


@settings(max_examples=400, deadline=None)
@given(head=st.lists(PIECES, max_size=12).map("".join), more=st.lists(PIECES, min_size=1, max_size=4).map("".join),
       width=st.integers(1, 40))
def test_rich_breaks_a_line_greedily(head, more, width):
    """What :class:`TailWrap` relies on in Rich's line breaking, on one paragraph (no line break,
    no tab): every line start stays one when text is added at the end, and the lines from a
    start that ``TailWrap._restarts`` accepts are the lines of the text from there on."""
    head, more = (s.replace("\n", " ").replace("\t", " ") for s in (head, more))
    before = divide_line(head, width, fold=True)
    text = head + more
    after = divide_line(text, width, fold=True)
    assert set(before) <= set(after)
    for r in after:
        if TailWrap._restarts(text, r, width):
            assert [r + o for o in divide_line(text[r:], width, fold=True)] == [o for o in after if o > r]


class _TailApp(App[None]):
    CSS = "AnswerTail { width: 40; height: 12; }"

    def __init__(self, run: RunModel, playback: Playback) -> None:
        super().__init__()
        self.run, self.playback = run, playback

    def compose(self) -> ComposeResult:
        yield AnswerTail(self.run, self.playback)


async def test_a_repaint_of_the_changed_rows_draws_what_a_full_repaint_draws():
    """The panel repaints only the rows whose line changed: what it draws after each token (and
    after a seek back) is what a full repaint of the same lines draws, and a token that only
    grows the last line repaints fewer rows than the panel has."""
    run = RunModel()
    run.begin_turn(prompt="why?")
    playback = Playback(run)
    app = _TailApp(run, playback)
    async with app.run_test(size=(60, 16)) as pilot:
        tail = app.query_one(AnswerTail)
        region = Region(0, 0, tail.size.width, tail.size.height)
        partial = 0
        for i in range(120):
            run.append_answer(f"w{i} " + ("\n" if i % 17 == 16 else ""))
            turn = run.current_turn()
            assert turn is not None
            run.add_token_row({"text_end": turn.text_len, "turn": 0})
            if i == 100:
                playback.seek(60)
            else:
                playback.cursor = run.tokens.n
            tail.update_from_run()
            if len(tail._styles_cache._dirty_lines) < tail.size.height:
                partial += 1
            await pilot.pause()
            drawn = [line.text for line in tail.render_lines(region)]
            tail._styles_cache.clear()  # the whole panel drawn again from its lines
            assert drawn == [line.text for line in tail.render_lines(region)]
        assert partial > 60
        shown = [line.text.strip() for line in tail.render_lines(region)]
        assert "w59" in " ".join(shown) and "w60" not in " ".join(shown)  # the seek back to token 60


def test_a_cancelled_turn_says_so_at_its_end_not_at_the_selected_token():
    run = RunModel()
    run.ensure_turn()
    for i in range(10):
        run.append_answer(f"w{i} ", "")
        run.add_token_row({"wall_ms": 10.0, "turn": 0, "text_end": float(run.turns[0].text_len)})
    run.finish_turn({"tokens": 10}, cancelled=True)
    for cursor, says in ((4, False), (9, False), (10, True)):
        text = answer_text(run, cursor).plain
        assert ("[cancelled]" in text) is says, (cursor, text)
        assert " ".join(text.split()).endswith("w9 [cancelled]" if says else f"w{cursor - 1}")
