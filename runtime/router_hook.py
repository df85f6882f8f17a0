"""The llama.cpp eval callback (``llama_context_params.cb_eval``) that captures the expert tensors
and hands each layer's routing to the expert cache before the layer's experts are multiplied.

Modes:
* ``capture`` (one-token warm-up): for every graph node, look at its sources and remember the
  ``blk.<il>.ffn_*_exps.weight`` tensors and which ``ffn_moe_topk-<il>`` nodes exist; ask for no data.
* ``route``: ask only for ``ffn_moe_topk-<il>`` (and the ``ffn_moe_weights*-<il>`` nodes when
  routing weights are wanted). When one materializes, read the selected expert ids stride-aware
  (the node is a view of an argsort: rows are ``nb[1]`` apart) and call ``on_route(il, ids)``
  with ``ids`` an int32 array of shape (n_tokens, n_expert_used).

Traps handled (issue #3 step 6): an exception in a ctypes callback would be swallowed and the
callback would return 0, so the whole body is wrapped; on error the hook records it and asks the
engine to abort the decode (through llama's abort callback); the materialized call always returns
true (false would skip the rest of the split).
"""

from __future__ import annotations

import ctypes
from typing import Callable

import llama_cpp as L
import numpy as np

from .ggml_struct import GGMLTensor, tensor_at, tensor_name

TOPK_PREFIX = b"ffn_moe_topk-"
WEIGHTS_PREFIXES = (b"ffn_moe_weights-", b"ffn_moe_weights_norm-", b"ffn_moe_weights_scaled-")
MOE_PREFIX = b"ffn_moe_"
EXPS_MARK = b"_exps.weight"


def read_ids(t: GGMLTensor) -> np.ndarray:
    """Selected expert ids of a materialized ``ffn_moe_topk`` node: int32 (n_tokens, k), copied."""
    k, n = int(t.ne[0]), int(t.ne[1])
    nb0, nb1 = int(t.nb[0]), int(t.nb[1])
    span = (n - 1) * nb1 + k * nb0
    buf = (ctypes.c_char * span).from_address(int(t.data))
    base = np.frombuffer(buf, dtype=np.int32)
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
    base = np.frombuffer(buf, dtype=np.float32)
    arr = np.lib.stride_tricks.as_strided(base, shape=(n, k), strides=(sn, sk))
    return np.array(arr, dtype=np.float32, copy=True)


class RouterHook:
    """Owns the ``cb_eval`` ctypes callback object (keep a reference for the context's lifetime)."""

    def __init__(self) -> None:
        self.mode = "idle"
        self.captured: dict[str, int] = {}
        self.topk_seen: set[int] = set()
        self.on_route: Callable[[int, np.ndarray], None] | None = None
        self.on_weights: Callable[[int, np.ndarray], None] | None = None
        self.want_weights = False
        self.on_error: Callable[[BaseException], None] | None = None
        self.error: BaseException | None = None
        self.cb = L.ggml_backend_sched_eval_callback(self._cb)

    def _cb(self, t, ask, _ud):  # noqa: C901 - one hot path, kept flat
        try:
            if ask:
                if self.mode == "route":
                    name = tensor_name(t)
                    if not name.startswith(MOE_PREFIX):
                        return False
                    if name.startswith(TOPK_PREFIX):
                        return name[len(TOPK_PREFIX):].isdigit()
                    return (
                        self.want_weights
                        and name.startswith(WEIGHTS_PREFIXES)
                        and name.rsplit(b"-", 1)[1].isdigit()
                    )
                if self.mode == "capture":
                    tt = tensor_at(t)
                    for s in tt.src:
                        if s:
                            sn = tensor_name(s)
                            if sn.endswith(EXPS_MARK) and sn.startswith(b"blk."):
                                self.captured[sn.decode()] = int(s)
                    name = tensor_name(t)
                    if name.startswith(TOPK_PREFIX) and name[len(TOPK_PREFIX):].isdigit():
                        self.topk_seen.add(int(name[len(TOPK_PREFIX):]))
                return False
            # materialized node (route mode only)
            if self.error is not None:
                return True
            name = tensor_name(t)
            tt = tensor_at(t)
            if name.startswith(TOPK_PREFIX):
                il = int(name[len(TOPK_PREFIX):])
                if self.on_route is not None:
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
