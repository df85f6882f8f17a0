"""Replay routing through expert-cache policies at every budget (the what-if core).

Semantics (runtime/expert_cache.py ``ExpertCache``; docs/analysis.md "Runtime semantics"): one
lookup per unique expert per layer batch, decided against the cache as the batch found it;
duplicates only promote; the batch's own entries are never evicted to make room for it; a
prompt chunk is one batch per layer; the budget is bytes of resident expert slices (no page
rounding: the runtime accounts whole slices, ``expert_bytes`` per layer); a budget of 0 is no
cache. Hit figures are the runtime's definition: hits over **decode** lookups (prefill lookups
change the cache but are not counted), named ``decode_hit_pct``.

Policies: ``lru`` (the runtime's, one pass for all budgets), ``lfu``, ``fifo``, ``sieve``,
``belady`` (offline: evict the expert needed farthest ahead: the ceiling), ``static`` (a profile
of the hottest experts from a train part, scored on a test part), ``lru_layer_equal`` and
``lru_layer_alloc`` (one LRU per layer: the budget split evenly, or by :mod:`.layers`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from bmoe_top.parsers.strp import StrpProfile, profile_from_counts

from . import _kernels as K
from . import policies as P
from .lookups import Lookups, profile_fill

__all__ = ["Curve", "LruState", "POLICIES", "dense_budgets", "sweep_budgets", "lru_curve", "lru_hit_flags",
           "replay_lru", "policy_curve", "policy_curves", "plan_policy_curves", "plan_layer_curves", "Plan",
           "run_tasks", "Task", "workers", "static_curve", "static_ranking", "layer_curves",
           "lru_profile_curve", "compulsory_decode_misses", "decode_evictions", "token_evictions", "strp_from_lookups",
           "MIB"]

MIB = 1024 * 1024
#: The largest budget a replay takes, MiB (1 PiB: its byte count stays far inside int64)
MAX_BUDGET_MIB = float(1 << 30)
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
T = TypeVar("T")

#: policy name -> what it models (the registry: tui/analysis/policies.py)
POLICIES: dict[str, str] = {p.name: p.description for p in P.POLICIES}


@dataclass(frozen=True, slots=True, eq=False)
class Curve:
    """One policy's replay at each budget. Arrays over budgets have length ``n_budgets``.

    ``budgets`` int64 bytes (ascending); ``decode_hits`` int64 hits among the decode lookups;
    ``hit_bytes`` int64 bytes of those hits; ``layer_hits`` int64 [n_layer, n_budgets];
    ``decode_lookups``/``decode_bytes``/``layer_lookups`` the totals they are out of;
    ``decode_tokens`` tokens the decode lookups belong to. ``note``: what the numbers assume.
    """

    policy: str
    budgets: I64
    decode_hits: I64
    hit_bytes: I64
    layer_hits: I64
    decode_lookups: int
    decode_bytes: int
    layer_lookups: I64
    decode_tokens: int
    note: str = ""

    @property
    def budgets_mib(self) -> F64:
        return self.budgets / MIB

    @property
    def decode_hit_pct(self) -> F64:
        """Hits per 100 decode lookups (the runtime's hit %), NaN without decode lookups."""
        if self.decode_lookups == 0:
            return np.full(self.budgets.shape[0], np.nan)
        return 100.0 * self.decode_hits / self.decode_lookups

    @property
    def read_mib_per_token(self) -> F64:
        """MiB read from flash per decode token (the misses' bytes), NaN without decode tokens."""
        if self.decode_tokens == 0:
            return np.full(self.budgets.shape[0], np.nan)
        return (self.decode_bytes - self.hit_bytes) / MIB / self.decode_tokens

    def io_s_per_token(self, read_mib_s: float) -> F64:
        """Estimated flash read seconds per token at ``read_mib_s`` MiB/s (serial reads).
        Raises ValueError for a bandwidth <= 0."""
        if not read_mib_s > 0:
            raise ValueError(f"read bandwidth must be > 0 MiB/s (got {read_mib_s})")
        return self.read_mib_per_token / read_mib_s

    def select(self, budgets: npt.ArrayLike) -> Curve:
        """The curve at ``budgets`` (bytes, each one of this curve's): exact, since a replay at
        one budget does not depend on the others. Raises KeyError for a budget not replayed."""
        idx = [self.at(int(x)) for x in np.asarray(budgets, dtype=np.int64).reshape(-1)]
        return Curve(self.policy, self.budgets[idx], self.decode_hits[idx], self.hit_bytes[idx],
                     self.layer_hits[:, idx], self.decode_lookups, self.decode_bytes, self.layer_lookups,
                     self.decode_tokens, self.note)

    def at(self, budget: int) -> int:
        """Index of ``budget`` (bytes) in ``budgets``. Raises KeyError if it was not replayed."""
        j = int(np.searchsorted(self.budgets, budget))
        if j >= self.budgets.shape[0] or int(self.budgets[j]) != int(budget):
            raise KeyError(f"budget {budget} bytes was not replayed")
        return j


def _check_budgets(budgets: npt.ArrayLike) -> I64:
    b = np.asarray(budgets, dtype=np.float64).reshape(-1)
    if b.size == 0:
        raise ValueError("no budgets to replay")
    if not np.isfinite(b).all() or (b < 0).any() or (b > MAX_BUDGET_MIB * MIB).any():
        raise ValueError(f"budgets must be byte counts from 0 to {MAX_BUDGET_MIB * MIB:.0f}")
    return np.unique(np.floor(b).astype(np.int64))


def dense_budgets(lk: Lookups, max_points: int = 512) -> I64:
    """Budgets (bytes) from 0 to the whole bank in steps of whole smallest experts, at most
    about ``max_points`` of them: the x axis of a curve "over all budgets"."""
    moe = lk.moe_layers()
    if moe.size == 0:
        return np.zeros(1, dtype=np.int64)
    unit = int(lk.layer_bytes()[moe].min())
    bank = lk.bank_bytes
    steps = max(1, -(-bank // unit // max(1, max_points)))
    out = np.arange(0, bank + 1, unit * steps, dtype=np.int64)
    return np.unique(np.append(out, bank))


def sweep_budgets(lk: Lookups, n: int = 50, extra: npt.ArrayLike = ()) -> I64:
    """``n`` budgets (bytes) evenly spaced from the token cycle T to the whole bank, plus ``extra``
    (e.g. the run's own budget): the default what-if sweep."""
    lo, hi = lk.token_cycle_bytes, lk.bank_bytes
    pts = np.linspace(lo, max(lo, hi), max(2, n))
    return _check_budgets(np.concatenate([pts, np.asarray(extra, dtype=np.float64).reshape(-1)]))


def _totals(lk: Lookups) -> tuple[int, int, I64]:
    """(decode lookups, their bytes, decode lookups per layer)."""
    dec, _every = lk.item_counts()
    return int(dec.sum()), int((dec * lk.item_bytes).sum()), dec.reshape(lk.n_layer, lk.n_expert).sum(axis=1)


class LruState:
    """The one-pass LRU replay at every budget of ``budgets`` (int64 bytes, ascending), fed batch
    by batch: :meth:`feed` any number of times, :meth:`counts` at any moment.

    The state does not grow with the lookups fed: per item its last lookup (batch, place) and
    whether it missed at each budget (uint8 [n_items, n_budgets]), and a log of the batches that
    are still some item's last batch (the kernel reads an item's batch-mates there), which
    :meth:`_compact` renumbers when it fills (dead batches dropped, a Fenwick tree over the
    live ones rebuilt). Memory: about n_items x n_budgets bytes plus ``chunk`` lookups.
    """

    def __init__(self, n_items: int, n_layer: int, item_bytes: npt.ArrayLike, budgets: npt.ArrayLike,
                 chunk: int = 1 << 16):
        b = np.asarray(budgets, dtype=np.int64).reshape(-1)
        nb = b.shape[0]
        self.budgets = b
        self.n_items = n_items
        self.size = np.asarray(item_bytes, dtype=np.int64).reshape(-1)
        if self.size.shape[0] != n_items:
            raise ValueError(f"{self.size.shape[0]} item sizes for {n_items} items")
        self.n_expert = max(1, n_items // max(1, n_layer))
        self.lay = np.minimum(np.arange(n_items, dtype=np.int64) // self.n_expert, max(0, n_layer - 1))
        self.last_batch = np.full(n_items, -1, dtype=np.int64)
        self.last_rpos = np.zeros(n_items, dtype=np.int64)
        self.status = np.ones((n_items, nb), dtype=np.uint8)
        self.srange = np.tile(np.array([0, nb, nb], dtype=np.int64), (n_items, 1))  # never looked up: all miss
        self.over = np.zeros(nb, dtype=np.uint8)
        self.bover = np.zeros(nb, dtype=np.int64)
        self.scal = np.zeros(K.N_SCALARS, dtype=np.int64)
        self.stage = np.zeros((1, nb), dtype=np.uint8)
        self.hit_dec = np.zeros(nb + 1, dtype=np.int64)
        self.hit_pre = np.zeros(nb + 1, dtype=np.int64)
        self.hitb_dec = np.zeros(nb + 1, dtype=np.int64)
        self.hit_layer = np.zeros((max(1, n_layer), nb + 1), dtype=np.int64)
        self.chunk = max(1, int(chunk))
        # the log: live batches' lookups, then the batches being fed; room for every item once
        # (each is a live member of exactly one batch) and a chunk
        cap_l = n_items + self.chunk
        self.log_item = np.zeros(cap_l, dtype=np.int64)
        self.log_dec = np.zeros(cap_l, dtype=np.bool_)
        self.log_bf = np.zeros(cap_l + 1, dtype=np.int64)
        self.fen = np.zeros(cap_l + 1, dtype=np.int64)
        self.n_log = 0  # batches in the log
        self.fed_batches = 0
        self.compactions = 0

    def nbytes(self) -> int:
        """Bytes of the state's arrays (constant: it never grows with the lookups fed)."""
        return sum(int(a.nbytes) for a in (self.last_batch, self.last_rpos, self.status, self.srange, self.over,
                                            self.bover, self.stage, self.hit_dec, self.hit_pre, self.hitb_dec,
                                            self.hit_layer, self.log_item, self.log_dec, self.log_bf, self.fen,
                                            self.lay, self.size))

    def _compact(self) -> None:
        """Keep only the log's live batches (some item's last batch), each with its live members
        in routing order, renumbered 0..m-1 in order; rebuild the Fenwick tree over them."""
        seen = np.flatnonzero(self.last_batch >= 0)
        order = seen[np.lexsort((self.last_rpos[seen], self.last_batch[seen]))]
        old = self.last_batch[order]
        live, first, counts = np.unique(old, return_index=True, return_counts=True)
        m = int(live.shape[0])
        self.log_item[: order.shape[0]] = order
        self.log_bf[0] = 0
        self.log_bf[1: m + 1] = np.cumsum(counts)
        new_id = np.repeat(np.arange(m, dtype=np.int64), counts)
        self.last_batch[order] = new_id
        # a budget holding an oversized batch compares batch ids: the first live batch at or
        # after it gives the same answer for every live batch
        self.bover[:] = np.searchsorted(live, self.bover, side="left")
        point = np.zeros(self.fen.shape[0], dtype=np.int64)
        np.add.at(point, new_id + 1, self.size[order])
        prefix = np.cumsum(point)
        i = np.arange(self.fen.shape[0], dtype=np.int64)
        self.fen[:] = prefix - prefix[i - (i & -i)]  # node i: the batches (i - lowbit(i), i]
        self.fen[0] = 0
        self.n_log = m
        self.compactions += 1

    def feed(self, item: npt.ArrayLike, bfirst: npt.ArrayLike, decode: npt.ArrayLike, b0: int = 0,
             b1: int | None = None, hit_out: U8 | None = None) -> None:
        """Replay batches ``b0 .. b1-1`` (default: all) of the lookups ``item`` (any integers,
        item ids) whose batches start at ``bfirst`` [n_batches + 1] (indices into ``item``);
        ``decode`` bool per lookup. ``hit_out`` uint8 [n, n_budgets]: per-lookup hit flags, row
        = the lookup's index in ``item``. Raises ValueError for an item id out of range."""
        it = np.asarray(item)
        bf = np.asarray(bfirst, dtype=np.int64)
        dec = np.asarray(decode, dtype=np.bool_)
        stop = bf.shape[0] - 1 if b1 is None else b1
        out = hit_out if hit_out is not None else np.zeros((0, self.budgets.shape[0]), dtype=np.uint8)
        b = b0
        while b < stop:
            # as many batches as fit a chunk (at least one: a batch larger than a chunk alone)
            s = int(bf[b])
            e = int(np.searchsorted(bf, s + self.chunk, side="right")) - 1
            e = min(max(e, b + 1), stop)
            n_new = int(bf[e]) - s
            start = int(self.log_bf[self.n_log])
            if start + n_new > self.log_item.shape[0] or self.n_log + (e - b) + 1 > self.fen.shape[0] - 1:
                self._compact()
                start = int(self.log_bf[self.n_log])
                if start + n_new > self.log_item.shape[0] or self.n_log + (e - b) + 1 > self.fen.shape[0] - 1:
                    self._room(start + n_new, self.n_log + (e - b) + 1)
            chunk_items = it[s: s + n_new]
            if n_new and (int(chunk_items.min()) < 0 or int(chunk_items.max()) >= self.n_items):
                raise ValueError(f"an item id outside 0..{self.n_items - 1}")
            self.log_item[start: start + n_new] = chunk_items
            self.log_dec[start: start + n_new] = dec[s: s + n_new]
            nb0 = self.n_log
            self.log_bf[nb0 + 1: nb0 + 1 + (e - b)] = bf[b + 1: e + 1] - s + start
            widest = int(np.diff(bf[b: e + 1]).max())
            if widest > self.stage.shape[0]:
                self.stage = np.zeros((widest, self.budgets.shape[0]), dtype=np.uint8)
            K.lru_feed(self.log_item, self.log_bf, nb0, nb0 + (e - b), self.log_dec, self.lay, self.size, self.budgets,
                       self.last_batch, self.last_rpos, self.status, self.srange, self.fen, self.over, self.bover,
                       self.scal, self.stage, self.hit_dec, self.hit_pre, self.hitb_dec, self.hit_layer, out,
                       s - start)
            self.n_log += e - b
            self.fed_batches += e - b
            b = e

    def _room(self, lookups: int, batches: int) -> None:
        """Grow the log for one batch wider than a chunk (kept for the state's life)."""
        cap = max(lookups, batches) + self.chunk
        for name in ("log_item", "log_dec"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        bf = np.zeros(cap + 1, dtype=np.int64)
        bf[: self.log_bf.shape[0]] = self.log_bf
        self.log_bf = bf
        self.fen = np.zeros(cap + 1, dtype=np.int64)
        self._compact()

    def counts(self) -> tuple[I64, I64, I64, I64]:
        """(decode hits, prefill hits, decode hit bytes, per-layer decode hits) at each budget."""
        nb = self.budgets.shape[0]
        return (np.cumsum(self.hit_dec)[:nb], np.cumsum(self.hit_pre)[:nb], np.cumsum(self.hitb_dec)[:nb],
                np.cumsum(self.hit_layer, axis=1)[:, :nb])


def _lru_state(lk: Lookups, budgets: I64, hit_out: U8 | None = None) -> LruState:
    st = LruState(lk.n_items, lk.n_layer, lk.item_bytes, budgets)
    st.feed(lk.item, lk.batch_first(), lk.decode, hit_out=hit_out)
    return st


def lru_curve(lk: Lookups, budgets: npt.ArrayLike | None = None) -> Curve:
    """The runtime's LRU at every budget in one pass (default: :func:`dense_budgets`).

    Exact: the same hits as replaying each budget on its own (:func:`replay_lru`), proved by
    tests/analysis/test_cachesim.py; docs/analysis.md "One pass for every budget".
    Raises ValueError for negative or non-finite budgets.
    """
    b = dense_budgets(lk) if budgets is None else _check_budgets(budgets)
    st = _lru_state(lk, b)
    hd, _hp, hb, hl = st.counts()
    dl, db, ll = _totals(lk)
    return Curve("lru", b, hd, hb, hl, dl, db, ll, lk.n_decode_tokens)


def lru_hit_flags(lk: Lookups, budgets: npt.ArrayLike) -> U8:
    """uint8 [n, n_budgets]: 1 where the runtime's LRU hits that lookup at that budget (one pass);
    columns follow the sorted distinct budgets. Compare a column with ``lk.recorded_hit`` to check
    a run recorded at that budget."""
    b = _check_budgets(budgets)
    out = np.zeros((lk.n, b.shape[0]), dtype=np.uint8)
    _lru_state(lk, b, out)
    return out


def replay_lru(lk: Lookups, budget: int) -> U8:
    """The reference replay: bmoe-run's ``ExpertCache`` rules written out plainly (an
    ``OrderedDict`` LRU at one budget, bytes), slow and obvious. Returns uint8 [n] hit flags.
    ``budget`` 0 = no cache (no hits)."""
    hits = np.zeros(lk.n, dtype=np.uint8)
    lru: OrderedDict[int, int] = OrderedDict()
    resident = 0
    bf = lk.batch_first().tolist()
    items = lk.item.tolist()
    sizes = lk.item_bytes.tolist()
    for b in range(lk.n_batches):
        routed = items[bf[b]:bf[b + 1]]
        need = set(routed)
        missing = []
        for r, x in enumerate(routed):
            if budget > 0 and x in lru:
                hits[bf[b] + r] = 1
                lru.move_to_end(x)
            else:
                missing.append(x)
        if budget == 0 or not missing:
            continue
        nbytes = sum(sizes[x] for x in missing)
        if resident + nbytes > budget:
            for key in list(lru.keys()):
                if resident + nbytes <= budget:
                    break
                if key in need:
                    continue
                resident -= lru.pop(key)
        for x in missing:
            lru[x] = sizes[x]
            resident += sizes[x]
    return hits


def _next_use(lk: Lookups) -> npt.NDArray[np.int32]:
    """int32 [n]: the batch of the next **decode** lookup of the same item (``n_batches`` if
    none). Only decode hits are scored, so a prefill lookup is no reason to keep an expert."""
    out = np.empty(lk.n, dtype=np.int32)
    K.next_decode_use(lk.item, lk.batch_first(), lk.decode, lk.n_items, out)
    return out


def _compact_items(lk: Lookups) -> npt.NDArray[np.integer[Any]]:
    """``lk.item`` in the narrowest integer type that holds every item id: the policy kernels
    read the whole trace once per group of budgets, so its bytes are their memory traffic."""
    return lk.item.astype(np.int16 if lk.n_items <= np.iinfo(np.int16).max else np.int32)


#: the policies with a cache of their own at each budget, replayed a group of budgets a pass (their
#: kernel: ``_kernels.POLICY_*`` = ``Policy.code``)
_PER_BUDGET = tuple(p.name for p in P.POLICIES if p.replay == "per_budget")


def workers() -> int:
    """Threads the replays run on: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: a unit of work run by :func:`run_tasks`: it may return more tasks (work it made possible)
Task = Callable[[], "Sequence[Task] | None"]


@dataclass(frozen=True, slots=True)
class Plan(Generic[T]):
    """Work split into ``tasks`` (callables that release the GIL while they compute, so they can
    run on threads in any order) and ``finish``, which assembles the result once all have run."""

    tasks: list[Callable[[], None]]
    finish: Callable[[], T]


def run_tasks(tasks: Sequence[Task], threads: int | None = None) -> None:
    """Run ``tasks`` on ``threads`` threads (default :func:`workers`), in the given order as
    threads free up (put the longest first); a task that returns more tasks has them run next,
    before the ones still waiting, in their order (so work that waited for a result starts as
    soon as it is there, while the other threads carry on). Returns when all are done, raising
    the first error (no task starts after it)."""
    todo: deque[Task] = deque(tasks)
    n_threads = max(1, threads or workers())
    if n_threads == 1:
        while todo:
            more = todo.popleft()()
            if more:
                todo.extendleft(reversed(more))
        return
    cv = threading.Condition()
    running = 0
    errors: list[BaseException] = []

    def worker() -> None:
        nonlocal running
        while True:
            with cv:
                while not todo and running and not errors:
                    cv.wait()
                if errors or not todo:
                    cv.notify_all()
                    return
                task = todo.popleft()
                running += 1
            try:
                more = task()
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                with cv:
                    errors.append(e)
                    running -= 1
                    cv.notify_all()
                return
            with cv:
                if more:
                    todo.extendleft(reversed(more))
                running -= 1
                cv.notify_all()

    pool = [threading.Thread(target=worker, name=f"bmoe-replay-{i}", daemon=True) for i in range(n_threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


def plan_policy_curves(lk: Lookups, policies: Sequence[str], budgets: npt.ArrayLike) -> Plan[dict[str, Curve]]:
    """:func:`policy_curves` as a :class:`Plan`: a task per policy and group of budgets (at most
    ``_kernels.GROUP``, the groups of one policy as even as they can be; one pass over the trace
    each), the costliest first (Belady, LFU, then the queues), and LRU's one pass as one task."""
    unknown = [p for p in policies if p != "lru" and p not in _PER_BUDGET]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose one of lru, {', '.join(_PER_BUDGET)}")
    b = _check_budgets(budgets)
    if lk.n >= 1 << 31:
        raise ValueError(f"{lk.n} lookups: the policy replays take at most 2^31")
    todo = [p for p in _PER_BUDGET if p in policies]
    out: dict[str, Curve] = {}
    tasks: list[Callable[[], None]] = []
    if "lru" in policies:
        tasks.append(lambda: out.__setitem__("lru", lru_curve(lk, b)))
    nb = b.shape[0]
    res = {p: (np.zeros(nb, dtype=np.int64), np.zeros(nb, dtype=np.int64), np.zeros((lk.n_layer, nb), dtype=np.int64))
           for p in todo}
    if todo:
        lay = np.repeat(np.arange(lk.n_layer, dtype=np.int64), lk.n_expert)
        if not K.uniform_batches(lk.item, lk.batch_first(), lk.decode, lay):
            raise ValueError("a batch mixes layers or phases: lookups must come from the lookups constructors")
        item = _compact_items(lk)
        bf = lk.batch_first()
        nu = _next_use(lk) if any(P.KERNEL_CODES[p] == K.POLICY_BELADY for p in todo) else np.zeros(0, dtype=np.int32)

        def run(p: str, j0: int, j1: int) -> None:
            hd, hb, hl = res[p]
            args = (item, bf, lk.decode, lay, lk.item_bytes, b[j0:j1], j0)
            code = P.KERNEL_CODES[p]
            if code == K.POLICY_LFU:
                K.lfu_budgets(*args, hd, hb, hl)
            elif code == K.POLICY_BELADY:
                K.belady_budgets(*args, nu, hd, hb, hl)
            else:
                K.queue_budgets(code == K.POLICY_SIEVE, *args, hd, hb, hl)

        # budget 0 is no cache: no hits. A task per policy and group of budgets, the costliest
        # kernels first (Belady, LFU)
        cost = {K.POLICY_BELADY: 0, K.POLICY_LFU: 1, K.POLICY_SIEVE: 2, K.POLICY_FIFO: 3}
        first = int(np.searchsorted(b, 0, side="right"))
        edges = np.linspace(first, nb, -(-(nb - first) // K.GROUP) + 1).astype(np.int64).tolist()
        tasks += [functools.partial(run, p, j0, j1) for p in sorted(todo, key=lambda p: cost[P.KERNEL_CODES[p]])
                  for j0, j1 in zip(edges, edges[1:])]

    def finish() -> dict[str, Curve]:
        dl, db, ll = _totals(lk)
        note = ""
        if "belady" in todo and np.unique(lk.layer_bytes()[lk.moe_layers()]).size > 1:
            note = "experts of several sizes: farthest-next-use is a ceiling estimate, not a proven optimum"
        for name in todo:
            hd, hb, hl = res[name]
            out[name] = Curve(name, b, hd, hb, hl, dl, db, ll, lk.n_decode_tokens, note if name == "belady" else "")
        return {name: out[name] for name in policies}

    return Plan(tasks, finish)


def policy_curves(lk: Lookups, policies: Sequence[str], budgets: npt.ArrayLike,
                  threads: int | None = None) -> dict[str, Curve]:
    """Replay each of ``policies`` (``lru``, ``lfu``, ``fifo``, ``sieve``, ``belady``) at each
    budget (bytes). LRU is one pass over the trace for every budget (:func:`lru_curve`); the
    others keep a cache of their own at each budget, a group of up to ``_kernels.GROUP`` budgets
    replayed in one pass over the trace, every (policy, group) a task on ``threads`` threads
    (default :func:`workers`): the same numbers on any number of threads and in any grouping.

    Belady evicts the expert whose next decode lookup is farthest ahead (prefill lookups are not
    scored, so they are no reason to keep an expert). With experts of one size this is the
    optimum under the runtime's rules (a batch's experts must all be cached); with several sizes
    it is the classic farthest-next-use ceiling estimate. Raises ValueError for an unknown policy,
    bad budgets, or a batch that mixes layers or phases."""
    plan = plan_policy_curves(lk, policies, budgets)
    run_tasks(plan.tasks, threads)
    return plan.finish()


def policy_curve(lk: Lookups, policy: str, budgets: npt.ArrayLike) -> Curve:
    """One policy of :func:`policy_curves` (``lru``, ``lfu``, ``fifo``, ``sieve``, ``belady``) at
    each budget (bytes). Raises ValueError for an unknown policy or bad budgets."""
    return policy_curves(lk, (policy,), budgets)[policy]


def static_ranking(train: Lookups) -> I64:
    """int64 [n_ranked, 2] (layer, expert) pairs, hottest first: lookup counts over the whole
    train part (prefill and decode), ties by layer then expert (parsers/strp.py
    ``profile_from_counts``)."""
    counts = np.bincount(train.item, minlength=train.n_items).reshape(train.n_layer, train.n_expert)
    return profile_from_counts(counts).pairs


def static_curve(train: Lookups, test: Lookups, budgets: npt.ArrayLike) -> Curve:
    """A static profile built on ``train`` and scored on ``test``'s decode lookups: at each
    budget the profile's experts are loaded hottest first while they fit (as ``bmoe-run
    --moe-cache-profile`` fills the cache) and never evicted; nothing else is kept (the hybrid
    reading of moe-cache-reference.md). Raises ValueError if the two parts differ in shape."""
    if (train.n_layer, train.n_expert) != (test.n_layer, test.n_expert):
        raise ValueError("train and test traces have different n_layer x n_expert")
    b = _check_budgets(budgets)
    pairs = static_ranking(train)
    ids = pairs[:, 0] * test.n_expert + pairs[:, 1]
    rank_bytes = np.full(test.n_items, 1 << 62, dtype=np.int64)
    rank_bytes[ids] = np.cumsum(test.item_bytes[ids])
    nb = b.shape[0]
    hd = np.zeros(nb + 1, dtype=np.int64)
    hb = np.zeros(nb + 1, dtype=np.int64)
    hl = np.zeros((test.n_layer, nb + 1), dtype=np.int64)
    # the fill stops at the first expert that does not fit (runtime/expert_cache.py ``preload``)
    lay = np.repeat(np.arange(test.n_layer, dtype=np.int64), test.n_expert)
    K.static_hits(test.item, test.decode, lay, test.item_bytes, b, rank_bytes, hd, hb, hl)
    hd, hb, hl = np.cumsum(hd)[:nb], np.cumsum(hb)[:nb], np.cumsum(hl, axis=1)[:, :nb]
    dl, db, ll = _totals(test)
    return Curve("static", b, hd, hb, hl, dl, db, ll, test.n_decode_tokens,
                 f"profile from {train.n_decode_tokens} train tokens, scored on {test.n_decode_tokens} test tokens")


def lru_profile_curve(train: Lookups, test: Lookups, budgets: npt.ArrayLike) -> Curve:
    """LRU on ``test`` after a fill from the profile of ``train`` (:func:`static_ranking`), as
    ``bmoe-run --moe-cache-profile`` runs: the profile decides the start, LRU the rest."""
    if (train.n_layer, train.n_expert) != (test.n_layer, test.n_expert):
        raise ValueError("train and test traces have different n_layer x n_expert")
    b = _check_budgets(budgets)
    st = LruState(test.n_items, test.n_layer, test.item_bytes, b)
    # the fill: one uncounted lookup per profiled expert, coldest first (lookups.with_profile)
    fill = profile_fill(test, static_ranking(train))
    st.feed(fill, np.arange(fill.shape[0] + 1, dtype=np.int64), np.zeros(fill.shape[0], dtype=np.bool_))
    st.feed(test.item, test.batch_first(), test.decode)
    hd, _hp, hb, hl = st.counts()
    dl, db, ll = _totals(test)
    return Curve("lru_profile", b, hd, hb, hl, dl, db, ll, test.n_decode_tokens,
                 f"profile from {train.n_decode_tokens} train tokens, scored on {test.n_decode_tokens} test tokens")


@dataclass(frozen=True, slots=True, eq=False)
class LayerCurves:
    """Per-layer LRU curves, each layer its own cache: ``hits`` int64 [n_layer, n_expert + 1]
    decode hits with c = 0..n_expert expert slots; ``hit_bytes`` the same in bytes; ``lookups``
    int64 [n_layer] decode lookups; ``layer_bytes`` int64 [n_layer] one expert's bytes."""

    hits: I64
    hit_bytes: I64
    lookups: I64
    layer_bytes: I64
    moe_layers: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def plan_layer_curves(lk: Lookups) -> Plan[LayerCurves]:
    """:func:`layer_curves` as a :class:`Plan`: a task per MoE layer."""
    lb = lk.layer_bytes()
    hits = np.zeros((lk.n_layer, lk.n_expert + 1), dtype=np.int64)
    hbytes = np.zeros((lk.n_layer, lk.n_expert + 1), dtype=np.int64)
    moe = lk.moe_layers()
    bf = lk.batch_first()
    blay = (lk.item[bf[:-1]] // lk.n_expert).astype(np.int16 if lk.n_layer <= np.iinfo(np.int16).max else np.int64)
    order = np.argsort(blay, kind="stable")  # a radix sort for 16-bit keys
    edges = np.searchsorted(blay[order], np.arange(lk.n_layer + 1))

    def run(il: int) -> None:
        sel = order[edges[il]:edges[il + 1]]
        lens = bf[sel + 1] - bf[sel]
        sbf = np.zeros(sel.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens, out=sbf[1:])
        idx = np.repeat(bf[sel] - sbf[:-1], lens) + np.arange(int(sbf[-1]), dtype=np.int64)
        size = int(lb[il])
        st = LruState(lk.n_expert, 1, np.full(lk.n_expert, size, dtype=np.int64),
                      np.arange(lk.n_expert + 1, dtype=np.int64) * size)
        st.feed(lk.item[idx] - il * lk.n_expert, sbf, lk.decode[idx])
        hd, _hp, hb, _hl = st.counts()
        hits[il] = hd
        hbytes[il] = hb

    def finish() -> LayerCurves:
        return LayerCurves(hits, hbytes, _totals(lk)[2], lb, moe)

    return Plan([functools.partial(run, il) for il in moe.tolist()], finish)


def layer_curves(lk: Lookups, threads: int | None = None) -> LayerCurves:
    """One LRU per layer replayed at every slot count: the batches grouped by layer in one
    stable sort, then one pass per layer over its own lookups (a task each, on ``threads``)."""
    plan = plan_layer_curves(lk)
    run_tasks(plan.tasks, threads)
    return plan.finish()


def compulsory_decode_misses(lk: Lookups) -> int:
    """Decode lookups of experts never looked up before (no cache can hit them): the
    compulsory-miss ceiling is ``100 * (1 - this / decode lookups)`` %."""
    return int(K.compulsory_decode(lk.item, lk.decode, lk.n_items))


def _first_touches(lk: Lookups) -> tuple[I64, I64]:
    """(lookup index of each item's first lookup, ascending; the bytes of those first lookups
    added up in that order): what a cache holds before it first has to evict."""
    _, first = np.unique(lk.item, return_index=True)
    pos = np.sort(first).astype(np.int64)
    return pos, np.cumsum(lk.item_bytes[lk.item[pos]]).astype(np.int64)


def _fill(pos: I64, cum: I64, budget: int) -> int:
    """How many first lookups find room at ``budget`` bytes: the cache is full from the next one on."""
    return int(np.searchsorted(cum, budget, side="right"))


def decode_evictions(lk: Lookups, budgets_mib: npt.ArrayLike, decode_hit_pct: npt.ArrayLike) -> F64:
    """Decode misses that evict, per decode token, at each budget of a curve (``budgets_mib``
    and its ``decode_hit_pct``, float [n_budgets]): a cache that keeps what it reads until it is
    full misses only on first lookups until the first lookups' bytes pass the budget, and every
    miss after that point evicts (docs/analysis.md "Predicted speed"). A budget <= 0 (no cache)
    evicts nothing, nor one whose hit is NaN (the curve had no decode lookup). NaN without
    decode tokens. Raises ValueError for budgets and hit rates of different lengths."""
    b = np.asarray(budgets_mib, dtype=np.float64).reshape(-1)
    hit = np.asarray(decode_hit_pct, dtype=np.float64).reshape(-1)
    if b.shape != hit.shape:
        raise ValueError(f"{b.shape[0]} budgets for {hit.shape[0]} hit rates")
    if lk.n_decode_tokens == 0:
        return np.full(b.shape[0], np.nan)
    pos, cum = _first_touches(lk)
    dec_first = np.concatenate(([0], np.cumsum(lk.decode[pos]))).astype(np.int64)
    misses = np.nan_to_num(lk.n_decode_lookups * (1.0 - hit / 100.0), nan=0.0)
    out = np.zeros(b.shape[0])
    for j, mib in enumerate(b):
        if mib > 0:
            room = dec_first[_fill(pos, cum, int(round(mib * MIB)))]
            out[j] = max(0.0, misses[j] - room) / lk.n_decode_tokens
    return out


def token_evictions(lk: Lookups, budget: int) -> F64:
    """float [n_decode_tokens]: the decode misses that evict in each decode token (ordinal order)
    at ``budget`` bytes of the runtime's LRU: its misses (:func:`lru_hit_flags`) from the first
    lookup that finds the cache full (:func:`decode_evictions`) on; all 0 at a budget <= 0."""
    out = np.zeros(lk.n_decode_tokens)
    if budget <= 0 or lk.n == 0:
        return out
    pos, cum = _first_touches(lk)
    k = _fill(pos, cum, budget)
    if k >= pos.shape[0]:
        return out
    miss = lru_hit_flags(lk, [budget])[:, 0] == 0
    evict = miss & lk.decode & (np.arange(lk.n) >= pos[k])
    return np.bincount(lk.token[evict], minlength=lk.n_decode_tokens).astype(np.float64)


def strp_from_lookups(lk: Lookups, slots: int = 0) -> StrpProfile:
    """An STRP profile (parsers/strp.py) ranking experts by how often the trace looked them up,
    hottest first, for ``bmoe-run --moe-cache-profile``. ``slots`` is informational (the
    experts the intended budget holds)."""
    counts = np.bincount(lk.item, minlength=lk.n_items).reshape(lk.n_layer, lk.n_expert)
    prof = profile_from_counts(counts, slots=slots)
    return prof
