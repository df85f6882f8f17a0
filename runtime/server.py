"""``bmoe-run serve``: the runtime behind HTTP (docs/metrics.md "bmoe-run serve"; moe-cache-reference.md
"Server metrics", "Audit log"; llama-server's request/response shapes and its OpenAI-compatible API).

This module owns the model side: one worker thread owns the :class:`~bmoe_top.runtime.engine.Engine`
and runs the queued requests one at a time (``requests_deferred`` counts the queue), updating the
``/metrics`` counters after each token and writing one audit ``request`` record per finished
request. The HTTP side (uvicorn + Starlette, the endpoints and every limit) is
:mod:`bmoe_top.runtime.server_http`; it hands requests over with :meth:`Server.submit` and gets
the tokens back through the job's event queue, so a scrape or ``/health`` never touches the engine.

``--api-key KEY`` / ``--api-key-file FILE`` (one key per line): every endpoint but ``/health``
needs ``Authorization: Bearer KEY`` (or ``X-Api-Key: KEY``), else 401. A non-loopback ``--host``
without a key is refused unless ``--insecure``. ``--moe-cache-audit FILE``, ``--moe-cache-profile
FILE``, ``--moe-cache-adaptive``: see docs/metrics.md and moe-cache-reference.md.
"""

from __future__ import annotations

import argparse
import collections
import ipaddress
import math
import os
import resource
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .audit import AuditError, AuditWriter, profile_info
from .metrics import MetricsRegistry
from .sampling import Sampling, add_sampling_args, sampling_from_args

__all__ = ["serve_main", "Server", "Job", "QueueFull", "StopText", "is_loopback_bind", "read_api_keys"]


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
    addrs = {str(i[4][0]) for i in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


class QueueFull(Exception):
    """:meth:`Server.submit` refused a request: the queue holds ``max_queue`` requests already,
    or the server is shutting down (``shutting_down``)."""

    def __init__(self, message: str, shutting_down: bool = False):
        super().__init__(message)
        self.shutting_down = shutting_down


class StopText:
    """Stop strings over a growing text (OpenAI's and llama-server's ``stop``). :meth:`feed` takes
    the next piece and returns the text that can be released now: everything up to a stop string
    (then :attr:`hit` is its offset) or up to a tail that could still begin one (held back)."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.text = ""
        self.sent = 0
        self.hit: int | None = None
        self.word = ""
        self._longest = max((len(s) for s in self.stops), default=0)

    def feed(self, piece: str) -> str:
        if self.hit is not None:
            return ""
        start = max(0, len(self.text) - self._longest + 1)
        self.text += piece
        if self.stops:
            found = [(i, s) for s in self.stops if (i := self.text.find(s, start)) >= 0]
            if found:
                self.hit, self.word = min(found)
                out = self.text[self.sent:self.hit]
                self.sent = self.hit
                return out
        hold = 0
        for k in range(min(self._longest - 1, len(self.text)), 0, -1):
            tail = self.text[-k:]
            if any(s.startswith(tail) for s in self.stops):
                hold = k
                break
        end = max(self.sent, len(self.text) - hold)
        out = self.text[self.sent:end]
        self.sent = end
        return out

    def final(self, text: str) -> str:
        """The answer's text: ``text`` (the whole decoded text) cut at the stop string, if one was hit."""
        return text[: self.hit] if self.hit is not None else text


@dataclass
class Job:
    """One queued request. ``post(kind, value)`` is called on the worker thread with
    ``("token", (text, token_id, step))`` per generated token (``stream`` only; ``text`` is what
    may be released after the stop strings), then ``("done", (GenerationResult, StopText))`` or
    ``("error", (http_status, message))``."""

    prompt: str
    n_predict: int
    stream: bool
    task: int
    post: Callable[[str, Any], None]
    sampling: Sampling | None = None
    stop: StopText = field(default_factory=lambda: StopText([]))
    cancel: threading.Event = field(default_factory=threading.Event)
    state: str = "queued"  # queued | running | done
    disconnected: bool = False


class Server:
    """One model behind HTTP. Build (binds the socket; ``OSError`` when it cannot), then
    :meth:`start_http`, :meth:`load` (Engine + cache features + audit ``load``),
    :meth:`start_worker` (audit ``ready``) and :meth:`shutdown` (audit ``exit``).

    ``engine_kw``: keyword arguments for :class:`bmoe_top.runtime.engine.Engine`; ``api_keys``:
    accepted keys (empty = no auth); ``limits``: :class:`bmoe_top.runtime.server_http.Limits`."""

    def __init__(self, host: str, port: int, *, api_keys: list[str] | tuple[str, ...] = (),
                 audit_path: str | None = None, profile_path: str | None = None, adaptive: bool = False,
                 engine_kw: dict | None = None, limits=None, log=None):
        from .server_http import HttpFront, Limits

        self.host = host
        self.api_keys = tuple(k for k in api_keys if k)
        self.audit = AuditWriter(audit_path) if audit_path else None
        self.audit_error: str | None = None
        self.profile_path = profile_path
        self.adaptive = adaptive
        self.engine_kw = dict(engine_kw or {})
        self.limits = limits or Limits()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.engine: Any = None
        self.ext: Any = None
        self.metrics = MetricsRegistry()
        self.loading = True
        self.stopping = False
        self._cv = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._closed = False
        self._task = 0
        self._current: Job | None = None
        self.worker: threading.Thread | None = None
        self.perf = {"n_prompt": 0, "n_gen": 0, "t_prompt_ms": 0.0, "t_gen_ms": 0.0}
        self.front = HttpFront(self, host, port)
        self.port = self.front.port
        self._stopped = False

    # -- life cycle ---------------------------------------------------------------------------
    def start_http(self) -> None:
        self.front.start()

    def _audit(self, fn, *a, **kw) -> None:
        if self.audit is None:
            return
        try:
            fn(*a, **kw)
        except OSError as exc:
            first = self.audit_error is None
            self.audit_error = str(exc)
            self.log(f"bmoe-run serve: error: cannot write the audit log: {exc}"
                     + ("; the server exits with status 1" if first else ""))

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
                     f"({self.ext.prefill_bytes / 1048576:.1f} MiB) from {os.path.basename(str(self.profile_path))}")
        elif self.adaptive and self.ext.adaptive:
            self.log("impl: adaptive MoE cache without a profile starts empty and fills itself while generating")
        has_cache = eng.cache is not None and not eng.cache.no_cache
        self.metrics.configure(moe_layers=self.ext.moe_layers, cache=has_cache)
        self.metrics.update(cache=self.ext.counters())
        lay = eng.layout
        try:
            mbytes: int | None = os.path.getsize(eng.model_path)
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
        """Refuse new requests, cancel the running one (its client still gets the answer so far),
        refuse the queued ones (503), drain the worker, stop HTTP once the answers are out, write
        ``exit``, free the engine."""
        if self._stopped:
            return
        self._stopped = True
        self.stopping = True
        with self._cv:
            cur = self._current
            if cur is not None:
                cur.cancel.set()
            refused = list(self._waiting)
            self._waiting.clear()
            self._closed = True
            self._cv.notify_all()
        for j in refused:
            j.state = "done"
            j.post("error", (503, "server shutting down"))
        if self.worker is not None:
            self.worker.join(30)
        self.front.stop()
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
    def submit(self, prompt: str, n_predict: int, stream: bool, post: Callable[[str, Any], None], *,
               sampling: Sampling | None = None, stop: list[str] | None = None) -> Job:
        """Queue a request (any thread). Raises :class:`QueueFull` when ``limits.max_queue``
        requests wait already or the server is shutting down."""
        with self._cv:
            if self._closed or self.stopping:
                raise QueueFull("server shutting down", shutting_down=True)
            if len(self._waiting) >= self.limits.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests are queued (--max-queue {self.limits.max_queue})")
            self._task += 1
            job = Job(prompt=prompt, n_predict=n_predict, stream=stream, task=self._task, post=post,
                      sampling=sampling, stop=StopText(stop or []))
            self._waiting.append(job)
            self.metrics.update(requests_deferred=len(self._waiting))
            self._cv.notify_all()
        return job

    def abandon(self, job: Job) -> None:
        """The client of ``job`` went away: drop it from the queue, or cancel its generation (the
        worker stops within one decode step and still writes its audit record)."""
        with self._cv:
            if job.state == "done" or job.disconnected:
                return
            job.disconnected = True
            job.cancel.set()
            if job.state == "queued":
                try:
                    self._waiting.remove(job)
                except ValueError:
                    pass
                job.state = "done"
            self.metrics.update(requests_deferred=len(self._waiting))
        self.metrics.add(requests_cancelled=1)

    def _next(self) -> Job | None:
        with self._cv:
            while not self._waiting and not self._closed:
                self._cv.wait()
            if not self._waiting:
                return None
            job = self._waiting.popleft()
            job.state = "running"
            self._current = job
            self.metrics.update(requests_processing=1, requests_deferred=len(self._waiting))
            return job

    def _work(self) -> None:
        from .engine import GenerationError, RequestError

        eng, ext, m = self.engine, self.ext, self.metrics
        while True:
            job = self._next()
            if job is None:
                return
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
                text = job.stop.feed(st.piece)
                if job.stop.hit is not None:
                    job.cancel.set()  # a stop string: the engine stops before the next token
                if job.stream:
                    job.post("token", (text, st.token, st.step))

            res, err = None, None
            try:
                n_predict = job.n_predict
                if n_predict < 0:
                    n_predict = max(0, eng.n_ctx - len(eng.tokenize(job.prompt, True)))
                res = eng.generate(job.prompt, n_predict, clear_kv=True, on_token=on_token, cancel=job.cancel,
                                   on_prefill=on_prefill, sampling=job.sampling)
            except RequestError as exc:
                err = (400, str(exc))
            except GenerationError as exc:
                err = (500, str(exc))
            except Exception as exc:  # noqa: BLE001 - the server must survive one bad request
                err = (500, f"{type(exc).__name__}: {exc}")
            after = ext.counters()
            with self._cv:
                self._current = None
                job.state = "done"
                m.update(cache=after, requests_processing=0, requests_deferred=len(self._waiting))
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
            job.post("error", err) if err else job.post("done", (res, job.stop))


def _build() -> str:
    try:
        import llama_cpp

        return f"llama-cpp-python {llama_cpp.__version__}"
    except Exception:  # noqa: BLE001
        return "unknown"


def read_api_keys(path: str) -> list[str]:
    """The keys in ``path``, one per line (blank lines and ``#`` comments skipped), as
    llama-server's ``--api-key-file``. Raises ``ValueError`` (one line) when the file cannot be read
    or holds no key."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --api-key-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    keys = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not keys:
        raise ValueError(f"--api-key-file {path} holds no key")
    return keys


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (got {v})")
    return v


def _positive(kind: type, minimum: float = 1):
    def conv(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v >= minimum or (kind is float and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g} (got {text})")
        return v

    return conv


def _parser() -> argparse.ArgumentParser:
    from .server_http import Limits

    d = Limits()
    ap = argparse.ArgumentParser(prog="bmoe-run serve", description="Serve a MoE model over HTTP with expert "
                                 "streaming: /health, /metrics, POST /completion (llama-server's API) and the "
                                 "OpenAI-compatible /v1/models, /v1/completions, /v1/chat/completions.")
    ap.add_argument("model_pos", nargs="?", metavar="MODEL", help="GGUF model (same as -m)")
    ap.add_argument("-m", "--model", help="GGUF model (default: the demo model)")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0 = any free port)")
    ap.add_argument("--api-key", default=os.environ.get("LLAMA_API_KEY"),
                    help="require Authorization: Bearer KEY on every endpoint but /health (several: comma-separated)")
    ap.add_argument("--api-key-file", metavar="FILE",
                    help="read the keys from FILE, one per line (the key then does not show in ps)")
    ap.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without an API key")
    lim = ap.add_argument_group("limits (docs/metrics.md, Limits)")
    lim.add_argument("--max-body-bytes", type=_positive(int), default=d.max_body_bytes, metavar="N",
                     help=f"largest request body; larger: 413 (default {d.max_body_bytes})")
    lim.add_argument("--max-connections", type=_positive(int), default=d.max_connections, metavar="N",
                     help=f"open connections served; beyond: 503 + Retry-After, /health still answers "
                          f"(default {d.max_connections})")
    lim.add_argument("--max-queue", type=_positive(int, 0), default=d.max_queue, metavar="N",
                     help="generation requests waiting for the model; beyond: 503 + Retry-After "
                          f"(default {d.max_queue})")
    lim.add_argument("--timeout-header", type=_positive(float, 0.01), default=d.timeout_header, metavar="S",
                     help="seconds from a request's first byte to the end of its headers "
                          f"(default {d.timeout_header:g})")
    lim.add_argument("--timeout-idle", type=_positive(float, 0.01), default=d.timeout_idle, metavar="S",
                     help=f"seconds without a byte while a request body is read: 408 (default {d.timeout_idle:g})")
    lim.add_argument("--timeout-keep-alive", type=_positive(float, 0.01), default=d.timeout_keep_alive, metavar="S",
                     help=f"seconds a connection may wait idle for its next request (default {d.timeout_keep_alive:g})")
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
                    help="append the audit log (JSONL) to FILE (never through a symbolic link)")
    ap.add_argument("--moe-cache-profile", metavar="FILE", default=os.environ.get("LLAMA_ARG_MOE_CACHE_PROFILE"),
                    help="fill the cache at load from an STRP profile, hottest first")
    ap.add_argument("--moe-cache-adaptive", action="store_true",
                    default=os.environ.get("LLAMA_ARG_MOE_CACHE_ADAPTIVE", "") not in ("", "0"),
                    help="heat-based swaps of experts into the cache while generating")
    ap.add_argument("--metrics", action="store_true", help="accepted for llama-server compatibility (always on)")
    ap.add_argument("-v", "--verbose", action="store_true", help="llama.cpp's log to stderr")
    add_sampling_args(ap)
    return ap


def _raise_fd_limit() -> None:
    """Lift the soft open-file limit to the hard one, so idle connections cannot exhaust it
    before ``--max-connections`` is reached (each connection is one descriptor)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    except (ValueError, OSError):
        pass


def serve_main(argv: list[str] | None = None) -> int:
    """Entry point of ``bmoe-run serve``. Returns the exit code (2: bad arguments or bind refused;
    1: cannot listen, cannot load, or an audit write failed); bad input is one line on stderr."""
    from .server_http import Limits

    args = _parser().parse_args(argv)
    model = args.model or args.model_pos
    keys = [k.strip() for k in (args.api_key or "").split(",") if k.strip()]
    if args.api_key_file:
        try:
            keys += read_api_keys(args.api_key_file)
        except ValueError as exc:
            print(f"bmoe-run serve: {exc}", file=sys.stderr)
            return 2
        try:
            if os.stat(args.api_key_file).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                print(f"bmoe-run serve: warning: --api-key-file {args.api_key_file} is readable by other users "
                      "(chmod 600 it)", file=sys.stderr)
        except OSError:
            pass
    if not keys and not is_loopback_bind(args.host) and not args.insecure:
        print(f"bmoe-run serve: refusing to bind {args.host} (not loopback) without an API key; "
              "add --api-key-file FILE (or --api-key KEY), or --insecure to serve it open", file=sys.stderr)
        return 2
    if args.moe_cache_audit:
        try:
            AuditWriter(args.moe_cache_audit).check()
        except AuditError as exc:
            print(f"bmoe-run serve: cannot write the audit log: {exc}", file=sys.stderr)
            return 1
    engine_kw = dict(model_path=model, n_ctx=args.n_ctx, n_threads=args.threads, n_batch=args.n_batch,
                     cache_mb=args.cache_mb, stream=not args.no_moe_stream, io_threads=args.io_threads,
                     o_direct=not args.no_odirect, overlap=args.overlap, prefetch=args.prefetch,
                     force_cache=args.force_cache, quiet=not args.verbose)
    try:
        engine_kw["sampling"] = sampling_from_args(args)
    except ValueError as exc:
        print(f"bmoe-run serve: {exc}", file=sys.stderr)
        return 2
    limits = Limits(max_body_bytes=args.max_body_bytes, max_connections=args.max_connections,
                    max_queue=args.max_queue, timeout_header=args.timeout_header, timeout_idle=args.timeout_idle,
                    timeout_keep_alive=args.timeout_keep_alive)
    _raise_fd_limit()
    try:
        srv = Server(args.host, args.port, api_keys=keys, audit_path=args.moe_cache_audit,
                     profile_path=args.moe_cache_profile, adaptive=args.moe_cache_adaptive, engine_kw=engine_kw,
                     limits=limits)
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
              f"cache {srv.engine.budget_mib:.1f} MiB{', api key required' if srv.api_keys else ''})",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        srv.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    return 1 if srv.audit_error else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve_main())
