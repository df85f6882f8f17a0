"""extended-strata-moe's llama-server, as a real ``/metrics`` exporter on loopback (prometheus-client).

That runtime (its patched llama.cpp is not built here; the stock llama-server is:
``helpers.llama_server``) exports llama-server's request/token series plus the
``llamacpp:moe_cache_*`` series of moe-cache-reference.md "Server metrics" (per-layer ones with
``layer="N"``), and none of bmoe-run's ``bmoe:*`` time sums. :class:`StrataMoeExporter` serves
that series set with values the test sets (``add``/``set``/``generate``), rendered by
prometheus-client in the text format 0.0.4 that llama-server sends (prometheus-client's own
server would negotiate OpenMetrics with Prometheus, which spells ``llamacpp:`` names with
underscores), for a real Prometheus to scrape.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: llama-server's own series (--metrics): counters, then gauges.
LLAMA_SERVER_COUNTERS = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total",
                         "llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
                         "llamacpp:n_decode_total")
LLAMA_SERVER_GAUGES = ("llamacpp:n_busy_slots_per_decode", "llamacpp:prompt_tokens_seconds",
                       "llamacpp:predicted_tokens_seconds", "llamacpp:kv_cache_usage_ratio",
                       "llamacpp:kv_cache_tokens", "llamacpp:requests_processing", "llamacpp:requests_deferred")
#: extended-strata-moe adds these (moe-cache-reference.md "Server metrics").
STRATA_COUNTERS = ("llamacpp:moe_cache_hits_total", "llamacpp:moe_cache_hits_profile_total",
                   "llamacpp:moe_cache_misses_total", "llamacpp:moe_cache_upload_bytes_total",
                   "llamacpp:moe_cache_cpu_bytes_total", "llamacpp:moe_cache_copies_total",
                   "llamacpp:moe_cache_swaps_total")
STRATA_GAUGES = ("llamacpp:moe_cache_hit_ratio", "llamacpp:moe_cache_slots", "llamacpp:moe_cache_prefilled",
                 "llamacpp:moe_cache_bytes", "llamacpp:moe_cache_hybrid")
STRATA_LAYER_COUNTERS = ("llamacpp:moe_cache_layer_hits_total", "llamacpp:moe_cache_layer_hits_profile_total",
                         "llamacpp:moe_cache_layer_misses_total")

class _Collector(Collector):
    def __init__(self, exp: StrataMoeExporter):
        self.exp = exp

    def collect(self) -> Iterator[Metric]:
        with self.exp.lock:
            scalars = dict(self.exp.values)
            layers = {k: list(v) for k, v in self.exp.layer_values.items()}
        for name, v in scalars.items():
            if name.endswith("_total"):
                yield CounterMetricFamily(name[:-6], name, value=v)
            else:
                yield GaugeMetricFamily(name, name, value=v)
        for name, vals in layers.items():
            fam = CounterMetricFamily(name[:-6], name, labels=["layer"])
            for il, v in enumerate(vals):
                fam.add_metric([str(il)], v)
            yield fam


class StrataMoeExporter:
    """extended-strata-moe's ``/metrics`` (``n_layer`` MoE layers) on a free loopback port:
    ``target`` (``host:port``), ``url``. Every series starts at 0; ``add(name, v)`` /
    ``set(name, v)`` / ``add_layer(name, il, v)`` / ``generate(...)`` change them."""

    def __init__(self, n_layer: int = 4):
        self.lock = threading.Lock()
        names = LLAMA_SERVER_COUNTERS + LLAMA_SERVER_GAUGES + STRATA_COUNTERS + STRATA_GAUGES
        self.values: dict[str, float] = dict.fromkeys(names, 0.0)
        self.layer_values: dict[str, list[float]] = {n: [0.0] * n_layer for n in STRATA_LAYER_COUNTERS}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        registry = self.registry

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815 - any request gets the exposition, as a plain exporter does

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()
        self.port = int(self.server.server_address[1])
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.target}"

    def add(self, name: str, v: float) -> None:
        with self.lock:
            self.values[name] += v

    def set(self, name: str, v: float) -> None:
        with self.lock:
            self.values[name] = v

    def add_layer(self, name: str, il: int, v: float) -> None:
        with self.lock:
            self.layer_values[name][il] += v

    def generate(self, tokens: int, hits: int = 0, misses: int = 0, seconds: float = 0.5) -> None:
        """As if ``tokens`` were generated in ``seconds`` with ``hits``/``misses`` lookups
        (spread evenly over the layers)."""
        with self.lock:
            self.values["llamacpp:tokens_predicted_total"] += tokens
            self.values["llamacpp:tokens_predicted_seconds_total"] += seconds
            self.values["llamacpp:n_decode_total"] += tokens
            self.values["llamacpp:moe_cache_hits_total"] += hits
            self.values["llamacpp:moe_cache_misses_total"] += misses
            n = len(self.layer_values["llamacpp:moe_cache_layer_hits_total"])
            for il in range(n):
                self.layer_values["llamacpp:moe_cache_layer_hits_total"][il] += hits / n
                self.layer_values["llamacpp:moe_cache_layer_misses_total"][il] += misses / n

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
