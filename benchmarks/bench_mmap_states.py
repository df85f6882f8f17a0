"""The page cache's two states on the played trace, and two replays against the deterministic one
(docs/analysis.md "Plain mmap against stock llama.cpp").

A process maps the model as llama.cpp does and touches exactly a route trace's pages in token order
in a memory cgroup (``mmap_machine.play_trace``), ``--runs`` times per cell (cgroup limit x
readahead: the model's device and a 128 KiB loop-device copy), interleaved, two ways: as it comes
(reclaim reads the cgroup's statistics as old as their last periodic flush, and the run takes one
of two states by chance) and with the statistics flushed at every token (a ``memory.stat`` read:
one state). Printed per cell: the disk MiB a decode token of each way (median and range), the
lists at the end (active / inactive file MiB, median), and the bytes of two replays at the room
the cgroup's file pages left the experts at the end: ``replay_mmap``'s two lists, and a replay of
the kernel's workingset logic (:class:`Workingset`, not part of the package: a prototype the
numbers judge).

The route trace is ``bench_mmap_line.py``'s reference run (``DIR/mmap-line-MODEL``): run that first.
Needs root (the cgroups and the loop device). The load average is printed before and after.
Run: .venv/bin/python benchmarks/bench_mmap_states.py [--dir DIR] [--model bench-q4_k] [--runs 3]
[--ram 120,147.6,179.5]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path

from bench_mmap_line import touch_ranges
from mmap_machine import MIB, MemoryCgroup, cgroup_stat, drop_cache, ensure_model, loop_copy, play_trace


class Workingset:
    """Chunks under the kernel's two lists with its workingset logic (``mm/vmscan.c``,
    ``mm/workingset.c``, no MGLRU), the statistics always fresh: a touch of a mapped chunk sets
    its reference bit only; a chunk read enters the inactive list, or the active list when it
    refaults within the active list's size of the nonresident age (evictions and activations
    counted); reclaim takes the inactive tail: referenced and marked -> activated, referenced ->
    marked and kept, else evicted leaving its age; the active tail is deactivated (its bit
    cleared) in proportion to the lists' sizes while inactive is below active or a refault was
    activated since the last reclaim."""

    def __init__(self, room: int, batch: int = 2) -> None:
        self.room, self.batch = room, batch
        self.inactive: OrderedDict[int, None] = OrderedDict()
        self.active: OrderedDict[int, None] = OrderedDict()
        self.young: set[int] = set()
        self.marked: set[int] = set()
        self.shadow: dict[int, int] = {}
        self.age = self.activated = self.seen = 0

    def __contains__(self, c: int) -> bool:
        return c in self.inactive or c in self.active

    def touch(self, c: int) -> None:
        self.young.add(c)

    def _scan_inactive(self) -> int:
        c, _ = self.inactive.popitem(last=False)
        if c in self.young:
            self.young.discard(c)
            if c in self.marked:
                self.marked.discard(c)
                self.active[c] = None
                self.age += 1
            else:
                self.marked.add(c)
                self.inactive[c] = None
            return 0
        self.marked.discard(c)
        self.shadow[c] = self.age
        self.age += 1
        return 1

    def _deactivate(self) -> None:
        c, _ = self.active.popitem(last=False)
        self.young.discard(c)
        self.inactive[c] = None

    def _reclaim(self) -> None:
        deactivate = self.activated != self.seen or len(self.inactive) < len(self.active)
        got = scanned = 0
        owed = 0.0
        while got < self.batch:
            if not self.inactive:
                if not self.active:
                    break
                self._deactivate()
                continue
            ratio = len(self.active) / len(self.inactive)
            got += self._scan_inactive()
            scanned += 1
            if scanned > 2 * len(self.inactive) + 2:  # nothing left to take: the forced deactivation
                deactivate = True
            if deactivate:
                owed += ratio
                while owed >= 1 and self.active:
                    self._deactivate()
                    owed -= 1
        self.seen = self.activated

    def add(self, c: int, young: bool) -> None:
        if self.room <= 0:
            return
        while len(self.inactive) + len(self.active) >= self.room:
            self._reclaim()
        evicted = self.shadow.pop(c, None)
        if evicted is not None and self.age - evicted <= len(self.active):
            self.active[c] = None
            self.age += 1
            self.activated += 1
        else:
            self.inactive[c] = None
        if young:
            self.young.add(c)


def replay_workingset(lookups, pieces, cache_bytes: float, window_bytes: float, chunk: int = 64 * 1024) -> float:
    """Bytes a decode token reads: ``replay_mmap``'s windows and read-ahead marks over
    :class:`Workingset`, the load every expert chunk touched in file order and marked accessed
    (llama.cpp maps the model ``MAP_POPULATE``, whose page walk marks every page accessed:
    ``FOLL_TOUCH``), so a chunk still referenced at its first scan is activated."""
    spans = [[(off // chunk, (off + n - 1) // chunk) for off, n in p if n > 0] for p in pieces]
    expert = sorted({c for s in spans for a, b in s for c in range(a, b + 1)})
    is_expert = set(expert)
    window = max(1, math.ceil(window_bytes / chunk))
    cache = Workingset(int(max(0.0, cache_bytes) // chunk))
    marks: dict[int, int] = {}
    read = 0

    def bring(start: int, keep: int = -1) -> int:
        got = [x for x in range(start, start + window) if x in is_expert and x not in cache]
        for x in got:
            marks.pop(x, None)
            if x != keep:
                cache.add(x, False)
        marks[start + window - max(1, window // 4)] = start + window
        return len(got)

    def access(c: int) -> int:
        if c in cache:
            cache.touch(c)
            ahead = marks.pop(c, None)
            return bring(ahead) if ahead is not None else 0
        n = bring(max(0, c - window // 2), keep=c)
        cache.add(c, True)
        return n

    for c in expert:
        access(c)
        cache.marked.add(c)
    for i in range(lookups.n):
        n = sum(access(c) for a, b in spans[int(lookups.item[i])] for c in range(a, b + 1))
        read += n if lookups.decode[i] else 0
    return read * chunk / lookups.n_decode_tokens if lookups.n_decode_tokens else 0.0


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bench-q4_k", help="PRESET-QTYPE of bmoe-run make-model")
    ap.add_argument("--dir", default=None, help="where the model, its loop image and bench_mmap_line's run are")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ram", default="120,147.6,179.5", help="cgroup limits (MiB) the trace is played in")
    args = ap.parse_args()
    from bmoe_top.parsers.gguf_layout import read_layout
    from bmoe_top.tui.analysis.pagecache import layout_pieces, replay_mmap
    from bmoe_top.tui.jobs.whatif import load_whatif

    cg = MemoryCgroup()
    if cg.base is None or os.geteuid() != 0:
        print(f"needs root and a memory cgroup: {cg.base or cg.why}")
        return 1
    d = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / "bmoe-bench-models"
    ref_dir = d / f"mmap-line-{args.model}"
    if not (ref_dir / "run.route.csv").is_file():
        print(f"no reference run in {ref_dir}: run benchmarks/bench_mmap_line.py --dir {d} first")
        return 1
    try:
        rams = [float(x) for x in args.ram.split(",")]
    except ValueError:
        print(f"--ram takes MiB numbers separated by commas, not {args.ram!r}")
        return 1
    model = ensure_model(d, args.model)
    lay = read_layout(model)
    ref = load_whatif([str(ref_dir / "run.route.csv"), str(ref_dir / "run.csv")])
    pieces = layout_pieces(lay)
    touches, start, firsts = touch_ranges(ref.lookups, pieces, lay.file_size)
    n_dec = ref.lookups.n_decode_tokens - 1
    dense = (lay.file_size - lay.expert_bank_bytes) / MIB
    load0 = os.getloadavg()
    print(f"{model.stem}: file {lay.file_size / MIB:.1f} MiB, dense {dense:.2f} MiB; {args.runs} runs a cell, "
          f"interleaved; load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}", flush=True)
    got: dict[tuple[float, int, str], list[tuple[float, float, float, float]]] = {}
    with loop_copy(model, d) as loop:
        sources = [(8192, model)] + ([(128, loop)] if loop else [])
        for _ in range(args.runs):
            for ram in rams:
                for ra_kb, path in sources:
                    for way, flush in (("as it comes", ()), ("fresh", firsts)):
                        drop_cache(path)
                        pcg = cg.make(int(ram * MIB))
                        try:
                            read = play_trace(path, touches, start, str(pcg / "cgroup.procs"), d, flush_at=flush)
                            st = cgroup_stat(pcg)
                        finally:
                            cg.drop(pcg)
                        file_mib = st.get("file", st.get("cache", 0)) / MIB
                        got.setdefault((ram, ra_kb, way), []).append(
                            (read / MIB / n_dec, st.get("active_file", 0) / MIB, st.get("inactive_file", 0) / MIB,
                             file_mib))
    print("\nMiB a decode token: the trace played as it comes (median, range) and with the statistics fresh; "
          "the lists at the end (active / inactive MiB, median); the replays at the room the file pages left "
          "the experts (fresh runs' file pages at the end less the dense weights), error against fresh")
    print(f"{'cgroup':>7} {'ra KiB':>6} {'as it comes':>19} {'lists':>11} {'fresh':>17} {'lists':>11} "
          f"{'room':>6} {'two lists':>15} {'workingset':>15}")
    errs: dict[str, list[float]] = {"two lists": [], "workingset": []}
    for ram in rams:
        for ra_kb, _ in sources:
            come, fresh = got.get((ram, ra_kb, "as it comes"), []), got.get((ram, ra_kb, "fresh"), [])
            if not come or not fresh:
                continue
            want = med([r[0] for r in fresh])
            room = med([r[3] for r in fresh]) - dense
            cols = []
            for name, rep in (("two lists", replay_mmap(ref.lookups, pieces, room * MIB, ra_kb * 1024.0,
                                                        sequential=True).read_per_token),
                              ("workingset", replay_workingset(ref.lookups, pieces, room * MIB, 2 * ra_kb * 1024.0))):
                e = 100 * (rep / MIB - want) / want if want > 0 else float("nan")
                if e == e:
                    errs[name].append(abs(e))
                cols.append(f"{rep / MIB:>7.2f} ({e:>+4.0f}%)")
            print(f"{ram:>7.1f} {ra_kb:>6} {med([r[0] for r in come]):>6.2f} "
                  f"{min(r[0] for r in come):>5.2f}-{max(r[0] for r in come):<6.2f} "
                  f"{med([r[1] for r in come]):>5.0f}/{med([r[2] for r in come]):<5.0f} "
                  f"{want:>6.2f} {min(r[0] for r in fresh):>5.2f}-{max(r[0] for r in fresh):<5.2f} "
                  f"{med([r[1] for r in fresh]):>5.0f}/{med([r[2] for r in fresh]):<5.0f} {room:>6.1f} "
                  + " ".join(cols))
    for name, e in errs.items():
        if e:
            print(f"{name} against fresh: median |error| {statistics.median(e):.0f} %, largest {max(e):.0f} %")
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.1f}, after {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
