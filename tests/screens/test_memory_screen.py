"""The memory screen (tui/screens/attach_memory.py) on a real watched file, at the smallest and the
largest terminal: the status says it samples and names the file, the map has a row per layer and
a cell per expert (the resident experts in the top cell of the ramp), the panel gives the shares,
``p`` pauses the view."""

from __future__ import annotations

import pytest
from helpers.pagecache import evict, private_model
from helpers.waits import pilot_until

from bmoe_top.parsers.recording import load_recording, memory_entries
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.screens.attach_memory import MemoryScreen, ResidencyMap, sparkline
from bmoe_top.tui.sources.memory import MemoryPlayer, MemoryWatcher
from bmoe_top.tui.sources.recorder import Recorder
from bmoe_top.tui.widgets.palette import Look


def strip_text(s) -> str:
    return "".join(seg.text for seg in s)


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_screen_shows_the_map_and_the_panel(tmp_path, size):
    path = private_model(tmp_path, "tiny")
    evict(path)
    watcher = MemoryWatcher(gguf=str(path), interval=0.05)
    screen = MemoryScreen(watcher, fps=20)
    app = BmoeTopApp(screen, look=Look(colors="mono", ascii=True))
    async with app.run_test(size=size) as pilot:
        m = screen.query_one(ResidencyMap)
        await pilot_until(pilot, lambda: screen.model.residency is not None and len(m._lines) == 3
                          and "sampling" in str(screen.query_one("#mem-status").render()), "the map drawn")
        lines = [strip_text(s) for s in m._lines]
        assert lines[0].strip().startswith("experts 0..7")
        assert [x[:2] for x in lines[1:3]] == ["L0", "L1"] and len(lines) == 3
        status = str(screen.query_one("#mem-status").render())
        assert "sampling" in status and path.name in status
        panel = str(screen.query_one("#mem-panel").render())
        assert "file resident" in panel and "experts resident" in panel
        await pilot.press("p")
        await pilot_until(pilot, lambda: "[paused]" in str(screen.query_one("#mem-status").render()), "paused")
        assert screen.paused
    watcher.join(10)


async def test_a_recording_replays_onto_the_screen(tmp_path):
    path = private_model(tmp_path, "tiny")
    rec_path = tmp_path / "mem.jsonl"
    rec = Recorder(rec_path)
    w = MemoryWatcher(gguf=str(path), recorder=rec)
    for _ in range(3):
        w.sample_once()
    w.close()
    rec.close()
    entries = memory_entries(load_recording(rec_path))
    assert entries is not None and len(entries) == 4
    screen = MemoryScreen(MemoryPlayer(entries, speed=float("inf")), fps=20)
    async with BmoeTopApp(screen, look=Look(colors="mono", ascii=True)).run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: screen.model.history.samples == 3
                          and len(screen.query_one(ResidencyMap)._lines) == 3
                          and str(screen.query_one("#mem-status").render()).startswith("■ replayed"),
                          "the replayed readings")
        status = str(screen.query_one("#mem-status").render())
        assert status.startswith("■ replayed") and status.endswith("4 readings")
        assert [strip_text(s)[:2] for s in screen.query_one(ResidencyMap)._lines[1:]] == ["L0", "L1"]
        # no token count (no --metrics): the path alone, no rule guesses a fault rate per token
        assert str(screen.query_one("#diagnosis").render()).startswith("plain mmap · bottleneck not timed")


def test_a_sparkline_shows_absent_as_blank_and_the_top_as_full():
    import numpy as np

    assert sparkline(np.array([0.0, np.nan, 1.0]), 10, ascii=True, lo=0.0, hi=1.0) == ". %"


async def test_churn_marks_the_experts_that_came_in_and_left(tmp_path):
    from helpers.pagecache import make_resident

    from bmoe_top.tui.sources.residency import open_model

    path = private_model(tmp_path, "tiny")
    _lay, sampler = open_model(str(path))
    plan = sampler.plan
    sampler.close()
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for o, n, s in zip(plan.offsets[0], plan.lengths[0], plan.slots[0]):
        if s < plan.dense_slot:
            ranges.setdefault(divmod(int(s), plan.n_expert), []).append((int(o), int(n)))
    watcher = MemoryWatcher(gguf=str(path))
    screen = MemoryScreen(watcher, fps=20, start=False)
    async with BmoeTopApp(screen, look=Look(colors="mono", ascii=True)).run_test(size=(80, 24)) as pilot:
        watcher.sample_once()  # opens the model: reading its header reads ahead into the tensors
        evict(path)
        make_resident(path, [r for k in [(0, 0), (0, 4), (1, 7)] for r in ranges[k]])
        watcher.sample_once()
        evict(path)
        make_resident(path, [r for k in [(0, 4), (1, 2)] for r in ranges[k]])
        watcher.sample_once()
        screen.tick(force=True)
        await pilot.pause(0.1)
        rows = [strip_text(s)[5:13] for s in screen.query_one(ResidencyMap)._lines[1:3]]
    # (0, 0) and (1, 7) left; (1, 2) came in; (0, 4) stayed whole (the top of the ramp); a
    # neighbour of a slice that changed shares a page with it and moves too
    assert rows[0][0] == "v" and rows[1][7] == "v" and rows[1][2] == "^" and rows[0][4] == "#", rows
    watcher.close()
