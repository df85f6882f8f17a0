"""Text panels: the run panel, the answer text, the problems list, and the header numbers.

Text from outside (model text, names, problem lines) always goes through
:func:`bmoe_top.parsers.sanitize.sanitize` (:func:`safe_text`): never parsed as Rich markup, and
terminal control sequences are made visible (``␛[31m``) rather than sent to the terminal.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.present.numbers import mib, sig
from bmoe_top.tui.present.summary import run_panel_rows
from bmoe_top.tui.widgets.base import ascii_strip, look_of
from bmoe_top.tui.widgets.lines import FrameCache, blank
from bmoe_top.tui.widgets.palette import BLANK, Look

__all__ = ["AnswerPanel", "AnswerTail", "ProblemsPanel", "RunPanel", "answer_text", "header_parts", "safe_text"]


def safe_text(s: str, style: str | Style = "", multiline: bool = True) -> Text:
    """A Rich Text of ``s`` that the terminal shows literally (no markup, no control sequences);
    ``multiline=False`` for one-line places (a status line, a table cell): line breaks show as ``␤``."""
    return Text(sanitize(s, multiline=multiline), style=style)


class RunPanel(Widget):
    """Model, arch, layers, experts, flags, the mode in plain words, the status, then the run (or
    the last turn's) numbers under a heading, and the device sidecar; 'missing' where absent.

    Drawn with the line API: values wrap under their own column, and the screen is laid out
    again only when the number of lines changes (the values change every token).
    """

    DEFAULT_CSS = "RunPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[Any, ...] | None = None
        self._lines: list[Strip] = []
        self._lines_width = -1
        self._row_lines: dict[tuple[Any, ...], list[Strip]] = {}  # the last build's rows -> their lines

    @property
    def look(self) -> Look:
        return look_of(self)

    def update_from_run(self, force: bool = False) -> None:
        key = (self.run.version, self.playback.sel, self.playback.n, self.look)
        if key == self._key and not force:
            return
        self._key = key
        before = len(self._lines)
        self._lines = self.build(self.content_region.width)
        self.refresh(layout=len(self._lines) != before)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        if width != self._lines_width:
            self._lines = self.build(width)
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if width != self._lines_width:
            self._lines = self.build(width)
        if y < len(self._lines):
            line = self._lines[y].crop(0, width)
            return line if line.cell_length >= width else Strip([*line, *blank(width - line.cell_length)], width)
        return blank(width)

    def text(self) -> str:
        """The panel as plain text (for tests and the headless twin)."""
        return "\n".join(ln.text for ln in self.build(max(20, self.content_region.width or 44)))

    def rows(self) -> list[tuple[str, str, str]]:
        """(label, value, kind) rows; 'missing' where the source did not send the value."""
        pb = self.playback
        playing = "▶ " + pb.speed_label() if pb.playing else ""
        return run_panel_rows(self.run, pb.sel + 1, playing)

    def build(self, width: int) -> list[Strip]:
        """The rows as strips of ``width`` cells, values wrapped under their own column."""
        self._lines_width = width
        look = self.look
        rows = self.rows()
        width = max(20, width)
        lw = min(14 if width >= 36 else 11, max(len(r[0]) for r in rows if r[2] != "section")) + 1
        vw = max(8, width - lw)
        out: list[Strip] = []
        prev, made = self._row_lines, {}
        for row in rows:
            key = (row, width, lw, look)  # most rows read the same from one repaint to the next
            lines = prev.get(key)
            if lines is None:
                lines = self._row_strips(*row, width, lw, vw, look)
            made[key] = lines
            out += lines
        self._row_lines = made
        return out

    @staticmethod
    def _row_strips(label: str, value: str, kind: str, width: int, lw: int, vw: int, look: Look) -> list[Strip]:
        """One row: its label, then its value wrapped under its own column (``lw`` cells in)."""
        label, value = sanitize(label), sanitize(value)
        if kind == "section":
            out = [Strip([Segment(label[:width], look.kind_style("section"))])]
        else:
            st = look.kind_style(kind)
            if len(value) <= vw and value.isprintable() and not value.endswith(" "):
                parts = [value]  # what textwrap gives for a value that fits, without its cost
            else:
                parts = textwrap.wrap(value, vw, break_long_words=True, break_on_hyphens=False) or [""]
            out = [Strip([Segment(label[: lw - 1].ljust(lw), look.dim), Segment(parts[0], st)])]
            out += [Strip([Segment(" " * lw, BLANK), Segment(cont, st)]) for cont in parts[1:]]
        return [ascii_strip(ln) for ln in out] if look.ascii else out


def header_parts(run: RunModel, look: Look) -> list[tuple[str, Style]]:
    """The run's numbers for a one-line header: tok/s, hit %, flash share of wall, MiB per token,
    resident/budget, memory and temperature when known; each labelled (``run``: the whole run;
    ``last 32``: the newest tokens of a live run)."""
    out: list[tuple[str, Style]] = []
    with run.lock:
        n = run.tokens.n
        tok = run.tokens
        live = run.status.live
        lo = max(0, n - 32) if live else 0
        scope = "last 32" if live and n > 32 else "run"
        flash_part = None
        if n and tok.has("wall_ms"):
            wall = run.column_stats("wall_ms", lo, n)
            if wall.count and wall.sum > 0:
                out.append((f"{sig(1000.0 * wall.count / wall.sum)} tok/s", look.label))
                mode, _ = run.mode()
                flash = run.column_stats("stall_ms" if mode == "overlap" else "io_ms", lo, n)
                if flash.count:
                    flash_part = (f"flash {100.0 * flash.sum / wall.sum:.0f}%", look.series["flash"])
        hit = tok.last("cache_hit_pct") if n else math.nan
        if math.isfinite(hit):
            out.append(("no cache" if hit < 0 else f"hit {hit:.1f}%", look.label))
        if flash_part:
            out.append(flash_part)
        if n and tok.has("read_mib"):
            read = run.column_stats("read_mib", lo, n)
            if read.count:
                out.append((f"{mib(read.sum / read.count)}/tok", look.label))
        res_v = run.resident_mib if run.resident_mib is not None else run.summary.get("resident_mib")
        bud_v = run.budget_mib if run.budget_mib is not None else run.summary.get("budget_mib")
        if res_v is not None or bud_v is not None:
            res = mib(res_v) if res_v is not None else "?"
            bud = mib(bud_v) if bud_v is not None else "?"
            out.append((f"cache {res}/{bud}", look.label))
        rss = tok.last("rss_mib") if n else math.nan
        if math.isfinite(rss):
            out.append((f"rss {mib(rss)}", look.label))
        avail = tok.last("mem_available_mib") if n else math.nan
        if math.isfinite(avail):
            out.append((f"avail {mib(avail)}", look.label))
        side = run.sidecar
        for key, label in (("peak_rss_kb", "peak rss"),):
            try:
                out.append((f"{label} {mib(float(side[key]) / 1024)}", look.label))
            except (KeyError, ValueError):
                pass
        for key, label, div in (("cpu_temp_max_mC", "cpu", 1000.0), ("batt_temp_max_dC", "batt", 10.0)):
            try:
                out.append((f"{label} {float(side[key]) / div:.0f}°C", look.label))
            except (KeyError, ValueError):
                pass
    if out:
        out.insert(0, (f"{scope}:", look.dim))
    return out


def answer_text(run: RunModel, cursor: int, max_chars: int | None = None, highlight: str = "",
                look: Look | None = None) -> Text:
    """Every turn's prompt, reasoning and answer up to the playback cursor, as safe Text.

    With ``max_chars`` only the newest turns are built, until about that many characters (the
    tail a fixed-height panel shows), reading only the end of each text: the cost of a repaint
    stays bounded however long the run. ``highlight``: a search term marked in the text.
    """
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
        for turn in reversed(visible):
            out = Text()
            if many or turn.prompt:
                head = f"── turn {turn.index + 1}" + (f" (id {turn.id})" if turn.id is not None else "")
                out.append(head + "\n", style=head_style)
            if turn.prompt:
                out.append_text(safe_text("> " + turn.prompt.strip() + "\n", prompt_style, multiline=True))
            end = turn.text_len
            if not full and has_end and cursor > 0 and last >= turn.first_token and turn_at_cursor == turn.index:
                if end_at_cursor == end_at_cursor:  # not NaN
                    end = min(end, int(end_at_cursor))
            if max_chars is not None and end > max_chars:
                text = "…" + (turn.text_tail(max_chars) if end == turn.text_len else turn.text_prefix(end)[-max_chars:])
            else:
                text = turn.text if end == turn.text_len else turn.text_prefix(end)
            if turn.reasoning:
                out.append_text(safe_text(turn.reasoning.rstrip() + "\n", dim, multiline=True))
            out.append_text(safe_text(text, multiline=True))
            if turn.cancelled:
                out.append(" [cancelled]", style=alert)
            if turn.error:
                out.append_text(safe_text(f"\n[error: {turn.error}]", alert, multiline=True))
            out.append("\n")
            parts.append(out)
            size += len(out)
            if max_chars is not None and size >= max_chars:
                break
    if not any(p.plain.strip() for p in parts):
        return Text("no answer text in this source" if not run.status.live else
                    "no answer yet", style=dim)
    joined = Text("").join(reversed(parts))
    if highlight:
        joined.highlight_words([highlight], style="reverse", case_sensitive=False)
    return joined


class AnswerPanel(Static):
    """The whole answer of every turn up to the cursor (the Text tab). Repaints only while shown;
    ``query`` marks a search term."""

    DEFAULT_CSS = "AnswerPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[Any, ...] | None = None
        self.query_text = ""

    def update_from_run(self, force: bool = False) -> None:
        if not self.is_on_screen and not force:
            return
        key = (self.run.version, self.playback.sel, self.query_text)
        if key == self._key and not force:
            return
        self._key = key
        self.update(self.renderable_for())

    def renderable_for(self) -> Text:
        return answer_text(self.run, self.playback.sel + 1, highlight=self.query_text, look=look_of(self))

    def matches(self) -> int:
        """Occurrences of the search term in the text shown."""
        if not self.query_text:
            return 0
        return self.renderable_for().plain.lower().count(self.query_text.lower())


class AnswerTail(Widget):
    """The newest lines of the answer, filling a fixed-height panel (the side of the main screen).

    Its size never depends on the text, so streaming tokens repaint this widget only, never the
    screen's layout; only the tail is wrapped (by Rich, keeping code indentation), and the
    wrapped lines are drawn with the line API.
    """

    DEFAULT_CSS = "AnswerTail { height: 1fr; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[Any, ...] | None = None
        self.frame = FrameCache(self._build)

    def update_from_run(self, force: bool = False) -> None:
        key = (self.run.version, self.playback.sel, look_of(self))
        if key != self._key or force:
            self._key = key
            self.refresh()

    def renderable_for(self) -> Text:
        width, height = self.content_region.size
        # enough text for height + 2 full lines (a wrapped line holds at most width + 1 chars, its
        # dropped space): the tail is wrapped again at every fast repaint, so no more than that
        limit = max(400, (width + 1) * (height + 2))
        return answer_text(self.run, self.playback.sel + 1, max_chars=limit, look=look_of(self))

    def _build(self, width: int, height: int) -> list[Strip]:
        if height <= 0:
            return []
        console = self.app.console
        rendered = console.render_lines(self.renderable_for(), console.options.update_width(max(1, width)), pad=False)
        return [Strip([s if s.style is not None else Segment(s.text, BLANK, s.control) for s in line])
                for line in rendered[-height:]]

    def render_line(self, y: int) -> Strip:
        width, height = self.content_region.size
        lines = self.frame.get((self._key, width, height), width, height)
        if y < len(lines):
            line = lines[y]
            return line if line.cell_length >= width else Strip([*line, *blank(width - line.cell_length)], width)
        return blank(width)


class ProblemsPanel(Static):
    """Bad lines, with counts by reason, then the first ones with their line numbers."""

    DEFAULT_CSS = "ProblemsPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, **kw: Any) -> None:
        super().__init__(**kw)
        self.run = run
        self._key: tuple[Any, ...] | None = None
        self.query_text = ""

    def update_from_run(self, force: bool = False) -> None:
        """Build the list again when a problem arrived, the filter or the look changed (its
        height follows the text: each build lays the screen out again)."""
        with self.run.lock:
            key = (self.run.problem_count, len(self.run.problems), self.query_text, look_of(self))
        if self._key == key and not force:
            return
        self._key = key
        self.update(self.renderable_for())

    def renderable_for(self) -> Text:
        run = self.run
        look = look_of(self)
        mono = look.colors == "mono"
        with run.lock:
            probs = list(run.problems[:500])
            total = run.problem_count
        if not total:
            return Text("no problems: every line was understood", style="" if mono else "#98c379")
        q = self.query_text.lower()
        if q:
            probs = [p for p in probs if q in p.reason.lower() or q in p.text.lower() or q in p.source.lower()]
        out = Text(f"{total} bad line(s)" + (f", {len(probs)} shown matching “{sanitize(self.query_text)}”"
                                            if q else "") + "\n", style="bold" if mono else "bold #e06c75")
        by_reason: dict[str, int] = {}
        for p in probs:
            by_reason[p.reason] = by_reason.get(p.reason, 0) + 1
        for reason, count in sorted(by_reason.items(), key=lambda kv: -kv[1]):
            out.append(f"  {count:>6} × ", style="" if mono else "#e06c75")
            out.append_text(safe_text(reason + "\n", multiline=True))
        out.append("\n")
        for p in probs[:200]:
            where = f"{p.source.rsplit('/', 1)[-1]}:{p.lineno}: "
            out.append_text(safe_text(where, "" if mono else "#7f848e", multiline=False))
            out.append_text(safe_text(f"{p.reason}: {p.text[:120]}", multiline=False) + Text("\n"))
        return out
