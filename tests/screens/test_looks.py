"""Every view in every look: 24-bit colour (viridis, cividis), 16 colours, monochrome (NO_COLOR)
and ASCII, at 80x24 and 200x60. Each segment has a style (a segment without one crashed
Textual's monochrome filter under NO_COLOR), monochrome uses no colour at all, ASCII draws only
ASCII, and the 16-colour flash and mgmt series differ. Look.detect picks the look from the
terminal, NO_COLOR and the locale."""

from __future__ import annotations

import html
import re

import pytest
from helpers import synth
from rich.color import Color

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import load_data
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.base import RunView
from bmoe_top.tui.widgets.palette import Look, locale_is_utf8

LOOKS = {
    "viridis": Look(),
    "cividis": Look(scale="cividis"),
    "16": Look(colors="16"),
    "mono": Look(colors="mono"),
    "ascii": Look(colors="16", ascii=True),
    "ascii-mono": Look(colors="mono", ascii=True),
}


def _run() -> RunModel:
    run = RunModel()
    load_data(run, synth.token_csv(300, seed=5), "synthetic.csv")
    load_data(run, synth.route_trace(300, n_layer=12, n_expert=48, seed=6), "synthetic.route.csv")
    return run


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
@pytest.mark.parametrize("name", list(LOOKS))
async def test_every_view_draws_in_every_look(name, size):
    look = LOOKS[name]
    app = BmoeTopApp(ReplayScreen(_run(), title="looks"), look=look)
    async with app.run_test(size=size) as pilot:
        await pilot.press("home", "right", "right")
        await pilot.pause()
        drawn = 0
        for view in app.main.query(RunView):
            w, h = view.content_size
            if not w or not h:
                continue  # hidden in this layout (the compact layout shows one map)
            for line in view.lines():  # what the terminal gets
                for seg in line:
                    assert seg.style is not None, (view.id, seg.text)
                    if look.colors == "mono":
                        assert seg.style.color is None and seg.style.bgcolor is None, (view.id, seg)
                    if look.ascii:
                        assert seg.text.isascii(), (view.id, seg.text)
                drawn += 1
        assert drawn >= 10
        if look.ascii:  # the title and the run panel too
            assert app.main.query_one("#title").plain.isascii()
            if size[0] >= 100:
                assert app.main.query_one("#run-panel").text().isascii()
        # the whole screen goes through Textual's compositor (and its filters) without a crash
        svg = app.export_screenshot()
        assert "wall" in svg
        if look.ascii:  # Textual's chrome too: tab underline, scrollbars, footer (box characters before);
            # the SVG spells spaces as no-break spaces
            drawn_text = html.unescape("".join(re.findall(r"<text[^>]*>(.*?)</text>", svg))).replace("\xa0", " ")
            assert drawn_text.isascii(), sorted({ch for ch in drawn_text if not ch.isascii()})


def test_sixteen_colours_keep_the_series_apart():
    look = Look(colors="16")
    colours = {name: look.series[name].color for name in ("compute", "flash", "mgmt")}
    assert len(set(colours.values())) == 3, colours


@pytest.mark.parametrize(("system", "no_color", "env", "want"), [
    ("truecolor", False, {"LANG": "en_US.UTF-8"}, ("truecolor", False)),
    ("standard", False, {"LANG": "en_US.UTF-8"}, ("16", False)),  # TERM=linux, TERM=screen
    ("truecolor", True, {"LANG": "en_US.UTF-8"}, ("mono", False)),  # NO_COLOR
    ("truecolor", False, {"LANG": "C"}, ("truecolor", True)),  # no UTF-8 in the locale
    ("truecolor", False, {"LANG": "C", "LC_CTYPE": "C.UTF-8"}, ("truecolor", True)),  # PEP 538 coercion
])
def test_detect_follows_the_terminal_and_the_locale(system, no_color, env, want):
    look = Look.detect(system, no_color=no_color, environ=env)
    assert (look.colors, look.ascii) == want and look.scale == "viridis"
    assert locale_is_utf8(env) is not want[1]


def _map_cells(lines, gut: int, n: int) -> list[list[tuple[str, object]]]:
    """The layer rows' first ``n`` cells (glyph, style) right of the gutter of ExpertMap lines."""
    out = []
    for line in lines[2:]:
        cells = [(ch, seg.style) for seg in line for ch in seg.text]
        if len(cells) > gut and cells[gut - 1][0] in "│|":
            out.append(cells[gut: gut + n])
    return out


@pytest.mark.parametrize("name", list(LOOKS))
def test_expert_map_glyph_says_residency_in_every_look(name):
    """In every look a cell's glyph is its residency alone (the legend's resident glyph, its
    not-resident glyph, the no-data glyph), whatever its heat; the legend names those glyphs and
    says where residency comes from in the same word as the readout ("last hit" here: no resident
    set), at a narrow width too."""
    from bmoe_top.tui.playback import Playback
    from bmoe_top.tui.widgets.grids import ExpertMap
    from bmoe_top.tui.widgets.lines import margins

    look = LOOKS[name]
    run = _run()
    pb = Playback(run)
    pb.end()
    emap = ExpertMap(run, pb)
    emap.set_look(look)
    emap.fold = False  # one expert per cell, one layer per row
    res, out, never = look.heat_resident[-1][0], look.heat_out[-1][0], look.no_data[0]
    assert len({res, out, never}) == 3
    last = run.last_routing_hit(pb.sel + 1)
    width = 200
    rows = _map_cells(emap.build(width, 40), margins(width)[0], run.n_expert)
    assert len(rows) == run.n_layer
    want = {1: res, 0: out, -1: never}
    for layer, cells in enumerate(rows):
        assert "".join(ch for ch, _ in cells) == "".join(want[int(v)] for v in last[layer]), layer
    # heat still shows: more than one style among the cells of one residency
    assert len({st for cells in rows for ch, st in cells if ch == res}) > 1
    for width in (80, 200):
        head = "".join(seg.text for seg in emap.build(width, 40)[0])
        assert f"{res} last hit" in head or f"{res} hit at its last routing" in head, head
        assert f"{out} not" in head and "resident" not in head, head
        ramp = head.split("cold ", 1)[1].split(" hot", 1)[0]
        assert set(ramp) == {res}, ramp  # the heat legend draws with the resident glyph: no other meaning


@pytest.mark.parametrize("ascii", [False, True])
async def test_no_color_expert_map_of_a_real_run_shows_residency(real_runs, monkeypatch, ascii):
    """NO_COLOR (and --ascii) at 80x24 on the real qwen route trace, ``m`` for the expert map:
    folded cells show both residency glyphs (a cell is resident when at least half its routed
    experts were hit at their last routing), only the legend's glyphs are drawn, and through the
    app's NO_COLOR filter the heat legend keeps its dim / normal / bold steps with no colour."""
    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.widgets.grids import ExpertMap

    monkeypatch.setenv("NO_COLOR", "1")
    d = real_runs / "bigmoeonedge-2026-07-15"
    run = open_paths([str(d / "qwen.route.csv"), str(d / "qwen.metrics")])
    app = BmoeTopApp(ReplayScreen(run, title="qwen"), look=Look(colors="mono", ascii=ascii))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("m")
        await pilot.pause()
        emap = app.main.query_one(ExpertMap)
        assert emap.content_size.height > 4
        lines = [list(line) for line in emap.lines()]
        for f in app.get_line_filters():
            lines = [f.apply(line, app.screen.styles.background) for line in lines]
        res, out, never = ("#", "o", ".") if ascii else ("█", "●", "·")
        head = "".join(seg.text for seg in lines[0])
        assert f"{res} last hit {out} not {never} never" in head, head
        ramp = [seg for seg in lines[0] if seg.text == res]
        assert [(s.style.dim, s.style.bold) for s in ramp] == [(True, None), (None, None), (None, True)], ramp
        drawn = ""
        for line in lines[2:]:
            text = "".join(seg.text for seg in line)
            if text[6:7] in "│|":
                drawn += text[7:].split(" ")[0]
            for seg in line:
                assert seg.style is None or (seg.style.color in (None, Color.default()) and
                                             seg.style.bgcolor in (None, Color.default())), seg
        assert set(drawn) <= {res, out, never} and {res, out} <= set(drawn), set(drawn)


async def test_the_active_tab_is_marked_under_no_color_in_ascii(monkeypatch):
    """NO_COLOR with --ascii: the tab bar's underline (box characters) is not drawn, so the active
    tab is reversed and bold, and only it (it had no marker at all)."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(BmoeTopApp, "force_ascii", True)
    app = BmoeTopApp(ReplayScreen(_run(), title="tabs"))

    def tab_styles() -> dict[str, tuple[bool, bool]]:
        for strip in app.screen._compositor.render_strips():
            if "Overview" in "".join(s.text for s in strip):
                segs = list(strip)
                for f in app.get_line_filters():
                    segs = f.apply(segs, app.screen.styles.background)
                return {s.text.strip(): (bool(s.style and s.style.reverse), bool(s.style and s.style.bold))
                        for s in segs if s.text.strip() in ("Overview", "Text", "Log", "Problems")}
        raise AssertionError("no tab bar")

    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.look.ascii and app.look.colors == "mono"
        assert tab_styles() == {"Overview": (True, True), "Text": (False, False), "Log": (False, False),
                                "Problems": (False, False)}
        await pilot.press("2")
        await pilot.pause()
        styles = tab_styles()
        assert styles["Text"] == (True, True) and styles["Overview"] == (False, False)
