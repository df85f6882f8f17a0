"""The live LRU curve: feed the routing one token at a time, read the hit curve over every budget
at any moment. Same one-pass replay as :func:`bmoe_top.tui.analysis.cachesim.lru_curve` (the
state is kept between calls), so the curve after the last token equals the offline one.
docs/analysis.md "Live curve".
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .cachesim import MIB, Curve, LruState

__all__ = ["LiveLru"]

I64 = npt.NDArray[np.int64]


class LiveLru:
    """Incremental LRU replay at fixed ``budgets`` (bytes; default: 0 to the whole bank in
    ``points`` steps of whole smallest experts), plus the ``extra`` budgets (e.g. the run's).

    ``layer_bytes`` int [n_layer] one expert's bytes per layer (0 = a layer without MoE).
    Cost: one compiled call per :meth:`feed_tokens` over its tokens' n_layer x k lookups
    (benchmarks/bench_cachesim.py measures it). Memory: :meth:`state_bytes`, the same after a
    million tokens as after one (the curve stays exact over the whole run: the replay keeps per
    expert its last lookup, not the lookups). Not thread-safe: feed from one thread.
    """

    def __init__(self, n_layer: int, n_expert: int, layer_bytes: npt.ArrayLike,
                 budgets: npt.ArrayLike | None = None, points: int = 256, extra: npt.ArrayLike = ()):
        lb = np.asarray(layer_bytes, dtype=np.int64).reshape(-1)
        if lb.shape[0] != n_layer or n_expert < 1 or (lb < 0).any():
            raise ValueError(f"need {n_layer} non-negative layer sizes and n_expert >= 1")
        self.n_layer = n_layer
        self.n_expert = n_expert
        self.layer_bytes = lb
        self.item_bytes = np.repeat(lb, n_expert).astype(np.int64)
        bank = int(lb.sum()) * n_expert
        if budgets is None:
            moe = lb[lb > 0]
            unit = int(moe.min()) if moe.size else 1
            steps = max(1, -(-bank // unit // max(1, points)))
            b = np.unique(np.append(np.arange(0, bank + 1, unit * steps, dtype=np.int64), bank))
        else:
            b = np.unique(np.asarray(budgets, dtype=np.int64).reshape(-1))
            if b.size == 0 or (b < 0).any():
                raise ValueError("budgets must be byte counts >= 0")
        more = np.asarray(extra, dtype=np.int64).reshape(-1)
        if more.size:
            if (more < 0).any():
                raise ValueError("budgets must be byte counts >= 0")
            b = np.unique(np.concatenate([b, more]))
        self.budgets = b
        self.decode_tokens = 0
        self.decode_lookups = 0
        self.decode_bytes = 0
        self.layer_lookups = np.zeros(n_layer, dtype=np.int64)
        self._state = LruState(n_layer * n_expert, n_layer, self.item_bytes, b)

    def state_bytes(self) -> int:
        """Bytes the replay holds: constant over the run (about n_layer x n_expert x budgets)."""
        return self._state.nbytes() + int(self.layer_lookups.nbytes)

    def _feed(self, routing: I64, decode: bool) -> None:
        """``routing`` int64 [tokens, n_layer, k]: one batch per layer over all its tokens."""
        t, n_layer, k = routing.shape
        self._feed_rows(routing.transpose(1, 0, 2).reshape(n_layer, t * k), np.arange(n_layer, dtype=np.int64),
                        decode)

    def _feed_rows(self, rows: I64, row_layer: I64, decode: bool) -> None:
        """``rows`` int64 [batches, w]: one batch per row, in order, of the experts of layer
        ``row_layer[r]`` (-1 = none); a decode row counts one token per ``n_layer`` rows."""
        w = rows.shape[1]
        # unique per row in order of first appearance; -1 = no expert
        if w <= 16:
            eq = rows[:, :, None] == rows[:, None, :]
            dup = np.triu(np.ones((w, w), dtype=bool), 1)[None, :, :] & eq
            first = ~dup.any(axis=1)
        else:
            first = np.zeros_like(rows, dtype=bool)
            for r in range(rows.shape[0]):
                _, idx = np.unique(rows[r], return_index=True)
                first[r, idx] = True
        keep = first & (rows >= 0) & (self.layer_bytes[row_layer][:, None] > 0)
        if (rows[keep] >= self.n_expert).any():
            raise ValueError(f"an expert id is >= n_expert {self.n_expert}")
        counts = keep.sum(axis=1)
        batches = np.flatnonzero(counts)
        nl = int(counts.sum())
        if nl == 0:
            return
        items = (row_layer[:, None] * self.n_expert + rows)[keep]
        bfirst = np.zeros(batches.shape[0] + 1, dtype=np.int64)
        bfirst[1:] = np.cumsum(counts[batches])
        self._state.feed(items, bfirst, np.full(nl, decode, dtype=np.bool_))
        if decode:
            # a token whose every layer is empty is not a token of the replay (as fed alone)
            self.decode_tokens += int((counts.reshape(-1, self.n_layer).sum(axis=1) > 0).sum())
            self.decode_lookups += nl
            self.decode_bytes += int(self.item_bytes[items].sum())
            self.layer_lookups += np.bincount(row_layer, weights=counts, minlength=self.n_layer).astype(np.int64)

    def feed_tokens(self, routing: npt.ArrayLike) -> None:
        """Decode tokens in order: ``routing`` int [tokens, n_layer, k] routed ids (-1 = none),
        one batch per token and layer, in one compiled call: the same curve as
        :meth:`feed_token` on each token in turn. Raises ValueError on a wrong shape or an id >=
        n_expert (then nothing is fed)."""
        a = np.asarray(routing, dtype=np.int64)
        if a.ndim != 3 or a.shape[1] != self.n_layer:
            raise ValueError(f"decode routing must be [tokens, {self.n_layer}, k], got shape {a.shape}")
        if a.shape[0]:
            self._feed_rows(a.reshape(-1, a.shape[2]), np.tile(np.arange(self.n_layer, dtype=np.int64), a.shape[0]),
                            True)

    def feed_token(self, experts: npt.ArrayLike) -> None:
        """One decode token: ``experts`` int [n_layer, k] routed ids (-1 = none at that layer).
        Raises ValueError on a wrong shape or an id >= n_expert."""
        a = np.asarray(experts, dtype=np.int64)
        if a.ndim != 2 or a.shape[0] != self.n_layer:
            raise ValueError(f"a token's routing must be [{self.n_layer}, k], got shape {a.shape}")
        self.feed_tokens(a[None, :, :])

    def feed_prefill(self, routing: npt.ArrayLike) -> None:
        """A prompt chunk: ``routing`` int [tokens, n_layer, k], one batch per layer (its prefill
        lookups change the cache; they are not counted as decode lookups)."""
        a = np.asarray(routing, dtype=np.int64)
        if a.ndim != 3 or a.shape[1] != self.n_layer:
            raise ValueError(f"prefill routing must be [tokens, {self.n_layer}, k], got shape {a.shape}")
        if a.shape[0]:
            self._feed(a, False)

    def curve(self) -> Curve:
        """The LRU curve so far (decode lookups of every token fed)."""
        hd, _hp, hb, hl = self._state.counts()
        return Curve("lru", self.budgets, hd, hb, hl, self.decode_lookups, self.decode_bytes,
                     self.layer_lookups.copy(), self.decode_tokens, "live")

    def hit_pct_at(self, budget_mib: float) -> float:
        """Decode hit % at the largest replayed budget <= ``budget_mib`` MiB (NaN before any token)."""
        c = self.curve()
        j = int(np.searchsorted(self.budgets, budget_mib * MIB, side="right")) - 1
        return float(c.decode_hit_pct[max(0, j)])
