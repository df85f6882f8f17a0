"""Launch a runtime child that speaks the session protocol and drive it over pipes.

``ChildSession(argv)`` (sinks from :func:`bmoe_top.tui.feed.bind`, or given directly) starts ``argv`` (e.g.
``bmoe-run --session --progress`` or the C++ ``bmoe-cli --session --progress``):

- in its own process group (``start_new_session``), so closing kills the whole group and a
  terminal signal to bmoe-top never reaches it directly;
- stdin a pipe (never the TTY: a child that inherits the terminal can be stopped by
  SIGTTIN or steal keystrokes), written by a writer thread so a child that stops reading
  never blocks the UI;
- stdout and stderr pipes drained all the time by two reader threads (an unread stderr
  pipe deadlocks the child once it fills), ``os.read`` in 64 KiB chunks, lines split
  here (a line of megabytes is fine); the stdout lines of one chunk are one batch, per-token
  lines held up to ``hold_s`` (:class:`~bmoe_top.tui.sources.live.LineBatch`);
- ``PYTHONUNBUFFERED=1`` in its environment (line-flushed output from Python children);
- on Linux, the kernel kills it when bmoe-top dies without a chance to close it (SIGKILL, SIGQUIT,
  a crash of the interpreter: ``PR_SET_PDEATHSIG``), so no path that ends bmoe-top leaves it
  running with PID 1 as its parent. The signal follows the thread that started the child:
  :meth:`ChildSession.start` sets it only from the main thread (bmoe-top's, which lives as long as
  the process); the child's own children are not covered by it (``close`` ends the whole group).

stdout lines are parsed with ``bmoe_top.parsers.bmoe_lines.parse_line`` (a protocol record
after other text on the same line still yields the record) and each record goes to
``on_record(record, t)``; stderr lines go to ``on_stderr(line, t)`` and ``stderr_log``; state
changes and problems go to ``on_event(event)`` (:mod:`bmoe_top.tui.sources.events`).
At EOF a last line without newline is reported as truncated (a problem with its line
number); a child that exits while a turn is in flight (no ``BMOE_DONE``), before
``BMOE_READY`` without being asked to close, or with a non-zero status is "aborted" with its
exit code. ``close(timeout)`` sends ``close``, closes stdin, waits, then SIGTERM and SIGKILL
to the whole group; the child is always reaped (no zombie) and its group killed (no orphan).

:func:`runtime_wait_env` is the environment the bundled runtime gets (``bmoe-top`` with no
command, ``make run``): ``OMP_WAIT_POLICY=PASSIVE`` when other processes crowd the cores
(:func:`crowded`), where llama.cpp's spinning OpenMP threads decode 15-40x slower (docs/runtime.md
"Threads"), unless the user set how libgomp waits.

No Textual import. Protocol: docs/telemetry.md "Session mode".
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from bmoe_top.parsers.textio import LineSplitter
from bmoe_top.tui.sources.events import FINAL_STATES, Exited, LiveState
from bmoe_top.tui.sources.live import MAX_LINE_CHARS, InputWait, LineBatch, LiveBase

_CHUNK = 65536

#: libgomp's variables for how its threads wait at a barrier: a user's own setting is kept.
OMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def crowded(loadavg: str, cores: int) -> str | None:
    """Why the cores are crowded, in words (``load 6.1 on 2 cores``), or None: the 1-minute load
    average, or the processes running now besides the caller, at least ``cores``. ``loadavg``:
    the text of ``/proc/loadavg`` (``0.52 0.58 0.59 3/345 12345``); text it cannot read is no
    crowd."""
    parts = loadavg.split()
    try:
        load1 = float(parts[0])
        running = int(parts[3].split("/")[0]) - 1  # the reader itself is running
    except (IndexError, ValueError):
        return None
    if load1 >= cores:
        return f"load {load1:.1f} on {cores} core{'s' if cores != 1 else ''}"
    if running >= cores:
        return f"{running} other processes running on {cores} core{'s' if cores != 1 else ''}"
    return None


def runtime_wait_env(environ: Mapping[str, str], loadavg: str, cores: int) -> dict[str, str]:
    """The environment added for the bundled runtime: ``OMP_WAIT_POLICY=PASSIVE`` when
    :func:`crowded` says the cores are and ``environ`` sets none of :data:`OMP_WAIT_VARS`, else
    nothing (with the cores to itself libgomp's brief spin is 4.7x faster: docs/runtime.md
    "Threads")."""
    if any(k in environ for k in OMP_WAIT_VARS) or crowded(loadavg, cores) is None:
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def machine_load() -> tuple[str, int]:
    """(``/proc/loadavg``'s text, or "" where there is none; the cores this process may run on)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            text = f.read()
    except OSError:
        text = ""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return text, cores
_LIVE: weakref.WeakSet[ChildSession] = weakref.WeakSet()


def _kill_all_at_exit() -> None:
    for s in list(_LIVE):
        s.kill()


atexit.register(_kill_all_at_exit)


class ChildSession(LiveBase):
    """A session-protocol child process (see the module docstring).

    Args:
        argv: the command line (list of str). ``FileNotFoundError``/``PermissionError`` at
            ``start()`` become state "failed" with a one-line message (never a traceback).
        on_record, on_stderr, on_event, recorder, ready_timeout_s, stall_after_s: see
            :class:`~bmoe_top.tui.sources.live.LiveBase`.
        env: extra environment variables (added to ``os.environ``; ``PYTHONUNBUFFERED=1``
            is always set).
        cwd: working directory of the child.

    Usage::

        s = ChildSession(["bmoe-run", "--session", "--progress"])
        feed = bind(s, run)  # bmoe_top.tui.feed.bind
        s.start(); s.wait_state("ready", 60); s.generate("Hello", 32); ...; s.close()
    """

    kind = "child"

    def __init__(self, argv: Sequence[str], on_record: Any = None, *, env: dict[str, str] | None = None,
                 cwd: str | None = None, **kw: Any) -> None:
        super().__init__(on_record, **kw)
        self.argv = [str(a) for a in argv]
        self._env = dict(os.environ)
        if env:
            self._env.update(env)
        self._env["PYTHONUNBUFFERED"] = "1"
        self._cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self._readers: list[threading.Thread] = []
        self._writer: threading.Thread | None = None
        self._outq: queue.Queue[bytes | None] = queue.Queue()
        self._close_requested = False
        self._reaped = threading.Event()
        self._eof = {"stdout": threading.Event(), "stderr": threading.Event()}
        self._reap_lock = threading.RLock()  # re-entrant: kill() may run in a signal handler during close()
        self._stdout_lineno = 0

    def describe(self) -> str:
        return "child: " + " ".join(self.argv)

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> ChildSession:
        """Spawn the child and its reader/writer/waiter threads. Returns self."""
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                start_new_session=True,
                close_fds=True,
                env=self._env,
                cwd=self._cwd,
                preexec_fn=_die_with_parent(),
            )
        except OSError as e:
            self._set_state(LiveState.FAILED, f"cannot start {self.argv[0]}: {e.strerror or e}")
            self._reaped.set()
            return self
        self.pid = self.proc.pid
        _LIVE.add(self)
        self._set_state(LiveState.LOADING, f"loading (pid {self.pid})")
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            th = threading.Thread(target=self._read, args=(name, stream.fileno()), name=f"child-{name}", daemon=True)
            th.start()
            self._readers.append(th)
        self._writer = threading.Thread(target=self._write_loop, name="child-stdin", daemon=True)
        self._writer.start()
        threading.Thread(target=self._wait_loop, name="child-wait", daemon=True).start()
        self._start_watchdog()
        return self

    def send(self, obj: dict[str, Any]) -> bool:
        """Queue one JSON request line for the child's stdin. False when the child is gone
        or stdin was closed (the request is not sent)."""
        if self.proc is None or self._state in FINAL_STATES:
            return False
        self._put(obj)
        return True

    def _put(self, obj: dict[str, Any]) -> None:
        data = orjson.dumps(obj) + b"\n"
        self._record("stdin", data[:-1].decode("utf-8", "replace"))
        self._outq.put(data)

    def close(self, timeout: float = 3.0, term_timeout: float = 2.0) -> int | None:
        """End the session: send ``cancel`` (if a turn is in flight) and ``close``, close stdin,
        wait up to ``timeout`` s for the child
        to exit, then SIGTERM the whole group, wait ``term_timeout`` s, then SIGKILL it.
        Returns the exit code (negative = killed by that signal), or None if never started."""
        if self.proc is None:
            return None
        with self._lock:
            self._close_requested = True
            busy = self._state == LiveState.GENERATING
            ev = None if self._state in FINAL_STATES else self._transition(LiveState.CLOSING, "closing")
        self._emit(ev)
        if not self._reaped.is_set():
            if busy:
                self._put({"cmd": "cancel"})  # stop the turn within a decode step, then close
            self._put({"cmd": "close"})
            self._outq.put(None)  # writer closes stdin after the queue drains (EOF = close too)
            if not self._reaped.wait(timeout):
                self._signal_group(signal.SIGTERM)
                if not self._reaped.wait(term_timeout):
                    self._signal_group(signal.SIGKILL)
                    self._reaped.wait(5.0)
        self._finish()
        return self._exit_code

    def kill(self) -> None:
        """SIGKILL the whole group now (used at interpreter exit and on fatal signals)."""
        if self.proc is None or self._reaped.is_set():
            return
        with self._lock:
            self._close_requested = True
        self._signal_group(signal.SIGKILL)

    # ---- threads --------------------------------------------------------------------
    def _read(self, name: str, fd: int) -> None:
        split = LineSplitter(max_line=MAX_LINE_CHARS)
        is_out = name == "stdout"
        batch = LineBatch(lambda held: self._held_lines(held, self._stdout_line), self.hold_s)
        more = InputWait(fd)
        t = time.time()
        n_probs = 0
        try:
            while True:
                wait = batch.wait_s()
                if wait is not None and not more.wait(wait):
                    batch.flush()  # held long enough: hand the per-token lines over
                    continue
                try:
                    chunk = os.read(fd, _CHUNK)
                except OSError:
                    break
                if not chunk:
                    break
                t = time.time()
                lines = split.feed(chunk)
                if is_out:
                    batch.add(lines, t)
                else:
                    for line in lines:
                        self._stderr_line(line, t)
                if len(split.problems) > n_probs:
                    batch.flush()  # the lines before the problem first
                    for p in split.problems[n_probs:]:
                        self._problem(p.lineno, p.text, f"{name}: {p.reason}", name)
                    n_probs = len(split.problems)
            batch.flush()
            tail = split.flush()
            if tail:
                self._line(is_out, tail, t)
                lineno = self._stdout_lineno if is_out else self._stderr_n
                self._problem(lineno, tail, f"{name} ended mid-line ({len(tail)} chars without a newline)", name)
        except Exception as e:  # noqa: BLE001 - a reader must keep the pipe drained: report and drain
            self._problem(0, "", f"{name} reader failed: {e!r}", name)
            self._drain(fd)
        finally:
            self._eof[name].set()

    def _line(self, is_out: bool, line: str, t: float) -> None:
        if is_out:
            self._stdout_line(line, t)
        else:
            self._stderr_line(line, t)

    def _stdout_line(self, line: str, t: float) -> None:
        self._stdout_lineno += 1
        self._protocol_line(line, t, "stdout")

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            while os.read(fd, _CHUNK):
                pass
        except OSError:
            pass

    def _write_loop(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        while True:
            data = self._outq.get()
            if data is None:
                break
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError:  # EPIPE: the child has gone; the waiter reports it
                break
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _wait_loop(self) -> None:
        assert self.proc is not None
        pid = self.proc.pid
        # wait for the exit WITHOUT reaping, so the pid (= process group id) cannot be reused
        # while we kill leftovers in its group
        while True:
            try:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        # let the readers finish what is already in the pipes (leftover group members may
        # still hold them open: give them a moment, then kill the group)
        for ev in self._eof.values():
            ev.wait(1.0)
        self._signal_group(signal.SIGKILL)
        with self._reap_lock:
            code = self.proc.wait()
            self._reaped.set()
        for ev in self._eof.values():
            ev.wait(2.0)
        self._outq.put(None)
        self._finish_state(code)

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with self._reap_lock:
            if self._reaped.is_set():
                return  # the pid may belong to someone else now
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _finish_state(self, code: int) -> None:
        with self._lock:
            self._exit_code = code
            in_flight = self._in_flight_set
            never_ready = self._ready is None and self._turns_done == 0  # a finished one-shot run needs no READY
            asked = self._close_requested
        how = f"exit code {code}" if code >= 0 else f"killed by {_signame(-code)}"
        if in_flight:
            state, msg = LiveState.ABORTED, f"aborted: {how} during a turn (no BMOE_DONE)"
        elif never_ready and not asked:
            why = self._last_error or next((x for x in reversed(self.stderr_log) if x.strip()), "")
            state, msg = LiveState.ABORTED, f"aborted: {how} before BMOE_READY" + (f": {why[:200]}" if why else "")
        elif code != 0 and not asked:
            state, msg = LiveState.ABORTED, f"aborted: {how}"
        else:
            state, msg = LiveState.EXITED, f"exited ({how})"
        self._set_state(state, msg)
        self._emit(Exited(code, state, msg))
        self._stop.set()
        _LIVE.discard(self)

    def _finish(self) -> None:
        for th in self._readers:
            th.join(timeout=2.0)
        self._stop.set()


def _die_with_parent() -> Callable[[], None] | None:
    """For ``Popen(preexec_fn=...)``: in the child, before exec, ask the kernel for SIGKILL when
    this process's main thread ends (``PR_SET_PDEATHSIG``), and end at once if it already has.
    None off Linux and off the main thread (the signal would follow a thread that may end first).
    The C function is looked up here, in the parent: the child only calls it."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # bmoe-top died between fork and prctl
            os._exit(1)

    return in_child


_PR_SET_PDEATHSIG = 1


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
