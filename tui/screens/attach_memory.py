"""``bmoe-top attach --pid PID`` / ``--gguf FILE``: the page cache as a tier of the memory
hierarchy, live (docs/memory.md).

A :class:`~bmoe_top.tui.sources.memory.MemoryWatcher` thread samples the model's residency and the
process; :func:`~bmoe_top.tui.feed.memory.bind_memory` writes it into a
:class:`~bmoe_top.tui.model.memory.MemoryModel`. The screen shows the layer x expert residency map
(each cell: the share of that expert's slices in the page cache, the hit-share ramp of the other
maps, layers and experts folded by :func:`~bmoe_top.tui.widgets.grids.fold_rows` when the
terminal is smaller than the model; churn: how many experts came in and left since the sample
before), the panel of :func:`~bmoe_top.tui.present.memory.memory_panel_rows`, the history of the
whole-file share and the read rate, and one status line. ``p`` (space) pauses the view (sampling
goes on), ``/`` searches the panel's rows (``n`` / ``N``: the next / previous match), F1 or ``?``
lists the keys, ``q`` quits; ctrl+p is the command palette.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.memory import bind_memory
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.present.memory import MEMORY_STATUS_WORDS, memory_panel_rows
from bmoe_top.tui.present.search import contains, spans
from bmoe_top.tui.screens.modals import HelpScreen
from bmoe_top.tui.sources.memory import MemoryPlayer, MemoryWatcher
from bmoe_top.tui.sources.recorder import Recorder
from bmoe_top.tui.widgets import keymap as km
from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.diagnosis import DiagnosisLine
from bmoe_top.tui.widgets.focus import FocusRules
from bmoe_top.tui.widgets.footer import FittingFooter
from bmoe_top.tui.widgets.grids import fold_rows
from bmoe_top.tui.widgets.lines import elide_words
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.search import SEARCH_KEYS, SearchBar, SearchCountChanged, SearchScreen

__all__ = ["MemoryAttachOptions", "MemoryPanel", "MemoryScreen", "ResidencyMap", "run_memory_attach", "run_memory_play",
           "sparkline"]

_SPARK = " ▁▂▃▄▅▆▇█"
#: The watcher's states -> the status styles of the other screens.
_STATUS_STYLE = {"ok": "ok", "starting": "connecting", "no_model": "waiting", "exited": "exited",
                 "replayed": "replay", "file_error": "malformed"}
_SPARK_ASCII = " .:-=+*#%"


def sparkline(values: np.ndarray, width: int, ascii: bool, lo: float = 0.0, hi: float | None = None) -> str:
    """The newest ``width`` values as one line of eighth-blocks (``ascii``: ASCII ramp); NaN is a
    space (absent, not zero)."""
    v = values[-width:] if width > 0 else values[:0]
    ramp = _SPARK_ASCII if ascii else _SPARK
    top = hi if hi is not None else (float(np.nanmax(v)) if v.size and not np.all(np.isnan(v)) else 1.0)
    span = top - lo if top > lo else 1.0
    out = []
    for x in v:
        if np.isnan(x):
            out.append(" ")
        else:
            out.append(ramp[1 + int(np.clip((x - lo) / span, 0, 1) * (len(ramp) - 2))])
    return "".join(out)


class ResidencyMap(Widget):
    """The layer x expert map of page-cache residency (line API): one row per layer (or group of
    layers), one cell per expert (or group), the hit-share ramp for the resident share; a cell of
    an expert with no slices is the no-data cell; churn since the sample before: ``▲`` (``^``) where
    the expert's resident pages rose, ``▼`` (``v``) where they fell (a group with both keeps its
    share)."""

    DEFAULT_CSS = "ResidencyMap { height: 1fr; width: 1fr; }"

    def __init__(self, model: MemoryModel, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.model = model
        self._lines: list[Strip] = []
        self._key: object = None

    def refresh_map(self) -> None:
        key = (self.model.version, self.size)
        if key != self._key:
            self._key = key
            self._lines = self.build(self.size.width, self.size.height)
            self.refresh()

    def build(self, width: int, height: int) -> list[Strip]:
        look = look_of(self)
        f = self.model.figures()
        share = f.slice_share
        if share is None or share.size == 0 or width < 8 or height < 2:
            why = "no residency map yet" if share is None else "this model has no expert tensors"
            return [Strip([Segment(why[:width], look.dim)])]
        n_layer, n_expert = share.shape
        label_w = 5
        cols = max(1, width - label_w)
        ef = -(-n_expert // cols)
        lf = -(-n_layer // max(1, height - 1))
        m = fold_rows(share, lf)
        m = fold_rows(m.T, ef).T
        bins = look.hit_bin(m)
        came = left = np.zeros(bins.shape, dtype=bool)
        if f.slice_churn is not None:
            came = fold_rows(fold_rows((f.slice_churn > 0).astype(np.int64), lf, "sum").T, ef, "sum").T > 0
            left = fold_rows(fold_rows((f.slice_churn < 0).astype(np.int64), lf, "sum").T, ef, "sum").T > 0
        head = f"{'':{label_w}}experts 0..{n_expert - 1}" + (f" ({ef} per cell)" if ef > 1 else "")
        up, down = ("^", "v") if look.ascii else ("▲", "▼")
        legend = [Segment(head, look.dim)]
        if len(head) + 19 <= width:  # the churn legend whole, or not at all
            legend += [Segment(f"  {up} came in", look.good), Segment(f"  {down} left", look.alert)]
        out = [Strip(legend).crop(0, width)]
        for i, row in enumerate(bins):
            segs = [Segment(f"L{i * lf:<{label_w - 1}}", look.label)]
            for j, b in enumerate(row):
                if came[i, j] and not left[i, j]:
                    segs.append(Segment(up, look.good))
                elif left[i, j] and not came[i, j]:
                    segs.append(Segment(down, look.alert))
                else:
                    ch, st = look.no_data if b < 0 else look.hit_cells[b]
                    segs.append(Segment(ch, st))
            out.append(Strip(segs))
        return out[:height]

    def render_line(self, y: int) -> Strip:
        return self._lines[y] if y < len(self._lines) else Strip.blank(self.size.width)


MEMORY_NOTES = """
The map: each layer's experts, shaded by the share of each expert slice the page cache holds;
▲ an expert that came into the page cache since the last sample, ▼ one that left. The panel:
the process's memory (anonymous and file-backed), its faults and reads per second, the machine's
available memory and pressure, and the cgroup's limit. docs/memory.md says what each counts.
"""

class MemoryPanel(Static):
    """The panel's rows (label, value) and the newest notes; a
    :class:`~bmoe_top.tui.widgets.search.Searchable`: the ``/`` query keeps the rows that hold
    it, marked (the current one also bold and underlined)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.query_text = ""
        self.current = -1
        self.rows: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.shown: list[tuple[str, str]] = []

    def show_rows(self, rows: list[tuple[str, str]], notes: list[str], look: Look) -> None:
        """Draw ``rows`` (those the query keeps) and ``notes``."""
        self.rows, self.notes = rows, notes
        q = self.query_text
        shown = [r for r in rows if contains(q, r)]
        if q and len(shown) != len(self.shown):
            self.post_message(SearchCountChanged())
        self.shown = shown
        panel = Text()
        for i, (k, v) in enumerate(shown):
            line = Text(f"{k:<18}", style=look.label)
            line.append_text(safe_text(v, multiline=False))
            for a, b in spans(q, line.plain):
                line.stylize("reverse bold underline" if i == self.current else "reverse", a, b)
            panel.append_text(line + Text("\n"))
        for n in notes:
            panel.append_text(safe_text(f"{n}\n", look.dim, multiline=False))
        self.update(panel)

    def search(self, query: str) -> None:
        self.query_text, self.current = query, -1
        self.show_rows(self.rows, self.notes, look_of(self))

    def match_count(self) -> int:
        return len(self.shown) if self.query_text else 0

    def show_match(self, index: int) -> None:
        self.current = index
        self.show_rows(self.rows, self.notes, look_of(self))


class MemoryScreen(FocusRules, SearchScreen):
    """The memory view over a source: a :class:`~bmoe_top.tui.sources.memory.MemoryWatcher` or a
    :class:`~bmoe_top.tui.sources.memory.MemoryPlayer` (a recording), started on mount, stopped
    on unmount."""

    KEYS: ClassVar[tuple[km.Key, ...]] = (
        km.Key("p,space", "pause", "pause / resume the view (sampling goes on)", footer="pause",
               title="Pause / resume"),
        *SEARCH_KEYS,
        km.Key("question_mark,f1", "help", "help: the keys of this screen", footer="help", title="Keys (help)"),
        km.Key("q", "quit", "quit", footer="quit", title="Quit"),
        km.Key("ctrl+c", "app.quit", "quit", "anywhere", palette=False),
        km.Key("ctrl+s", "app.screenshot", "save a screenshot (SVG)", "anywhere", palette=False),
    )
    BINDINGS: ClassVar[list[BindingType]] = km.bindings(KEYS)
    DEFAULT_CSS = """
    MemoryScreen { layout: vertical; }
    #mem-status { height: auto; }
    #mem-body { height: 1fr; layout: horizontal; }
    #mem-panel { width: 42; }
    #mem-history { height: 3; }
    """

    def __init__(self, source: MemoryWatcher | MemoryPlayer, fps: float = 10.0, start: bool = True) -> None:
        super().__init__()
        self.watcher = source
        self.model = bind_memory(source)
        self.fps = fps
        self.start = start
        self.paused = False

    def compose(self) -> ComposeResult:
        yield Static(id="mem-status")
        yield DiagnosisLine.for_memory(self.model, id="diagnosis")
        with Widget(id="mem-body"):
            yield ResidencyMap(self.model, id="mem-map")
            yield MemoryPanel(id="mem-panel")
        yield Static(id="mem-history")
        yield SearchBar()
        yield FittingFooter(compact=True)

    def on_mount(self) -> None:
        if self.start and not self.watcher.is_alive():
            self.watcher.start()
        self.set_interval(1.0 / max(1.0, self.fps), self.tick)
        self.tick()

    def on_unmount(self) -> None:
        self.watcher.stop()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In the search box the screen's letter keys type."""
        return not (isinstance(self.focused, Input) and action in ("pause", "help", "quit", "search", "search_step"))

    def action_quit(self) -> None:
        self.app.exit()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(km.help_rows(self.KEYS), MEMORY_NOTES, "bmoe-top attach --pid: keys"))

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        if self.paused and not force:
            return
        look = look_of(self)
        m = self.model
        with m.lock:
            state, detail, w = m.state, m.detail, m.files
        st = Text(MEMORY_STATUS_WORDS.get(state, state), style=look.status_style(_STATUS_STYLE.get(state, "error")))
        if w is not None:
            method = f"  {w.method}" + (f"  pid {w.pid}" if w.pid else "")
            room = max(12, (self.size.width or 80) - 1 - st.cell_len - 2 - len(method))
            st.append_text(safe_text(f"  {elide_words(sanitize(w.paths[0]), room)}", look.label, multiline=False))
            st.append(method, style=look.dim)
        if detail:
            st.append_text(safe_text(f"  {detail}", look.warn, multiline=False))
        if self.paused:
            st.append("  [paused]", style=look.accent)
        self.query_one("#mem-status", Static).update(st)
        self.query_one("#diagnosis", DiagnosisLine).update_from_run(force)
        self.query_one("#mem-map", ResidencyMap).refresh_map()
        rows = memory_panel_rows(m)
        with m.lock:
            notes = [t for _t, t in m.notes.values()][-3:]
        self.query_one("#mem-panel", MemoryPanel).show_rows(rows, notes, look)
        width = max(10, self.size.width - 16)
        with m.lock:
            _t, share = m.history.column("file_share")
            _t, reads = m.history.column("read_bytes_per_s")
        hist = Text()
        hist.append("file resident  ", style=look.label)
        hist.append(sparkline(share, width, look.ascii, 0.0, 1.0) + "\n", style=look.trend)
        hist.append("read/s         ", style=look.label)
        hist.append(sparkline(reads, width, look.ascii), style=look.trend)
        self.query_one("#mem-history", Static).update(hist)


@dataclass(frozen=True)
class MemoryAttachOptions:
    """``bmoe-top attach --pid PID | --gguf FILE``'s options: the process or the file, the
    ``/metrics`` URL that gives the tokens (and its ``api_key``), the sampling ``interval_s``, the
    residency ``method`` (one of ``METHODS`` of :mod:`bmoe_top.tui.sources.residency`) and the
    screen's ``fps``."""

    pid: int | None = None
    gguf: str | None = None
    metrics: str | None = None
    api_key: str | None = None
    interval_s: float = 1.0
    method: str = "auto"
    fps: float = 10.0


def run_memory_attach(opts: MemoryAttachOptions, recorder: Recorder | None = None) -> int:
    """``bmoe-top attach --pid PID | --gguf FILE [--metrics URL] [--interval S]``. Returns the exit
    status."""
    from bmoe_top.tui.sources.metrics_poll import MetricsPoller

    interval = opts.interval_s
    poller = MetricsPoller(opts.metrics, interval=interval, timeout=max(2.0, min(10.0, 2 * interval)),
                           api_key=opts.api_key) if opts.metrics else None
    watcher = MemoryWatcher(pid=opts.pid, gguf=opts.gguf, interval=interval, poller=poller, method=opts.method,
                            recorder=recorder)
    app = BmoeTopApp(MemoryScreen(watcher, fps=opts.fps))
    try:
        app.run()
    finally:
        watcher.stop()
        if watcher.is_alive():
            watcher.join(interval + 5)
        if poller is not None:
            poller.client.close()
    return app.return_code or 0


def run_memory_play(entries: list[tuple[float | None, str]], speed: float, name: str, fps: float) -> int:
    """``bmoe-top replay``/``play`` of a memory recording: the residency history replays onto the
    memory screen (``speed`` ``inf``: at once). Returns the exit status."""
    player = MemoryPlayer(entries, speed=speed, name=name)
    app = BmoeTopApp(MemoryScreen(player, fps=fps))
    try:
        app.run()
    finally:
        player.stop()
    return app.return_code or 0
