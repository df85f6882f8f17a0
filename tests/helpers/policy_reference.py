"""The per-budget policy replay as it was before each policy got its own kernel (LFU and Belady
with buckets of doubly linked lists, a scan over empty buckets; every budget replayed in turn).
Kept for the tests (tests/analysis/test_policy_kernels.py: the package's kernels give identical
outputs on random traces) and the benchmarks (benchmarks/bench_whatif.py: the compiled per-budget
baseline). Not used by the package."""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

POLICY_LFU = 0
POLICY_SIEVE = 1
POLICY_BELADY = 2
POLICY_FIFO = 3


@numba.njit(cache=True, nogil=True)
def policy_run_reference(policy: int, item: I64, bfirst: I64, decode: B1, layer: I64, size: I64, budgets: I64,
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
