"""The title's state indicator says a source's state once: an attach screen whose server went
away read "✖ disconnected · disconnected"."""

from __future__ import annotations

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


async def test_a_disconnected_source_is_said_once_in_the_title():
    run = RunModel()
    screen = MetricsAttachScreen(MetricsPoller("http://127.0.0.1:9/metrics", interval=1.0), start_poller=False,
                                 run=run)
    async with BmoeTopApp(screen).run_test(size=(160, 40)) as pilot:
        run.set_status(Status.DISCONNECTED)
        await pilot.pause()
        title = screen.title_text().plain
        assert "✖ disconnected" in title and title.count("disconnected") == 1, title
