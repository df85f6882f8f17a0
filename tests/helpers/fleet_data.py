"""A generated fleet for a real Prometheus or VictoriaMetrics: every series ``bmoe-run serve`` (or
a stock llama-server) exports, one sample per second (or every few), as OpenMetrics text turned
into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics`` (Debian's prometheus package),
or as VictoriaMetrics' JSON line import. A store holding it (``tests/helpers/prometheus.py``)
answers the fleet's queries with the same numbers every time when they are evaluated at a fixed
time (``--at``): what the snapshot tests and the benchmark read.

Each :class:`Inst` has closed-form rates (no random numbers: the same text on every machine and
numpy version): generated tokens per second with a slow wave, a hit share, the share of the
wall spent waiting for flash, optionally a time after which it is down (``up`` 0, no other
sample).
"""

from __future__ import annotations

import subprocess
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from bmoe_top.parsers.prom import SERIES

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


def _gauge(key: str, inst: Inst, k: np.ndarray, r: np.ndarray, t0: int) -> np.ndarray:
    """Gauge ``key`` at the seconds ``k`` from the start, ``r`` the tokens/s then."""
    resident = np.minimum(inst.slots, 8 + k // 8).astype(np.float64)
    const = {"hit_ratio": inst.hit, "slots": inst.slots, "cache_bytes": inst.slots * EXPERT_BYTES,
             "process_start": t0 - 3600}
    if key in const:
        return np.full(k.size, float(const[key]))
    return {"prompt_tokens_seconds": r * 2, "predicted_tokens_seconds": r,
            "requests_processing": np.where(k % 60 < 45, 1.0, 0.0), "requests_deferred": ((k // 30) % 3) * 1.0,
            "resident": resident, "resident_bytes": resident * EXPERT_BYTES}.get(key, np.zeros(k.size))


def _specs(keys: Collection[str] | None) -> list[tuple[str, str, str, bool]]:
    specs = [(s.key, s.name, s.type, s.per_layer) for s in SERIES]
    return [sp for sp in specs if keys is None or sp[0] in keys]


def fleet_series(insts: Sequence[Inst], t0: int, n_t: int, n_layer: int = 4, every: int = 1,
                 keys: Collection[str] | None = None) -> Iterator[tuple[str, str, dict[str, str], np.ndarray]]:
    """Every series of ``insts`` over ``n_t`` seconds from ``t0`` (Unix s), one sample every
    ``every`` s: (series name, type, labels, values on those seconds; an instance's values stop
    when it is down); then ``up`` (0 once down). ``keys``: only these of
    :data:`bmoe_top.parsers.prom.SERIES` (and the resident gauges); ``up`` always."""
    sec = np.arange(n_t)
    # per instance and second: generated tokens per second (a slow wave), until it is down
    per = []
    for i in insts:
        n_alive = n_t if i.down_at is None else min(n_t, int(i.down_at))
        per.append(i.tok_s * (1.0 + 0.5 * np.sin(2 * np.pi * sec[:n_alive] / 120.0 + i.phase)))
    for key, name, typ, per_layer in _specs(keys):
        for inst, tok in zip(insts, per):
            if inst.kind == "stock" and key not in STOCK:
                continue
            base = {"job": inst.job, "instance": inst.instance}
            for il in range(n_layer) if per_layer else (-1,):
                labels = {**base, "layer": str(il)} if il >= 0 else base
                if typ == "counter":
                    per_tok, const = _counter_rate(key, inst, il, n_layer)
                    vals = np.cumsum(tok * per_tok + const)
                else:
                    vals = _gauge(key, inst, sec[:tok.size], tok, t0)
                yield name, typ, labels, vals[::every]
    for inst, tok in zip(insts, per):
        yield "up", "gauge", {"job": inst.job, "instance": inst.instance}, \
            np.where(sec < tok.size, 1.0, 0.0)[::every]


def write_openmetrics(path: Path, insts: Sequence[Inst], t0: int, n_t: int, n_layer: int = 4) -> int:
    """Every series of ``insts`` at ``n_t`` one-second samples from ``t0`` (Unix s) into ``path``
    (OpenMetrics text, for ``promtool``); the number of samples written."""
    ts = [str(t0 + k) for k in range(n_t)]
    lines = 0
    family = ""
    with open(path, "w") as f:
        for name, typ, labels, vals in fleet_series(insts, t0, n_t, n_layer):
            base = name[:-6] if typ == "counter" else name
            if base != family:
                f.write(f"# TYPE {base} {typ}\n")
                family = base
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            fmt = "{:.6f}" if name != "up" else "{:.0f}"
            f.write("".join(f"{name}{{{lab}}} {fmt.format(v)} {t}\n" for v, t in zip(vals.tolist(), ts)))
            lines += vals.size
        f.write("# EOF\n")
    return lines


def write_import(path: Path, insts: Sequence[Inst], t0: int, n_t: int, n_layer: int = 4, every: int = 1,
                 keys: Collection[str] | None = None) -> int:
    """The same series in VictoriaMetrics' JSON line import format (one line per series: its
    labels, values and millisecond timestamps; ``/api/v1/import``), one sample every ``every`` s;
    the number of samples written."""
    n = 0
    ms = (t0 + np.arange(n_t)[::every]) * 1000
    with open(path, "wb") as f:
        for name, _typ, labels, vals in fleet_series(insts, t0, n_t, n_layer, every, keys):
            f.write(orjson.dumps({"metric": {"__name__": name, **labels}, "values": np.ascontiguousarray(vals),
                                  "timestamps": ms[:vals.size].copy()}, option=orjson.OPT_SERIALIZE_NUMPY))
            f.write(b"\n")
            n += vals.size
    return n


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
