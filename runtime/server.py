"""``bmoe-run serve``: the runtime behind HTTP (issue #5; moe-cache-reference.md "Server metrics",
"Audit log"; llama-server's request/response shapes).

Endpoints (stdlib ``ThreadingHTTPServer``, one thread per connection):

* ``GET /health`` -> ``{"status": "ok"}`` (503 ``Loading model`` while the model loads). Never
  needs the API key.
* ``GET /metrics`` -> Prometheus text exposition (:mod:`bmoe_top.runtime.metrics`).
* ``POST /completion`` (also ``/completions``) -> llama-server's shape: request ``prompt`` (string),
  ``n_predict`` (-1 = until end of generation or n_ctx; ``max_tokens`` accepted as an alias),
  ``stream``; response ``content``, ``tokens_predicted``, ``tokens_evaluated``, ``stop``,
  ``stop_type``, ``tokens_cached``, ``timings`` {prompt_n, prompt_ms, prompt_per_token_ms,
  prompt_per_second, predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second}.
  With ``stream: true`` the answer is server-sent events: one ``data: {...}`` per token
  (``content`` = the token's text, ``stop: false``) and a last one with ``stop: true`` and the
  timings. Sampling is greedy; other fields are ignored.

Requests queue on the one model (one worker thread owns the Engine; ``requests_deferred`` counts
the queue). ``/metrics`` and ``/health`` are answered by other threads while a decode runs, from
counters the worker updates after each token, so a scrape never touches the engine.

``--api-key KEY``: every endpoint but ``/health`` needs ``Authorization: Bearer KEY`` (or
``X-Api-Key: KEY``), else 401. A non-loopback ``--host`` without ``--api-key`` is refused unless
``--insecure``. ``--moe-cache-audit FILE``, ``--moe-cache-profile FILE``, ``--moe-cache-adaptive``:
see docs/metrics.md and moe-cache-reference.md.
"""

from __future__ import annotations

import argparse
import hmac
import http.server
import ipaddress
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from .audit import AuditWriter, profile_info
from .metrics import CONTENT_TYPE, MetricsRegistry
from .sampling import add_sampling_args, sampling_from_args

__all__ = ["serve_main", "Server", "is_loopback_bind"]


def is_loopback_bind(host: str) -> bool:
    """True when ``host`` (a literal or a name) only resolves to loopback addresses."""
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    addrs = {i[4][0] for i in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


@dataclass
class Job:
    prompt: str
    n_predict: int
    stream: bool
    task: int
    cancel: threading.Event = field(default_factory=threading.Event)
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)


def _err(code: int, message: str, typ: str) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message, "type": typ}})


class Server:
    """One model behind HTTP. Build, then :meth:`load` (Engine + cache features + audit ``load``),
    :meth:`start_worker` (audit ``ready``), and :meth:`shutdown` (audit ``exit``).

    ``engine_kw``: keyword arguments for :class:`bmoe_top.runtime.engine.Engine`."""

    def __init__(self, host: str, port: int, *, api_key: str | None = None, audit_path: str | None = None,
                 profile_path: str | None = None, adaptive: bool = False, engine_kw: dict | None = None,
                 log=None):
        self.host, self.port = host, port
        self.api_key = api_key or None
        self.audit = AuditWriter(audit_path) if audit_path else None
        self.audit_error: str | None = None
        self.profile_path = profile_path
        self.adaptive = adaptive
        self.engine_kw = dict(engine_kw or {})
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.engine = None
        self.ext = None
        self.metrics = MetricsRegistry()
        self.loading = True
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self._task = 0
        self._task_lock = threading.Lock()
        self._current: Job | None = None
        self.worker: threading.Thread | None = None
        self.perf = {"n_prompt": 0, "n_gen": 0, "t_prompt_ms": 0.0, "t_gen_ms": 0.0}
        self.httpd = _HTTPServer((host, port), _Handler)
        self.httpd.app = self
        self.port = self.httpd.server_address[1]
        self._answering = 0  # POST handlers that still owe a response (shutdown lets them finish)
        self._answering_cv = threading.Condition()
        self.http_thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                            name="bmoe-http", daemon=True)
        self._stopped = False

    # -- life cycle ---------------------------------------------------------------------------
    def start_http(self) -> None:
        self.http_thread.start()

    def _audit(self, fn, *a, **kw) -> None:
        if self.audit is None:
            return
        try:
            fn(*a, **kw)
        except OSError as exc:
            if self.audit_error is None:
                self.audit_error = str(exc)
                self.log(f"bmoe-run serve: cannot write the audit log {self.audit.path}: {exc.strerror or exc}")

    def load(self) -> None:
        """Load the engine, fill the cache from the profile, write the ``load`` record.
        Raises EngineError/ModelError (one line) on failure."""
        from .cache_policy import MoeCacheExt, ProfileError, load_profile
        from .engine import Engine

        t0 = time.perf_counter()
        eng = Engine(**self.engine_kw)
        self.engine = eng
        profile, prof_err = None, None
        if self.profile_path:
            try:
                profile = load_profile(self.profile_path, eng.n_layer, eng.n_expert)
            except ProfileError as exc:
                prof_err = exc.reason
                self.log(f"bmoe-run serve: warning: {exc}; the cache starts empty")
            if profile is not None and (eng.cache is None or eng.cache.no_cache):
                self.log("bmoe-run serve: warning: --moe-cache-profile needs an expert cache (--cache-mb > 0): ignored")
                prof_err, profile = "no expert cache", None
        if self.adaptive and (eng.cache is None or eng.cache.no_cache):
            self.log("bmoe-run serve: warning: --moe-cache-adaptive needs an expert cache (--cache-mb > 0): ignored")
        self.ext = MoeCacheExt(eng, profile=profile, adaptive=self.adaptive)
        load_ms = (time.perf_counter() - t0) * 1000.0  # the Engine's load and the profile fill
        if profile is not None:
            self.log(f"prefill: MoE cache filled with {self.ext.prefilled} experts "
                     f"({self.ext.prefill_bytes / 1048576:.1f} MiB) from {os.path.basename(self.profile_path)}")
        elif self.adaptive and self.ext.adaptive:
            self.log("impl: adaptive MoE cache without a profile starts empty and fills itself while generating")
        has_cache = eng.cache is not None and not eng.cache.no_cache
        self.metrics = MetricsRegistry(moe_layers=self.ext.moe_layers, cache=has_cache)
        self.metrics.update(cache=self.ext.counters())
        lay = eng.layout
        try:
            mbytes = os.path.getsize(eng.model_path)
        except OSError:
            mbytes = None
        self._audit(
            self.audit.load if self.audit else None, self.ext.counters(),
            model={"path": str(eng.model_path), "bytes": mbytes,
                   "name": getattr(lay, "name", None) or eng.model_path.stem,
                   "n_layer": eng.n_layer},
            params={"build": _build(), "moe_cache_mib": eng.budget_mib if eng.stream else 0,
                    "moe_cache_hybrid": False, "moe_cache_adaptive": bool(self.ext.adaptive), "n_gpu_layers": 0,
                    "n_threads": eng.n_threads, "n_threads_batch": eng.n_threads, "n_ctx": eng.n_ctx,
                    "n_batch": eng.n_batch, "n_ubatch": eng.n_batch, "tensor_overrides": []},
            cache={"slots": self.ext.slots, "prefilled": self.ext.prefilled, "bytes": self.ext.cache_bytes},
            load_ms=load_ms, profile=profile_info(self.profile_path, prof_err), layers=self.ext.layers(),
        )

    def start_worker(self) -> None:
        self.worker = threading.Thread(target=self._work, name="bmoe-serve-worker", daemon=True)
        self.worker.start()
        self.loading = False
        self._audit(self.audit.ready if self.audit else None, self.ext.counters())

    def shutdown(self) -> None:
        """Stop HTTP, cancel the running request, drain the worker, write ``exit``, free the engine."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.httpd.shutdown()
        except Exception:  # noqa: BLE001
            pass
        self.httpd.server_close()
        cur = self._current
        if cur is not None:
            cur.cancel.set()
        # refuse what is still queued
        while True:
            try:
                j = self.jobs.get_nowait()
            except queue.Empty:
                break
            if j is not None:
                j.events.put(("error", (503, "server shutting down")))
        if self.worker is not None:
            self.jobs.put(None)
            self.worker.join(30)
        with self._answering_cv:  # let the cancelled request's client get its (partial) answer
            self._answering_cv.wait_for(lambda: self._answering == 0, timeout=5.0)
        if self.engine is not None and self.ext is not None:
            p = self.perf
            perf = dict(p, prompt_tps=(1000.0 * p["n_prompt"] / p["t_prompt_ms"]) if p["t_prompt_ms"] > 0 else 0.0,
                        gen_tps=(1000.0 * p["n_gen"] / p["t_gen_ms"]) if p["t_gen_ms"] > 0 else 0.0)
            self._audit(self.audit.exit if self.audit else None, self.ext.counters(), layers=self.ext.layers(),
                        perf=perf)
            if self.ext.adaptive:
                self.log(f"llama_moe_cache: adaptive: {self.ext.swaps} experts swapped in")
        if self.engine is not None:
            self.engine.close()

    # -- requests --------------------------------------------------------------------------------
    def submit(self, prompt: str, n_predict: int, stream: bool) -> Job:
        with self._task_lock:
            self._task += 1
            task = self._task
        job = Job(prompt=prompt, n_predict=n_predict, stream=stream, task=task)
        self.jobs.put(job)
        self.metrics.update(requests_deferred=self.jobs.qsize())
        return job

    def _work(self) -> None:
        from .engine import GenerationError, RequestError

        eng, ext, m = self.engine, self.ext, self.metrics
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self._current = job
            m.update(requests_processing=1, requests_deferred=self.jobs.qsize())
            n_predict = job.n_predict
            if n_predict < 0:
                n_predict = max(0, eng.n_ctx - len(eng.tokenize(job.prompt, True)))
            before = ext.counters()

            def on_prefill(prefill_s: float, n_prompt: int) -> None:
                m.add(prompt_tokens=n_prompt, prompt_seconds=prefill_s,
                      n_decode=max(1, math.ceil(n_prompt / max(1, eng.n_batch))))
                m.update(cache=ext.counters())

            def on_token(st, job: Job = job) -> None:
                ext.after_token()
                m.add(tokens_predicted=1, tokens_predicted_seconds=st.wall_ms / 1000.0, n_decode=1, timed_tokens=1,
                      wall_s=st.wall_ms / 1000.0, io_s=st.io_ms / 1000.0, stall_s=st.stall_ms / 1000.0,
                      mgmt_s=st.mgmt_ms / 1000.0, compute_s=st.compute_ms / 1000.0)
                m.update(cache=ext.counters())
                if job.stream:
                    job.events.put(("token", (st.piece, st.token, st.step)))

            res, err = None, None
            try:
                res = eng.generate(job.prompt, n_predict, clear_kv=True, on_token=on_token, cancel=job.cancel,
                                   on_prefill=on_prefill)
            except RequestError as exc:
                err = (400, str(exc))
            except GenerationError as exc:
                err = (500, str(exc))
            except Exception as exc:  # noqa: BLE001 - the server must survive one bad request
                err = (500, f"{type(exc).__name__}: {exc}")
            after = ext.counters()
            m.update(cache=after, requests_processing=0, requests_deferred=self.jobs.qsize())
            if res is not None or after.audit_counters() != before.audit_counters():
                n_prompt = res.n_prompt if res else 0
                n_gen = res.n_tokens if res else 0
                t_p = res.prefill_s * 1000.0 if res else 0.0
                t_g = res.decode_s * 1000.0 if res else 0.0
                self.perf["n_prompt"] += n_prompt
                self.perf["n_gen"] += n_gen
                self.perf["t_prompt_ms"] += t_p
                self.perf["t_gen_ms"] += t_g
                self._audit(self.audit.request if self.audit else None, before, after, slot=0, task=job.task,
                            n_prompt=n_prompt, n_gen=n_gen, t_prompt_ms=t_p, t_gen_ms=t_g)
            self._current = None
            job.events.put(("error", err) if err else ("done", res))


def _build() -> str:
    try:
        import llama_cpp

        return f"llama-cpp-python {llama_cpp.__version__}"
    except Exception:  # noqa: BLE001
        return "unknown"


def _timings(res) -> dict[str, float]:
    pm = res.prefill_s * 1000.0
    gm = res.decode_s * 1000.0
    return {
        "prompt_n": res.n_prompt, "prompt_ms": pm,
        "prompt_per_token_ms": pm / res.n_prompt if res.n_prompt else 0.0,
        "prompt_per_second": 1000.0 * res.n_prompt / pm if pm > 0 else 0.0,
        "predicted_n": res.n_tokens, "predicted_ms": gm,
        "predicted_per_token_ms": gm / res.n_tokens if res.n_tokens else 0.0,
        "predicted_per_second": 1000.0 * res.n_tokens / gm if gm > 0 else 0.0,
    }


def _final(res, app: Server, content: str) -> dict[str, Any]:
    stop_type = {"eog": "eos", "length": "limit", "cancelled": "none"}.get(res.stop_reason, "limit")
    return {
        "index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True,
        "model": app.engine.model_path.name, "tokens_predicted": res.n_tokens, "tokens_evaluated": res.n_prompt,
        "stop_type": stop_type, "stopping_word": "", "tokens_cached": res.n_past, "truncated": False,
        "timings": _timings(res),
    }


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: Server

    def handle_error(self, request, client_address):  # a client that went away is not our error
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "bmoe-run"
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, fmt, *args):  # quiet: the server logs what matters itself
        pass

    # -- helpers -------------------------------------------------------------------------------
    def _send(self, code: int, body: bytes, ctype: str = "application/json; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if code == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorized(self) -> bool:
        key = self.server.app.api_key
        if not key:
            return True
        got = None
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            got = auth[7:].strip()
        elif self.headers.get("X-Api-Key"):
            got = self.headers.get("X-Api-Key", "").strip()
        if got is not None and hmac.compare_digest(got.encode(), key.encode()):
            return True
        self._send(401, _err(401, "Invalid API Key", "authentication_error"))
        return False

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    # -- routes --------------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802
        app = self.server.app
        p = self._path()
        if p == "/health":
            if app.loading:
                self._send(503, _err(503, "Loading model", "unavailable_error"))
            else:
                self._send(200, b'{"status":"ok"}')
            return
        if not self._authorized():
            return
        if app.loading:
            self._send(503, _err(503, "Loading model", "unavailable_error"))
            return
        if p == "/metrics":
            self._send(200, app.metrics.render(), CONTENT_TYPE)
            return
        self._send(404, _err(404, f"File Not Found: {p}", "not_found_error"))

    do_HEAD = do_GET

    def do_POST(self):  # noqa: N802
        app = self.server.app
        p = self._path()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        if not self._authorized():
            return
        if p not in ("/completion", "/completions"):
            self._send(404, _err(404, f"File Not Found: {p}", "not_found_error"))
            return
        if app.loading:
            self._send(503, _err(503, "Loading model", "unavailable_error"))
            return
        try:
            req = orjson.loads(body) if body else None
        except orjson.JSONDecodeError as exc:
            self._send(400, _err(400, f"request body is not JSON: {exc}", "invalid_request_error"))
            return
        if not isinstance(req, dict):
            self._send(400, _err(400, "request body must be a JSON object", "invalid_request_error"))
            return
        prompt = req.get("prompt")
        if not isinstance(prompt, str):
            self._send(400, _err(400, '"prompt" must be a string', "invalid_request_error"))
            return
        n_predict = req.get("n_predict", req.get("max_tokens", -1))
        if isinstance(n_predict, bool) or not isinstance(n_predict, int):
            self._send(400, _err(400, '"n_predict" must be an integer', "invalid_request_error"))
            return
        stream = bool(req.get("stream", False))
        with app._answering_cv:
            app._answering += 1
        try:
            job = app.submit(prompt, n_predict, stream)
            if stream:
                self._stream(job)
            else:
                kind, val = job.events.get()
                if kind == "error":
                    code, msg = val
                    self._send(code, _err(code, msg, "invalid_request_error" if code == 400 else "server_error"))
                else:
                    self._send(200, orjson.dumps(_final(val, app, val.text)))
        finally:
            with app._answering_cv:
                app._answering -= 1
                app._answering_cv.notify_all()

    def _stream(self, job: Job) -> None:
        app = self.server.app
        first = True

        def head(code: int = 200) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        try:
            while True:
                kind, val = job.events.get()
                if kind == "error":
                    code, msg = val
                    if first:
                        self._send(code, _err(code, msg, "invalid_request_error" if code == 400 else "server_error"))
                    else:
                        self.wfile.write(b"error: " + _err(code, msg, "server_error") + b"\n\n")
                    return
                if first:
                    head()
                    first = False
                if kind == "token":
                    piece, tok, step = val
                    chunk = {"index": 0, "content": piece, "tokens": [tok], "stop": False, "id_slot": 0,
                             "tokens_predicted": step}
                    self.wfile.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
                    self.wfile.flush()
                else:  # done
                    self.wfile.write(b"data: " + orjson.dumps(_final(val, app, "")) + b"\n\n")
                    self.wfile.flush()
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            job.cancel.set()  # the client went away: stop decoding for it


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (got {v})")
    return v


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bmoe-run serve", description="Serve a MoE model over HTTP "
                                 "(/health, /metrics, POST /completion) with expert streaming.")
    ap.add_argument("model_pos", nargs="?", metavar="MODEL", help="GGUF model (same as -m)")
    ap.add_argument("-m", "--model", help="GGUF model (default: the demo model)")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0 = any free port)")
    ap.add_argument("--api-key", default=os.environ.get("LLAMA_API_KEY"),
                    help="require Authorization: Bearer KEY on every endpoint but /health")
    ap.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without --api-key")
    ap.add_argument("-c", "--ctx-size", "--n-ctx", dest="n_ctx", type=int, default=2048)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("-b", "--batch-size", dest="n_batch", type=int, default=None)
    ap.add_argument("--cache-mb", type=float, default=None, help="expert cache budget in MiB (0 = no cache)")
    ap.add_argument("--no-moe-stream", action="store_true", help="keep every expert resident (no cache)")
    ap.add_argument("--io-threads", type=int, default=1)
    ap.add_argument("--no-odirect", action="store_true")
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--force-cache", action="store_true")
    ap.add_argument("--moe-cache-audit", metavar="FILE", default=os.environ.get("LLAMA_ARG_MOE_CACHE_AUDIT"),
                    help="append the audit log (JSONL) to FILE")
    ap.add_argument("--moe-cache-profile", metavar="FILE", default=os.environ.get("LLAMA_ARG_MOE_CACHE_PROFILE"),
                    help="fill the cache at load from an STRP profile, hottest first")
    ap.add_argument("--moe-cache-adaptive", action="store_true",
                    default=os.environ.get("LLAMA_ARG_MOE_CACHE_ADAPTIVE", "") not in ("", "0"),
                    help="heat-based swaps of experts into the cache while generating")
    ap.add_argument("--metrics", action="store_true", help="accepted for llama-server compatibility (always on)")
    ap.add_argument("-v", "--verbose", action="store_true", help="llama.cpp's log to stderr")
    add_sampling_args(ap)
    return ap


def serve_main(argv: list[str] | None = None) -> int:
    """Entry point of ``bmoe-run serve``. Returns the exit code; bad input is one line on stderr."""
    args = _parser().parse_args(argv)
    model = args.model or args.model_pos
    if not args.api_key and not is_loopback_bind(args.host) and not args.insecure:
        print(f"bmoe-run serve: refusing to bind {args.host} (not loopback) without --api-key; "
              "add --api-key KEY, or --insecure to serve it open", file=sys.stderr)
        return 2
    engine_kw = dict(model_path=model, n_ctx=args.n_ctx, n_threads=args.threads, n_batch=args.n_batch,
                     cache_mb=args.cache_mb, stream=not args.no_moe_stream, io_threads=args.io_threads,
                     o_direct=not args.no_odirect, overlap=args.overlap, prefetch=args.prefetch,
                     force_cache=args.force_cache, quiet=not args.verbose)
    try:
        engine_kw["sampling"] = sampling_from_args(args)
    except ValueError as exc:
        print(f"bmoe-run serve: {exc}", file=sys.stderr)
        return 2
    try:
        srv = Server(args.host, args.port, api_key=args.api_key, audit_path=args.moe_cache_audit,
                     profile_path=args.moe_cache_profile, adaptive=args.moe_cache_adaptive, engine_kw=engine_kw)
    except (OSError, OverflowError, ValueError) as exc:
        print(f"bmoe-run serve: cannot listen on {args.host}:{args.port}: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    srv.start_http()
    try:
        try:
            srv.load()
        except Exception as exc:  # noqa: BLE001 - ModelError / EngineError / OSError: one line
            print(f"bmoe-run serve: {exc}", file=sys.stderr)
            srv.shutdown()
            return 1
        srv.start_worker()
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"bmoe-run serve: listening on http://{host}:{srv.port} "
              f"(model {srv.engine.model_path.name}, {srv.engine.n_layer} layers x {srv.engine.n_expert} experts, "
              f"cache {srv.engine.budget_mib:.1f} MiB{', api key required' if srv.api_key else ''})",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        srv.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve_main())
