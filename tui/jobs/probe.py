"""``bmoe-top probe``: the read bandwidth a model file gives at its expert-slice size
(docs/user-guide.md "probe", docs/analysis.md "Read bandwidth").

The pattern is fio's ``rw=randread bs=BLOCK blockalign=4096 ioengine=psync numjobs=D thread
invalidate=1``: ``D`` threads each issue one ``pread`` of ``BLOCK`` bytes at a time at a random
4 KiB-aligned offset of the file, for ``seconds`` per queue depth ``D``. ``BLOCK`` is the slice
size rounded up to 4 KiB (what an O_DIRECT read of the slice transfers). Before every round the
file's pages are dropped from the page cache (``posix_fadvise(DONTNEED)``), so a buffered round
starts cold, as fio's ``invalidate=1`` does. No Textual.
"""

from __future__ import annotations

import mmap
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bmoe_top.tui.present.probe import DepthResult, FaultResult, ProbeResult

__all__ = ["ALIGN", "DepthResult", "FaultResult", "ProbeError", "ProbeResult", "block_bytes", "fault_round",
           "gguf_slice_bytes", "probe", "stderr_progress"]

#: Offsets and O_DIRECT sizes are multiples of this (bytes): the page size and every device's
#: logical block size here.
ALIGN = 4096
#: The largest queue depth ``--qd-max`` takes (threads).
MAX_DEPTH = 64
#: The largest slice ``--slice-bytes`` takes (bytes): a buffer of this size is allocated per thread.
MAX_SLICE_BYTES = 256 * 1024 * 1024


class ProbeError(ValueError):
    """A file the probe cannot measure; ``str()`` is one sentence for the user."""


def block_bytes(slice_bytes: int) -> int:
    """The size of each read: ``slice_bytes`` rounded up to :data:`ALIGN`."""
    return -(-slice_bytes // ALIGN) * ALIGN


def gguf_slice_bytes(path: str) -> int:
    """The median bytes of one expert's slice of one expert tensor (``expert_stride``, what the
    runtime reads per tensor per miss; docs/runtime.md) over every expert tensor of the GGUF at
    ``path``. Raises :class:`ProbeError` for a file that is not a MoE GGUF."""
    from bmoe_top.parsers.gguf_layout import ModelError, read_layout

    try:
        lay = read_layout(path)
    except (ModelError, OSError, ValueError) as e:
        raise ProbeError(f"{path}: cannot read the expert slices ({e})") from None
    strides = [t.expert_stride for t in lay.tensors.values()]
    if not strides:
        raise ProbeError(f"{path}: a GGUF without expert tensors: give --slice-bytes")
    return int(statistics.median_low(strides))


def _check_file(path: str) -> int:
    """The file's size in bytes; :class:`ProbeError` for a missing file, a directory, an empty one."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ProbeError(f"{path}: no such file") from None
    except OSError as e:
        raise ProbeError(f"{path}: {(e.strerror or str(e)).lower()}") from None
    if p.is_dir():
        raise ProbeError(f"{path}: a directory, not a file")
    if st.st_size == 0:
        raise ProbeError(f"{path}: the file is empty")
    try:
        with open(p, "rb"):
            pass
    except OSError as e:
        raise ProbeError(f"{path}: {(e.strerror or str(e)).lower()}") from None
    return st.st_size


def _open_direct(path: str, block: int) -> tuple[int | None, str | None]:
    """An O_DIRECT descriptor that a read of ``block`` bytes works on, or (None, why not)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        return None, f"O_DIRECT is not supported here ({(e.strerror or str(e)).lower()}): buffered reads only"
    buf = mmap.mmap(-1, block)
    try:
        os.preadv(fd, [buf], 0)
    except OSError as e:
        os.close(fd)
        return None, f"O_DIRECT is not supported here ({(e.strerror or str(e)).lower()}): buffered reads only"
    finally:
        buf.close()
    return fd, None


def _drop_cache(fd: int) -> None:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _round(fd: int, file_bytes: int, block: int, depth: int, seconds: float, seed: int,
           tick: Callable[[float], None]) -> DepthResult:
    """``depth`` threads reading ``block`` bytes at random aligned offsets for ``seconds``."""
    slots = max(1, (file_bytes - block) // ALIGN + 1)
    counts = [0] * depth
    got = [0] * depth
    start = threading.Barrier(depth + 1)
    stop = threading.Event()
    errors: list[OSError] = []

    def reader(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        buf = mmap.mmap(-1, block)
        start.wait()
        try:
            while not stop.is_set():
                n = os.preadv(fd, [buf], rng.randrange(slots) * ALIGN)
                counts[i] += 1
                got[i] += n
        except OSError as e:
            errors.append(e)
        finally:
            buf.close()

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(depth)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        tick(elapsed / seconds)
        stop.wait(min(0.1, seconds - elapsed))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise ProbeError(f"read failed: {(errors[0].strerror or str(errors[0])).lower()}")
    total, reads = sum(got), sum(counts)
    return DepthResult(depth, total / elapsed / 1e6, reads / elapsed, reads, total, elapsed)


def _thread_read_bytes() -> int | None:
    """The bytes this thread made the kernel read from storage (``/proc/thread-self/io``; None
    where the kernel does not say)."""
    try:
        with open("/proc/thread-self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def fault_round(path: str, seconds: float, seed: int = 0,
                tick: Callable[[float], None] | None = None) -> FaultResult | None:
    """The rate plain mmap's misses read at: ``path`` mapped and advised ``POSIX_FADV_SEQUENTIAL``
    (as llama.cpp's ``llama_mmap`` maps a model), one byte touched at a time at random page
    offsets for ``seconds`` of touching; a page not cached is a fault that reads its read-around
    window (twice the device's readahead) before the touch returns. The file's pages are dropped
    before each mapping, and the mapping is remade (dropped again) once half the file was read,
    so the faults keep finding pages not cached. The rate is this thread's read bytes over the
    time spent touching. None where the kernel does not count a thread's reads, or when nothing
    was read (the file's pages could not be dropped: dirty, or mapped by another process)."""
    from bmoe_top.tui.sources.procfs import device_readahead

    if _thread_read_bytes() is None:
        return None
    file_bytes = _check_file(path)
    pages = max(1, file_bytes // ALIGN)
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    busy = 0.0
    got = 0
    faults = 0
    try:
        while busy < seconds:
            _drop_cache(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            m = mmap.mmap(fd, file_bytes, prot=mmap.PROT_READ)
            try:
                r0 = _thread_read_bytes() or 0
                read = 0
                t0 = time.perf_counter()
                while read < file_bytes // 2 and busy + time.perf_counter() - t0 < seconds:
                    before = read
                    m[rng.randrange(pages) * ALIGN]
                    read = (_thread_read_bytes() or 0) - r0
                    faults += read > before
                busy += time.perf_counter() - t0
                got += read
            finally:
                m.close()
            if tick is not None:
                tick(min(1.0, busy / seconds))
        _drop_cache(fd)
    finally:
        os.close(fd)
    if got == 0 or busy <= 0:
        return None  # nothing read: the pages could not be dropped (dirty, or mapped by another process)
    return FaultResult(got / busy / 1e6, faults, got, busy, device_readahead(path))


def probe(path: str, slice_bytes: int | None = None, *, qd_max: int = 8, seconds: float = 2.0,
          progress: Callable[[str, float], None] | None = None, only_depth: int | None = None,
          buffered: bool = True, faults: bool = True) -> ProbeResult:
    """Measure ``path``'s read bandwidth at its expert-slice size: O_DIRECT then buffered, at
    queue depths 1..``qd_max``, ``seconds`` each. ``slice_bytes`` None: read from the GGUF
    (:func:`gguf_slice_bytes`). ``progress(label, fraction)`` is called as rounds advance
    (fraction 0..1 of the whole probe). Raises :class:`ProbeError` for a file it cannot measure
    (missing, a directory, empty, unreadable, not a MoE GGUF without ``slice_bytes``).
    ``only_depth``: that one depth instead of 1..``qd_max``; ``buffered`` False: O_DIRECT only
    (falling back to buffered when O_DIRECT is refused); ``faults``: then one round of mmap
    faults (:func:`fault_round`, ``seconds`` long)."""
    if not 1 <= qd_max <= MAX_DEPTH:
        raise ValueError(f"qd_max must be 1..{MAX_DEPTH}")
    file_bytes = _check_file(path)
    source = "--slice-bytes"
    if slice_bytes is None:
        slice_bytes, source = gguf_slice_bytes(path), "gguf"
    if not 1 <= slice_bytes <= MAX_SLICE_BYTES:
        raise ProbeError(f"slice of {slice_bytes} bytes: must be 1 to {MAX_SLICE_BYTES} bytes")
    block = block_bytes(slice_bytes)
    if block > file_bytes:
        raise ProbeError(f"{path}: {file_bytes:,} bytes, smaller than one read of {block:,} bytes")
    direct_fd, note = _open_direct(path, block)
    fd = os.open(path, os.O_RDONLY)
    modes = (["direct"] if direct_fd is not None else []) + (["buffered"] if buffered or direct_fd is None else [])
    depths = [only_depth] if only_depth is not None else list(range(1, qd_max + 1))
    n_rounds = len(modes) * len(depths) + int(faults)
    done = 0
    out: dict[str, list[DepthResult]] = {m: [] for m in modes}
    try:
        for mode in modes:
            use = direct_fd if mode == "direct" else fd
            assert use is not None
            for depth in depths:
                label = f"{mode} qd {depth}/{depths[-1]}"

                def tick(frac: float, label: str = label, done: int = done) -> None:
                    if progress is not None:
                        progress(label, (done + frac) / n_rounds)

                _drop_cache(fd)
                out[mode].append(_round(use, file_bytes, block, depth, seconds, done, tick))
                done += 1
        fault = None
        if faults:

            def fault_tick(frac: float) -> None:
                if progress is not None:
                    progress("mmap faults", (done + frac) / n_rounds)

            fault = fault_round(path, seconds, done, fault_tick)
        if progress is not None:
            progress("done", 1.0)
    finally:
        os.close(fd)
        if direct_fd is not None:
            os.close(direct_fd)
    return ProbeResult(path, file_bytes, slice_bytes, source, block, seconds, out.get("direct"), note,
                       out.get("buffered", []), fault)


def stderr_progress(stream: TextIO | None = None, width: int = 30) -> Callable[[str, float], None] | None:
    """A progress bar on ``stream`` (stderr) redrawn in place, or None when it is not a terminal."""
    out = stream if stream is not None else sys.stderr
    if not out.isatty():
        return None

    def show(label: str, frac: float) -> None:
        filled = int(round(frac * width))
        end = "\n" if frac >= 1.0 else ""
        out.write(f"\rprobe [{'#' * filled}{'.' * (width - filled)}] {frac * 100:3.0f}% {label:<18}{end}")
        out.flush()

    return show
