"""The charts and the run panel keep what they computed only while what it came from is
unchanged: a view that drew a run, then saw the run grow, draws what a new view over the grown
run draws."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.charts import BreakdownChart, OverviewStrip
from bmoe_top.tui.widgets.panels import RunPanel


def _rows(run: RunModel, n: int, hit: float, wall: float) -> None:
    run.add_token_rows({"step": np.arange(run.tokens.n + 1, run.tokens.n + n + 1, dtype=float),
                        "wall_ms": np.full(n, wall), "io_ms": np.full(n, wall / 2), "mgmt_ms": np.full(n, 1.0),
                        "cache_hit_pct": np.full(n, hit)}, n)


def _text(view: OverviewStrip | BreakdownChart, width: int, height: int) -> list[str]:
    return [ln.text for ln in view.build(width, height)]


def test_overview_strip_redraws_the_whole_run_when_it_grows():
    run = RunModel()
    _rows(run, 5_000, hit=10.0, wall=100.0)
    pb = Playback(run)
    pb.end()
    strip = OverviewStrip(run, pb)
    before = _text(strip, 120, 3)
    assert before == _text(strip, 120, 3)  # unchanged run: the same picture
    _rows(run, 5_000, hit=90.0, wall=400.0)  # the second half: warm cache, slower tokens
    pb.end()
    after = _text(strip, 120, 3)
    assert after != before
    assert after == _text(OverviewStrip(run, pb), 120, 3)  # what a chart that never saw the short run draws
    hit_row, wall_row = after[0], after[1]
    cells = hit_row.split("│", 1)[1][:90]
    assert len(set(cells[:40])) == 1 and len(set(cells[50:90])) == 1 and cells[0] != cells[-1]
    assert wall_row.split("│", 1)[1][0] != wall_row.split("│", 1)[1][89]
    assert after == _text(strip, 120, 3) and _text(strip, 100, 3) == _text(OverviewStrip(run, pb), 100, 3)


def test_breakdown_scale_follows_the_rows_added():
    run = RunModel()
    _rows(run, 500, hit=50.0, wall=100.0)
    pb = Playback(run)
    pb.end()
    chart = BreakdownChart(run, pb)
    first = _text(chart, 120, 14)
    assert "100 ms" in first[1]  # the y scale: the 98th percentile of wall
    _rows(run, 5_000, hit=50.0, wall=250.0)
    pb.end()
    assert "250 ms" in _text(chart, 120, 14)[1]


def test_a_live_panel_that_follows_shows_a_row_that_came_after_the_playback_tick_as_the_run_so_far():
    """Rows of a live source arrive on the reader thread between the screen's playback tick and
    the panel's read: a panel following the newest row shows the run's rows now, never that
    row count as a past position (the heading ``tokens 1-N`` and the "now" figures missing for one
    repaint, the panel's line count changing, the whole screen laid out again)."""
    run = RunModel()
    run.set_status(Status.GENERATING)
    _rows(run, 50, hit=10.0, wall=100.0)
    pb = Playback(run, follow=True)
    pb.tick(0.0)
    panel = RunPanel(run, pb)
    before = panel.rows()
    _rows(run, 3, hit=10.0, wall=100.0)  # after the tick: the cursor still says 50
    rows = panel.rows()
    sections = [label for label, _v, kind in rows if kind == "section"]
    assert pb.cursor == 50 and not any(s.startswith("tokens 1-") for s in sections), sections
    assert [label for label, _v, _k in rows] == [label for label, _v, _k in before]
    assert dict((label, v) for label, v, _k in rows)["token"] == "53"
    # a slow-motion view that trails, or a selected row, is a past position as before
    pb.follow = False
    assert any(s == "tokens 1-50" for s in (label for label, _v, kind in panel.rows() if kind == "section"))


def test_run_panel_redraws_the_rows_that_changed():
    run = RunModel()
    run.update_meta({"model": "one.gguf", "arch": "qwen3moe"})
    _rows(run, 100, hit=10.0, wall=100.0)
    pb = Playback(run)
    pb.end()
    panel = RunPanel(run, pb)
    first = [ln.text for ln in panel.build(44)]
    assert [ln.text for ln in panel.build(44)] == first
    run.update_meta({"model": "two-with-a-much-longer-name-that-wraps-under-its-column.gguf"})
    _rows(run, 100, hit=10.0, wall=300.0)
    pb.end()
    again = [ln.text for ln in panel.build(44)]
    assert again != first and again == [ln.text for ln in RunPanel(run, pb).build(44)]
    assert any("two-with" in t for t in again) and not any("one.gguf" in t for t in again)
    assert [ln.text for ln in panel.build(30)] == [ln.text for ln in RunPanel(run, pb).build(30)]


def test_the_ascii_legend_never_reads_as_an_equation():
    """ASCII's series glyphs are # = +: the legend puts each in brackets beside its name, at every
    width it fits ("# compute = flash + mgmt" read as an equation)."""
    from bmoe_top.tui.widgets.palette import Look

    run = RunModel()
    _rows(run, 50, hit=50.0, wall=100.0)
    pb = Playback(run)
    pb.end()
    chart = BreakdownChart(run, pb)
    chart._look = Look(colors="mono", ascii=True)
    for width in (60, 80, 120, 200):
        legend = _text(chart, width, 14)[0]
        assert "[#] comp" in legend and "[=] flash" in legend and "[+] mgmt" in legend, (width, legend)
        assert "# compute =" not in legend


def test_the_readout_labels_the_step_at_every_width():
    """The selected token's step of the runtime's steps (e.g. 67 of n_predict 2,048) says what it
    is however narrow the margin (it was a bare "67/2,048" under 20 columns)."""
    run = RunModel()
    run.add_token_rows({"step": np.arange(1, 68, dtype=float), "steps": np.full(67, 2048.0),
                        "wall_ms": np.full(67, 10.0)}, 67)
    pb = Playback(run)
    pb.end()
    chart = BreakdownChart(run, pb)
    for width in (12, 16, 24, 40):
        lines = [text for text, _style in chart.readout(66, "serial", width)]
        at = next(i for i, t in enumerate(lines) if t.startswith("step"))  # the value beside it, or wrapped under it
        assert "67/2,048" in " ".join(lines[at:at + 2]), (width, lines)
