"""Prometheus ``/metrics`` exposition of a MoE-cache server, and rates between two scrapes.

Formats: moe-cache-reference.md "Server metrics" (the ``llamacpp:moe_cache_*`` series), the
request/token counters llama-server exposes (``llamacpp:prompt_tokens_total`` ...), and the
per-token time sums of telemetry-contract.md "Per-token lines" that ``bmoe-run serve`` adds as
``bmoe:token_*_seconds_total`` counters (docs/metrics.md lists every series).

Two pure steps, no network, no threads:

* :func:`parse_exposition` turns one body (``str`` or ``bytes``) into a :class:`PromSnapshot`.
  It parses with ``prometheus_client.parser.text_string_to_metric_families`` and copes with
  what real servers send: extra or reordered labels (``device="..."`` is summed over),
  ``nan``/``-nan``/``+Inf``/``-Inf`` values, escaped quotes, backslashes and newlines in label
  values, counters whose ``_total`` suffix the parser adds or strips, a body that arrives as one
  JSON-quoted string (decoded once, ``json_quoted`` set), and bad lines (counted with their
  1-based line number; the other lines still count). A series the server does not export is
  absent from the snapshot (``get`` returns ``None``), never 0.
* :func:`compute_delta` derives the rates between two snapshots (:class:`MetricsDelta`): tok/s,
  hit %, MiB/s read, per-layer hit %, the per-token time breakdown. A counter that went down
  (server restart) makes the newer snapshot a new baseline: ``reset`` is set and no rate of
  that interval is reported (``None``), so a rate is never negative.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson
from prometheus_client.parser import text_string_to_metric_families

from .limits import MAX_LAYERS, MAX_OTHER_SAMPLES

__all__ = [
    "SeriesSpec",
    "SERIES",
    "SERIES_BY_KEY",
    "PromFormatError",
    "PromSnapshot",
    "MetricsDelta",
    "parse_exposition",
    "compute_delta",
    "split_series",
    "MIB",
    "PROMPT_CACHED",
]

MIB = 1024 * 1024

#: llama-server's counter of prompt tokens reused from its cache (not in :data:`SERIES`: read
#: from the series kept unnamed, ``PromSnapshot.others``).
PROMPT_CACHED = "llamacpp:prompt_tokens_cached_total"


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    """One exposed series: ``key`` (short name used in code), ``name`` (exact exposed name,
    counters with their ``_total``), ``type`` (``counter``/``gauge``), ``per_layer`` (carries a
    ``layer="N"`` label), ``combine`` (how several label sets of one series fold into one value:
    ``sum`` for counters and additive gauges, ``mean`` for ratios, ``max`` for flags), ``help``."""

    key: str
    name: str
    type: str
    help: str
    per_layer: bool = False
    combine: str = "sum"


SERIES: tuple[SeriesSpec, ...] = (
    # moe-cache-reference.md "Server metrics"
    SeriesSpec("hits", "llamacpp:moe_cache_hits_total", "counter",
               "Selected experts the cache held (distinct experts per ubatch and layer)."),
    SeriesSpec("hits_profile", "llamacpp:moe_cache_hits_profile_total", "counter",
               "Of the hits, experts the profile put there and that were never evicted since."),
    SeriesSpec("misses", "llamacpp:moe_cache_misses_total", "counter",
               "Selected experts the cache did not hold."),
    SeriesSpec("upload_bytes", "llamacpp:moe_cache_upload_bytes_total", "counter",
               "Bytes brought into the cache for misses (bmoe-run: bytes read from flash)."),
    SeriesSpec("cpu_bytes", "llamacpp:moe_cache_cpu_bytes_total", "counter",
               "Hybrid: bytes of the experts the CPU computed outside the cache."),
    SeriesSpec("copies", "llamacpp:moe_cache_copies_total", "counter",
               "Experts large batches copied from the cache instead of from RAM."),
    SeriesSpec("swaps", "llamacpp:moe_cache_swaps_total", "counter",
               "Adaptive cache: experts swapped into the cache."),
    SeriesSpec("hit_ratio", "llamacpp:moe_cache_hit_ratio", "gauge",
               "hits / (hits + misses) since the start.", combine="mean"),
    SeriesSpec("slots", "llamacpp:moe_cache_slots", "gauge", "Expert slots, all devices."),
    SeriesSpec("prefilled", "llamacpp:moe_cache_prefilled", "gauge",
               "Slots the profile filled at load."),
    SeriesSpec("cache_bytes", "llamacpp:moe_cache_bytes", "gauge", "Memory of the cache in bytes."),
    # bmoe-run's residency gauges (the reference does not define them; docs/metrics.md)
    SeriesSpec("resident", "llamacpp:moe_cache_resident", "gauge", "Experts resident in the cache now, all layers."),
    SeriesSpec("resident_bytes", "llamacpp:moe_cache_resident_bytes", "gauge",
               "Bytes of the experts resident in the cache now."),
    SeriesSpec("hybrid", "llamacpp:moe_cache_hybrid", "gauge", "1 with --moe-cache-hybrid.",
               combine="max"),
    SeriesSpec("layer_hits", "llamacpp:moe_cache_layer_hits_total", "counter",
               "Hits of one layer.", per_layer=True),
    SeriesSpec("layer_hits_profile", "llamacpp:moe_cache_layer_hits_profile_total", "counter",
               "Profile hits of one layer.", per_layer=True),
    SeriesSpec("layer_misses", "llamacpp:moe_cache_layer_misses_total", "counter",
               "Misses of one layer.", per_layer=True),
    # llama-server's own request/token series
    SeriesSpec("prompt_tokens", "llamacpp:prompt_tokens_total", "counter",
               "Number of prompt tokens processed."),
    SeriesSpec("prompt_seconds", "llamacpp:prompt_seconds_total", "counter",
               "Prompt process time in seconds."),
    SeriesSpec("tokens_predicted", "llamacpp:tokens_predicted_total", "counter",
               "Number of generation tokens processed."),
    SeriesSpec("tokens_predicted_seconds", "llamacpp:tokens_predicted_seconds_total", "counter",
               "Predict process time in seconds."),
    SeriesSpec("n_decode", "llamacpp:n_decode_total", "counter",
               "Total number of llama_decode() calls."),
    SeriesSpec("prompt_tokens_seconds", "llamacpp:prompt_tokens_seconds", "gauge",
               "Average prompt throughput in tokens/s.", combine="mean"),
    SeriesSpec("predicted_tokens_seconds", "llamacpp:predicted_tokens_seconds", "gauge",
               "Average generation throughput in tokens/s.", combine="mean"),
    SeriesSpec("requests_processing", "llamacpp:requests_processing", "gauge",
               "Number of requests processing."),
    SeriesSpec("requests_deferred", "llamacpp:requests_deferred", "gauge",
               "Number of requests deferred (queued)."),
    # bmoe-run: per-token time sums of telemetry-contract.md, as counters (seconds)
    SeriesSpec("timed_tokens", "bmoe:timed_tokens_total", "counter",
               "Generated tokens whose times are in the bmoe:token_*_seconds_total sums."),
    SeriesSpec("wall_s", "bmoe:token_wall_seconds_total", "counter",
               "Sum of wall_ms over generated tokens, in seconds."),
    SeriesSpec("io_s", "bmoe:token_io_seconds_total", "counter",
               "Sum of io_ms (flash read time) over generated tokens, in seconds."),
    SeriesSpec("stall_s", "bmoe:token_stall_seconds_total", "counter",
               "Sum of stall_ms (wall time compute lost to reads) over generated tokens, in seconds."),
    SeriesSpec("mgmt_s", "bmoe:token_mgmt_seconds_total", "counter",
               "Sum of mgmt_ms (cache management) over generated tokens, in seconds."),
    SeriesSpec("compute_s", "bmoe:token_compute_seconds_total", "counter",
               "Sum of compute_ms (the residual) over generated tokens, in seconds."),
    SeriesSpec("read_bytes", "bmoe:read_bytes_total", "counter",
               "Bytes of experts read from flash (prompt and generation)."),
    SeriesSpec("process_start", "process_start_time_seconds", "gauge",
               "Start time of the process since the Unix epoch in seconds.", combine="max"),
)

SERIES_BY_KEY: dict[str, SeriesSpec] = {s.key: s for s in SERIES}


def _base(name: str) -> str:
    return name[:-6] if name.endswith("_total") else name


# Sample name (with or without ``_total``) -> spec. The prometheus-client parser strips or
# appends ``_total`` on counter families; real servers also send counters untyped.
_BY_BASE: dict[str, SeriesSpec] = {_base(s.name): s for s in SERIES}

TIME_KEYS = ("wall", "io", "stall", "mgmt", "compute")


class PromFormatError(ValueError):
    """The body is not a Prometheus text exposition at all (no sample line parses)."""


@dataclass(slots=True)
class PromSnapshot:
    """One parsed scrape.

    ``t``: caller's clock in seconds (monotonic) when the body arrived.
    ``values``: key -> value for the scalar series the server exported (NaN kept as NaN).
    ``layers``: key -> {layer index: value} for the per-layer series exported.
    ``types``: key -> the type the exposition declared (``counter``, ``gauge``, ``unknown``).
    ``json_quoted``: the body came as one JSON string and was decoded once.
    ``bad_lines``: (1-based line number, message) of the lines that did not parse.
    ``n_samples``: samples read; ``unknown``: names of series not in :data:`SERIES` (first 64);
    ``others``: every sample of those series, ``name{labels}`` -> value (labels sorted; up to
    :data:`~.limits.MAX_OTHER_SAMPLES`), and ``other_types`` their declared types: kept so the UI can
    list them and the JSON keep them. ``notes``: what the parser decided (a duplicate series: the
    same name and labels twice, the last value is used, never the sum). A key absent from
    ``values``/``layers`` is "not exported", never 0.
    """

    t: float
    values: dict[str, float] = field(default_factory=dict)
    layers: dict[str, dict[int, float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    json_quoted: bool = False
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    n_samples: int = 0
    unknown: list[str] = field(default_factory=list)
    others: dict[str, float] = field(default_factory=dict)
    other_types: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def get(self, key: str) -> float | None:
        """Value of scalar series ``key`` or ``None`` when not exported."""
        return self.values.get(key)

    def exported(self, key: str) -> bool:
        """The server exports series ``key`` (scalar or per layer)."""
        return key in self.values or key in self.layers

    def layer_count(self) -> int:
        """Number of layers = highest ``layer`` label seen + 1 (0 without per-layer series)."""
        n = 0
        for d in self.layers.values():
            if d:
                n = max(n, max(d) + 1)
        return n

    def detail(self) -> str:
        """What a good scrape's status line adds about the body, one line (``""`` when nothing):
        it came JSON-quoted, and how many lines did not parse (the first one's number)."""
        parts = ["body was JSON-quoted; decoded once"] if self.json_quoted else []
        if self.bad_lines:
            n = len(self.bad_lines)
            parts.append(f"{n} bad line{'s' if n > 1 else ''} (first: line {self.bad_lines[0][0]})")
        return "; ".join(parts)


@dataclass(slots=True)
class MetricsDelta:
    """Rates between two snapshots (``prev`` -> ``cur``).

    ``dt_s``: seconds between the two scrapes. ``reset``: a counter went down (restart), so
    this interval is a new baseline and every rate below is ``None``.
    Rates are ``None`` when a series is not exported, a value is NaN/inf, or (for ratios)
    there was nothing to divide by in the interval.
    ``tok_s``: generated tokens/s; ``prompt_tok_s``: prompt tokens/s; ``hit_pct``: cache hits
    in the interval in % of lookups; ``hit_pct_total``: since the server started (the
    ``hit_ratio`` gauge, or the counters); ``read_mib_s``: MiB/s of ``upload_bytes`` (bmoe-run:
    flash reads); ``cpu_mib_s``: hybrid CPU bytes in MiB/s; ``swaps``: experts swapped in the
    interval; ``layer_hit_pct``: list indexed by layer (``None`` where no lookups);
    ``token_ms``: per generated token in ms for wall/io/stall/mgmt/compute (``None`` each when
    not exported or no token in the interval). ``d``: raw counter differences by key.
    """

    t0: float
    t1: float
    dt_s: float
    reset: bool = False
    tok_s: float | None = None
    prompt_tok_s: float | None = None
    hit_pct: float | None = None
    hit_pct_total: float | None = None
    read_mib_s: float | None = None
    cpu_mib_s: float | None = None
    swaps: float | None = None
    layer_hit_pct: list[float | None] = field(default_factory=list)
    token_ms: dict[str, float | None] = field(default_factory=dict)
    d: dict[str, float] = field(default_factory=dict)


def _decode_body(body: str | bytes) -> tuple[str, bool]:
    if isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        text = raw.decode("utf-8", errors="replace")
    else:
        text = body.lstrip("\ufeff")
    stripped = text.strip()
    # A known llama-server regression sent the exposition as one JSON string:
    # "# HELP ...\n# TYPE ...\n...". Decode it once and say so.
    if len(stripped) >= 2 and stripped[0] == '"' and stripped[-1] == '"':
        try:
            decoded = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, str):
            return decoded, True
    return text, False


def _is_finite(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(v)


def _series_text(name: str, labels: dict[str, str]) -> str:
    """``name{a="x",b="y"}`` (labels sorted, values escaped as the exposition format does)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_LABEL_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


def split_series(text: str) -> tuple[str, dict[str, str]]:
    """A series as :attr:`PromSnapshot.others` names it (``name{a="x",b="y"}``) -> ``(name,
    {label: value})``, the values unescaped; a name without labels -> ``(name, {})``. Never raises."""
    name, brace, rest = text.partition("{")
    if not brace:
        return text, {}
    return name, {m.group(1): _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
                  for m in _LABEL_PAIR.finditer(rest)}


_Labels = tuple[tuple[str, str], ...]


class _Acc:
    """Samples of one body by series: ``scalar`` key -> {label set: value}, ``layer`` key -> layer ->
    {other labels: value}; a repeated (name, labels) replaces the earlier value and is a note."""

    __slots__ = ("scalar", "layer", "types", "unknown", "others", "other_types", "dups", "n", "others_dropped")

    def __init__(self) -> None:
        self.scalar: dict[str, dict[_Labels, float]] = {}
        self.layer: dict[str, dict[int, dict[_Labels, float]]] = {}
        self.types: dict[str, str] = {}
        self.unknown: list[str] = []
        self.others: dict[str, float] = {}
        self.other_types: dict[str, str] = {}
        self.dups: dict[str, int] = {}
        self.n = 0
        self.others_dropped = 0

    def add_families(self, families: Iterable[Any], bad: list[tuple[Any, ...]], line0: int) -> None:
        for fam in families:
            for s in fam.samples:
                self.add(s.name, s.labels, s.value, fam.type, bad, line0)

    def _dup(self, name: str, labels: dict[str, str]) -> None:
        key = _series_text(name, labels)
        self.dups[key] = self.dups.get(key, 0) + 1

    def add(self, name: str, labels: dict[str, str], value: float, typ: str,
            bad: list[tuple[Any, ...]], lineno: int) -> None:
        self.n += 1
        spec = _BY_BASE.get(_base(name))
        if spec is None:
            if len(self.unknown) < 64 and name not in self.unknown:
                self.unknown.append(name)
            key = _series_text(name, labels)
            if key in self.others:
                self._dup(name, labels)
            elif len(self.others) >= MAX_OTHER_SAMPLES:
                self.others_dropped += 1
                return
            self.others[key] = float(value)
            self.other_types.setdefault(name, typ)
            return
        value = float(value)
        self.types.setdefault(spec.key, typ)
        if spec.per_layer:
            lab = labels.get("layer")
            try:
                il = int(lab) if lab is not None else -1
            except ValueError:
                il = -1
            if il < 0:
                bad.append((lineno, f"{spec.name}: layer label missing or not an integer ({lab!r})",
                            name, lab))
                return
            if il >= MAX_LAYERS:
                bad.append((lineno, f"{spec.name}: layer label {lab} is over the cap of {MAX_LAYERS} layers "
                                    "(parsers/limits.py)", name, lab))
                return
            other: _Labels = () if len(labels) == 1 else tuple(sorted(
                (k, v) for k, v in labels.items() if k != "layer"))
            cell = self.layer.setdefault(spec.key, {}).setdefault(il, {})
            if other in cell:
                self._dup(name, labels)
            cell[other] = value  # the last of a duplicated series wins; other label sets are summed
            return
        lk: _Labels = tuple(sorted(labels.items())) if labels else ()
        d = self.scalar.setdefault(spec.key, {})
        if lk in d:
            self._dup(name, labels)
        d[lk] = value

    def merge(self, src: _Acc) -> None:
        for k, d in src.scalar.items():
            mine = self.scalar.setdefault(k, {})
            for lk, v in d.items():
                if lk in mine:
                    self._dup(SERIES_BY_KEY[k].name, dict(lk))
                mine[lk] = v
        for k, layers in src.layer.items():
            ml = self.layer.setdefault(k, {})
            for il, cell in layers.items():
                mc = ml.setdefault(il, {})
                for lk, v in cell.items():
                    if lk in mc:
                        self._dup(SERIES_BY_KEY[k].name, {"layer": str(il), **dict(lk)})
                    mc[lk] = v
        for k, t in src.types.items():
            self.types.setdefault(k, t)
        for name in src.unknown:
            if len(self.unknown) < 64 and name not in self.unknown:
                self.unknown.append(name)
        for key, v in src.others.items():
            if key in self.others:
                self.dups[key] = self.dups.get(key, 0) + 1
            elif len(self.others) >= MAX_OTHER_SAMPLES:
                self.others_dropped += 1
                continue
            self.others[key] = v
        for name, t in src.other_types.items():
            self.other_types.setdefault(name, t)
        for key, c in src.dups.items():
            self.dups[key] = self.dups.get(key, 0) + c
        self.n += src.n
        self.others_dropped += src.others_dropped

    def values(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for k, d in self.scalar.items():
            vals = list(d.values())
            combine = SERIES_BY_KEY[k].combine
            if combine == "max":
                v = vals[0]
                for x in vals[1:]:
                    if x > v or math.isnan(v):
                        v = x
            else:
                v = math.fsum(vals) if len(vals) > 1 else vals[0]
                if combine == "mean":
                    v = v / len(vals)
            out[k] = v
        return out

    def layers(self) -> dict[str, dict[int, float]]:
        return {k: {il: (next(iter(cell.values())) if len(cell) == 1 else math.fsum(cell.values()))
                    for il, cell in layers.items()} for k, layers in self.layer.items()}

    def notes(self) -> list[str]:
        out = [f"duplicate series {key}" + (f" ({c + 1} times)" if c > 1 else "") + ": the last value is "
               "used, not the sum" for key, c in self.dups.items()]
        if self.others_dropped:
            out.append(f"{self.others_dropped} samples of series bmoe-top does not know left out (over "
                       f"{MAX_OTHER_SAMPLES}, parsers/limits.py)")
        return out


def _parse_lines_one_by_one(lines: list[str], start: int, header: list[str], acc: _Acc,
                            bad: list[tuple[int, str]]) -> None:
    """Slow path for a block that failed: every sample line alone under the block's header."""
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            fams = list(text_string_to_metric_families("\n".join(header + [s]) + "\n"))
        except Exception as exc:  # the library raises ValueError, IndexError, ...
            bad.append((start + i, f"unparsable sample: {s[:80]!r} ({type(exc).__name__})"))
            continue
        acc.add_families(fams, bad, start + i)


def parse_exposition(body: str | bytes, t: float = 0.0) -> PromSnapshot:
    """Parse one ``/metrics`` body into a :class:`PromSnapshot` taken at time ``t`` (seconds).

    Raises :class:`PromFormatError` when the body has non-comment lines and none of them is a
    valid sample (an HTML error page, JSON, binary noise). An empty body is valid: nothing is
    exported.
    """
    text, quoted = _decode_body(body)
    acc = _Acc()
    bad: list[tuple[int, str]] = []
    try:
        acc.add_families(text_string_to_metric_families(text), bad, 0)
    except Exception:
        # Fall back block by block (a block starts at a "# HELP"/"# TYPE" line), then line by line
        # inside the block that fails, so one bad line costs only itself.
        acc = _Acc()
        bad = []
        lines = text.split("\n")
        blocks: list[tuple[int, int]] = []
        start = 0
        for i, line in enumerate(lines):
            ls = line.lstrip()
            if ls.startswith("# HELP") or ls.startswith("# TYPE"):
                if i > start and not (lines[i - 1].lstrip().startswith("# HELP")
                                      or lines[i - 1].lstrip().startswith("# TYPE")):
                    blocks.append((start, i))
                    start = i
        blocks.append((start, len(lines)))
        for a, b in blocks:
            chunk = lines[a:b]
            sub = _Acc()
            sub_bad: list[tuple[int, str]] = []
            try:
                sub.add_families(text_string_to_metric_families("\n".join(chunk) + "\n"), sub_bad, a + 1)
                acc.merge(sub)
                bad.extend(sub_bad)  # located below
            except Exception:
                header = [ln.strip() for ln in chunk if ln.lstrip().startswith("# TYPE")][:1]
                _parse_lines_one_by_one(chunk, a + 1, header, acc, bad)
    if any(len(b) > 2 for b in bad):
        bad = _locate(text, bad)
    if acc.n == 0:
        non_comment = [i for i, ln in enumerate(text.split("\n"))
                       if ln.strip() and not ln.lstrip().startswith("#")]
        if non_comment:
            first = text.split("\n")[non_comment[0]].strip()[:80]
            raise PromFormatError(
                f"not a Prometheus exposition: no sample line parses (line {non_comment[0] + 1}: {first!r})")
    snap = PromSnapshot(t=t, values=acc.values(), layers=acc.layers(), types=acc.types,
                        json_quoted=quoted, bad_lines=sorted(bad), n_samples=acc.n,
                        unknown=acc.unknown, others=acc.others, other_types=acc.other_types,
                        notes=acc.notes())
    return snap


def _locate(text: str, bad: list[tuple[Any, ...]]) -> list[tuple[int, str]]:
    """Give a line number to the sample-level problems found on the fast path (rare)."""
    lines = text.split("\n")
    out: list[tuple[int, str]] = []
    used: set[int] = set()
    for b in bad:
        if len(b) == 2:
            out.append(b)
            continue
        lineno, msg, name, lab = b
        base = _base(name)
        if 0 < lineno <= len(lines) and lines[lineno - 1].lstrip().startswith(base) \
                and (lab is None or f'layer="{lab}"' in lines[lineno - 1]):
            used.add(lineno - 1)
            out.append((lineno, msg))
            continue
        lineno = 0
        for i, ln in enumerate(lines):
            ls = ln.lstrip()
            if i in used or not ls.startswith(base) or ls.startswith("#"):
                continue
            if lab is None and "layer=" not in ls or lab is not None and f'layer="{lab}"' in ls:
                lineno = i + 1
                break
        used.add(lineno - 1)
        out.append((lineno, msg))
    return out


_COUNTER_KEYS = tuple(s.key for s in SERIES if s.type == "counter" and not s.per_layer)
_LAYER_COUNTER_KEYS = tuple(s.key for s in SERIES if s.type == "counter" and s.per_layer)


def is_reset(prev: PromSnapshot, cur: PromSnapshot) -> bool:
    """True when ``cur`` starts a new baseline: a counter went down, or the process start
    time changed (a restart)."""
    ps0, ps1 = prev.values.get("process_start"), cur.values.get("process_start")
    if _is_finite(ps0) and _is_finite(ps1) and ps0 != ps1:
        return True
    for k in _COUNTER_KEYS:
        a, b = prev.values.get(k), cur.values.get(k)
        if _is_finite(a) and _is_finite(b) and b < a:
            return True
    for k in _LAYER_COUNTER_KEYS:
        pa, pb = prev.layers.get(k), cur.layers.get(k)
        if not pa or not pb:
            continue
        for il, b in pb.items():
            a = pa.get(il)
            if a is not None and math.isfinite(a) and math.isfinite(b) and b < a:
                return True
    return False


def _diff(prev: PromSnapshot, cur: PromSnapshot, key: str) -> float | None:
    a, b = prev.values.get(key), cur.values.get(key)
    if not (_is_finite(a) and _is_finite(b)):
        return None
    return b - a


def _ratio_pct(h: float | None, m: float | None) -> float | None:
    if h is None or m is None or h + m <= 0:
        return None
    return 100.0 * h / (h + m)


def hit_pct_total(snap: PromSnapshot) -> float | None:
    """Hit % since the server started: the ``hit_ratio`` gauge, else hits/(hits+misses)."""
    r = snap.values.get("hit_ratio")
    if _is_finite(r):
        return 100.0 * r
    h, m = snap.values.get("hits"), snap.values.get("misses")
    if _is_finite(h) and _is_finite(m):
        return _ratio_pct(h, m)
    return None


def compute_delta(prev: PromSnapshot, cur: PromSnapshot) -> MetricsDelta:
    """Rates between two snapshots; see :class:`MetricsDelta`. ``cur.t`` must be later than
    ``prev.t`` (otherwise every rate is ``None``)."""
    dt = cur.t - prev.t
    out = MetricsDelta(t0=prev.t, t1=cur.t, dt_s=dt, hit_pct_total=hit_pct_total(cur))
    if is_reset(prev, cur):
        out.reset = True
        out.layer_hit_pct = [None] * cur.layer_count()
        out.token_ms = {k: None for k in TIME_KEYS}
        return out
    d: dict[str, float] = {}
    for k in _COUNTER_KEYS:
        v = _diff(prev, cur, k)
        if v is not None:
            d[k] = v
    out.d = d
    rate_ok = dt > 0

    def rate(k: str, scale: float = 1.0) -> float | None:
        v = d.get(k)
        return v / dt / scale if v is not None and rate_ok else None

    out.tok_s = rate("tokens_predicted")
    out.prompt_tok_s = rate("prompt_tokens")
    out.read_mib_s = rate("upload_bytes", MIB)
    out.cpu_mib_s = rate("cpu_bytes", MIB)
    out.swaps = d.get("swaps")
    out.hit_pct = _ratio_pct(d.get("hits"), d.get("misses"))
    # per-layer hit % in the interval
    n_layer = cur.layer_count()
    lh0, lh1 = prev.layers.get("layer_hits") or {}, cur.layers.get("layer_hits") or {}
    lm0, lm1 = prev.layers.get("layer_misses") or {}, cur.layers.get("layer_misses") or {}
    per_layer: list[float | None] = [None] * n_layer
    for il in range(n_layer):
        a, b, c, e = lh0.get(il), lh1.get(il), lm0.get(il), lm1.get(il)
        if not (_is_finite(a) and _is_finite(b) and _is_finite(c) and _is_finite(e)):
            continue
        per_layer[il] = _ratio_pct(b - a, e - c)
    out.layer_hit_pct = per_layer
    # per-token time breakdown in ms
    n_tok = d.get("timed_tokens")
    if n_tok is None:
        n_tok = d.get("tokens_predicted")
    tm: dict[str, float | None] = {}
    for k in TIME_KEYS:
        v = d.get(k + "_s")
        tm[k] = 1000.0 * v / n_tok if v is not None and n_tok else None
    out.token_ms = tm
    return out
