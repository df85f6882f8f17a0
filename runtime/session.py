"""``bmoe-run --session``: the model stays loaded and the expert cache warm across requests.

Protocol: telemetry-contract.md "Session mode". Requests, one JSON object per line on stdin (and
from ``--session-socket`` clients): ``{"cmd":"generate","id":N,"prompt":"..","n_predict":N,
"clear_kv":bool}``, ``{"cmd":"cancel"}``, ``{"cmd":"close"}``; EOF = close. Responses on stdout:
``BMOE_READY`` once, then per request ``BMOE_BEGIN``, per-token ``BMOE_LOAD``/``BMOE_PROGRESS``
(and ``BMOE_ROUTE``/``BMOE_RESIDENT`` with --route-telemetry), ``BMOE_DONE``; ``BMOE_ERROR``
``fatal:false`` for a rejected request (malformed JSON, unknown command, bad fields, prompt plus
n_predict over n_ctx, an expert read error), ``fatal:true`` when the process must end.

Threads: a reader thread parses requests (blocked in ``readline``, so it does not compete with
decode for the GIL) and queues them; the main thread decodes. ``cancel`` sets the event of the
generation in flight (or of the oldest queued one), honoured within one decode step.
Requests queued before ``close``/EOF still run. With ``--session-socket`` the session outlives
stdin's EOF (clients drive it); it ends on ``close`` from any client, SIGTERM or SIGINT.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from .engine import Engine, GenerationError, RequestError
from .telemetry import Emitter, done_line, error_line, ready_line


@dataclass
class _Gen:
    id: object
    prompt: str
    n_predict: int
    clear_kv: bool
    cancel: threading.Event = field(default_factory=threading.Event)


_CLOSE = object()


class Session:
    """Drives an :class:`Engine` from JSON requests. ``on_token_lines(st)`` returns the per-token
    lines to emit (built by the CLI from its flags); ``on_done(res)`` is called after each
    generation (CSV summary)."""

    def __init__(
        self,
        eng: Engine,
        emit: Emitter,
        token_lines: Callable,
        default_n_predict: int = 128,
        on_result: Callable | None = None,
        on_begin: Callable | None = None,
        prefill_lines: Callable | None = None,
    ):
        self.eng = eng
        self.emit = emit
        self.token_lines = token_lines
        self.default_n_predict = default_n_predict
        self.on_result = on_result
        self.on_begin = on_begin
        self.prefill_lines = prefill_lines
        self.q: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.pending: list[_Gen] = []
        self.current: _Gen | None = None

    # -- requests (any thread) -------------------------------------------------------------
    def submit_line(self, line: str | bytes) -> None:
        """Parse one request line; errors become non-fatal ``BMOE_ERROR`` lines."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line:
            return
        try:
            req = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            self.emit.line(error_line(None, False, f"malformed JSON request: {e}"))
            return
        self.submit(req)

    def submit(self, req) -> None:
        if not isinstance(req, dict):
            self.emit.line(error_line(None, False, "request must be a JSON object"))
            return
        cmd = req.get("cmd")
        rid = req.get("id")
        if cmd == "generate":
            prompt = req.get("prompt")
            n_predict = req.get("n_predict", self.default_n_predict)
            clear_kv = req.get("clear_kv", True)
            if not isinstance(prompt, str):
                self.emit.line(error_line(rid, False, "generate: 'prompt' must be a string"))
                return
            if isinstance(n_predict, bool) or not isinstance(n_predict, int) or n_predict < 0:
                self.emit.line(error_line(rid, False, "generate: 'n_predict' must be a non-negative integer"))
                return
            if not isinstance(clear_kv, bool):
                self.emit.line(error_line(rid, False, "generate: 'clear_kv' must be true or false"))
                return
            g = _Gen(rid, prompt, n_predict, clear_kv)
            with self.lock:
                self.pending.append(g)
            self.q.put(g)
        elif cmd == "cancel":
            with self.lock:
                target = self.current or (self.pending[0] if self.pending else None)
                if target is not None:
                    target.cancel.set()
        elif cmd == "close":
            self.q.put(_CLOSE)
        else:
            self.emit.line(error_line(rid, False, f"unknown command {cmd!r} (expected generate, cancel, close)"))

    def read_stdin(self, fd: int, close_on_eof: bool = True) -> None:
        """Reader thread body: every line of file descriptor ``fd`` to :meth:`submit_line`, then close
        at EOF. Raw ``os.read`` (no BufferedReader, whose lock would block interpreter shutdown)."""
        buf = b""
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    self.submit_line(raw)
            if buf:
                self.submit_line(buf)
        except (OSError, ValueError):
            pass
        if close_on_eof:
            self.q.put(_CLOSE)

    # -- the decode loop (main thread) -------------------------------------------------------
    def run(self) -> int:
        self.emit.line(ready_line(self.eng))
        while True:
            item = self.q.get()
            if item is _CLOSE:
                return 0
            g: _Gen = item
            with self.lock:
                if g in self.pending:
                    self.pending.remove(g)
                self.current = g
            try:
                self._one(g)
            finally:
                with self.lock:
                    self.current = None
            if self.emit.broken and self.emit.also is None:
                return 1

    def _one(self, g: _Gen) -> None:
        eng = self.eng
        try:
            eng.check_request(g.prompt, g.n_predict, g.clear_kv)
        except RequestError as e:
            self.emit.line(error_line(g.id, False, str(e)))
            return
        self.emit.line("BMOE_BEGIN " + orjson.dumps({"id": g.id}).decode())
        if self.on_begin is not None:
            self.on_begin(g)

        def on_token(st):
            for ln in self.token_lines(st):
                self.emit.line(ln)
            if self.emit.broken and self.emit.also is None:
                g.cancel.set()  # nobody reads stdout any more

        def on_prefill(_s, _n):
            if self.prefill_lines is not None:
                for ln in self.prefill_lines():
                    self.emit.line(ln)

        try:
            res = eng.generate(g.prompt, g.n_predict, clear_kv=g.clear_kv, on_token=on_token, cancel=g.cancel,
                               on_prefill=on_prefill)
        except RequestError as e:
            self.emit.line(error_line(g.id, False, str(e)))
            return
        except GenerationError as e:
            self.emit.line(error_line(g.id, False, str(e)))
            return
        if self.on_result is not None:
            self.on_result(res)
        self.emit.line(done_line(eng, g.id, res))


def start_reader(sess: Session, fd: int | None = None, close_on_eof: bool = True) -> threading.Thread:
    fd = fd if fd is not None else sys.stdin.fileno()
    t = threading.Thread(target=sess.read_stdin, args=(fd, close_on_eof), name="bmoe-session-stdin", daemon=True)
    t.start()
    return t
