"""Caps on sizes read from input: the one place that says how big a layer, expert or column count may
be before a parser refuses it (docs/telemetry.md "Sizes from input").

Every parser that sizes an array from what a file or a server says (STRP dimensions, audit expert ids,
CSV and route-trace headers and rows, ``/metrics`` layer labels) checks the number against these caps
first, so a 24-byte file cannot ask for a 16 GiB table. A value over a cap is refused (the file or the
record says why) or capped (the rest is dropped with a note); it never reaches ``np.zeros``.

Why these numbers (the largest MoE models released by mid-2026, with room to spare):

* layers: DeepSeek-V3/R1 and Kimi K2 have 61, Qwen3-235B 94, GLM-4.5 92. :data:`MAX_LAYERS` = 1024 is
  ten times the deepest.
* experts per layer: Kimi K2 384, Qwen3-Next 512, DeepSeek-V3 256. :data:`MAX_EXPERTS` = 4096 is eight
  times the widest (STRP's u16 ids could say 65535).
* top-k: 8 to 10 in every model above. :data:`MAX_TOP_K` = 256.
* so a (layer, expert) table holds at most :data:`MAX_LAYER_EXPERT_CELLS` = 4 Mi cells: 32 MiB as
  int64, 4 MiB as bool.
* CSV: real per-token files have 7 to 22 columns. :data:`MAX_CSV_COLUMNS` = 1024; a table holds at
  most :data:`MAX_CSV_CELLS` = 2^27 float64 cells (1 GiB; a 1,000,000-token, 22-column file is 22 Mi).
* ``/metrics`` series bmoe-top does not know are kept (listed on screen, kept in JSON) up to
  :data:`MAX_OTHER_SAMPLES` samples a scrape.
* bytes of one expert (or of a layer's dense part) as a route trace states them: DeepSeek-V3's
  experts are 44 MB at 8 bits; :data:`MAX_TENSOR_BYTES` = 1 TiB is 25,000 times that, and 1024
  layers x 4096 experts of it still sum within an int64.
* a ``/metrics`` body: llama-server's and bmoe-run's expositions are tens of KiB even with hundreds
  of layers; :data:`MAX_METRICS_BODY_MB` = 16 MiB is the default cap (``attach --max-body-mb``).
"""

from __future__ import annotations

__all__ = [
    "MAX_LAYERS",
    "MAX_EXPERTS",
    "MAX_TOP_K",
    "MAX_LAYER_EXPERT_CELLS",
    "MAX_CSV_COLUMNS",
    "MAX_CSV_CELLS",
    "MAX_OTHER_SAMPLES",
    "MAX_METRICS_BODY_MB",
    "MAX_TENSOR_BYTES",
    "dims_problem",
    "int_within",
]

MAX_LAYERS = 1024
MAX_EXPERTS = 4096
MAX_TOP_K = 256
MAX_LAYER_EXPERT_CELLS = MAX_LAYERS * MAX_EXPERTS
MAX_CSV_COLUMNS = 1024
MAX_CSV_CELLS = 1 << 27
MAX_OTHER_SAMPLES = 10_000
MAX_METRICS_BODY_MB = 16.0
MAX_TENSOR_BYTES = 1 << 40

_CAPS = {"n_layer": (MAX_LAYERS, "layers"), "n_expert": (MAX_EXPERTS, "experts"),
         "top_k": (MAX_TOP_K, "top-k slots")}


def int_within(value: object, cap: int, low: int = 0) -> int | None:
    """``value`` as an int when it is an integer (an int, an integral float, or such a string)
    in ``[low, cap]``, else ``None``. Never raises."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        v = value
    elif isinstance(value, float):
        if not value.is_integer():
            return None
        v = int(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return None
        if not f.is_integer():
            return None
        v = int(f)
    else:
        return None
    return v if low <= v <= cap else None


def dims_problem(n_layer: object = None, n_expert: object = None, top_k: object = None) -> str | None:
    """``None`` when every given dimension (``None`` = not given) is an integer within its cap,
    else one sentence naming the first one that is not, e.g. ``"n_expert=4000000000 is over the cap
    of 4096 experts (parsers/limits.py)"``."""
    for key, value in (("n_layer", n_layer), ("n_expert", n_expert), ("top_k", top_k)):
        if value is None:
            continue
        cap, what = _CAPS[key]
        if int_within(value, cap) is None:
            shown = str(value)[:40]
            if int_within(value, 1 << 62) is None:
                return f"{key}={shown} is not a non-negative integer"
            return f"{key}={shown} is over the cap of {cap} {what} (parsers/limits.py)"
    return None
