"""No title or label loses its closing part, on every screen at 80x24 and 120x40 (replay, live,
attach --metrics / --audit / --pid, whatif, compare, fleet and its drill-down, plus a replay and a
compare of files with long names): text is shown whole, shortened in the middle of a file name
with one ``…`` (its end kept), left out whole part by part (an ending ``…`` says so) or wrapped
onto the next line; never cut at its end (``replay qwen.route.csv + qwen.m``,
``prompt tok/s (all slots, 1.00``).

Three checks per screen: every text widget drawn shows all its lines (no line of a one-line or
capped widget falls off its bottom); every token of a title is a token of the full title or a
middle-elided one (``qwen3…a3b.route.csv``); every label of the run panel is drawn whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import synth
from helpers.hostile import screen_text
from helpers.screen_cases import SCREENS, Case
from helpers.waits import pilot_until
from textual.widgets import Static

from bmoe_top.tui.analysis.compare import compare
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs import compare as J
from bmoe_top.tui.screens.attach import rows_table
from bmoe_top.tui.screens.compare import compare_app
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.panels import RunPanel, word_cut

LONG = "qwen3-30b-a3b-instruct-2507-q4km-cache64"


def _replay_long(tmp: Path) -> Case:
    paths = [tmp / f"{LONG}.csv", tmp / f"{LONG}.route.csv"]
    paths[0].write_bytes(synth.token_csv(64))
    paths[1].write_bytes(synth.route_trace(64))
    title = "replay " + " + ".join(p.name for p in paths)
    return BmoeTopApp(ReplayScreen(open_paths([str(p) for p in paths]), title=title)), lambda: None, lambda app: True


def _compare_long(tmp: Path) -> Case:
    files = []
    for i, budget in enumerate((32, 64, 128)):
        p = tmp / f"qwen3-30b-cache{budget}.csv"
        p.write_bytes(synth.token_csv(50 + 5 * i, seed=20 + i))
        files.append(str(p))
    loaded = J.load_arms(J.parse_arms(files, []))
    return compare_app(loaded, compare(J.arm_inputs(loaded)), "compare"), lambda: None, lambda app: True


CASES = {**SCREENS, "replay-long-names": _replay_long, "compare-long-names": _compare_long}


def _shortened_from(token: str, full: set[str]) -> bool:
    """Whether ``token`` (a word of a drawn title) is a word of the full title, or one shortened
    in its middle (``ab…yz``, both ends kept), or a last word ended by ``…`` after whole words."""
    if token in full or token.rstrip("…") in full or token.rstrip("…") == "":
        return True
    if token.replace(",", "").replace(".", "").isdigit():  # a live count: it moved since the draw
        return True
    if token.count("…") == 1 and not token.endswith("…"):
        head, tail = token.split("…")
        return any(w.startswith(head) and w.endswith(tail) and len(w) > len(token) for w in full)
    return False


def _title_cuts(app: BmoeTopApp) -> list[str]:
    screen = app.screen
    out = []
    lines = screen_text(app).split("\n")
    for w in screen.query("#title, #cmp-title, #wi-title"):
        if not w.is_on_screen or not w.region.height:
            continue
        titled = getattr(screen, "title_text", None)
        if titled is not None:  # a live title: drawn and whole from the same instant of the data
            width = w.content_region.width
            drawn, full_text = word_cut(titled(width), width).plain, titled(100_000).plain
        else:
            drawn, full_text = lines[w.region.y][w.region.x: w.region.right], str(w.render())
        full = set(full_text.split()) | set(str(getattr(screen, "source_title", "")).split())
        for token in drawn.split():
            if not _shortened_from(token, full):
                out.append(f"title {w.id}: {token!r} cut from {drawn.strip()!r}")
    return out


def _cut_texts(app: BmoeTopApp) -> list[str]:
    out = []
    for w in app.screen.query(Static):
        if not w.is_on_screen or w.region.height == 0 or w.content_region.width <= 0:
            continue
        need = w.get_content_height(w.size, app.size, w.content_region.width)
        if need > w.content_region.height:
            out.append(f"{w!r}: {need} lines in {w.content_region.height}: {str(w.render())[:70]!r}")
    return out


def _label_cuts(app: BmoeTopApp) -> list[str]:
    """The labels of the run panel and the attach panel (label, value rows) drawn whole, on one
    line or wrapped onto the next."""
    out = []
    panels: list[tuple[str, list[tuple[str, str, str]]]] = []
    for panel in app.screen.query(RunPanel):
        if panel.is_on_screen:
            panels.append((" ".join(s.text for s in panel.build(panel.content_region.width)), panel.rows()))
    for side in app.screen.query("#attach-panel"):
        rows = getattr(app.screen, "panel_rows", None)
        if side.is_on_screen and rows is not None:  # laid out as drawn, from the same instant's rows
            now = list(rows())
            panels.append((rows_table(now, width=side.content_region.width).plain, now))
    for drawn, rows in panels:
        flat = " ".join(drawn.split())
        for label, _value, _kind in rows:
            if label and " ".join(label.split()) not in flat:
                out.append(f"label {label!r} not drawn whole")
    return out


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("name", list(CASES))
async def test_no_title_or_label_loses_its_end(name, size, tmp_path):
    app, close, ready = CASES[name](tmp_path)
    try:
        async with app.run_test(size=size) as pilot:
            await pilot_until(pilot, lambda: ready(app), f"{name} ready")
            await pilot.pause()
            await pilot.pause()
            problems = _title_cuts(app) + _cut_texts(app) + _label_cuts(app)
            assert not problems, f"{name} at {size[0]}x{size[1]}:\n" + "\n".join(problems)
    finally:
        close()
