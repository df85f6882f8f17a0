"""Residency sample: the cost of one page-cache residency sample of a whole model (every expert
slice of every expert tensor and the dense tensors: ``ModelSampler.sample``, what ``attach --pid``
does each interval), against a bare ``mincore`` over the whole file (one call on an untouched
read-only mapping, the least any per-page answer costs), measured in the same run, interleaved,
``--rounds`` rounds; the ratio is the median (< 1.5 is the bar; the CPU share at a 1 s interval is
the sample's seconds).

Sizes: the generated bench model, and sparse GGUF files shaped like a 17 GiB model with 48 layers
x 128 experts (F16 slices of 1024 x 480: 0.94 MiB each) and a quarter of it (12 layers); the
sparse files take no disk, and ``--resident`` of each (random expert slices, read through a
buffered read of the holes) is put in the page cache first, so the counts are not all zero.
Both ways of asking are timed: ``mincore`` and, where the kernel has it, ``cachestat``.

History: the memory model fed 36,000 samples (10 h at 1 s) of the 48 x 128 map: its traced
memory after 3,600 and after 36,000 samples (flat: the history is fixed, only two maps are kept).

Run: .venv/bin/python benchmarks/bench_residency.py [--rounds 7] [--resident 0.1] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np

from bmoe_top.parsers.memory_sample import MemorySample, ProcessFigures, WatchedFiles
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.sources import residency as R

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.pagecache import cached_model  # noqa: E402

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def sparse_model(path: Path, n_layer: int, n_expert: int, n_embd: int = 1024, n_ff: int = 480) -> None:
    """A GGUF header of a qwen3moe-shaped model whose tensor data is a hole (``truncate``)."""
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(n_layer)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(8)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    sizes: list[int] = []

    def info(name: str, shape: tuple[int, ...]) -> None:
        nbytes = int(np.prod(shape)) * 2
        w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes)
        sizes.append(nbytes)

    info("token_embd.weight", (32000, n_embd))
    for il in range(n_layer):
        info(f"blk.{il}.attn_norm.weight", (n_embd,))
        info(f"blk.{il}.attn_q.weight", (n_embd, n_embd))
        info(f"blk.{il}.ffn_gate_inp.weight", (n_expert, n_embd))
        for t in ("gate", "up", "down"):
            shape = (n_expert, n_ff, n_embd) if t != "down" else (n_expert, n_embd, n_ff)
            info(f"blk.{il}.ffn_{t}_exps.weight", shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    align = 32
    start = -(-path.stat().st_size // align) * align
    os.truncate(path, start + sum(-(-n // align) * align for n in sizes))


def bare_mincore(path: Path) -> float:
    """Seconds of one mincore over the whole file (mapping and vector made beforehand)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        vec = np.empty(-(-size // PAGE), dtype=np.uint8)
        t0 = time.perf_counter()
        rc = _libc.mincore(addr, size, vec.ctypes.data)
        t = time.perf_counter() - t0
        _libc.munmap(addr, size)
        assert rc == 0
        return t
    finally:
        os.close(fd)


def warm(path: Path, share: float, sampler: R.ModelSampler) -> None:
    """Read ``share`` of the expert slices (random ones) so they are resident."""
    plan = sampler.plan
    rng = np.random.default_rng(3)
    o, ln, s = plan.offsets[0], plan.lengths[0], plan.slots[0]
    pick = np.flatnonzero((s < plan.dense_slot) & (rng.random(len(s)) < share))
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in pick:
            os.pread(fd, int(ln[i]), int(o[i]))
    finally:
        os.close(fd)


def measure(name: str, path: Path, rounds: int, resident: float) -> None:
    samplers = {}
    for method in ("mincore", "cachestat"):
        try:
            _lay, samplers[method] = R.open_model(str(path), method)
        except R.ResidencyError as e:
            print(f"  {method}: not measured ({e})")
    warm(path, resident, next(iter(samplers.values())))
    times: dict[str, list[float]] = {k: [] for k in ["bare", *samplers]}
    for _ in range(rounds):
        times["bare"].append(bare_mincore(path))
        for method, smp in samplers.items():
            t0 = time.perf_counter()
            got = smp.sample()
            times[method].append(time.perf_counter() - t0)
    plan = next(iter(samplers.values())).plan
    bare = statistics.median(times["bare"])
    print(f"{name}: {path.stat().st_size / 2**30:.2f} GiB, {plan.n_layer} x {plan.n_expert} experts, "
          f"{plan.n_ranges:,} ranges, {got.file_total * PAGE / 2**30:.2f} GiB resident")
    print(f"  bare mincore over the file  {bare * 1e3:8.2f} ms")
    for method, smp in samplers.items():
        t = statistics.median(times[method])
        print(f"  one sample ({method:9s})   {t * 1e3:8.2f} ms   ratio {t / bare:5.2f}x   "
              f"CPU at 1 s: {100 * t:.2f} % of a core")
        smp.close()


def history(n_layer: int = 48, n_expert: int = 128) -> None:
    spans = np.full((n_layer, n_expert), 690, dtype=np.int64)
    w = WatchedFiles(("/m.gguf",), (17 << 30,), PAGE, n_layer, n_expert, spans, 1000, ((17 << 30) // PAGE,),
                     "qwen3moe", "bench", "mincore", 1)
    rng = np.random.default_rng(1)
    maps = [rng.integers(0, 691, (n_layer, n_expert)).astype(np.int64) for _ in range(8)]
    tracemalloc.start()
    m = MemoryModel()
    m.set_files(w)
    at: dict[int, int] = {}
    for i in range(36_000):
        p = ProcessFigures(1, "x", "S", majflt=i * 3, read_bytes=i * 4096)
        m.add_sample(MemorySample(float(i), maps[i % 8], 900, (400_000,), p, None, None, None))
        if i + 1 in (3_600, 36_000):
            at[i + 1] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"history of a {n_layer} x {n_expert} model: {at[3_600] / 1024:.0f} KiB traced after 3,600 samples (1 h), "
          f"{at[36_000] / 1024:.0f} KiB after 36,000 (10 h); history arrays {m.history.nbytes / 1024:.0f} KiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--resident", type=float, default=0.1, help="share of the expert slices made resident")
    ap.add_argument("--dir", default=None, help="folder for the sparse files (a disk file system, not tmpfs)")
    a = ap.parse_args()
    print(f"native helper: {'yes' if R._lib() is not None else 'no: ' + str(R.native_error)}; page {PAGE} B")
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        measure("bench model", cached_model("bench"), a.rounds, a.resident)
        for n_layer in (12, 48):
            p = Path(d) / f"sparse-{n_layer}x128.gguf"
            sparse_model(p, n_layer, 128)
            measure(f"sparse {n_layer} x 128", p, a.rounds, a.resident)
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    history()


if __name__ == "__main__":
    main()
