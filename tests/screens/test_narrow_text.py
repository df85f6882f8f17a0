"""Text at narrow sizes is whole or left out, never cut into something else: the what-if Policies
table and compare's summary at 80x24 (a column that does not fit is named as hidden, its heading
never cut to 'Bel' or 'ms/to'), the key footer (no key cut under the palette key, no stray cell
after it: '^p paletten'), row labels in a narrow gutter (the overview's 'ms/to' at 100 columns,
a folded layer group 'L10-1')."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import EMITTER, synth
from helpers.hostile import screen_text
from helpers.waits import pilot_until
from textual.widgets._footer import FooterKey

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.live import live_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.screens.whatif import whatif_app
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.tables import SortTable


def _header_cells(table: SortTable) -> list[str]:
    return [str(c.label).replace(" ▲", "").replace(" ▼", "") for c in table.data_table.columns.values()]


def whatif_app_of(tmp_path: Path):
    (tmp_path / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp_path / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp_path / "run.route.csv"), str(tmp_path / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif run.route.csv + run.csv")


async def test_the_whatif_policies_table_at_80x24_shows_whole_columns(tmp_path):
    app = whatif_app_of(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        table = app.main.query_one("#policy-table", SortTable)
        shown = _header_cells(table)
        assert shown[:5] == ["policy", "hit %", "MiB/token", "I/O s/tok", "to Belady"], shown  # short headings
        assert table.hidden == ["what it models"]
        text = screen_text(app)
        assert "to Belady" in text and "1 column hidden (what it models): widen the terminal" in text
        assert not re.search(r"\bBel\s*$", text, re.M)  # no heading cut at the right edge
    async with whatif_app_of(tmp_path).run_test(size=(200, 50)) as pilot:  # wide: the full headings, all
        await pilot.press("2")
        await pilot.pause()
        table = pilot.app.main.query_one("#policy-table", SortTable)
        assert "Belady − policy" in _header_cells(table) and not table.hidden


async def test_compare_at_80_columns_hides_what_does_not_fit_and_never_cuts_a_column(tmp_path):
    runs = []
    for i, name in enumerate(("gemma_stream", "gemma_base")):  # the newcomer's arms: the unit column was cut
        p = tmp_path / f"{name}.csv"
        p.write_bytes(synth.token_csv(50, seed=20 + i))
        runs.append(str(p))
    loaded = J.load_arms(J.parse_arms(runs, []))
    from bmoe_top.tui.analysis.compare import compare

    app = compare_app(loaded, compare(J.arm_inputs(loaded)), "compare")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.main.query_one("#summary-table", SortTable)
        shown, hidden = _header_cells(table), table.hidden
        labels = [c.short or c.label for c in table.table.columns]
        assert [x for x in labels if x in shown] == shown and len(shown) + len(hidden) == len(labels)  # the rest named
        assert "95% CI of Δ" in hidden  # the interval goes before any value
        assert sum(len(h) for h in shown) < 80
        text = screen_text(app)
        assert "ms/to " not in text and "ms/to\n" not in text
        # the unit is never left out: it is in the metric's name (it was a column, cut to 'un')
        assert "wall per token [ms/tok]" in text and "wall p95 (steady) [ms]" in text


async def test_the_footer_keeps_whole_keys_and_ends_at_the_palette_key():
    from bmoe_top.tui.widgets.footer import key_width

    src = ChildSession([sys.executable, EMITTER, "--rate", "200"])
    app = live_app(src, title="emitter")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_until(pilot, lambda: src.state == "ready", "ready")
            await pilot.press("escape")  # out of the prompt box: the screen's keys, more than fit
            last = await pilot_until(pilot, lambda: "zoom" in (ln := screen_text(app).split("\n")[-1]) and ln,
                                     "the screen's keys in the footer")
            assert last.rstrip().endswith("^p palette"), last  # was '^p paletten'
            keys = [k for k in app.screen.query(FooterKey) if not k.has_class("-command-palette")]
            assert sum(key_width(k, True) for k in keys) <= 80 - len("▏^p palette ")
            for k in keys:  # every key shown whole: its key and its description
                assert f"{k.key_display} {k.description}" in last, (k.key_display, last)
    finally:
        src.close()


def test_row_labels_fit_their_gutter():
    from bmoe_top.tui.widgets.lines import fit_label

    assert fit_label("ms/tok", 5) == "wall" and fit_label("ms/tok", 7) == "ms/tok"
    assert fit_label("L10-11", 5) == "10-11" and fit_label("L100-103", 5) == "100+"
    assert fit_label("expert", 5) == "exp" and fit_label("majflt", 5) == "flt"


async def test_the_overview_at_100_columns_says_wall_not_ms_to(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(96, seed=3))
    app = BmoeTopApp(ReplayScreen(open_paths([str(p)]), title="replay run.csv"))
    async with app.run_test(size=(100, 36)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "ms/to│" not in text and " wall│" in text


async def test_whatif_gives_every_budget_in_one_unit(tmp_path):
    # 32 MiB experts: an 8 GiB bank; the axis said GiB beside marks in MiB
    trace = synth.route_trace(48, seed=5).replace(b"1048576", b"33554432")
    (tmp_path / "big.route.csv").write_bytes(trace)
    inp = load_whatif([str(tmp_path / "big.route.csv")])
    report, replay = analyse_input(inp)
    app = whatif_app(inp, report, replay, "whatif big.route.csv")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "whole bank 8,192 MiB" in text and "(MiB)" in text
        assert "GiB" not in text
        assert re.search(r"recommended [\d,]+ MiB", text)
