"""A generated fleet for a real Prometheus: OpenMetrics text of every series ``bmoe-run serve``
(or a stock llama-server) exports, one sample per second, turned into TSDB blocks by ``promtool
tsdb create-blocks-from openmetrics`` (Debian's prometheus package). A Prometheus started on
those blocks (``tests/helpers/prometheus.py``, ``data=``) answers the fleet's queries with the
same numbers every time when they are evaluated at a fixed time (``--at``): what the snapshot
tests and the benchmark read.

Each :class:`Inst` has closed-form rates (no random numbers: the same text on every machine and
numpy version): generated tokens per second with a slow wave, a hit share, the share of the
wall spent waiting for flash, optionally a time after which it is down (``up`` 0, no other
sample).
"""

from __future__ import annotations

import itertools
import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bmoe_top.parsers.prom import SERIES
from bmoe_top.runtime.metrics import RESIDENT_SERIES

#: The fixed time the snapshot data ends at (2023-11-14T22:13:20Z); a TSDB block's time
#: retention counts from its newest block, so old data is served as long as it is the newest.
AT = 1_700_000_000


@dataclass(frozen=True)
class Inst:
    """One instance: ``job``, ``instance`` (label values as written, any text), ``kind`` (``bmoe``:
    every series; ``stock``: a llama-server without a MoE cache), ``tok_s`` (mean generated
    tokens/s), ``hit`` (hit share 0..1), ``flash`` (share of the wall waiting for flash),
    ``down_at`` (seconds from the start after which the instance is down; None: up throughout),
    ``phase`` (of the rate's wave, radians), ``slots`` (budget in experts)."""

    job: str
    instance: str
    kind: str = "bmoe"
    tok_s: float = 20.0
    hit: float = 0.8
    flash: float = 0.3
    down_at: float | None = None
    phase: float = 0.0
    slots: int = 64


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


STOCK = {"prompt_tokens", "prompt_seconds", "tokens_predicted", "tokens_predicted_seconds", "n_decode",
         "prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred"}

EXPERT_BYTES = 8192


def _counter_rate(key: str, inst: Inst, il: int, n_layer: int) -> tuple[float, float]:
    """(per generated token/s, constant per s) increase of counter ``key`` per second."""
    lookups = 8.0 / (n_layer if il >= 0 else 1)  # routed experts per token (per layer when per layer)
    hit = min(1.0, inst.hit + 0.03 * (il % 3)) if il >= 0 else inst.hit
    wall = 1.0  # generating all the time: one second of token wall per second
    return {
        "hits": (lookups * hit, 0.0), "misses": (lookups * (1 - hit), 0.0),
        "upload_bytes": (lookups * (1 - hit) * EXPERT_BYTES, 0.0),
        "read_bytes": (lookups * (1 - hit) * EXPERT_BYTES, 0.0),
        "layer_hits": (lookups * hit, 0.0), "layer_misses": (lookups * (1 - hit), 0.0),
        "prompt_tokens": (2.0, 0.0), "prompt_seconds": (0.0, 0.05), "tokens_predicted": (1.0, 0.0),
        "tokens_predicted_seconds": (0.0, wall), "n_decode": (1.0, 1.0), "timed_tokens": (1.0, 0.0),
        "wall_s": (0.0, wall), "io_s": (0.0, wall * inst.flash), "mgmt_s": (0.0, wall * 0.02),
        "compute_s": (0.0, wall * (0.98 - inst.flash)),
    }.get(key, (0.0, 0.0))


def _gauge(key: str, inst: Inst, k: int, r: float, t0: int) -> float:
    resident = min(inst.slots, 8 + k // 8)
    return {"hit_ratio": inst.hit, "slots": inst.slots, "cache_bytes": inst.slots * EXPERT_BYTES,
            "prompt_tokens_seconds": r * 2, "predicted_tokens_seconds": r,
            "requests_processing": 1 if k % 60 < 45 else 0, "requests_deferred": (k // 30) % 3,
            "process_start": t0 - 3600, "resident": resident,
            "resident_bytes": resident * EXPERT_BYTES}.get(key, 0.0)


def write_openmetrics(path: Path, insts: Sequence[Inst], t0: int, n_t: int, n_layer: int = 4) -> int:
    """Every series of ``insts`` at ``n_t`` one-second samples from ``t0`` (Unix s) into ``path``;
    the number of samples written."""
    ts = [str(t0 + k) for k in range(n_t)]
    lines = 0
    # per instance and second: generated tokens per second (a slow wave), until it is down
    per: list[list[float]] = []
    for i in insts:
        n_alive = n_t if i.down_at is None else min(n_t, int(i.down_at))
        per.append([i.tok_s * (1.0 + 0.5 * math.sin(2 * math.pi * k / 120.0 + i.phase)) for k in range(n_alive)])
    specs = [(s.key, s.name, s.type, s.per_layer) for s in SERIES]
    specs += [("resident", RESIDENT_SERIES[0][0], "gauge", False),
              ("resident_bytes", RESIDENT_SERIES[1][0], "gauge", False)]
    with open(path, "w") as f:
        for key, name, typ, per_layer in specs:
            base = name[:-6] if typ == "counter" else name
            f.write(f"# TYPE {base} {typ}\n")
            for inst, tok in zip(insts, per):
                if inst.kind == "stock" and key not in STOCK:
                    continue
                lab = f'job="{_esc(inst.job)}",instance="{_esc(inst.instance)}"'
                labsets = [(f'{lab},layer="{il}"', il) for il in range(n_layer)] if per_layer else [(lab, -1)]
                for labels, il in labsets:
                    if typ == "counter":
                        per_tok, const = _counter_rate(key, inst, il, n_layer)
                        vals = list(itertools.accumulate(r * per_tok + const for r in tok))
                    else:
                        vals = [_gauge(key, inst, k, r, t0) for k, r in enumerate(tok)]
                    f.write("".join(f"{name}{{{labels}}} {v:.6f} {t}\n" for v, t in zip(vals, ts)))
                    lines += len(vals)
        f.write("# TYPE up gauge\n")
        for inst, tok in zip(insts, per):
            lab = f'job="{_esc(inst.job)}",instance="{_esc(inst.instance)}"'
            f.write("".join(f"up{{{lab}}} {1 if k < len(tok) else 0} {t}\n" for k, t in enumerate(ts)))
            lines += n_t
        f.write("# EOF\n")
    return lines


def make_blocks(promtool: str, om: Path, data: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics om data``; raises with its output on failure."""
    p = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(data)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"promtool failed: {p.stdout[-2000:]}{p.stderr[-2000:]}")


#: The snapshot fleet: a healthy instance, a slow one (the highest stall share and the lowest hit
#: %), one down for the last minute, a stock llama-server (no MoE series), and a label value
#: carrying an escape sequence (drawn inert).
SNAPSHOT_FLEET = (
    Inst("bmoe", "10.0.0.1:8080", tok_s=24.0, hit=0.92, flash=0.12),
    Inst("bmoe", "10.0.0.2:8080", tok_s=6.0, hit=0.41, flash=0.63, phase=1.5),
    Inst("bmoe", "10.0.0.3:8080", tok_s=15.0, hit=0.77, flash=0.25, down_at=360, phase=3.0),
    Inst("llama", "10.0.0.9:8080", kind="stock", tok_s=11.0, phase=4.0),
    Inst("bmoe", "edge\x1b[31m-7:8080", tok_s=18.0, hit=0.85, flash=0.2, phase=0.7),
)


def snapshot_blocks(promtool: str, tmp: Path, insts: Sequence[Inst] = SNAPSHOT_FLEET, n_t: int = 420,
                    n_layer: int = 4) -> Path:
    """TSDB blocks of ``insts`` over the ``n_t`` seconds ending at :data:`AT`; the data directory."""
    om = tmp / "fleet.om"
    write_openmetrics(om, insts, AT - n_t + 1, n_t, n_layer)
    data = tmp / "tsdb"
    make_blocks(promtool, om, data)
    om.unlink()
    return data
