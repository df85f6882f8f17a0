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


# -- multi-budget policies -----------------------------------------------------------------------
# FIFO, SIEVE, LFU and Belady have no inclusion property under the runtime's rules (LFU and
# Belady have one with experts of one size, not with several; FIFO and SIEVE never), so every
# budget keeps its own cache. One kernel call replays up to 64 budgets of one policy in one pass
# over the trace: a batch is read once, and what does not depend on the budget is kept once per
# item (its batch, its lookup count, its next decode use, its last lookup's place), so a lookup
# that hits at every budget costs a few word operations, not one replay step per budget. Per
# item a 64-bit mask says at which budgets of the group it is resident (bit j: ``budgets[j]``);
# a batch's hits at every budget are its lookups' masks, and only the budgets where some lookup
# missed are visited one by one, to evict and insert there, with per-budget state laid out a row
# per budget. Hits are counted as lookups minus misses, so a budget where the batch hit costs
# nothing. The policy codes are the registry's (tui/analysis/policies.py ``Policy.code``). A
# batch is one layer of one phase (``Lookups``), so a batch's layer, phase and expert size are
# read once. ``item`` is any integer array (int16 when the items fit: less memory traffic);
# ``lay`` int64 [n_items] each item's layer; ``budgets`` int64 [m], 0 < m <= ``GROUP_MAX``, each > 0.
# Outputs: ``hd``/``hb`` int64 [n_budgets] decode hits and their bytes, ``hl`` int64 [n_layer,
# n_budgets] decode hits per layer, columns ``j0 .. j0 + m - 1``.

POLICY_LFU = 0
POLICY_SIEVE = 1
POLICY_BELADY = 2
POLICY_FIFO = 3
#: budgets a kernel call can replay (the bits of a residency mask)
GROUP_MAX = 64
#: budgets the what-if hands one kernel call at most: fewer than 64 keep a group's per-budget
#: state in a core's L2 cache (at 10^6 lookups and the 51-budget sweep, groups of 13 ran FIFO 1.2x
#: and Belady 1.8x faster than a kernel call per budget, groups of 51 slower than groups of 13)
GROUP = 16

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
def _bit_set(bits: U64, off: I64, j: int, k: int) -> None:
    """Set bit ``k`` of column ``j`` of ``bits`` [words, m] (a bitmap per budget, levels ``off``)."""
    for lvl in range(off.shape[0] - 1):
        w = off[lvl] + (k >> 6)
        was = bits[w, j]
        bits[w, j] = was | (_ONE << np.uint64(k & 63))
        if was != 0:
            return
        k >>= 6


@_inline
def _bit_clear(bits: U64, off: I64, j: int, k: int) -> None:
    for lvl in range(off.shape[0] - 1):
        w = off[lvl] + (k >> 6)
        bits[w, j] &= ~(_ONE << np.uint64(k & 63))
        if bits[w, j] != 0:
            return
        k >>= 6


@_inline
def _bit_prev(bits: U64, off: I64, j: int, k: int) -> int:
    """The largest set bit <= ``k`` of column ``j`` (-1 if none)."""
    nlev = off.shape[0] - 1
    lvl = 0
    while True:
        if k < 0:
            return -1
        sh = np.uint64(k & 63)
        mask = _ALL if sh == 63 else (_ONE << (sh + _ONE)) - _ONE
        word = bits[off[lvl] + (k >> 6), j] & mask
        if word != 0:
            k = ((k >> 6) << 6) | (63 - int(_clz(word)))
            break
        lvl += 1
        if lvl == nlev:
            return -1
        k = (k >> 6) - 1
    while lvl > 0:
        lvl -= 1
        k = (k << 6) | (63 - int(_clz(bits[off[lvl] + k, j])))
    return k


@_inline
def _down4(heap: I64, key: I64, j: int, n: int, i: int) -> None:
    """Sift entry ``i`` of the 4-ary min-heap in row ``j`` (``n`` entries) down to its place."""
    x = heap[j, i]
    k = key[j, i]
    while True:
        c = 4 * i + 1
        if c >= n:
            break
        m = c
        mk = key[j, c]
        for d in range(c + 1, min(c + 4, n)):
            if key[j, d] < mk:
                m = d
                mk = key[j, d]
        if mk >= k:
            break
        heap[j, i] = heap[j, m]
        key[j, i] = mk
        i = m
    heap[j, i] = x
    key[j, i] = k


@_inline
def _push4(heap: I64, key: I64, j: int, n: int, x: int, k: int) -> None:
    """Add ``x`` with key ``k`` to the 4-ary min-heap in row ``j`` (``n`` entries)."""
    i = n
    while i > 0:
        p = (i - 1) >> 2
        if key[j, p] <= k:
            break
        heap[j, i] = heap[j, p]
        key[j, i] = key[j, p]
        i = p
    heap[j, i] = x
    key[j, i] = k


@_inline
def _widest(bfirst: I64) -> int:
    w = 1
    for b in range(bfirst.shape[0] - 1):
        w = max(w, bfirst[b + 1] - bfirst[b])
    return w


@_inline
def _misses(cs: U64, w: int, jj: int, ml: I64) -> int:
    """The lookups of a batch (``cs`` [w] their residency masks) that miss at budget ``jj``, as
    places into ``ml``, in routing order; returns how many (no branch on the bits)."""
    sj = np.uint64(jj)
    n = 0
    for r in range(w):
        ml[n] = r
        n += int(((cs[r] >> sj) & _ONE) ^ _ONE)
    return n


@_inline
def _hits_out(mis: I64, misb: I64, decl: I64, decb: int, j0: int, hd: I64, hb: I64, hl: I64) -> None:
    """Decode hits = decode lookups - decode misses, per layer and in all, into columns ``j0 ..``."""
    for jj in range(misb.shape[0]):
        t = 0
        for ly in range(decl.shape[0]):
            h = decl[ly] - mis[ly, jj]
            hl[ly, j0 + jj] = h
            t += h
        hd[j0 + jj] = t
        hb[j0 + jj] = decb - misb[jj]


@jit
def lfu_budgets(item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64, budgets: I64,
                j0: int, hd: I64, hb: I64, hl: I64) -> None:
    """LFU at each of ``budgets``: evict the fewest lookups since the trace began (counts survive
    eviction); ties: the least recently touched, in the runtime's order (a batch's hits in
    routing order, then its misses). Per budget a 4-ary min-heap of (count, touch) keys, one
    entry per resident item; a hit only counts and stamps its item (a key never shrinks), an
    entry's key is renewed when it reaches the top, so hot items cost nothing. The count and both
    stamps an item can have after a lookup (``s + i`` as a hit, ``e + i`` as a miss: batch [s, e),
    lookup i) are kept once per item, and which one applies at a budget is the last lookup's hit
    bit there."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    m = budgets.shape[0]
    valid = _ALL if m == 64 else (_ONE << np.uint64(m)) - _ONE
    cm = np.zeros(n_items, dtype=np.uint64)  # resident at budget j: bit j
    lasth = np.zeros(n_items, dtype=np.uint64)  # the last lookup hit at budget j: bit j
    prot = np.full(n_items, -1, dtype=np.int64)
    count = np.zeros(n_items, dtype=np.int64)
    tsh = np.zeros(n_items, dtype=np.int64)
    tsm = np.zeros(n_items, dtype=np.int64)
    heap = np.zeros((m, n_items), dtype=np.int64)
    key = np.zeros((m, n_items), dtype=np.int64)
    hn = np.zeros(m, dtype=np.int64)
    resident = np.zeros(m, dtype=np.int64)
    aside = np.zeros(n_items, dtype=np.int64)
    cs = np.zeros(_widest(bfirst), dtype=np.uint64)  # the batch's residency masks
    ml = np.zeros(cs.shape[0], dtype=np.int64)  # the batch's misses at one budget
    n_layer = hl.shape[0]
    mis = np.zeros((n_layer, m), dtype=np.int64)
    misb = np.zeros(m, dtype=np.int64)
    decl = np.zeros(n_layer, dtype=np.int64)
    decb = 0
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        ly = lay[x0]
        dec = decode[s]
        anym = np.uint64(0)
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            count[x] += 1
            c = cm[x]
            cs[i - s] = c
            lasth[x] = c
            tsh[x] = s + i  # a hit: 2s + its place, before the batch's misses
            tsm[x] = e + i  # a miss: after the batch's hits, in routing order
            anym |= ~c
        anym &= valid
        if dec:
            decl[ly] += e - s
            decb += (e - s) * sz
        while anym != 0:
            jj = int(_ctz(anym))
            anym &= anym - _ONE
            bit = _ONE << np.uint64(jj)
            nmiss = _misses(cs, e - s, jj, ml)
            if dec:
                mis[ly, jj] += nmiss
                misb[jj] += nmiss * sz
            need = nmiss * sz
            bud = budgets[jj]
            res = resident[jj]
            n = hn[jj]
            na = 0
            q = 0  # the misses in the heap so far: an eviction hands its place to the next one
            while res + need > bud and n > 0:
                x = heap[jj, 0]
                cur = (count[x] << 32) | (tsh[x] if (lasth[x] & bit) != 0 else tsm[x])
                if key[jj, 0] != cur:  # counted since it was keyed: a larger key, further down
                    key[jj, 0] = cur
                    _down4(heap, key, jj, n, 0)
                    continue
                if prot[x] != b and q < nmiss:  # evicted, and a miss of this batch (kept) in its place
                    y = int(item[s + ml[q]])
                    q += 1
                    cm[y] |= bit
                    res += sz
                    need -= sz
                    heap[jj, 0] = y
                    key[jj, 0] = (count[y] << 32) | tsm[y]
                    _down4(heap, key, jj, n, 0)
                else:
                    n -= 1
                    if n > 0:
                        heap[jj, 0] = heap[jj, n]
                        key[jj, 0] = key[jj, n]
                        _down4(heap, key, jj, n, 0)
                    if prot[x] == b:
                        aside[na] = x  # this batch's hit or a miss already in: kept
                        na += 1
                        continue
                cm[x] &= ~bit
                res -= size[x]
            for r in range(na):
                x = aside[r]
                _push4(heap, key, jj, n, x, (count[x] << 32) | (tsh[x] if (lasth[x] & bit) != 0 else tsm[x]))
                n += 1
            for r in range(q, nmiss):
                x = int(item[s + ml[r]])
                cm[x] |= bit
                res += sz
                _push4(heap, key, jj, n, x, (count[x] << 32) | tsm[x])
                n += 1
            hn[jj] = n
            resident[jj] = res
    _hits_out(mis, misb, decl, decb, j0, hd, hb, hl)


@jit
def belady_budgets(item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64,
                   budgets: I64, j0: int, next_use: npt.NDArray[np.integer[Any]], hd: I64, hb: I64,
                   hl: I64) -> None:
    """Belady at each of ``budgets``: evict the entry whose next decode lookup (``next_use`` [n],
    its batch; ``n_batches`` = none) is farthest ahead; ties: the one whose key was set last (at
    its last lookup: a batch's hits in routing order, then its misses).

    An item's key does not depend on the budget, so the buckets of keys are kept once: bucket k
    (a decode batch) lists the items whose next decode lookup is batch k, at most that batch's
    lookups, and batch k empties it (its members are that batch's hits or misses). Per budget,
    a bitmap of the buckets holding a resident item (64 buckets a word, a word per 64 words above
    it; a column per budget) finds the farthest in a few word operations, the resident members
    are found from the bucket's list and the residency masks, and the newest of them by its last
    lookup's batch, hit bit and place. Items never looked up again in decode share one bucket of
    any size: a stack per budget (doubly linked, newest first)."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    none = n_batches
    m = budgets.shape[0]
    valid = _ALL if m == 64 else (_ONE << np.uint64(m)) - _ONE
    cm = np.zeros(n_items, dtype=np.uint64)
    lasth = np.zeros(n_items, dtype=np.uint64)
    prot = np.full(n_items, -1, dtype=np.int64)
    key = np.full(n_items, -1, dtype=np.int64)  # the next decode batch after the last lookup (-1: none yet)
    lastb = np.zeros(n_items, dtype=np.int64)
    lasti = np.zeros(n_items, dtype=np.int64)
    gnext = np.full(n_items, -1, dtype=np.int64)
    ghead = np.full(max(1, n_batches), -1, dtype=np.int32)
    sn = np.full((m, n_items), -1, dtype=np.int32)  # the stack of the never-again items: toward older
    sp = np.full((m, n_items), -1, dtype=np.int32)  # toward newer
    stop = np.full(m, -1, dtype=np.int64)
    off = bitmap_levels(max(1, n_batches))
    bits = np.zeros((off[-1], m), dtype=np.uint64)
    resident = np.zeros(m, dtype=np.int64)
    n_cached = np.zeros(m, dtype=np.int64)
    cs = np.zeros(_widest(bfirst), dtype=np.uint64)  # the batch's residency masks
    ml = np.zeros(cs.shape[0], dtype=np.int64)  # the batch's misses at one budget
    n_layer = hl.shape[0]
    mis = np.zeros((n_layer, m), dtype=np.int64)
    misb = np.zeros(m, dtype=np.int64)
    decl = np.zeros(n_layer, dtype=np.int64)
    decb = 0
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        ly = lay[x0]
        dec = decode[s]
        if dec:
            ghead[b] = -1  # its members are this batch's lookups: each gets a new key below
        anym = np.uint64(0)
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            c = cm[x]
            cs[i - s] = c
            anym |= ~c
            k = int(next_use[i])
            ko = key[x]
            if c != 0:
                cc = c
                while cc != 0:
                    jj = int(_ctz(cc))
                    cc &= cc - _ONE
                    if k == none:  # to the top of the never-again stack
                        if ko == none:
                            p = sp[jj, x]
                            q = sn[jj, x]
                            if p != -1:
                                sn[jj, p] = q
                            else:
                                stop[jj] = q
                            if q != -1:
                                sp[jj, q] = p
                        t = stop[jj]
                        sn[jj, x] = t
                        sp[jj, x] = -1
                        if t != -1:
                            sp[jj, t] = x
                        stop[jj] = x
                    elif k != ko:
                        _bit_set(bits, off, jj, k)
            if k != none and k != ko:
                gnext[x] = ghead[k]
                ghead[k] = x
            key[x] = k
            lastb[x] = b
            lasti[x] = i
            lasth[x] = c
        anym &= valid
        if dec:
            decl[ly] += e - s
            decb += (e - s) * sz
        while anym != 0:
            jj = int(_ctz(anym))
            anym &= anym - _ONE
            bit = _ONE << np.uint64(jj)
            nmiss = _misses(cs, e - s, jj, ml)
            if dec:
                mis[ly, jj] += nmiss
                misb[jj] += nmiss * sz
            need = nmiss * sz
            bud = budgets[jj]
            res = resident[jj]
            live = n_cached[jj] - ((e - s) - nmiss)  # resident entries not looked up in this batch
            kc = none - 1
            while res + need > bud and live > 0:
                x = stop[jj]
                while x != -1 and prot[x] == b:
                    x = sn[jj, x]
                if x != -1:  # a never-again item: the farthest
                    p = sp[jj, x]
                    q = sn[jj, x]
                    if p != -1:
                        sn[jj, p] = q
                    else:
                        stop[jj] = q
                    if q != -1:
                        sp[jj, q] = p
                else:
                    k = _bit_prev(bits, off, jj, kc)
                    best = -1
                    held = 0
                    y = int(ghead[k])
                    while y != -1:
                        if (cm[y] & bit) != 0:
                            held += 1
                            if prot[y] != b:
                                if best == -1:
                                    best = y
                                else:
                                    yb = lastb[y]
                                    bb = lastb[best]
                                    ym = 1 if (lasth[y] & bit) == 0 else 0
                                    bm = 1 if (lasth[best] & bit) == 0 else 0
                                    if yb > bb or (yb == bb and (ym > bm or (ym == bm and lasti[y] > lasti[best]))):
                                        best = y
                        y = gnext[y]
                    if best == -1:
                        kc = k - 1  # only this batch's entries here
                        continue
                    if held == 1:
                        _bit_clear(bits, off, jj, k)
                    kc = k
                    x = best
                cm[x] &= ~bit
                res -= size[x]
                live -= 1
            n_cached[jj] = live + (e - s)  # the entries kept, then the whole batch
            for q in range(nmiss):
                x = int(item[s + ml[q]])
                cm[x] |= bit
                res += sz
                k = key[x]
                if k == none:
                    t = stop[jj]
                    sn[jj, x] = t
                    sp[jj, x] = -1
                    if t != -1:
                        sp[jj, t] = x
                    stop[jj] = x
                else:
                    _bit_set(bits, off, jj, k)
            resident[jj] = res
    _hits_out(mis, misb, decl, decb, j0, hd, hb, hl)


@jit
def queue_budgets(sieve: bool, item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64, size: I64,
                  budgets: I64, j0: int, hd: I64, hb: I64, hl: I64) -> None:
    """FIFO (evict the oldest insertion; hits change nothing) or, with ``sieve``, SIEVE (a FIFO
    queue with a visited bit: the hand walks from the oldest entry, clears visited bits and evicts
    the first entry not visited since it last passed; Zhang et al., NSDI'24) at each of
    ``budgets``: a queue per budget (a row of links), the visited bits a mask per item."""
    n_items = size.shape[0]
    n_batches = bfirst.shape[0] - 1
    m = budgets.shape[0]
    valid = _ALL if m == 64 else (_ONE << np.uint64(m)) - _ONE
    cm = np.zeros(n_items, dtype=np.uint64)
    vis = np.zeros(n_items, dtype=np.uint64)
    prot = np.full(n_items, -1, dtype=np.int64)
    nxt = np.full((m, n_items), -1, dtype=np.int32)  # toward newer
    prv = np.full((m, n_items), -1, dtype=np.int32)  # toward older
    heads = np.full(m, -1, dtype=np.int64)  # newest
    tails = np.full(m, -1, dtype=np.int64)  # oldest
    hands = np.full(m, -1, dtype=np.int64)
    resident = np.zeros(m, dtype=np.int64)
    n_cached = np.zeros(m, dtype=np.int64)
    cs = np.zeros(_widest(bfirst), dtype=np.uint64)  # the batch's residency masks
    ml = np.zeros(cs.shape[0], dtype=np.int64)  # the batch's misses at one budget
    n_layer = hl.shape[0]
    mis = np.zeros((n_layer, m), dtype=np.int64)
    misb = np.zeros(m, dtype=np.int64)
    decl = np.zeros(n_layer, dtype=np.int64)
    decb = 0
    for b in range(n_batches):
        s = bfirst[b]
        e = bfirst[b + 1]
        x0 = int(item[s])
        sz = size[x0]
        ly = lay[x0]
        dec = decode[s]
        anym = np.uint64(0)
        for i in range(s, e):
            x = int(item[i])
            prot[x] = b
            c = cm[x]
            vis[x] |= c
            cs[i - s] = c
            anym |= ~c
        anym &= valid
        if dec:
            decl[ly] += e - s
            decb += (e - s) * sz
        while anym != 0:
            jj = int(_ctz(anym))
            anym &= anym - _ONE
            bit = _ONE << np.uint64(jj)
            nmiss = _misses(cs, e - s, jj, ml)
            if dec:
                mis[ly, jj] += nmiss
                misb[jj] += nmiss * sz
            need = nmiss * sz
            bud = budgets[jj]
            res = resident[jj]
            live = n_cached[jj] - ((e - s) - nmiss)
            head = heads[jj]
            tail = tails[jj]
            hand = hands[jj]
            while res + need > bud and live > 0:
                if sieve:
                    if hand == -1:
                        hand = tail
                    x = hand
                    if prot[x] == b or (vis[x] & bit) != 0:
                        if prot[x] != b:
                            vis[x] &= ~bit
                        hand = nxt[jj, x]
                        continue
                    hand = nxt[jj, x]
                else:
                    x = tail
                    while prot[x] == b:
                        x = nxt[jj, x]
                p = prv[jj, x]
                q = nxt[jj, x]
                if p != -1:
                    nxt[jj, p] = q
                else:
                    tail = q
                if q != -1:
                    prv[jj, q] = p
                else:
                    head = p
                cm[x] &= ~bit
                res -= size[x]
                live -= 1
            for q in range(nmiss):
                x = int(item[s + ml[q]])
                cm[x] |= bit
                vis[x] &= ~bit
                res += sz
                prv[jj, x] = head
                nxt[jj, x] = -1
                if head != -1:
                    nxt[jj, head] = x
                head = x
                if tail == -1:
                    tail = x
            n_cached[jj] = live + (e - s)  # the entries kept, then the whole batch
            heads[jj] = head
            tails[jj] = tail
            hands[jj] = hand
            resident[jj] = res
    _hits_out(mis, misb, decl, decb, j0, hd, hb, hl)


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
def item_lookups(item: npt.NDArray[np.integer[Any]], decode: B1, dec_out: I64, every_out: I64) -> int:
    """Adds each lookup to its item's count in ``every_out`` and, a decode lookup, in ``dec_out``
    (int64 [n_items] each): one pass, no temporary. Returns the lookups whose item is outside
    0..n_items-1 (not counted)."""
    n_items = every_out.shape[0]
    bad = 0
    for i in range(item.shape[0]):
        x = int(item[i])
        if x < 0 or x >= n_items:
            bad += 1
            continue
        every_out[x] += 1
        if decode[i]:
            dec_out[x] += 1
    return bad


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


# -- plain mmap's page cache (tui/analysis/pagecache.py) ------------------------------------------------
@_inline
def _pc_unlink(c: int, state: Any, prv: I64, nxt: I64, head: I64, tail: I64, size: I64) -> None:
    lst = state[c]
    p, q = prv[c], nxt[c]
    if p >= 0:
        nxt[p] = q
    else:
        head[lst] = q
    if q >= 0:
        prv[q] = p
    else:
        tail[lst] = p
    prv[c] = -1
    nxt[c] = -1
    size[lst] -= 1
    state[c] = 0


@_inline
def _pc_push(c: int, lst: int, front: bool, state: Any, prv: I64, nxt: I64, head: I64, tail: I64,
             size: I64) -> None:
    state[c] = lst
    if head[lst] < 0:
        head[lst] = c
        tail[lst] = c
        prv[c] = -1
        nxt[c] = -1
    elif front:
        prv[c] = -1
        nxt[c] = head[lst]
        prv[head[lst]] = c
        head[lst] = c
    else:
        nxt[c] = -1
        prv[c] = tail[lst]
        nxt[tail[lst]] = c
        tail[lst] = c
    size[lst] += 1


@_inline
def _pc_add(c: int, room: int, state: Any, prv: I64, nxt: I64, head: I64, tail: I64, size: I64, mark: I64) -> None:
    if room <= 0:
        return
    while size[1] + size[2] >= room:
        old = head[1] if size[1] > 0 else head[2]
        _pc_unlink(old, state, prv, nxt, head, tail, size)
        mark[old] = -1
    _pc_push(c, 1, False, state, prv, nxt, head, tail, size)


@jit
def mmap_replay(items: I64, decode: B1, span_off: I64, span_a: I64, span_b: I64, is_expert: B1, room: int,
                window: int, two: bool, ahead: bool) -> tuple[int, int]:
    """Plain mmap's page cache over a trace in chunks (``pagecache.replay_mmap``'s rules): lookup i
    touches the chunk ranges ``span_a[s]..span_b[s]`` for s in ``span_off[items[i]]`` ..
    ``span_off[items[i] + 1]``; ``is_expert`` [n_chunks] which chunks are cached and counted;
    ``room`` chunks; ``window`` the readahead in chunks; ``two``: the two lists, else one LRU;
    ``ahead``: read-ahead marks. Returns (chunks read by decode lookups, their faults)."""
    n = is_expert.shape[0]
    state = np.zeros(n, np.int8)
    prv = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    mark = np.full(n, -1, np.int64)
    head = np.full(3, -1, np.int64)
    tail = np.full(3, -1, np.int64)
    size = np.zeros(3, np.int64)
    buf = np.empty(window, np.int64)
    half = room // 2
    for c in range(n):
        if is_expert[c]:
            _pc_add(c, room, state, prv, nxt, head, tail, size, mark)
    read = 0
    faults = 0
    for i in range(items.shape[0]):
        counted = decode[i]
        it = items[i]
        for s in range(span_off[it], span_off[it + 1]):
            for c in range(span_a[s], span_b[s] + 1):
                start = -1
                keep = -1
                if state[c] != 0:
                    if state[c] == 2 or not two:
                        lst = state[c]
                        _pc_unlink(c, state, prv, nxt, head, tail, size)
                        _pc_push(c, lst, False, state, prv, nxt, head, tail, size)
                    else:
                        _pc_unlink(c, state, prv, nxt, head, tail, size)
                        _pc_push(c, 2, False, state, prv, nxt, head, tail, size)
                        while size[2] > half:
                            old = head[2]
                            _pc_unlink(old, state, prv, nxt, head, tail, size)
                            _pc_push(old, 1, True, state, prv, nxt, head, tail, size)
                    if mark[c] < 0:
                        continue
                    start = mark[c]
                    mark[c] = -1
                else:
                    if counted:
                        faults += 1
                    start = max(0, c - window // 2)
                    keep = c
                got = 0
                for x in range(start, min(start + window, n)):
                    if is_expert[x] and state[x] == 0:
                        buf[got] = x
                        got += 1
                for j in range(got):
                    x = buf[j]
                    mark[x] = -1
                    if x != keep:
                        _pc_add(x, room, state, prv, nxt, head, tail, size, mark)
                if ahead:
                    m = start + window - max(1, window // 4)
                    if m < n:
                        mark[m] = start + window
                if counted:
                    read += got
                if keep >= 0:
                    _pc_add(keep, room, state, prv, nxt, head, tail, size, mark)
    return read, faults
