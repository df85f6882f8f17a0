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
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

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


def _inline(fn: F) -> F:
    """A helper inlined into its caller's IR (no call, so no reference counting of its arrays)."""
    return cast(F, numba.njit(cache=True, nogil=True, inline="always")(fn))


@_inline
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
def lru_feed(item: I64, bfirst: I64, b0: int, b1: int, decode: B1, lay: I64, size: I64, budgets: I64,
             last_batch: I64, last_rpos: I64, status: U8, srange: I64, fen: I64, over: U8, bover: I64,
             scal: I64, stage: U8, hit_dec: I64, hit_pre: I64, hitb_dec: I64, hit_layer: I64,
             hit_out: U8, out_shift: int) -> None:
    """One-pass LRU at every budget: feed batches ``b0 .. b1-1`` of the lookup log ``item``
    (``bfirst`` the batches' starts in it; ``decode`` per lookup; ``lay`` int64 [n_items] each
    item's layer).

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
    hits (int64 [n_layer, n_budgets + 1]); ``hit_out`` uint8 [rows, n_budgets] per-lookup hit
    flags, lookup i of the log in row ``i + out_shift`` (untouched when it has no rows).

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
    per_lookup = hit_out.shape[0] > 0
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
            ly = lay[x]
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
                            hit_layer[ly, j] += 1
                            hit_layer[ly, j + 1] -= 1
                        else:
                            hit_pre[j] += 1
                            hit_pre[j + 1] -= 1
                        if per_lookup:
                            hit_out[i + out_shift, j] = 1
            j0 = max(jhi, jz)  # the hit range [j0, nb)
            if j0 < nb:
                if dec:
                    hit_dec[j0] += 1
                    hit_dec[nb] -= 1
                    hitb_dec[j0] += sz
                    hitb_dec[nb] -= sz
                    hit_layer[ly, j0] += 1
                    hit_layer[ly, nb] -= 1
                else:
                    hit_pre[j0] += 1
                    hit_pre[nb] -= 1
                if per_lookup:
                    for j in range(j0, nb):
                        hit_out[i + out_shift, j] = 1
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
# FIFO, SIEVE, LFU and Belady have no inclusion property under the runtime's rules (LFU and
# Belady have one with experts of one size, not with several; FIFO and SIEVE never), so each
# budget is replayed on its own: one kernel call per (policy, budget), on a thread each (the
# kernels release the GIL). No step grows with the trace: FIFO and SIEVE keep a queue, LFU a
# 4-ary min-heap whose keys are renewed only when they reach the top, Belady buckets per next
# decode use and a bitmap of the non-empty ones (64 buckets a word, a word per 64 words above it)
# to find the farthest in a few word operations. The policy codes are the registry's
# (tui/analysis/policies.py ``Policy.code``). A batch is one layer of one phase (``Lookups``), so a
# batch's layer, phase and expert size are read once. ``item`` is any integer array (int16 when
# the items fit: a quarter of the memory traffic of int64 over a trace replayed once per budget);
# ``lay`` int64 [n_items] each item's layer. Outputs: ``hd``/``hb`` int64 [n_budgets] decode hits
# and their bytes, ``hl`` int64 [n_layer, n_budgets] decode hits per layer, column ``j``.

POLICY_LFU = 0
POLICY_SIEVE = 1
POLICY_BELADY = 2
POLICY_FIFO = 3

U64 = npt.NDArray[np.uint64]
_clz = cast(Callable[[Any], int], leading_zeros)  # numba's count of leading / trailing zero bits
_ctz = cast(Callable[[Any], int], trailing_zeros)
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@jit
def bitmap_levels(n_bits: int) -> I64:
    """Offsets of the levels of a bitmap over ``n_bits`` buckets (level 0 first, one word per 64
    bits; level l + 1 has a bit per word of level l), then the total words."""
    words = max(1, (n_bits + 63) // 64)
    n_lev = 1
    w = words
    while w > 1:
        w = (w + 63) // 64
        n_lev += 1
    off = np.zeros(n_lev + 1, dtype=np.int64)
    w = words
    for lvl in range(n_lev):
        off[lvl + 1] = off[lvl] + w
        w = (w + 63) // 64
    return off


@_inline
def _bit_set(bits: U64, off: I64, k: int) -> None:
    for lvl in range(off.shape[0] - 1):
        w = off[lvl] + (k >> 6)
        was = bits[w]
        bits[w] = was | (_ONE << np.uint64(k & 63))
        if was != 0:
            return
        k >>= 6


@_inline
def _bit_clear(bits: U64, off: I64, k: int) -> None:
    for lvl in range(off.shape[0] - 1):
        w = off[lvl] + (k >> 6)
        bits[w] &= ~(_ONE << np.uint64(k & 63))
        if bits[w] != 0:
            return
        k >>= 6


@_inline
def _bit_prev(bits: U64, off: I64, k: int) -> int:
    """The largest set bit <= ``k`` (-1 if none)."""
    nlev = off.shape[0] - 1
    lvl = 0
    while True:
        if k < 0:
            return -1
        sh = np.uint64(k & 63)
        mask = _ALL if sh == 63 else (_ONE << (sh + _ONE)) - _ONE
        word = bits[off[lvl] + (k >> 6)] & mask
        if word != 0:
            k = ((k >> 6) << 6) | (63 - int(_clz(word)))
            break
        lvl += 1
        if lvl == nlev:
            return -1
        k = (k >> 6) - 1
    while lvl > 0:
        lvl -= 1
        k = (k << 6) | (63 - int(_clz(bits[off[lvl] + k])))
    return k


@_inline
def _bit_next(bits: U64, off: I64, k: int) -> int:
    """The smallest set bit >= ``k`` (-1 if none)."""
    nlev = off.shape[0] - 1
    lvl = 0
    while True:
        w = k >> 6
        if off[lvl] + w >= off[lvl + 1]:
            return -1
        word = bits[off[lvl] + w] & (_ALL << np.uint64(k & 63))
        if word != 0:
            k = (w << 6) | int(_ctz(word))
            break
        lvl += 1
        if lvl == nlev:
            return -1
        k = w + 1
    while lvl > 0:
        lvl -= 1
        k = (k << 6) | int(_ctz(bits[off[lvl] + k]))
    return k


@_inline
def _down4(heap: I64, key: I64, n: int, i: int) -> None:
    """Sift entry ``i`` of a 4-ary min-heap of ``n`` entries down to its place."""
    x = heap[i]
    k = key[i]
    while True:
        c = 4 * i + 1
        if c >= n:
            break
        m = c
        mk = key[c]
        for d in range(c + 1, min(c + 4, n)):
            if key[d] < mk:
                m = d
                mk = key[d]
        if mk >= k:
            break
        heap[i] = heap[m]
        key[i] = mk
        i = m
    heap[i] = x
    key[i] = k


@_inline
def _push4(heap: I64, key: I64, n: int, x: int, k: int) -> None:
    """Add ``x`` with key ``k`` to a 4-ary min-heap of ``n`` entries."""
    i = n
    while i > 0:
        p = (i - 1) >> 2
        if key[p] <= k:
            break
        heap[i] = heap[p]
        key[i] = key[p]
        i = p
    heap[i] = x
    key[i] = k


@jit
def lfu_budget(item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64, bud: int,
               j: int, hd: I64, hb: I64, hl: I64) -> None:
    """LFU at ``bud`` bytes: evict the fewest lookups since the trace began (counts survive
    eviction); ties: the least recently touched, in the runtime's order (a batch's hits in
    routing order, then its misses). A 4-ary min-heap of (count, touch) keys, one entry per cached
    item; a hit only counts and stamps its item (a key never shrinks), the entry's key is renewed
    when it reaches the top, so hot items cost nothing."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    cached = np.zeros(n_items, dtype=np.uint8)
    prot = np.full(n_items, -1, dtype=np.int64)
    count = np.zeros(n_items, dtype=np.int64)
    touch = np.zeros(n_items, dtype=np.int64)
    heap = np.zeros(n_items, dtype=np.int64)
    key = np.zeros(n_items, dtype=np.int64)
    miss = np.zeros(n_items + 1, dtype=np.int64)
    aside = np.zeros(n_items, dtype=np.int64)
    hits = 0
    hbytes = 0
    hn = 0
    resident = 0
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        nmiss = 0
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            count[x] += 1
            c = int(cached[x])
            touch[x] += c * (s + i - touch[x])  # a hit: 2s + its place, before the batch's misses
            miss[nmiss] = i
            nmiss += 1 - c
        nh = (e - s) - nmiss
        if decode[s]:
            hits += nh
            hbytes += nh * sz
            hl[lay[x0], j] += nh
        if nmiss == 0:
            continue
        need = nmiss * sz
        na = 0
        while resident + need > bud and hn > 0:
            x = heap[0]
            cur = (count[x] << 32) | touch[x]
            if key[0] != cur:  # counted since it was keyed: a larger key, further down
                key[0] = cur
                _down4(heap, key, hn, 0)
                continue
            hn -= 1
            if hn > 0:
                heap[0] = heap[hn]
                key[0] = key[hn]
                _down4(heap, key, hn, 0)
            if prot[x] == b:
                aside[na] = x  # this batch's hit: kept
                na += 1
                continue
            cached[x] = 0
            resident -= size[x]
        for r in range(na):
            x = aside[r]
            _push4(heap, key, hn, x, (count[x] << 32) | touch[x])
            hn += 1
        for r in range(nmiss):
            i = miss[r]
            x = int(item[i])
            cached[x] = 1
            resident += sz
            touch[x] = 2 * s + (e - s) + (i - s)  # after the batch's hits, in routing order
            _push4(heap, key, hn, x, (count[x] << 32) | touch[x])
            hn += 1
    hd[j] = hits
    hb[j] = hbytes


@jit
def belady_budget(item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64, bud: int,
                  j: int, next_use: npt.NDArray[np.integer[Any]], hd: I64, hb: I64, hl: I64) -> None:
    """Belady at ``bud`` bytes: evict the entry whose next decode lookup (``next_use`` [n], its
    batch; ``n_batches`` = none) is farthest ahead; ties: the one whose key was set last. Buckets
    per next-use batch, each a stack (newest key first); bucket b holds only entries looked up in
    decode batch b, so that batch empties it: a decode hit needs no unlink (a prefill hit keeps
    its key and goes to the top of its bucket)."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    cached = np.zeros(n_items, dtype=np.uint8)
    prot = np.full(n_items, -1, dtype=np.int64)
    bn = np.zeros(n_items, dtype=np.int64)  # next older key in the bucket
    bk = np.zeros(n_items, dtype=np.int64)  # the bucket
    bh = np.full(n_batches + 1, -1, dtype=np.int64)
    off = bitmap_levels(n_batches + 1)
    bits = np.zeros(off[-1], dtype=np.uint64)
    miss = np.zeros(n_items, dtype=np.int64)
    hits = 0
    hbytes = 0
    resident = 0
    n_cached = 0
    top = 0  # no bucket above it is in use
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        dec = decode[s]
        if bh[b] != -1:  # its entries are this (decode) batch's hits: each gets a new key below
            bh[b] = -1
            _bit_clear(bits, off, b)
        nh = 0
        nmiss = 0
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            if cached[x] == 1:
                nh += 1
                if not dec:  # a prefill lookup keeps its next decode use: to the top of its bucket
                    k = bk[x]
                    y = bh[k]
                    if y == x:
                        bh[k] = bn[x]
                    else:
                        while bn[y] != x:
                            y = bn[y]
                        bn[y] = bn[x]
                    if bh[k] == -1:
                        _bit_clear(bits, off, k)
                k = int(next_use[i])
                top = max(top, k)
                if bh[k] == -1:
                    _bit_set(bits, off, k)
                bn[x] = bh[k]
                bh[k] = x
                bk[x] = k
            else:
                miss[nmiss] = i
                nmiss += 1
        if dec:
            hits += nh
            hbytes += nh * sz
            hl[lay[x0], j] += nh
        if nmiss == 0:
            continue
        need = nmiss * sz
        live = n_cached - nh
        k = _bit_prev(bits, off, top)
        top = k  # the farthest bucket in use: nothing above it
        while resident + need > bud and live > 0:
            k = _bit_prev(bits, off, k)
            x = bh[k]
            p = -1
            while x != -1 and prot[x] == b:
                p = x
                x = bn[x]
            if x == -1:
                k -= 1  # only this batch's entries here
                continue
            if p == -1:
                bh[k] = bn[x]
                if bh[k] == -1:
                    _bit_clear(bits, off, k)
            else:
                bn[p] = bn[x]
            cached[x] = 0
            n_cached -= 1
            resident -= size[x]
            live -= 1
        for r in range(nmiss):
            i = miss[r]
            x = int(item[i])
            cached[x] = 1
            n_cached += 1
            resident += sz
            k = int(next_use[i])
            top = max(top, k)
            if bh[k] == -1:
                _bit_set(bits, off, k)
            bn[x] = bh[k]
            bh[k] = x
            bk[x] = k
    hd[j] = hits
    hb[j] = hbytes


@jit
def queue_budget(sieve: bool, item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64,
                 bud: int, j: int, hd: I64, hb: I64, hl: I64) -> None:
    """FIFO (evict the oldest insertion; hits change nothing) or, with ``sieve``, SIEVE (a FIFO
    queue with a visited bit: the hand walks from the oldest entry, clears visited bits and evicts
    the first entry not visited since it last passed; Zhang et al., NSDI'24) at ``bud`` bytes."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    cached = np.zeros(n_items, dtype=np.uint8)
    visited = np.zeros(n_items, dtype=np.uint8)
    prot = np.full(n_items, -1, dtype=np.int64)
    nxt = np.zeros(n_items, dtype=np.int64)  # toward newer
    prv = np.zeros(n_items, dtype=np.int64)  # toward older
    miss = np.zeros(n_items + 1, dtype=np.int64)
    hits = 0
    hbytes = 0
    resident = 0
    n_cached = 0
    head = -1  # newest
    tail = -1  # oldest
    hand = -1
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        nmiss = 0
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            c = int(cached[x])
            visited[x] |= c
            miss[nmiss] = i
            nmiss += 1 - c
        nh = (e - s) - nmiss
        if decode[s]:
            hits += nh
            hbytes += nh * sz
            hl[lay[x0], j] += nh
        if nmiss == 0:
            continue
        need = nmiss * sz
        live = n_cached - nh
        while resident + need > bud and live > 0:
            if sieve:
                if hand == -1:
                    hand = tail
                x = hand
                if prot[x] == b or visited[x] == 1:
                    if prot[x] != b:
                        visited[x] = 0
                    hand = nxt[x]
                    continue
                hand = nxt[x]
            else:
                x = tail
                while prot[x] == b:
                    x = nxt[x]
            p = prv[x]
            q = nxt[x]
            if p != -1:
                nxt[p] = q
            else:
                tail = q
            if q != -1:
                prv[q] = p
            else:
                head = p
            cached[x] = 0
            n_cached -= 1
            resident -= size[x]
            live -= 1
        for r in range(nmiss):
            x = int(item[miss[r]])
            cached[x] = 1
            visited[x] = 0
            n_cached += 1
            resident += sz
            prv[x] = head
            nxt[x] = -1
            if head != -1:
                nxt[head] = x
            head = x
            if tail == -1:
                tail = x
    hd[j] = hits
    hb[j] = hbytes


@jit
def static_hits(item: npt.NDArray[np.integer[Any]], decode: B1, lay: I64, size: I64, budgets: I64,
                rank_bytes: I64, hit_dec: I64, hitb_dec: I64, hit_layer: I64) -> None:
    """A static profile: the items whose cumulative bytes in rank order (``rank_bytes`` int64
    [n_items], the bytes of the profile up to and including the item; a large number when the
    item is unranked) fit the budget are resident for the whole replay, nothing else is kept.
    Outputs are difference arrays over budgets (int64 [n_budgets + 1], per layer [n_layer,
    n_budgets + 1]: a cumulative sum gives the counts); ``lay`` int64 [n_items] each item's layer."""
    nb = budgets.shape[0]
    first = np.empty(size.shape[0], dtype=np.int64)  # each item's first budget holding it
    for x in range(size.shape[0]):
        rb = rank_bytes[x]
        j = 0  # first budget >= rb (binary search)
        fh = nb
        while j < fh:
            fm = (j + fh) >> 1
            if budgets[fm] < rb:
                j = fm + 1
            else:
                fh = fm
        first[x] = j
    for i in range(item.shape[0]):
        if decode[i]:
            x = int(item[i])
            j = first[x]
            hit_dec[j] += 1
            hitb_dec[j] += size[x]
            hit_layer[lay[x], j] += 1


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


@jit
def next_decode_use(item: I64, bfirst: I64, decode: B1, n_items: int, out: npt.NDArray[np.integer[Any]]) -> None:
    """``out[i]``: the batch of the next **decode** lookup of lookup ``i``'s item (``n_batches``
    if none): one backward pass."""
    n_batches = bfirst.shape[0] - 1
    nxt = np.full(n_items, n_batches, dtype=np.int64)
    for b in range(n_batches - 1, -1, -1):
        for i in range(bfirst[b], bfirst[b + 1]):
            out[i] = nxt[item[i]]
        for i in range(bfirst[b], bfirst[b + 1]):
            if decode[i]:
                nxt[item[i]] = b


@jit
def compulsory_decode(item: npt.NDArray[np.integer[Any]], decode: B1, n_items: int) -> int:
    """Decode lookups that are their item's first lookup."""
    seen = np.zeros(n_items, dtype=np.uint8)
    out = 0
    for i in range(item.shape[0]):
        x = int(item[i])
        if seen[x] == 0:
            seen[x] = 1
            if decode[i]:
                out += 1
    return out


@jit
def reuse_gaps(item: npt.NDArray[np.integer[Any]], decode: B1, token: I64, n_items: int,
               out: npt.NDArray[np.integer[Any]]) -> int:
    """Decode tokens between consecutive decode lookups of an item, into ``out`` (room for every
    decode lookup); returns how many."""
    last = np.full(n_items, -1, dtype=np.int64)
    m = 0
    for i in range(item.shape[0]):
        if decode[i]:
            x = int(item[i])
            if last[x] >= 0:
                out[m] = token[i] - last[x]
                m += 1
            last[x] = token[i]
    return m


@jit
def uniform_batches(item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64) -> bool:
    """True when every batch's lookups share one layer and one phase."""
    for b in range(bfirst.shape[0] - 1):
        s = bfirst[b]
        ly = lay[int(item[s])]
        d = decode[s]
        for i in range(s + 1, bfirst[b + 1]):
            if lay[int(item[i])] != ly or decode[i] != d:
                return False
    return True


@jit
def decode_lookups(dec: npt.NDArray[np.integer[Any]], n_expert: int, batch0: int, item: I64, batch: I64,
                   token: I64) -> tuple[int, int, int, int]:
    """The decode lookups of ``dec`` [tokens, n_layer, k] in replay order (token, then layer, then
    slot; a slot repeating an earlier slot of its row is no second lookup, ids < 0 none): item
    ``layer * n_expert + id``, batch (one per non-empty row, from ``batch0``) and token (one per
    token with a lookup, from 0) into ``item``, ``batch``, ``token`` when they have room for
    every lookup (size 0: only count). Returns (lookups, batches, tokens, largest id kept or -1)."""
    n_tok, n_layer, k = dec.shape
    fill = item.shape[0] > 0
    n = 0
    nb = batch0
    nt = 0
    top = -1
    for t in range(n_tok):
        any_row = False
        for ly in range(n_layer):
            row_n = 0
            for s in range(k):
                e = int(dec[t, ly, s])
                if e < 0:
                    continue
                dup = False
                for s2 in range(s):
                    if int(dec[t, ly, s2]) == e:
                        dup = True
                        break
                if dup:
                    continue
                top = max(top, e)
                if fill:
                    item[n] = ly * n_expert + e
                    batch[n] = nb
                    token[n] = nt
                n += 1
                row_n += 1
            if row_n > 0:
                nb += 1
                any_row = True
        if any_row:
            nt += 1
    return n, nb - batch0, nt, top
