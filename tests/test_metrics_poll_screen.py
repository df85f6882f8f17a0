"""The metrics attach screen (tui/screens/attach_metrics.py) in a Textual pilot, fed by a real
poller over real HTTP: rates and totals, not exported series, per-layer heatmap, the three
failure states with the last picture kept, against scripted servers and a real bmoe-run serve."""

from __future__ import annotations

import threading

import httpx
import pytest
from rich.console import Console

from bmoe_top.tui.screens.attach_metrics import MetricsAttachApp
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from test_metrics_poll import Scripted, exposition


def plain(renderable, width=100) -> str:
    c = Console(width=width, record=True, color_system=None)
    c.print(renderable)
    return c.export_text()


def strips_text(lines) -> str:
    return "\n".join("".join(seg.text for seg in s) for s in lines)


def with_layers(k: int, n_layer=3) -> str:
    lines = [exposition(100 * k, 20 * k, 10 * k), "# TYPE llamacpp:moe_cache_layer_hits_total counter"]
    lines += [f'llamacpp:moe_cache_layer_hits_total{{layer="{i}"}} {(i + 1) * k}' for i in range(n_layer)]
    lines.append("# TYPE llamacpp:moe_cache_layer_misses_total counter")
    lines += [f'llamacpp:moe_cache_layer_misses_total{{layer="{i}"}} {k if i != 1 else 0}' for i in range(n_layer)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def srv():
    s = Scripted()
    yield s
    s.close()


async def test_screen_states_and_numbers(srv):
    srv.answers = [(200, with_layers(1).encode(), 0), (200, with_layers(3).encode(), 0),
                   (401, b"no", 0), (200, b"garbage that is not an exposition", 0)]
    poller = MetricsPoller(srv.url, interval=0.05, timeout=2)
    app = MetricsAttachApp(poller, start_poller=False)
    async with app.run_test(size=(130, 36)) as pilot:
        poller.scrape_once()
        poller.scrape_once()
        app.refresh_views(force=True)
        await pilot.pause()
        side = plain(app.query_one("#side-panel").content)
        assert "hit %" in side and "83.3 %" in side  # (200 hits, 40 misses) in the interval
        assert "not exported" in side  # e.g. swaps, the time sums
        assert "0" not in [ln.split()[-1] for ln in side.splitlines() if ln.startswith("swaps")]
        status = app.query_one("#status").content.plain
        assert "connected" in status
        hm = app.query_one("#layer-heatmap")
        text = strips_text(hm.build(100, 20))
        assert "L0" in text and "L2" in text and "1 intervals" in text
        trends = strips_text(app.query_one("#trends").build(100, 4))
        assert "tok/s" in trends and "not exported" in trends  # MiB/s without upload bytes
        poller.scrape_once()
        app.refresh_views(force=True)
        await pilot.pause()
        status = app.query_one("#status").content.plain
        assert "unauthorized" in status and "HTTP 401" in status and "last good scrape" in status
        assert "83.3 %" in plain(app.query_one("#side-panel").content)  # the last picture stays
        poller.scrape_once()
        app.refresh_views(force=True)
        await pilot.pause()
        assert "malformed" in app.query_one("#status").content.plain
        srv.close()
        poller.scrape_once()
        app.refresh_views(force=True)
        await pilot.pause()
        assert "unreachable" in app.query_one("#status").content.plain


async def test_screen_live_against_bmoe_run_serve(tmp_path):
    from test_server import Serve, complete
    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)
    s = Serve(model, "--cache-mb", "0.5")
    try:
        poller = MetricsPoller(s.url + "/metrics", interval=0.1, timeout=5)
        app = MetricsAttachApp(poller, fps=20)
        async with app.run_test(size=(130, 36)) as pilot:
            done = {}
            t = threading.Thread(target=lambda: done.update(complete(s.url, "long request a", 300).json()))
            t.start()
            while t.is_alive():
                await pilot.pause(0.1)
            await pilot.pause(0.4)
            st = app.state.summary()
            n = done["tokens_predicted"]
            assert n > 50 and st["status"] == "ok" and st["totals"]["tokens_predicted"] == n
            hm = strips_text(app.query_one("#layer-heatmap").build(100, 20))
            assert "L0" in hm and "L1" in hm
            side = plain(app.query_one("#side-panel").content)
            assert f"{n} tok" in side
            # the time breakdown is exported by bmoe-run serve
            assert "wall" in side
        assert not poller.is_alive() or poller.join(3) is None
    finally:
        s.stop()
    assert httpx  # the real HTTP client was used by the poller


async def test_screen_keeps_updating_under_the_command_palette(srv):
    srv.default = (200, with_layers(1).encode(), 0)
    poller = MetricsPoller(srv.url, interval=0.05, timeout=2)
    app = MetricsAttachApp(poller, fps=30)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("ctrl+p")
        await pilot.pause(0.4)  # refresh ticks while another screen is active: no NoMatches
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert app.state.n_ok >= 2
        await pilot.press("f")
        await pilot.press("r")
    assert not poller.is_alive() or poller.join(2) is None
