"""A real HTTP server on loopback that answers the Prometheus HTTP API with scripted values, for
the answers no real Prometheus gives (a value of 1e20 where a count of restarts belongs, a
timestamp of 1e300): the fleet must keep such a value or show it as absent, never fail.

Every instant query (but ``up``, which says 1) answers one sample per instance in
:attr:`ScriptedPrometheus.instances` (named ``llamacpp:tokens_predicted_total``, its ``layer``
label ``layer``) with ``value`` (a string, as the API spells sample values: ``"1e20"``,
``"+Inf"``, ``"NaN"``) at the asked time (or ``t``); every range query the same value at each
step of the asked grid. Targets and the configuration say a 1 s scrape interval; ``alerts`` (a
list of ``/api/v1/alerts`` entries) is what the rules API answers (``None``: an empty answer of
no known shape). The queries are recorded in ``seen``."""

from __future__ import annotations

import http.server
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson


class ScriptedPrometheus:
    def __init__(self, value: str = "1", instances: tuple[str, ...] = ("127.0.0.1:1",), job: str = "bmoe",
                 t: float | None = None, layer: str = "0") -> None:
        self.value = value
        self.layer = layer
        self.instances = instances
        self.job = job
        self.t = t
        self.alerts: list[dict[str, Any]] | None = None
        self.seen: list[str] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self._answer({})

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(n).decode()).items()}
                self._answer(form)

            def _answer(self, form: dict[str, str]) -> None:
                path = urlsplit(self.path).path
                data = outer.data(path, form)
                body = orjson.dumps({"status": "success", "data": data})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _metric(self, instance: str) -> dict[str, str]:
        return {"__name__": "llamacpp:tokens_predicted_total", "job": self.job, "instance": instance,
                "layer": self.layer}

    def _value(self, form: dict[str, str]) -> str:
        # ``up`` says 1 (the instance is up), so every other value reaches the cells
        return "1" if form.get("query", "").startswith("max by (job, instance) (up") else self.value

    def data(self, path: str, form: dict[str, str]) -> Any:
        if path.endswith("/query"):
            self.seen.append(form.get("query", ""))
            at = self.t if self.t is not None else float(form.get("time") or time.time())
            return {"resultType": "vector", "result": [
                {"metric": self._metric(i), "value": [at, self._value(form)]} for i in self.instances]}
        if path.endswith("/query_range"):
            self.seen.append(form.get("query", ""))
            start, end = float(form["start"]), float(form["end"])
            step = _seconds(form["step"])
            n = int(round((end - start) / step)) + 1
            v = self._value(form)
            pts = [[self.t if self.t is not None else start + k * step, v] for k in range(n)]
            return {"resultType": "matrix", "result": [{"metric": self._metric(i), "values": pts}
                                                       for i in self.instances]}
        if path.endswith("/targets"):
            return {"activeTargets": [{"labels": {"job": self.job, "instance": i}, "health": "up",
                                       "scrapeInterval": "1s", "scrapeTimeout": "1s"} for i in self.instances]}
        if path.endswith("/alerts") and self.alerts is not None:
            return {"alerts": self.alerts}
        if path.endswith("/status/config"):
            return {"yaml": "global:\n  scrape_interval: 1s\n"}
        return {}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _seconds(duration: str) -> float:
    """A PromQL duration (``1m30s``, ``2s500ms``) or plain seconds, in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    return sum(float(n) * _UNITS[u] for n, u in parts) if parts else float(duration)
