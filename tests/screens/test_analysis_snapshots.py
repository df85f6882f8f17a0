"""Snapshots (pytest-textual-snapshot) of the what-if and compare screens on deterministic
synthetic runs, at a narrow (80x24) and a wide (160x48) size, and the what-if screen at 80x24 in
ASCII under NO_COLOR; plus the terminal modes checked directly: every segment styled (NO_COLOR's
filter needs it), the series' colours among the 16 ANSI ones, ASCII glyphs only in ASCII mode.

Update after an intended visual change with:
    .venv/bin/python -m pytest tests/screens/test_analysis_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import synth
from helpers.hostile import screen_text
from rich.color import Color, ColorType

from bmoe_top.tui.analysis.compare import compare
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.whatif import whatif_app
from bmoe_top.tui.widgets.curves import SERIES_LOOK, CurveChart, CurveMark, CurvePlot, CurveSeries

SIZES = {"narrow": (80, 24), "wide": (160, 48)}
#: The snapshots' sizes: the smallest and largest supported and one between.
SNAP_SIZES = {"narrow": (80, 24), "mid": (120, 40), "wide": (200, 60)}


def whatif(tmp: Path):
    (tmp / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp / "run.route.csv"), str(tmp / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif run.route.csv + run.csv")


def compared(tmp: Path):
    paths = []
    for i, seed in enumerate((31, 32)):
        p = tmp / f"arm{i}.csv"
        p.write_bytes(synth.token_csv(80, seed=seed))
        paths.append(str(p))
    arms = J.load_arms(J.parse_arms(paths))
    return compare_app(arms, compare(J.arm_inputs(arms)), "compare arm0 vs arm1")



@pytest.fixture(params=["colour", "no-color"])
def colours(request, monkeypatch) -> str:
    """Each screen in colour and under NO_COLOR (no-color.org: the environment variable, read when
    the app is made)."""
    if request.param == "no-color":
        monkeypatch.setenv("NO_COLOR", "1")
    return str(request.param)

@pytest.mark.parametrize("size", SNAP_SIZES)
def test_whatif(snap_compare, colours, size, tmp_path):
    assert snap_compare(whatif(tmp_path), terminal_size=SNAP_SIZES[size])


@pytest.mark.parametrize("size", SNAP_SIZES)
def test_compare(snap_compare, colours, size, tmp_path):
    assert snap_compare(compared(tmp_path), terminal_size=SNAP_SIZES[size])


@pytest.mark.parametrize("size", SNAP_SIZES)
def test_compare_per_token(snap_compare, colours, size, tmp_path):
    async def tokens(pilot):
        await pilot.press("2")
        await pilot.pause()

    assert snap_compare(compared(tmp_path), terminal_size=SNAP_SIZES[size], run_before=tokens)


def test_whatif_ascii_no_color(snap_compare, tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("BMOE_ASCII", "1")
    assert snap_compare(whatif(tmp_path), terminal_size=(80, 24))


def _plot() -> CurvePlot:
    x = np.linspace(0, 100, 40)
    series = tuple(CurveSeries(f"s{i}", f"series {i}", x, np.minimum(100, x * (1 + i / 4)), i)
                   for i in range(len(SERIES_LOOK)))
    return CurvePlot("hit % against budget", "budget", "MiB", "hit", "%", series,
                     marks=(CurveMark(40.0, "run's budget"), CurveMark(10.0, "T", "╎", "!", "yellow")),
                     y_max=100.0, shade_below=10.0, shade_label="below T", hline=(90.0, "ceiling"), cursor=55.0)


def test_every_segment_is_styled_and_series_use_ansi_colours() -> None:
    chart = CurveChart(_plot(), ascii=False)
    lines = chart.build(80, 24)
    assert len(lines) <= 24
    for strip in lines:
        for seg in strip:
            assert seg.style is not None, repr(seg.text)
    for _glyph, _ascii, color in SERIES_LOOK:
        assert Color.parse(color).type == ColorType.STANDARD  # the same in 16 colours as in true colour
    text = "\n".join(s.text for s in lines)
    for glyph, _a, _c in SERIES_LOOK:
        assert glyph in text  # one glyph per series: readable without colour
    assert "series 9" in text  # the legend wraps instead of being cut off at 80 columns


def test_ascii_mode_draws_ascii_only() -> None:
    text = "\n".join(s.text for s in CurveChart(_plot(), ascii=True).build(80, 24))
    assert all(ord(ch) < 128 for ch in text), sorted({ch for ch in text if ord(ch) >= 128})
    for _g, a, _c in SERIES_LOOK:
        assert a in text


async def test_no_color_renders(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = whatif(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.no_color
        await pilot.press("2", "3", "4", "1")
        await pilot.pause()
        text = app.main.query_one("#chart-a", CurveChart).text()
        assert "░" in text  # the greyed region is a fill glyph without colour
    app2 = compared(tmp_path)
    async with app2.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "3", "4")
        await pilot.pause()


@pytest.mark.parametrize("argv", [["--ascii", "{cmd}"], ["{cmd}", "--ascii"]])
def test_ascii_is_accepted_before_and_after_the_analysis_commands(argv, tmp_path, monkeypatch):
    """``--ascii`` before or after ``whatif`` / ``compare`` / ``fleet`` (like ``replay --ascii``)
    sets the ASCII look of the app those commands run."""
    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.cli import _apply_look, build_parser

    monkeypatch.setattr(BmoeTopApp, "force_ascii", None)
    for cmd, files in (("whatif", ["t.route.csv"]), ("compare", ["a.csv", "b.csv"]),
                       ("fleet", ["--prometheus", "http://127.0.0.1:9"])):
        args = build_parser().parse_args([a.format(cmd=cmd) for a in argv] + files)
        assert args.cmd == cmd and args.ascii
        _apply_look(args)
        assert BmoeTopApp.force_ascii is True
        monkeypatch.setattr(BmoeTopApp, "force_ascii", None)


@pytest.mark.parametrize("screen", ["whatif", "compare"])
async def test_ascii_look_draws_only_ascii_on_the_analysis_screens(screen, tmp_path, monkeypatch):
    """With ``--ascii`` (and NO_COLOR) every tab of the what-if and compare screens at 80x24 draws
    only ASCII: the curves with their ASCII glyph set (series, marks, shading, axes), the tables'
    headings and sort arrows, the footer's keys, the borders."""
    from bmoe_top.tui.app import BmoeTopApp

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(BmoeTopApp, "force_ascii", True)
    app = whatif(tmp_path) if screen == "whatif" else compared(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.look.ascii
        for tab in ("1", "s", "2", "s", "3", "4", "1"):
            await pilot.press(tab)
            await pilot.pause()
            text = screen_text(app)
            assert text.isascii(), (tab, sorted({ch for ch in text if not ch.isascii()}))
        chart = app.main.query_one("#chart-a" if screen == "whatif" else "#token-chart", CurveChart)
        assert chart.ascii and "o" in chart.text()  # the first series' ASCII glyph
