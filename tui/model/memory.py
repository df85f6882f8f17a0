"""The memory model: what the memory watcher (``attach --pid``/``--gguf``, a replayed recording)
has read, for the memory screen and its headless twin (docs/memory.md "What each number counts").
No Textual.

:class:`MemoryModel` keeps the model files watched, the newest residency map and the one before
it (churn), the newest process, system and cgroup figures and the pair before them (rates), the
notes, and a bounded history of the per-sample figures (:class:`MemoryHistory`). Every number is
defined once here (:meth:`MemoryModel.figures`) and read by the screen, the JSON document and the
doc table. Writers hold no lock of their own: every method takes the model's lock; ``version``
goes up on every change (a view polls it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from bmoe_top.parsers.memory_sample import MemorySample, WatchedFiles

__all__ = ["HISTORY_CAPACITY", "HISTORY_CHANNELS", "MemoryFigures", "MemoryHistory", "MemoryModel", "rate"]

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

#: Rows the history holds before it halves its resolution (its memory: rows x channels x 8 bytes).
HISTORY_CAPACITY = 2048
#: The per-sample figures the history keeps, in column order (see :class:`MemoryFigures`).
HISTORY_CHANNELS = ("file_share", "dense_share", "expert_share", "slices_in", "slices_out", "majflt_per_s",
                    "read_bytes_per_s", "mem_available", "rss_anon", "rss_file", "cgroup_usage", "psi_some_avg10")


def rate(new: int | None, old: int | None, dt: float) -> float | None:
    """``(new - old) / dt``; None when either is absent, ``dt`` is not positive or the counter went
    back (another process under the PID)."""
    if new is None or old is None or dt <= 0 or new < old:
        return None
    return (new - old) / dt


class MemoryHistory:
    """A bounded history of per-sample rows (unix time and :data:`HISTORY_CHANNELS`; NaN = absent).
    When :data:`HISTORY_CAPACITY` rows are held, neighbouring rows merge two by two (mean, the
    later time) and from then on every ``stride`` samples make one row: memory is fixed, the whole
    watch is covered, older rows at a coarser step. Not thread-safe: the model's lock guards it."""

    def __init__(self, capacity: int = HISTORY_CAPACITY) -> None:
        self.capacity = max(4, capacity - capacity % 2)
        self.t = np.zeros(self.capacity, dtype=np.float64)
        self.v = np.full((self.capacity, len(HISTORY_CHANNELS)), np.nan, dtype=np.float64)
        self.n = 0
        self.stride = 1
        self._acc = np.zeros(len(HISTORY_CHANNELS), dtype=np.float64)
        self._cnt = np.zeros(len(HISTORY_CHANNELS), dtype=np.int64)
        self._pending = 0
        self.samples = 0

    def add(self, t: float, row: F64) -> None:
        self.samples += 1
        ok = ~np.isnan(row)
        self._acc[ok] += row[ok]
        self._cnt[ok] += 1
        self._pending += 1
        if self._pending < self.stride:
            return
        if self.n == self.capacity:
            half = self.capacity // 2
            a, b = self.v[0:self.capacity:2], self.v[1:self.capacity:2]
            self.v[:half] = np.where(np.isnan(a), b, np.where(np.isnan(b), a, (a + b) / 2))
            self.t[:half] = self.t[1:self.capacity:2]
            self.v[half:] = np.nan
            self.n = half
            self.stride *= 2
        with np.errstate(invalid="ignore", divide="ignore"):
            self.v[self.n] = np.where(self._cnt > 0, self._acc / np.maximum(self._cnt, 1), np.nan)
        self.t[self.n] = t
        self.n += 1
        self._acc[:] = 0
        self._cnt[:] = 0
        self._pending = 0

    def column(self, name: str) -> tuple[F64, F64]:
        """(times, values) of one channel, oldest first (copies)."""
        i = HISTORY_CHANNELS.index(name)
        return self.t[:self.n].copy(), self.v[:self.n, i].copy()

    @property
    def nbytes(self) -> int:
        return int(self.t.nbytes + self.v.nbytes + self._acc.nbytes + self._cnt.nbytes)


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """What the memory view shows now (every share in [0, 1], sizes in bytes; None = not known):

    * ``file_share``: resident pages of the model's files (all shards, header included) over their
      pages; ``dense_share``: of the pages the dense tensors span; ``expert_share``: of the pages
      the expert slices span; ``slice_share``: each expert's (``[n_layer, n_expert]``, NaN in a
      layer without experts);
    * ``slices_in``/``slices_out``: experts whose resident pages rose / fell since the sample
      before (churn); ``slice_churn``: which (int8 ``[n_layer, n_expert]``: +1 rose, -1 fell, 0);
    * ``majflt_per_s``, ``read_bytes_per_s``: the process's major faults and bytes it caused to
      be read from storage, per second between the last two samples; ``faults_per_token``,
      ``read_bytes_per_token``: the same deltas over the tokens the server generated between them
      (``--metrics``; None when it generated none)."""

    file_share: float | None
    file_bytes: int | None
    dense_share: float | None
    dense_bytes: int | None
    expert_share: float | None
    slice_share: F64 | None
    slices_in: int | None
    slices_out: int | None
    slice_churn: NDArray[np.int8] | None
    majflt_per_s: float | None
    read_bytes_per_s: float | None
    tokens_per_s: float | None
    faults_per_token: float | None
    read_bytes_per_token: float | None


def _share(num: float, den: float) -> float | None:
    return None if den <= 0 else num / den


class MemoryModel:
    """See the module docstring. ``state``/``detail`` are the watcher's (strings of
    :class:`~bmoe_top.tui.sources.events.WatchState`), set by the feed."""

    def __init__(self, history_capacity: int = HISTORY_CAPACITY) -> None:
        self.lock = threading.RLock()
        self.version = 0
        self.state = "starting"
        self.detail = ""
        self.files: WatchedFiles | None = None
        self.residency: MemorySample | None = None  # the newest sample with a residency map
        self.prev_slices: I64 | None = None
        self.figures_at: MemorySample | None = None  # the newest sample with process figures
        self.prev_figures: MemorySample | None = None
        self.newest: MemorySample | None = None
        self.notes: dict[str, tuple[float | None, str]] = {}
        self.problems: list[str] = []
        self.history = MemoryHistory(history_capacity)
        #: the first major faults per token the readings gave (the diagnosis's baseline), None before
        self.first_faults_per_token: float | None = None

    def _bump(self) -> None:
        self.version += 1

    def set_state(self, state: str, detail: str) -> None:
        with self.lock:
            self.state, self.detail = state, detail
            self._bump()

    def set_files(self, files: WatchedFiles) -> None:
        """The files watched from now on; the map is kept when they are the same files, shaped
        the same (only how the process reads them changed)."""
        with self.lock:
            old = self.files
            same = old is not None and (old.paths, old.sizes, old.n_layer, old.n_expert) == \
                (files.paths, files.sizes, files.n_layer, files.n_expert)
            self.files = files
            if not same:
                self.residency = None
                self.prev_slices = None
            self._bump()

    def add_note(self, key: str, t: float | None, text: str) -> None:
        with self.lock:
            self.notes[key] = (t, text)
            self._bump()

    def add_problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)
            del self.problems[:-100]
            self._bump()

    def add_sample(self, s: MemorySample) -> None:
        """A reading: a sample without a map keeps the last map (the last good picture)."""
        with self.lock:
            w = self.files
            if s.slices is not None and w is not None and s.slices.shape == (w.n_layer, w.n_expert):
                self.prev_slices = self.residency.slices if self.residency is not None else None
                self.residency = s
            if s.proc is not None:
                self.prev_figures, self.figures_at = self.figures_at, s
            self.newest = s
            f = self._figures()
            if self.first_faults_per_token is None:
                self.first_faults_per_token = f.faults_per_token
            self.history.add(s.t, self._row(f, s))
            self._bump()

    def figures(self) -> MemoryFigures:
        with self.lock:
            return self._figures()

    def _figures(self) -> MemoryFigures:
        w, r = self.files, self.residency
        file_share = dense_share = expert_share = None
        file_bytes = dense_bytes = None
        share = None
        s_in = s_out = None
        churn = None
        if w is not None and r is not None and r.slices is not None:
            file_pages = sum(r.files or ())
            file_share = _share(file_pages, w.total_pages)
            file_bytes = min(file_pages * w.page_size, sum(w.sizes))
            if r.dense is not None:
                dense_share = _share(r.dense, w.dense_pages)
                dense_bytes = r.dense * w.page_size
            expert_share = _share(float(r.slices.sum()), float(w.slice_pages.sum()))
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(w.slice_pages > 0, r.slices / np.maximum(w.slice_pages, 1), np.nan)
            if self.prev_slices is not None and self.prev_slices.shape == r.slices.shape:
                churn = np.sign(r.slices - self.prev_slices).astype(np.int8)
                s_in = int((churn > 0).sum())
                s_out = int((churn < 0).sum())
        majflt_s = read_s = tok_s = f_tok = r_tok = None
        a, b = self.prev_figures, self.figures_at
        if a is not None and b is not None and a.proc is not None and b.proc is not None \
                and a.proc.pid == b.proc.pid:
            dt = b.t - a.t
            majflt_s = rate(b.proc.majflt, a.proc.majflt, dt)
            read_s = rate(b.proc.read_bytes, a.proc.read_bytes, dt)
            tok_s = rate(b.tokens, a.tokens, dt)
            if b.tokens is not None and a.tokens is not None and b.tokens > a.tokens:
                n = b.tokens - a.tokens
                f_tok = rate(b.proc.majflt, a.proc.majflt, float(n))
                r_tok = rate(b.proc.read_bytes, a.proc.read_bytes, float(n))
        return MemoryFigures(file_share, file_bytes, dense_share, dense_bytes, expert_share, share, s_in, s_out,
                             churn, majflt_s, read_s, tok_s, f_tok, r_tok)

    @staticmethod
    def _row(f: MemoryFigures, s: MemorySample) -> F64:
        p, sy, cg = s.proc, s.system, s.cgroup
        vals = (f.file_share, f.dense_share, f.expert_share, f.slices_in, f.slices_out, f.majflt_per_s,
                f.read_bytes_per_s, sy.mem_available if sy else None, p.rss_anon if p else None,
                p.rss_file if p else None, cg.usage if cg else None, sy.psi_some_avg10 if sy else None)
        return np.array([np.nan if v is None else float(v) for v in vals], dtype=np.float64)
