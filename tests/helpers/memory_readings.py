"""Deterministic memory-watcher readings as recording entries, for screens and documents that must
not depend on the machine: a model of ``n_layer x n_expert`` experts (each expert's slices 690
pages, as a 17 GiB 48 x 128 model's are), whose residency moves from a warm band of experts to a
shifted one, with process, system and cgroup figures.

    entries = readings(48, 128, samples=4)      # [(t, line), ...] for MemoryPlayer / replay_memory
"""

from __future__ import annotations

import numpy as np

from bmoe_top.parsers.memory_sample import (
    CgroupFigures,
    MemorySample,
    ProcessFigures,
    SampleEncoder,
    SystemFigures,
    WatchedFiles,
)

MIB = 1 << 20
PAGES = 690


def readings(n_layer: int = 48, n_expert: int = 128, samples: int = 4) -> list[tuple[float | None, str]]:
    spans = np.full((n_layer, n_expert), PAGES, dtype=np.int64)
    size = int(spans.sum()) * 4096 + 600 * MIB
    w = WatchedFiles(("/models/big-moe-00001-of-00002.gguf", "/models/big-moe-00002-of-00002.gguf"),
                     (size // 2, size - size // 2), 4096, n_layer, n_expert, spans, 600 * MIB // 4096,
                     (size // 2 // 4096, (size - size // 2) // 4096), "qwen3moe", "big moe", "cachestat", 4242)
    enc = SampleEncoder()
    out: list[tuple[float | None, str]] = [(1000.0, enc.files(w))]
    li, ei = np.mgrid[0:n_layer, 0:n_expert]
    for k in range(samples):
        t = 1000.0 + k
        band = ((ei + 3 * li + 7 * k) % n_expert) < n_expert // 3
        slices = np.where(band, PAGES, (PAGES * ((ei * 7 + li) % 5) // 10)).astype(np.int64)
        files = int(slices.sum()) + 600 * MIB // 4096
        proc = ProcessFigures(4242, "llama-server", "S", majflt=1000 + 400 * k, minflt=50_000, cpu_ticks=900,
                              read_bytes=(2000 + 300 * k) * MIB, rchar=10 * MIB, rss=(40 + 9000) * MIB,
                              rss_anon=40 * MIB, rss_file=9000 * MIB, rss_shmem=0, swap=0)
        system = SystemFigures(16384 * MIB, 900 * MIB, 11000 * MIB, 12.5, 4.25, 1000, 500)
        cgroup = CgroupFigures(2, "/llm", 12288 * MIB, "/llm", 12200 * MIB, 12100 * MIB)
        s = MemorySample(t, slices, 600 * MIB // 4096, (files // 2, files - files // 2), proc, system, cgroup,
                         100 + 10 * k)
        out.append((t, enc.sample(s)))
    return out
