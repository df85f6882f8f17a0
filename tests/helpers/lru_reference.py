"""The LRU kernel as it was before its per-budget bookkeeping went to budget ranges: every lookup
walks every budget (``status`` uint8 [n_items, n_budgets] written in full). Kept for the tests
(tests/analysis/test_lru_kernel.py: the kernel in the package gives identical outputs) and the
benchmark (benchmarks/bench_cachesim.py: old against new in one run). Not used by the package."""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
B1 = npt.NDArray[np.bool_]

S_TOTAL = 0
S_JOVER = 1


@numba.njit(cache=False, nogil=True)
def lru_feed_reference(item: I64, bfirst: I64, b0: int, b1: int, decode: B1, layer: I64, size: I64, budgets: I64,
             last_batch: I64, last_rpos: I64, status: U8, fen: I64, over: U8, bover: I64, scal: I64,
             stage: U8, hit_dec: I64, hit_pre: I64, hitb_dec: I64, hit_layer: I64, hit_out: U8) -> None:
    """One-pass LRU at every budget: feed batches ``b0 .. b1-1``.

    State (updated in place): ``last_batch``/``last_rpos`` int64 [n_items] the batch and position
    of each item's last lookup (-1 = never); ``status`` uint8 [n_items, n_budgets] 1 where that
    lookup missed at that budget; ``fen`` int64 [cap + 1] a Fenwick tree over batch indices of
    the bytes of the items whose last lookup is that batch; ``over``/``bover`` the budgets that
    hold just an oversized batch (and which batch); ``scal`` see ``S_*``; ``stage`` uint8
    [max batch lookups, n_budgets] scratch. Outputs (added to): difference arrays over budgets
    (int64 [n_budgets + 1]; a cumulative sum gives the count at each budget) of decode hits,
    prefill hits, decode hit bytes, and per layer decode hits (int64 [n_layer, n_budgets + 1]);
    ``hit_out`` uint8 [n, n_budgets] per-lookup hit flags when it has n rows (else untouched).

    An item's stack depth at budget B is the bytes of the items looked up since its own last
    lookup (a Fenwick suffix sum over batches), plus its own bytes, plus the bytes of the other
    items of its last batch that the runtime ordered after it at B (hits first, then misses,
    each in routing order); it is a hit iff that depth <= B (the cache is always the longest
    recency prefix that fits), or, at a budget holding just an oversized batch, iff it was
    looked up in that batch or since.
    """
    nb = budgets.shape[0]
    cap = fen.shape[0] - 1
    per_lookup = hit_out.shape[0] == item.shape[0]
    for b in range(b0, b1):
        s = bfirst[b]
        e = bfirst[b + 1]
        w = 0
        for i in range(s, e):
            w += size[item[i]]
        jl = scal[S_JOVER]
        while jl < nb and budgets[jl] < w:
            jl += 1
        scal[S_JOVER] = jl
        total = scal[S_TOTAL]
        for i in range(s, e):
            x = item[i]
            r = i - s
            pb = last_batch[x]
            if pb < 0:
                for j in range(nb):
                    stage[r, j] = 1
                continue
            fi = pb + 1  # Fenwick prefix sum over batches 0..pb
            fs = 0
            while fi > 0:
                fs += fen[fi]
                fi -= fi & (-fi)
            a = size[x] + total - fs
            ms = bfirst[pb]
            me = bfirst[pb + 1]
            sm = 0
            for q in range(ms, me):
                y = item[q]
                if y != x and last_batch[y] == pb:
                    sm += size[y]
            dlo = a
            dhi = a + sm
            xr = last_rpos[x]
            jlo = jl  # first budget >= dlo (binary search from jl)
            fh = nb
            while jlo < fh:
                fm = (jlo + fh) >> 1
                if budgets[fm] < dlo:
                    jlo = fm + 1
                else:
                    fh = fm
            jhi = jlo  # first budget >= dhi (binary search from jlo)
            fh = nb
            while jhi < fh:
                fm = (jhi + fh) >> 1
                if budgets[fm] < dhi:
                    jhi = fm + 1
                else:
                    fh = fm
            for j in range(nb):
                bj = budgets[j]
                if j >= jl and j < jlo:
                    hit = False
                elif j >= jhi:
                    hit = bj > 0
                elif bj == 0:
                    hit = False
                elif j < jl and over[j] == 1:
                    hit = pb >= bover[j]
                elif bj < dlo:
                    hit = False
                elif bj >= dhi:
                    hit = True
                else:
                    d = a
                    xm = status[x, j]
                    for q in range(ms, me):
                        y = item[q]
                        if y != x and last_batch[y] == pb:
                            ym = status[y, j]
                            if xm == ym:
                                if last_rpos[y] > xr:
                                    d += size[y]
                            elif ym == 1:
                                d += size[y]
                    hit = d <= bj
                stage[r, j] = 0 if hit else 1
        # record and commit the batch
        for i in range(s, e):
            x = item[i]
            r = i - s
            lay = layer[i]
            dec = decode[i]
            sz = size[x]
            for j in range(nb):
                if stage[r, j] == 0:
                    if dec:
                        hit_dec[j] += 1
                        hit_dec[j + 1] -= 1
                        hitb_dec[j] += sz
                        hitb_dec[j + 1] -= sz
                        hit_layer[lay, j] += 1
                        hit_layer[lay, j + 1] -= 1
                    else:
                        hit_pre[j] += 1
                        hit_pre[j + 1] -= 1
                    if per_lookup:
                        hit_out[i, j] = 1
        for j in range(jl):
            anymiss = False
            for r in range(e - s):
                if stage[r, j] == 1:
                    anymiss = True
                    break
            if anymiss:
                over[j] = 1 if w > budgets[j] else 0
                bover[j] = b
        for i in range(s, e):
            x = item[i]
            r = i - s
            for j in range(nb):
                status[x, j] = stage[r, j]
            if last_batch[x] >= 0:
                fi = last_batch[x] + 1  # Fenwick add
                while fi <= cap:
                    fen[fi] += -size[x]
                    fi += fi & (-fi)
            else:
                scal[S_TOTAL] += size[x]
            fi = b + 1  # Fenwick add
            while fi <= cap:
                fen[fi] += size[x]
                fi += fi & (-fi)
            last_batch[x] = b
            last_rpos[x] = r
