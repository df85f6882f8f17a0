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
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp as L
import numpy as np
import platformdirs

from .ggml_struct import NAME_OFFSET, GGMLTensor, tensor_at, tensor_name

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


# -- native ask path ----------------------------------------------------------------------------
# The scheduler asks the callback about EVERY graph node (hundreds per token). Through ctypes each
# ask costs a few microseconds of Python, which on a small model is a large share of a token.
# This tiny C function answers the asks natively (name prefix test) and calls the Python callback
# only for materialized nodes (one per MoE layer). It is compiled once with the system C compiler
# (the one that built llama-cpp-python) into the user cache dir; without a compiler, or with
# BMOE_NATIVE_HOOK=0, the pure-Python callback is used (same results, slower).
_NATIVE_SRC = r"""
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
typedef bool (*bmoe_py_cb)(void *t, bool ask, void *ud);
struct bmoe_hook { bmoe_py_cb py; void *py_ud; size_t name_offset; int mode; int want_weights; };
static int digits(const char *s) { if (!*s) return 0; for (; *s; ++s) if (*s < '0' || *s > '9') return 0; return 1; }
bool bmoe_eval_cb(void *t, bool ask, void *ud) {
    struct bmoe_hook *h = (struct bmoe_hook *) ud;
    if (h->mode == 1) return h->py(t, ask, h->py_ud);
    if (h->mode != 2) return ask ? false : true;
    if (!ask) return h->py(t, ask, h->py_ud);
    const char *name = (const char *) t + h->name_offset;
    if (strncmp(name, "ffn_moe_", 8) != 0) return false;
    if (strncmp(name + 8, "topk-", 5) == 0) return digits(name + 13);
    if (h->want_weights && strncmp(name + 8, "weights", 7) == 0) {
        const char *dash = strrchr(name, '-');
        if (!dash) return false;
        size_t plen = (size_t) (dash - name);
        if (plen == 15 || (plen == 20 && strncmp(name + 15, "_norm", 5) == 0) ||
            (plen == 22 && strncmp(name + 15, "_scaled", 7) == 0)) return digits(dash + 1);
    }
    return false;
}
"""

MODE_IDLE, MODE_CAPTURE, MODE_ROUTE = 0, 1, 2


class _HookStruct(ctypes.Structure):
    _fields_ = [("py", ctypes.c_void_p), ("py_ud", ctypes.c_void_p), ("name_offset", ctypes.c_size_t),
                ("mode", ctypes.c_int), ("want_weights", ctypes.c_int)]


_native_lib = None
_native_tried = False
native_error: str | None = None


def native_hook_lib():
    """The compiled shim (ctypes CDLL) or None (no compiler, disabled, or build failed)."""
    global _native_lib, _native_tried, native_error
    if _native_tried:
        return _native_lib
    _native_tried = True
    if os.environ.get("BMOE_NATIVE_HOOK", "1") == "0":
        native_error = "disabled by BMOE_NATIVE_HOOK=0"
        return None
    try:
        tag = hashlib.sha256((_NATIVE_SRC + platform.machine()).encode()).hexdigest()[:16]
        d = Path(platformdirs.user_cache_dir("bmoe-top")) / "native"
        so = d / f"bmoe_evalhook-{tag}.so"
        if not so.exists():
            cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
            if not cc:
                native_error = "no C compiler found"
                return None
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=d) as td:
                src = Path(td) / "hook.c"
                src.write_text(_NATIVE_SRC)
                out = Path(td) / "hook.so"
                r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)],
                                   capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    native_error = f"compiler failed: {r.stderr.strip()[:200]}"
                    return None
                os.replace(out, so)
        lib = ctypes.CDLL(str(so))
        lib.bmoe_eval_cb.restype = ctypes.c_bool
        _native_lib = lib
    except Exception as e:  # noqa: BLE001 - any failure means: use the Python path
        native_error = f"{type(e).__name__}: {e}"
        _native_lib = None
    return _native_lib


class RouterHook:
    """Owns the eval callback objects (keep a reference for the context's lifetime).

    ``cb_eval``/``cb_eval_user_data``: what to put in ``llama_context_params`` (the native shim
    with its state struct when available, else the Python callback). ``native``: which one.
    """

    def __init__(self, native: bool | None = None) -> None:
        self._mode = "idle"
        self._want_weights = False
        self.captured: dict[str, int] = {}
        self.topk_seen: set[int] = set()
        self.on_route: Callable[[int, np.ndarray], None] | None = None
        self.on_weights: Callable[[int, np.ndarray], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self.error: BaseException | None = None
        self.cb = L.ggml_backend_sched_eval_callback(self._cb)
        lib: Any = native_hook_lib() if native is not False else None
        self.native = lib is not None
        self.cb_eval_user_data: int | None
        if self.native:
            self._struct = _HookStruct(ctypes.cast(self.cb, ctypes.c_void_p).value, None, NAME_OFFSET, MODE_IDLE, 0)
            shim = int(ctypes.cast(lib.bmoe_eval_cb, ctypes.c_void_p).value or 0)
            self.cb_eval = L.ggml_backend_sched_eval_callback(shim)
            self.cb_eval_user_data = ctypes.addressof(self._struct)
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
            self._struct.mode = {"idle": MODE_IDLE, "capture": MODE_CAPTURE, "route": MODE_ROUTE}[m]

    @property
    def want_weights(self) -> bool:
        return self._want_weights

    @want_weights.setter
    def want_weights(self, w: bool) -> None:
        self._want_weights = bool(w)
        if self.native:
            self._struct.want_weights = int(bool(w))

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
