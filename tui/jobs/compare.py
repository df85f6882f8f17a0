"""The comparison use case: arms of runs from files, read as ``bmoe-top replay`` reads them, into
what :func:`bmoe_top.tui.analysis.compare.compare` takes and
:mod:`bmoe_top.tui.present.compare` shows.

An arm is one or more runs of the same setup; a run is one or more files of one run (its CSV
sink, log, route trace, sidecar, a recording or a transcript), read into one run model. On the
command line runs are separated by ``,`` and files of one run joined by ``+``: ``bmoe-top
compare a1.csv,a2.csv vs b1.csv,b2.csv`` or ``--arm base=a.csv+a.log``. docs/analysis.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.compare import LoadedArm, LoadedRun, arm_names
from bmoe_top.tui.sources.files import ReplayError

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.compare import ArmInput, RunInput

__all__ = ["CompareError", "ArmSpec", "parse_arms", "load_arms", "run_from_model", "arm_inputs"]


class CompareError(ValueError):
    """Arguments or files a comparison cannot be made from; ``str()`` is one sentence."""


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """An arm as given: ``name`` and its runs, each a list of files; ``named`` when the name was
    given (``--arm NAME=...``), else :func:`load_arms` names it by what differs between arms."""

    name: str
    runs: list[list[str]]
    named: bool = False


def _split(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep``, unless ``text`` itself names an existing file."""
    if os.path.exists(text) or sep not in text:
        return [text]
    return [p for p in text.split(sep) if p]


def _runs(spec: str) -> list[list[str]]:
    return [_split(r, "+") for r in _split(spec, ",")]


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".route.csv", ".rec.jsonl", ".csv", ".jsonl", ".log", ".txt", ".metrics", ".out"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def parse_arms(positional: Sequence[str], named: Sequence[str] = ()) -> list[ArmSpec]:
    """Arms from the command line: each positional argument is an arm (the word ``vs`` between
    them is a separator), each ``NAME=RUNS`` of ``named`` a named arm; runs are separated by
    ``,`` and files of one run joined by ``+`` (a path containing them is taken whole when it
    exists). Unnamed arms are called after their first file until :func:`load_arms` reads what
    differs between them. Raises CompareError with fewer than two arms or an empty one."""
    arms: list[ArmSpec] = []
    for p in positional:
        if p.lower() == "vs":
            continue
        runs = _runs(p)
        if not runs:
            raise CompareError(f"an empty arm: {p!r}")
        name = _stem(runs[0][0]) + (f" ({len(runs)} runs)" if len(runs) > 1 else "")
        arms.append(ArmSpec(name, runs))
    for n in named:
        name, sep, spec = n.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise CompareError(f"--arm wants NAME=FILES, got {n!r}")
        arms.append(ArmSpec(name.strip(), _runs(spec.strip()), named=True))
    if len(arms) < 2:
        raise CompareError("a comparison needs at least two arms: bmoe-top compare A B, A1,A2 vs B1,B2, "
                           "or --arm NAME=FILES twice")
    names = _distinct([a.name for a in arms])
    return [ArmSpec(n, a.runs, a.named) for n, a in zip(names, arms)]


def _distinct(names: Sequence[str]) -> list[str]:
    """``names`` with a repeated one numbered (``x``, ``x #2``)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if not k else f"{n} #{k + 1}")
    return out


_TOKEN_COLUMNS = ("wall_ms", "compute_ms", "io_ms", "stall_ms", "mgmt_ms", "read_mib", "rss_mib",
                  "mem_available_mib", "swap_mib")
_SUMMARY = (("tok_s", "tok_s"), ("prefill_s", "prefill_s"), ("load_s", "load_s"), ("ttft_s", "ttft_s"),
            ("cache_hit_pct", "hit_pct"), ("read_mib_per_tok", "read_mib_per_token"))


def run_from_model(run: RunModel, name: str) -> RunInput:
    """What the comparison takes from a run model: the per-token columns (the flash wait of
    ``RunModel.breakdown`` as ``flash_ms``, ``cache_hit_pct`` as
    ``hit_pct``, -1 = no cache as missing), the summary numbers, the entry state and the peaks
    of memory and temperature (the device sidecar, else the first/extreme per-token memory
    values), and the routed experts (decode routing rows as ``layer << 20 | expert``, in order)
    when the run has routing."""
    from bmoe_top.tui.analysis.compare import RunInput, absent_reasons, entry_from_sidecar, resources_from

    with run.lock:
        n = run.tokens.n
        cols: dict[str, npt.NDArray[np.float64]] = {}
        for c in _TOKEN_COLUMNS:
            if run.tokens.has(c):
                cols[c] = np.array(run.tokens.view(c, 0, n), dtype=np.float64)
        if n:
            cols["flash_ms"] = np.array(run.breakdown()["flash"], dtype=np.float64)  # io serial, stall overlap
        hit_column = None
        if run.tokens.has("cache_hit_pct"):
            h = hit_column = np.array(run.tokens.view("cache_hit_pct", 0, n), dtype=np.float64)
            cols["hit_pct"] = np.where(h < 0, np.nan, h)
        own_hit = run.summary.get("cache_hit_pct")
        summary: dict[str, float] = {}
        for src, dst in _SUMMARY:
            v = run.summary.get(src)
            if v is not None and math.isfinite(float(v)) and not (src == "cache_hit_pct" and v < 0):
                summary[dst] = float(v)
        sidecar = dict(run.sidecar)
        ro = run.routes
        dec = ro.tok >= 0
        routed = ((ro.layer[dec].astype(np.int64) << 20) | ro.expert[dec].astype(np.int64)) if ro.n else None
    entry = entry_from_sidecar(sidecar)
    if "mem_available_mib" not in entry and "mem_available_mib" in cols:
        m = cols["mem_available_mib"][np.isfinite(cols["mem_available_mib"])]
        if m.size:
            entry["mem_available_mib"] = float(m[0])
    tokens = {k: v for k, v in cols.items() if k not in ("rss_mib", "mem_available_mib", "swap_mib")}
    return RunInput(name, tokens, summary, entry, routed, resources_from(cols, sidecar),
                    absent_reasons(own_hit, hit_column))


def load_arms(specs: Sequence[ArmSpec]) -> list[LoadedArm]:
    """Read every run of every arm (each run's files into one run model). Raises CompareError
    for a file that cannot be read or a run without per-token rows or without a usable time on
    any of them."""
    from bmoe_top.tui.feed.files import open_paths

    out = []
    for spec in specs:
        arm = LoadedArm(spec.name)
        for files in spec.runs:
            try:
                model = open_paths(files)
            except ReplayError as e:
                raise CompareError(str(e)) from None
            name = _stem(files[0]) + (f" +{len(files) - 1}" if len(files) > 1 else "")
            if model.tokens.n == 0:
                raise CompareError(f"{' + '.join(files)}: no per-token rows (a CSV sink, a --progress transcript "
                                   "or a recording is needed for timing)")
            if not model.column_stats("wall_ms", 0, model.tokens.n).count:
                raise CompareError(f"{' + '.join(files)}: no usable per-token time ({model.tokens.n:,} token "
                                   f"row{'s' if model.tokens.n != 1 else ''}, wall_ms absent or not a number on "
                                   "every one)")
            arm.runs.append(LoadedRun(name, list(files), model, run_from_model(model, name)))
        out.append(arm)
    # arms not named on the command line: by the run-header settings that differ between them,
    # else their folders (present/compare.py arm_names)
    auto = arm_names([[dict(r.model.meta) for r in a.runs] for a in out],
                     [[str(Path(r.files[0]).resolve().parent.name) for r in a.runs] for a in out],
                     [_stem(spec.runs[0][0]) for spec in specs])
    names = _distinct([spec.name if spec.named else auto[i] for i, spec in enumerate(specs)])
    return [LoadedArm(n, a.runs) for n, a in zip(names, out)]


def arm_inputs(arms: Sequence[LoadedArm]) -> list[ArmInput]:
    """The comparison's input for loaded arms."""
    from bmoe_top.tui.analysis.compare import ArmInput

    return [ArmInput(a.name, [r.input for r in a.runs]) for a in arms]
