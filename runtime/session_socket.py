"""Serve a running session on a Unix domain socket (``bmoe-run --session --session-socket PATH``).

The session loop calls ``broadcast(line)`` for every protocol line it writes to stdout;
every connected client receives:

1. ``BMOE_HELLO {"session": "<hex id of this server>", "seq": <int>, "replay": <int>,
   "pid": <int>}`` -- ``seq`` is the sequence number the next live line will carry (lines are
   numbered from 0 in broadcast order), ``replay`` how many replayed lines follow;
2. the replay of the current state: the last ``BMOE_READY``, the ``BMOE_BEGIN``/``BMOE_DONE``
   pair of each finished turn (the turns table), the last ``BMOE_RESIDENT`` before the
   current turn, and every line of the current (or last) turn from its ``BMOE_BEGIN``
   (bounded: the oldest per-token lines of a very long turn are dropped, the newest kept);
3. every broadcast line from then on.

Clients may send requests, one JSON object per line (telemetry-contract.md "Session mode":
generate / cancel / close); each parsed object goes to ``on_request(request, client)``. A
line that is not a JSON object gets ``BMOE_ERROR {"id":null,"fatal":false,"msg":...}`` on that
client only. Several clients at once.

A client never blocks the runtime: ``broadcast`` only appends to each client's bounded queue
and returns; a writer thread per client sends. When a queue is over ``max_queue_lines`` (or
``max_queue_bytes``) the OLDEST lines are dropped and the client is told, before the next
line it gets: ``BMOE_NOTICE {"dropped": <n>, "msg": "slow reader: <n> lines dropped"}``. A
client that has not accepted any byte for ``stall_timeout_s`` is disconnected. Both are also
reported on stderr (``on_log``) once per event.

No dependency on the engine; thread-safe; stdlib only.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable

NOTICE_TAG = "BMOE_NOTICE"
HELLO_TAG = "BMOE_HELLO"
_MAX_REQUEST_BYTES = 4 * 1024 * 1024


class SessionSocketError(RuntimeError):
    """The socket cannot be served (path too long, in use by a live server, not a socket)."""


class Client:
    """One connected client. ``send(line)`` queues a line for this client only."""

    def __init__(self, server: SessionSocketServer, conn: socket.socket, cid: int) -> None:
        self.server = server
        self.conn = conn
        self.id = cid
        self._q: collections.deque[str] = collections.deque()
        self._q_bytes = 0
        self._cv = threading.Condition()
        self._closed = False
        self.dropped = 0  # lines dropped since the last notice
        self.dropped_total = 0
        self.sent_lines = 0
        self._last_progress = time.monotonic()
        self.reason: str | None = None
        self._hello: str | None = None  # sent first, never dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, line: str) -> None:
        """Queue ``line`` (no newline) for this client; never blocks."""
        srv = self.server
        warn = False
        with self._cv:
            if self._closed:
                return
            self._q.append(line)
            self._q_bytes += len(line) + 1
            while len(self._q) > 1 and (len(self._q) > srv.max_queue_lines or self._q_bytes > srv.max_queue_bytes):
                old = self._q.popleft()
                self._q_bytes -= len(old) + 1
                if self.dropped == 0 and self.dropped_total == 0:
                    warn = True
                self.dropped += 1
                self.dropped_total += 1
            self._cv.notify()
        if warn:
            srv._log(f"session socket: client {self.id} is not reading; dropping its oldest lines "
                     f"(queue bound {srv.max_queue_lines} lines / {srv.max_queue_bytes} bytes)")

    def close(self, reason: str | None = None) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self.reason = reason
            self._q.clear()
            self._cv.notify_all()
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # writer thread
    def _write_loop(self) -> None:
        srv = self.server
        conn = self.conn
        conn.settimeout(0.25)
        try:
            while True:
                with self._cv:
                    while not self._q and not self._closed and self._hello is None:
                        self._cv.wait(0.5)
                    if self._closed:
                        return
                    batch = []
                    if self._hello is not None:
                        batch.append(self._hello)
                        self._hello = None
                    if self.dropped:
                        n = self.dropped
                        self.dropped = 0
                        batch.append(f'{NOTICE_TAG} {{"dropped":{n},"msg":"slow reader: {n} lines dropped"}}')
                    nbytes = 0
                    while self._q and nbytes < 262144:
                        line = self._q.popleft()
                        self._q_bytes -= len(line) + 1
                        nbytes += len(line) + 1
                        batch.append(line)
                data = ("\n".join(batch) + "\n").encode("utf-8", "surrogatepass")
                view = memoryview(data)
                self._last_progress = time.monotonic()
                while view:
                    if self._closed:
                        return
                    try:
                        n = conn.send(view)
                    except TimeoutError:
                        if time.monotonic() - self._last_progress > srv.stall_timeout_s:
                            srv._log(f"session socket: client {self.id} read nothing for "
                                     f"{srv.stall_timeout_s:g} s; disconnected")
                            self.close("stalled")
                            return
                        continue
                    view = view[n:]
                    self._last_progress = time.monotonic()
                self.sent_lines += len(batch)
        except OSError:
            self.close("gone")
        finally:
            srv._forget(self)

    # reader thread
    def _read_loop(self) -> None:
        srv = self.server
        buf = bytearray()
        conn = self.conn
        try:
            while not self._closed:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        if len(buf) > _MAX_REQUEST_BYTES:
                            self.send(_error_line(f"request longer than {_MAX_REQUEST_BYTES} bytes; disconnected"))
                            self.close("request too long")
                            return
                        break
                    raw = bytes(buf[:nl]).strip()
                    del buf[: nl + 1]
                    if raw:
                        srv._request(raw, self)
        except OSError:
            pass
        # EOF: the client closed its sending side (it may still read: a half-closed
        # `socat` keeps receiving). A client that is really gone fails the next send.


def _error_line(msg: str) -> str:
    return "BMOE_ERROR " + json.dumps({"id": None, "fatal": False, "msg": msg})


class SessionSocketServer:
    """Serve one session on the Unix socket ``path``.

    Args:
        path: socket file path (at most 107 bytes). A stale socket file (no server
            listening) is replaced; a live one raises ``SessionSocketError``.
        on_request: ``(request: dict, client: Client) -> None``, called from the client's
            reader thread for each JSON-object line a client sends.
        on_log: ``(message: str) -> None`` for the "say so" lines (default: stderr).
        max_queue_lines / max_queue_bytes: per-client queue bound (drop oldest beyond).
        stall_timeout_s: disconnect a client that accepts no byte for this long.
        max_turn_lines / max_turn_bytes: replay bound for the current turn (oldest per-token
            lines dropped; the cumulative ``text`` of the newest line still has the whole answer).
        max_turns: finished turns kept for the replay (BEGIN/DONE pairs).

    ``start()`` binds (mode 0600) and accepts in a daemon thread; ``broadcast(line)`` from
    any thread; ``close()`` disconnects everyone and removes the socket file.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        on_request: Callable[[dict, Client], None],
        *,
        on_log: Callable[[str], None] | None = None,
        max_queue_lines: int = 20000,
        max_queue_bytes: int = 32 * 1024 * 1024,
        stall_timeout_s: float = 30.0,
        max_turn_lines: int = 5000,
        max_turn_bytes: int = 8 * 1024 * 1024,
        max_turns: int = 200,
    ) -> None:
        self.path = os.fspath(path)
        self.on_request = on_request
        self.on_log = on_log
        self.max_queue_lines = max_queue_lines
        self.max_queue_bytes = max_queue_bytes
        self.stall_timeout_s = stall_timeout_s
        self.session_id = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()
        self._clients: dict[int, Client] = {}
        self._next_id = 1
        self._seq = 0
        self._ready: str | None = None
        self._resident: str | None = None  # last BMOE_RESIDENT outside the current turn
        self._turns: collections.deque[tuple[str, str]] = collections.deque(maxlen=max_turns)
        self._turn: collections.deque[str] = collections.deque()
        self._turn_bytes = 0
        self.max_turn_lines = max_turn_lines
        self.max_turn_bytes = max_turn_bytes
        self._turn_begin: str | None = None
        self._turn_open = False
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> SessionSocketServer:
        path = self.path
        if len(os.fsencode(path)) > 107:
            n = len(os.fsencode(path))
            raise SessionSocketError(f"session socket path is too long ({n} bytes, max 107): {path}")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode):
                raise SessionSocketError(f"{path} exists and is not a socket; refusing to replace it")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError as e:
                if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise SessionSocketError(f"cannot check {path}: {e.strerror}") from None
                os.unlink(path)  # stale socket from a dead server
            else:
                raise SessionSocketError(f"another session is already serving {path}")
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        except OSError as e:
            sock.close()
            raise SessionSocketError(f"cannot bind {path}: {e.strerror}") from None
        finally:
            os.umask(old)
        sock.listen(16)
        sock.settimeout(0.25)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="session-socket-accept", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, disconnect every client, remove the socket file."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            clients = list(self._clients.values())
        for c in clients:
            c.close("server closed")
        try:
            if stat.S_ISSOCK(os.stat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass

    def __enter__(self) -> SessionSocketServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def clients(self) -> list[Client]:
        with self._lock:
            return list(self._clients.values())

    # ---- broadcasting ---------------------------------------------------------------
    def broadcast(self, line: str) -> None:
        """Send one protocol line (without newline) to every client; never blocks on I/O.
        Also updates the replay state (READY, finished turns, current turn)."""
        if "\n" in line:
            for part in line.split("\n"):
                if part:
                    self.broadcast(part)
            return
        with self._lock:
            self._seq += 1
            self._remember(line)
            clients = list(self._clients.values())
        for c in clients:
            c.send(line)

    def _remember(self, line: str) -> None:
        i = line.find("BMOE_")
        tag = ""
        if i >= 0:
            j = line.find(" ", i)
            tag = line[i + 5 : j if j > 0 else len(line)]
        if tag == "READY":
            self._ready = line
            self._turns.clear()
            self._turn_clear()
            self._turn_begin = None
            self._turn_open = False
            self._resident = None
        elif tag == "BEGIN":
            self._turn_clear()
            self._turn_begin = line
            self._turn_open = True
        elif tag == "DONE":
            self._turn_add(line)
            self._turns.append((self._turn_begin or "", line))
            self._turn_open = False
        elif tag == "RESIDENT" and not self._turn_open:
            self._resident = line
        elif self._turn_open or tag in ("PROGRESS", "LOAD", "ROUTE", "ERROR"):
            after_done = bool(self._turn) and self._turn[-1].find("BMOE_DONE") >= 0
            if not self._turn_open and tag in ("PROGRESS", "LOAD") and after_done:
                # a one-shot run (no BEGIN) starting after a finished turn
                self._turn_clear()
                self._turn_begin = None
            self._turn_add(line)

    def _turn_clear(self) -> None:
        self._turn.clear()
        self._turn_bytes = 0

    def _turn_add(self, line: str) -> None:
        self._turn.append(line)
        self._turn_bytes += len(line)
        while len(self._turn) > 1 and (len(self._turn) > self.max_turn_lines or self._turn_bytes > self.max_turn_bytes):
            self._turn_bytes -= len(self._turn.popleft())

    def _replay_lines(self) -> list[str]:
        out: list[str] = []
        if self._ready:
            out.append(self._ready)
        turns = list(self._turns)
        if turns and self._turn and not self._turn_open and self._turn[-1] is turns[-1][1]:
            turns = turns[:-1]  # the last finished turn is replayed in full below
        for b, d in turns:
            if b:
                out.append(b)
            out.append(d)
        if self._resident:
            out.append(self._resident)
        if self._turn_begin is not None and (self._turn_open or self._turn):
            out.append(self._turn_begin)
        out.extend(self._turn)
        return out

    # ---- clients --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                time.sleep(0.05)
                continue
            with self._lock:
                cid = self._next_id
                self._next_id += 1
                c = Client(self, conn, cid)
                replay = self._replay_lines()
                hello = HELLO_TAG + " " + json.dumps(
                    {"session": self.session_id, "seq": self._seq, "replay": len(replay), "pid": os.getpid()},
                    separators=(",", ":"),
                )
                # queue the hello + replay before the client is visible to broadcast(): no gap, no duplicate
                c._hello = hello
                c._q.extend(replay)
                c._q_bytes = sum(len(x) + 1 for x in c._q)
                self._clients[cid] = c
            threading.Thread(target=c._write_loop, name=f"session-socket-w{cid}", daemon=True).start()
            threading.Thread(target=c._read_loop, name=f"session-socket-r{cid}", daemon=True).start()

    def _forget(self, c: Client) -> None:
        with self._lock:
            self._clients.pop(c.id, None)
        try:
            c.conn.close()
        except OSError:
            pass

    def _request(self, raw: bytes, client: Client) -> None:
        try:
            obj = json.loads(raw.decode("utf-8", "replace"))
        except ValueError as e:
            client.send(_error_line(f"bad request (not JSON): {e}"))
            return
        except RecursionError:
            client.send(_error_line("bad request (not JSON): nested too deep"))
            return
        if not isinstance(obj, dict):
            client.send(_error_line("bad request: not a JSON object"))
            return
        try:
            self.on_request(obj, client)
        except Exception as e:  # noqa: BLE001 - a bad request must not kill the reader
            client.send(_error_line(f"request failed: {e}"))

    def _log(self, msg: str) -> None:
        if self.on_log is not None:
            try:
                self.on_log(msg)
                return
            except Exception:  # noqa: BLE001
                pass
        try:
            print(msg, file=sys.stderr, flush=True)
        except OSError:
            pass
