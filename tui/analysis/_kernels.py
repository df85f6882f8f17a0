"""Compiled loops of the cache simulator (numba, cached on disk after the first call).

Every kernel replays lookups batch by batch with the runtime's semantics
(runtime/expert_cache.py ``ExpertCache.ensure``): a batch's lookups are decided against the cache
as it was when the batch started; hits are promoted; if there are misses, entries that are not
this batch's are evicted in policy order until the resident bytes plus the misses' bytes fit the
budget (a batch larger than the budget leaves the cache over budget holding just the batch);
then the misses are inserted. A budget of 0 is the runtime's no-cache mode (nothing is kept).

Arrays: ``item`` int64 [n] lookups in order, ``bfirst`` int64 [n_batches + 1] the first lookup of
each batch, ``size`` int64 [n_items] bytes per item, ``budgets`` int64 [n_budgets] ascending bytes.
docs/analysis.md "How the replay works" has the reasoning and the proof sketch of the one-pass LRU.

Small helpers (Fenwick steps, binary searches, bucket links) are written out in place: a call
between compiled functions pays reference counting on every array argument, which made these
loops ten times slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

F = TypeVar("F", bound=Callable[..., Any])

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
B1 = npt.NDArray[np.bool_]

#: indices into the LRU kernel's int64 scalar state
S_TOTAL = 0  # bytes of every item ever looked up (the Fenwick tree's total)
S_JOVER = 1  # budgets [0, S_JOVER) are below some batch's bytes: they may run over budget
N_SCALARS = 2


def jit(fn: F) -> F:
    """numba ``njit`` with the on-disk cache, typed for mypy."""
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


@jit
def _missed(status: U8, srange: I64, x: int, j: int, bj: int) -> int:
    """1 if item ``x``'s last lookup missed at budget ``j`` (of ``bj`` bytes), from its ranges
    ``srange[x]`` = (jl, lo, hi): written out in ``status`` below jl and in [lo, hi), a miss in
    [jl, lo), a hit from hi on (except at a zero budget)."""
    if j < srange[x, 0] or (j >= srange[x, 1] and j < srange[x, 2]):
        return int(status[x, j])
    if j < srange[x, 1]:
        return 1
    return 0 if bj > 0 else 1


@jit
def lru_feed(item: I64, bfirst: I64, b0: int, b1: int, decode: B1, layer: I64, size: I64, budgets: I64,
             last_batch: I64, last_rpos: I64, status: U8, srange: I64, fen: I64, over: U8, bover: I64,
             scal: I64, stage: U8, hit_dec: I64, hit_pre: I64, hitb_dec: I64, hit_layer: I64,
             hit_out: U8) -> None:
    """One-pass LRU at every budget: feed batches ``b0 .. b1-1``.

    State (updated in place): ``last_batch``/``last_rpos`` int64 [n_items] the batch and position
    of each item's last lookup (-1 = never); ``srange`` int64 [n_items, 3] and ``status`` uint8
    [n_items, n_budgets] whether that lookup missed at each budget, as budget ranges: with
    (jl, lo, hi) = ``srange[x]``, budgets [0, jl) and [lo, hi) are written out in ``status``
    (1 = miss), [jl, lo) missed and [hi, n_budgets) hit where the budget is > 0; ``fen`` int64
    [cap + 1] a Fenwick tree over batch indices of the bytes of the items whose last lookup is
    that batch; ``over``/``bover`` the budgets that hold just an oversized batch (and which
    batch); ``scal`` see ``S_*``; ``stage`` uint8 [max batch lookups, n_budgets] scratch. Outputs
    (added to): difference arrays over budgets (int64 [n_budgets + 1]; a cumulative sum gives the
    count at each budget) of decode hits, prefill hits, decode hit bytes, and per layer decode
    hits (int64 [n_layer, n_budgets + 1]); ``hit_out`` uint8 [n, n_budgets] per-lookup hit flags
    when it has n rows (else untouched).

    An item's stack depth at budget B is the bytes of the items looked up since its own last
    lookup (a Fenwick suffix sum over batches), plus its own bytes, plus the bytes of the other
    items of its last batch that the runtime ordered after it at B (hits first, then misses,
    each in routing order); it is a hit iff that depth <= B (the cache is always the longest
    recency prefix that fits), or, at a budget holding just an oversized batch, iff it was
    looked up in that batch or since. The depth is a range [dlo, dhi) over the budgets; only
    the budgets inside it, and those below every batch's bytes (``S_JOVER``), are decided one
    by one: a lookup costs O(log n_budgets) plus those.
    """
    nb = budgets.shape[0]
    cap = fen.shape[0] - 1
    per_lookup = hit_out.shape[0] == item.shape[0]
    jz = 0  # the first budget > 0
    while jz < nb and budgets[jz] <= 0:
        jz += 1
    rng = np.empty((stage.shape[0], 2), dtype=np.int64)  # each lookup's [lo, hi)
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
                for j in range(jl):
                    stage[r, j] = 1
                rng[r, 0] = nb
                rng[r, 1] = nb
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
            rng[r, 0] = jlo
            rng[r, 1] = jhi
            # budgets [jl, jlo) miss and [jhi, nb) hit where > 0: decided by the ranges alone
            for part in range(2):
                j0 = 0 if part == 0 else jlo
                j1 = jl if part == 0 else jhi
                for j in range(j0, j1):
                    bj = budgets[j]
                    if bj == 0:
                        hit = False
                    elif j < jl and over[j] == 1:
                        hit = pb >= bover[j]
                    elif bj < dlo:
                        hit = False
                    elif bj >= dhi:
                        hit = True
                    else:
                        d = a
                        # x's and y's miss flags at budget j from their ranges
                        xm = _missed(status, srange, x, j, bj)
                        for q in range(ms, me):
                            y = item[q]
                            if y != x and last_batch[y] == pb:
                                ym = _missed(status, srange, y, j, bj)
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
            jlo = rng[r, 0]
            jhi = rng[r, 1]
            for part in range(2):
                j0 = 0 if part == 0 else jlo
                j1 = jl if part == 0 else jhi
                for j in range(j0, j1):
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
            j0 = max(jhi, jz)  # the hit range [j0, nb)
            if j0 < nb:
                if dec:
                    hit_dec[j0] += 1
                    hit_dec[nb] -= 1
                    hitb_dec[j0] += sz
                    hitb_dec[nb] -= sz
                    hit_layer[lay, j0] += 1
                    hit_layer[lay, nb] -= 1
                else:
                    hit_pre[j0] += 1
                    hit_pre[nb] -= 1
                if per_lookup:
                    for j in range(j0, nb):
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
            jlo = rng[r, 0]
            jhi = rng[r, 1]
            for j in range(jl):
                status[x, j] = stage[r, j]
            for j in range(jlo, jhi):
                status[x, j] = stage[r, j]
            srange[x, 0] = jl
            srange[x, 1] = jlo
            srange[x, 2] = jhi
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


# -- per-budget policies -------------------------------------------------------------------------
# Each keeps ``cached`` uint8 [n_items] and ``resident`` bytes around the batch skeleton of
# ``policy_run``; the policy is a small integer (the kernel is compiled once for all of them).
# LFU and Belady keep their cached items in buckets (doubly linked lists per lookup count, or per
# next-use batch), so every step is O(1) but for skipping empty buckets.

POLICY_LFU = 0
POLICY_SIEVE = 1
POLICY_BELADY = 2
POLICY_FIFO = 3


@jit
def policy_run(policy: int, item: I64, bfirst: I64, decode: B1, layer: I64, size: I64, budgets: I64,
               next_use: I64, hit_dec: I64, hitb_dec: I64, hit_layer: I64) -> None:
    """Replay every budget through one policy. ``next_use`` int64 [n]: the batch of the next
    decode lookup of the same item (``n_batches`` if none; Belady only). Outputs per budget
    (int64 [n_budgets], [n_layer, n_budgets]): decode hits, decode hit bytes, per-layer decode hits.

    LFU: evict the fewest lookups since the trace began; ties: the least recently touched, in the
    runtime's order (a batch's hits, then its misses). SIEVE: a FIFO queue with a visited bit;
    the hand walks from the oldest entry, clears visited bits and evicts the first unvisited one
    (Zhang et al., NSDI'24). FIFO: evict the oldest insertion. Belady: evict the entry whose next
    decode lookup is farthest ahead; ties: the one whose key was set last.
    """
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    nbuck = n_batches + 2
    cached = np.zeros(n_items, dtype=np.uint8)
    prot = np.zeros(n_items, dtype=np.int64)
    count = np.zeros(n_items, dtype=np.int64)
    visited = np.zeros(n_items, dtype=np.uint8)
    nxt = np.zeros(n_items, dtype=np.int64)  # queue toward newer
    prv = np.zeros(n_items, dtype=np.int64)  # queue toward older
    bk = np.zeros(n_items, dtype=np.int64)  # the item's bucket (-1 = none)
    bn = np.zeros(n_items, dtype=np.int64)
    bp = np.zeros(n_items, dtype=np.int64)
    bh = np.zeros(nbuck, dtype=np.int64)
    bt = np.zeros(nbuck, dtype=np.int64)
    miss = np.zeros(n_items, dtype=np.int64)
    words = np.zeros(nbuck // 64 + 1, dtype=np.uint64)  # Belady: bit k set = bucket k not empty
    one = np.uint64(1)
    bel = policy == POLICY_BELADY
    lfu = policy == POLICY_LFU
    for j in range(budgets.shape[0]):
        bud = budgets[j]
        cached[:] = 0
        prot[:] = -1
        count[:] = 0
        visited[:] = 0
        bk[:] = -1
        bh[:] = -1
        bt[:] = -1
        resident = 0
        n_cached = 0
        head = -1  # newest
        tail = -1  # oldest
        hand = -1
        lo = 0  # LFU: no cached item has a count below lo
        words[:] = 0
        for b in range(n_batches):
            s = bfirst[b]
            e = bfirst[b + 1]
            nmiss = 0
            need = 0
            for i in range(s, e):
                x = item[i]
                prot[x] = b
                count[x] += 1
                if cached[x] == 1:
                    if decode[i]:
                        hit_dec[j] += 1
                        hitb_dec[j] += size[x]
                        hit_layer[layer[i], j] += 1
                    if lfu:
                        kk = bk[x]  # unlink x from its bucket
                        if bp[x] != -1:
                            bn[bp[x]] = bn[x]
                        else:
                            bh[kk] = bn[x]
                        if bn[x] != -1:
                            bp[bn[x]] = bp[x]
                        else:
                            bt[kk] = bp[x]
                        bk[x] = -1
                        kk = count[x]  # x at the tail of bucket kk (taken last)
                        bk[x] = kk
                        bn[x] = -1
                        bp[x] = bt[kk]
                        if bt[kk] != -1:
                            bn[bt[kk]] = x
                        else:
                            bh[kk] = x
                        bt[kk] = x
                    elif bel:
                        kk = bk[x]  # unlink x from its bucket
                        if bp[x] != -1:
                            bn[bp[x]] = bn[x]
                        else:
                            bh[kk] = bn[x]
                        if bn[x] != -1:
                            bp[bn[x]] = bp[x]
                        else:
                            bt[kk] = bp[x]
                        bk[x] = -1
                        if bh[kk] == -1:
                            words[kk >> 6] &= ~(one << np.uint64(kk & 63))
                        k = next_use[i]
                        kk = k  # x at the head of bucket kk (taken first)
                        bk[x] = kk
                        bp[x] = -1
                        bn[x] = bh[kk]
                        if bh[kk] != -1:
                            bp[bh[kk]] = x
                        else:
                            bt[kk] = x
                        bh[kk] = x
                        words[kk >> 6] |= one << np.uint64(kk & 63)
                    elif policy == POLICY_SIEVE:
                        visited[x] = 1
                else:
                    miss[nmiss] = i
                    nmiss += 1
                    need += size[x]
            if nmiss == 0 or bud == 0:
                continue
            live = n_cached - (e - s - nmiss)
            # evict until the misses fit (never this batch's entries)
            if lfu:
                k = lo
                while resident + need > bud and live > 0:
                    x = bh[k]
                    while x != -1 and prot[x] == b:
                        x = bn[x]
                    if x == -1:
                        k += 1  # empty, or only this batch's entries
                        continue
                    kk = bk[x]  # unlink x from its bucket
                    if bp[x] != -1:
                        bn[bp[x]] = bn[x]
                    else:
                        bh[kk] = bn[x]
                    if bn[x] != -1:
                        bp[bn[x]] = bp[x]
                    else:
                        bt[kk] = bp[x]
                    bk[x] = -1
                    cached[x] = 0
                    n_cached -= 1
                    resident -= size[x]
                    live -= 1
                while lo < nbuck - 1 and bh[lo] == -1 and lo < k:
                    lo += 1
            elif bel:
                k = n_batches  # the farthest next use first (n_batches: never looked up again)
                while resident + need > bud and live > 0:
                    # the highest non-empty bucket <= k, through the bitmap of non-empty buckets
                    w = k >> 6
                    m = words[w] & ((one << np.uint64(k & 63)) | ((one << np.uint64(k & 63)) - one))
                    while m == 0:
                        w -= 1
                        m = words[w]
                    k = w << 6
                    while m > 1:
                        m >>= one
                        k += 1
                    x = bh[k]
                    while x != -1 and prot[x] == b:
                        x = bn[x]
                    if x == -1:
                        k -= 1  # only this batch's entries here
                        continue
                    kk = bk[x]  # unlink x from its bucket
                    if bp[x] != -1:
                        bn[bp[x]] = bn[x]
                    else:
                        bh[kk] = bn[x]
                    if bn[x] != -1:
                        bp[bn[x]] = bp[x]
                    else:
                        bt[kk] = bp[x]
                    bk[x] = -1
                    if bh[kk] == -1:
                        words[kk >> 6] &= ~(one << np.uint64(kk & 63))
                    cached[x] = 0
                    n_cached -= 1
                    resident -= size[x]
                    live -= 1
            else:
                # queue policies: walk from the oldest entry
                while resident + need > bud and live > 0:
                    if hand == -1:
                        hand = tail
                    x = hand
                    if policy == POLICY_FIFO:
                        x = tail
                        while prot[x] == b:
                            x = nxt[x]
                    elif prot[x] == b or visited[x] == 1:
                        if prot[x] != b:
                            visited[x] = 0
                        hand = nxt[x]
                        continue
                    # evict x
                    hand = nxt[x]
                    if prv[x] != -1:
                        nxt[prv[x]] = nxt[x]
                    else:
                        tail = nxt[x]
                    if nxt[x] != -1:
                        prv[nxt[x]] = prv[x]
                    else:
                        head = prv[x]
                    cached[x] = 0
                    n_cached -= 1
                    resident -= size[x]
                    live -= 1
            for q in range(nmiss):
                i = miss[q]
                x = item[i]
                cached[x] = 1
                n_cached += 1
                resident += size[x]
                if lfu:
                    k = count[x]
                    kk = k  # x at the tail of bucket kk (taken last)
                    bk[x] = kk
                    bn[x] = -1
                    bp[x] = bt[kk]
                    if bt[kk] != -1:
                        bn[bt[kk]] = x
                    else:
                        bh[kk] = x
                    bt[kk] = x
                    if k < lo:
                        lo = k
                elif bel:
                    kk = next_use[i]  # x at the head of bucket kk (taken first)
                    bk[x] = kk
                    bp[x] = -1
                    bn[x] = bh[kk]
                    if bh[kk] != -1:
                        bp[bh[kk]] = x
                    else:
                        bt[kk] = x
                    bh[kk] = x
                    words[kk >> 6] |= one << np.uint64(kk & 63)
                else:
                    visited[x] = 0
                    prv[x] = head
                    nxt[x] = -1
                    if head != -1:
                        nxt[head] = x
                    head = x
                    if tail == -1:
                        tail = x


@jit
def static_hits(item: I64, decode: B1, layer: I64, size: I64, budgets: I64, rank_bytes: I64,
                hit_dec: I64, hitb_dec: I64, hit_layer: I64) -> None:
    """A static profile: the items whose cumulative bytes in rank order (``rank_bytes`` int64
    [n_items], the bytes of the profile up to and including the item; a large number when the
    item is unranked) fit the budget are resident for the whole replay, nothing else is kept."""
    nb = budgets.shape[0]
    for i in range(item.shape[0]):
        if not decode[i]:
            continue
        x = item[i]
        rb = rank_bytes[x]
        j = 0  # first budget >= rb (binary search from 0)
        fh = nb
        while j < fh:
            fm = (j + fh) >> 1
            if budgets[fm] < rb:
                j = fm + 1
            else:
                fh = fm
        for jj in range(j, nb):
            hit_dec[jj] += 1
            hitb_dec[jj] += size[x]
            hit_layer[layer[i], jj] += 1


@jit
def lru_direct_hits(item: I64, bfirst: I64, size: I64, budget: int, hit_out: U8) -> None:
    """A plain per-budget LRU with the runtime's batch rules (the benchmark's compiled reference
    and a second witness for the one-pass kernel): sets ``hit_out`` uint8 [n] to 1 on a hit."""
    n_items = size.shape[0]
    nxt = np.full(n_items, -1, dtype=np.int64)  # toward more recent
    prv = np.full(n_items, -1, dtype=np.int64)
    cached = np.zeros(n_items, dtype=np.uint8)
    prot = np.full(n_items, -1, dtype=np.int64)
    head = -1  # most recent
    tail = -1  # least recent
    resident = 0
    n_batches = bfirst.shape[0] - 1
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        need = 0
        for i in range(s, e):
            x = item[i]
            prot[x] = b
            if cached[x] == 1:
                hit_out[i] = 1
        if budget == 0:
            continue
        # promote hits in routing order
        for i in range(s, e):
            x = item[i]
            if hit_out[i] == 1 and head != x:
                if prv[x] != -1:
                    nxt[prv[x]] = nxt[x]
                else:
                    tail = nxt[x]
                prv[nxt[x]] = prv[x]
                prv[x] = head
                nxt[x] = -1
                nxt[head] = x
                head = x
            elif hit_out[i] == 0:
                need += size[x]
        if need == 0:
            continue
        x = tail
        while x != -1 and resident + need > budget:
            nx = nxt[x]
            if prot[x] != b:
                if prv[x] != -1:
                    nxt[prv[x]] = nx
                else:
                    tail = nx
                if nx != -1:
                    prv[nx] = prv[x]
                else:
                    head = prv[x]
                cached[x] = 0
                resident -= size[x]
            x = nx
        for i in range(s, e):
            x = item[i]
            if hit_out[i] == 0:
                cached[x] = 1
                resident += size[x]
                prv[x] = head
                nxt[x] = -1
                if head != -1:
                    nxt[head] = x
                head = x
                if tail == -1:
                    tail = x
