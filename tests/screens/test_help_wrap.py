"""Every help screen (F1 / ?) wraps its key rows and its prose at word boundaries at every size
from 80x24 to 200x60: no word is cut or split over two lines, no line runs past the box, and a
sentence the code wraps near 100 columns flows to the box's width (a line that could have taken
the next word did not end there), where a Static of the code's hard-wrapped lines left
18-character stubs after each 74-character line at 80 columns and cut words in long key rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import synth
from helpers.sweep_data import synth_sweep
from textual.geometry import Region
from textual.widgets import Static

from bmoe_top.tui.analysis.compare import compare
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens import compare as compare_screen
from bmoe_top.tui.screens import sweep as sweep_screen
from bmoe_top.tui.screens import whatif as whatif_screen
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.fleet import FLEET_NOTES
from bmoe_top.tui.screens.modals import HELP_FOOTNOTE, HelpScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.screens.sweep import sweep_app
from bmoe_top.tui.screens.whatif import whatif_app

SIZES = [(80, 24), (100, 30), (120, 40), (160, 48), (200, 60)]


def _replay(tmp: Path) -> tuple[BmoeTopApp, str]:
    (tmp / "run.csv").write_bytes(synth.token_csv(32))
    return BmoeTopApp(ReplayScreen(open_paths([str(tmp / "run.csv")]), title="r")), HELP_FOOTNOTE


def _whatif(tmp: Path) -> tuple[BmoeTopApp, str]:
    (tmp / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp / "run.route.csv"), str(tmp / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif"), whatif_screen.HELP_NOTES


def _compare(tmp: Path) -> tuple[BmoeTopApp, str]:
    files = []
    for i in range(2):
        p = tmp / f"r{i}.csv"
        p.write_bytes(synth.token_csv(50, seed=20 + i))
        files.append(str(p))
    loaded = J.load_arms(J.parse_arms(files, []))
    return compare_app(loaded, compare(J.arm_inputs(loaded)), "compare"), compare_screen.HELP_NOTES


def _sweep(tmp: Path) -> tuple[BmoeTopApp, str]:
    return sweep_app(synth_sweep(tmp / "sweep")), sweep_screen.HELP_NOTES


def sentences(notes: str) -> list[list[str]]:
    """The notes' logical lines as words: the code wraps a sentence near 100 columns, and a line
    that ends a sentence (``.``) or a blank line ends one."""
    out: list[list[str]] = []
    joining = False
    for line in notes.strip("\n").splitlines():
        words = line.split()
        if joining and words:
            out[-1] += words
        elif words:
            out.append(words)
        joining = bool(words) and not line.rstrip().endswith(".")
    return out


def check(lines: list[str], width: int, notes: str, where: str) -> None:
    body = [ln.rstrip() for ln in lines]
    assert all(len(ln) <= width for ln in body), where
    drawn = [w for ln in body for w in ln.split()]
    source = set(notes.split())
    # the prose: each logical line's words in order, each rendered line filled before it wraps
    text = [ln for ln in body if ln.strip()]
    for words in sentences(notes):
        start = next((i for i, ln in enumerate(text) if ln.split()[:1] == words[:1]
                      and " ".join(words).startswith(" ".join(ln.split()))), None)
        assert start is not None, f"{where}: {' '.join(words)[:60]!r} not drawn whole"
        got: list[str] = []
        i = start
        while len(got) < len(words):
            got += text[i].split()
            if len(got) < len(words):
                nxt = text[i + 1].split()[0]
                assert len(text[i]) + 1 + len(nxt) > width, \
                    f"{where}: {text[i]!r} ends before {nxt!r}, which fits ({width} columns)"
            i += 1
        assert got == words, f"{where}: {' '.join(words)[:60]!r} drawn as {' '.join(got)[:60]!r}"
    assert set(drawn) >= source, f"{where}: words cut: {sorted(source - set(drawn))[:8]}"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", ["replay", "whatif", "compare", "sweep", "fleet-notes"])
async def test_help_prose_wraps_at_words_at_every_size(screen, size, tmp_path):
    make = {"replay": _replay, "whatif": _whatif, "compare": _compare, "sweep": _sweep, "fleet-notes": _replay}[screen]
    app, notes = make(tmp_path)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if screen == "fleet-notes":
            notes = FLEET_NOTES
            app.push_screen(HelpScreen([("q", "quit")], notes, "bmoe-top fleet: keys"))
        else:
            await pilot.press("question_mark")
        await pilot.pause()
        static = app.screen.query(Static).last()
        width = static.content_region.width
        assert width > 0
        strips = static.render_lines(Region(0, 0, static.outer_size.width, static.outer_size.height))
        lines = ["".join(seg.text for seg in strip) for strip in strips]
        check(lines, static.outer_size.width, notes, f"{screen} {size}")
