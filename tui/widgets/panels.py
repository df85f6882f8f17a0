"""Text panels: the run panel, the answer text, the problems list and the log pane.

Model text is always shown as plain text: never parsed as Rich markup, and terminal control
sequences are made visible (``␛[31m``) rather than sent to the terminal.
"""

from __future__ import annotations

import re
import textwrap

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.present.summary import run_panel_rows
from bmoe_top.tui.widgets.lines import FrameCache
from bmoe_top.tui.widgets.palette import KIND_STYLE

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PICTURES = {i: chr(0x2400 + i) for i in range(32)}
_PICTURES[0x7F] = "␡"


def visible_text(s: str) -> str:
    """``s`` with every control character except newline and tab made visible (``\\x1b`` -> ``␛``)."""
    return _CONTROL.sub(lambda m: _PICTURES.get(ord(m.group()), "\ufffd"), s)


def safe_text(s: str, style: str = "") -> Text:
    """A Rich Text of ``s`` that the terminal shows literally (no markup, no control sequences)."""
    return Text(visible_text(s), style=style)


class RunPanel(Widget):
    """Model, arch, layers, experts, flags, mode and the run summary; 'missing' where absent.

    Drawn with the line API: values wrap under their own column, and the screen is laid out
    again only when the number of lines changes (the values change every token).
    """

    DEFAULT_CSS = "RunPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[int, int] | None = None
        self._lines: list[Strip] = []
        self._lines_width = -1

    def update_from_run(self) -> None:
        key = (self.run.version, self.playback.cursor)
        if key == self._key:
            return
        self._key = key
        before = len(self._lines)
        self._lines = self.build(self.content_region.width)
        self.refresh(layout=len(self._lines) != before)

    def get_content_height(self, container, viewport, width: int) -> int:
        if width != self._lines_width:
            self._lines = self.build(width)
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if width != self._lines_width:
            self._lines = self.build(width)
        if y < len(self._lines):
            return self._lines[y].crop(0, width).extend_cell_length(width)
        return Strip.blank(width)

    def text(self) -> str:
        """The panel as plain text (for tests and the headless twin)."""
        return "\n".join(ln.text for ln in self.build(max(20, self.content_region.width or 44)))

    def rows(self) -> list[tuple[str, str, str]]:
        """(label, value, style) rows; 'missing' where the source did not send the value."""
        pb = self.playback
        playing = "▶ " + pb.speed_label() if pb.playing else ""
        return [(label, value, KIND_STYLE[kind]) for label, value, kind in run_panel_rows(self.run, pb.cursor, playing)]

    def build(self, width: int) -> list[Strip]:
        """The rows as strips of ``width`` cells, values wrapped under their own column."""
        self._lines_width = width
        rows = self.rows()
        width = max(20, width)
        lw = min(14 if width >= 36 else 11, max(len(r[0]) for r in rows)) + 1
        vw = max(8, width - lw)
        label_style, out = Style(color="#7f848e"), []
        for label, value, style in rows:
            st = Style.parse(style) if style else Style()
            parts = textwrap.wrap(value, vw, break_long_words=True, break_on_hyphens=False) or [""]
            out.append(Strip([Segment(label[: lw - 1].ljust(lw), label_style), Segment(parts[0], st)]))
            out += [Strip([Segment(" " * lw), Segment(cont, st)]) for cont in parts[1:]]
        return out


def answer_text(run: RunModel, cursor: int, max_chars: int | None = None) -> Text:
    """Every turn's prompt, reasoning and answer up to the playback cursor, as safe Text.

    With ``max_chars`` only the newest turns are built, until about that many characters (the
    tail a fixed-height panel shows), reading only the end of each text: the cost of a repaint
    stays bounded however long the run.
    """
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
        for turn in reversed(visible):
            out = Text()
            if many or turn.prompt:
                head = f"── turn {turn.index + 1}" + (f" (id {turn.id})" if turn.id is not None else "")
                out.append(head + "\n", style="#e5c07b")
            if turn.prompt:
                out.append_text(safe_text("> " + turn.prompt.strip() + "\n", "#61afef"))
            end = turn.text_len
            if not full and has_end and cursor > 0 and last >= turn.first_token and turn_at_cursor == turn.index:
                if end_at_cursor == end_at_cursor:  # not NaN
                    end = min(end, int(end_at_cursor))
            if max_chars is not None and end > max_chars:
                text = "…" + (turn.text_tail(max_chars) if end == turn.text_len else turn.text_prefix(end)[-max_chars:])
            else:
                text = turn.text if end == turn.text_len else turn.text_prefix(end)
            if turn.reasoning:
                out.append_text(safe_text(turn.reasoning.rstrip() + "\n", "italic #7f848e"))
            out.append_text(safe_text(text))
            if turn.cancelled:
                out.append(" [cancelled]", style="#e06c75")
            if turn.error:
                out.append_text(safe_text(f"\n[error: {turn.error}]", "#e06c75"))
            out.append("\n")
            parts.append(out)
            size += len(out)
            if max_chars is not None and size >= max_chars:
                break
    if not any(p.plain.strip() for p in parts):
        return Text("no answer text in this source", style="italic #7f848e")
    return Text("").join(reversed(parts))


class AnswerPanel(Static):
    """The whole answer of every turn up to the cursor (the Text tab). Repaints only while shown."""

    DEFAULT_CSS = "AnswerPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[int, int] | None = None

    def update_from_run(self) -> None:
        if not self.is_on_screen:
            return
        key = (self.run.version, self.playback.cursor)
        if key == self._key:
            return
        self._key = key
        self.update(self.renderable_for())

    def renderable_for(self) -> Text:
        return answer_text(self.run, self.playback.cursor)


class AnswerTail(Widget):
    """The newest lines of the answer, filling a fixed-height panel (the side of the main screen).

    Its size never depends on the text, so streaming tokens repaint this widget only, never the
    screen's layout; only the tail is wrapped (by Rich, keeping code indentation), and the
    wrapped lines are drawn with the line API.
    """

    DEFAULT_CSS = "AnswerTail { height: 1fr; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[int, int] | None = None
        self.frame = FrameCache(self._build)

    def update_from_run(self) -> None:
        key = (self.run.version, self.playback.cursor)
        if key != self._key:
            self._key = key
            self.refresh()

    def renderable_for(self) -> Text:
        width, height = self.content_region.size
        return answer_text(self.run, self.playback.cursor, max_chars=max(400, width * height * 2))

    def _build(self, width: int, height: int) -> list[Strip]:
        if height <= 0:
            return []
        console = self.app.console
        rendered = console.render_lines(self.renderable_for(), console.options.update_width(max(1, width)), pad=False)
        return [Strip(line) for line in rendered[-height:]]

    def render_line(self, y: int) -> Strip:
        width, height = self.content_region.size
        lines = self.frame.get((self._key, width, height), width, height)
        if y < len(lines):
            return lines[y].extend_cell_length(width)
        return Strip.blank(width)


class ProblemsPanel(Static):
    """Bad lines, with counts by reason, then the first ones with their line numbers."""

    DEFAULT_CSS = "ProblemsPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, **kw) -> None:
        super().__init__(**kw)
        self.run = run
        self._key: int | None = None

    def update_from_run(self) -> None:
        if self._key == self.run.version:
            return
        self._key = self.run.version
        self.update(self.renderable_for())

    def renderable_for(self) -> Text:
        run = self.run
        with run.lock:
            probs = list(run.problems[:500])
            total = run.problem_count
        if not total:
            return Text("no problems: every line was understood", style="#98c379")
        out = Text(f"{total} bad line(s)\n", style="bold #e06c75")
        by_reason: dict[str, int] = {}
        for p in probs:
            by_reason[p.reason] = by_reason.get(p.reason, 0) + 1
        for reason, count in sorted(by_reason.items(), key=lambda kv: -kv[1]):
            out.append(f"  {count:>6} × ", style="#e06c75")
            out.append_text(safe_text(reason + "\n"))
        out.append("\n")
        for p in probs[:200]:
            out.append(f"{p.source.rsplit('/', 1)[-1]}:{p.lineno}: ", style="#7f848e")
            out.append_text(safe_text(f"{p.reason}: {p.text[:120]}\n"))
        return out
