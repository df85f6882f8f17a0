"""``bmoe-top probe``'s result, its ``--json`` document and its text table (docs/user-guide.md
"probe"). The job that measures is :mod:`bmoe_top.tui.jobs.probe`. No Textual."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from bmoe_top.tui.present.numbers import fmt

__all__ = ["BestDoc", "DepthDoc", "DepthResult", "FaultDoc", "FaultResult", "ProbeDocument", "ProbeResult", "best",
           "probe_document", "probe_lines"]


@dataclass(frozen=True)
class DepthResult:
    """One round: ``depth`` threads reading for ``seconds`` (s). ``mb_s``: 10^6 bytes a second;
    ``iops``: reads a second; ``reads``: reads completed; ``bytes``: bytes read."""

    depth: int
    mb_s: float
    iops: float
    reads: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class FaultResult:
    """The mmap round: one thread touching one byte at random offsets of the file mapped and
    advised sequential (as llama.cpp maps a model), each touch of a page not cached a fault that
    reads its window (twice the device's readahead) from the disk. ``mb_s``: the bytes the faults
    read (this thread's ``/proc/thread-self/io``) over the time spent in them; ``readahead``: the
    device's readahead (bytes; None when unknown)."""

    mb_s: float
    faults: int
    bytes: int
    seconds: float
    readahead: int | None


@dataclass(frozen=True)
class ProbeResult:
    """What the probe measured. ``slice_bytes``: the model's expert slice (``slice_source`` says
    where it came from: ``"gguf"`` or ``"--slice-bytes"``); ``block_bytes``: each read's size (the
    slice rounded up to 4 KiB); ``seconds``: each round's length; ``direct``: one
    :class:`DepthResult` per queue depth 1..N, or None when the file system refuses O_DIRECT
    (``direct_note`` says so); ``buffered``: one per depth, each round started cold; ``faults``
    the mmap round (None: not measured, or the kernel does not count a thread's reads)."""

    path: str
    file_bytes: int
    slice_bytes: int
    slice_source: str
    block_bytes: int
    seconds: float
    direct: list[DepthResult] | None
    direct_note: str | None
    buffered: list[DepthResult]
    faults: FaultResult | None = None


class FaultDoc(TypedDict):
    """:class:`FaultResult` as JSON (``mb_s``: 10^6 bytes/s, ``readahead``: bytes or null)."""

    mb_s: float
    faults: int
    bytes: int
    seconds: float
    readahead: int | None


class DepthDoc(TypedDict):
    """:class:`DepthResult` as JSON (``mb_s``: 10^6 bytes/s)."""

    depth: int
    mb_s: float
    iops: float
    reads: int
    bytes: int
    seconds: float


class BestDoc(TypedDict):
    """The round of each mode with the highest MB/s (null: the mode was not measured)."""

    direct: DepthDoc | None
    buffered: DepthDoc | None


class ProbeDocument(TypedDict):
    """``bmoe-top probe --json``: the file, the read size, and per mode the rounds by depth;
    ``direct`` is null when O_DIRECT is refused (``direct_note``)."""

    path: str
    file_bytes: int
    slice_bytes: int
    slice_source: str
    block_bytes: int
    seconds_per_round: float
    direct: list[DepthDoc] | None
    direct_note: str | None
    buffered: list[DepthDoc]
    best: BestDoc
    faults: FaultDoc | None


def _depth(d: DepthResult) -> DepthDoc:
    return {"depth": d.depth, "mb_s": d.mb_s, "iops": d.iops, "reads": d.reads, "bytes": d.bytes,
            "seconds": d.seconds}


def best(rows: list[DepthResult] | None) -> DepthResult | None:
    """The round with the highest MB/s (the shallowest of equals), or None."""
    if not rows:
        return None
    return max(rows, key=lambda d: (d.mb_s, -d.depth))


def probe_document(r: ProbeResult) -> ProbeDocument:
    """The ``--json`` document of ``r``."""
    b_direct, b_buffered = best(r.direct), best(r.buffered)
    return {"path": r.path, "file_bytes": r.file_bytes, "slice_bytes": r.slice_bytes,
            "slice_source": r.slice_source, "block_bytes": r.block_bytes, "seconds_per_round": r.seconds,
            "direct": None if r.direct is None else [_depth(d) for d in r.direct], "direct_note": r.direct_note,
            "buffered": [_depth(d) for d in r.buffered],
            "best": {"direct": None if b_direct is None else _depth(b_direct),
                     "buffered": None if b_buffered is None else _depth(b_buffered)},
            "faults": None if r.faults is None else {"mb_s": r.faults.mb_s, "faults": r.faults.faults,
                                                     "bytes": r.faults.bytes, "seconds": r.faults.seconds,
                                                     "readahead": r.faults.readahead}}


def probe_lines(r: ProbeResult) -> list[str]:
    """The text table: one row per queue depth, MB/s and IOPS for O_DIRECT and buffered reads."""
    out = [f"{r.path}: {fmt(r.file_bytes)} bytes; reads of {fmt(r.block_bytes)} bytes (expert slice "
           f"{fmt(r.slice_bytes)} bytes, from {r.slice_source}), random 4 KiB-aligned offsets, "
           f"{r.seconds:g} s per depth, each round cold"]
    if r.direct_note:
        out.append(r.direct_note)
    out.append(f"{'depth':>5}  {'O_DIRECT MB/s':>13}  {'IOPS':>9}  {'buffered MB/s':>13}  {'IOPS':>9}")
    for i, buf in enumerate(r.buffered):
        d = r.direct[i] if r.direct is not None else None
        out.append(f"{buf.depth:>5}  {fmt(d.mb_s if d else None):>13}  {fmt(d.iops if d else None, 0):>9}  "
                   f"{fmt(buf.mb_s):>13}  {fmt(buf.iops, 0):>9}")
    for name, rows in (("O_DIRECT", r.direct), ("buffered", r.buffered)):
        b = best(rows)
        if b is not None:
            out.append(f"best {name}: {fmt(b.mb_s)} MB/s at queue depth {b.depth}")
    if r.faults is not None:
        f = r.faults
        ra = f"readahead {fmt(f.readahead // 1024)} KiB" if f.readahead is not None else "readahead unknown"
        out.append(f"mmap faults (advised sequential, {ra}): {fmt(f.mb_s)} MB/s, {fmt(f.faults)} faults "
                   f"of {fmt(f.bytes / f.faults if f.faults else 0.0)} bytes")
    return out
