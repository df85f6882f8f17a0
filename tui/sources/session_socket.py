"""Attach to a running session over its Unix socket (``bmoe-top attach --session PATH``).

``SessionSocketClient(path)`` (sinks from :func:`bmoe_top.tui.feed.bind.bind`, or given)
connects to the socket served by ``bmoe-run --session --session-socket PATH``
(``bmoe_top.runtime.session_socket``; protocol in docs/runtime.md "Session socket"), parses every
line it receives into records for the sink (the sinks and state machine of
:class:`~bmoe_top.tui.sources.live.LiveBase`), and sends requests (generate / cancel). When the
runtime goes away the state becomes "disconnected" (what the sink already has stays on screen)
and the client reconnects with backoff (0.1 s doubling to ``max_backoff_s``) when the socket
comes back.

Reconnecting to the SAME session (same ``BMOE_HELLO`` session id) after a broken connection: if
no line was missed the server's replay is skipped; otherwise replayed lines already delivered
(READY, BEGIN/DONE of known turn ids, per-token steps already seen) are skipped (a ``BMOE_LOAD``
goes with the ``BMOE_PROGRESS`` after it), so the sink never gets a turn twice. Connecting to a
NEW session (the runtime was restarted) emits :class:`~bmoe_top.tui.sources.events.NewSession`
before its replay. ``BMOE_HELLO`` and ``BMOE_NOTICE`` lines are consumed here (a notice becomes a
problem: "slow reader: N lines dropped"). ``close()`` detaches; the runtime keeps running.

No Textual import.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import threading
import time
from typing import Any

import orjson

from bmoe_top.parsers import bmoe_lines as _bl
from bmoe_top.parsers.textio import LineSplitter
from bmoe_top.tui.sources.events import Connected, Disconnected, LiveState, NewSession
from bmoe_top.tui.sources.live import MAX_LINE_CHARS, InputWait, LineBatch, LiveBase


class SessionSocketClient(LiveBase):
    """A live source attached to a session socket.

    Args:
        path: the Unix socket path.
        on_record, on_stderr, on_event, recorder, stall_after_s: see
            :class:`~bmoe_top.tui.sources.live.LiveBase` (recorded lines get ``src="socket"``).
        reconnect: keep reconnecting after the runtime goes away (default True).
        max_backoff_s: longest pause between connection attempts.
        connect_timeout_s: ``start()`` waits this long for the first connection only to
            report a clear state; the client keeps trying afterwards.
    """

    kind = "socket"

    def __init__(self, path: str | os.PathLike[str], on_record: Any = None, *, reconnect: bool = True,
                 max_backoff_s: float = 2.0, **kw: Any) -> None:
        kw.setdefault("ready_timeout_s", 1e9)
        super().__init__(on_record, **kw)
        self.path = os.fspath(path)
        self.reconnect = reconnect
        self.max_backoff_s = max_backoff_s
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._session: str | None = None
        self._seq_next: int | None = None  # seq of the next live line we expect
        self._replay_left = 0
        self._skip_replay = False
        self._filter_replay = False
        self._seen_ids: set[tuple[str, int | None]] = set()
        self._last_step: dict[int | None, int] = {}
        self._cur_id: int | None = None
        self._held_load: tuple[str, float] | None = None
        self.resyncs = 0  # reconnects to the same session that had missed lines (replay filtered)
        self.notices = 0
        self.dropped_lines = 0
        # ids for requests sent by this client: start high and random-ish so several attached
        # clients rarely reuse an id
        self._ids = itertools.count((os.getpid() % 1000) * 1000 + 1)

    def describe(self) -> str:
        return f"socket: {self.path}"

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> SessionSocketClient:
        self._set_state(LiveState.CONNECTING, f"connecting to {self.path}")
        self._thread = threading.Thread(target=self._loop, name="session-socket-client", daemon=True)
        self._thread.start()
        self._start_watchdog()
        return self

    def close(self, timeout: float = 2.0) -> int | None:
        """Detach (the runtime keeps running). Idempotent. Returns None (no exit code)."""
        self._stop.set()
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)
        self._set_state(LiveState.CLOSED, "detached")
        return None

    def send(self, obj: dict[str, Any]) -> bool:
        """Send one JSON request line; False when not connected (the request is dropped)."""
        s = self._sock
        if s is None or self._state in (LiveState.DISCONNECTED, LiveState.CONNECTING, LiveState.CLOSED):
            return False
        data = orjson.dumps(obj) + b"\n"
        try:
            with self._send_lock:
                s.sendall(data)
        except OSError:
            return False
        self._record("stdin", data[:-1].decode("utf-8", "replace"))
        return True

    # ---- connection loop ------------------------------------------------------------
    def _loop(self) -> None:
        backoff = 0.1
        was_connected = False
        while not self._stop.is_set():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
            except OSError as e:
                s.close()
                why = "no socket" if e.errno in (errno.ENOENT,) else (e.strerror or str(e))
                if was_connected:
                    self._set_state(LiveState.DISCONNECTED, f"runtime gone ({why}); reconnecting every {backoff:.1f} s")
                else:
                    self._set_state(LiveState.CONNECTING, f"waiting for {self.path} ({why})")
                if not self.reconnect and was_connected:
                    break
                if self._stop.wait(backoff):
                    break
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            t_conn = time.monotonic()
            was_connected = True
            self._sock = s
            with self._lock:
                self._connects += 1
                ev = self._transition(LiveState.LOADING, "connected; waiting for BMOE_READY")
            self._emit(ev, Connected(self.path, self._connects))
            reason = self._read(s)
            self._sock = None
            try:
                s.close()
            except OSError:
                pass
            if self._stop.is_set():
                break
            with self._lock:
                self._in_flight_set = False
            self._set_state(LiveState.DISCONNECTED, f"runtime went away ({reason}); reconnecting")
            self._emit(Disconnected(reason))
            if not self.reconnect:
                break
            # a connection that lasted keeps the short backoff; one dropped at once backs off
            backoff = 0.1 if time.monotonic() - t_conn > 2.0 else min(backoff * 2, self.max_backoff_s)
            if self._stop.wait(backoff):
                break

    def _read(self, s: socket.socket) -> str:
        split = LineSplitter(max_line=MAX_LINE_CHARS)
        batch = LineBatch(lambda held: self._held_lines(held, self._on_line), self.hold_s)
        more = InputWait(s.fileno())
        try:
            while not self._stop.is_set():
                wait = batch.wait_s()
                if wait is not None and not more.wait(wait):
                    batch.flush()  # held long enough: hand the per-token lines over
                    continue
                try:
                    chunk = s.recv(65536)
                except OSError as e:
                    return e.strerror or str(e)
                if not chunk:
                    batch.flush()
                    tail = split.flush()
                    if tail:
                        self._problem(0, tail, f"socket closed mid-line ({len(tail)} chars without a newline)",
                                      "socket")
                    return "socket closed"
                batch.add(split.feed(chunk), time.time())
            return "detached"
        finally:
            batch.flush()

    def _on_line(self, line: str, t: float) -> None:
        if line.startswith("BMOE_HELLO"):
            self._hello(line)
            return
        if line.startswith("BMOE_NOTICE"):
            rec = _bl.parse_line(line)
            n = rec.fields.get("dropped", 0) if isinstance(rec, _bl.Unknown) else 0
            n = n if isinstance(n, int) else 0
            self.notices += 1
            self.dropped_lines += n
            self._problem(0, line, f"slow reader: the runtime dropped {n} lines for this client", "socket")
            self._record("socket", line, t)
            return
        replay = self._replay_left > 0
        if replay:
            self._replay_left -= 1
            if self._skip_replay:
                return
        else:
            if self._seq_next is not None:
                self._seq_next += 1
        if replay and self._filter_replay:
            rec = _bl.parse_line(line)
            held, self._held_load = self._held_load, None
            if isinstance(rec, _bl.Load):
                self._held_load = (line, t)  # a LOAD belongs to the PROGRESS after it: decide then
                if self._replay_left == 0:
                    self._protocol_line(line, t, "socket")
                    self._held_load = None
                return
            if self._already_seen(rec):
                return
            if held is not None and isinstance(rec, _bl.Progress):
                self._protocol_line(held[0], held[1], "socket")
        rec = self._protocol_line(line, t, "socket")
        self._note(rec)

    def _hello(self, line: str) -> None:
        try:
            info = orjson.loads(line.split(" ", 1)[1])
        except (orjson.JSONDecodeError, IndexError):
            info = {}
        session = info.get("session")
        seq = info.get("seq")
        replay = int(info.get("replay") or 0)
        same = session is not None and session == self._session
        self._replay_left = replay
        if same and self._seq_next is not None and isinstance(seq, int) and seq <= self._seq_next:
            self._skip_replay, self._filter_replay = True, False  # nothing missed
        elif same:
            self._skip_replay, self._filter_replay = False, True
            self.resyncs += 1
        else:
            self._skip_replay = self._filter_replay = False
            if self._session is not None:
                self._emit(NewSession(session, self._session))
            self._seen_ids.clear()
            self._last_step.clear()
            self._cur_id = None
            with self._lock:
                self._ready = None
        self._session = session
        self._seq_next = seq if isinstance(seq, int) else None
        if same and self._ready is not None:
            self._set_state(LiveState.READY, "ready (reconnected)")

    def _note(self, rec: Any) -> None:
        if isinstance(rec, _bl.Begin):
            self._cur_id = rec.id
            self._seen_ids.add(("B", rec.id))
        elif isinstance(rec, _bl.Done):
            self._seen_ids.add(("D", rec.id))
        elif isinstance(rec, _bl.Progress) and rec.step is not None:
            self._last_step[self._cur_id] = rec.step

    def _already_seen(self, rec: Any) -> bool:
        if isinstance(rec, _bl.Ready):
            return self._ready is not None
        if isinstance(rec, _bl.Begin):
            if ("B", rec.id) in self._seen_ids:
                self._cur_id = rec.id
                return True
            return False
        if isinstance(rec, _bl.Done):
            return ("D", rec.id) in self._seen_ids
        if isinstance(rec, (_bl.Progress, _bl.Route)) and rec.step is not None:
            last = self._last_step.get(self._cur_id)
            return last is not None and rec.step <= last
        return False
