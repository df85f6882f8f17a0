"""The ``attach --pid/--gguf --once --json`` document (tui/present/memory.py) against its golden
file, from a fixed sequence of watcher readings on the tiny model's real layout: names the file,
the whole-file, dense and expert resident shares, the ``n_layer x n_expert`` shares, churn, the
process figures with rates and per-token figures, the system and the cgroup. A reading without
residency keeps the last map; absent figures are null, never 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers.golden import check_golden
from helpers.pagecache import cached_model

from bmoe_top.parsers.memory_sample import CgroupFigures, MemorySample, ProcessFigures, SystemFigures, WatchedFiles
from bmoe_top.tui.feed.memory import apply_event
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.present.memory import memory_document, memory_lines
from bmoe_top.tui.sources.events import FilesWatched, MemoryNote, MemorySampled, WatchState, WatchStateChanged
from bmoe_top.tui.sources.residency import open_model

GOLDEN = Path(__file__).resolve().parent / "golden"
MIB = 1 << 20


def files() -> WatchedFiles:
    lay, sampler = open_model(str(cached_model("tiny")), "mincore")
    sampler.close()
    p = sampler.plan
    return WatchedFiles(("/models/tiny.gguf",), p.sizes, p.page_size, p.n_layer, p.n_expert, p.slice_pages,
                        p.dense_pages, tuple(p.shard_pages), lay.arch, lay.name, "mincore", 4242, False)


def proc(majflt: int, read_mib: int) -> ProcessFigures:
    return ProcessFigures(4242, "llama-server", "S", majflt, 9000, 1234, read_mib * MIB, read_mib * MIB * 2,
                          300 * MIB, 40 * MIB, 260 * MIB, 0, 0)


def test_the_document_of_three_readings_is_its_golden_file():
    w = files()
    m = MemoryModel()
    half = w.slice_pages // 2
    full = w.slice_pages.copy()
    full[0, :4] = 0
    system = SystemFigures(8192 * MIB, 1024 * MIB, 2048 * MIB, 1.25, 0.5, 100, 50)
    cgroup = CgroupFigures(2, "/bench", 512 * MIB, "/bench", 500 * MIB, 200 * MIB)
    for ev in (WatchStateChanged(WatchState.OK, ""), FilesWatched(w),
               MemorySampled(MemorySample(1000.0, half, w.dense_pages, (w.total_pages // 2,), proc(10, 100),
                                          system, cgroup, 50)),
               MemorySampled(MemorySample(1002.0, full, w.dense_pages, (w.total_pages - 40,), proc(30, 140),
                                          system, cgroup, 70)),
               MemoryNote(1002.5, "file", "tiny.gguf was truncated while watched"),
               MemorySampled(MemorySample(1003.0, None, None, None, None, system, None, None))):
        apply_event(m, ev)
    doc = memory_document(m)
    assert np.isclose(doc["resident"]["expert_share"], full.sum() / w.slice_pages.sum(), atol=1e-4)
    assert doc["process"]["read_bytes_per_token"] == 2 * MIB and doc["process"]["faults_per_token"] == 1.0
    assert doc["churn"] == {"slices_in": int((full > half).sum()), "slices_out": 4}
    assert doc["cgroup"] is None and doc["system"]["mem_available"] == 1024 * MIB  # the newest reading's
    check_golden(GOLDEN / "attach_memory_once.json", doc)
    lines = memory_lines(m)
    assert lines[0] == "memory: ok" and any("read/token" in x and "2.00 MiB" in x for x in lines)
    # the one size formatter, as the run panel's memory tiers show the same figures (was 1,024.0 MiB)
    assert any("MemAvailable" in x and "1.00 GiB" in x for x in lines), lines


def test_nothing_read_is_null_not_zero():
    doc = memory_document(MemoryModel())
    assert doc["resident"]["file_share"] is None and doc["process"] is None and doc["files"] == []
