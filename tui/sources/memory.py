"""The memory watcher behind ``bmoe-top attach --pid PID`` and ``--gguf FILE`` (docs/memory.md).
No Textual.

:class:`MemoryWatcher` (a daemon thread) reads, every ``interval`` seconds:

* with ``pid``: which GGUF model the process maps or holds open (``/proc/PID/maps`` and
  ``/proc/PID/fd``; a split model by its first shard; the largest when it uses several), again
  every :data:`REDISCOVER_S` seconds, and whether it reads the model with ``O_DIRECT``
  (``/proc/PID/fdinfo``); with ``gguf``: that file, whatever process uses it;
* the page-cache residency of every expert slice, of the dense tensors and of each file
  (:class:`~bmoe_top.tui.sources.residency.ModelSampler`: never reading the model, never changing
  what is resident), spaced out when one sample costs more than :data:`CPU_BUDGET` of a core at
  the interval (a note says how often it is read then);
* the process's faults, reads and RSS split, the machine's memory and pressure, the cgroup's
  limit and usage (:mod:`bmoe_top.tui.sources.procfs`); with a ``poller`` (``--metrics``), the
  server's generated-token counter, scraped right after the process's counters so the two pair.

Each reading goes to the event sink as :class:`~bmoe_top.tui.sources.events.MemorySampled`
(``bmoe_top.tui.feed.memory`` writes it into the run model), with
:class:`~bmoe_top.tui.sources.events.FilesWatched` when the model changes,
:class:`~bmoe_top.tui.sources.events.WatchStateChanged` and
:class:`~bmoe_top.tui.sources.events.MemoryNote` (one line each: a figure the kernel refuses, a
file replaced or truncated, a process that exited). Nothing here raises into the thread: a
process that is gone, a file replaced, truncated or damaged, a permission refused is a state and
a line, and the last good reading stays the caller's. With a ``recorder`` every record is also
written as a ``memory`` entry (:mod:`bmoe_top.parsers.memory_sample`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bmoe_top.parsers.gguf_layout import SPLIT_RE, ModelError, ModelLayout
from bmoe_top.parsers.memory_sample import MemorySample, ProcessFigures, SampleDecoder, SampleEncoder, WatchedFiles
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.parsers.textio import Problem
from bmoe_top.tui.sources.events import (
    FilesWatched,
    MemoryNote,
    MemorySampled,
    ProblemFound,
    RecordingFailed,
    ScrapeState,
    Sinks,
    WatchState,
    WatchStateChanged,
)
from bmoe_top.tui.sources.metrics_poll import MetricsPoller
from bmoe_top.tui.sources.procfs import CgroupReader, ProcessGone, ProcReader, read_text, system_figures
from bmoe_top.tui.sources.recorder import Recorder
from bmoe_top.tui.sources.residency import ModelSampler, ResidencyError, open_model

__all__ = ["CPU_BUDGET", "REDISCOVER_S", "MemoryPlayer", "MemoryWatcher", "ModelCandidate", "find_models"]

#: Seconds between two looks at which model the process maps (a server may load another).
REDISCOVER_S = 5.0
#: The share of one core residency sampling may take: the sample of the map is spaced out when it
#: costs more than this at the interval (benchmarks/bench_residency.py measures the cost).
CPU_BUDGET = 0.01


@dataclass(frozen=True, slots=True)
class ModelCandidate:
    """A GGUF model a process uses: ``path`` (its first shard, as the process named it), the
    path to open it by (``open_path``: the same, or ``/proc/PID/map_files/...`` when the path now
    names another file), its device and inode, its ``size`` (all shards), whether the process
    ``mapped`` it or only holds it open, and ``replaced``: the path no longer names that file."""

    path: str
    open_path: str
    dev: int
    ino: int
    size: int
    mapped: bool
    replaced: bool


def _is_gguf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _first_shard(path: str) -> str:
    m = SPLIT_RE.match(os.path.basename(path))
    if m is None:
        return path
    return os.path.join(os.path.dirname(path), f"{m.group('prefix')}-00001-of-{m.group('count')}.gguf")


def find_models(reader: ProcReader) -> list[ModelCandidate]:
    """The GGUF models process ``reader.pid`` maps or holds open, largest first (a split model
    once, by its first shard). Raises :class:`~bmoe_top.tui.sources.procfs.ProcessGone`."""
    seen: dict[tuple[int, int], ModelCandidate] = {}
    found: list[tuple[str, str, int, int, bool]] = []  # path, open path, dev, ino, mapped
    for m in reader.mapped_files():
        dev = os.makedev(*m.dev)
        found.append((m.path, f"{reader.dir}/map_files/{m.start:x}-{m.end:x}", dev, m.inode, True))
    for f in reader.open_files():
        found.append((f.path.removesuffix(" (deleted)"), f"{reader.dir}/fd/{f.fd}", f.dev, f.ino, False))
    for path, alt, dev, ino, mapped in found:
        if (dev, ino) in seen:
            if mapped and not seen[(dev, ino)].mapped:
                seen[(dev, ino)] = replace(seen[(dev, ino)], mapped=True)
            continue
        try:
            st = os.stat(path)
            same = (st.st_dev, st.st_ino) == (dev, ino)
        except OSError:
            same = False
        open_path = path if same else alt
        if not _is_gguf(open_path):
            continue
        size = os.stat(open_path).st_size if not same else st.st_size
        seen[(dev, ino)] = ModelCandidate(path, open_path, dev, ino, size, mapped, not same)
    models: dict[str, ModelCandidate] = {}
    sizes: dict[str, int] = {}
    for c in seen.values():
        key = _first_shard(c.path)
        sizes[key] = sizes.get(key, 0) + c.size
        if key == c.path or key not in models:
            models[key] = c
    out = []
    for key, c in models.items():
        if key != c.path:  # only a later shard is in use: open the set by its first shard
            out.append(replace(c, path=key, open_path=key, size=sizes[key], replaced=False))
        else:
            out.append(replace(c, size=sizes[key]))
    return sorted(out, key=lambda c: -c.size)


class MemoryWatcher(threading.Thread):
    """Daemon thread: one reading every ``interval`` seconds (see the module docstring).
    ``pid`` and/or ``gguf`` say what to watch (at least one); ``method`` is the residency
    sampler's (``auto``, ``cachestat``, ``mincore``); ``proc_root`` is ``/proc``; ``cpu_budget``
    the share of a core the map's sampling may take (:data:`CPU_BUDGET`).
    :meth:`sample_once` reads once in the caller's thread (headless, tests); :meth:`stop` ends
    the loop within one wait, :meth:`close` releases the files."""

    def __init__(self, *, pid: int | None = None, gguf: str | None = None, interval: float = 1.0,
                 poller: MetricsPoller | None = None, recorder: Recorder | None = None, method: str = "auto",
                 proc_root: str = "/proc", on_event: Callable[[Any], None] | None = None,
                 cpu_budget: float = CPU_BUDGET) -> None:
        if pid is None and gguf is None:
            raise ValueError("a memory watcher needs a pid or a GGUF file")
        super().__init__(name="bmoe-memory", daemon=True)
        self.pid = pid
        self.gguf = gguf
        self.interval = max(0.05, float(interval))
        self.poller = poller
        self.recorder = recorder
        self.method = method
        self.proc_root = proc_root
        self.sinks = Sinks("MemoryWatcher")
        self.sinks.on_event = on_event
        self.lock = threading.RLock()
        self.state = WatchState.STARTING
        self.detail = ""
        self.files: WatchedFiles | None = None
        self.samples = 0
        self._proc = ProcReader(pid, proc_root) if pid is not None else None
        self._gone = False
        self._cgroup: CgroupReader | None = None
        self._sampler: ModelSampler | None = None
        self._layout: ModelLayout | None = None
        self._model_key: tuple[int, int] | None = None  # dev, inode of the first shard sampled
        self._discovered_at = -1e9
        self._notes: dict[str, str] = {}
        self._encoder = SampleEncoder()
        self._stop_ev = threading.Event()
        self._tick_lock = threading.Lock()
        self.cpu_budget = cpu_budget
        self._cost: float | None = None  # seconds of one residency sample (smoothed)
        self._next_residency = 0.0  # monotonic time of the next one

    # -- wiring -----------------------------------------------------------------------------------
    def connect(self, on_event: Callable[[Any], None]) -> None:
        self.sinks.on_event = on_event

    def describe(self) -> str:
        what = [f"pid {self.pid}"] if self.pid is not None else []
        if self.gguf is not None:
            what.append(self.gguf)
        return "memory: " + ", ".join(what)

    def stop(self) -> None:
        self._stop_ev.set()

    def close(self) -> None:
        with self._tick_lock:
            if self._sampler is not None:
                self._sampler.close()
                self._sampler = None

    # -- events -------------------------------------------------------------------------------------
    def _set_state(self, state: WatchState, detail: str = "") -> None:
        detail = sanitize(detail)
        with self.lock:
            if (state, detail) == (self.state, self.detail):
                return
            self.state, self.detail = state, detail
        self.sinks.event(WatchStateChanged(state, detail))

    def _note(self, key: str, text: str, t: float) -> None:
        """A line about ``key``, sent when it differs from the last one about it (so a refusal
        every second is said once)."""
        text = sanitize(text)
        if self._notes.get(key) == text:
            return
        self._notes[key] = text
        self._record(SampleEncoder.note(text, t), t)
        self.sinks.event(MemoryNote(t, key, text))

    def _record(self, line: str, t: float) -> None:
        rec = self.recorder
        if rec is not None and not rec.write("memory", line, t):
            self.sinks.event(RecordingFailed(rec.path, rec.error or "recording stopped"))

    # -- the model ------------------------------------------------------------------------------------
    def _open(self, open_path: str, shown: str, key: tuple[int, int], t: float, pid: int | None,
              direct: bool) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        layout, sampler = open_model(open_path, self.method)
        plan = sampler.plan
        paths = (shown, *plan.paths[1:]) if open_path != shown else plan.paths
        files = WatchedFiles(paths=tuple(paths), sizes=plan.sizes, page_size=plan.page_size, n_layer=plan.n_layer,
                             n_expert=plan.n_expert, slice_pages=plan.slice_pages, dense_pages=plan.dense_pages,
                             file_pages=tuple(plan.shard_pages), arch=layout.arch, name=layout.name,
                             method=sampler.method, pid=pid, direct_io=direct)
        self._sampler, self._layout, self._model_key = sampler, layout, key
        self._cost, self._next_residency = None, 0.0
        with self.lock:
            self.files = files
        self._record(self._encoder.files(files), t)
        self.sinks.event(FilesWatched(files))

    def _direct_io(self, key: tuple[int, int]) -> int | None:
        """The descriptor on which the process reads the model with O_DIRECT, else None."""
        if self._proc is None or self._gone:
            return None
        for f in self._proc.open_files():
            if (f.dev, f.ino) == key and f.flags is not None and f.flags & os.O_DIRECT:
                return f.fd
        return None

    def _discover(self, t: float) -> None:
        """Find the process's model and (re)open it when it is not the one sampled."""
        assert self._proc is not None
        found = find_models(self._proc)
        if not found:
            if self._sampler is None:
                why = "; ".join(self._proc.denied.values()) or \
                    f"process {self.pid} ({self._proc.comm}) maps and holds open no GGUF file (yet)"
                self._set_state(WatchState.NO_MODEL, why)
            return
        c = found[0]
        if len(found) > 1:
            others = ", ".join(os.path.basename(o.path) for o in found[1:4])
            self._note("others", f"process {self.pid} also uses {others}; watching the largest, "
                                 f"{os.path.basename(c.path)} (--gguf FILE watches another)", t)
        direct = self._direct_io((c.dev, c.ino))
        if (c.dev, c.ino) != self._model_key:
            if c.replaced:
                self._note("replaced", f"{c.path} now names another file; showing the one process {self.pid} "
                                       f"loaded (inode {c.ino}), read through {c.open_path}", t)
            self._open(c.open_path, c.path, (c.dev, c.ino), t, self.pid, direct is not None)
        elif self.files is not None and self.files.direct_io != (direct is not None):
            files = replace(self.files, direct_io=direct is not None)
            with self.lock:
                self.files = files
            self._record(self._encoder.files(files), t)
            self.sinks.event(FilesWatched(files))
        if direct is not None:
            self._note("direct", f"process {self.pid} reads {os.path.basename(c.path)} with O_DIRECT (fd {direct}): "
                                 "its reads bypass the page cache, so they count as disk reads and leave no "
                                 "residency", t)

    def _check_file(self, t: float) -> None:
        """``--gguf``: open the file, or again when the path now names another file."""
        assert self.gguf is not None
        try:
            st = os.stat(self.gguf)
        except OSError as e:
            if self._sampler is None:
                raise ResidencyError(f"{self.gguf}: {e.strerror or e}") from None
            raise ResidencyError(f"{self.gguf} is gone ({e.strerror or e}): the last map is kept") from None
        key = (st.st_dev, st.st_ino)
        if key != self._model_key:
            if self._model_key is not None:
                self._note("replaced", f"{self.gguf} was replaced: watching the new file", t)
            self._open(self.gguf, self.gguf, key, t, self.pid, self._direct_io(key) is not None)

    # -- one reading ------------------------------------------------------------------------------
    def sample_once(self, paced: bool = False) -> MemorySample | None:
        """Read once (see the module docstring); returns the sample sent, None when nothing could
        be read. ``paced``: the residency map only when its pace allows (the thread's loop); else
        always. Never raises for a process, a file or a permission."""
        with self._tick_lock:
            return self._tick(paced)

    def _tick(self, paced: bool) -> MemorySample | None:
        t = time.time()
        proc = self._process(t)
        residency_ok = self._residency_files(t)
        counts = None
        now = time.monotonic()
        if residency_ok and self._sampler is not None and (not paced or now >= self._next_residency):
            try:
                counts = self._sampler.sample()
            except ResidencyError as e:
                self._file_error(str(e), t)
            if paced:
                self._pace_residency(now, time.monotonic() - now, t)
        system = system_figures(self.proc_root)
        cgroup = self._cgroup.figures() if self._cgroup is not None else None
        tokens = self._tokens()
        if counts is not None:
            self._ok()
        if counts is None and proc is None and self.files is None:
            return None
        s = MemorySample(t, counts.slices if counts else None, counts.dense if counts else None,
                         counts.files if counts else None, proc, system, cgroup, tokens)
        self.samples += 1
        self._record(self._encoder.sample(s), t)
        self.sinks.event(MemorySampled(s))
        return s

    def _pace_residency(self, now: float, cost: float, t: float) -> None:
        """The next residency sample: one interval on, or later when one sample costs more than
        :data:`CPU_BUDGET` of a core at this interval (a 17 GiB model's map costs tens of ms)."""
        self._cost = cost if self._cost is None else 0.7 * self._cost + 0.3 * cost
        every = max(self.interval, self._cost / self.cpu_budget)
        self._next_residency = now + every
        if every > self.interval * 1.5:
            shown = f"{every:.0f}" if every >= 10 else f"{every:.1f}"
            self._note("pace", f"residency sampled every {shown} s: one sample of the map costs "
                               f"{1e3 * self._cost:.0f} ms, kept under {100 * self.cpu_budget:g} % of a core; "
                               "the process figures every interval", t)
        elif "pace" in self._notes:
            self._note("pace", f"residency sampled every interval ({self.interval:g} s)", t)

    def _ok(self) -> None:
        if self.pid is not None and self._gone:
            return  # the exit stays the state; the files go on being sampled
        self._set_state(WatchState.OK, "")

    def _file_error(self, why: str, t: float) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        self._model_key = None
        self._discovered_at = -1e9  # look again next time
        self._note("file", why, t)
        self._set_state(WatchState.FILE_ERROR, why + ("; the last good map is kept" if self.files else ""))

    def _residency_files(self, t: float) -> bool:
        """Make sure the right model is open; False when there is none to sample now."""
        try:
            if self.gguf is not None:
                self._check_file(t)
            elif self._proc is not None and not self._gone and \
                    (self._sampler is None or time.monotonic() - self._discovered_at >= REDISCOVER_S):
                self._discovered_at = time.monotonic()
                self._discover(t)
        except (ResidencyError, ModelError) as e:
            self._file_error(str(e), t)
            return False
        except ProcessGone as e:
            self._exited(str(e), t)
        except OSError as e:
            self._file_error(f"{e.filename or 'a model file'}: {e.strerror or e}", t)
            return False
        return self._sampler is not None

    def _process(self, t: float) -> ProcessFigures | None:
        if self._proc is None or self._gone:
            return None
        try:
            fig = self._proc.figures()
            if self._cgroup is None:
                text = self._proc.cgroup_lines()
                try:
                    mountinfo = read_text(f"{self.proc_root}/self/mountinfo")
                except OSError:
                    mountinfo = ""
                self._cgroup = CgroupReader(text or "", mountinfo)
        except ProcessGone as e:
            self._exited(str(e), t)
            return None
        for name, why in list(self._proc.denied.items()):
            self._note(f"denied:{name}", why, t)
        return fig

    def _exited(self, why: str, t: float) -> None:
        first = self.samples == 0 and self.files is None
        self._gone = True
        if first:
            self._set_state(WatchState.ERROR, why)
            return
        more = "; its model's page cache is still shown" if self._sampler is not None else "; the last reading is kept"
        self._note("exited", why, t)
        self._set_state(WatchState.EXITED, why + more)

    def _tokens(self) -> int | None:
        p = self.poller
        if p is None:
            return None
        p.scrape_once()
        st = p.state
        with st.lock:
            if st.status != ScrapeState.OK or st.last is None:
                return None
            v = st.last.values.get("tokens_predicted")
        return int(v) if v is not None and v == v and v >= 0 else None

    def run(self) -> None:
        try:
            while not self._stop_ev.is_set():
                t0 = time.monotonic()
                self.sample_once(paced=True)
                if self.pid is not None and self._gone and self.gguf is None and self._sampler is None:
                    break  # nothing left to read
                self._stop_ev.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            self.close()



class MemoryPlayer(threading.Thread):
    """A recording's ``memory`` entries (``(t, line)``, in order) sent as the watcher's events
    (:class:`~bmoe_top.tui.sources.events.FilesWatched`, ``MemorySampled``, ``MemoryNote``; a bad
    line is a ``ProblemFound`` with its entry number, its neighbours still count), at the recorded
    pace times ``speed`` (``inf``: at once) by the thread, or all at once by :meth:`play_all`."""

    def __init__(self, entries: list[tuple[float | None, str]], speed: float = 1.0, name: str = "") -> None:
        super().__init__(name="bmoe-memory-player", daemon=True)
        self.entries = entries
        self.speed = speed
        self.source_name = name
        self.sinks = Sinks("MemoryPlayer")
        self.played = 0
        self._decoder = SampleDecoder()
        self._stop_ev = threading.Event()

    def connect(self, on_event: Callable[[Any], None]) -> None:
        self.sinks.on_event = on_event

    def stop(self) -> None:
        self._stop_ev.set()

    def _send(self, i: int, t: float | None, line: str) -> None:
        try:
            got = self._decoder.read(line)
        except ValueError as e:
            self.sinks.event(ProblemFound(Problem(i, line, sanitize(str(e))), self.source_name or "memory"))
            return
        if isinstance(got, WatchedFiles):
            self.sinks.event(FilesWatched(got))
        elif isinstance(got, MemorySample):
            self.sinks.event(MemorySampled(got))
        else:
            nt, text = got
            self.sinks.event(MemoryNote(nt if nt is not None else (t or 0.0), f"note:{i}", sanitize(text)))

    def play_all(self) -> None:
        for i, (t, line) in enumerate(self.entries, 1):
            self._send(i, t, line)
        self.played = len(self.entries)
        self.sinks.event(WatchStateChanged(WatchState.REPLAYED, f"{self.played} readings"))

    def run(self) -> None:
        if self.speed == float("inf"):
            self.play_all()
            return
        self.sinks.event(WatchStateChanged(WatchState.OK, "replaying at the recorded pace"))
        t0 = time.monotonic()
        first = next((t for t, _ in self.entries if t is not None), None)
        for i, (t, line) in enumerate(self.entries, 1):
            if t is not None and first is not None:
                due = t0 + (t - first) / self.speed
                if self._stop_ev.wait(max(0.0, due - time.monotonic())):
                    return
            self._send(i, t, line)
            self.played = i
        self.sinks.event(WatchStateChanged(WatchState.REPLAYED, f"{self.played} readings"))
