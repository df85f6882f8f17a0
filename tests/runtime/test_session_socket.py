"""Session socket: the runtime-side server (bmoe_top.runtime.session_socket) and bmoe-top's
client (bmoe_top.tui.sources.session_socket) over real Unix sockets, plus an emitter process
serving its session on a socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import EMITTER
from helpers.waits import until

from bmoe_top.parsers import bmoe_lines as bl
from bmoe_top.runtime.session_socket import SessionSocketError, SessionSocketServer
from bmoe_top.tui.sources.session_socket import SessionSocketClient

READY = 'BMOE_READY {"load_s":0.5,"arch":"qwen3moe","n_ctx":512}'


def prog(step: int, text: str = "") -> str:
    return "BMOE_PROGRESS " + json.dumps({"step": step, "steps": 100, "wall_ms": 5.0, "text": text or f"t{step}"})


@pytest.fixture
def sock_path(tmp_path):
    # keep the path short: AF_UNIX paths are limited to 107 bytes
    d = Path("/tmp") / f"bmoe-l-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    d.mkdir()
    yield str(d / "s.sock")
    for f in d.iterdir():
        f.unlink()
    d.rmdir()

class RawClient:
    """A plain socket client reading whole lines (what `socat` would see)."""

    def __init__(self, path: str) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(5)
        self.buf = b""

    def lines(self, n: int) -> list[str]:
        out = []
        while len(out) < n:
            while b"\n" not in self.buf:
                chunk = self.s.recv(65536)
                if not chunk:
                    return out
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            out.append(line.decode())
        return out

    def send(self, data: bytes) -> None:
        self.s.sendall(data)

    def close(self) -> None:
        self.s.close()


def test_hello_replay_broadcast_requests_and_bad_json(sock_path):
    got: list[tuple[dict, int]] = []
    srv = SessionSocketServer(sock_path, lambda req, c: got.append((req, c.id))).start()
    try:
        assert oct(os.stat(sock_path).st_mode & 0o777) == "0o600"
        srv.broadcast(READY)
        srv.broadcast('BMOE_BEGIN {"id":1}')
        srv.broadcast(prog(1))
        srv.broadcast('BMOE_DONE {"id":1,"cancelled":false,"tokens":1}')
        srv.broadcast('BMOE_BEGIN {"id":2}')
        srv.broadcast(prog(1, "a"))
        srv.broadcast(prog(2, "ab"))
        a = RawClient(sock_path)
        hello, *replay = a.lines(7)
        h = json.loads(hello.split(" ", 1)[1])
        assert hello.startswith("BMOE_HELLO") and h["session"] == srv.session_id
        assert h["seq"] == 7 and h["replay"] == 6
        # READY, the finished turn's BEGIN/DONE, then the current turn in full
        assert replay == [READY, 'BMOE_BEGIN {"id":1}', 'BMOE_DONE {"id":1,"cancelled":false,"tokens":1}',
                          'BMOE_BEGIN {"id":2}', prog(1, "a"), prog(2, "ab")]
        b = RawClient(sock_path)
        assert len(b.lines(7)) == 7
        assert until(lambda: len(srv.clients) == 2)
        srv.broadcast(prog(3))
        assert a.lines(1) == [prog(3)] and b.lines(1) == [prog(3)]
        # requests from any client
        a.send(b'{"cmd":"cancel"}\n')
        b.send(b'{"cmd":"generate","id":9,"prompt":"hi"}\n{"cmd":"cl')
        b.send(b'ose"}\n')
        assert until(lambda: len(got) == 3)
        # clients are served concurrently: order holds per client, not across clients
        by_client: dict[int, list[str]] = {}
        for req, cid in got:
            by_client.setdefault(cid, []).append(req["cmd"])
        assert sorted(by_client.values()) == [["cancel"], ["generate", "close"]]
        # a bad request is answered on that client only
        a.send(b"not json\n[1,2]\n")
        err = a.lines(2)
        assert all(e.startswith("BMOE_ERROR") for e in err)
        assert json.loads(err[0].split(" ", 1)[1])["fatal"] is False
        srv.broadcast(prog(4))
        assert b.lines(1) == [prog(4)]
        a.close()
        b.close()
    finally:
        srv.close()
    assert not os.path.exists(sock_path)


def test_slow_reader_never_blocks_broadcast_and_is_told_what_was_dropped(sock_path):
    logs: list[str] = []
    srv = SessionSocketServer(sock_path, lambda r, c: None, on_log=logs.append,
                              max_queue_lines=200, stall_timeout_s=60).start()
    try:
        lazy = RawClient(sock_path)
        lazy.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        assert until(lambda: len(srv.clients) == 1)
        big = "x" * 2000
        done = threading.Event()

        def pump():
            for i in range(20000):
                srv.broadcast(prog(i + 1, big))
            done.set()

        threading.Thread(target=pump, daemon=True).start()
        # 40 MB broadcast to a client that reads nothing: broadcast must still finish
        assert done.wait(60), "broadcast blocked on a client that does not read"
        c = srv.clients[0]
        assert c.dropped_total > 0
        assert any("not reading" in m for m in logs)
        # now read: a notice says how many were dropped, and the newest lines arrive
        lines = []
        lazy.s.settimeout(5)
        def last_step() -> int | None:
            if not lines or not lines[-1].startswith("BMOE_PROGRESS"):
                return None
            return json.loads(lines[-1].split(" ", 1)[1])["step"]

        while last_step() != 20000:
            lines += lazy.lines(1)
        notices = [x for x in lines if x.startswith("BMOE_NOTICE")]
        assert notices
        n = sum(json.loads(x.split(" ", 1)[1])["dropped"] for x in notices)
        steps = [json.loads(x.split(" ", 1)[1])["step"] for x in lines if x.startswith("BMOE_PROGRESS")]
        assert n + len(steps) == 20000 + 0 * len(notices)  # every line is either delivered or counted
        assert steps == sorted(steps)
        lazy.close()
    finally:
        srv.close()


def test_client_that_stops_reading_is_disconnected_after_stall_timeout(sock_path):
    logs: list[str] = []
    srv = SessionSocketServer(sock_path, lambda r, c: None, on_log=logs.append,
                              max_queue_lines=50, stall_timeout_s=0.5).start()
    try:
        lazy = RawClient(sock_path)
        reader = RawClient(sock_path)
        got: list[str] = []

        def read_all():
            try:
                while True:
                    ln = reader.lines(1)
                    if not ln:
                        return
                    got.extend(ln)
            except OSError:
                return

        threading.Thread(target=read_all, daemon=True).start()
        assert until(lambda: len(srv.clients) == 2)
        big = "y" * 4000
        for i in range(3000):
            srv.broadcast(prog(i + 1, big))
            if i % 500 == 0:
                time.sleep(0.1)
        # the reading client keeps getting lines while the lazy one is cut off
        assert until(lambda: len(srv.clients) == 1), "stalled client not disconnected"
        assert any("disconnected" in m for m in logs)
        srv.broadcast("BMOE_DONE {\"id\":1}")
        assert until(lambda: got and got[-1].startswith("BMOE_DONE"))
        # the reading client stays connected; with a 50-line bound it may lose lines to a fast
        # burst, but every line is delivered or counted in a notice
        dropped = sum(json.loads(x.split(" ", 1)[1])["dropped"] for x in got if x.startswith("BMOE_NOTICE"))
        assert sum(x.startswith("BMOE_PROGRESS") for x in got) + dropped == 3000
        lazy.close()
        reader.close()
    finally:
        srv.close()


def test_stale_socket_replaced_live_one_refused_long_path_refused(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()  # a stale socket file: nobody listens
    srv = SessionSocketServer(sock_path, lambda r, c: None).start()
    try:
        with pytest.raises(SessionSocketError, match="already serving"):
            SessionSocketServer(sock_path, lambda r, c: None).start()
    finally:
        srv.close()
    with pytest.raises(SessionSocketError, match="too long"):
        SessionSocketServer("/tmp/" + "a" * 120, lambda r, c: None).start()
    Path(sock_path).write_text("not a socket")
    with pytest.raises(SessionSocketError, match="not a socket"):
        SessionSocketServer(sock_path, lambda r, c: None).start()


def test_client_reconnects_to_same_session_without_duplicates(sock_path):
    srv = SessionSocketServer(sock_path, lambda r, c: None).start()
    recs: list = []
    cl = SessionSocketClient(sock_path, on_record=lambda r, t: recs.append(r), max_backoff_s=0.2)
    try:
        srv.broadcast(READY)
        srv.broadcast('BMOE_BEGIN {"id":1}')
        for i in range(1, 4):
            srv.broadcast('BMOE_LOAD {"mb":1.0,"ms":2.0}')
            srv.broadcast(prog(i))
        cl.start()
        assert until(lambda: sum(isinstance(r, bl.Progress) for r in recs) == 3)
        assert cl.status().state == "generating"
        # the connection breaks; the runtime keeps going
        srv.clients[0].close("test")
        states = ("disconnected", "loading", "ready", "generating")
        assert until(lambda: cl.status().state in states and cl.status().connects >= 1)
        srv.broadcast('BMOE_LOAD {"mb":1.0,"ms":2.0}')
        srv.broadcast(prog(4))
        assert until(lambda: cl.status().connects == 2)
        srv.broadcast(prog(5))
        srv.broadcast('BMOE_DONE {"id":1,"cancelled":false,"tokens":5}')
        assert until(lambda: any(isinstance(r, bl.Done) for r in recs))
        steps = [r.step for r in recs if isinstance(r, bl.Progress)]
        assert steps == [1, 2, 3, 4, 5]
        assert sum(isinstance(r, bl.Load) for r in recs) == 4  # one per LOAD sent, none replayed twice
        assert cl.resyncs == 1  # it did reconnect with missed lines and filtered the replay
        assert sum(isinstance(r, bl.Ready) for r in recs) == 1
        assert sum(isinstance(r, bl.Begin) for r in recs) == 1
        assert cl.status().state == "ready"
    finally:
        cl.close()
        srv.close()


def test_attach_to_emitter_drive_it_and_survive_restart(sock_path):
    def start_emitter():
        return subprocess.Popen([sys.executable, EMITTER, "--socket", sock_path, "--rate", "200"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)

    events: list[str] = []
    recs: list = []
    p = start_emitter()
    cl = SessionSocketClient(sock_path, on_record=lambda r, t: recs.append(r),
                             on_event=lambda e: events.append(type(e).__name__), max_backoff_s=0.2)
    try:
        cl.start()
        assert cl.wait_state("ready", 15), cl.status()
        rid = cl.generate("hello", 10)
        assert rid is not None
        assert until(lambda: any(isinstance(r, bl.Done) for r in recs))
        d = [r for r in recs if isinstance(r, bl.Done)][0]
        assert d.id == rid and d.tokens == 10
        # a second client joining now gets READY + the last turn
        late: list = []
        cl2 = SessionSocketClient(sock_path, on_record=lambda r, t: late.append(r)).start()
        assert until(lambda: any(isinstance(r, bl.Done) for r in late))
        assert isinstance(late[0], bl.Ready) and isinstance(late[1], bl.Begin)
        cl2.close()
        # the runtime goes away: the client says so and keeps its records
        n = len(recs)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert until(lambda: cl.status().state == "disconnected")
        assert len(recs) == n
        assert cl.generate("x") is None  # cannot send while disconnected
        os.unlink(sock_path)  # a SIGKILLed server leaves its socket file
        p = start_emitter()
        assert until(lambda: cl.status().state == "ready" and cl.status().connects == 2), cl.status()
        assert "NewSession" in events and "Disconnected" in events
        assert sum(isinstance(r, bl.Ready) for r in recs) == 2
    finally:
        cl.close()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_replay_of_a_long_turn_is_bounded_and_keeps_the_newest(sock_path):
    srv = SessionSocketServer(sock_path, lambda r, c: None, max_turn_lines=50, max_turn_bytes=20000).start()
    try:
        srv.broadcast(READY)
        srv.broadcast('BMOE_BEGIN {"id":3}')
        text = ""
        for i in range(1, 301):
            text += f"w{i} "
            srv.broadcast(prog(i, text))
        c = RawClient(sock_path)
        hello = json.loads(c.lines(1)[0].split(" ", 1)[1])
        replay = c.lines(hello["replay"])
        assert replay[0] == READY and replay[1] == 'BMOE_BEGIN {"id":3}'
        body = replay[2:]
        assert 1 <= len(body) <= 50 and sum(len(x) for x in body) <= 20000 + len(body[-1])
        assert json.loads(body[-1].split(" ", 1)[1])["step"] == 300  # newest kept: the whole answer so far
        c.close()
    finally:
        srv.close()


def test_a_request_nested_too_deep_is_answered_and_the_client_stays(sock_path):
    got: list[dict] = []
    srv = SessionSocketServer(sock_path, lambda req, c: got.append(req)).start()
    try:
        a = RawClient(sock_path)
        a.lines(1)  # hello
        a.send(b'{"cmd":"generate","prompt":' + b"[" * 5000 + b"]" * 5000 + b"}\n")
        (err,) = a.lines(1)
        assert err.startswith("BMOE_ERROR") and "nested too deep" in err
        a.send(b'{"cmd":"cancel"}\n')  # the same reader still reads
        assert until(lambda: got == [{"cmd": "cancel"}])
        a.close()
    finally:
        srv.close()
