"""The llama.cpp eval callback (``llama_context_params.cb_eval``) that captures the expert tensors
and hands each layer's routing to the expert cache before the layer's experts are multiplied.

Modes:
* ``capture`` (one-token warm-up): for every graph node, look at its sources and remember the
  ``blk.<il>.ffn_*_exps.weight`` tensors and which ``ffn_moe_topk-<il>`` nodes exist; ask for no data.
* ``route``: ask only for ``ffn_moe_topk-<il>`` (and the ``ffn_moe_weights*-<il>`` nodes when
  routing weights are wanted). When one materializes, read the selected expert ids stride-aware
  (the node is a view of an argsort: rows are ``nb[1]`` apart) and call ``on_route(il, ids)``
  with ``ids`` an int32 array of shape (n_tokens, n_expert_used).

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
    nb0, nb1 = int(t.nb[0]), int(t.nb[1])
    if n == 1 and nb0 == 4:  # decode fast path: one contiguous row
        return np.array((ctypes.c_int32 * k).from_address(int(t.data))[:], dtype=np.int32).reshape(1, k)
    span = (n - 1) * nb1 + k * nb0
    buf = (ctypes.c_char * span).from_address(int(t.data))
    base = np.frombuffer(memoryview(buf), dtype=np.int32)
    arr = np.lib.stride_tricks.as_strided(base, shape=(n, k), strides=(nb1, nb0))
    return np.array(arr, dtype=np.int32, copy=True)


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
        self.on_route: Callable[[int, np.ndarray], None] | None = None
        self.on_weights: Callable[[int, np.ndarray], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
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
        for s in tt.src:
            if s:
                sn = tensor_name(s)
                if sn.endswith(EXPS_MARK) and sn.startswith(b"blk."):
                    self.captured[sn.decode()] = int(s)
                    self.last_expert_use[int(sn.split(b".", 2)[1])] = self.n_nodes
        name = tensor_name(t)
        if name.startswith(TOPK_PREFIX) and name[len(TOPK_PREFIX):].isdigit():
            il = int(name[len(TOPK_PREFIX):])
            self.topk_seen.add(il)
            self.topk_node.setdefault(il, self.n_nodes)

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
                    if name.startswith(TOPK_PREFIX):
                        return name[len(TOPK_PREFIX):].isdigit()
                    return (
                        self._want_weights
                        and name.startswith(WEIGHTS_PREFIXES)
                        and name.rsplit(b"-", 1)[1].isdigit()
                    )
                if self._mode == "capture":
                    self._capture_node(t)
                return False
            # materialized node (route mode only)
            if self.error is not None:
                return True
            name = tensor_name(t)
            tt = tensor_at(t)
            if name.startswith(TOPK_PREFIX):
                il = int(name[len(TOPK_PREFIX):])
                if self.on_route is not None:
                    if int(tt.ne[1]) == 1 and int(tt.nb[0]) == 4:
                        # decode: one row, passed as a list (top-k ids of one token are unique)
                        self.on_route(il, (ctypes.c_int32 * int(tt.ne[0])).from_address(int(tt.data))[:])
                    else:
                        self.on_route(il, read_ids(tt))
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
