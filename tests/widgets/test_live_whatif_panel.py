"""The live what-if panel replays only at the hidden cadence while its tab is hidden, and at once
when the tab is shown (tui/widgets/live_whatif.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bmoe_top.tui.jobs.live_whatif import LiveWhatIf


async def test_a_hidden_panel_waits_and_a_shown_one_replays_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import synth

    from bmoe_top.parsers.recording import parse_recording
    from bmoe_top.tui.screens.live import live_app
    from bmoe_top.tui.sources.replay import RecordingSource
    from bmoe_top.tui.widgets import live_whatif
    from bmoe_top.tui.widgets.live_whatif import LiveWhatIfPanel

    monkeypatch.setattr(live_whatif, "HIDDEN_INTERVAL_S", 3600.0)
    calls: list[float] = []
    update = LiveWhatIf.update

    def counted(self: LiveWhatIf) -> bool:
        calls.append(time.monotonic())
        return update(self)

    monkeypatch.setattr(LiveWhatIf, "update", counted)
    drains = [0]
    drain = LiveWhatIfPanel._drain

    def counted_drain(self: Any) -> None:
        drains[0] += 1
        drain(self)

    monkeypatch.setattr(LiveWhatIfPanel, "_drain", counted_drain)

    rec = parse_recording(synth.progress_recording(24))
    src = RecordingSource(rec, speed=float("inf"), name="t.rec.jsonl")
    app = live_app(src, title="play")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            panel = app.main.query_one(LiveWhatIfPanel)
            end = time.monotonic() + 60
            while app.main.model.routes.total == 0 and time.monotonic() < end:
                await pilot.pause(0.05)
            assert app.main.model.routes.total > 0
            while panel._pending is None and time.monotonic() < end:
                await pilot.pause(0.05)
            # the first replay of routing (it loads the analysis core), then none while hidden
            assert panel._pending is not None and panel.view is None
            n = len(calls)
            seen = drains[0]
            while drains[0] < seen + 3 and time.monotonic() < end:
                await pilot.pause(0.05)
            assert drains[0] >= seen + 3 and len(calls) == n
            await pilot.press("ctrl+o")
            while (panel.view is None or panel.view.tokens < 24) and time.monotonic() < end:
                await pilot.pause(0.05)
            assert panel.view is not None and panel.view.tokens == 24
    finally:
        src.close()
