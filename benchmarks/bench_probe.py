"""``bmoe-top probe`` against ``fio`` on the same pattern (docs/analysis.md "probe"): O_DIRECT
random reads of one block size, ``depth`` threads of ``psync`` reads, over one file, in rounds of
``--seconds`` each, probe and fio interleaved in alternating order, at 3 block sizes (64 KiB, the
bench model's expert slice, 1 MiB) and the depths ``--depths``.

Printed per size and depth: the best and the median MB/s of each over the rounds, and their ratio
(probe / fio; the best of several is the device's speed, since other processes only slow a round
down). A probe that measures something else than fio (the page cache, a different block) shows a
ratio far from 1 at every size.

Run: .venv/bin/python benchmarks/bench_probe.py [--rounds 5] [--seconds 0.5] [--depths 1,4]
     [--mib 64] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bmoe_top.tui.jobs import probe as P

SIZES = (64 << 10, P.block_bytes(208_896), 1 << 20)


def fio_mb_s(path: Path, block: int, depth: int, seconds: float) -> float:
    out = subprocess.run(
        ["fio", "--name=probe", f"--filename={path}", "--readonly", "--rw=randread", f"--bs={block}",
         "--blockalign=4096", "--direct=1", "--ioengine=psync", f"--numjobs={depth}", "--thread",
         "--group_reporting", "--time_based", f"--runtime={seconds}", "--invalidate=1", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out[out.index("{"):])["jobs"][0]["read"]["bw_bytes"]) / 1e6


def probe_mb_s(path: Path, block: int, depth: int, seconds: float) -> float:
    r = P.probe(str(path), block, only_depth=depth, seconds=seconds, buffered=False)
    assert r.direct is not None
    return r.direct[0].mb_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--depths", default="1,4")
    ap.add_argument("--mib", type=int, default=64, help="size of the file read (MiB)")
    ap.add_argument("--dir", default=None, help="folder of the file (default: a temporary one)")
    a = ap.parse_args()
    if shutil.which("fio") is None:
        print("fio is not installed: nothing to compare with", file=sys.stderr)
        return 1
    depths = [int(d) for d in a.depths.split(",")]
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        f = Path(tmp) / "probe.bin"
        with open(f, "wb") as fh:
            for _ in range(a.mib):
                fh.write(os.urandom(1 << 20))
        print(f"{'block':>9} {'depth':>5} {'probe best':>10} {'fio best':>9} {'ratio':>6} "
              f"{'probe med':>9} {'fio med':>8} {'ratio':>6}   (MB/s, {a.rounds} rounds of {a.seconds} s)")
        for block in SIZES:
            for depth in depths:
                ours: list[float] = []
                theirs: list[float] = []
                for i in range(a.rounds):
                    for who in ("probe", "fio") if i % 2 == 0 else ("fio", "probe"):
                        if who == "fio":
                            theirs.append(fio_mb_s(f, block, depth, a.seconds))
                        else:
                            ours.append(probe_mb_s(f, block, depth, a.seconds))
                bo, bt = max(ours), max(theirs)
                mo, mt = statistics.median(ours), statistics.median(theirs)
                print(f"{block:>9,} {depth:>5} {bo:>10.0f} {bt:>9.0f} {bo / bt:>6.2f} "
                      f"{mo:>9.0f} {mt:>8.0f} {mo / mt:>6.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
