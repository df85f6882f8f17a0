"""The HTTP side of ``bmoe-run serve`` (docs/metrics.md "bmoe-run serve", "Limits", "OpenAI-compatible
API"): a Starlette app on uvicorn (httptools parser, one asyncio event loop in its own thread),
server-sent events through sse-starlette, the same stack as llama-cpp-python's own server.

Endpoints: ``GET /health``, ``GET /metrics``, ``POST /completion`` (also ``/completions``,
llama-server's shape), ``GET /v1/models`` (also ``/models``), ``POST /v1/completions``,
``POST /v1/chat/completions`` (also ``/chat/completions``), OpenAI's shapes with ``usage``.

Limits (:class:`Limits`), each checked before the work it protects:

* API key before the body: the key is checked on the request head; a refused request is answered
  at once (401) and its connection closed, so an upload without a key is never read.
* body: a ``Content-Length`` over ``max_body_bytes`` is refused (413) before reading; a chunked
  body is counted while read and refused when it passes the limit. uvicorn stops reading a
  connection while 64 KiB of its body wait unread, so memory per upload stays bounded.
* head: ``timeout_header`` from a request's first byte to the end of its headers, and at most
  ``max_header_bytes`` of head (431); a connection that sends nothing is closed after
  ``timeout_keep_alive``, as is one idle between two requests; a body that stops arriving for
  ``timeout_idle`` seconds is answered 408.
* ``max_connections`` open connections; beyond that every request but ``/health`` is answered 503
  with ``Retry-After`` and its connection closed. ``max_queue`` generation requests may wait
  for the model; beyond that 503 with ``Retry-After``.
* A client that disconnects cancels its request: dropped from the queue, or its generation
  stopped within one decode step (streaming and not); the audit record of a started request is
  still written.

Nothing here blocks the event loop: generation runs on the server's worker thread, tokenizing a
prompt runs in a thread of the default executor, and ``/health`` and ``/metrics`` answer from
counters.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn
from sse_starlette.sse import AppStatus, EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .metrics import CONTENT_TYPE
from .sampling import Sampling

if TYPE_CHECKING:
    from .server import Job, Server

__all__ = ["Limits", "HttpFront"]

JSON = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Limits:
    """The HTTP limits of ``bmoe-run serve`` (sizes in bytes, times in seconds)."""

    max_body_bytes: int = 8 << 20
    max_header_bytes: int = 64 << 10
    max_connections: int = 1024
    max_queue: int = 64
    timeout_header: float = 10.0
    timeout_idle: float = 30.0
    timeout_keep_alive: float = 5.0
    retry_after_s: int = 1


class HttpError(Exception):
    """An error answer: ``status``, ``message``; ``close`` closes the connection after it (the
    request body was not read); ``retry_after`` adds the header."""

    def __init__(self, status: int, message: str, *, close: bool = False, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.close, self.retry_after = status, message, close, retry_after


_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
          431: "invalid_request_error", 501: "not_supported_error", 503: "unavailable_error"}


def error_body(status: int, message: str) -> bytes:
    """llama-server's (and OpenAI's) error object."""
    return orjson.dumps({"error": {"code": status, "message": message, "type": _TYPES.get(status, "server_error")}})


def error_response(status: int, message: str, *, close: bool = False, retry_after: int | None = None) -> Response:
    headers = {}
    if close:
        headers["connection"] = "close"
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    if status == 401:
        headers["www-authenticate"] = "Bearer"
    return Response(error_body(status, message), status_code=status, media_type=JSON, headers=headers)


def _raw_error(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 error response with ``connection: close``, for the protocol layer."""
    import http

    body = error_body(status, message)
    return (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: {JSON}\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class _Every:
    """A line said at most once a second, with the count of what happened since it was last said
    (what happened after the last line is said a second later). Called on the event loop."""

    def __init__(self, say: Callable[[str], None], text: Callable[[int], str]) -> None:
        self._say, self._text = say, text
        self._n = 0
        self._next = 0.0
        self._later: asyncio.TimerHandle | None = None

    def __call__(self, n: int = 1) -> None:
        self._n += n
        now = time.monotonic()
        if now >= self._next:
            self._flush()
        elif self._later is None:
            self._later = asyncio.get_running_loop().call_later(self._next - now, self._flush)

    def _flush(self) -> None:
        self._later = None
        if self._n:
            self._say(self._text(self._n))
            self._n, self._next = 0, time.monotonic() + 1.0


#: Descriptors kept free beside the connections (the /health answer's own socket, the audit log,
#: the model's files, the connections accepted before their protocol has started): the open-file
#: limit minus these bounds the connections.
FD_RESERVE = 64
#: Connections asyncio accepts in one go (uvicorn's ``backlog`` is also the accept batch: at 2048 a
#: burst was accepted before any connection could close an idle one, past the open-file limit).
ACCEPT_BATCH = 16
#: The kernel's queue of connections waiting for accept().
LISTEN_BACKLOG = 2048


def connection_budget(reserve: int = FD_RESERVE) -> int | None:
    """How many connections fit under the soft open-file limit with the descriptors open now and
    ``reserve`` more (None when the limit is unknown or unlimited)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    return max(1, soft - in_use - reserve)


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus the head limits: a first-request idle timeout (uvicorn arms
    its keep-alive timer only after a response), a header timeout from a request's first byte,
    a head size cap, and the open-connection count for ``/metrics``. ``front`` is set per server.

    At the descriptor budget (:func:`connection_budget`) a new connection closes the connection
    that has been idle longest (no request being answered: waiting for a head, or kept alive
    between two), as nginx drains its keep-alive connections when it runs out: a flood of idle
    connections can then never use up the open-file limit, and ``/health`` is still accepted."""

    front: HttpFront

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_parsed = 0
        self._head_refused = False
        self._in_head = False
        self._active_t = time.monotonic()
        # nothing sent yet: the same idle timeout as between two requests
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        budget = self.front.fd_budget
        if budget is not None and len(self.connections) > budget:
            self.front.drain_idle(len(self.connections) - budget, keep=self)
        self.front.connections_changed(len(self.connections))

    def idle(self) -> bool:
        """No request being answered: waiting for a head, or kept alive between two."""
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)
        self.front.connections_changed(len(self.connections))

    def _stop_header_timer(self) -> None:
        t = getattr(self, "_header_timer", None)
        if t is not None:
            t.cancel()
            self._header_timer = None

    def _refuse(self, status: int, message: str, reason: str) -> None:
        if self.transport.is_closing():
            return
        self.front.srv.metrics.reject(reason)
        self.transport.write(_raw_error(status, message))
        self.transport.close()

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._in_head:
            self._refuse(408, f"request headers not complete within {self.front.limits.timeout_header:g} s",
                         "timeout")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0
        self._head_parsed = 0
        self._head_refused = False
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(self.front.limits.timeout_header, self._header_timeout)

    # the head's size, counted on what the parser hands over: a head that ends in the read that
    # passes the cap is refused too (counting reads alone missed a 70 KB head sent in two)
    def on_url(self, url: bytes) -> None:
        self._head_parsed += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_parsed += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_header_timer()
        if self._head_parsed > self.front.limits.max_header_bytes:
            self._head_refused = True  # no request is started; data_received answers 431
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._head_refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._head_refused:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        self._active_t = time.monotonic()
        was_in_head = self._in_head
        super().data_received(data)
        if self._in_head:  # the head is still incomplete: count what came (a head begun here counts whole)
            self._head_bytes = self._head_bytes + len(data) if was_in_head else len(data)
        if self._head_refused or (self._in_head and self._head_bytes > self.front.limits.max_header_bytes):
            self._refuse(431, f"request head larger than {self.front.limits.max_header_bytes} bytes", "header")


def _bearer(scope: Scope) -> str | None:
    got = None
    for name, value in scope["headers"]:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].strip().decode("latin-1")
        if name == b"x-api-key":
            got = value.strip().decode("latin-1")
    return got


class _Uvicorn(uvicorn.Server):
    """uvicorn, its listening sockets' kernel queue set back to :data:`LISTEN_BACKLOG` after start
    (its ``backlog`` setting is the accept batch, :data:`ACCEPT_BATCH`)."""

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_BACKLOG)


class HttpFront:
    """The HTTP server of one :class:`~bmoe_top.runtime.server.Server`: binds at construction
    (``OSError`` when it cannot), :meth:`start` runs uvicorn on its own thread, :meth:`stop`
    lets the answers in flight go out and closes every connection."""

    def __init__(self, srv: Server, host: str, port: int):
        import socket

        self.srv = srv
        self.limits: Limits = srv.limits
        fam = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self.sock = socket.create_server((host.strip("[]"), port), family=fam, backlog=LISTEN_BACKLOG)
        self.sock.set_inheritable(False)
        self.port = int(self.sock.getsockname()[1])
        self._created = time.time()
        AppStatus.disable_automatic_graceful_drain()  # streams end when their job ends (shutdown cancels it)
        self.app = Starlette(routes=self._routes(), exception_handlers={HTTPException: self._http_exc})
        proto = type("BmoeHttpProtocol", (_Protocol,), {"front": self})
        self.config = uvicorn.Config(self._gate, http=proto, ws="none", lifespan="off", interface="asgi3",
                                     proxy_headers=False, log_config=None, log_level="warning", access_log=False,
                                     server_header=False,
                                     timeout_keep_alive=self.limits.timeout_keep_alive,
                                     timeout_graceful_shutdown=10, backlog=ACCEPT_BATCH)
        self.uv = _Uvicorn(self.config)
        self.thread = threading.Thread(target=self._serve_thread, name="bmoe-http", daemon=True)
        self._started = threading.Event()
        self.fd_budget = connection_budget()
        self.drained = _Every(srv.log, lambda n: f"bmoe-run serve: at the open-file limit: closed {n} idle "
                                                 f"connection{'s' if n != 1 else ''} (the longest idle) to keep "
                                                 f"accepting (at most {self.fd_budget} connections)")
        self._emfile = _Every(srv.log, lambda n: f"bmoe-run serve: cannot accept connections: out of file "
                                                 f"descriptors (EMFILE); {n} refused accept{'s' if n != 1 else ''} "
                                                 "since the last report")

    # -- life cycle --------------------------------------------------------------------------
    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's handler, but an accept that fails for want of descriptors (something else used
        them, or the limit was lowered) is one line a second with a count (Python 3.11's loop
        reports it once per accept-batch slot, with a traceback each), and it makes room: the
        longest idle connections close and the budget is counted again from the descriptors open now."""
        if context.get("message") == "socket.accept() out of system resource":
            self._emfile()
            conns = self.uv.server_state.connections
            free = connection_budget()  # what the limit leaves now, beside the connections open
            self.fd_budget = max(1, len(conns) + (free if free is not None else -ACCEPT_BATCH))
            self.drain_idle(len(conns) - self.fd_budget)
        else:
            loop.default_exception_handler(context)

    def drain_idle(self, n: int, keep: Any = None) -> None:
        """Close the ``n`` connections idle longest (not ``keep``), said once a second."""
        idle = sorted((p for p in self.uv.server_state.connections
                       if p is not keep and isinstance(p, _Protocol) and p.idle() and not p.transport.is_closing()),
                      key=lambda p: p._active_t)[:max(0, n)]
        for p in idle:
            p.transport.close()
        if idle:
            self.drained(len(idle))

    def _serve_thread(self) -> None:
        async def main() -> None:
            asyncio.get_running_loop().set_exception_handler(self._on_loop_error)
            self._started.set()
            await self.uv.serve(sockets=[self.sock])

        try:
            asyncio.run(main())
        finally:
            self._started.set()

    def start(self) -> None:
        self.thread.start()
        self._started.wait(30)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.uv.should_exit = True
            self.thread.join(30)
        try:
            self.sock.close()
        except OSError:
            pass

    def connections_changed(self, n: int) -> None:
        self.srv.metrics.update(http_connections=n)

    # -- gate: connection cap and API key, before any route reads a byte of the body -------------
    async def _gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path != "/health":
            if len(self.uv.server_state.connections) > self.limits.max_connections:
                self.srv.metrics.reject("connections")
                resp = error_response(503, f"server is at its connection limit ({self.limits.max_connections})",
                                      close=True, retry_after=self.limits.retry_after_s)
                await resp(scope, receive, send)
                return
            if self.srv.api_keys:
                got = _bearer(scope)
                ok = got is not None and any(hmac.compare_digest(got.encode(), k.encode()) for k in self.srv.api_keys)
                if not ok:
                    self.srv.metrics.reject("auth")
                    await error_response(401, "Invalid API Key", close=True)(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _http_exc(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return error_response(404, f"File Not Found: {request.url.path}")
        return error_response(exc.status_code, str(exc.detail))

    def _routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/completion", self.completion, methods=["POST"]),
            Route("/completions", self.completion, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.oai_completions, methods=["POST"]),
            Route("/v1/chat/completions", self.oai_chat, methods=["POST"]),
            Route("/chat/completions", self.oai_chat, methods=["POST"]),
        ]

    # -- simple endpoints ----------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.srv.loading:
            return error_response(503, "Loading model")
        return Response(b'{"status":"ok"}', media_type=JSON)

    def _ready(self) -> None:
        if self.srv.loading:
            raise HttpError(503, "Loading model")

    async def metrics(self, request: Request) -> Response:
        if self.srv.loading:
            return error_response(503, "Loading model")
        return Response(self.srv.metrics.render(), media_type=CONTENT_TYPE)

    async def models(self, request: Request) -> Response:
        if self.srv.loading:
            return error_response(503, "Loading model")
        eng = self.srv.engine
        try:
            size = eng.model_path.stat().st_size
        except OSError:
            size = None
        return Response(orjson.dumps({"object": "list", "data": [{
            "id": self.model_id, "object": "model", "created": int(self._created), "owned_by": "bmoe-run",
            "meta": {"n_ctx": eng.n_ctx, "n_layer": eng.n_layer, "n_expert": eng.n_expert,
                     "n_expert_used": eng.n_expert_used, "size": size}}]}), media_type=JSON)

    @property
    def model_id(self) -> str:
        return str(self.srv.engine.model_path.name)

    # -- request bodies ------------------------------------------------------------------------
    async def _read_json(self, request: Request) -> dict[str, Any]:
        self._ready()
        lim = self.limits.max_body_bytes
        cl = request.headers.get("content-length")
        if cl is not None:
            if not cl.strip().isdigit():
                raise HttpError(400, "bad Content-Length", close=True)
            if int(cl) > lim:
                self.srv.metrics.reject("body")
                raise HttpError(413, f"request body of {int(cl)} bytes is over the limit of {lim} bytes "
                                "(--max-body-bytes)", close=True)
        parts: list[bytes] = []
        n = 0
        while True:
            try:
                msg = await asyncio.wait_for(request.receive(), self.limits.timeout_idle)
            except TimeoutError:
                self.srv.metrics.reject("timeout")
                raise HttpError(408, f"request body: nothing received for {self.limits.timeout_idle:g} s",
                                close=True) from None
            if msg["type"] == "http.disconnect":
                raise HttpError(499, "client went away", close=True)
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > lim:
                self.srv.metrics.reject("body")
                raise HttpError(413, f"request body over the limit of {lim} bytes (--max-body-bytes)", close=True)
            parts.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(parts)
        try:
            req = orjson.loads(body) if body else None
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(req, dict):
            raise HttpError(400, "request body must be a JSON object")
        return req

    def _sampling(self, req: dict[str, Any]) -> Sampling | None:
        """The request's sampling fields over the server's defaults (None: none given). Each is
        checked as llama-server reads it: ``temperature`` a number (0 = greedy), ``top_k`` and
        ``repeat_last_n`` integers (``repeat_last_n`` -1 = the whole context), ``top_p`` and
        ``repeat_penalty`` numbers, ``seed`` an integer (-1 = a random seed); any other type or
        a value out of range is 400 with the field's name and why."""
        given: dict[str, Any] = {}
        for key in ("temperature", "top_p", "repeat_penalty"):
            v = req.get(key)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise HttpError(400, f'"{key}" must be a number, got {_kind(v)}')
                given[key] = float(v)
        for key in ("top_k", "repeat_last_n", "seed"):
            v = req.get(key)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise HttpError(400, f'"{key}" must be an integer, got {_kind(v)}')
                given[key] = v
        if given.get("repeat_last_n") == -1:
            given["repeat_last_n"] = self.srv.engine.n_ctx
        seed = given.get("seed")
        if seed == -1:
            given["seed"] = secrets.randbits(32)
        elif seed is not None and seed < 0:
            raise HttpError(400, f'"seed" must be -1 (a random seed) or a non-negative integer, got {seed}')
        if not given:
            return None
        try:
            return replace(self.srv.engine.sampling, **given)
        except ValueError as exc:  # "top-p must be in (0, 1]": said with the request's own name
            name, _, why = str(exc).partition(" must ")
            key = name.replace("-", "_")
            raise HttpError(400, f'"{key}" must {why}, got {req.get(key)!r}' if key in given else str(exc)) from None

    @staticmethod
    def _int(req: dict[str, Any], *keys: str, default: int, low: int | None = None) -> int:
        """The first of ``keys`` the request gives, an integer of at least ``low``; ``default``
        when none is given. 400 for another type or a smaller value."""
        for k in keys:
            v = req.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int):
                raise HttpError(400, f'"{k}" must be an integer, got {_kind(v)}')
            if low is not None and v < low:
                raise HttpError(400, f'"{k}" must be at least {low}' + (" (-1: no limit)" if low == -1 else "")
                                + f", got {v}")
            return v
        return default

    @staticmethod
    def _bool(req: dict[str, Any], key: str, name: str | None = None) -> bool:
        """``key`` as true or false (absent or null: false); 400 naming it ``name`` (default
        ``key``) for another type (``"false"`` is a string, not false)."""
        v = req.get(key)
        if v is None:
            return False
        if not isinstance(v, bool):
            raise HttpError(400, f'"{name or key}" must be true or false, got {_kind(v)}')
        return v

    @staticmethod
    def _stop(req: dict[str, Any]) -> list[str]:
        v = req.get("stop")
        if v is None:
            return []
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return list(v)
        raise HttpError(400, '"stop" must be a string or a list of strings')

    async def _check(self, prompt: str, n_predict: int) -> None:
        """Reject a prompt that does not fit (400) before the response starts; tokenizing runs
        off the event loop."""
        from .engine import RequestError

        try:
            await asyncio.to_thread(self.srv.check_request, prompt, max(0, n_predict))
        except RequestError as exc:
            raise HttpError(400, str(exc)) from None

    def _submit(self, prompt: str, n_predict: int, stream: bool, sampling: Sampling | None,
                stop: list[str]) -> tuple[Job, asyncio.Queue]:
        from .server import QueueFull

        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def post(kind: str, val: Any) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, (kind, val))
            except RuntimeError:  # the loop is closed: nobody waits for this answer
                pass

        try:
            job = self.srv.submit(prompt, n_predict, stream, post, sampling=sampling, stop=stop)
        except QueueFull as exc:
            if not exc.shutting_down:
                self.srv.metrics.reject("queue")
            raise HttpError(503, str(exc), retry_after=self.limits.retry_after_s) from None
        return job, events

    async def _result(self, request: Request, job: Job, events: asyncio.Queue) -> tuple[str, Any] | None:
        """The job's last event, or None when the client went away first (the job is then abandoned)."""

        async def gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        watch = asyncio.ensure_future(gone())
        try:
            while True:
                get = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({get, watch}, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    kind, val = get.result()
                    if kind != "token":
                        return kind, val
                    continue
                get.cancel()
                self.srv.abandon(job)
                return None
        finally:
            watch.cancel()

    async def _finished(self, request: Request, job: Job, events: asyncio.Queue) -> tuple[Any, Any] | Response:
        """A non-streaming job's ``(result, stream state)``, or the response that ends it instead:
        499 when the client went away first, the error's response when the job failed."""
        out = await self._result(request, job, events)
        if out is None:
            return Response(b"", status_code=499)
        kind, val = out
        if kind == "error":
            return error_response(*val)
        return val

    def _stream(self, job: Job, events: asyncio.Queue, frames) -> EventSourceResponse:
        """An SSE response of ``frames(kind, val)`` (an iterator of byte chunks per event) until the
        job's last event; a client that goes away abandons the job."""

        async def gen() -> AsyncIterator[bytes]:
            try:
                while True:
                    kind, val = await events.get()
                    for chunk in frames(kind, val):
                        yield chunk
                    if kind != "token":
                        return
            finally:
                if job.state != "done":
                    self.srv.abandon(job)

        return EventSourceResponse(gen(), sep="\n", ping=15, headers={"cache-control": "no-cache"})

    async def _answer(self, handler, request: Request) -> Response:
        try:
            return await handler(request)
        except HttpError as exc:
            return error_response(exc.status, exc.message, close=exc.close, retry_after=exc.retry_after)

    # -- llama-server's /completion --------------------------------------------------------------
    async def completion(self, request: Request) -> Response:
        return await self._answer(self._completion, request)

    async def _completion(self, request: Request) -> Response:
        req = await self._read_json(request)
        prompt = req.get("prompt")
        if not isinstance(prompt, str):
            raise HttpError(400, '"prompt" must be a string')
        n_predict = self._int(req, "n_predict", "max_tokens", default=-1, low=-1)
        stream = self._bool(req, "stream")
        sampling, stop = self._sampling(req), self._stop(req)
        await self._check(prompt, n_predict)
        job, events = self._submit(prompt, n_predict, stream, sampling, stop)
        model = self.model_id
        if stream:
            def frames(kind: str, val: Any):
                if kind == "token":
                    text, tok, step = val
                    yield _sse({"index": 0, "content": text, "tokens": [tok], "stop": False, "id_slot": job.slot,
                                "tokens_predicted": step})
                elif kind == "done":
                    res, st = val
                    tail = st.final(res.text)[st.sent:]
                    yield _sse(_legacy_final(res, st, model, tail, job.slot))
                else:
                    yield _sse({"error": orjson.loads(error_body(*val))["error"]})

            return self._stream(job, events, frames)
        out = await self._finished(request, job, events)
        if isinstance(out, Response):
            return out
        res, st = out
        return Response(orjson.dumps(_legacy_final(res, st, model, st.final(res.text), job.slot)), media_type=JSON)

    # -- OpenAI's /v1/completions and /v1/chat/completions ------------------------------------
    async def oai_completions(self, request: Request) -> Response:
        return await self._answer(self._oai_completions, request)

    async def oai_chat(self, request: Request) -> Response:
        return await self._answer(self._oai_chat, request)

    async def _oai_completions(self, request: Request) -> Response:
        req = await self._read_json(request)
        prompt = req.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise HttpError(400, '"prompt" must be a string (or a list of one string)')
        return await self._oai(request, req, prompt, chat=False)

    async def _oai_chat(self, request: Request) -> Response:
        from .engine import RequestError

        req = await self._read_json(request)
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise HttpError(400, '"messages" must be a non-empty list')
        pairs: list[tuple[str, str]] = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise HttpError(400, f"messages[{i}] must be an object with a string role")
            content = m.get("content")
            if content is None:
                content = ""
            elif isinstance(content, list):  # content parts: the text ones, in order
                texts = []
                for p in content:
                    if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                        raise HttpError(400, f"messages[{i}]: only text content parts are supported")
                    texts.append(p["text"])
                content = "".join(texts)
            elif not isinstance(content, str):
                raise HttpError(400, f"messages[{i}].content must be a string or a list of text parts")
            pairs.append((m["role"], content))
        try:
            prompt = self.srv.engine.chat_prompt(pairs, add_assistant=True)
        except RequestError as exc:
            raise HttpError(400, str(exc)) from None
        return await self._oai(request, req, prompt, chat=True)

    async def _oai(self, request: Request, req: dict[str, Any], prompt: str, chat: bool) -> Response:
        if self._int(req, "n", default=1) != 1:
            raise HttpError(400, '"n" must be 1 (one choice per request)')
        n_predict = self._int(req, "max_completion_tokens", "max_tokens", "n_predict", default=-1, low=-1)
        stream = self._bool(req, "stream")
        opts = req.get("stream_options")
        if opts is not None and not isinstance(opts, dict):
            raise HttpError(400, f'"stream_options" must be an object, got {_kind(opts)}')
        include_usage = opts is not None and self._bool(opts, "include_usage", "stream_options.include_usage")
        sampling, stop = self._sampling(req), self._stop(req)
        await self._check(prompt, n_predict)
        job, events = self._submit(prompt, n_predict, stream, sampling, stop)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        model = self.model_id
        obj = "chat.completion" if chat else "text_completion"
        if stream:
            head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created, "model": model}

            def choice(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
                if chat:
                    delta: dict[str, Any] = {}
                    if first:
                        delta["role"] = "assistant"
                    if text is not None:
                        delta["content"] = text
                    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

            state = {"first": True}

            def frames(kind: str, val: Any):
                if kind == "token":
                    text = val[0]
                    if chat and state["first"]:
                        state["first"] = False
                        yield _sse({**head, "choices": [choice("", None, first=True)]})
                    if text:
                        yield _sse({**head, "choices": [choice(text, None)]})
                elif kind == "done":
                    res, st = val
                    if chat and state["first"]:
                        yield _sse({**head, "choices": [choice("", None, first=True)]})
                    tail = st.final(res.text)[st.sent:]
                    if tail:
                        yield _sse({**head, "choices": [choice(tail, None)]})
                    yield _sse({**head, "choices": [choice(None if chat else "", _finish(res, st))]})
                    if include_usage:
                        yield _sse({**head, "choices": [], "usage": _usage(res)})
                    yield b"data: [DONE]\n\n"
                else:
                    yield _sse({"error": orjson.loads(error_body(*val))["error"]})

            return self._stream(job, events, frames)
        out = await self._finished(request, job, events)
        if isinstance(out, Response):
            return out
        res, st = out
        text = st.final(res.text)
        if chat:
            ch: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": _finish(res, st)}
        else:
            ch = {"index": 0, "text": text, "logprobs": None, "finish_reason": _finish(res, st)}
        return Response(orjson.dumps({"id": rid, "object": obj, "created": created, "model": model,
                                      "choices": [ch], "usage": _usage(res), "timings": _timings(res)}),
                        media_type=JSON)


def _kind(v: Any) -> str:
    """A JSON value's kind and a short form of it, for a 400's reason (``string "false"``)."""
    if isinstance(v, bool):
        return f"{str(v).lower()}"
    if isinstance(v, str):
        return f"string {orjson.dumps(v[:40]).decode()}"
    if isinstance(v, (int, float)):
        return f"number {v!r}"
    return "an object" if isinstance(v, dict) else "a list" if isinstance(v, list) else type(v).__name__


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _finish(res, st) -> str:
    """OpenAI's finish_reason: ``stop`` (end of generation or a stop string), ``length``, or
    ``cancelled`` (the server shut down mid-request)."""
    if st.hit is not None or res.stop_reason == "eog":
        return "stop"
    if res.stop_reason == "cancelled":
        return "cancelled"
    return "length"


def _usage(res) -> dict[str, int]:
    return {"prompt_tokens": res.n_prompt, "completion_tokens": res.n_tokens,
            "total_tokens": res.n_prompt + res.n_tokens}


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


def _legacy_final(res, st, model: str, content: str, slot: int) -> dict[str, Any]:
    if st.hit is not None:
        stop_type = "word"
    else:
        stop_type = {"eog": "eos", "length": "limit", "cancelled": "none"}.get(res.stop_reason, "limit")
    return {
        "index": 0, "content": content, "tokens": [], "id_slot": slot, "stop": True,
        "model": model, "tokens_predicted": res.n_tokens, "tokens_evaluated": res.n_prompt,
        "stop_type": stop_type, "stopping_word": st.word, "tokens_cached": res.n_past, "truncated": False,
        "timings": _timings(res),
    }
