"""Per-line cost as a turn grows: one turn of 300,000 ``BMOE_PROGRESS`` lines with ``delta_text``,
parsed (``parse_line``) and applied (``RecordFeed``) to a bounded run model, as a live run does.

The cost per line in a window of 1,000 lines at 1 k tokens into the turn is the baseline; the
same window at 300 k tokens must cost at most 1.5x of it (the answer grows by O(1) per token:
pieces, not ``text += piece``). For contrast, the same two windows of ``text += piece`` on an
attribute (what the answer text did before) are timed in the same rounds. Interleaved rounds,
process CPU time, median of the per-round ratios.

A runtime that sends the cumulative ``text`` instead makes every line O(length) by itself (the
line carries the whole answer): that is the protocol, not bmoe-top.

Run: ``.venv/bin/python benchmarks/bench_turn_length.py [--tokens 300000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bmoe_top.parsers.bmoe_lines import parse_line
from bmoe_top.tui.feed.records import RecordFeed
from bmoe_top.tui.model import LIVE, RunModel

WINDOW = 1000


def line(step: int, n: int) -> str:
    return ('BMOE_PROGRESS {"step":%d,"steps":%d,"wall_ms":100.5,"io_ms":30.25,"compute_ms":69.25,"mgmt_ms":1.0,'
            '"stall_ms":0.0,"read_mb":2.5,"cache_hit_pct":55.5,"delta_text":"tok%d "}' % (step, n, step))


def one_round(n: int, at: list[int]) -> dict[int, float]:
    """Feed one turn of ``n`` lines; CPU seconds per line of the window starting at each of ``at``."""
    run = RunModel(LIVE)
    rf = RecordFeed(run, "bench")
    rf.apply(parse_line('BMOE_BEGIN {"id":1}'))
    lines = [line(i + 1, n) for i in range(n)]
    out: dict[int, float] = {}
    starts = set(at)
    t0 = 0.0
    for i, ln in enumerate(lines):
        if i in starts:
            t0 = time.process_time()
        rf.apply(parse_line(ln))
        if i - WINDOW + 1 in starts:
            out[i - WINDOW + 1] = (time.process_time() - t0) / WINDOW
    assert run.turns[0].text_len == sum(len(f"tok{i + 1} ") for i in range(n))
    return out


class _Old:
    text = ""


def old_round(n: int, at: list[int]) -> dict[int, float]:
    """The same windows of ``self.text += piece``."""
    o = _Old()
    out: dict[int, float] = {}
    starts = set(at)
    t0 = 0.0
    for i in range(n):
        if i in starts:
            t0 = time.process_time()
        o.text += f"tok{i + 1} "
        if i - WINDOW + 1 in starts:
            out[i - WINDOW + 1] = (time.process_time() - t0) / WINDOW
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    early, late = 1000, a.tokens - WINDOW
    ratios, old_ratios, costs = [], [], []
    for _ in range(a.rounds):
        r = one_round(a.tokens, [early, late])
        o = old_round(a.tokens, [early, late])
        ratios.append(r[late] / r[early])
        old_ratios.append(o[late] / o[early])
        costs.append((r[early], r[late]))
    ratio = statistics.median(ratios)
    e, lt = statistics.median(c[0] for c in costs), statistics.median(c[1] for c in costs)
    ok = ratio <= 1.5
    print(f"one turn of {a.tokens:,} delta_text lines, parse + feed into a bounded run model, {a.rounds} rounds")
    print(f"per line at 1 k tokens: {e * 1e6:.1f} us; at {a.tokens // 1000} k tokens: {lt * 1e6:.1f} us")
    print(f"RATIO late/early: median {ratio:.2f}x (goal <= 1.5x), rounds {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"(text += piece on an attribute, same windows: median {statistics.median(old_ratios):.1f}x)")
    print("RESULT:", "OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
