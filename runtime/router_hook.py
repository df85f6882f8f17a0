"""The llama.cpp eval callback (``llama_context_params.cb_eval``) that captures the expert tensors
and hands each layer's routing to the expert cache before the layer's experts are multiplied.

Modes:
* ``capture`` (one-token warm-up): for every graph node, look at its sources and remember the
  ``blk.<il>.ffn_*_exps.weight`` tensors and which ``ffn_moe_topk-<il>`` nodes exist; ask for no data.
* ``route``: ask only for ``ffn_moe_topk-<il>`` (and the ``ffn_moe_weights*-<il>`` nodes when
  routing weights are wanted). When one materializes, read the selected expert ids stride-aware
  (the node is a view of an argsort: rows are ``nb[1]`` apart) and call ``on_route(il, ids)``
  with ``ids`` an int32 array of shape (n_tokens, n_expert_used).
  With frame pools (``frame_table`` set; docs/runtime.md "A budget below the bank: frames") the
  routing node is ``ffn_moe_weights-<il>`` instead, the gather of the routing weights, whose
  ``src[1]`` is the ids: after ``on_route`` the ids are rewritten in place to the frames the
  experts live in (after the gather, only the layer's expert products read them).

Traps: an exception in a ctypes callback would be swallowed and the
callback would return 0, so the whole body is wrapped; on error the hook records it and asks the
engine to abort the decode (through llama's abort callback); the materialized call always returns
true (false would skip the rest of the split).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from . import native
from .ggml_struct import GGMLTensor, tensor_at, tensor_name
from .llama_lib import L

TOPK_PREFIX = b"ffn_moe_topk-"
WEIGHTS_PREFIXES = (b"ffn_moe_weights-", b"ffn_moe_weights_norm-", b"ffn_moe_weights_scaled-")
MOE_PREFIX = b"ffn_moe_"
EXPS_MARK = b"_exps.weight"


def read_ids(t: GGMLTensor) -> np.ndarray:
    """Selected expert ids of a materialized ``ffn_moe_topk`` node: int32 (n_tokens, k), copied."""
    k, n = int(t.ne[0]), int(t.ne[1])
    if n == 1 and int(t.nb[0]) == 4:  # decode fast path: one contiguous row
        return np.array((ctypes.c_int32 * k).from_address(int(t.data))[:], dtype=np.int32).reshape(1, k)
    return np.array(ids_view(t), dtype=np.int32, copy=True)


def ids_view(t: GGMLTensor) -> np.ndarray:
    """The ids of a routing node as a writable int32 (n_tokens, k) view of its memory (no copy)."""
    k, n = int(t.ne[0]), int(t.ne[1])
    nb0, nb1 = int(t.nb[0]), int(t.nb[1])
    span = (n - 1) * nb1 + k * nb0
    buf = (ctypes.c_char * span).from_address(int(t.data))
    base = np.frombuffer(memoryview(buf), dtype=np.int32)
    return np.lib.stride_tricks.as_strided(base, shape=(n, k), strides=(nb1, nb0))


def to_frames(t: GGMLTensor, table: np.ndarray) -> None:
    """Rewrite the ids of routing node ``t`` in place to ``table[id]`` (one layer's frames; an
    expert without one, after a failed or cancelled routing whose decode is being aborted, goes
    to frame 0 so the products read memory that exists)."""
    v = ids_view(t)
    v[...] = np.maximum(table[v], 0)


def read_weights(t: GGMLTensor) -> np.ndarray:
    """Routing weights node (f32) as (n_tokens, k): accepts [k, n] and [1, k, n] shapes."""
    if int(t.ne[0]) == 1:
        k, n, sk, sn = int(t.ne[1]), int(t.ne[2]), int(t.nb[1]), int(t.nb[2])
    else:
        k, n, sk, sn = int(t.ne[0]), int(t.ne[1]), int(t.nb[0]), int(t.nb[1])
    span = (n - 1) * sn + (k - 1) * sk + 4
    buf = (ctypes.c_char * span).from_address(int(t.data))
    base = np.frombuffer(memoryview(buf), dtype=np.float32)
    arr = np.lib.stride_tricks.as_strided(base, shape=(n, k), strides=(sn, sk))
    return np.array(arr, dtype=np.float32, copy=True)


class RouterHook:
    """Owns the eval callback objects (keep a reference for the context's lifetime).

    ``cb_eval``/``cb_eval_user_data``: what to put in ``llama_context_params`` (the native shim
    with its state struct when available, else the Python callback). ``native``: which one.
    """

    def __init__(self, native_shim: bool | None = None) -> None:
        self._mode = "idle"
        self._want_weights = False
        self.captured: dict[str, int] = {}
        self.topk_seen: set[int] = set()
        #: capture mode: nodes seen, each layer's routing node and last node reading its experts
        self.n_nodes = 0
        self.topk_node: dict[int, int] = {}
        self.last_expert_use: dict[int, int] = {}
        #: capture mode: per layer, every node reading its routing node's ids: (node number, op,
        #: node name, which source, the name of its first source)
        self.ids_readers: dict[int, list[tuple[int, int, bytes, int, bytes]]] = {}
        self._topk_addr: dict[int, int] = {}
        self.on_route: Callable[[int, np.ndarray | list[int]], None] | None = None
        self.on_weights: Callable[[int, np.ndarray], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        #: frame pools: the frame of each (layer, expert) as int32 ``[n_layer, n_expert]`` (a view of
        #: the cache's shared table), or None (the experts in place)
        self.frame_table: np.ndarray | None = None
        self.error: BaseException | None = None
        self.cb = L.ggml_backend_sched_eval_callback(self._cb)
        lib: Any = native.library() if native_shim is not False else None
        self.native = lib is not None
        self.cb_eval_user_data: int | None
        if self.native:
            self.state = native.HookState.for_tensors(int(ctypes.cast(self.cb, ctypes.c_void_p).value or 0))
            shim = int(ctypes.cast(lib.bmoe_eval_cb, ctypes.c_void_p).value or 0)
            self.cb_eval = L.ggml_backend_sched_eval_callback(shim)
            self.cb_eval_user_data = ctypes.addressof(self.state)
        else:
            self.cb_eval = self.cb
            self.cb_eval_user_data = None

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, m: str) -> None:
        self._mode = m
        if self.native:
            self.state.mode = {"idle": native.Mode.IDLE, "capture": native.Mode.CAPTURE, "route": native.Mode.ROUTE}[m]

    @property
    def want_weights(self) -> bool:
        return self._want_weights

    @want_weights.setter
    def want_weights(self, w: bool) -> None:
        self._want_weights = bool(w)
        if self.native:
            self.state.want_weights = int(bool(w))

    def _capture_node(self, t: int) -> None:
        """Capture mode, one graph node (in evaluation order): the expert tensors it reads (and
        the last node reading each layer's experts), the routing node it is."""
        self.n_nodes += 1
        tt = tensor_at(t)
        name = tensor_name(t)
        for i, s in enumerate(tt.src):
            if s:
                sn = tensor_name(s)
                if sn.endswith(EXPS_MARK) and sn.startswith(b"blk."):
                    self.captured[sn.decode()] = int(s)
                    self.last_expert_use[int(sn.split(b".", 2)[1])] = self.n_nodes
                ril = self._topk_addr.get(int(s))
                if ril is not None:
                    src0 = tensor_name(tt.src[0]) if tt.src[0] else b""
                    self.ids_readers.setdefault(ril, []).append((self.n_nodes, int(tt.op), name, i, src0))
        if name.startswith(TOPK_PREFIX) and name[len(TOPK_PREFIX):].isdigit():
            il = int(name[len(TOPK_PREFIX):])
            self.topk_seen.add(il)
            self.topk_node.setdefault(il, self.n_nodes)
            self._topk_addr[int(t)] = il

    def _route(self, il: int, ids_t: GGMLTensor) -> None:
        """``on_route`` with the ids of ``ids_t``."""
        assert self.on_route is not None
        if int(ids_t.ne[1]) == 1 and int(ids_t.nb[0]) == 4:
            # decode: one row, passed as a list (top-k ids of one token are unique)
            self.on_route(il, (ctypes.c_int32 * int(ids_t.ne[0])).from_address(int(ids_t.data))[:])
        else:
            self.on_route(il, read_ids(ids_t))

    def _route_frames(self, il: int, tt: GGMLTensor) -> None:
        """Frame pools, the weights' gather of layer ``il`` ran: route its ids, hand over its
        weights when wanted, then rewrite the ids to frames."""
        assert self.frame_table is not None
        ids_t = tensor_at(int(tt.src[1]))
        try:
            if self.on_route is not None:
                self._route(il, ids_t)
            if self.on_weights is not None:
                self.on_weights(il, read_weights(tt))
        finally:
            to_frames(ids_t, self.frame_table[il])

    def ids_read_by_experts_only(self, il: int, op_name: Callable[[int], str]) -> bool:
        """True when, in the captured graph, layer ``il``'s routed ids are read by the gather of its
        routing weights (``ffn_moe_weights-<il>``, GET_ROWS) and then only by products with its
        own expert tensors (MUL_MAT_ID): what the frame pools need to rewrite the ids to frames
        after the gather. Not so (expert biases indexed by the ids, ids derived from the routing,
        a view of them): False. ``op_name``: ggml's name of an op number."""
        readers = self.ids_readers.get(il, [])
        gathers = [r for r in readers if op_name(r[1]) == "GET_ROWS"]
        products = [r for r in readers if op_name(r[1]) == "MUL_MAT_ID"]
        if len(gathers) != 1 or not products or len(gathers) + len(products) != len(readers):
            return False
        g = gathers[0]
        mark = f"blk.{il}.".encode()
        return (g[2] == f"ffn_moe_weights-{il}".encode() and g[3] == 1
                and all(p[3] == 2 and p[4].startswith(mark) and p[4].endswith(EXPS_MARK) and p[0] > g[0]
                        for p in products))

    def layers_in_sequence(self) -> bool:
        """True when, in the captured graph, every MoE layer's experts are last used before the
        next MoE layer routes (so one buffer can serve every layer in turn)."""
        order = sorted(self.topk_node, key=self.topk_node.__getitem__)
        for a, b in zip(order, order[1:]):
            if self.last_expert_use.get(a, 0) >= self.topk_node[b]:
                return False
        return bool(order) and all(il in self.last_expert_use for il in order)

    def _cb(self, t, ask, _ud):  # noqa: C901 - one hot path, kept flat
        try:
            if ask:
                if self._mode == "route":
                    name = tensor_name(t)
                    if not name.startswith(MOE_PREFIX):
                        return False
                    if self.frame_table is not None and name.startswith(WEIGHTS_PREFIXES[0]):
                        return name[len(WEIGHTS_PREFIXES[0]):].isdigit()
                    if name.startswith(TOPK_PREFIX):
                        return self.frame_table is None and name[len(TOPK_PREFIX):].isdigit()
                    return (
                        self._want_weights
                        and name.startswith(WEIGHTS_PREFIXES)
                        and name.rsplit(b"-", 1)[1].isdigit()
                    )
                if self._mode == "capture":
                    self._capture_node(t)
                return False
            # materialized node (route mode only)
            name = tensor_name(t)
            if self.frame_table is not None and name.startswith(WEIGHTS_PREFIXES[0]):
                il = int(name[len(WEIGHTS_PREFIXES[0]):])
                tt = tensor_at(t)
                if self.error is not None:  # the decode is being aborted: the ids still go to frames
                    to_frames(tensor_at(int(tt.src[1])), self.frame_table[il])
                else:
                    self._route_frames(il, tt)
                return True
            if self.error is not None:
                return True
            tt = tensor_at(t)
            if name.startswith(TOPK_PREFIX):
                if self.on_route is not None:
                    self._route(int(name[len(TOPK_PREFIX):]), tt)
            elif self.on_weights is not None:
                il = int(name.rsplit(b"-", 1)[1])
                self.on_weights(il, read_weights(tt))
            return True
        except BaseException as e:  # noqa: BLE001 - must never escape a ctypes callback
            if self.error is None:
                self.error = e
            try:
                if self.on_error is not None:
                    self.on_error(e)
            except BaseException:  # noqa: BLE001
                pass
            return True
