"""Streaming setup: find the expert tensors in llama.cpp's graph, check that they can be streamed,
and point them at the expert store.

1. A one-token warm-up decode with the eval callback in *capture* mode records every expert
   tensor the graph uses and checks that an ``ffn_moe_topk-<il>`` routing node exists for every
   MoE layer (the KV cache is cleared afterwards).
2. ``ggml_tensor`` is read through ctypes (:mod:`bmoe_top.runtime.ggml_struct`), checked
   against the library's getters. Each expert tensor must be in a plain host buffer
   (``CPU_Mapped``: not repacked), with the file's type, shape and expert stride.
3. Each tensor's ``data`` is pointed at its :class:`bmoe_top.runtime.expert_store.TensorBuffer`
   and llama.cpp's own copy of the expert bytes is given back to the system.

Any refusal is an :class:`EngineError` with one line naming the reason.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import numpy as np

from bmoe_top.parsers.gguf_layout import ModelLayout

from .expert_cache import ExpertCache
from .expert_io import ExpertReader
from .expert_sink import ExpertSink
from .expert_store import ExpertStore, FramePlan, frame_plan
from .ggml_struct import GGMLLib, LayoutError, check_layout, tensor_at
from .router_hook import RouterHook

__all__ = ["EngineError", "Streaming", "capture_graph"]

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_LIBC.madvise.restype = ctypes.c_int


class EngineError(Exception):
    """Start-up refusal (streaming impossible, unusable budget, llama.cpp load failure). One line."""


def release_range(addr: int, n: int) -> None:
    """``MADV_DONTNEED`` the whole pages inside [addr, addr+n) (llama.cpp's own copy of a tensor)."""
    page = mmap.PAGESIZE
    a = (addr + page - 1) // page * page
    b = (addr + n) // page * page
    if b > a:
        _LIBC.madvise(a, b - a, mmap.MADV_DONTNEED)


def capture_graph(hook: RouterHook, warm_up: Callable[[], int], layout: ModelLayout) -> None:
    """Run ``warm_up`` (one decode) with ``hook`` capturing, then check the graph has a routing
    node per MoE layer and uses every expert tensor of the file. A layer whose expert tensors the
    graph never reads (the architecture makes it dense) leaves ``layout``: it is not streamed.
    Raises :class:`EngineError`."""
    hook.mode = "capture"
    try:
        rc = warm_up()
    finally:
        hook.mode = "idle"
    if rc != 0:
        raise EngineError(f"warm-up decode failed (llama_decode returned {rc})")
    unused = [il for il in layout.moe_layers
              if not any(i.name in hook.captured for i in layout.layers[il]) and il not in hook.topk_seen]
    for il in unused:  # expert tensors the graph never multiplies (a dense layer by the arch's rules)
        layout.drop_layer(il)
    if not layout.moe_layers:
        raise EngineError(f"the {layout.arch} graph never multiplies its expert tensors (llama.cpp runs it as a "
                          "dense model): nothing to stream (run with --no-moe-stream)")
    missing_topk = [il for il in layout.moe_layers if il not in hook.topk_seen]
    if missing_topk:
        raise EngineError(
            f"routing node ffn_moe_topk-{missing_topk[0]} not found in the {layout.arch} graph: "
            "cannot stream this architecture (run with --no-moe-stream)"
        )
    missing = sorted(set(layout.tensors) - set(hook.captured))
    if missing:
        raise EngineError(f"expert tensor {missing[0]} not seen in the graph: cannot stream")


def check_expert_tensors(lib: GGMLLib, layout: ModelLayout, captured: dict[str, int]) -> None:
    """Every captured expert tensor is a plain host tensor with the file's type, shape and stride."""
    try:
        check_layout(lib, list(captured.values()))
    except LayoutError as e:
        raise EngineError(f"ggml_tensor layout check failed ({e}): refusing to stream") from None
    for name, info in layout.tensors.items():
        t = tensor_at(captured[name])
        bname, base, bsize, host = lib.buffer_info(int(t.buffer or 0))
        data = int(t.data or 0)
        if bname != "CPU_Mapped" or not host or not (base <= data and data + info.n_bytes <= base + bsize):
            raise EngineError(
                f"{name} is in a {bname} buffer, not a plain CPU-mapped one "
                f"(repacked {lib.type_name(t.type)}?): refusing to stream"
            )
        if int(t.type) != info.ggml_type or tuple(int(t.ne[i]) for i in range(len(info.shape))) != info.shape:
            raise EngineError(f"{name}: graph type/shape differ from the file: refusing to stream")
        if int(t.nb[2]) != info.expert_stride or int(t.ne[2]) != layout.n_expert:
            raise EngineError(f"{name}: graph stride nb[2]={t.nb[2]} != file {info.expert_stride}")


def check_file_bytes(layout: ModelLayout, captured: dict[str, int]) -> None:
    """The first and last 4 KiB of every expert tensor in memory equal the file's bytes (the
    tensor really is the file range the reads will use)."""
    fds = [open(p, "rb") for p in layout.paths]
    try:
        for name, info in layout.tensors.items():
            data = int(tensor_at(captured[name]).data or 0)
            k = min(4096, info.n_bytes)
            fh = fds[info.shard]
            for off in (0, info.n_bytes - k):
                fh.seek(info.file_offset + off)
                if ctypes.string_at(data + off, k) != fh.read(k):
                    raise EngineError(f"{name}: in-memory bytes differ from the file: refusing to stream")
    finally:
        for fh in fds:
            fh.close()


def check_in_sink(layout: ModelLayout, captured: dict[str, int], sink: ExpertSink) -> None:
    """Every expert tensor was loaded into the sink (the override named the file's tensors)."""
    spans = sink.spans()
    for name, info in layout.tensors.items():
        data = int(tensor_at(captured[name]).data or 0)
        if not any(a <= data and data + info.n_bytes <= b for a, b in spans):
            raise EngineError(f"{name} was not loaded into the expert sink: refusing to stream")


class Streaming:
    """The streaming state of one engine: ``store`` (buffers), ``reader`` (I/O lanes) and
    ``cache`` (the LRU), set up by :meth:`attach` after the graph was captured.

    ``budget``: bytes (None = every expert fits, 0 = no cache); ``huge``: frame pools in 2 MiB
    pages (else 4 KiB pages). Raises :class:`EngineError`.
    """

    def __init__(self, layout: ModelLayout, budget: int | None, io_threads: int, o_direct: bool,
                 overlap: bool, prefetch: int, huge: bool = True) -> None:
        self.layout = layout
        self.huge = huge
        self.budget = budget
        self.io_threads = io_threads
        self.want_direct = o_direct
        self.overlap = overlap
        self.prefetch = prefetch
        self.store: ExpertStore | None = None
        self.reader: ExpertReader | None = None
        self.cache: ExpertCache | None = None

    @property
    def o_direct(self) -> bool:
        return self.reader is not None and self.reader.direct

    def attach(self, captured: dict[str, int], sink: ExpertSink | None,
               layers_in_sequence: bool = False, hook: RouterHook | None = None) -> ExpertCache:
        """Check the captured tensors, point them at a new store and build the cache. ``sink``:
        the buffer type the experts were loaded into (their bytes are gone), or None for an mmap
        load (llama.cpp's copy is released here). ``layers_in_sequence``: the graph finishes a
        layer's experts before the next layer routes; with no cache (and no prefetch) the layers
        then share windows (:class:`ExpertStore`). ``hook``: the capturing hook, when frame pools
        may be used (a budget below the bank and no speculative reads, :meth:`frame_layout`);
        the hook then rewrites the routed ids to frames."""
        lay = self.layout
        ggml = GGMLLib()
        check_expert_tensors(ggml, lay, captured)
        if sink is not None:
            check_in_sink(lay, captured, sink)
        else:
            check_file_bytes(lay, captured)
        try:
            self.reader = ExpertReader(lay.paths, io_threads=self.io_threads, o_direct=self.want_direct)
        except OSError as e:
            raise EngineError(f"cannot open {lay.path} for expert reads: {e.strerror or e}") from None
        windows = self.budget == 0 and not (self.overlap or self.prefetch) and layers_in_sequence
        frames = self.frame_layout(hook, ggml) if hook is not None else None
        self.store = ExpertStore(lay, windows=windows, frames=frames, huge=self.huge)
        for name, info in lay.tensors.items():
            t = tensor_at(captured[name])
            old = int(t.data)
            t.data = self.store.buffers[name].addr
            if frames is not None:  # the products index the pool: as many experts as frames, a frame apart
                stride = frames.strides[info.kind]
                t.ne[2] = frames.n_frames
                t.nb[2] = stride
                t.nb[3] = stride * frames.n_frames
            if sink is None:
                release_range(old, info.n_bytes)
        if sink is not None:
            sink.release()  # the warm-up read (zero) pages of it
        self.cache = ExpertCache(lay, self.store, self.reader, self.budget, overlap=self.overlap,
                                 prefetch=self.prefetch)
        if frames is not None:
            assert hook is not None
            table = np.frombuffer(self.cache.frame_table(), dtype=np.int32)
            hook.frame_table = table.reshape(lay.n_layer, lay.n_expert)
        return self.cache

    def frame_layout(self, hook: RouterHook, ggml: GGMLLib) -> FramePlan | None:
        """The frame pools for this budget (:func:`~bmoe_top.runtime.expert_store.frame_plan`), or
        None: no speculative reads (they read into the experts' places) and, in the captured
        graph, every streamed layer's ids read only by its weights' gather and then its expert
        products (:meth:`RouterHook.ids_read_by_experts_only`)."""
        if self.overlap or self.prefetch:
            return None
        plan = frame_plan(self.layout, self.budget)
        if plan is None:
            return None
        if not all(hook.ids_read_by_experts_only(il, ggml.op_name) for il in self.layout.moe_layers):
            return None
        return plan

    def close(self) -> None:
        """Stop the I/O lanes and free the buffers (after the llama context and model are gone)."""
        if self.cache is not None:
            try:
                self.cache.drain()
            except Exception:  # noqa: BLE001 - closing must not fail on a lost speculative read
                pass
            self.cache.close_native()
        if self.reader is not None:
            self.reader.close()
        if self.store is not None:
            self.store.close()
