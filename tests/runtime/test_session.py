"""``bmoe-run --session`` driven over real pipes: READY, BEGIN/per-token/DONE with every documented
field, non-fatal errors for bad requests, cancel honoured mid-generation leaving the session
usable, clear_kv:false reusing the KV prefix (greedy tokens equal to a resident engine), EOF/close.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest

from bmoe_top.parsers.bmoe_lines import Begin, Done, Error, Load, Progress, Ready, parse_line
from bmoe_top.runtime.engine import Engine
from bmoe_top.runtime.models import make_model

DONE_FIELDS = ("id", "cancelled", "tokens", "tok_s", "prefill_s", "load_s", "cache_hit_pct", "n_prompt", "n_past",
               "cache_resident_mib", "cache_budget_mib", "spec_recall_pct", "stall_s_tok", "mgmt_s_tok", "text")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("rt-sess") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=7)


class Proc:
    def __init__(self, args):
        self.p = subprocess.Popen([sys.executable, "-m", "bmoe_top.runtime.cli", *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.q: queue.Queue = queue.Queue()
        self.raw: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for ln in self.p.stdout:
            self.q.put(ln.rstrip("\n"))
        self.q.put(None)

    def send(self, obj):
        self.p.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.p.stdin.flush()

    def next(self, timeout=60):
        ln = self.q.get(timeout=timeout)
        if ln is not None:
            self.raw.append(ln)
        return None if ln is None else parse_line(ln)

    def until(self, cls, timeout=60):
        seen = []
        while True:
            r = self.next(timeout)
            assert r is not None, f"EOF before {cls.__name__}: {self.raw[-5:]} {self.p.stderr.read()}"
            seen.append(r)
            if isinstance(r, cls):
                return r, seen


def test_session_protocol(model):
    args = ["-m", str(model), "--session", "--quiet", "-c", "512", "--cache-mb", "0.45"]
    s = Proc(args)
    ready, _ = s.until(Ready)
    assert ready.arch == "qwen3moe" and ready.n_ctx >= 512 and ready.load_s > 0

    # a normal generation
    s.send({"cmd": "generate", "id": 1, "prompt": "Hello session", "n_predict": 8})
    b, _ = s.until(Begin)
    assert b.id == 1
    d1, seen = s.until(Done)
    prog = [r for r in seen if isinstance(r, Progress)]
    assert [r.step for r in prog] == list(range(1, d1.tokens + 1)) and d1.tokens == 8
    assert all(isinstance(r, (Load, Progress, Done)) for r in seen)
    raw_done = json.loads(s.raw[-1].split(" ", 1)[1])
    assert all(k in raw_done for k in DONE_FIELDS)
    assert d1.id == 1 and d1.cancelled is False and d1.text == prog[-1].text
    assert d1.n_prompt > 1 and d1.n_past == d1.n_prompt + d1.tokens
    assert d1.cache_hit_pct == pytest.approx(prog[-1].cache_hit_pct, abs=0.01)
    assert d1.cache_budget_mib == pytest.approx(0.45)
    loads = [r for r in seen if isinstance(r, Load)]
    assert sum(r.mb for r in loads) == pytest.approx(raw_done["read_mib"], abs=2e-3)
    assert sum(r.read_mb for r in prog) == pytest.approx(raw_done["read_mib"], abs=2e-3)

    # continue the conversation: only the new suffix is prefilled
    s.send({"cmd": "generate", "id": 2, "prompt": " and more", "n_predict": 6, "clear_kv": False})
    d2, _ = s.until(Done)
    assert d2.n_past == d1.n_past + d2.n_prompt + d2.tokens
    assert d2.n_prompt < d1.n_prompt + 6

    # bad requests are non-fatal
    s.send("{not json")
    e, _ = s.until(Error)
    assert e.fatal is False and "JSON" in e.msg
    s.send({"cmd": "dance"})
    e, _ = s.until(Error)
    assert e.fatal is False and "unknown command" in e.msg
    s.send({"cmd": "generate", "id": 3, "prompt": "x", "n_predict": 100000})
    e, _ = s.until(Error)
    assert e.fatal is False and e.id == 3 and "n_ctx" in e.msg

    # cancel mid-generation: honoured quickly, session stays usable
    s.send({"cmd": "generate", "id": 4, "prompt": "A long story", "n_predict": 400})
    s.until(Begin)
    s.until(Progress)
    s.send({"cmd": "cancel"})
    d4, seen = s.until(Done)
    assert d4.id == 4 and d4.cancelled is True and d4.tokens < 400

    # after cancel: a fresh turn gives exactly the resident greedy tokens
    s.send({"cmd": "generate", "id": 5, "prompt": "Hello session", "n_predict": 8, "clear_kv": True})
    d5, seen5 = s.until(Done)
    assert d5.text == d1.text and d5.cancelled is False

    s.send({"cmd": "close"})
    assert s.next() is None
    assert s.p.wait(timeout=30) == 0
    assert "Traceback" not in s.p.stderr.read()


def test_session_matches_resident_engine_across_turns(model):
    turns = [("Once upon a time", 10, True), (" the end?", 7, False), (" no.", 5, False)]
    with Engine(model, n_ctx=512, stream=False, n_threads=2) as e:
        ref = [e.generate(p, n, clear_kv=c).text for p, n, c in turns]
    s = Proc(["-m", str(model), "--session", "--quiet", "-c", "512", "-t", "2", "--cache-mb", "0"])
    s.until(Ready)
    for i, (p, n, c) in enumerate(turns):
        s.send({"cmd": "generate", "id": i, "prompt": p, "n_predict": n, "clear_kv": c})
    got = [s.until(Done)[0].text for _ in turns]
    s.p.stdin.close()  # EOF = close
    assert s.p.wait(timeout=30) == 0
    assert got == ref


def test_session_fatal_error_on_bad_model(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"nope")
    p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(bad), "--session"],
                       input="", capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    r = parse_line(p.stdout.strip())
    assert isinstance(r, Error) and r.fatal is True and "GGUF" in r.msg
    assert "Traceback" not in p.stderr


def test_session_socket_broadcast_and_requests(model, tmp_path):
    """--session-socket: every stdout line is broadcast on the Unix socket, requests from a socket
    client run, stdin EOF does not end the session, a client's close does."""
    import os
    import socket
    import time

    sp = str(tmp_path / "s.sock")
    s = Proc(["-m", str(model), "--session", "--quiet", "-c", "256", "--session-socket", sp])
    s.until(Ready)
    for _ in range(100):
        if os.path.exists(sp):
            break
        time.sleep(0.05)
    c = socket.socket(socket.AF_UNIX)
    c.connect(sp)
    f = c.makefile("rwb")
    got = []
    f.write(json.dumps({"cmd": "generate", "id": 9, "prompt": "hi", "n_predict": 3}).encode() + b"\n")
    f.flush()
    while True:
        ln = f.readline().decode().rstrip("\n")
        got.append(parse_line(ln))
        if isinstance(got[-1], Done):
            break
    assert any(isinstance(r, Ready) for r in got) and got[-1].id == 9 and got[-1].tokens == 3
    d, _ = s.until(Done)  # the same turn on stdout
    assert d.text == got[-1].text
    # EOF on stdin does not end a socket session: a request left without its newline runs at EOF,
    # and a socket request sent after its answer runs too (a close at EOF would be queued before it)
    s.p.stdin.write('{"cmd": "generate", "id": 11, "prompt": "hi", "n_predict": 2}')
    s.p.stdin.close()
    d, _ = s.until(Done)
    assert d.id == 11
    f.write(json.dumps({"cmd": "generate", "id": 12, "prompt": "hi", "n_predict": 2}).encode() + b"\n")
    f.flush()
    while True:
        ln = f.readline().decode()
        assert ln, "the session ended at EOF on stdin"
        if isinstance(r := parse_line(ln.rstrip("\n")), Done) and r.id == 12:
            break
    assert s.p.poll() is None
    f.write(b'{"cmd":"close"}\n')
    f.flush()
    assert s.p.wait(timeout=30) == 0
    c.close()


def test_session_survives_read_error(model):
    """An expert read that fails (injected EIO on the 3rd read) aborts that generation with a
    non-fatal BMOE_ERROR; the next request works and matches a clean run."""
    import os

    env = dict(os.environ, BMOE_INJECT_READ_ERROR="3")
    p = subprocess.Popen([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "--session", "--quiet",
                          "-c", "256", "--cache-mb", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    req = [{"cmd": "generate", "id": 1, "prompt": "Hello", "n_predict": 6},
           {"cmd": "generate", "id": 2, "prompt": "Hello", "n_predict": 6}]
    out, err = p.communicate("\n".join(json.dumps(r) for r in req) + "\n", timeout=60)
    assert p.returncode == 0 and "Traceback" not in err
    recs = [parse_line(ln) for ln in out.splitlines()]
    errs = [r for r in recs if isinstance(r, Error)]
    dones = [r for r in recs if isinstance(r, Done)]
    assert len(errs) == 1 and errs[0].id == 1 and errs[0].fatal is False and "injected" in errs[0].msg
    assert len(dones) == 1 and dones[0].id == 2 and dones[0].tokens == 6
    with Engine(model, n_ctx=256, stream=False) as e:
        assert e.generate("Hello", 6).text == dones[0].text
