"""The answer tail as it was drawn before it was wrapped per paragraph: the whole answer text of
every turn up to the cursor, wrapped by Rich in one go, and its last ``height`` lines. The
reference the incremental :class:`bmoe_top.tui.widgets.panels.AnswerTail` must match line for
line (tests/widgets/test_answer_tail.py) and the baseline of benchmarks/bench_answer_tail.py."""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.widgets.palette import BLANK, Look
from bmoe_top.tui.widgets.panels import safe_text


def reference_answer_text(run: RunModel, cursor: int, look: Look | None = None,
                          max_chars: int | None = None) -> Text:
    """Every turn's prompt, reasoning and answer up to the playback cursor, as safe Text. With
    ``max_chars`` only the newest turns, until about that many characters, each answer cut to its
    last ``max_chars`` characters after a "…" (how the tail was drawn before: a bounded text, but a
    cut that moves with every token, so the lines of a long paragraph were broken anew each time)."""
    mono = look is not None and look.colors == "mono"
    head_style = "bold" if mono else "#e5c07b"
    prompt_style = "bold" if mono else "#61afef"
    dim = "italic" if mono else "italic #7f848e"
    alert = "bold" if mono else "#e06c75"
    parts: list[Text] = []
    size = 0
    with run.lock:
        n = run.tokens.n
        full = cursor >= n
        has_end = run.tokens.has("text_end")
        last = min(cursor, n) - 1
        end_at_cursor = run.tokens.view("text_end", last, last + 1)[0] if has_end and last >= 0 else float("nan")
        turn_at_cursor = run.tokens.view("turn", last, last + 1)[0] if has_end and last >= 0 else float("nan")
        many = len(run.turns) > 1
        visible = [t for t in run.turns if not (n and t.first_token > cursor)]
        # a turn's last row: the row before the next turn's first (the newest turn: the run's last)
        last_row = {t.index: nxt.first_token - 1 for t, nxt in zip(run.turns, run.turns[1:])}
        for turn in reversed(visible):
            out = Text()
            if many or turn.prompt:
                head = f"── turn {turn.index + 1}" + (f" (id {turn.id})" if turn.id is not None else "")
                out.append(head + "\n", style=head_style)
            if turn.prompt:
                out.append_text(safe_text("> " + turn.prompt.strip() + "\n", prompt_style, multiline=True))
            end = turn.text_len
            inside = not full and has_end and cursor > 0 and last >= turn.first_token and turn_at_cursor == turn.index
            if inside and end_at_cursor == end_at_cursor:  # not NaN
                end = min(end, int(end_at_cursor))
            # how the turn ended is said once the cursor reaches its end, not at a token inside it
            ended = not inside or last >= last_row.get(turn.index, n - 1)
            if max_chars is not None and end > max_chars:
                text = "…" + (turn.text_tail(max_chars) if end == turn.text_len else turn.text_prefix(end)[-max_chars:])
            else:
                text = turn.text if end == turn.text_len else turn.text_prefix(end)
            if turn.reasoning:
                out.append_text(safe_text(turn.reasoning.rstrip() + "\n", dim, multiline=True))
            out.append_text(safe_text(text, multiline=True))
            if turn.cancelled and ended:
                out.append(" [cancelled]", style=alert)
            if turn.error and ended:
                out.append_text(safe_text(f"\n[error: {turn.error}]", alert, multiline=True))
            out.append("\n")
            parts.append(out)
            size += len(out)
            if max_chars is not None and size >= max_chars:
                break
    if not any(p.plain.strip() for p in parts):
        return Text("no answer text in this source" if not run.status.live else
                    "no answer yet", style=dim)
    return Text("").join(reversed(parts))


def reference_tail(run: RunModel, cursor: int, console: Console, width: int, height: int,
                   look: Look | None = None, cut: bool = False) -> list[Strip]:
    """The last ``height`` lines of the whole answer wrapped at ``width`` cells. ``cut``: of the
    text cut to what the panel holds plus two lines, as the tail was drawn before (the baseline of
    benchmarks/bench_answer_tail.py; not the same lines when a paragraph is longer than the cut)."""
    if height <= 0:
        return []
    limit = max(400, (width + 1) * (height + 2)) if cut else None
    text = reference_answer_text(run, cursor, look, max_chars=limit)
    rendered = console.render_lines(text, console.options.update_width(max(1, width)), pad=False)
    return [Strip([s if s.style is not None else Segment(s.text, BLANK, s.control) for s in line])
            for line in rendered[-height:]]


def cells(lines: list[Strip]) -> list[list[tuple[str, Style | None]]]:
    """Each line as its (text, style) runs with empty segments left out and equal neighbours
    merged: two lists of lines are equal exactly when they draw the same cells."""
    out: list[list[tuple[str, Style | None]]] = []
    for line in lines:
        runs: list[tuple[str, Style | None]] = []
        for seg in line:
            if not seg.text:
                continue
            if runs and runs[-1][1] == seg.style:
                runs[-1] = (runs[-1][0] + seg.text, seg.style)
            else:
                runs.append((seg.text, seg.style))
        out.append(runs)
    return out
