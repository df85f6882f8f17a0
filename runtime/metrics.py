"""``/metrics`` of ``bmoe-run serve``: a prometheus-client ``CollectorRegistry`` with every
``llamacpp:moe_cache_*`` series of moe-cache-reference.md "Server metrics" under its documented
type, llama-server's request/token series, and the per-token time sums of telemetry-contract.md
as ``bmoe:*`` counters. The series catalogue (exact names, types, help) is
:data:`bmoe_top.parsers.prom.SERIES`, shared with the parser; docs/metrics.md says what each
means for this CPU runtime.

The values live in :class:`ServerCounters`, updated by the server's decode thread (after each
token, after each prefill) under a lock; the collector copies them under that lock at scrape
time, so a scrape never touches the engine while it decodes and costs the decode nothing but
the lock. prometheus-client appends ``_total`` to counter names: families are created with the
base name so the exposed name is exactly the reference's, and no ``_created`` series is emitted.

The cache's residency gauges (``resident``, ``resident_bytes`` in ``SERIES``: experts and bytes now) are a
bmoe-run extension of the reference's set, named in its ``llamacpp:moe_cache_*`` style and, like
it, exported only with a cache (docs/metrics.md).

The HTTP front end's own series (:data:`HTTP_SERIES`: open connections, requests refused by each
limit, requests cancelled because their client went away) are bmoe-run's; llama-server has no
equivalent, so they live here rather than in the shared catalogue.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bmoe_top.parsers.prom import SERIES

from .cache_policy import CacheCounters

__all__ = ["ServerCounters", "MetricsRegistry", "CONTENT_TYPE", "HTTP_SERIES", "REJECT_REASONS",
           "TIER_SERIES", "TIERS"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: why the HTTP front end refused a request (the ``reason`` label of ``bmoe:http_rejected_total``)
REJECT_REASONS = ("auth", "body", "header", "timeout", "connections", "queue")

#: (name, type, help) of the HTTP front end's series (docs/metrics.md "Limits")
HTTP_SERIES = (
    ("bmoe:http_connections", "gauge", "Open HTTP connections (idle ones included)."),
    ("bmoe:http_rejected_total", "counter", "Requests refused by a limit, by reason: auth (401), body (413), "
     "header (431), timeout (408 or closed), connections (503), queue (503)."),
    ("bmoe:requests_cancelled_total", "counter", "Generations cancelled because their client disconnected."),
)

#: (name, help) of the tier counter (docs/metrics.md, docs/memory.md "The three tiers in bmoe-run"):
#: every routed expert of layer N by the tier that served it
TIER_SERIES = ("bmoe:expert_tier_total", "Routed experts of a MoE layer by the tier that served them: cache (a hit), "
               "page_cache (a miss whose every byte the kernel's page cache held), disk (the other misses).")
#: the ``tier`` label's values, nearest first
TIERS = ("cache", "page_cache", "disk")

@dataclass
class ServerCounters:
    """Everything /metrics reports. Times in seconds, bytes in bytes; ``cache``: the MoE cache
    counters (:class:`CacheCounters`); ``moe_layers``: the layers that carry per-layer series."""

    cache: CacheCounters = field(default_factory=CacheCounters)
    moe_layers: tuple = ()
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    tokens_predicted: int = 0
    tokens_predicted_seconds: float = 0.0
    n_decode: int = 0
    requests_processing: int = 0
    requests_deferred: int = 0
    timed_tokens: int = 0
    wall_s: float = 0.0
    io_s: float = 0.0
    stall_s: float = 0.0
    mgmt_s: float = 0.0
    compute_s: float = 0.0
    http_connections: int = 0
    requests_cancelled: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))

    def copy(self) -> ServerCounters:
        return replace(self, rejected=dict(self.rejected))


class _Collector(Collector):
    def __init__(self, reg: MetricsRegistry):
        self.reg = reg

    def collect(self):
        s = self.reg.snapshot()
        c = s.cache
        scalar = {
            "hits": c.hits, "hits_profile": c.hits_profile, "misses": c.misses,
            "upload_bytes": c.upload_bytes, "cpu_bytes": c.cpu_bytes, "copies": c.copies,
            "swaps": c.swaps,
            # no lookup yet: the ratio is undefined (NaN), not 0
            "hit_ratio": (c.hits / (c.hits + c.misses)) if (c.hits + c.misses) else float("nan"),
            "slots": c.slots, "prefilled": c.prefilled, "cache_bytes": c.cache_bytes,
            "resident": c.resident, "resident_bytes": c.resident_bytes,
            "hybrid": 1 if c.hybrid else 0,
            "prompt_tokens": s.prompt_tokens, "prompt_seconds": s.prompt_seconds,
            "tokens_predicted": s.tokens_predicted, "tokens_predicted_seconds": s.tokens_predicted_seconds,
            "n_decode": s.n_decode,
            "prompt_tokens_seconds": (s.prompt_tokens / s.prompt_seconds) if s.prompt_seconds > 0 else 0.0,
            "predicted_tokens_seconds": ((s.tokens_predicted / s.tokens_predicted_seconds)
                                         if s.tokens_predicted_seconds > 0 else 0.0),
            "requests_processing": s.requests_processing, "requests_deferred": s.requests_deferred,
            "timed_tokens": s.timed_tokens, "wall_s": s.wall_s, "io_s": s.io_s, "stall_s": s.stall_s,
            "mgmt_s": s.mgmt_s, "compute_s": s.compute_s,
            "read_bytes": c.upload_bytes + c.extra_read_bytes,
        }
        per_layer = {"layer_hits": c.layer_hits, "layer_hits_profile": c.layer_hits_profile,
                     "layer_misses": c.layer_misses}
        for spec in SERIES:
            if spec.key == "process_start":
                continue  # from ProcessCollector
            if not self.reg.cache and spec.name.startswith("llamacpp:moe_cache_"):
                continue  # like llama-server: the MoE cache series exist only with a cache
            base = spec.name[:-6] if spec.type == "counter" else spec.name
            fam_cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            if spec.per_layer:
                fam = fam_cls(base, spec.help, labels=["layer"])
                vals = per_layer[spec.key]
                for il in s.moe_layers:
                    fam.add_metric([str(il)], float(vals[il]) if il < len(vals) else 0.0)
                yield fam
            else:
                yield fam_cls(base, spec.help, value=float(scalar[spec.key]))
        if self.reg.cache and c.layer_pagecache is not None:
            yield self._tiers(c, s.moe_layers)
        (n_conn, h_conn), (n_rej, h_rej), (n_can, h_can) = ((n, h) for n, _t, h in HTTP_SERIES)
        yield GaugeMetricFamily(n_conn, h_conn, value=float(s.http_connections))
        rej = CounterMetricFamily(n_rej[:-6], h_rej, labels=["reason"])
        for reason in REJECT_REASONS:
            rej.add_metric([reason], float(s.rejected.get(reason, 0)))
        yield rej
        yield CounterMetricFamily(n_can[:-6], h_can, value=float(s.requests_cancelled))


    @staticmethod
    def _tiers(c: CacheCounters, layers: tuple) -> CounterMetricFamily:
        fam = CounterMetricFamily(TIER_SERIES[0][:-6], TIER_SERIES[1], labels=["layer", "tier"])
        assert c.layer_pagecache is not None
        for il in layers:
            hits = c.layer_hits[il] if il < len(c.layer_hits) else 0
            miss = c.layer_misses[il] if il < len(c.layer_misses) else 0
            pc = c.layer_pagecache[il] if il < len(c.layer_pagecache) else 0
            for tier, v in zip(TIERS, (hits, pc, miss - pc)):
                fam.add_metric([str(il), tier], float(v))
        return fam


class MetricsRegistry:
    """The server's registry (``cache=False``: no ``llamacpp:moe_cache_*`` series at all, as
    llama-server without a MoE cache): ``update(**fields)`` / ``add(**fields)`` change the counters under the lock
    (decode thread);
    ``render()`` -> the exposition bytes (HTTP thread). ``registry`` is the prometheus-client
    ``CollectorRegistry`` (our collector + the process collector, which gives
    ``process_start_time_seconds`` so a poller sees restarts)."""

    def __init__(self, moe_layers=(), cache: bool = True):
        self.cache = bool(cache)
        self._lock = threading.Lock()
        self._c = ServerCounters(moe_layers=tuple(moe_layers))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        try:
            ProcessCollector(registry=self.registry)
        except Exception:  # noqa: BLE001 - no /proc: no process series
            pass
        self.n_scrapes = 0

    def configure(self, moe_layers=(), cache: bool = True) -> None:
        """Set the model's MoE layers and whether the cache series exist (once the model is loaded;
        the counters keep their values)."""
        with self._lock:
            self.cache = bool(cache)
            self._c.moe_layers = tuple(moe_layers)

    def update(self, **kw) -> None:
        """Set fields (absolute values) under the lock."""
        with self._lock:
            for k, v in kw.items():
                setattr(self._c, k, v)

    def add(self, **kw) -> None:
        """Add to numeric fields under the lock."""
        with self._lock:
            for k, v in kw.items():
                setattr(self._c, k, getattr(self._c, k) + v)

    def reject(self, reason: str) -> None:
        """Count one request refused for ``reason`` (one of :data:`REJECT_REASONS`)."""
        with self._lock:
            self._c.rejected[reason] = self._c.rejected.get(reason, 0) + 1

    def snapshot(self) -> ServerCounters:
        with self._lock:
            return self._c.copy()

    def render(self) -> bytes:
        self.n_scrapes += 1
        return generate_latest(self.registry)


