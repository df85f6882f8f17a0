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
