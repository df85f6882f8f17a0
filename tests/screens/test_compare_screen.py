"""The comparison screen under Textual's pilot: the summary table with noise-aware deltas (sort,
filter), the warm-up split, the per-token view aligned by step and its keys, the banners
(within-run only, different workload), the contamination panel; and two real CSVs."""

from __future__ import annotations

from pathlib import Path

from helpers import synth
from helpers.waits import pilot_until

from bmoe_top.tui.analysis.compare import WITHIN_RUN_LABEL, compare
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.present import compare as P
from bmoe_top.tui.screens.analysis_modals import AnalysisHelp
from bmoe_top.tui.screens.compare import CompareScreen, compare_app
from bmoe_top.tui.widgets.curves import CurveChart
from bmoe_top.tui.widgets.tables import SortTable


def make_app(*arms: str, named: tuple[str, ...] = ()):
    loaded = J.load_arms(J.parse_arms(list(arms), list(named)))
    c = compare(J.arm_inputs(loaded))
    return compare_app(loaded, c, "compare test"), c


def files(tmp_path: Path, n: int = 4) -> list[str]:
    out = []
    for i in range(n):
        p = tmp_path / f"r{i}.csv"
        p.write_bytes(synth.token_csv(50 + 5 * i, seed=20 + i))
        out.append(str(p))
    return out


def text_of(app, sel: str) -> str:
    return str(app.main.query_one(sel).render())


async def test_summary_sort_filter_and_banner(tmp_path) -> None:
    a, b, *_ = files(tmp_path)
    app, c = make_app(a, b)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert WITHIN_RUN_LABEL in text_of(app, "#cmp-banner")
        assert "warm-up (MSER-5)" in text_of(app, "#cmp-advice") and "steady from token" in text_of(app, "#cmp-advice")
        table = app.main.query_one("#summary-table", SortTable)
        assert [r.cells[0] for r in table.shown] == [P.metric_label(m) for m in c.metrics]
        wall = next(r for r in table.shown if r.cells[0] == "wall per token [ms/tok]")
        m = next(m for m in c.metrics if m.metric == "wall_ms")
        assert wall.cells[1] == P.delta_text(m.deltas[0], m.unit) and wall.cells[2] == m.deltas[0].verdict
        table.data_table.focus()
        await pilot.press("s")  # sort by metric name
        labels = [r.cells[0] for r in table.shown]
        assert labels == sorted(labels, key=str.lower, reverse=False)
        await pilot.press("s")  # then by the delta (%), largest first; absent last
        keys = [r.keys[1] for r in table.shown if r.keys[1] == r.keys[1]]
        assert keys == sorted(keys, reverse=True)
        await pilot.press("slash", *"wall")
        await pilot.pause()
        assert {r.cells[0] for r in table.shown} == {"wall per token [ms/tok]", "wall p50 (steady) [ms]",
                                                     "wall p95 (steady) [ms]", "wall p99 (steady) [ms]"}
        await pilot.press("escape")
        await pilot.pause()
        assert len(table.shown) == len(c.metrics)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, AnalysisHelp)
        await pilot.press("escape")


async def test_per_token_view_keys(tmp_path) -> None:
    a0, a1, b0, b1 = files(tmp_path)
    app, c = make_app(f"{a0},{a1}", "vs", f"{b0},{b1}")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        s: CompareScreen = app.main
        assert "run is the unit" in text_of(app, "#cmp-banner")
        await pilot.press("2")
        await pilot.pause()
        chart = s.query_one("#token-chart", CurveChart)
        text = chart.text()
        assert "wall ms per token" in text and "r0 (2 runs): r0" in text and "r2 (2 runs): r2" in text
        assert "aligned by (turn, step)" in text
        tokens = s.query_one("#token-table", SortTable)
        assert len(tokens.shown) == 60  # steps 1..60 (the longer run of the first runs shown)
        await pilot.press("r")
        assert s.run_index == 1 and "r1" in chart.text() and len(tokens.shown) == 65
        await pilot.press("y")
        assert "flash wait ms per token" in chart.text()
        await pilot.press("y")
        assert "cumulative hit %" in chart.text()
        await pilot.press("4")
        await pilot.pause()
        assert "not in these sources" in text_of(app, "#contamination")
        assert "interleave" in text_of(app, "#contamination")


async def test_different_workload_and_entry_state(tmp_path) -> None:
    a, b, *_ = files(tmp_path)
    for name, seed in (("a.route.csv", 1), ("b.route.csv", 2)):
        (tmp_path / name).write_bytes(synth.route_trace(50, seed=seed))
    side = tmp_path / "b.metrics"
    side.write_text("cpu_temp_before_mC=52000\nmem_avail_before_kb=3000000\n")
    side_a = tmp_path / "a.metrics"
    side_a.write_text("cpu_temp_before_mC=40000\nmem_avail_before_kb=3010000\n")
    app, c = make_app(named=(f"base={a}+{tmp_path / 'a.route.csv'}+{side_a}",
                             f"new={b}+{tmp_path / 'b.route.csv'}+{side}"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert c.workload_same is False
        assert "different workload" in text_of(app, "#cmp-banner")
        await pilot.press("4")
        await pilot.pause()
        cont = text_of(app, "#contamination")
        assert "temperature" in cont and "+12.0" in cont and "reverse order" in cont


async def test_narrow(tmp_path) -> None:
    a, b, *_ = files(tmp_path)
    app, _ = make_app(a, b)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        s = app.main
        assert s.has_class("short")
        table = s.query_one("#summary-table", SortTable)
        head = [str(col.label) for col in table.data_table.columns.values()][:3]
        assert head[0] == "metric" and head[1].startswith("Δ") and head[2] == "verdict"  # the answer first
        await pilot.press("2")
        await pilot.pause()
        assert "wall ms per token" in s.query_one("#token-chart", CurveChart).text()


async def test_two_real_csvs(real_runs) -> None:
    a = real_runs / "bigmoeonedge-2026-07-21" / "bmoe-20260721-090406.csv"
    b = real_runs / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    app, c = make_app(str(a), str(b))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert "steady from token 5 of 1469" in text_of(app, "#cmp-advice")
        table = app.main.query_one("#summary-table", SortTable)
        rows = {r.cells[0]: r for r in table.shown}
        assert rows["decode hit %"].cells[2] == "differs"
        assert rows["wall per token [ms/tok]"].cells[2] in ("better", "worse", "~")
        assert "peak RSS [MiB]" in rows and "MemAvailable low point [MiB]" in rows


async def test_ctrl_c_quits_compare_at_once(tmp_path) -> None:
    app = make_app(*files(tmp_path, 2))[0]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")  # before: Textual's "press ctrl+q to quit" notice, and the app ran on
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_real_csvs_at_80x24_show_both_values_and_the_delta(real_runs) -> None:
    """``compare`` of the two real CSVs at 80x24: the Summary shows the metric with its unit, the
    delta, the verdict and both runs' values (headed by what tells the runs apart); only the
    interval and p may be hidden. The table has the keys: → and ← do not switch tabs."""
    from helpers.hostile import screen_text

    a = real_runs / "bigmoeonedge-2026-07-21" / "bmoe-20260721-090406.csv"
    b = real_runs / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    app, c = make_app(str(a), str(b))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.main.query_one("#summary-table", SortTable)
        keys = [str(k.value) for k in table.data_table.columns]
        base, other = c.arms
        assert keys[:3] == ["metric", f"delta:{other}", f"verdict:{other}"], keys
        assert {f"value:{base}", f"value:{other}"} <= set(keys), keys
        assert set(table.hidden) <= {f"{c.confidence:.0%} CI of Δ", "p"}, table.hidden
        # the arms are named by what differs in their run headers, headed by what tells them apart
        assert c.arms == ["--dense-weights anon", "--dense-weights ahwb"]
        labels = [str(col.label) for col in table.data_table.columns.values()]
        assert "…anon" in labels and "Δ …ahwb" in labels, labels
        wall = next(r for r in table.shown if r.cells[0] == "wall per token [ms/tok]")
        text = screen_text(app)
        for cell in wall.cells[3:5]:  # both runs' values, drawn whole
            assert cell and cell in text, (cell, text)
        await pilot.press("right", "left", "right")
        await pilot.pause()
        assert app.main.query_one("#cmp-tabs").active == "summary"


async def test_a_run_named_as_the_others_prefix_keeps_both_values_at_80x24(real_runs) -> None:
    """``compare`` of gemma_stream (arm ``bigmoeonedge-2026-07-12``) and gemma_base (arm
    ``bigmoeonedge-2026-07-12-pr23``) at 80x24, a value as wide as ``no cache (off in this run)``:
    the metric, the delta and both runs' values stay, drawn whole; the interval, p and the
    verdict go first (the value of the second run went before). The first arm's heading keeps
    the end of its name (``…07-12``, not ``…2``)."""
    from helpers.drawn_table import cut_cells

    a = real_runs / "bigmoeonedge-2026-07-12" / "gemma_stream.csv"
    b = real_runs / "bigmoeonedge-2026-07-12-pr23" / "gemma_base.csv"
    app, c = make_app(str(a), str(b))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.main.query_one("#summary-table", SortTable)
        await pilot_until(pilot, lambda: table.data_table.row_count == len(table.shown) > 0, "the summary rows")
        await pilot.pause()
        base, other = c.arms
        assert (base, other) == ("bigmoeonedge-2026-07-12", "bigmoeonedge-2026-07-12-pr23")
        keys = [str(k.value) for k in table.data_table.columns]
        assert keys == ["metric", f"delta:{other}", f"value:{base}", f"value:{other}"], keys
        assert table.hidden == ["verdict", f"{c.confidence:.0%} CI of Δ", "p"], table.hidden
        assert table.shown_labels == ["metric", "Δ …-pr23", "…07-12", "…-pr23"], table.shown_labels
        problems = cut_cells(app, table)
        assert not problems, "\n".join(problems)


async def test_arrows_bring_every_arm_and_column_in_at_80x24(tmp_path) -> None:
    """At 80x24 three arms with long names do not fit the Summary: → brings the columns left out
    in one by one (every arm's value, every interval and p), from no focus and from the table,
    and ← goes back; the header says the arrows scroll. The Warm-up table too."""
    names = ("qwen-cache32.csv", "qwen-cache64.csv", "qwen-cache128.csv")
    arms = []
    for i, n in enumerate(names):
        p = tmp_path / n
        p.write_bytes(synth.token_csv(50 + 5 * i, seed=20 + i))
        arms.append(str(p))
    app, c = make_app(*arms)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for tab, table_id, focus in (("1", "#summary-table", False), ("1", "#summary-table", True),
                                     ("3", "#warmup-table", False)):
            await pilot.press(tab)
            await pilot.pause()
            table = app.main.query_one(table_id, SortTable)
            assert table.table is not None
            if focus:
                table.data_table.focus()
                await pilot.pause()
            every = {col.key for col in table.table.columns}
            seen = {str(k.value) for k in table.data_table.columns}
            if seen != every:
                assert "← / → scroll" in str(table.query_one(".sort-head").render())
            for _ in range(len(every)):
                await pilot.press("right")
                await pilot.pause()
                seen |= {str(k.value) for k in table.data_table.columns}
            assert seen == every, f"{table_id}: never shown {sorted(every - seen)}"
            assert table_id != "#summary-table" or all(f"value:{a}" in seen for a in c.arms)
            for _ in range(len(every)):
                await pilot.press("left")
            await pilot.pause()
            assert table.col_start == 0 and app.main.query_one("#cmp-tabs").active in ("summary", "warmup")
