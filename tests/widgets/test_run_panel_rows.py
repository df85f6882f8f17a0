"""The run panel (tui/widgets/panels.py ``RunPanel``) repaints only the rows whose line changed:
what it draws after each token is what a full repaint of the same lines draws, and most tokens
repaint fewer rows than the panel has (its labels, the model and the mode read the same)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.panels import RunPanel, row_strips


class _PanelApp(App[None]):
    CSS = "RunPanel { width: 44; }"

    def __init__(self, run: RunModel, playback: Playback) -> None:
        super().__init__()
        self.run, self.playback = run, playback

    def compose(self) -> ComposeResult:
        yield RunPanel(self.run, self.playback)


async def test_a_repaint_of_the_changed_rows_draws_what_a_full_repaint_draws():
    run = RunModel()
    run.update_meta({"model": "m.gguf", "arch": "qwen3moe", "n_layer": 8, "n_expert": 32})
    run.begin_turn(prompt="why?")
    playback = Playback(run)
    app = _PanelApp(run, playback)
    async with app.run_test(size=(60, 40)) as pilot:
        panel = app.query_one(RunPanel)
        partial = repainted = 0
        for i in range(40):
            run.add_token_row({"step": i + 1, "wall_ms": 20.0 + i % 7, "io_ms": 5.0, "compute_ms": 14.0,
                               "mgmt_ms": 1.0, "cache_hit_pct": 50.0 + i, "turn": 0})
            playback.cursor = run.tokens.n
            panel.update_from_run()
            dirty = len(panel._styles_cache._dirty_lines)
            repainted += dirty > 0
            partial += 0 < dirty < panel.size.height
            await pilot.pause()
            region = Region(0, 0, panel.size.width, panel.size.height)
            drawn = [line.text for line in panel.render_lines(region)]
            panel._styles_cache.clear()  # the whole panel drawn again from its lines
            assert drawn == [line.text for line in panel.render_lines(region)]
            assert f"{i + 1}" in " ".join(drawn)
        assert repainted == 40 and partial > 30


def test_no_label_or_file_name_is_cut_mid_word():
    """A label wider than its column is shown whole on its own line, the value under it; a file
    name wider than the value column keeps its start and its extension around one ``…``."""
    from bmoe_top.tui.widgets.lines import middle_ellipsis
    from bmoe_top.tui.widgets.palette import Look

    name = "qwen3-30b-a3b-instruct-2507-ud-q4_k_xl-00001-of-00002.gguf"
    lines = [s.text for s in row_strips("resident/budget", "120 / 512 MiB", "value", 34, 12, 22, Look())]
    assert lines[0].strip() == "resident/budget" and lines[1].strip() == "120 / 512 MiB"
    lines = [s.text for s in row_strips("model", name, "value", 34, 12, 22, Look())]
    assert len(lines) == 1 and lines[0].split()[-1] == middle_ellipsis(name, 22)
    assert middle_ellipsis(name, 22) == "qwen3-30b-a…00002.gguf" and len(middle_ellipsis(name, 22)) == 22
    assert middle_ellipsis("short.gguf", 22) == "short.gguf"


def test_a_heading_or_label_wider_than_the_panel_wraps_whole():
    """A section heading or a label wider than the panel goes on as many lines as it needs,
    never cut at its end (``ms per token (mean over interval)`` at 33 cells)."""
    from bmoe_top.tui.widgets.palette import Look
    from bmoe_top.tui.widgets.panels import label_columns, row_strips

    rows = [("ms per token (mean over interval)", "", "section"),
            ("prompt tok/s (all slots, 1.00 s)", "not exported", "")]
    for width in (20, 24, 33):
        lw, vw = label_columns(rows, width)
        for label, value, kind in rows:
            lines = [s.text.strip() for s in row_strips(label, value, kind, width, lw, vw, Look())]
            assert all(len(ln) <= width for ln in lines)
            assert label in " ".join(lines), (width, lines)
