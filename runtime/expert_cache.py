"""The expert cache: private buffers for the expert tensors, an LRU over (layer, expert) under a
byte budget, and the reads that fill it from the GGUF file.

Memory: each expert tensor gets an anonymous ``MAP_PRIVATE`` mapping of its full size (its ggml
``data`` pointer is redirected there by :mod:`bmoe_top.runtime.router_hook`). Untouched pages cost
no RAM; a resident expert's slice is committed page by page; eviction releases with
``MADV_DONTNEED`` the whole pages that lie strictly inside the slice (slice sizes are not page
multiples, so the edge pages shared with a neighbour stay).

I/O: expert ``e`` of a tensor is file bytes ``[file_offset + e*stride, +stride)``. Reads use
``os.preadv`` (which releases the GIL) split across ``io_threads`` worker threads, with
``O_DIRECT`` through a 4096-aligned bounce buffer when the file system accepts it, otherwise through
the page cache straight into the destination.

Time accounting follows telemetry-contract.md "Per-token lines": ``io_s`` is the wall time the
caller blocked on reads in serial mode and the summed per-lane busy time under overlap;
``stall_s`` the wall time the caller waited for reads under overlap (0 in serial);
``mgmt_s`` page commits, releases and LRU bookkeeping.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .gguf_layout import ExpertTensorInfo, ModelLayout

PAGE = mmap.PAGESIZE
DIRECT_ALIGN = 4096
BOUNCE_BYTES = 4 << 20
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
MIB = 1024 * 1024


class ExpertIOError(OSError):
    """A read of expert bytes failed or came back short."""


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _round_down(x: int, a: int) -> int:
    return x // a * a


class TensorBuffer:
    """The private anonymous buffer that replaces one expert tensor's data.

    ``addr`` is the tensor data address; it is placed ``file_offset % 4096`` bytes into a
    page-aligned anonymous mapping, so memory and file are congruent modulo 4096 and O_DIRECT can
    read the page-aligned middle of a slice straight into place. ``size`` bytes; ``view`` a
    memoryview of exactly the tensor's bytes.
    """

    def __init__(self, info: ExpertTensorInfo):
        self.info = info
        self.size = info.n_bytes
        self.shift = info.file_offset % DIRECT_ALIGN
        self.mm = mmap.mmap(-1, _round_up(self.size + self.shift, PAGE),
                            flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self._anchor) + self.shift
        self.view = memoryview(self.mm)[self.shift : self.shift + self.size]

    def slice_range(self, e: int) -> tuple[int, int]:
        """Byte range [start, end) of expert ``e`` inside the tensor."""
        s = self.info.expert_stride
        return e * s, (e + 1) * s

    def inner_pages(self, e0: int, e1: int | None = None) -> tuple[int, int]:
        """Mapping offsets of the whole pages inside experts ``e0..e1`` that no neighbour shares."""
        a = self.slice_range(e0)[0]
        b = self.slice_range(e0 if e1 is None else e1)[1]
        return _round_up(a + self.shift, PAGE), _round_down(b + self.shift, PAGE)

    def release(self, e: int) -> None:
        a, b = self.inner_pages(e)
        if b > a:
            self.mm.madvise(mmap.MADV_DONTNEED, a, b - a)

    _populate_ok = True  # class-wide: cleared once the kernel refuses MADV_POPULATE_WRITE

    def commit(self, e: int) -> None:
        """Pre-fault the expert's inner pages for writing (Linux >= 5.14; skipped before)."""
        if not TensorBuffer._populate_ok:
            return
        a, b = self.inner_pages(e)
        if b > a:
            try:
                self.mm.madvise(MADV_POPULATE_WRITE, a, b - a)
            except OSError:
                TensorBuffer._populate_ok = False

    def close(self) -> None:
        try:
            self.view.release()
            del self._anchor
            self.mm.close()
        except (BufferError, ValueError):
            pass  # still exported to ctypes/ggml; the mapping dies with the process


class ExpertReader:
    """Reads byte ranges of the model file into memory addresses.

    ``o_direct``: try ``O_DIRECT`` (falls back to the page cache when the file system refuses it;
    ``self.direct`` tells which one is in use). ``io_threads``: worker threads for parallel reads
    (1 = the caller reads).
    """

    def __init__(self, path: str, io_threads: int = 1, o_direct: bool = True):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.direct = False
        self.dfd = -1
        if o_direct and hasattr(os, "O_DIRECT"):
            try:
                dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                probe = mmap.mmap(-1, DIRECT_ALIGN)
                try:
                    os.preadv(dfd, [probe], 0)
                    self.dfd = dfd
                    self.direct = True
                except OSError:
                    os.close(dfd)
                finally:
                    probe.close()
            except OSError:
                pass
        self.io_threads = max(1, int(io_threads))
        self.pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="bmoe-io") if self.io_threads > 1 else None
        self._local = threading.local()
        # fault injection for tests: BMOE_INJECT_READ_ERROR=N makes the N-th read (1-based) fail once
        self._inject_at = int(os.environ.get("BMOE_INJECT_READ_ERROR", "0") or 0)
        self._reads = 0
        self._count_lock = threading.Lock()

    def _bounce(self) -> mmap.mmap:
        b = getattr(self._local, "bounce", None)
        if b is None:
            b = mmap.mmap(-1, BOUNCE_BYTES)
            self._local.bounce = b
        return b

    def read_into(self, view: memoryview, file_off: int, dest_addr: int | None = None) -> float:
        """Fill ``view`` with file bytes starting at ``file_off``. Returns seconds spent.

        With O_DIRECT and ``dest_addr`` (the view's address) congruent to ``file_off`` modulo 4096,
        one ``preadv`` reads the page-aligned middle straight into ``view`` and the two edge pages
        into the bounce buffer; otherwise the whole range goes through the bounce buffer.
        Raises :class:`ExpertIOError` on an OS error or a short read.
        """
        t0 = time.perf_counter()
        n = len(view)
        if self._inject_at:
            with self._count_lock:
                self._reads += 1
                hit = self._reads == self._inject_at
            if hit:
                raise ExpertIOError(f"read of {n} bytes at offset {file_off} failed: injected I/O error")
        try:
            if self.direct:
                if dest_addr is not None and (dest_addr - file_off) % DIRECT_ALIGN == 0 and n >= 2 * DIRECT_ALIGN:
                    if self._read_direct_scatter(view, file_off):
                        return time.perf_counter() - t0
                self._read_direct_bounce(view, file_off)
            else:
                pos = 0
                while pos < n:
                    got = os.preadv(self.fd, [view[pos:]], file_off + pos)
                    if got <= 0:
                        raise ExpertIOError(f"short read at offset {file_off + pos}: end of file")
                    pos += got
        except ExpertIOError:
            raise
        except OSError as e:
            raise ExpertIOError(f"read of {n} bytes at offset {file_off} failed: {e.strerror or e}") from None
        return time.perf_counter() - t0

    def _read_direct_scatter(self, view: memoryview, file_off: int) -> bool:
        n = len(view)
        end = file_off + n
        a = _round_down(file_off, DIRECT_ALIGN)
        head = file_off - a
        mid0 = a + DIRECT_ALIGN if head else a
        mid1 = _round_down(end, DIRECT_ALIGN)
        if mid1 <= mid0:
            return False
        bounce = self._bounce()
        bmv = memoryview(bounce)
        iovs = []
        if head:
            iovs.append(bmv[:DIRECT_ALIGN])
        iovs.append(view[mid0 - file_off : mid1 - file_off])
        if end > mid1:
            iovs.append(bmv[DIRECT_ALIGN : 2 * DIRECT_ALIGN])
        got = os.preadv(self.dfd, iovs, a)
        if got < end - a:
            return False  # short (e.g. signal): redo through the bounce path
        if head:
            view[: DIRECT_ALIGN - head] = bounce[head:DIRECT_ALIGN]
        if end > mid1:
            view[mid1 - file_off :] = bounce[DIRECT_ALIGN : DIRECT_ALIGN + (end - mid1)]
        return True

    def _read_direct_bounce(self, view: memoryview, file_off: int) -> None:
        n = len(view)
        bounce = self._bounce()
        pos = 0
        while pos < n:
            off = file_off + pos
            a = _round_down(off, DIRECT_ALIGN)
            lead = off - a
            want = min(n - pos, BOUNCE_BYTES - lead)
            span = _round_up(lead + want, DIRECT_ALIGN)
            got = os.preadv(self.dfd, [memoryview(bounce)[:span]], a)
            if got < lead + want:
                raise ExpertIOError(f"short read at offset {off}: {max(0, got - lead)} of {want} bytes")
            view[pos : pos + want] = bounce[lead : lead + want]
            pos += want

    def close(self) -> None:
        if self.pool:
            self.pool.shutdown(wait=True)
        for fd in (self.fd, self.dfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


@dataclass
class TokenCounters:
    """Expert-cache work done during one decode (one token, or one prefill)."""

    hits: int = 0
    misses: int = 0
    read_bytes: int = 0
    io_s: float = 0.0
    stall_s: float = 0.0
    mgmt_s: float = 0.0
    spec_bytes: int = 0
    #: per layer: (routed experts in routing order of first appearance, hit flags)
    route: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)


class ExpertCache:
    """LRU over (layer, expert) under ``budget_bytes``; fills the private buffers on demand.

    ``budget_bytes``: ``None`` = no limit (every expert may stay), ``0`` = no cache (the routed
    experts are read for each token and released after their layer), otherwise a byte budget
    over the sum of resident expert slices. ``overlap``/``prefetch``: speculative reads of the
    experts the previous token routed at the next ``prefetch`` layers, on the I/O threads.
    All methods except the I/O workers' bodies run on the decode thread (the eval callback).
    """

    def __init__(
        self,
        layout: ModelLayout,
        buffers: dict[str, TensorBuffer],
        reader: ExpertReader,
        budget_bytes: int | None,
        overlap: bool = False,
        prefetch: int = 0,
    ):
        self.layout = layout
        self.buffers = buffers
        self.reader = reader
        self.budget = budget_bytes
        self.no_cache = budget_bytes == 0
        self.overlap = bool(overlap or prefetch > 0)
        self.prefetch = int(prefetch) if prefetch else (1 if overlap else 0)
        if self.overlap and reader.pool is None:
            # speculative reads need at least one idle lane
            reader.pool = ThreadPoolExecutor(1, thread_name_prefix="bmoe-io")
        self.layer_bufs: list[list[TensorBuffer]] = [
            [buffers[i.name] for i in ts] for ts in layout.layers
        ]
        self.lru: OrderedDict[tuple[int, int], int] = OrderedDict()  # (il, e) -> bytes
        self.resident_bytes = 0
        self.inflight: dict[tuple[int, int], tuple[Future, int]] = {}
        self.inflight_bytes = 0
        self.prev_layer_set: tuple[int, set[int]] | None = None  # no-cache mode: release after use
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
        self._ever: set[tuple[int, int]] = set()
        self._spec_pending: set[tuple[int, int]] = set()  # prefetched, not yet routed
        self.tok = TokenCounters()
        self.last_route: dict[int, set[int]] = {}
        #: tokens in the ubatch being decoded (set by the engine before each llama_decode)
        self.ubatch_tokens = 0
        #: hooks (decode thread): on_lookup(il, routed, hit_flags) before the LRU changes;
        #: on_evict(il, e) after an expert left the cache
        self.on_lookup: Callable[[int, list[int], list[int]], None] | None = None
        self.on_evict: Callable[[int, int], None] | None = None

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
    def budget_mib(self) -> float | None:
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
        lru = self.lru
        if (not self.no_cache and not self.inflight and not self._spec_pending and self.on_lookup is None
                and all((il, e) in lru for e in routed)):
            # all hits (the steady state): LRU touch and counters only
            t0 = time.perf_counter()
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
            return
        tok = self.tok
        t_m0 = time.perf_counter()
        need = set(routed)
        if self.no_cache and self.prev_layer_set is not None:
            pil, pset = self.prev_layer_set
            for e in pset:
                for tb in self.layer_bufs[pil]:
                    tb.release(e)
            self.prev_layer_set = None
        hits_flags: list[int] = []
        missing: list[int] = []
        waits: list[tuple[int, Future]] = []
        if self.on_lookup is not None:
            self.on_lookup(il, list(routed),
                           [1 if ((il, e) in lru or (il, e) in self.inflight) else 0 for e in routed])
        for e in routed:
            key = (il, e)
            if key in lru:
                hits_flags.append(1)
                lru.move_to_end(key)
            elif key in self.inflight:
                hits_flags.append(1)
                waits.append((e, self.inflight[key][0]))
            else:
                hits_flags.append(0)
                missing.append(e)
                if key in self._ever:
                    self.rereads += 1
            if key in self._spec_pending:
                self._spec_pending.discard(key)
                self.spec_useful += 1
        nh = sum(hits_flags)
        tok.route[il] = (list(routed), hits_flags)
        if not self.no_cache:
            tok.hits += nh
            tok.misses += len(routed) - nh
            self.hits += nh
            self.misses += len(routed) - nh
            self.layer_hits[il] += nh
            self.layer_misses[il] += len(routed) - nh
        else:
            tok.misses += len(routed)
        ebytes = self.layout.expert_bytes[il]
        # make room (never evict what this layer needs or what is in flight)
        if not self.no_cache and self.budget is not None and missing:
            self._evict_for(len(missing) * ebytes, protect_layer=il, protect=need)
        for e in missing:
            for tb in self.layer_bufs[il]:
                tb.commit(e)
        tok.mgmt_s += time.perf_counter() - t_m0

        # demand reads
        if missing:
            jobs = [(tb, e) for e in missing for tb in self.layer_bufs[il]]
            t0 = time.perf_counter()
            busy = self._run_jobs(jobs)
            blocked = time.perf_counter() - t0
            nbytes = len(missing) * ebytes
            tok.read_bytes += nbytes
            self.read_bytes += nbytes
            if self.overlap:
                tok.io_s += busy
                tok.stall_s += blocked
            else:
                tok.io_s += blocked
        # in-flight speculative reads this layer needs now
        for e, fut in waits:
            t0 = time.perf_counter()
            try:
                fut.result()
            except ExpertIOError:
                # retry on the demand path
                self._drop_inflight((il, e))
                jobs = [(tb, e) for tb in self.layer_bufs[il]]
                busy = self._run_jobs(jobs)
                tok.io_s += busy
                tok.read_bytes += ebytes
                self.read_bytes += ebytes
            tok.stall_s += time.perf_counter() - t0
        t_m1 = time.perf_counter()
        self._integrate_done()
        for e, _ in waits:
            self._integrate((il, e))
        if self.no_cache:
            self.prev_layer_set = (il, set(missing))
        else:
            for e in missing:
                key = (il, e)
                self.lru[key] = ebytes
                self.resident_bytes += ebytes
                self._ever.add(key)
        tok.mgmt_s += time.perf_counter() - t_m1
        # speculative reads for the next layers, from the previous token's routing
        if self.prefetch and not self.no_cache:
            self._prefetch_after(il, need)

    def end_decode(self) -> None:
        """After a decode: in no-cache mode release the last layer's experts; remember the routing."""
        t0 = time.perf_counter()
        if self.no_cache and self.prev_layer_set is not None:
            pil, pset = self.prev_layer_set
            for e in pset:
                for tb in self.layer_bufs[pil]:
                    tb.release(e)
            self.prev_layer_set = None
        self.last_route = {il: set(r[0]) for il, r in self.tok.route.items()}
        self.tok.mgmt_s += time.perf_counter() - t0

    # -- helpers ------------------------------------------------------------------------------
    def _run_jobs(self, jobs: list[tuple[TensorBuffer, int]]) -> float:
        """Read every (buffer, expert) slice; runs of adjacent experts of one tensor are read as
        one range. Returns the summed per-lane busy seconds."""
        runs: list[tuple[TensorBuffer, int, int]] = []
        for tb, e in sorted(jobs, key=lambda j: (j[0].info.file_offset, j[1])):
            if runs and runs[-1][0] is tb and runs[-1][2] == e - 1:
                runs[-1] = (tb, runs[-1][1], e)
            else:
                runs.append((tb, e, e))

        def one(run):
            tb, e0, e1 = run
            a = tb.slice_range(e0)[0]
            b = tb.slice_range(e1)[1]
            return self.reader.read_into(tb.view[a:b], tb.info.file_offset + a, tb.addr + a)

        lanes = self.reader.io_threads
        if self.reader.pool is None or len(runs) == 1 or lanes == 1:
            return sum(one(r) for r in runs)
        # the lanes (the calling thread is lane 0) pull runs, largest first, from one shared
        # iterator: a slow read does not hold up the others' remaining work
        queue_ = iter(sorted(runs, key=lambda r: r[0].info.expert_stride * (r[2] - r[1] + 1), reverse=True))
        n_lanes = min(lanes, len(runs))

        def lane(_i):
            busy = 0.0
            for r in queue_:  # next() on a shared iterator is atomic under the GIL
                busy += one(r)
            return busy

        groups = list(range(n_lanes))
        futs = [self.reader.pool.submit(lane, g) for g in groups[1:]]
        busy = 0.0
        err: BaseException | None = None
        try:
            busy += lane(groups[0])
        except BaseException as e:  # noqa: BLE001 - re-raised below after all lanes finish
            err = e
        for f in futs:
            try:
                busy += f.result()
            except BaseException as e:  # noqa: BLE001
                err = err or e
        if err:
            raise err
        return busy

    def _evict_for(self, nbytes: int, protect_layer: int, protect: set[int]) -> None:
        assert self.budget is not None
        limit = self.budget
        if self.resident_bytes + self.inflight_bytes + nbytes <= limit:
            return
        for key in list(self.lru.keys()):
            if self.resident_bytes + self.inflight_bytes + nbytes <= limit:
                break
            il, e = key
            if il == protect_layer and e in protect:
                continue
            self._evict(key)

    def _evict(self, key: tuple[int, int]) -> None:
        il, e = key
        b = self.lru.pop(key)
        self.resident_bytes -= b
        self.evictions += 1
        self._spec_pending.discard(key)
        for tb in self.layer_bufs[il]:
            tb.release(e)
        if self.on_evict is not None:
            self.on_evict(il, e)

    def _drop_inflight(self, key) -> None:
        fut, b = self.inflight.pop(key)
        self.inflight_bytes -= b

    def _integrate(self, key) -> None:
        if key not in self.inflight:
            return
        fut, b = self.inflight.pop(key)
        self.inflight_bytes -= b
        if fut.exception() is not None:
            il, e = key
            for tb in self.layer_bufs[il]:
                tb.release(e)
            self._spec_pending.discard(key)
            return
        self.lru[key] = b
        self.resident_bytes += b
        self._ever.add(key)

    def _integrate_done(self) -> None:
        for key in [k for k, (f, _) in self.inflight.items() if f.done()]:
            self._integrate(key)

    def _prefetch_after(self, il: int, need: set[int]) -> None:
        t0 = time.perf_counter()
        pool = self.reader.pool
        n_layer = self.layout.n_layer
        tok = self.tok
        for l2 in range(il + 1, min(n_layer, il + 1 + self.prefetch)):
            cand = self.last_route.get(l2)
            if not cand or not self.layer_bufs[l2]:
                continue
            eb = self.layout.expert_bytes[l2]
            for e in sorted(cand):
                key = (l2, e)
                if key in self.lru or key in self.inflight:
                    continue
                if self.budget is not None:
                    self._evict_for(eb, protect_layer=il, protect=need)
                    if self.resident_bytes + self.inflight_bytes + eb > self.budget:
                        break
                for tb in self.layer_bufs[l2]:
                    tb.commit(e)
                fut = pool.submit(self._spec_read, l2, e)
                self.inflight[key] = (fut, eb)
                self.inflight_bytes += eb
                self._spec_pending.add(key)
                self.spec_experts += 1
                self.spec_bytes += eb
                tok.spec_bytes += eb
                tok.read_bytes += eb
                self.read_bytes += eb
        tok.mgmt_s += time.perf_counter() - t0

    def _spec_read(self, il: int, e: int) -> float:
        busy = 0.0
        for tb in self.layer_bufs[il]:
            a, b = tb.slice_range(e)
            busy += self.reader.read_into(tb.view[a:b], tb.info.file_offset + a, tb.addr + a)
        # io_s under overlap is lane-busy time; credited to the token being decoded when it ends
        self._spec_busy_add(busy)
        return busy

    _spec_lock = threading.Lock()
    _spec_busy = 0.0

    def _spec_busy_add(self, s: float) -> None:
        with self._spec_lock:
            self._spec_busy += s

    def take_spec_busy(self) -> float:
        with self._spec_lock:
            s, self._spec_busy = self._spec_busy, 0.0
        return s

    def admit(self, il: int, e: int, evict: bool = False) -> int:
        """Read expert ``e`` of layer ``il`` into the cache outside any routing (profile fill,
        warm-up). Counts no hit/miss; returns the bytes read (0 if already resident, if the layer
        has no experts, or if there is no room and ``evict`` is False). Decode thread only."""
        key = (il, e)
        if self.no_cache or not self.layer_bufs[il] or key in self.lru or key in self.inflight:
            return 0
        eb = self.layout.expert_bytes[il]
        if self.budget is not None:
            if evict:
                self._evict_for(eb, protect_layer=-1, protect=set())
            if self.resident_bytes + self.inflight_bytes + eb > self.budget:
                return 0
        for tb in self.layer_bufs[il]:
            tb.commit(e)
        self._run_jobs([(tb, e) for tb in self.layer_bufs[il]])
        self.lru[key] = eb
        self.resident_bytes += eb
        self.read_bytes += eb
        self._ever.add(key)
        return eb

    def preload(self, pairs=None) -> int:
        """Admit (layer, expert) pairs in order until the budget is full (default: every expert,
        layer by layer). Returns bytes read."""
        if pairs is None:
            pairs = [(il, e) for il in self.layout.moe_layers for e in range(self.layout.n_expert)]
        total = 0
        for il, e in pairs:
            if self.budget is not None and self.resident_bytes + self.layout.expert_bytes[il] > self.budget:
                break
            total += self.admit(il, e)
        return total

    def drain(self) -> None:
        """Wait for every speculative read and integrate it (between generations)."""
        for key, (fut, _) in list(self.inflight.items()):
            try:
                fut.result()
            except BaseException:  # noqa: BLE001 - a failed speculative read is just dropped
                pass
            self._integrate(key)

    def release_all(self) -> None:
        self.drain()
        for key in list(self.lru.keys()):
            self._evict(key)
