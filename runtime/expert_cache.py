"""The expert cache: an LRU over (layer, expert) under a byte budget, filled on demand from the
GGUF file when a layer's router has chosen its experts.

Memory is :mod:`bmoe_top.runtime.expert_store` (the buffers the expert tensors point at), reads
are :mod:`bmoe_top.runtime.expert_io`. The cache decides what is resident; the policies on top
(profile fill, adaptive swaps) are :mod:`bmoe_top.runtime.cache_policy`.

Time accounting follows telemetry-contract.md "Per-token lines": ``io_s`` is the wall time the
caller blocked on reads in serial mode and the summed per-lane busy time under overlap;
``stall_s`` the wall time the caller waited for reads under overlap (0 in serial);
``mgmt_s`` page releases and LRU bookkeeping.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from bmoe_top.parsers.gguf_layout import ModelLayout

from . import native as native_lib
from .expert_io import ExpertIOError, ExpertReader, Run
from .expert_store import ExpertStore, TensorBuffer
from .native import HookState, LogKind

MIB = 1024 * 1024

__all__ = ["ExpertCache", "TokenCounters", "MIB"]

#: the native log's kinds as plain ints (the replay compares one per logged expert)
_HIT, _MISS, _EVICT, _PREFETCH = int(LogKind.HIT), int(LogKind.MISS), int(LogKind.EVICT), int(LogKind.PREFETCH)
_PAGECACHE = int(LogKind.PAGECACHE)


@dataclass
class TokenCounters:
    """Expert-cache work done during one decode (one token, or one prefill batch)."""

    hits: int = 0
    misses: int = 0
    read_bytes: int = 0
    xfer_bytes: int = 0  # page-aligned bytes the reads transferred
    reads: int = 0  # read requests (one per run of adjacent experts of one tensor)
    io_s: float = 0.0
    stall_s: float = 0.0
    mgmt_s: float = 0.0
    spec_bytes: int = 0
    #: of ``read_bytes``, the bytes the page cache served (buffered reads it held; docs/memory.md)
    pagecache_bytes: int = 0
    #: of ``misses``, the experts whose every byte the page cache served (the rest came from disk)
    pagecache_misses: int = 0
    #: per layer: (routed experts in routing order of first appearance, hit flags)
    route: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    #: per layer: the missed experts the page cache served whole (the others of ``route``'s
    #: misses came from disk)
    route_pagecache: dict[int, set[int]] = field(default_factory=dict)


@dataclass
class _Lookup:
    """What one layer's routing found: hit flags aligned with the routed ids, the experts to read,
    and the speculative reads in flight that this layer now waits for."""

    hit_flags: list[int]
    missing: list[int]
    waits: list[tuple[int, Future]]


class ExpertCache:
    """LRU over (layer, expert) under ``budget_bytes``; fills the store's buffers on demand.

    ``budget_bytes``: ``None`` = no limit (every expert may stay), ``0`` = no cache (the routed
    experts are read for each token), otherwise a byte budget over the sum of resident expert
    slices. ``overlap``/``prefetch``: speculative reads of the experts the previous token routed
    at the next ``prefetch`` layers, on the I/O lanes. All methods except the I/O workers' bodies
    run on the decode thread (the eval callback).

    Tiers (docs/memory.md "The three tiers in bmoe-run"): a hit is served by this cache; a miss
    by the page cache when every byte of its slices was read from pages the kernel held
    (``pagecache_misses``, per layer ``layer_pagecache``), else by the disk. ``tiers``: the
    reader can tell (O_DIRECT: every miss is a disk read; buffered: ``RWF_NOWAIT``).
    """

    def __init__(
        self,
        layout: ModelLayout,
        store: ExpertStore,
        reader: ExpertReader,
        budget_bytes: int | None,
        overlap: bool = False,
        prefetch: int = 0,
    ):
        self.layout = layout
        self.store = store
        self.reader = reader
        self.budget = budget_bytes
        #: the frame pools (:class:`~bmoe_top.runtime.expert_store.FramePlan`), or None (in place)
        self.frames = store.frames
        #: what the LRU may hold: the budget, or with frames the bytes of the experts the frames hold
        self.limit = budget_bytes if self.frames is None else self.frames.n_frames * self.frames.expert_bytes
        self.no_cache = budget_bytes == 0
        self.overlap = bool(overlap or prefetch > 0)
        self.prefetch = int(prefetch) if prefetch else (1 if overlap else 0)
        self.layer_bufs: list[list[TensorBuffer]] = store.layer_bufs
        self._lru: OrderedDict[tuple[int, int], int] = OrderedDict()  # (il, e) -> bytes; see :attr:`lru`
        #: the native LRU mirror changed the order since the Python LRU was last pulled from it
        self._lru_stale = False
        self.resident_bytes = 0
        self.inflight: dict[tuple[int, int], tuple[Future, int]] = {}
        self.inflight_bytes = 0
        #: no cache, in place: the layer whose experts are released when the next layer routes
        self.prev_layer_set: tuple[int, set[int]] | None = None
        # cumulative counters (since load)
        self.hits = 0
        self.misses = 0
        self.read_bytes = 0
        self.evictions = 0
        self.layer_hits = [0] * layout.n_layer
        self.layer_misses = [0] * layout.n_layer
        self.spec_bytes = 0
        self.spec_experts = 0
        self.spec_useful = 0
        self.rereads = 0  # misses on experts that had been resident before (evicted, read again)
        self.tiers = reader.tiers
        self.pagecache_misses = 0
        self.pagecache_bytes = 0
        self.layer_pagecache = [0] * layout.n_layer
        self._spec_pc = 0  # page-cache bytes of finished speculative reads, not yet in a token
        self._spec_pending: set[tuple[int, int]] = set()  # prefetched, not yet routed
        self._spec_lock = threading.Lock()
        self._spec_busy = 0.0
        self.tok = TokenCounters()
        self.last_route: dict[int, set[int]] = {}
        #: tokens in the ubatch being decoded (set by the engine before each llama_decode)
        self.ubatch_tokens = 0
        #: hooks (decode thread): on_lookup(il, routed, hit_flags) before the LRU changes;
        #: on_evict(il, e) after an expert left the cache
        self.on_lookup: Callable[[int, list[int], list[int]], None] | None = None
        self.on_evict: Callable[[int, int], None] | None = None
        # shared with the native eval callback (runtime/bmoe_native.c): resident flags per
        # (layer, expert), the hits it counted per layer, the (layer, expert) pairs it touched
        self._n_expert = layout.n_expert
        self._flags = (ctypes.c_uint8 * (layout.n_layer * layout.n_expert))()
        #: 1 = was resident once (a miss on it is a re-read), per (layer, expert)
        self._ever = (ctypes.c_uint8 * (layout.n_layer * layout.n_expert))()
        self._native_hits = (ctypes.c_uint64 * layout.n_layer)()
        self._native_seen = [0] * layout.n_layer
        self._native_misses = (ctypes.c_uint64 * layout.n_layer)()
        self._native_mseen = [0] * layout.n_layer
        self._native_pc = (ctypes.c_uint64 * layout.n_layer)()
        self._native_pcseen = [0] * layout.n_layer
        k = max(1, layout.n_expert_used)
        self._touch = (ctypes.c_int32 * (2 * (6 * layout.n_layer * k + layout.n_layer * layout.n_expert) + 16))()
        # frames: the frame of each (layer, expert) (-1: none) and the free frames (a stack of
        # ``_n_free[0]``), shared with the native callback
        n_frames = self.frames.n_frames if self.frames is not None else 0
        n_pairs = layout.n_layer * layout.n_expert
        self._frame_of = (ctypes.c_int32 * n_pairs)(*([-1] * n_pairs))
        self._free = (ctypes.c_int32 * max(1, n_frames))(*range(n_frames - 1, -1, -1))
        self._n_free = (ctypes.c_int32 * 1)(n_frames)
        self.native: HookState | None = None
        #: the native LRU mirror (bmoe_native.c ``struct bmoe_cache``) serving layers with misses
        self._ccache: int | None = None
        self._clib: Any = None
        #: the Python LRU changed outside the native log since the mirror was last synced
        self._c_dirty = True
        self._ctake = (ctypes.c_int64 * 12)()
        self._corder: Any = None  # the buffer bmoe_cache_order fills
        #: the per-layer routing of the layers the native callback served is wanted (tok.route)
        self._route_wanted = False
        #: let the native callback serve one-token layers with misses too (when it can)
        self.native_misses = True
        #: misses the native callback served (read and admitted) since load
        self.native_misses_served = 0
        #: pages the native callback moved from evicted slices into missed ones (none faulted in
        #: or given back for them), since load
        self.pages_moved = 0
        #: early prefetch: experts the native callback predicts per layer for the next one, from
        #: the next layer's router applied to this layer's router input (0: off)
        self.early_prefetch = 0
        self._c_prefetch = 0  # what the native mirror was told
        #: the whole bank resident and no observer: the native callback need not materialize routing
        self.observed = True
        #: bytes of every streamed expert (layers the graph multiplies); all resident = nothing to route
        self.streamed_bytes = sum(layout.expert_bytes[il] * layout.n_expert
                                  for il in range(layout.n_layer) if self.layer_bufs[il])

    @property
    def lru(self) -> OrderedDict[tuple[int, int], int]:
        """The LRU: (layer, expert) -> bytes, least recently used first. While the native callback
        serves the layers it holds the order; it is pulled from there when asked for."""
        if self._lru_stale:
            self._pull_native_order()
        return self._lru

    # -- the native fast paths -----------------------------------------------------------------
    def attach_native(self, state: HookState) -> None:
        """Share the resident flags, hit and miss counters, the re-read flags and the touch log
        with the native callback."""
        state.n_layer = self.layout.n_layer
        state.n_expert = self.layout.n_expert
        state.resident = ctypes.addressof(self._flags)
        state.layer_hits = ctypes.addressof(self._native_hits)
        state.layer_misses = ctypes.addressof(self._native_misses)
        state.ever = ctypes.addressof(self._ever)
        state.layer_pagecache = ctypes.addressof(self._native_pc)
        state.touch = ctypes.addressof(self._touch)
        state.touch_cap = len(self._touch)
        state.n_touch = 0
        if self.frames is not None:
            state.frame_of = ctypes.addressof(self._frame_of)
            state.free_frames = ctypes.addressof(self._free)
            state.n_free = ctypes.addressof(self._n_free)
        self.native = state
        lib = native_lib.library()
        lanes = self.reader.native_lanes
        if lib is None or lanes is None or self.no_cache:
            return
        c = lib.bmoe_cache_new(self.layout.n_layer, self.layout.n_expert, lanes.ptr)
        if not c:
            return
        fds = self.reader.dfds if self.reader.direct else self.reader.fds
        for il, bufs in enumerate(self.layer_bufs):
            for tb in bufs:
                base, size = tb.mapping_span
                if lib.bmoe_cache_tensor(c, il, tb.addr, tb.info.file_offset, tb.info.expert_stride, base, size,
                                         fds[tb.info.shard], int(self.reader.direct),
                                         int(self.reader.nowait), tb.frame_stride) != 0:
                    lib.bmoe_cache_free(c)
                    return
        self._ccache, self._clib = c, lib
        state.cache = c

    def close_native(self) -> None:
        """Free the native LRU mirror (before the read lanes it uses are closed)."""
        if self.native is not None:
            self.native.cache = None
            self.native.fast_misses = 0
        if self._ccache is not None and self._clib is not None:
            self._clib.bmoe_cache_free(self._ccache)
        self._ccache = None

    def arm_native(self, ids_wanted: bool, route_wanted: bool) -> None:
        """Before a decode: let the native callback take the all-hit layers itself (a cache,
        nothing speculative, no lookup hook, nobody who wants the raw ids: ``ids_wanted``), and
        skip the routing nodes altogether once every expert is resident (unless the per-layer
        routing is wanted: ``route_wanted``)."""
        st = self.native
        if st is None:
            return
        fast = not (self.no_cache or self.prefetch or ids_wanted or self.on_lookup is not None)
        st.fast_hits = int(fast)
        misses = (fast and self.native_misses and self._ccache is not None and self.on_evict is None
                  and not self.reader.injects_errors)
        if misses and self._c_dirty:
            self._sync_native()
        m = self.early_prefetch if misses and self.frames is None else 0  # it reads into the experts' places
        if m != self._c_prefetch and self._ccache is not None:
            streamed = [il for il in self.layout.moe_layers if self.layer_bufs[il]]
            nxt = [-1] * self.layout.n_layer
            for a, b in zip(streamed, streamed[1:]):
                nxt[a] = b
            arr = (ctypes.c_int32 * len(nxt))(*nxt)
            self._c_prefetch = m if self._clib.bmoe_cache_prefetch(self._ccache, m, arr) == 0 else 0
        st.fast_misses = int(misses)
        self._route_wanted = route_wanted
        whole = (fast and not route_wanted and self.budget is None
                 and self.resident_bytes >= self.streamed_bytes)
        st.skip_resident = int(whole)
        self.observed = not whole

    def _sync_native(self) -> None:
        """Give the native mirror the Python LRU's order, the budget and the resident bytes."""
        assert self._clib is not None and self._ccache is not None
        ne = self._n_expert
        lru = self.lru
        ids = (ctypes.c_int32 * max(1, len(lru)))(*[il * ne + e for il, e in lru])
        budget = -1 if self.limit is None else int(self.limit)
        self._clib.bmoe_cache_sync(self._ccache, ids, len(lru), budget, int(self.resident_bytes))
        self._c_dirty = False

    def _pull_native_order(self) -> None:
        """The Python LRU takes the native mirror's order (what is resident is the same: the
        resident flags are shared)."""
        self._lru_stale = False
        if self._ccache is None:
            return
        n_all = self.layout.n_layer * self._n_expert
        if self._corder is None:
            self._corder = (ctypes.c_int32 * max(1, n_all))()
        n = self._clib.bmoe_cache_order(self._ccache, self._corder, n_all)
        ne, eb = self._n_expert, self.layout.expert_bytes
        ids = self._corder[:n]
        self._lru = OrderedDict(((i // ne, i % ne), eb[i // ne]) for i in ids)

    def _replay_native(self) -> None:
        """Take in what the native callback did since the last call: its counters (hits and misses
        per layer, evictions, re-reads, bytes, time, the resident bytes), the LRU order (pulled from
        the native mirror when next asked for) and, from its log, the per-layer routing when it is
        wanted and the early prefetch's reads."""
        st = self.native
        if st is None:
            return
        if self._c_prefetch:
            self._clib.bmoe_cache_settle(self._ccache)
        tok = self.tok
        n = st.n_touch
        served = bool(st.fast_misses) and self._ccache is not None  # the mirror kept the LRU order
        if n:
            if served:
                self._lru_stale = True
                if self._route_wanted or self._c_prefetch:
                    self._read_log(n, move=False)
            else:
                self._read_log(n, move=True)
            st.n_touch = 0
        if self._ccache is not None:
            c = self._ctake
            self._clib.bmoe_cache_take(self._ccache, c)
            self.pages_moved += c[5]
            tok.io_s += c[0] / 1e9
            tok.mgmt_s += c[1] / 1e9  # the all-hit layers' LRU moves too
            tok.read_bytes += c[2]
            self.read_bytes += c[2]
            tok.xfer_bytes += c[3]
            tok.reads += c[4]
            self.evictions += c[6]
            self.rereads += c[7]
            self.native_misses_served += c[8]
            self.misses += c[8]
            tok.misses += c[8]
            tok.pagecache_bytes += c[10]
            self.pagecache_bytes += c[10]
            tok.pagecache_misses += c[11]
            self.pagecache_misses += c[11]
            if served and n:
                self.resident_bytes = c[9]
        hits, seen = self._native_hits, self._native_seen
        mlayer, mseen = self._native_misses, self._native_mseen
        for il in self.layout.moe_layers:
            d = hits[il] - seen[il]
            if d:
                seen[il] = hits[il]
                self.layer_hits[il] += d
                self.hits += d
                tok.hits += d
            d = mlayer[il] - mseen[il]
            if d:
                mseen[il] = mlayer[il]
                self.layer_misses[il] += d
                d = self._native_pc[il] - self._native_pcseen[il]
                self._native_pcseen[il] = self._native_pc[il]
                self.layer_pagecache[il] += d

    def _read_log(self, n: int, move: bool) -> None:
        """The native log's ``n`` words: the per-layer routing (``tok.route``), the early
        prefetch's reads and useful hits, and (``move``: the native mirror did not keep the order)
        the hits' moves to the LRU's recent end."""
        t = self._touch
        tok = self.tok
        route = tok.route
        pending = self._spec_pending
        lru = self.lru if move else None
        for i in range(0, n, 2):
            word, e = t[i], t[i + 1]
            il, kind = word & 0xFFFF, word >> 16
            if kind == _HIT or kind == _MISS:
                hit = 1 if kind == _HIT else 0
                if hit:
                    if lru is not None:
                        lru.move_to_end((il, e))
                    if pending and (il, e) in pending:
                        pending.discard((il, e))
                        self.spec_useful += 1
                r = route.get(il)
                if r is None:
                    route[il] = ([e], [hit])
                else:
                    r[0].append(e)
                    r[1].append(hit)
            elif kind == _PAGECACHE:
                tok.route_pagecache.setdefault(il, set()).add(e)
            elif kind == _EVICT:
                pending.discard((il, e))
            elif kind == _PREFETCH:
                eb = self.layout.expert_bytes[il]
                pending.add((il, e))
                self.spec_experts += 1
                self.spec_bytes += eb
                tok.spec_bytes += eb

    def _holds(self, il: int, e: int) -> bool:
        """Expert ``e`` of layer ``il`` has bytes in its pages: resident or being read."""
        return 0 <= e < self._n_expert and (self._flags[il * self._n_expert + e] == 1 or (il, e) in self.inflight)

    def frame_of(self, il: int, e: int) -> int:
        """The frame expert ``e`` of layer ``il`` lives in (frame pools), -1 when it has none."""
        return int(self._frame_of[il * self._n_expert + e])

    def frame_table(self) -> Any:
        """The shared frame table: int32 ``[n_layer * n_expert]`` (ctypes), -1 where no frame."""
        return self._frame_of

    def _take_frames(self, il: int, experts: list[int]) -> None:
        """Frame pools: give each of ``experts`` (not resident) a free frame before it is read."""
        if self.frames is None:
            return
        base, free, n = il * self._n_expert, self._free, self._n_free
        for e in experts:
            if self._frame_of[base + e] < 0:
                if n[0] <= 0:
                    raise RuntimeError("expert cache: no free frame (the LRU holds more than the frames)")
                n[0] -= 1
                self._frame_of[base + e] = free[n[0]]

    def _give_frames(self, keys: list[tuple[int, int]]) -> None:
        """Frame pools: the frames of ``keys`` (no longer resident nor being read) are free again."""
        if self.frames is None:
            return
        free, n = self._free, self._n_free
        for il, e in keys:
            i = il * self._n_expert + e
            s = self._frame_of[i]
            if s >= 0:
                self._frame_of[i] = -1
                free[n[0]] = s
                n[0] += 1

    def tier_counters(self) -> tuple[int, int, tuple[int, ...]] | None:
        """(misses the page cache served, their bytes, per layer the misses) since load, or None
        when the reader cannot tell (buffered reads without ``RWF_NOWAIT``)."""
        if not self.tiers:
            return None
        return (self.pagecache_misses, self.pagecache_bytes, tuple(self.layer_pagecache))

    def counters(self) -> tuple[int, int, int, tuple[int, ...], tuple[int, ...]]:
        """(hits, misses, read_bytes, layer_hits, layer_misses) since load: a cheap copy."""
        return (self.hits, self.misses, self.read_bytes, tuple(self.layer_hits), tuple(self.layer_misses))

    def evict(self, il: int, e: int) -> bool:
        """Release expert ``e`` of layer ``il`` if it is resident (not in flight). Decode thread only."""
        if (il, e) not in self.lru:
            return False
        self._evict((il, e))
        return True

    # -- accounting -------------------------------------------------------------------------
    def begin_token(self) -> None:
        self.tok = TokenCounters()

    @property
    def budget_mib(self) -> float:
        if self.budget is None:
            return self.layout.expert_bank_bytes / MIB
        return self.budget / MIB

    @property
    def resident_mib(self) -> float:
        return self.resident_bytes / MIB

    def resident_ids(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.layout.n_layer)]
        for il, e in self.lru:
            out[il].append(e)
        for ids in out:
            ids.sort()
        return out

    # -- the demand path (called from the eval callback for layer ``il``) -------------------
    def ensure(self, il: int, routed: list[int]) -> None:
        """Make every expert in ``routed`` (unique ids, routing order) resident for layer ``il``.

        Raises :class:`ExpertIOError` when a read fails (nothing is marked resident then).
        """
        if self.native is not None:
            self._replay_native()  # the LRU order of the layers the native callback took
        self._c_dirty = True
        self._ensure(il, routed)
        st = self.native
        if st is not None and st.fast_misses:  # later layers of this decode may be served natively
            self._sync_native()

    def _ensure(self, il: int, routed: list[int]) -> None:
        if self._all_resident(il, routed):
            self._touch_hits(il, routed)
            return
        tok = self.tok
        t0 = time.perf_counter()
        self._release_previous_layer()
        look = self._lookup(il, routed)
        self._count(il, routed, look.hit_flags)
        self._make_room(il, look.missing, set(routed))
        tok.mgmt_s += time.perf_counter() - t0
        self._read_missing(il, look.missing)
        self._await_inflight(il, look.waits)
        t1 = time.perf_counter()
        self._mark_resident(il, look)
        tok.mgmt_s += time.perf_counter() - t1
        if self.prefetch and not self.no_cache:
            self._prefetch_after(il, set(routed))

    def _all_resident(self, il: int, routed: list[int]) -> bool:
        """The steady state: a cache, nothing in flight or pending, no lookup hook, all hits."""
        if self.no_cache or self.inflight or self._spec_pending or self.on_lookup is not None:
            return False
        lru = self.lru
        return all((il, e) in lru for e in routed)

    def _touch_hits(self, il: int, routed: list[int]) -> None:
        t0 = time.perf_counter()
        lru = self.lru
        for e in routed:
            lru.move_to_end((il, e))
        n = len(routed)
        tok = self.tok
        tok.route[il] = (routed, [1] * n)
        tok.hits += n
        self.hits += n
        self.layer_hits[il] += n
        if self.prefetch:
            self._prefetch_after(il, set(routed))
        tok.mgmt_s += time.perf_counter() - t0

    def _release_previous_layer(self) -> None:
        """No cache, in place: the previous layer's experts go now that this layer routes."""
        if self.prev_layer_set is not None:
            pil, pset = self.prev_layer_set
            self.store.release_experts(pil, pset, self._holds)
            self.prev_layer_set = None

    def _lookup(self, il: int, routed: list[int]) -> _Lookup:
        lru, inflight = self.lru, self.inflight
        if self.on_lookup is not None:
            self.on_lookup(il, list(routed), [1 if ((il, e) in lru or (il, e) in inflight) else 0 for e in routed])
        look = _Lookup([], [], [])
        for e in routed:
            key = (il, e)
            if key in lru:
                look.hit_flags.append(1)
                lru.move_to_end(key)
            elif key in inflight:
                look.hit_flags.append(1)
                look.waits.append((e, inflight[key][0]))
            else:
                look.hit_flags.append(0)
                look.missing.append(e)
                if self._ever[il * self._n_expert + e]:
                    self.rereads += 1
            if key in self._spec_pending:
                self._spec_pending.discard(key)
                self.spec_useful += 1
        return look

    def _count(self, il: int, routed: list[int], hit_flags: list[int]) -> None:
        tok = self.tok
        tok.route[il] = (list(routed), hit_flags)
        if self.no_cache:
            tok.misses += len(routed)
            return
        nh = sum(hit_flags)
        nm = len(routed) - nh
        tok.hits += nh
        tok.misses += nm
        self.hits += nh
        self.misses += nm
        self.layer_hits[il] += nh
        self.layer_misses[il] += nm

    def _make_room(self, il: int, missing: list[int], need: set[int]) -> None:
        """Evict for the missing experts (never what this layer needs or what is in flight)."""
        if missing and not self.no_cache and self.limit is not None:
            self._evict_for(len(missing) * self.layout.expert_bytes[il], protect_layer=il, protect=need)

    def _read_missing(self, il: int, missing: list[int]) -> None:
        if not missing:
            return
        tok = self.tok
        t0 = time.perf_counter()
        busy, pc_bytes, disk = self._read_framed(il, missing)
        blocked = time.perf_counter() - t0
        nbytes = len(missing) * self.layout.expert_bytes[il]
        tok.read_bytes += nbytes
        self.read_bytes += nbytes
        self._count_tiers(il, len(missing) - len(disk), pc_bytes)
        if self.reader.nowait:
            tok.route_pagecache.setdefault(il, set()).update(e for e in missing if e not in disk)
        if self.overlap:
            tok.io_s += busy
            tok.stall_s += blocked
        else:
            tok.io_s += blocked

    def _await_inflight(self, il: int, waits: list[tuple[int, Future]]) -> None:
        """Wait for the speculative reads this layer needs now; a failed one is read again here."""
        tok = self.tok
        ebytes = self.layout.expert_bytes[il]
        for e, fut in waits:
            t0 = time.perf_counter()
            try:
                fut.result()
            except ExpertIOError:
                self._drop_inflight((il, e))
                busy, pc_bytes, _disk = self._run_jobs([(tb, e) for tb in self.layer_bufs[il]])
                tok.io_s += busy
                tok.pagecache_bytes += pc_bytes
                self.pagecache_bytes += pc_bytes
                tok.read_bytes += ebytes
                self.read_bytes += ebytes
            tok.stall_s += time.perf_counter() - t0

    def _mark_resident(self, il: int, look: _Lookup) -> None:
        self._integrate_done()
        for e, _ in look.waits:
            self._integrate((il, e))
        if self.no_cache:
            if not self.store.windows:
                self.prev_layer_set = (il, set(look.missing))
            return
        ebytes = self.layout.expert_bytes[il]
        for e in look.missing:
            self._admitted(il, e, ebytes)

    def _admitted(self, il: int, e: int, ebytes: int) -> None:
        """Expert ``e`` of layer ``il`` was read in: the LRU's recent end, the resident flags."""
        self.lru[(il, e)] = ebytes
        self.resident_bytes += ebytes
        self._ever[il * self._n_expert + e] = 1
        self._flags[il * self._n_expert + e] = 1

    def end_decode(self) -> None:
        """After a decode: with no cache release the last layer's experts; remember the routing."""
        t0 = time.perf_counter()
        self._replay_native()
        self._release_previous_layer()
        self.last_route = {il: set(r[0]) for il, r in self.tok.route.items()}
        if self._spec_pc:
            with self._spec_lock:
                pc, self._spec_pc = self._spec_pc, 0
            self.tok.pagecache_bytes += pc
            self.pagecache_bytes += pc
        self.tok.mgmt_s += time.perf_counter() - t0

    # -- reads ----------------------------------------------------------------------------------
    def _count_tiers(self, il: int, n_pagecache: int, pc_bytes: int) -> None:
        """Misses of layer ``il`` the page cache served, and the bytes it served."""
        tok = self.tok
        tok.pagecache_bytes += pc_bytes
        tok.pagecache_misses += n_pagecache
        self.pagecache_bytes += pc_bytes
        if not self.no_cache:  # the counters since load count misses with a cache only (_count)
            self.pagecache_misses += n_pagecache
            self.layer_pagecache[il] += n_pagecache

    def _read_framed(self, il: int, experts: list[int]) -> tuple[float, int, set[int]]:
        """:meth:`_run_jobs` for ``experts`` of layer ``il``, which are not resident: with frame
        pools each first takes a frame, given back when the read fails."""
        self._take_frames(il, experts)
        try:
            return self._run_jobs([(tb, e) for e in experts for tb in self.layer_bufs[il]])
        except BaseException:
            self._give_frames([(il, e) for e in experts])
            raise

    def _spans(self, jobs: list[tuple[TensorBuffer, int]]) -> list[tuple[TensorBuffer, int, int]]:
        """(buffer, first expert, last expert): adjacent experts of one tensor are one range (in
        place; in frame pools each expert is its own)."""
        spans: list[tuple[TensorBuffer, int, int]] = []
        merge = self.frames is None
        for tb, e in sorted(jobs, key=lambda j: (j[0].info.shard, j[0].info.file_offset, j[1])):
            if merge and spans and spans[-1][0] is tb and spans[-1][2] == e - 1:
                spans[-1] = (tb, spans[-1][1], e)
            else:
                spans.append((tb, e, e))
        return spans

    def _run_of(self, tb: TensorBuffer, e0: int, e1: int) -> Run:
        a, b = tb.slice_range(e0)[0], tb.slice_range(e1)[1]
        if tb.frame_stride:
            d0, d1 = tb.frame_range(self.frame_of(tb.info.layer, e0))
            return Run(tb.info.shard, tb.info.file_offset + a, b - a, tb.addr + d0, tb.view[d0:d1])
        return Run(tb.info.shard, tb.info.file_offset + a, b - a, tb.addr + a, tb.view[a:b])

    def _runs(self, jobs: list[tuple[TensorBuffer, int]]) -> list[Run]:
        """The reads for (buffer, expert) slices: adjacent experts of one tensor are one range."""
        return [self._run_of(tb, e0, e1) for tb, e0, e1 in self._spans(jobs)]

    def _run_jobs(self, jobs: list[tuple[TensorBuffer, int]]) -> tuple[float, int, set[int]]:
        """Read every (buffer, expert) slice on the reader's lanes, largest first. Returns the
        summed per-lane busy seconds, the bytes the page cache served and the experts some byte
        of which it did not (every expert read, with O_DIRECT); counts the page-aligned bytes in
        ``tok.xfer_bytes``."""
        spans = self._spans(jobs)
        runs = [self._run_of(*sp) for sp in spans]
        order = sorted(range(len(runs)), key=lambda i: runs[i].length, reverse=True)
        batch = [runs[i] for i in order]
        self.tok.xfer_bytes += sum(r.xfer for r in batch)
        self.tok.reads += len(batch)
        busy, cached = self.reader.read_runs(batch)
        disk: set[int] = set()
        for k, i in enumerate(order):
            tb, e0, e1 = spans[i]
            got = cached[k] if k < len(cached) else 0
            start = tb.slice_range(e0)[0]
            disk.update(e for e in range(e0, e1 + 1) if got < tb.slice_range(e)[1] - start)
        return busy, sum(cached), disk

    # -- eviction -------------------------------------------------------------------------------
    def _evict_for(self, nbytes: int, protect_layer: int, protect: set[int]) -> None:
        """Evict least recently used experts until ``nbytes`` more fit the budget (never one of
        ``protect`` in ``protect_layer``)."""
        assert self.limit is not None
        limit = self.limit
        lru = self.lru
        gone: list[tuple[int, int]] = []
        while self.resident_bytes + self.inflight_bytes + nbytes > limit and lru:
            for key in lru:  # the least recently used unprotected expert (the protected ones are recent)
                if not (key[0] == protect_layer and key[1] in protect):
                    break
            else:
                break
            self._forget(key)
            gone.append(key)
        self._released(gone)

    def _evict(self, key: tuple[int, int]) -> None:
        self._forget(key)
        self._released([key])

    def _forget(self, key: tuple[int, int]) -> None:
        """``key`` leaves the LRU (its pages are released by :meth:`_released`)."""
        il, e = key
        b = self.lru.pop(key)
        self._c_dirty = True
        self._flags[il * self._n_expert + e] = 0
        self.resident_bytes -= b
        self.evictions += 1
        self._spec_pending.discard(key)

    def _released(self, keys: list[tuple[int, int]]) -> None:
        """Give back the pages (or the frames) of experts that left the LRU, in one batch, then tell
        ``on_evict``."""
        if not keys:
            return
        self.store.release_pairs(keys, self._holds)
        self._give_frames(keys)
        if self.on_evict is not None:
            for il, e in keys:
                self.on_evict(il, e)

    # -- speculative reads ----------------------------------------------------------------------
    def _drop_inflight(self, key: tuple[int, int]) -> None:
        _fut, b = self.inflight.pop(key)
        self.inflight_bytes -= b

    def _integrate(self, key: tuple[int, int]) -> None:
        if key not in self.inflight:
            return
        fut, b = self.inflight.pop(key)
        self.inflight_bytes -= b
        if fut.exception() is not None:
            il, e = key
            self.store.release_experts(il, (e,), self._holds)
            self._spec_pending.discard(key)
            return
        self.lru[key] = b
        self.resident_bytes += b
        self._c_dirty = True
        self._ever[key[0] * self._n_expert + key[1]] = 1
        self._flags[key[0] * self._n_expert + key[1]] = 1

    def _integrate_done(self) -> None:
        for key in [k for k, (f, _) in self.inflight.items() if f.done()]:
            self._integrate(key)

    def _prefetch_after(self, il: int, need: set[int]) -> None:
        t0 = time.perf_counter()
        pool = self.reader.spec_pool()
        tok = self.tok
        for l2 in range(il + 1, min(self.layout.n_layer, il + 1 + self.prefetch)):
            cand = self.last_route.get(l2)
            if not cand or not self.layer_bufs[l2]:
                continue
            eb = self.layout.expert_bytes[l2]
            for e in sorted(cand):
                key = (l2, e)
                if key in self.lru or key in self.inflight:
                    continue
                if self.limit is not None:
                    self._evict_for(eb, protect_layer=il, protect=need)
                    if self.resident_bytes + self.inflight_bytes + eb > self.limit:
                        break
                fut = pool.submit(self._spec_read, l2, e)
                self.inflight[key] = (fut, eb)
                self.inflight_bytes += eb
                self._spec_pending.add(key)
                self.spec_experts += 1
                self.spec_bytes += eb
                tok.spec_bytes += eb
                tok.xfer_bytes += sum(r.xfer for r in self._runs([(tb, e) for tb in self.layer_bufs[l2]]))
                tok.read_bytes += eb
                self.read_bytes += eb
        tok.mgmt_s += time.perf_counter() - t0

    def _spec_read(self, il: int, e: int) -> float:
        busy, cached = self.reader.read_runs(self._runs([(tb, e) for tb in self.layer_bufs[il]]))
        # io_s under overlap is lane-busy time; credited to the token being decoded when it ends
        with self._spec_lock:
            self._spec_busy += busy
            self._spec_pc += sum(cached)
        return busy

    def take_spec_busy(self) -> float:
        with self._spec_lock:
            s, self._spec_busy = self._spec_busy, 0.0
        return s

    # -- outside routing ------------------------------------------------------------------------
    def admit(self, il: int, e: int, evict: bool = False) -> int:
        """Read expert ``e`` of layer ``il`` into the cache outside any routing (profile fill,
        warm-up). Counts no hit/miss; returns the bytes read (0 if already resident, if the layer
        has no experts, or if there is no room and ``evict`` is False). Decode thread only."""
        key = (il, e)
        if self.no_cache or not self.layer_bufs[il] or key in self.lru or key in self.inflight:
            return 0
        eb = self.layout.expert_bytes[il]
        if self.limit is not None:
            if evict:
                self._evict_for(eb, protect_layer=-1, protect=set())
            if self.resident_bytes + self.inflight_bytes + eb > self.limit:
                return 0
        return self._read_in(il, [e])

    def _read_in(self, il: int, experts: list[int]) -> int:
        """Read ``experts`` of layer ``il`` in one batch (adjacent experts of a tensor in one read)
        and admit them, outside any routing: counted in ``read_bytes``, not as hits or misses.
        Returns the bytes read. Raises :class:`ExpertIOError` (none of them admitted then)."""
        _busy, pc_bytes, _disk = self._read_framed(il, experts)
        self.pagecache_bytes += pc_bytes
        self._c_dirty = True  # the native mirror takes the new order before the next decode
        eb = self.layout.expert_bytes[il]
        for e in experts:
            self._admitted(il, e, eb)
        self.read_bytes += len(experts) * eb
        return len(experts) * eb

    def fill(self) -> int:
        """With no budget (every expert fits), read every expert that is not resident: per layer
        one batch on the reader's lanes, adjacent experts of a tensor in one read (docs/runtime.md
        "Every expert fits: the fill"). Once the whole bank is resident the native callback no
        longer materializes the routing (:meth:`arm_native`). Counted in ``read_bytes`` (since
        load), not as hits or misses. Returns the bytes read: 0 with a budget, without a cache or
        with the bank resident already. Raises :class:`ExpertIOError` when a read fails: the layers
        read before it stay resident and counted, that layer's experts stay not resident. Decode
        thread only."""
        if self.budget is not None or self.resident_bytes >= self.streamed_bytes:
            return 0  # a budget (0: no cache) or the bank resident
        self.drain()
        self._replay_native()
        ne = self._n_expert
        total = 0
        for il in self.layout.moe_layers:
            missing = [e for e in range(ne) if not self._flags[il * ne + e]] if self.layer_bufs[il] else []
            if missing:
                total += self._read_in(il, missing)  # layer by layer: a later failure keeps these
        return total

    def preload(self, pairs: list[tuple[int, int]] | None = None) -> int:
        """Admit (layer, expert) pairs in order until the budget is full (default: every expert,
        layer by layer). Returns bytes read."""
        if pairs is None:
            pairs = [(il, e) for il in self.layout.moe_layers for e in range(self.layout.n_expert)]
        total = 0
        for il, e in pairs:
            if self.limit is not None and self.resident_bytes + self.layout.expert_bytes[il] > self.limit:
                break
            total += self.admit(il, e)
        return total

    def clear(self) -> None:
        """Evict every expert (a cold cache, as after load; the counters since load stay)."""
        self.drain()
        keys = list(self.lru)
        for key in keys:
            self._forget(key)
        self._released(keys)
        self.prev_layer_set = None

    def drain(self) -> None:
        """Wait for every speculative read and integrate it (between generations)."""
        for key, (fut, _) in list(self.inflight.items()):
            try:
                fut.result()
            except BaseException:  # noqa: BLE001 - a failed speculative read is just dropped
                pass
            self._integrate(key)
