"""The live what-if: the LRU curve over every budget of a run whose routing streams in
(BMOE_ROUTE), replayed from the routing the run model holds while the run goes on. Its snapshots
are :class:`~bmoe_top.tui.present.whatif.LiveView` (drawn by
:class:`~bmoe_top.tui.widgets.live_whatif.LiveWhatIfPanel`); the replay is
:class:`bmoe_top.tui.analysis.live.LiveLru`'s. docs/analysis.md "Live".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from bmoe_top.parsers.limits import MAX_TOP_K
from bmoe_top.tui.jobs.whatif import WhatIfError, gguf_layer_bytes, meta_int, resident_estimate, run_cache_budget
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.numbers import fmt
from bmoe_top.tui.present.whatif import MIB, LiveView

if TYPE_CHECKING:
    from bmoe_top.tui.analysis.cachesim import Curve
    from bmoe_top.tui.analysis.live import LiveLru

__all__ = ["LiveWhatIf", "SizeResolver", "model_file_sizes", "GRID_CELLS"]


SizeResolver = Callable[[RunModel], "Sequence[int] | None"]


def model_file_sizes(run: RunModel) -> Sequence[int] | None:
    """Exact expert sizes of a live run from its model file (BMOE_READY ``model``), when that
    file is readable here; None otherwise."""
    path = run.meta.get("model") or (run.ready or {}).get("model")
    if not isinstance(path, str) or not path:
        return None
    try:
        return gguf_layer_bytes(path)
    except WhatIfError:
        return None


#: Cells of the routing grid :meth:`LiveWhatIf.update` builds at once (int64: 16 MiB), so a long
#: backlog or a hostile width never sizes one allocation.
GRID_CELLS = 1 << 21


class LiveWhatIf:
    """The LRU curve over every budget of a run whose routing streams in (BMOE_ROUTE), fed from
    the routing the run model holds: each :meth:`update` replays the routing rows added since the
    last one (:class:`bmoe_top.tui.analysis.live.LiveLru`, one compiled call per run of decode tokens), so a view
    can show what a bigger or smaller cache would give right now.

    ``sizes``: one expert's bytes per layer for a run (default: the model file named by
    BMOE_READY, :func:`model_file_sizes`); without them the replay counts expert slots, and MiB
    are shown as slots x (BMOE_RESIDENT resident MiB / resident experts). Not thread-safe: call
    :meth:`update` and :meth:`view` from one thread (a worker; the run model is read under its
    lock). Importing the analysis core (numba) happens on the first update, not at construction.
    """

    def __init__(self, run: RunModel, sizes: SizeResolver | None = model_file_sizes, max_tokens: int = 4096) -> None:
        self.run = run
        self._sizes = sizes
        self.max_tokens = max_tokens
        self._row = 0  # routing rows (global count) already replayed
        self._lru: LiveLru | None = None
        self._bytes = False  # True: the replay is in bytes (sizes known); False: in expert slots
        self._top_k = 1
        self.skipped_rows = 0
        self.problems = 0
        self.last_error = ""
        self.version = 0  # bumps when the curve changed
        # decode hits per budget, lookups and tokens when the newest turn's prompt arrived
        self._turn_base: tuple[npt.NDArray[np.int64], int, int] | None = None

    def _start(self, n_layer: int, n_expert: int, moe: npt.NDArray[np.bool_]) -> None:
        from bmoe_top.tui.analysis.live import LiveLru

        lb: npt.NDArray[np.int64] | None = None
        if self._sizes is not None:
            got = self._sizes(self.run)
            if got is not None and len(got) >= n_layer:
                lb = np.asarray(list(got)[:n_layer], dtype=np.int64)
        self._bytes = lb is not None
        if lb is None:
            lb = moe.astype(np.int64)
        extra = []
        with self.run.lock:
            budget_mib = run_cache_budget(self.run)[0]
        if budget_mib is not None and budget_mib > 0 and self._bytes:
            extra.append(int(budget_mib * MIB))  # the run's own budget is replayed exactly
        self._lru = LiveLru(n_layer, n_expert, lb, extra=extra)

    def lagging(self) -> bool:
        """Whether the routing rows not replayed yet span over half of the tokens the run model
        keeps (rows older than its window are dropped before a replay sees them: replay now)."""
        run = self.run
        with run.lock:
            ro = run.routes
            window, total, first = ro.window_tokens, ro.total, ro.total - ro.n
            if window is None or self._row >= total:
                return False
            return self._row < first or ro.max_tok - int(ro.tok[self._row - first]) > window // 2

    def update(self) -> bool:
        """Replay the routing rows added since the last call (at most ``max_tokens`` tokens).
        Returns True when the curve changed."""
        run = self.run
        with run.lock:
            ro = run.routes
            total, held = ro.total, ro.n
            first = total - held
            if self._row < first:
                self.skipped_rows += first - self._row
                self._row = first
            if self._row >= total:
                return False
            lo = self._row - first
            tok = np.array(ro.tok[lo:])
            lay = np.array(ro.layer[lo:])
            exp_ = np.array(ro.expert[lo:])
            n_layer = max(run.n_layer or 0, int(lay.max()) + 1)
            n_expert = meta_int(run, "n_expert") or run.n_expert or 0
            self._top_k = run.top_k or self._top_k
        if n_expert <= 0:
            return False  # the model's expert count (BMOE_READY n_expert) is not known yet
        # tokens: runs of one ``tok`` value in arrival order
        cuts = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
        ends = np.r_[cuts[1:], tok.shape[0]]
        if cuts.shape[0] > self.max_tokens:
            cuts, ends = cuts[: self.max_tokens], ends[: self.max_tokens]
        if self._lru is None:  # the dimensions are the model's (BMOE_READY) from here on
            moe = np.zeros(n_layer, dtype=bool)
            moe[lay] = True
            self._start(n_layer, n_expert, moe)
        lru = self._lru
        assert lru is not None
        self._replay(lru, lay[: ends[-1]], exp_[: ends[-1]], tok[cuts], ends - cuts)
        self._row += int(ends[-1])
        self.version += 1
        return True

    def _replay(self, lru: LiveLru, lay: npt.NDArray[np.integer[Any]], exp_: npt.NDArray[np.integer[Any]],
                tok: npt.NDArray[np.int64], lens: npt.NDArray[np.int64]) -> None:
        """Feed tokens whose routing rows (``lay``, ``exp_``, in arrival order) come in runs of
        ``lens`` rows, one run per token (``tok`` its index; < 0: a prompt): the decode tokens
        between two prompts in one compiled call (:meth:`LiveLru.feed_tokens`) per chunk of at
        most :data:`GRID_CELLS` cells, each prompt on its own; a token with a layer or an expert id
        out of range, or more than :data:`~bmoe_top.parsers.limits.MAX_TOP_K` experts at one
        layer, is counted and left out."""
        n_layer, n_expert = lru.n_layer, lru.n_expert
        n_tok = tok.shape[0]
        tid = np.repeat(np.arange(n_tok), lens)
        bad = np.zeros(n_tok, dtype=bool)  # a layer out of range, or too wide
        bad[tid[lay >= n_layer]] = True
        ok = ~bad[tid]
        tid, lay, exp_ = tid[ok], lay[ok], exp_[ok]
        # each row's place among its token's rows of the same layer, in arrival order
        key = tid * n_layer + lay
        order = np.argsort(key, kind="stable")
        key_s = key[order]
        group = np.flatnonzero(np.r_[True, key_s[1:] != key_s[:-1]])
        pos = np.arange(key_s.shape[0]) - np.repeat(group, np.diff(np.r_[group, key_s.shape[0]]))
        wide = np.zeros(n_tok, dtype=bool)
        wide[tid[order][pos >= MAX_TOP_K]] = True
        keep = ~wide[tid[order]]
        tid_o, lay_o, exp_o, pos = tid[order][keep], lay[order][keep], exp_[order][keep], pos[keep]
        width = max(1, int(pos.max()) + 1) if pos.shape[0] else 1
        moe = lru.layer_bytes > 0
        step = max(1, GRID_CELLS // (n_layer * width))
        for c0 in range(0, n_tok, step):
            c1 = min(n_tok, c0 + step)
            a, b = np.searchsorted(tid_o, [c0, c1])  # tid_o ascends (sorted by token, then layer)
            grid = np.full((c1 - c0, n_layer, width), -1, dtype=np.int64)
            grid[tid_o[a:b] - c0, lay_o[a:b], pos[a:b]] = exp_o[a:b]
            bad_c, wide_c = bad[c0:c1], wide[c0:c1]
            bad_expert = ((grid >= n_expert) & moe[None, :, None]).any(axis=(1, 2)) & ~bad_c & ~wide_c
            for j in np.flatnonzero(bad_c | wide_c | bad_expert).tolist():
                self.problems += 1
                self.last_error = (f"a layer >= {n_layer} (the model's layers)" if bad_c[j] else
                                   f"more than {MAX_TOP_K} experts at one layer" if wide_c[j] else
                                   f"an expert id is >= n_expert {n_expert}")
            good = ~(bad_c | wide_c | bad_expert)
            tok_c = tok[c0:c1]
            start = 0
            for p in [*np.flatnonzero(tok_c < 0).tolist(), c1 - c0]:
                run = np.flatnonzero(good[start:p]) + start
                if run.shape[0]:
                    lru.feed_tokens(grid[run])
                if p < c1 - c0 and not bad_c[p]:  # a prompt: a new turn starts here
                    self._turn_base = (lru.curve().decode_hits.copy(), lru.decode_lookups, lru.decode_tokens)
                    if good[p]:
                        lru.feed_prefill(grid[p][None, :, :])
                start = p + 1

    def view(self) -> LiveView | None:
        """The curve now, or None before the first decode token."""
        lru = self._lru
        if lru is None or lru.decode_tokens == 0:
            return None
        c: Curve = lru.curve()
        run = self.run
        with run.lock:
            budget_mib = run_cache_budget(run)[0]
            hit = run.summary.get("cache_hit_pct")
            last = run.tokens.last("cache_hit_pct") if run.tokens.has("cache_hit_pct") else math.nan
            est = resident_estimate(run)
        runtime_hit = float(last) if math.isfinite(last) else (float(hit) if hit is not None else None)
        if runtime_hit is not None and runtime_hit < 0:
            runtime_hit = None
        lb = lru.layer_bytes
        moe = lb > 0
        cycle_units = float(lb[moe].sum() * max(1, self._top_k))
        bank_units = float(lb.sum() * lru.n_expert)
        if self._bytes:
            scale, unit, sizes = 1.0 / MIB, "MiB", "from the model file"
        elif est is not None:
            scale, unit = est, "MiB"
            sizes = f"estimated: {fmt(est, 3)} MiB per expert (resident MiB / resident experts)"
        else:
            scale, unit, sizes = 1.0, "expert slots", "not known: expert slots"
        budgets = c.budgets.astype(np.float64) * scale
        turn_pct: npt.NDArray[np.float64] | None = None
        turn_tokens = 0
        if self._turn_base is not None:
            h0, l0, t0 = self._turn_base
            dl = lru.decode_lookups - l0
            turn_tokens = lru.decode_tokens - t0
            if dl > 0:
                turn_pct = 100.0 * (c.decode_hits - h0) / dl
        rb: float | None = None
        at: float | None = None
        turn_at: float | None = None
        if budget_mib is not None and budget_mib > 0 and unit == "MiB":
            rb = float(budget_mib)
            # the runtime's capacity: whole experts within the budget
            units = rb * MIB if self._bytes else math.floor(rb / scale + 1e-9)
            j = int(np.searchsorted(c.budgets, units, side="right")) - 1
            at = float(c.decode_hit_pct[j]) if j >= 0 else None
            turn_at = float(turn_pct[j]) if j >= 0 and turn_pct is not None else None
        read = (c.read_mib_per_token * MIB * scale if not self._bytes else c.read_mib_per_token.astype(np.float64))
        return LiveView(unit, budgets, c.decode_hit_pct.astype(np.float64), read, lru.decode_tokens,
                        lru.decode_lookups, rb, cycle_units * scale, bank_units * scale, at, runtime_hit, sizes,
                        self.skipped_rows, self.problems, turn_pct, turn_at, turn_tokens)
