"""Cell readouts in the right margin drop or wrap whole fields and never cut a number: at 60
columns (an 11-cell margin) and zoomed out (a column covers many tokens) every word a view
shows there is a whole word of the same readout laid out wide (tui/widgets/grids.py, charts.py)."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.charts import BreakdownChart, OverviewStrip
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.lines import fit_text, fit_words, margins, wrap_fields
from bmoe_top.tui.widgets.palette import BLANK


def _big_run(n_tok: int = 1_469, n_layer: int = 48, n_expert: int = 128, k: int = 4) -> RunModel:
    run = RunModel()
    rng = np.random.default_rng(3)
    run.add_token_rows({"step": np.arange(1, n_tok + 1, dtype=float), "steps": np.full(n_tok, float(n_tok)),
                        "wall_ms": rng.uniform(100, 900, n_tok), "io_ms": rng.uniform(50, 400, n_tok),
                        "mgmt_ms": np.full(n_tok, 1.5), "read_mib": np.full(n_tok, 92.7),
                        "cache_hit_pct": np.linspace(6.7, 77.0, n_tok)}, n_tok)
    run.set_dims(n_layer=n_layer, n_expert=n_expert, top_k=k)
    tok = np.repeat(np.arange(n_tok), n_layer * k)
    layer = np.tile(np.repeat(np.arange(n_layer), k), n_tok)
    run.add_routes(tok, layer, rng.integers(0, n_expert, size=tok.size), rng.integers(0, 2, size=tok.size))
    return run


def _margin(lines, width: int) -> list[str]:
    right = margins(width)[1]
    return [ln.text[-right:] for ln in lines]


def _words(lines: list[tuple[str, object]]) -> set[str]:
    return {w for t, _ in lines for w in t.split()}


def test_fit_words_and_wrap_fields_never_cut_a_word():
    assert fit_words("tokens 611–621", 9) == "tokens"
    assert fit_words("15–56 of 1,469", 11) == "15–56"  # the dangling "of" goes with its number
    assert fit_words("1,469,000", 5) == ""
    assert fit_text(["window 15–56 of 1,469", "15–56 of 1,469"], 10) == "15–56"
    wrapped = wrap_fields([("L3 · tokens 611–621", BLANK), ("read 92.7MiB", BLANK)], 11)
    assert [t for t, _ in wrapped] == ["L3 · tokens", "611–621", "read", "92.7MiB"]


def test_readouts_at_60_columns_and_zoomed_out_show_whole_numbers():
    run = _big_run()
    pb = Playback(run)
    pb.end()
    pb.zoom(8)  # zoomed out: a column is several tokens
    width = 60
    heat, emap = LayerHeatmap(run, pb), ExpertMap(run, pb)
    chart, strip = BreakdownChart(run, pb), OverviewStrip(run, pb)
    for _ in range(3):
        w = heat.window(width)
        assert w.per_col > 1
        shown = " ".join(_margin(heat.build(width, 15), width)).split()
        cell = heat.cursor
        cell.col = w.col_of(w.selected) or 0
        f = heat._geom[3]  # the layers folded per row at this height
        wide = _words(heat.readout(cell, w, f, run.n_layer, np.zeros((run.n_layer, 1)), 80))
        assert shown and set(shown) <= wide | {"more", "rows"} | {str(i) for i in range(100)}, (shown, wide)
        text = " ".join(_margin(chart.build(width, 15), width)).split()
        wide_lines = [t.split() for t, _ in chart.readout(pb.sel, run.mode()[0], 80)]
        # a narrow readout writes a value without its space ("92.7MiB") and short labels ("comp")
        full = {w for ws in wide_lines for w in ws} | {a + b for ws in wide_lines for a, b in zip(ws, ws[1:])} | {
            "comp"}
        rest = set(text) - full
        # the axis line's span is one whole field of its own ("1,200–1,469/1,469" or shorter)
        assert all(t.replace("–", " ").replace("/", " ").replace(",", "").replace(" ", "").isdigit()
                   or t == "tokens" for t in rest), rest
        for ln in _margin(strip.build(width, 3), width)[-1:]:  # the window's span
            for word in ln.split():
                assert word.replace("–", "").replace("/", "").replace(",", "").isdigit() or word in ("window", "of"), \
                    word
        for ln in emap.build(width, 15):
            assert ln.cell_length <= width
        pb.step(-137)
    for t in _margin(strip.build(width, 3), width):
        assert "1," not in t.split() and not t.rstrip().endswith(",")


def test_breakdown_readout_keeps_a_space_after_every_label():
    run = _big_run(n_tok=40, n_layer=4, n_expert=8, k=2)
    run.update_meta({"overlap": 1})
    pb = Playback(run)
    pb.end()
    lines = [t for t, _ in BreakdownChart(run, pb).readout(pb.sel, "overlap", 21)]
    lanes = next(t for t in lines if t.startswith("io lanes"))
    assert lanes.startswith("io lanes ") and lanes.split()[2][0].isdigit(), lines
