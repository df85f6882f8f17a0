"""Follow an audit log like ``tail -F`` in a thread (moe-cache-reference.md "Audit log").

:class:`AuditTail` reads ``path`` from its start and then every ``poll_s`` seconds:

* only complete lines count: a last line without its newline waits for the rest;
* rotation (the path now names another file: inode/device changed, or it was deleted and
  re-created) is detected: the old file is read to its end first, then the new one from its
  start, so no record is lost or repeated;
* truncation (the file got shorter than what was read, or its first line changed: truncated and
  refilled between two polls) restarts from the file's new start;
* a missing file is waited for (state ``waiting``);
* records go through :class:`bmoe_top.parsers.audit.AuditRuns`: several pids are told apart,
  a corrupt line is counted with its line number and skipped.

:class:`AuditState` is the plain-Python state (no Textual) the screen renders under ``lock``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bmoe_top.parsers.audit import COUNTERS, AuditRecord, AuditRuns

__all__ = ["AuditState", "AuditTail"]

_CHUNK = 1 << 20


@dataclass
class AuditState:
    """What the audit attach screen shows. Read under ``lock``; ``version`` bumps on change.

    ``runs``: the records grouped by process run. ``timeline``: one entry per record, oldest
    first: ``(epoch seconds or None, pid, event, counters dict)`` for the counters-over-time
    view. ``status``: ``waiting`` (no file yet), ``ok``, ``error``; ``detail`` one line.
    ``n_rotations``/``n_truncations``: how often the file was replaced / cut.
    ``bad``: (file generation, line number, message) of corrupt lines (all counted in
    ``n_bad``; the newest 200 kept)."""

    path: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    version: int = 0
    status: str = "waiting"
    detail: str = ""
    runs: AuditRuns = field(default_factory=AuditRuns)
    timeline: list = field(default_factory=list)
    n_rotations: int = 0
    n_truncations: int = 0
    n_bad: int = 0
    bad: list = field(default_factory=list)
    generation: int = 0
    bytes_read: int = 0

    def summary(self) -> dict[str, Any]:
        """The numbers the screen shows, JSON-ready: per run its pid, model, status, counters,
        hit %, requests table, per-layer hit % and resident experts."""
        with self.lock:
            runs = []
            for run in self.runs.runs:
                c = run.counters()
                h, m = c.get("hits"), c.get("misses")
                load = run.load.data if run.load else {}
                model = load.get("model") if isinstance(load.get("model"), dict) else {}
                cache = load.get("cache") if isinstance(load.get("cache"), dict) else {}
                per_layer = {}
                for il, (lh, lhp, lm) in sorted(run.layer_hits().items()):
                    per_layer[str(il)] = None if lh + lm == 0 else 100.0 * lh / (lh + lm)
                runs.append({
                    "pid": run.pid,
                    "state": "exited" if run.exited else ("ready" if run.ready else "loading"),
                    "first_line": run.first_lineno,
                    "model": model.get("name") or model.get("path"),
                    "n_layer": model.get("n_layer"),
                    "cache_slots": cache.get("slots"), "cache_prefilled": cache.get("prefilled"),
                    "counters": c,
                    "hit_pct": None if h is None or m is None or h + m == 0 else 100.0 * h / (h + m),
                    "requests": [_req_row(r) for r in run.requests],
                    "layer_hit_pct": per_layer,
                    "resident": {str(k): v for k, v in sorted(run.resident().items())},
                    "perf": run.exit.data.get("perf") if run.exit else None,
                })
            return {
                "path": self.path, "status": self.status, "detail": self.detail,
                "records": self.runs.n_records, "bad_lines": self.n_bad,
                "bad": [{"generation": g, "line": n, "error": m} for g, n, m in self.bad[-20:]],
                "rotations": self.n_rotations, "truncations": self.n_truncations,
                "pids": self.runs.pids(), "runs": runs,
            }


def _req_row(r: AuditRecord) -> dict[str, Any]:
    d = r.data
    hits, misses = d.get("req_hits"), d.get("req_misses")
    return {
        "line": r.lineno, "time": r.time, "slot": d.get("slot"), "task": d.get("task"),
        "n_prompt": d.get("n_prompt"), "n_gen": d.get("n_gen"),
        "t_prompt_ms": d.get("t_prompt_ms"), "t_gen_ms": d.get("t_gen_ms"),
        "gen_tok_s": (1000.0 * d["n_gen"] / d["t_gen_ms"]
                      if isinstance(d.get("n_gen"), int) and isinstance(d.get("t_gen_ms"), (int, float))
                      and d["t_gen_ms"] > 0 else None),
        "req_hits": hits, "req_hits_profile": d.get("req_hits_profile"), "req_misses": misses,
        "req_bytes_upload": d.get("req_bytes_upload"), "req_bytes_cpu": d.get("req_bytes_cpu"),
        "hit_pct": (100.0 * hits / (hits + misses) if isinstance(hits, int) and isinstance(misses, int)
                    and hits + misses > 0 else None),
    }


class AuditTail(threading.Thread):
    """Daemon thread following ``path`` into ``state`` every ``poll_s`` seconds.

    :meth:`poll_once` does one round synchronously (read to the current end, handle rotation
    and truncation) and returns the number of records added; the headless twin and tests use
    it directly without starting the thread."""

    def __init__(self, path: str | os.PathLike, state: AuditState | None = None, poll_s: float = 0.2):
        super().__init__(name="bmoe-audit-tail", daemon=True)
        self.path = os.fspath(path)
        self.state = state if state is not None else AuditState(path=self.path)
        if not self.state.path:
            self.state.path = self.path
        self.poll_s = poll_s
        self._stop_ev = threading.Event()
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._lineno = 0
        self._head = b""  # first complete line of the current file (truncate-and-refill check)

    def stop(self) -> None:
        self._stop_ev.set()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ------------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._set_status("error", f"cannot open {self.path}: {exc.strerror or exc}")
            return False
        st = os.fstat(fd)
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        with self.state.lock:
            self.state.generation += 1
        return True

    def _read_available(self) -> int:
        """Read from the open file to its current end; returns records added."""
        added = 0
        assert self._fd is not None
        while True:
            chunk = os.pread(self._fd, _CHUNK, self._offset)
            if not chunk:
                break
            self._offset += len(chunk)
            with self.state.lock:
                self.state.bytes_read += len(chunk)
            data = self._partial + chunk
            end = data.rfind(b"\n")
            if end < 0:
                self._partial = data
                continue
            self._partial = data[end + 1:]
            added += self._feed(data[: end + 1].split(b"\n")[:-1])
            if len(chunk) < _CHUNK:
                break
        return added

    def _feed(self, lines: list[bytes]) -> int:
        added = 0
        st = self.state
        with st.lock:
            for line in lines:
                self._lineno += 1
                if self._lineno == 1:
                    self._head = line
                rec = st.runs.feed_line(line, self._lineno)
                if rec is not None:
                    added += 1
                    st.timeline.append((rec.ts, rec.pid, rec.event, {k: rec.counters.get(k) for k in COUNTERS}))
                elif line.strip():
                    st.n_bad += 1
                    ln, msg = st.runs.bad[-1]
                    st.bad.append((st.generation, ln, msg))
                    del st.bad[:-200]
            if added or lines:
                st.version += 1
        return added

    def _replaced_or_truncated(self) -> str | None:
        """``rotated``, ``truncated`` or ``None``, comparing the path and the open file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # deleted, not yet re-created: keep reading the old file
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != self._ident:
            return "rotated"
        size = os.fstat(self._fd).st_size
        if size < self._offset:
            return "truncated"
        if self._head:
            first = os.pread(self._fd, len(self._head) + 1, 0)
            if first != self._head + b"\n":
                return "truncated"
        return None

    def poll_once(self) -> int:
        """One round; returns the number of records added."""
        if self._fd is None:
            if not self._open():
                with self.state.lock:
                    if self.state.status != "error":
                        self.state.status, self.state.detail = "waiting", f"waiting for {self.path}"
                return 0
            self._set_status("ok", "")
        added = 0
        change = self._replaced_or_truncated()
        if change == "rotated":
            added += self._read_available()  # the old file's last records first
            if self._partial:
                self._count_partial_lost("rotation")
            self.close()
            with self.state.lock:
                self.state.n_rotations += 1
            if not self._open():
                return added
        elif change == "truncated":
            if self._partial:
                self._count_partial_lost("truncation")
            with self.state.lock:
                self.state.n_truncations += 1
                self.state.generation += 1
            self._offset, self._partial, self._lineno, self._head = 0, b"", 0, b""
        added += self._read_available()
        return added

    def _count_partial_lost(self, why: str) -> None:
        with self.state.lock:
            self.state.n_bad += 1
            self.state.bad.append((self.state.generation, self._lineno + 1,
                                   f"incomplete last line dropped at {why} ({len(self._partial)} bytes)"))
            self.state.version += 1
        self._partial = b""

    def _set_status(self, status: str, detail: str) -> None:
        with self.state.lock:
            if (self.state.status, self.state.detail) != (status, detail):
                self.state.status, self.state.detail = status, detail
                self.state.version += 1

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set():
                try:
                    self.poll_once()
                except OSError as exc:
                    self._set_status("error", f"{self.path}: {exc.strerror or exc}")
                    self.close()
                self._stop_ev.wait(self.poll_s)
        finally:
            self.close()


def read_to_end(path: str | os.PathLike) -> AuditState:
    """Read an audit file to its current end (complete lines only) and return the state."""
    tail = AuditTail(path)
    try:
        tail.poll_once()
    finally:
        tail.close()
    return tail.state


def _now() -> float:
    return time.time()
