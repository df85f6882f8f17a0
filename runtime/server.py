"""``bmoe-run serve``: the runtime behind HTTP (docs/metrics.md "bmoe-run serve"; moe-cache-reference.md
"Server metrics", "Audit log"; llama-server's request/response shapes and its OpenAI-compatible API).

This module owns the model side: one worker thread owns the :class:`~bmoe_top.runtime.engine.Engine`
and runs the queued requests, one at a time with one slot, or up to ``--parallel`` of them
decoded together (:class:`~bmoe_top.runtime.slots.SlotDecoder`; ``requests_processing`` counts
the busy slots, ``requests_deferred`` the queue), updating the ``/metrics`` counters after each
token and writing one audit ``request`` record per finished request (docs/metrics.md "Parallel
slots" says how a shared step's cache work is charged). The HTTP side (uvicorn + Starlette,
the endpoints and every limit) is :mod:`bmoe_top.runtime.server_http`; it hands requests over
with :meth:`Server.submit` and gets the tokens back through the job's event queue, so a scrape or
``/health`` never touches the engine.
The command line, the keys and the bind check are :mod:`bmoe_top.runtime.serve`'s, which builds
a :class:`Server` with its HTTP front. ``csv_path``: the per-token CSV sink of ``bmoe-run``
(docs/telemetry.md), one row per generated token of every request, a ``# summary`` line per
request; with several slots each request's rows are written together when it ends, with its
summary, so the file holds whole turns in the order they ended.
"""

from __future__ import annotations

import collections
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .audit import AuditWriter, profile_info
from .metrics import MetricsRegistry
from .sampling import Sampling

if TYPE_CHECKING:
    from .slots import SlotDecoder

__all__ = ["Server", "Front", "Job", "QueueFull", "StopText"]


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
    slot: int = 0  # the slot (KV sequence) that runs it


@dataclass
class _Live:
    """A running request of the parallel worker: its job, its own audit counters so far (the
    ``req_*`` keys' sources, :meth:`CacheCounters.audit_counters` keys) and its CSV rows."""

    job: Job
    own: dict[str, int]
    rows: list[Any] = field(default_factory=list)


class Front(Protocol):
    """The HTTP side of a :class:`Server` (:class:`bmoe_top.runtime.server_http.HttpFront`): bound
    to its port when built, served from :meth:`start` until :meth:`stop`."""

    port: int

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Server:
    """One model behind HTTP. Build (binds the socket; ``OSError`` when it cannot), then
    :meth:`start_http`, :meth:`load` (Engine + cache features + audit ``load``),
    :meth:`start_worker` (audit ``ready``) and :meth:`shutdown` (audit ``exit``).

    ``front``: builds the HTTP side, called as ``front(server, host, port)`` (the class
    :class:`bmoe_top.runtime.server_http.HttpFront`); ``limits``: the HTTP limits
    (:class:`bmoe_top.runtime.server_http.Limits`; the server reads ``max_queue``);
    ``engine_kw``: keyword arguments for :class:`bmoe_top.runtime.engine.Engine` (its ``n_seq``
    is the number of slots, ``--parallel``); ``api_keys``: accepted keys (empty = no auth)."""

    def __init__(self, host: str, port: int, *, front: Callable[[Server, str, int], Front], limits: Any,
                 api_keys: list[str] | tuple[str, ...] = (), audit_path: str | None = None,
                 profile_path: str | None = None, adaptive: bool = False, engine_kw: dict | None = None,
                 log=None, csv_path: str | None = None):
        self.host = host
        self.api_keys = tuple(k for k in api_keys if k)
        self.audit = AuditWriter(audit_path) if audit_path else None
        self.audit_error: str | None = None
        self.csv_path = csv_path
        self.csv: Any = None  # runtime.telemetry.CsvSink once the engine is loaded
        self.csv_error: str | None = None
        self.profile_path = profile_path
        self.adaptive = adaptive
        self.engine_kw = dict(engine_kw or {})
        self.limits = limits
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
        self._running: dict[int, Job] = {}  # slot -> its job
        self._step_rows: list[int] = []  # the slots of the current shared step's rows, in row order
        self.parallel = int(self.engine_kw.get("n_seq", 1) or 1)
        self.csv_turn = 0  # generated turns written to the CSV (parallel worker)
        self.worker: threading.Thread | None = None
        self.perf = {"n_prompt": 0, "n_gen": 0, "t_prompt_ms": 0.0, "t_gen_ms": 0.0}
        self.front = front(self, host, port)
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
        if self.csv_path:
            from .telemetry import CsvSink

            kw = self.engine_kw
            self.csv = CsvSink(self.csv_path, eng, {
                "moe_stream": eng.stream, "cache_mb": kw.get("cache_mb"), "force_cache": bool(kw.get("force_cache")),
                "io_threads": kw.get("io_threads"), "o_direct": bool(kw.get("o_direct")),
                "overlap": bool(kw.get("overlap")), "prefetch": kw.get("prefetch"), "n_predict": "request"})
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
        work = self._work if self.parallel == 1 else self._work_parallel
        self.worker = threading.Thread(target=work, name="bmoe-serve-worker", daemon=True)
        self.worker.start()
        self.loading = False
        self._audit(self.audit.ready if self.audit else None, self.ext.counters())

    def shutdown(self) -> None:
        """Refuse new requests, cancel the running ones (each client still gets its answer so far),
        refuse the queued ones (503), drain the worker, stop HTTP once the answers are out, write
        ``exit``, free the engine."""
        if self._stopped:
            return
        self._stopped = True
        self.stopping = True
        with self._cv:
            for cur in self._running.values():
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
        self._close_csv()
        if self.engine is not None:
            self.engine.close()

    def _csv(self, fn, *a) -> None:
        """A write to the ``--csv`` sink; the first error is logged and kept (the exit status says it)."""
        if self.csv is None or self.csv_error is not None:
            return
        try:
            fn(*a)
        except OSError as exc:
            self.csv_error = str(exc)
            self.log(f"bmoe-run serve: error: cannot write --csv: {exc}; the server exits with status 1")

    def _close_csv(self) -> None:
        if self.csv is not None:
            csv, self.csv = self.csv, None
            try:
                csv.close()
            except OSError as exc:
                if self.csv_error is None:
                    self.csv_error = str(exc)
                    self.log(f"bmoe-run serve: error: cannot write --csv: {exc}; the server exits with status 1")

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
            self._running[0] = job
            self.metrics.update(requests_processing=1, requests_deferred=len(self._waiting))
            return job

    def check_request(self, prompt: str, n_predict: int) -> None:
        """Raise :class:`~bmoe_top.runtime.engine.RequestError` when the engine (or one slot's
        context, with several slots) would reject the request; changes nothing."""
        if self.parallel == 1:
            self.engine.check_request(prompt, n_predict, True)
        else:
            from .slots import SlotDecoder

            SlotDecoder.target_for(self.engine, prompt, n_predict)

    def _work(self) -> None:
        from .engine import GenerationError, RequestError

        eng, ext, m = self.engine, self.ext, self.metrics
        while True:
            job = self._next()
            if job is None:
                return
            before = ext.counters()


            def on_token(st, job: Job = job) -> None:
                ext.after_token()
                if self.csv is not None:
                    self._csv(self.csv.row, st)
                self._token_out(job, st, n_decode=1)

            res, err = None, None
            try:
                n_predict = job.n_predict
                if n_predict < 0:
                    n_predict = max(0, eng.n_ctx - len(eng.tokenize(job.prompt, True)))
                res = eng.generate(job.prompt, n_predict, clear_kv=True, on_token=on_token, cancel=job.cancel,
                                   on_prefill=self._prefill_out, sampling=job.sampling)
            except RequestError as exc:
                err = (400, str(exc))
            except GenerationError as exc:
                err = (500, str(exc))
            except Exception as exc:  # noqa: BLE001 - the server must survive one bad request
                err = (500, f"{type(exc).__name__}: {exc}")
            after = ext.counters()
            with self._cv:
                self._running.pop(0, None)
                job.state = "done"
                m.update(cache=after, requests_processing=0, requests_deferred=len(self._waiting))
            if res is not None and self.csv is not None:
                self._csv(self.csv.summary, eng, res)
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

    # -- the parallel worker: up to ``parallel`` requests decoded together -------------------------
    def _work_parallel(self) -> None:
        """Admit queued requests into free slots (each prefilled alone), then one shared step for
        every busy slot, until the queue is closed and every slot is free."""
        from .slots import SlotDecoder

        dec = SlotDecoder(self.engine)
        live: dict[int, _Live] = {}
        while True:
            with self._cv:
                while not self._waiting and not live and not self._closed:
                    self._cv.wait()
                if not self._waiting and not live:
                    return
                admit = []
                for slot in dec.free():
                    if not self._waiting:
                        break
                    job = self._waiting.popleft()
                    job.state, job.slot = "running", slot
                    self._running[slot] = job
                    admit.append(job)
                self.metrics.update(requests_processing=len(self._running), requests_deferred=len(self._waiting))
            for job in admit:
                self._admit(dec, live, job)
            if dec.running:
                self._shared_step(dec, live)

    def _admit(self, dec: SlotDecoder, live: dict[int, _Live], job: Job) -> None:
        """Prefill ``job`` alone into its slot; its cache work so far is all its own."""
        from .engine import GenerationError, RequestError

        eng, ext = self.engine, self.ext
        before = ext.counters().audit_counters()
        lv = _Live(job=job, own=dict.fromkeys(before, 0))
        live[job.slot] = lv


        res, err = None, None
        try:
            n_predict = job.n_predict
            if n_predict < 0:
                n_predict = max(0, eng.n_ctx_seq - len(eng.tokenize(job.prompt, True)))
            res = dec.start(job.slot, job.prompt, n_predict, on_token=lambda st: self._on_token(lv, st),
                            cancel=job.cancel, on_prefill=self._prefill_out, sampling=job.sampling)
        except RequestError as exc:
            err = (400, str(exc))
        except GenerationError as exc:
            err = (500, str(exc))
        except Exception as exc:  # noqa: BLE001 - the server must survive one bad request
            err = (500, f"{type(exc).__name__}: {exc}")
        after = ext.counters().audit_counters()
        for k in lv.own:
            lv.own[k] += after[k] - before[k]
        if res is not None or err is not None:
            self._end(live, job.slot, res, err)

    def _on_token(self, lv: _Live, st: Any) -> None:
        """One generated token of a slot (on the worker thread, inside a step)."""
        ext, job = self.ext, lv.job
        self._step_rows.append(job.slot)
        ext.after_token()
        if self.csv is not None:
            lv.rows.append(st)
        self._token_out(job, st, n_decode=0)  # the shared step counts its one llama_decode itself

    def _prefill_out(self, prefill_s: float, n_prompt: int) -> None:
        """A request's prompt into the metrics: its ``llama_decode`` calls are the prompt's
        batches of ``n_batch`` tokens."""
        self.metrics.add(prompt_tokens=n_prompt, prompt_seconds=prefill_s,
                         n_decode=max(1, math.ceil(n_prompt / max(1, self.engine.n_batch))))
        self.metrics.update(cache=self.ext.counters())

    def _token_out(self, job: Job, st: Any, n_decode: int) -> None:
        """A generated token into the metrics (``n_decode``: the ``llama_decode`` calls it took of
        its own), its stop-string check (a hit ends the request before its next step) and its
        stream event: the one path of the one-slot and the slots' workers."""
        m = self.metrics
        m.add(tokens_predicted=1, tokens_predicted_seconds=st.wall_ms / 1000.0, n_decode=n_decode, timed_tokens=1,
              wall_s=st.wall_ms / 1000.0, io_s=st.io_ms / 1000.0, stall_s=st.stall_ms / 1000.0,
              mgmt_s=st.mgmt_ms / 1000.0, compute_s=st.compute_ms / 1000.0)
        m.update(cache=self.ext.counters())
        text = job.stop.feed(st.piece)
        if job.stop.hit is not None:
            job.cancel.set()
        if job.stream:
            job.post("token", (text, st.token, st.step))

    def _shared_step(self, dec: SlotDecoder, live: dict[int, _Live]) -> None:
        """One step of every busy slot; its cache work charged as :meth:`_charge` says."""
        ext = self.ext
        before = ext.counters().audit_counters()
        self._step_rows = []
        if ext.profile_keys:
            ext.profile_hit_log = []
        try:
            ended = dec.step()
        finally:
            log, ext.profile_hit_log = ext.profile_hit_log, None
        after = ext.counters().audit_counters()
        if self._step_rows:
            self.metrics.add(n_decode=1)  # one llama_decode for every row of the step
        # the slots of the step's rows (in row order), or those a failed step ended
        stepped = self._step_rows or [q for q, _, exc in ended if exc is not None]
        self._charge(live, stepped, dec, before, after, log)
        for slot, res, exc in ended:
            err = None if exc is None else (500, str(exc))
            self._end(live, slot, res, err)

    def _charge(self, live: dict[int, _Live], stepped: list[int], dec: SlotDecoder, before: dict[str, int],
                after: dict[str, int], log: list[tuple[int, int]] | None) -> None:
        """A step's counter deltas to its slots: each routed expert to the slot of the first row
        that routed it (``dec.shares``), the rest (speculative reads, a step of one row) to the
        step's first slot, so the slots' counters add up exactly to the context's."""
        delta = {k: after[k] - before[k] for k in after}
        stepped = [q for q in stepped if q in live] or sorted(live)[:1]
        if not stepped:
            return
        owners = self.engine.owners
        for q in stepped[1:]:
            sh = dec.shares.get(q)
            if sh is None:
                continue
            n_prof = sum(1 for il, e in (log or ()) if owners.get(il, {}).get(e) == q)
            mine = {"hits": sh.hits, "misses": sh.misses, "bytes_upload": sh.miss_bytes, "hits_profile": n_prof}
            for k, v in mine.items():
                if k in delta and 0 <= v <= delta[k]:
                    live[q].own[k] += v
                    delta[k] -= v
        first = live[stepped[0]].own
        for k, v in delta.items():
            first[k] += v

    def _end(self, live: dict[int, _Live], slot: int, res: Any, err: tuple[int, str] | None) -> None:
        """A slot's request ended: its CSV rows and summary, its audit record, its answer."""
        lv = live.pop(slot)
        job = lv.job
        with self._cv:
            self._running.pop(slot, None)
            job.state = "done"
            self.metrics.update(cache=self.ext.counters(), requests_processing=len(self._running),
                                requests_deferred=len(self._waiting))
        if res is not None and self.csv is not None:
            for st in lv.rows:
                self._csv(self.csv.row, st, self.csv_turn)
            self._csv(self.csv.summary, self.engine, res)
            self.csv_turn += 1
        if res is not None or any(lv.own.values()):
            n_prompt = res.n_prompt if res else 0
            n_gen = res.n_tokens if res else 0
            t_p = res.prefill_s * 1000.0 if res else 0.0
            t_g = res.decode_s * 1000.0 if res else 0.0
            self.perf["n_prompt"] += n_prompt
            self.perf["n_gen"] += n_gen
            self.perf["t_prompt_ms"] += t_p
            self.perf["t_gen_ms"] += t_g
            self._audit(self.audit.request_own if self.audit else None, self.ext.counters(), lv.own, slot=slot,
                        task=job.task, n_prompt=n_prompt, n_gen=n_gen, t_prompt_ms=t_p, t_gen_ms=t_g)
        job.post("error", err) if err else job.post("done", (res, job.stop))


def _build() -> str:
    try:
        import llama_cpp

        return f"llama-cpp-python {llama_cpp.__version__}"
    except Exception:  # noqa: BLE001
        return "unknown"
