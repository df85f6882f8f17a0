"""The metrics attach screen (tui/screens/attach_metrics.py: the shared views over the run model
the poller feeds) in a Textual pilot, fed by a real poller over real HTTP: rates and totals, not
exported series, the layer x interval heatmap and the breakdown, the three failure states with the
last picture kept, against scripted servers and a real bmoe-run serve."""

from __future__ import annotations

import re
import threading

import httpx
import numpy as np
import pytest
from helpers.hostile import screen_text
from helpers.scripted_http import Scripted, exposition
from helpers.waits import pilot_until
from rich.console import Console

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.present.metrics import metrics_document
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


def metrics_app(poller, **kw) -> BmoeTopApp:
    return BmoeTopApp(MetricsAttachScreen(poller, **kw))


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
    app = metrics_app(poller, start_poller=False)
    async with app.run_test(size=(130, 36)) as pilot:
        poller.scrape_once()
        poller.scrape_once()
        app.main.refresh_views(force=True)
        await pilot.pause()
        side = plain(app.query_one("#attach-panel").content)
        assert "hit (" in side and "83.3 %" in side  # (200 hits, 40 misses) in the interval
        assert "not exported" in side  # e.g. swaps, the time sums
        assert "0" not in [ln.split()[-1] for ln in side.splitlines() if ln.startswith("swaps")]
        status = app.query_one("#attach-status").content.plain
        assert "connected" in status
        # the run model: one row for the one completed interval, per-layer counts on it
        run = app.main.model
        assert run.row_unit == "interval" and run.tokens.n == 1 and run.status == "ok"
        assert run.tokens.last("tokens_in_interval") == 20
        assert run.tokens.last("cache_hit_pct") == pytest.approx(100.0 * 300 / 360)  # since start
        assert not run.tokens.has("wall_ms")  # no time sums exported: missing, never 0
        hm = app.query_one("#heatmap")
        text = strips_text(hm.build(100, 20))
        assert "L0" in text and "L2" in text and "layer × interval hit share" in text and "interval 1" in text
        share = run.hit_matrix()
        assert share[:, 0].tolist() == pytest.approx([2 / 4, 1.0, 6 / 8])  # L1 never missed
        trends = strips_text(app.query_one("#trends").build(100, 4))
        assert "tok/s" in trends and "hit %" in trends and "not in this source: read" in trends  # no upload bytes
        title = app.query_one("#title").plain
        assert "● live" in title and "intervals 1" in title, title
        poller.scrape_once()
        app.main.refresh_views(force=True)
        app.main.update_attach(force=True)
        await pilot.pause()
        status = app.query_one("#attach-status").content.plain
        assert "unauthorized" in status and "HTTP 401" in status and "last good scrape" in status
        assert "83.3 %" in plain(app.query_one("#attach-panel").content)  # the last picture stays
        assert run.tokens.n == 1 and run.status == "unauthorized" and "HTTP 401" in run.status_detail
        assert "unauthorized" in app.query_one("#run-panel").text()
        poller.scrape_once()
        app.main.update_attach(force=True)
        await pilot.pause()
        assert "malformed" in app.query_one("#attach-status").content.plain
        srv.close()
        poller.scrape_once()
        app.main.update_attach(force=True)
        await pilot.pause()
        assert "refused" in app.query_one("#attach-status").content.plain


async def test_screen_live_against_bmoe_run_serve(tmp_path):
    from helpers.serve import Serve, complete

    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)
    # 20 ms per token: the 300-token decode lasts >= 6 s, many poll intervals on any machine
    s = Serve(model, "--cache-mb", "0.5", env={"BMOE_TOKEN_DELAY_MS": "20"})
    try:
        poller = MetricsPoller(s.url + "/metrics", interval=0.1, timeout=5)
        app = metrics_app(poller, fps=20)
        async with app.run_test(size=(130, 36)) as pilot:
            done = {}
            t = threading.Thread(target=lambda: done.update(complete(s.url, "long request a", 300).json()))
            t.start()
            while t.is_alive():
                await pilot.pause(0.1)
            screen = app.main
            n = done["tokens_predicted"]
            # the scrape after the request's end may come late on a busy machine: wait for its row
            await pilot_until(pilot, lambda: np.nansum(screen.model.tokens.view("tokens_in_interval")) == n,
                              "the row of the scrape after the request's end")
            poller.stop()  # freeze the picture: no row arrives between the reads below
            poller.join(5)
            # the cursor follows the newest row at every tick, the repaint comes at the next fast
            # tick: wait for the panel that shows the last scrape too
            await pilot_until(pilot, lambda: screen.playback.cursor == screen.model.tokens.n and not screen.clock.stale
                              and f"{n} tok" in plain(app.query_one("#attach-panel").content),
                              "the views' and the panel's repaint at the last row")
            await pilot.pause()
            st = metrics_document(app.main.model)
            assert n > 50 and st["status"] == "ok" and st["totals"]["tokens_predicted"] == n
            hm = strips_text(app.query_one("#heatmap").build(100, 20))
            assert "L0" in hm and "L1" in hm and "layer × interval hit share" in hm
            side = plain(app.query_one("#attach-panel").content)
            assert f"{n} tok" in side
            assert "wall" in side
            # the replay screen's views show rows: the intervals of the request, with the time
            # breakdown bmoe-run serve exports (ms per token, mean over each interval)
            run = app.main.model
            tok = run.tokens
            assert tok.n >= 2 and np.nansum(tok.view("tokens_in_interval")) == n
            wall = tok.view("wall_ms")
            busy = tok.view("tokens_in_interval") > 0
            assert np.all(wall[busy] > 0) and np.all(np.isnan(wall[~busy]))  # idle: missing, not 0
            assert np.all(np.nan_to_num(tok.view("io_ms")) >= 0)
            bd = strips_text(app.query_one("#breakdown").build(120, 14))
            # the window ends at the newest interval; where it starts depends on how many intervals
            # the decode lasted (more on a loaded machine) against the chart's width, and past 99
            # intervals the span leaves no room for the word "intervals" before it
            assert re.search(rf"(intervals )?\d+–{tok.n} of {tok.n}", bd) and "█" in bd
            share = run.hit_matrix()
            assert share.shape[0] == 2 and np.isfinite(share).any()
            assert run_summary(run)["tokens"] == n  # the run panel's total since the server started
            # the title follows new rows at its own pace (FAST_S): wait for the last row, never a duration
            await pilot_until(pilot, lambda: f"intervals {tok.n}" in app.query_one("#title").plain,
                              f"the title at interval {tok.n}")
            title = app.query_one("#title").plain
            assert "● live" in title and f"intervals {tok.n}" in title
        assert not poller.is_alive() or poller.join(3) is None
    finally:
        s.stop()
    assert httpx  # the real HTTP client was used by the poller


async def test_screen_keeps_updating_under_the_command_palette(srv):
    srv.default = (200, with_layers(1).encode(), 0)
    poller = MetricsPoller(srv.url, interval=0.05, timeout=2)
    app = metrics_app(poller, fps=30)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: poller.state.n_ok >= 1, "a first scrape")
        await pilot.press("ctrl+p")
        n = poller.state.n_ok
        # refresh ticks while another screen is active: no NoMatches
        await pilot_until(pilot, lambda: poller.state.n_ok >= n + 2, "two scrapes under the palette")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: app.main.model.scrape_health.scrapes_ok >= n + 2, "the model's scrape health")
        await pilot.press("f")
        await pilot.press("r")
    assert not poller.is_alive() or poller.join(2) is None


async def test_at_80x24_a_server_that_is_not_there_says_why(srv):
    url = srv.url
    srv.close()  # nothing listens there any more
    poller = MetricsPoller(url, interval=0.05, timeout=2)
    app = metrics_app(poller, start_poller=False)
    async with app.run_test(size=(80, 24)) as pilot:
        poller.scrape_once()
        app.main.update_attach(force=True)
        await pilot.pause()
        line = app.query_one("#attach-status")
        assert line.display and "refused" in line.content.plain  # compact: shown, since it says why
        assert "refused" in "\n".join(strips_text([s]) for s in app.screen._compositor.render_strips())


def _timed(k: int) -> bytes:
    body = exposition(100 * k, 20 * k, 10 * k)
    for name, v in (("bmoe:timed_tokens_total", 10 * k), ("bmoe:token_wall_seconds_total", 0.1 * k),
                    ("bmoe:token_compute_seconds_total", 0.06 * k), ("bmoe:token_io_seconds_total", 0.03 * k),
                    ("bmoe:token_mgmt_seconds_total", 0.01 * k)):
        body += f"# TYPE {name} counter\n{name} {v}\n"
    return body.encode()


async def test_title_breakdown_status_and_json_count_the_intervals_alike(srv):
    """After 17 scrapes the title said 16 intervals, the breakdown 15 (it waited for the views'
    repaint while the title followed each scrape) and the status line 17 scrapes, with nothing
    saying which count is which: n good scrapes of one process are n - 1 intervals, everywhere."""
    from bmoe_top.tui.model.quantities import q

    srv.answers = [(200, _timed(k), 0) for k in range(1, 18)]
    poller = MetricsPoller(srv.url, interval=0.05, timeout=2)
    app = metrics_app(poller, start_poller=False)
    async with app.run_test(size=(130, 36)) as pilot:
        screen = app.main
        screen.clock.refresh_s = 600.0  # the views' own repaint never comes by time in this test
        for _ in range(16):
            poller.scrape_once()
        screen.refresh_views(force=True)
        await pilot.pause()
        poller.scrape_once()  # the 17th scrape: the 16th interval
        label = q("interval.count").label
        await pilot_until(pilot, lambda: f"{label} 16" in app.query_one("#title").plain, "the title to follow")
        drawn = screen_text(app)  # what the screen shows now, each widget as it last painted
        assert "1–16 of 16" in drawn and "interval 16" in drawn and "of 15" not in drawn, drawn
        status = app.query_one("#attach-status").content.plain
        assert "scrapes 17 ok" in status and f"{label} 16" in status, status
        doc = metrics_document(screen.model)
        assert doc["scrapes_ok"] == 17 and doc["intervals"] == 16 == screen.model.tokens.n
