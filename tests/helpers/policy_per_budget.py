"""The per-budget policy kernels the what-if had before its multi-budget kernels
(tui/analysis/_kernels.py ``lfu_budgets``, ``belady_budgets``, ``queue_budgets``): one call replays
one budget, each with O(1) steps (LFU a 4-ary min-heap whose keys are renewed only when they reach
the top, Belady buckets per next decode use and a bitmap of the non-empty ones, FIFO and SIEVE a
queue). Kept as the compiled per-budget reference: tests/analysis/test_policy_kernels.py holds the
multi-budget kernels to them on random traces, benchmarks/bench_whatif.py measures against them.
Not used by the package.

Arguments as the package's kernels, for one budget ``bud`` (bytes, > 0) written to column ``j``
of ``hd``/``hb`` int64 [n_budgets] and ``hl`` int64 [n_layer, n_budgets]."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt
from numba.cpython.unsafe.numbers import leading_zeros

F = TypeVar("F", bound=Callable[..., Any])
I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]


def jit(fn: F) -> F:
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


def _inline(fn: F) -> F:
    return cast(F, numba.njit(cache=True, nogil=True, inline="always")(fn))


U64 = npt.NDArray[np.uint64]
_clz = cast(Callable[[Any], int], leading_zeros)  # numba's count of leading zero bits
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


def replay_per_budget(policy: str, item: npt.NDArray[np.integer[Any]], bfirst: I64, decode: B1, lay: I64,
                      size: I64, budgets: I64, next_use: npt.NDArray[np.integer[Any]], hd: I64, hb: I64,
                      hl: I64) -> None:
    """``policy`` (``lfu``, ``fifo``, ``sieve``, ``belady``) at each of ``budgets``, one kernel call
    per budget > 0 (a budget of 0 keeps its zeros, as the what-if's plan does)."""
    for j, bud in enumerate(budgets.tolist()):
        if bud <= 0:
            continue
        args = (item, bfirst, decode, lay, size, int(bud), j)
        if policy == "lfu":
            lfu_budget(*args, hd, hb, hl)
        elif policy == "belady":
            belady_budget(*args, next_use, hd, hb, hl)
        else:
            queue_budget(policy == "sieve", *args, hd, hb, hl)
