"""What 2 MiB pages are worth to a decode: the same model run resident by ``bmoe-run`` with its weights
in 2 MiB pages (``--huge-pages on``) and in 4 KiB pages (``--huge-pages off``: llama.cpp's mmap), and
streamed with a budget that holds the whole expert bank (the fill; the cache's own mappings are
4 KiB pages), interleaved, at three model sizes (docs/runtime.md "The large model: what cost
bmoe-run").

A decode reads every weight of the routed experts once a token; through 4 KiB pages the matrix
kernels walk those bytes through tens of thousands of TLB entries a token (on a virtual machine
each miss is a two-level page walk). The ratio printed is the decode rate with 2 MiB pages over the
rate with 4 KiB pages, the median of the per-round ratios: the cost of 4 KiB pages that a
streaming cache whose slices are not 2 MiB-aligned pays at every partial budget.

Each round runs the three arms in a rotating order, from a warm page cache (the file is read once
before the first round), ``--tokens`` greedy tokens each; decode tok/s is ``llama_decode`` alone
from the summary. The resident 2 MiB arm must report its weights in 2 MiB pages (the summary's
``in 2 MiB pages``); a kernel that refuses them makes the arm say so instead of being counted.
Models are made in ``--dir`` when missing (``bmoe-run make-model`` presets).
Run: .venv/bin/python benchmarks/bench_huge_pages.py [--dir DIR] [--models bench-q4_k,bench-q8_0,
large-q4_k] [--rounds 5] [--tokens 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mmap_machine import PROMPT, ensure_model, warm_cache  # noqa: E402

ARMS = ("2m", "4k", "fits")
LABEL = {"2m": "resident, 2 MiB pages", "4k": "resident, 4 KiB pages", "fits": "streamed, every expert fits"}
DECODE = re.compile(r"([\d.]+) tok/s in llama_decode alone")
HUGE = re.compile(r"(\d+) MiB in 2 MiB pages")


def arm_args(arm: str) -> list[str]:
    if arm == "fits":
        return ["--cache-mb", "1000000"]
    return ["--no-moe-stream", "--huge-pages", "on" if arm == "2m" else "off"]


def run_arm(model: Path, arm: str, tokens: int, threads: int) -> tuple[float, int | None]:
    """One run: (decode tok/s, MiB of weights in 2 MiB pages as the summary says, or None)."""
    cmd = [sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "-p", PROMPT, "-n", str(tokens),
           "-t", str(threads), "-c", "512", *arm_args(arm)]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    summary = p.stdout.rpartition("\n\ngeneration:")[2]
    m = DECODE.search(summary)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"bench_huge_pages: {arm} on {model.name} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    h = HUGE.search(summary)
    return float(m.group(1)), int(h.group(1)) if h else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "bmoe-bench-models")
    ap.add_argument("--models", default="bench-q4_k,bench-q8_0,large-q4_k")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rounds} rounds x {a.tokens} tokens, {a.threads} threads",
          flush=True)
    for name in a.models.split(","):
        model = ensure_model(a.dir, name)
        warm_cache(model)
        rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
        refused = 0
        for r in range(a.rounds):
            order = ARMS[r % len(ARMS):] + ARMS[: r % len(ARMS)]
            for arm in order:
                rate, huge = run_arm(model, arm, a.tokens, a.threads)
                if arm == "2m" and not huge:
                    refused += 1
                    continue
                rates[arm].append(rate)
            print(f"{name} round {r + 1}: " + "  ".join(f"{arm} {rates[arm][-1]:.1f}" for arm in ARMS if rates[arm]),
                  flush=True)
        if refused:
            print(f"{name}: the kernel gave no 2 MiB pages in {refused} of {a.rounds} runs (not counted)")
        if not rates["2m"]:
            continue
        n = min(len(rates["2m"]), len(rates["4k"]), len(rates["fits"]))
        per = [rates["2m"][i] / rates["4k"][i] for i in range(n)]
        fits = [rates["fits"][i] / rates["2m"][i] for i in range(n)]
        print(f"\n{name}: decode tok/s, median of {n} rounds")
        for arm in ARMS:
            print(f"  {LABEL[arm]:<30} {statistics.median(rates[arm]):8.1f}")
        print(f"  2 MiB / 4 KiB pages, resident: {statistics.median(per):.3f}  (per round "
              + " ".join(f"{x:.2f}" for x in per) + ")")
        print(f"  streamed fits / resident 2 MiB: {statistics.median(fits):.3f}  (per round "
              + " ".join(f"{x:.2f}" for x in fits) + ")\n", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
