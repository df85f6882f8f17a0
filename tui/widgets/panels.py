"""Text panels: the run panel, the answer text, the problems list, and the header numbers.

Text from outside (model text, names, problem lines) always goes through
:func:`bmoe_top.parsers.sanitize.sanitize` (:func:`safe_text`): never parsed as Rich markup, and
terminal control sequences are made visible (``␛[31m``) rather than sent to the terminal.
"""

from __future__ import annotations

import math
import re
import textwrap
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

from rich._wrap import divide_line
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.filter import LineFilter
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.model import RowUnit, RunModel
from bmoe_top.tui.model.alerts import AlertEngine
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.present.numbers import MISSING, mib, show
from bmoe_top.tui.present.search import contains, spans
from bmoe_top.tui.present.summary import TIERS_HEADING, run_panel_rows
from bmoe_top.tui.widgets.base import ascii_strip, look_of, truecolor_filters
from bmoe_top.tui.widgets.lines import FrameCache, blank, middle_ellipsis
from bmoe_top.tui.widgets.palette import BLANK, Look
from bmoe_top.tui.widgets.search import SearchCountChanged

__all__ = ["AnswerPanel", "AnswerTail", "ProblemsPanel", "RunPanel", "TailWrap", "TitleLine", "answer_tail",
           "answer_text", "header_parts", "label_columns", "row_strips", "safe_text"]


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

    def __init__(self, run: RunModel, playback: Playback, alerts: AlertEngine | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        #: the screen's alert rules: their pending and firing alerts are rows under the status
        self.alerts = alerts
        self._key: tuple[Any, ...] | None = None
        self._lines: list[Strip] = []
        self._lines_width = -1
        self._row_lines: dict[tuple[Any, ...], list[Strip]] = {}  # the last build's rows -> their lines
        #: the last build drew the process memory reading (its memory tiers section): a reading
        #: alone rebuilds the panel only then (between turns a live child's comes every second)
        self._draws_memory = True

    @property
    def look(self) -> Look:
        return look_of(self)

    @property
    def draws_memory(self) -> bool:
        """Whether the last build drew the process memory reading (its memory tiers section)."""
        return self._draws_memory

    def update_from_run(self, force: bool = False) -> None:
        key = (self.run.version, self.run.memory_version if self._draws_memory else None, self.playback.sel,
               self.playback.n, self.look, None if self.alerts is None else self.alerts.rows)
        if key == self._key and not force:
            return
        self._key = key
        was = self._lines
        self._lines = self.build(self.content_region.width)
        if force or len(self._lines) != len(was):
            self.refresh(layout=len(self._lines) != len(was))
            return
        # a row that reads the same keeps its strip (build): repaint only the rows that changed
        width = self.content_region.width  # rows in content coordinates (Widget.refresh)
        rows = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(was, self._lines)) if a is not b]
        if rows:
            self.refresh(*rows)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        if width != self._lines_width:
            self._lines = self.build(width)
        return len(self._lines)

    def get_line_filters(self) -> Sequence[LineFilter]:
        return truecolor_filters(self.look, super().get_line_filters())

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
        alerts = () if self.alerts is None else self.alerts.active()
        with self.run.lock:  # the rows a live source adds wait: the newest row is the one read
            # a view that follows a live run at its pace shows the newest row: one that came after
            # the playback's last tick is not a past row (the heading flipped to "tokens 1-N", the
            # "now" figures to missing, the panel's line count with them: a layout of the screen)
            newest = pb.follow and pb.speed >= 1.0 and pb.selected is None
            return run_panel_rows(self.run, pb.n if newest else pb.sel + 1, playing, alerts)

    def build(self, width: int) -> list[Strip]:
        """The rows as strips of ``width`` cells, values wrapped under their own column."""
        self._lines_width = width
        look = self.look
        rows = self.rows()
        self._draws_memory = any(kind == "section" and label == TIERS_HEADING for label, _v, kind in rows)
        width = max(20, width)
        lw, vw = label_columns(rows, width)
        out: list[Strip] = []
        prev, made = self._row_lines, {}
        for row in rows:
            key = (row, width, lw, look)  # most rows read the same from one repaint to the next
            lines = prev.get(key)
            if lines is None:
                lines = row_strips(*row, width, lw, vw, look)
            made[key] = lines
            out += lines
        self._row_lines = made
        return out


def label_columns(rows: Sequence[tuple[str, str, str]], width: int) -> tuple[int, int]:
    """The label column (cells, with its gap) and the value column of a panel of ``rows`` drawn
    ``width`` cells wide: labels that name their scope (``tok/s (since start)``) get up to half
    the width, and a longer one goes on a line of its own (:func:`row_strips`)."""
    labels = [len(r[0]) for r in rows if r[2] != "section"]
    lw = min(min(20, max(14, width // 2)) if width >= 36 else 11, max(labels, default=0)) + 1
    return lw, max(8, width - lw)


def row_strips(label: str, value: str, kind: str, width: int, lw: int, vw: int, look: Look) -> list[Strip]:
    """One (label, value, kind) row of a panel ``width`` cells wide as strips: the label, then the
    value wrapped under its own column (``lw`` cells in); a label as wide as its column or wider
    is whole on a line of its own (wrapped at spaces when wider than the panel: never cut at its
    end), the value under it (:func:`label_columns` gives ``lw`` and ``vw``)."""
    label, value = sanitize(label), sanitize(value)
    if kind == "section":  # a heading wider than the panel wraps: never cut at its end
        heads = textwrap.wrap(" ".join(middle_ellipsis(w, width) for w in label.split(" ")), width,
                              break_long_words=False, break_on_hyphens=False) or [""]
        out = [Strip([Segment(h, look.kind_style("section"))]) for h in heads]
    else:
        st = look.kind_style(kind)
        if len(value) <= vw and value.isprintable() and not value.endswith(" "):
            parts = [value]  # what textwrap gives for a value that fits, without its cost
        else:  # wrapped at spaces; a word wider than the column (a file name) keeps its ends
            words = " ".join(middle_ellipsis(w, vw) for w in value.split(" "))
            parts = textwrap.wrap(words, vw, break_long_words=False, break_on_hyphens=False) or [""]
        if len(label) < lw:
            out = [Strip([Segment(label.ljust(lw), look.dim), Segment(parts[0], st)])]
        else:  # a label wider than its column: whole on lines of its own (wrapped), the value under it
            heads = textwrap.wrap(" ".join(middle_ellipsis(w, width) for w in label.split(" ")), width,
                                  break_long_words=False, break_on_hyphens=False) or [""]
            out = [*(Strip([Segment(h, look.dim)]) for h in heads),
                   Strip([Segment(" " * lw, BLANK), Segment(parts[0], st)])]
        out += [Strip([Segment(" " * lw, BLANK), Segment(cont, st)]) for cont in parts[1:]]
    return [ascii_strip(ln) for ln in out] if look.ascii else out


class TitleLine(Widget):
    """One line of styled text (a screen's title), drawn with the line API: :meth:`update` keeps
    the text, its first repaint at a width renders it once (cut after a whole part or word with an
    ellipsis, :func:`word_cut`, over the widget's own colours), and a repaint draws that line
    again. A ``Static`` laid its text out again on every repaint, and the title repaints twice a
    second while a run streams. The text must already be safe to draw (:func:`safe_text`,
    :func:`~bmoe_top.parsers.sanitize.sanitize`)."""

    DEFAULT_CSS = "TitleLine { height: 1; }"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = Text()
        self._line: tuple[tuple[int, Style], Strip] | None = None  # ((width, base style), line)

    @property
    def plain(self) -> str:
        """The text shown, without its styles."""
        return self._text.plain

    def update(self, text: Text) -> None:
        """Show ``text`` (one line: what does not fit the width ends in an ellipsis); a text that
        draws the same as the one shown (same characters, styles and overflow) repaints nothing
        (a forced update of the title, or a key change the title does not draw)."""
        if _drawn_as(text) == _drawn_as(self._text):
            return
        self._text = text
        self._line = None
        self.refresh()

    def get_line_filters(self) -> Sequence[LineFilter]:
        return truecolor_filters(look_of(self), super().get_line_filters())

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if y or width <= 0:
            return blank(width)
        base = self.rich_style
        key = (width, base)
        if self._line is None or self._line[0] != key:
            console = self.app.console
            text = word_cut(self._text, width)
            segs = console.render_lines(text, console.options.update(width=width, height=1), pad=False)[0]
            self._line = (key, Strip(Segment.apply_style(segs, base), None).adjust_cell_length(width, base))
        return self._line[1]


def _drawn_as(text: Text) -> tuple[Any, ...]:
    """What :class:`TitleLine` draws ``text`` from."""
    return text.plain, text.spans, text.style, text.overflow, text.no_wrap, text.end


def word_cut(text: Text, width: int) -> Text:
    """``text`` on one line of ``width`` cells: whole when it fits, else cut with ``…`` after its
    last part that fits whole (parts are separated by ``·`` or ``│``), else after its last word that
    fits; a first word longer than the line is cut in it, the only way to show some of it."""
    out = text.copy()
    out.no_wrap, out.overflow = True, "ellipsis"
    if out.cell_len <= width:
        return out
    plain = out.plain
    word = part = cells = 0
    for i, ch in enumerate(plain):
        cells += cell_len(ch)
        if cells > width - 1:
            break
        if ch in "·│" and i:
            part = i
        elif ch == " " and i and plain[i - 1] != " ":
            word = i
    end = part or word
    while end and plain[end - 1] in " ·│":  # no separator before the ellipsis
        end -= 1
    if end == 0:
        return out
    cut = out[:end]
    cut.append("…")
    cut.no_wrap, cut.overflow = True, "ellipsis"
    return cut


#: Rows the title's rates cover while a source is live (the newest up to the viewed one).
RECENT_ROWS = 32


def _recent_rate(run: RunModel, lo: int, hi: int) -> tuple[float, str] | None:
    """The title's tok/s over rows ``[lo, hi)`` (the catalogue's ``recent.tok_s``) and the words
    after it: token rows, tokens over their own wall time; interval rows, the tokens every slot
    generated over the intervals' time (``all slots``); request rows, the requests' tokens over
    their generation time."""
    tok = run.tokens
    unit = run.row_unit
    if unit == RowUnit.INTERVAL and tok.has("tokens_in_interval") and tok.has("interval_s"):
        n_tok, span = run.column_stats("tokens_in_interval", lo, hi), run.column_stats("interval_s", lo, hi)
        return (n_tok.sum / span.sum, "(all slots)") if span.count and span.sum > 0 else None
    if unit == RowUnit.REQUEST and tok.has("n_gen") and tok.has("t_gen_ms"):
        n_tok, gen = run.column_stats("n_gen", lo, hi), run.column_stats("t_gen_ms", lo, hi)
        return (1000.0 * n_tok.sum / gen.sum, "") if gen.count and gen.sum > 0 else None
    if unit == RowUnit.TOKEN and tok.has("wall_ms"):
        wall = run.column_stats("wall_ms", lo, hi)
        return (1000.0 * wall.count / wall.sum, "") if wall.count and wall.sum > 0 else None
    return None


def _at(run: RunModel, name: str, stop: int) -> float:
    """Column ``name`` at row ``stop - 1`` (NaN when absent or not held)."""
    return float(run.tokens.view(name, stop - 1, stop)[0]) if stop > 0 and run.tokens.has(name) else math.nan


def header_parts(run: RunModel, look: Look, stop: int | None = None) -> list[tuple[str, Style]]:
    """The run's numbers for a one-line header as of row ``stop`` (the viewed row + 1; default
    the newest), each read from the catalogue (``recent.*``, ``token.cache_hit_pct``): tok/s, flash
    share of wall and MiB per token over the newest rows up to it (its first part names them:
    ``last 32:`` while the source is live, ``run:`` for the whole run at its newest row,
    ``tokens 1-199:`` for a run viewed before its newest row, live or finished), the hit rate
    reached there (``so far``; at the last row of an ended run, the catalogue's ended words:
    ``total``),
    resident/budget, memory and temperature when known."""
    out: list[tuple[str, Style]] = []
    with run.lock:
        total = run.tokens.n
        n = total if stop is None else max(0, min(stop, total))
        live = run.status.live
        lo = max(0, n - RECENT_ROWS) if live else 0
        unit = str(run.row_unit)
        if live and n > RECENT_ROWS:
            scope = q("recent.tok_s").words(n=RECENT_ROWS) + (f" {unit}s" if unit != "token" else "")
        else:  # the whole run only at its newest row: before it, the rows up to the viewed one
            scope = "run" if n == total else f"{unit}s 1-{n:,}"
        flash_part = None
        rate = _recent_rate(run, lo, n) if n else None
        if rate is not None:
            out.append((f"{show(q('recent.tok_s'), rate[0])} tok/s" + (f" {rate[1]}" if rate[1] else ""), look.label))
        if n and run.tokens.has("wall_ms"):
            wall = run.column_stats("wall_ms", lo, n)
            mode, _ = run.mode()
            flash = run.column_stats("stall_ms" if mode == "overlap" else "io_ms", lo, n)
            if wall.count and wall.sum > 0 and flash.count:
                # means: a token whose wall is missing (impossible, unread) counts in neither
                share = 100.0 * (flash.sum / flash.count) / (wall.sum / wall.count)
                flash_part = (f"{q('recent.flash_pct').label} {show(q('recent.flash_pct'), share)}",
                              look.series["flash"])
        hit = _at(run, "cache_hit_pct", n)
        if math.isfinite(hit):
            hq = q("token.cache_hit_pct")
            words = hq.words_at(not live and n == total)
            out.append(("no cache" if hit < 0 else f"{hq.label} {show(hq, hit)} {words}", look.label))
        if flash_part:
            out.append(flash_part)
        if n and run.tokens.has("read_mib"):
            read = run.column_stats("read_mib", lo, n)
            if read.count:
                out.append((f"{show(q('recent.read_mib_tok'), read.sum / read.count)}/tok", look.label))
        res_v = run.resident_mib if run.resident_mib is not None else run.summary.get("resident_mib")
        if n < total:  # a row before the newest: the cache as that row says it, when the rows carry it
            at = _at(run, "resident_mib", n)
            res_v = at if math.isfinite(at) else None
        bud_v = run.budget_mib if run.budget_mib is not None else run.summary.get("budget_mib")
        if res_v is not None and bud_v is not None:
            out.append((f"cache {mib(res_v)}/{mib(bud_v)}", look.label))
        elif res_v is not None:
            out.append((f"cache {mib(res_v)} (budget {MISSING})", look.label))
        elif bud_v is not None:
            out.append((f"cache budget {mib(bud_v)}", look.label))
        rss = _at(run, "rss_mib", n)
        if math.isfinite(rss):
            out.append((f"rss {mib(rss)}", look.label))
        avail = _at(run, "mem_available_mib", n)
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


#: One piece of a turn's text block: its text, its style, and whether it comes from outside (then
#: sanitized when drawn: :func:`safe_text`).
_Piece = tuple[str, str, bool]
#: One line of the answer between two line breaks (a paragraph, wrapped on its own): its safe
#: (text, style) runs.
_Para = tuple[tuple[str, str], ...]


def _answer_styles(look: Look | None) -> tuple[str, str, str, str]:
    """(turn head, prompt, dim, alert) styles of the answer text in ``look``."""
    if look is not None and look.colors == "mono":
        return "bold", "bold", "italic", "bold"
    return "#e5c07b", "#61afef", "italic #7f848e", "#e06c75"


def _answer_blocks(run: RunModel, cursor: int, look: Look | None,
                   lines: int | None = None) -> tuple[list[tuple[int, list[_Piece]]], bool]:
    """(turn index, pieces) of every turn up to the playback cursor, newest first, and whether
    the run has more than one turn. Each block is the turn's head, prompt, reasoning, answer up
    to the cursor, ``[cancelled]``, error, and ends with a line break. ``lines``: only the newest
    blocks that make at least that many lines (each line break starts one)."""
    head_style, prompt_style, dim, alert = _answer_styles(look)
    out: list[tuple[int, list[_Piece]]] = []
    breaks = 0
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
            pieces: list[_Piece] = []
            if many or turn.prompt:
                head = f"── turn {turn.index + 1}" + (f" (id {turn.id})" if turn.id is not None else "")
                pieces.append((head + "\n", head_style, False))
            if turn.prompt:
                pieces.append(("> " + turn.prompt.strip() + "\n", prompt_style, True))
            end = turn.text_len
            inside = not full and has_end and cursor > 0 and last >= turn.first_token and turn_at_cursor == turn.index
            if inside and end_at_cursor == end_at_cursor:  # not NaN
                end = min(end, int(end_at_cursor))
            # how the turn ended is said once the cursor reaches its end, not at a token inside it
            ended = not inside or last >= last_row.get(turn.index, n - 1)
            if turn.reasoning:
                pieces.append((turn.reasoning.rstrip() + "\n", dim, True))
            pieces.append((turn.text if end == turn.text_len else turn.text_prefix(end), "", True))
            if turn.cancelled and ended:
                pieces.append((" [cancelled]", alert, False))
            if turn.error and ended:
                pieces.append((f"\n[error: {turn.error}]", alert, True))
            pieces.append(("\n", "", False))
            out.append((turn.index, pieces))
            if lines is not None:
                breaks += sum(s.count("\n") for s, _, _ in pieces)
                if breaks + 1 >= lines:
                    break
    return out, many


def _no_answer(run: RunModel, look: Look | None) -> Text:
    return Text("no answer text in this source" if not run.status.live else "no answer yet",
                style=_answer_styles(look)[2])


def answer_text(run: RunModel, cursor: int, look: Look | None = None) -> Text:
    """Every turn's prompt, reasoning and answer up to the playback cursor, as safe Text (the
    Text tab)."""
    parts: list[Text] = []
    for _, pieces in reversed(_answer_blocks(run, cursor, look)[0]):
        out = Text()
        for s, style, outside in pieces:
            if outside:
                out.append_text(safe_text(s, style, multiline=True))
            else:
                out.append(s, style=style)
        parts.append(out)
    if not any(p.plain.strip() for p in parts):
        return _no_answer(run, look)
    return Text("").join(parts)


def _blank(blocks: list[tuple[int, list[_Piece]]], many: bool) -> bool:
    """Whether the answer text of ``blocks`` shows nothing but white space (then the panel says
    there is no answer)."""
    if not blocks:
        return True
    if many:
        return False  # every turn shows its head
    for s, _, outside in blocks[0][1]:
        # a character that is not white space is still one once sanitized
        if s and (not s.isspace() or (outside and not sanitize(s, multiline=True).isspace())):
            return False
    return True


def _paragraphs_back(blocks: list[tuple[int, list[_Piece]]]) -> Iterator[tuple[Hashable, _Para]]:
    """The answer's paragraphs (its lines between line breaks), last first, each with a name that
    stays while it grows: (turn index, where it starts in the turn's block). The text from
    outside is sanitized one paragraph at a time (the same text as :func:`safe_text` of the whole
    piece), so only the paragraphs the panel shows are read."""
    for k, (index, pieces) in enumerate(blocks):
        if k == 0:
            yield (index, "end"), ()  # the empty line after the last line break
        body = pieces[:-1]  # the block's closing line break is the boundary to the next block
        starts = [0]
        for s, _, _ in body:
            starts.append(starts[-1] + len(s))
        cur: list[tuple[str, str]] = []
        for at, (s, style, outside) in zip(reversed(starts[:-1]), reversed(body), strict=True):
            j = len(s)
            while True:
                i = s.rfind("\n", 0, j)
                seg = s[i + 1:j]
                if outside:
                    if j < len(s) and seg.endswith("\r"):
                        seg = seg[:-1]  # CRLF is one line break
                    seg = sanitize(seg, multiline=True)
                if seg:
                    cur.append((seg, style))
                if i < 0:
                    break
                yield (index, at + i + 1), tuple(reversed(cur))
                cur, j = [], i
        yield (index, 0), tuple(reversed(cur))


def _para_text(para: _Para, start: int = 0) -> Text:
    """The Text of ``para`` from character ``start`` on."""
    out = Text()
    at = 0
    for s, style in para:
        if at + len(s) > start:
            out.append(s[max(0, start - at):], style=style or None)
        at += len(s)
    return out


def _extends(old: _Para, new: _Para) -> bool:
    """Whether ``new`` is ``old`` with more text at the end of its last run (``old`` is ``new``
    cut back)."""
    return (bool(old) and len(new) == len(old) and new[:-1] == old[:-1] and new[-1][1] == old[-1][1]
            and new[-1][0].startswith(old[-1][0]))


_WORD_REST = re.compile(r"\S*\s*")
_NON_SPACE = re.compile(r"\S")
#: How a match of the ``/`` search is marked, and the current one (no colour: NO_COLOR keeps it).
_MARK = Style(reverse=True)
_CURRENT = Style(reverse=True, bold=True, underline=True)


class _Wrapped:
    """One paragraph wrapped: ``lines`` its last lines (``count`` in all), ``starts`` the
    character where each line starts (None when a tab makes them depend on the whole line)."""

    __slots__ = ("count", "lines", "para", "starts")

    def __init__(self, para: _Para, lines: list[Strip], count: int, starts: list[int] | None) -> None:
        self.para, self.lines, self.count, self.starts = para, lines, count, starts


class TailWrap:
    """The wrapped lines of the answer's last paragraphs, kept from one repaint to the next: a
    paragraph that did not change is not wrapped again, and a growing one is wrapped again only
    from the start of one of its last lines.

    Rich breaks a paragraph greedily (``rich._wrap.divide_line``): where a line starts depends only
    on the text before it, so every line start of a paragraph is still one when text is added at
    its end; and the lines from a start where a word starts are the lines of the text from there
    on, as are those from a start inside a folded word, unless the rest of that word fits a line
    only without its trailing white space (Rich then folds that white space onto lines of its own:
    wrapped again from an earlier line). Cut
    back (the cursor moved to an earlier token), the lines that end before its last word stay, so
    a paragraph is wrapped again from a line start a panel's height before that. Held: the
    paragraphs of the last repaint only (the panel's lines, plus a few), dropped when the size or
    the look changes. ``wrapped`` counts the characters given to Rich (tests read it).
    """

    #: Lines kept per paragraph beyond the panel's height (a growing paragraph is wrapped again
    #: from one of its last lines).
    SPARE = 4

    def __init__(self) -> None:
        self._shape: Hashable = None
        self._paras: dict[Hashable, _Wrapped] = {}
        self.wrapped = 0

    def lines(self, paragraphs: Iterable[tuple[Hashable, _Para]], console: Console, width: int,
              height: int, shape: Hashable) -> list[Strip]:
        """The last ``height`` lines of ``paragraphs`` (last first, as :func:`_paragraphs_back`
        gives them) wrapped at ``width`` cells. ``shape``: what else the lines depend on (the
        look): a change drops what is kept."""
        if (width, height, shape) != self._shape:
            self._shape, self._paras = (width, height, shape), {}
        options = console.options.update_width(width)
        keep = height + self.SPARE
        old, made = self._paras, {}
        got: list[list[Strip]] = []
        count = 0
        for name, para in paragraphs:
            w = self._wrap(old.get(name), para, console, options, width, keep)
            made[name] = w
            got.append(w.lines)
            count += w.count
            if count >= height:
                break
        self._paras = made
        return [line for lines in reversed(got) for line in lines][-height:]

    def _render(self, text: Text, console: Console, options: ConsoleOptions) -> list[Strip]:
        self.wrapped += len(text)
        return [Strip([s if s.style is not None else Segment(s.text, BLANK, s.control) for s in line])
                for line in console.render_lines(text, options, pad=False)]

    def _wrap(self, was: _Wrapped | None, para: _Para, console: Console, options: ConsoleOptions,
              width: int, keep: int) -> _Wrapped:
        if was is not None and was.para == para:
            return was
        plain = "".join(s for s, _ in para)
        tab = "\t" in plain  # tabs are expanded from the start of the paragraph
        if was is not None and was.starts is not None and not tab and _extends(was.para, para):
            first_kept = was.count - len(was.lines)  # the line was.lines[0] is
            last = len(was.starts) - 1
            hit = self._restart(was.starts, para, plain, range(last, max(-1, last - self.SPARE, first_kept - 1), -1),
                                width, console, options)
            if hit is not None:
                i, new, again = hit
                return _Wrapped(para, (was.lines[: i - first_kept] + new)[-keep:], i + len(new), again)
        if was is not None and was.starts is not None and not tab and _extends(para, was.para):
            # cut back (the cursor moved to an earlier token): the lines that end before its last
            # word are the same; wrap again from a line start at least ``keep`` lines before that
            q = len(plain.rstrip())
            while q > 0 and not plain[q - 1].isspace():
                q -= 1
            j = bisect_left(was.starts, q)  # was.starts[:j] start before its last word
            hit = self._restart(was.starts, para, plain, range(j - 1 - keep, max(-1, j - 1 - keep - self.SPARE), -1),
                                width, console, options)
            if hit is not None:
                i, new, again = hit
                return _Wrapped(para, new[-keep:], i + len(new), again)
        new = self._render(_para_text(para), console, options)
        starts: list[int] | None = None
        if not tab:
            offsets = divide_line(plain, width, fold=True)
            if len(offsets) + 1 == len(new):
                starts = [0, *offsets]
        return _Wrapped(para, new[-keep:], len(new), starts)

    def _restart(self, starts: list[int], para: _Para, plain: str, candidates: Iterable[int], width: int,
                 console: Console, options: ConsoleOptions) -> tuple[int, list[Strip], list[int]] | None:
        """Wrap ``para`` again from the first of its line starts ``starts[i]`` (``i`` from
        ``candidates``) where that gives the same lines: (i, the lines from there, every line
        start). None when none does, or when Rich's lines and its line breaker disagree."""
        for i in candidates:
            r = starts[i]
            if r and not self._restarts(plain, r, width):
                continue
            new = self._render(_para_text(para, r), console, options)
            offsets = divide_line(plain[r:], width, fold=True)
            if len(offsets) + 1 != len(new):
                return None
            return i, new, starts[:i] + [r] + [r + o for o in offsets]
        return None

    @staticmethod
    def _restarts(plain: str, r: int, width: int) -> bool:
        """Whether the lines of ``plain`` from its line start ``r`` are the lines of
        ``plain[r:]``: a word starts there (white space before it, a word before that), which Rich
        places on a line of its own as it places the first word; or the rest of a folded word
        starts there with a character that is not white space and does not fit a line only
        without its trailing white space (Rich's fold puts that white space on lines of its own)."""
        if plain[r].isspace():
            return False
        if plain[r - 1].isspace() and _NON_SPACE.search(plain, 0, r) is not None:
            return True
        m = _WORD_REST.match(plain, r)
        assert m is not None  # \S*\s* matches the empty string
        rest = m.group(0)
        return not (cell_len(rest.rstrip()) <= width < cell_len(rest))


class AnswerPanel(Static):
    """The whole answer of every turn up to the cursor (the Text tab). Repaints only while shown;
    a :class:`~bmoe_top.tui.widgets.search.Searchable`: the ``/`` query's occurrences are marked
    (reversed), the current one also bold and underlined, and scrolled to."""

    DEFAULT_CSS = "AnswerPanel { height: auto; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[Any, ...] | None = None
        self.query_text = ""
        self.current = -1
        self._spans: list[tuple[int, int]] = []

    def update_from_run(self, force: bool = False) -> None:
        if not self.is_on_screen and not force:
            return
        key = (self.run.version, self.playback.sel, self.query_text, self.current)
        if key == self._key and not force:
            return
        self._key = key
        n = len(self._spans)
        self.update(self.renderable_for())
        if self.query_text and len(self._spans) != n:
            self.post_message(SearchCountChanged())

    def renderable_for(self) -> Text:
        text = answer_text(self.run, self.playback.sel + 1, look=look_of(self))
        self._spans = spans(self.query_text, text.plain)
        for i, (a, b) in enumerate(self._spans):
            text.stylize(_CURRENT if i == self.current else _MARK, a, b)
        return text

    def matches(self) -> int:
        """Occurrences of the search term in the text shown."""
        return len(self._spans) if self.query_text else 0

    # ---------------------------------------------------------------------- the / search
    def search(self, query: str) -> None:
        self.query_text = query
        self.current = -1
        self.update_from_run(force=True)

    def match_count(self) -> int:
        return self.matches()

    def show_match(self, index: int) -> None:
        """Mark occurrence ``index`` as the current one and scroll its line to the middle."""
        self.current = index
        self.update_from_run(force=True)
        if not 0 <= index < len(self._spans):
            return
        plain = self.renderable_for().plain
        width = max(1, self.content_region.width or self.size.width or 80)
        row = 0
        start = self._spans[index][0]
        line_start = 0
        for line in plain[:start].split("\n")[:-1]:
            row += max(1, -(-cell_len(line) // width))
            line_start += len(line) + 1
        row += cell_len(plain[line_start:start]) // width
        scroll = self.parent
        if isinstance(scroll, Widget) and scroll.is_scrollable:
            scroll.scroll_to(y=max(0, row - scroll.size.height // 2), animate=False)


def answer_tail(run: RunModel, cursor: int, wrap: TailWrap, console: Console, width: int, height: int,
                look: Look | None = None) -> list[Strip]:
    """The last ``height`` lines of :func:`answer_text` (without a search term) wrapped at
    ``width`` cells, as Strips (every segment with a real style), wrapping again only the
    paragraphs ``wrap`` does not hold yet."""
    if height <= 0:
        return []
    width = max(1, width)
    blocks, many = _answer_blocks(run, cursor, look, lines=height)
    if _blank(blocks, many):
        return wrap.lines([(None, ((_no_answer(run, look).plain, _answer_styles(look)[2]),))],
                          console, width, height, look)
    return wrap.lines(_paragraphs_back(blocks), console, width, height, look)


class AnswerTail(Widget):
    """The newest lines of the answer, filling a fixed-height panel (the side of the main screen).

    Its size never depends on the text, so streaming tokens repaint this widget only, never the
    screen's layout; the answer is wrapped by Rich (keeping code indentation) one paragraph at a
    time, from the newest until the panel is full, and a repaint wraps only what changed
    (:class:`TailWrap`); the lines are drawn with the line API.
    """

    DEFAULT_CSS = "AnswerTail { height: 1fr; padding: 0 1; }"

    def __init__(self, run: RunModel, playback: Playback, **kw: Any) -> None:
        super().__init__(**kw)
        self.run, self.playback = run, playback
        self._key: tuple[Any, ...] | None = None
        self.wrap = TailWrap()
        self.frame = FrameCache(self._build)
        self._drawn: tuple[tuple[int, int], list[Strip]] | None = None  # (size, lines) of the last update

    @property
    def empty(self) -> bool:
        """A source that has ended (or never was live) without a line of answer text."""
        run = self.run
        if run.status.live:
            return False
        with run.lock:
            blocks, many = _answer_blocks(run, run.tokens.n, None, lines=1)
        return _blank(blocks, many)

    def update_from_run(self, force: bool = False) -> None:
        """Build the lines again when the run, the cursor or the look changed, and repaint only
        the rows whose line changed (a growing line, or every row when the text scrolled up)."""
        key = (self.run.version, self.playback.sel, look_of(self))
        if key == self._key and not force:
            return
        self._key = key
        width, height = self.content_region.size
        lines = self.frame.get((key, width, height), width, height)
        drawn, self._drawn = self._drawn, ((width, height), lines)
        if force or drawn is None or drawn[0] != (width, height):
            self.refresh()
            return
        was = drawn[1]
        rows = [Region(0, y, width, 1) for y in range(height)
                if (was[y] if y < len(was) else None) is not (lines[y] if y < len(lines) else None)]
        if rows:
            self.refresh(*rows)

    def _build(self, width: int, height: int) -> list[Strip]:
        return answer_tail(self.run, self.playback.sel + 1, self.wrap, self.app.console, width, height, look_of(self))

    def get_line_filters(self) -> Sequence[LineFilter]:
        return truecolor_filters(look_of(self), super().get_line_filters())

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
        self.current = -1
        #: the line of each bad line listed (a match of the ``/`` query, when there is one)
        self.listed: list[int] = []

    def update_from_run(self, force: bool = False) -> None:
        """Build the list again when a problem arrived, the filter or the look changed (its
        height follows the text: each build lays the screen out again)."""
        with self.run.lock:
            key = (self.run.problem_count, len(self.run.problems), self.run.alert_count, self.query_text,
                   self.current, look_of(self))
        if self._key == key and not force:
            return
        self._key = key
        n = len(self.listed)
        self.update(self.renderable_for())
        if self.query_text and len(self.listed) != n:
            self.post_message(SearchCountChanged())

    # ---------------------------------------------------------------------- the / search
    def search(self, query: str) -> None:
        """List only the bad lines with ``query`` in their reason, text or file name."""
        self.query_text = query
        self.current = -1
        self.update_from_run(force=True)

    def match_count(self) -> int:
        return len(self.listed) if self.query_text else 0

    def show_match(self, index: int) -> None:
        """Mark listed bad line ``index`` and scroll it to the middle."""
        self.current = index
        self.update_from_run(force=True)
        scroll = self.parent
        if 0 <= index < len(self.listed) and isinstance(scroll, Widget) and scroll.is_scrollable:
            scroll.scroll_to(y=max(0, self.listed[index] - scroll.size.height // 2), animate=False)

    def renderable_for(self) -> Text:
        run = self.run
        look = look_of(self)
        mono = look.colors == "mono"
        with run.lock:
            probs = list(run.problems[:500])
            total = run.problem_count
            alerts = list(run.alerts)
        head = Text()
        for alert in alerts:  # what the banner says, all of it (the banner shows the newest)
            head.append("⚠ " if not look.ascii else "! ", style="bold" if mono else "bold #e06c75")
            head.append_text(safe_text(alert, multiline=False) + Text("\n"))
        if alerts:
            head.append("\n")
        if not total:
            return head + Text("no problems: every line was understood", style="" if mono else "#98c379")
        q = self.query_text
        if q:
            probs = [p for p in probs if contains(q, (p.reason, p.text, p.source))]
        out = Text(f"{total} bad line(s)" + (f", {len(probs)} shown matching “{sanitize(self.query_text)}”"
                                            if q else "") + "\n", style="bold" if mono else "bold #e06c75")
        by_reason: dict[str, int] = {}
        for p in probs:
            by_reason[p.reason] = by_reason.get(p.reason, 0) + 1
        for reason, count in sorted(by_reason.items(), key=lambda kv: -kv[1]):
            out.append(f"  {count:>6} × ", style="" if mono else "#e06c75")
            out.append_text(safe_text(reason + "\n", multiline=True))
        out.append("\n")
        first = head.plain.count("\n") + out.plain.count("\n")
        self.listed = []
        for i, p in enumerate(probs[:200]):
            self.listed.append(first + i)
            where = f"{p.source.rsplit('/', 1)[-1]}:{p.lineno}: "
            line = safe_text(where, "" if mono else "#7f848e", multiline=False)
            line.append_text(safe_text(f"{p.reason}: {p.text[:120]}", multiline=False))
            if q:
                for a, b in spans(q, line.plain):
                    line.stylize(_CURRENT if i == self.current else _MARK, a, b)
            out.append_text(line + Text("\n"))
        return head + out
