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

from bmoe_top.tui.playback import Playback
from bmoe_top.tui.run import RunModel, fmt, run_summary, summary_rows

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
        self._key = None
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
        s = run_summary(self.run)
        meta = s["meta"]
        out: list[tuple[str, str, str]] = []

        def row(label: str, value: str, style: str = "") -> None:
            out.append((label, value, "#7f848e italic" if value == "missing" else style))

        model = meta.get("model") or meta.get("recording_source") or "missing"
        row("model", model.rsplit("/", 1)[-1], "bold")
        row("arch", meta.get("arch", "missing"))
        row("layers", fmt(s["n_layer"]) if s["n_layer"] else "missing")
        experts = fmt(s["n_expert"]) if s["n_expert"] else "missing"
        if s["top_k"]:
            experts += f", top-{s['top_k']}"
        row("experts", experts)
        flags = " ".join(f"{k}={v}" for k, v in meta.items() if k in (
            "moe_stream", "cache_mb", "io_threads", "o_direct", "overlap", "prefetch", "threads", "n_ctx",
            "cache_auto", "force_cache", "dense_weights", "drop_cold_frac"))
        row("flags", flags or "missing")
        row("mode", f"{s['mode']} ({s['mode_reason']})")
        detail = self.run.status_detail
        if detail and detail.startswith(s["status"]):
            status = detail
        else:
            status = s["status"] + (f" — {detail}" if detail else "")
        row("status", status)
        n = self.run.tokens.n
        playing = "  ▶ " + self.playback.speed_label() if self.playback.playing else ""
        row(self.run.row_unit, f"{self.playback.cursor:,} / {n:,}{playing}")
        out.append(("", "", ""))
        for label, text, kind in summary_rows(s):
            row(label, text, "#d19a66" if kind == "derived" else "")
        if s["problems"]:
            row("problems", f"{s['problems']} bad lines (p)", "bold #e06c75")
        return out

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
    tail a fixed-height panel shows): the cost of a repaint stays bounded however long the run.
    """
    parts: list[Text] = []
    size = 0
    with run.lock:
        n = run.tokens.n
        full = cursor >= n
        text_end = run.tokens.view("text_end") if run.tokens.has("text_end") else None
        turn_col = run.tokens.view("turn") if text_end is not None else None
        visible = [t for t in run.turns if not (n and t.first_token > cursor)]
        for turn in reversed(visible):
            out = Text()
            if len(run.turns) > 1 or turn.prompt:
                head = f"── turn {turn.index + 1}" + (f" (id {turn.id})" if turn.id is not None else "")
                out.append(head + "\n", style="#e5c07b")
            if turn.prompt:
                out.append_text(safe_text("> " + turn.prompt.strip() + "\n", "#61afef"))
            text = turn.text
            if not full and text_end is not None and cursor > 0:
                last = min(cursor, n) - 1
                if last >= turn.first_token and turn_col[last] == turn.index:
                    end = text_end[last]
                    if end == end:  # not NaN
                        text = text[: int(end)]
            if max_chars is not None and len(text) > max_chars:
                text = "…" + text[-max_chars:]
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
        self._key = None

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
        self._key = None
        self._frame_key = None
        self._lines: list[Strip] = []

    def update_from_run(self) -> None:
        key = (self.run.version, self.playback.cursor)
        if key != self._key:
            self._key = key
            self.refresh()

    def renderable_for(self) -> Text:
        width, height = self.content_region.size
        return answer_text(self.run, self.playback.cursor, max_chars=max(400, width * height * 2))

    def render_line(self, y: int) -> Strip:
        width, height = self.content_region.size
        key = (self._key, width, height)
        if key != self._frame_key:
            self._frame_key = key
            console = self.app.console
            rendered = console.render_lines(self.renderable_for(), console.options.update_width(max(1, width)),
                                            pad=False)
            self._lines = [Strip(line) for line in rendered[-height:]] if height > 0 else []
        if y < len(self._lines):
            return self._lines[y].extend_cell_length(width)
        return Strip.blank(width)


class ProblemsPanel(Static):
    """Bad lines, with counts by reason, then the first ones with their line numbers."""

    DEFAULT_CSS = "ProblemsPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, **kw) -> None:
        super().__init__(**kw)
        self.run = run
        self._key = None

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
