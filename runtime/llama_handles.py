"""Native llama.cpp handles, one small class each, with a structural free order.

:class:`LlamaModel` owns a ``llama_model`` and its vocabulary; :class:`LlamaContext` owns a
``llama_context`` and registers its own close on the model's :class:`contextlib.ExitStack`, so
closing the model always frees the context first, whatever order the caller uses.
:class:`TokenBatch` is a reusable token array handed to ``llama_decode`` and
:class:`GreedySampler` is llama.cpp's own sampler chain with its greedy sampler. Nothing here
knows about experts or streaming (that is :mod:`bmoe_top.runtime.streaming`); the generate loop
is :mod:`bmoe_top.runtime.engine`.

Every call is the llama-cpp-python 0.3.36 low-level binding (pinned in pyproject.toml).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from .llama_lib import L

__all__ = ["LlamaModel", "LlamaContext", "TokenBatch", "SeqBatch", "GreedySampler", "route_llama_log"]

_log_cb_ref: Any = None


def route_llama_log(quiet: bool) -> None:
    """Send llama.cpp's log to stderr, or drop it with ``quiet``. stdout never sees it."""
    global _log_cb_ref

    def drop(level, text, ud):  # noqa: ARG001
        return None

    def to_stderr(level, text, ud):  # noqa: ARG001
        try:
            sys.stderr.write(text.decode("utf-8", "replace"))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    _log_cb_ref = L.llama_log_callback(drop if quiet else to_stderr)
    L.llama_log_set(_log_cb_ref, ctypes.c_void_p(0))
    L.llama_backend_init()


class LlamaModel:
    """A loaded ``llama_model`` (``ptr``) and its vocabulary (``vocab``, ``n_vocab``).

    ``params`` is a ``llama_model_params``; objects it points to (override arrays, callbacks)
    must stay alive until the load returns, which ``keep`` guarantees. ``load_paths``: the files
    llama.cpp reads instead of ``path`` (one per shard, in order; the expert sink's skeletons),
    ``path`` then names the model in messages. Raises ``RuntimeError``
    when llama.cpp cannot load the file. ``stack`` frees the model, after everything registered
    on it later (the context).
    """

    def __init__(self, path: str | os.PathLike[str], params: Any, keep: Sequence[object] = (),
                 load_paths: Sequence[str] | None = None) -> None:
        self.path = os.fspath(path)
        self.stack = ExitStack()
        self._keep = list(keep)
        if load_paths is None:
            ptr = L.llama_model_load_from_file(os.fsencode(self.path), params)
        else:
            arr = (ctypes.c_char_p * len(load_paths))(*[os.fsencode(p) for p in load_paths])
            ptr = L.llama_model_load_from_splits(arr, len(load_paths), params)
        if not ptr:
            raise RuntimeError(f"llama.cpp could not load {self.path} (see its log with --verbose)")
        self.ptr = ptr
        self.stack.callback(self._free)
        self.vocab = L.llama_model_get_vocab(ptr)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))
        self._piece = (ctypes.c_char * 256)()

    def _free(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None

    def close(self) -> None:
        """Free the model (and, first, every handle registered on :attr:`stack`). Idempotent."""
        self.stack.close()

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """Token ids of ``text`` (``add_special``: prepend BOS when the vocabulary wants it)."""
        b = text.encode("utf-8")
        cap = len(b) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, False)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, False)
        return list(buf[: max(0, n)])

    def token_bytes(self, tok: int) -> bytes:
        """The bytes of token ``tok`` (a piece may be part of a UTF-8 character)."""
        n = L.llama_token_to_piece(self.vocab, tok, self._piece, len(self._piece), 0, False)
        if n < 0:
            big = (ctypes.c_char * (-n))()
            n = L.llama_token_to_piece(self.vocab, tok, big, -n, 0, False)
            return bytes(big[:n])
        return self._piece.raw[:n]

    def apply_chat_template(self, messages: Sequence[tuple[str, str]], add_assistant: bool) -> str:
        """``llama_chat_apply_template`` with the model's chat template (chatml when it has none)
        over (role, content) pairs. Raises ValueError when llama.cpp does not support the template."""
        enc = [(r.encode("utf-8", "replace"), c.encode("utf-8", "replace")) for r, c in messages]
        arr = (L.llama_chat_message * len(enc))(*[L.llama_chat_message(r, c) for r, c in enc])
        tmpl = L.llama_model_chat_template(self.ptr, None)
        cap = 2 * sum(len(r) + len(c) for r, c in enc) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            n = L.llama_chat_apply_template(tmpl, arr, len(enc), add_assistant, buf, cap)
            if n < 0:
                raise ValueError("llama.cpp does not support this model's chat template (llama_chat_apply_template)")
            if n <= cap:
                return buf.raw[:n].decode("utf-8", "replace")
            cap = n
        raise ValueError("the chat template's output kept growing")  # pragma: no cover - llama.cpp sized it

    def is_eog(self, tok: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, tok))

    def bos(self) -> int:
        return int(L.llama_vocab_bos(self.vocab))


class LlamaContext:
    """A ``llama_context`` (``ptr``) on ``model``; freed before the model by construction.

    ``params`` is a ``llama_context_params`` (callbacks it names are kept alive by ``keep``).
    Raises ``RuntimeError`` when llama.cpp cannot create the context.
    """

    def __init__(self, model: LlamaModel, params: Any, keep: Sequence[object] = ()) -> None:
        self.model = model
        self._keep = list(keep)
        self.stack = ExitStack()
        ptr = L.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise RuntimeError(f"llama.cpp could not create a context (n_ctx={params.n_ctx})")
        self.ptr = ptr
        self.memory = L.llama_get_memory(ptr)
        self.n_ctx = int(L.llama_n_ctx(ptr))
        self.stack.callback(self._free)
        model.stack.callback(self.close)  # the context goes before its model
        self._abort_cb: Any = None

    def _free(self) -> None:
        if self.ptr:
            L.llama_free(self.ptr)
            self.ptr = None

    def close(self) -> None:
        self.stack.close()

    def decode(self, batch: TokenBatch | SeqBatch) -> int:
        """``llama_decode`` of the tokens in ``batch``; llama.cpp's return code (0 = ok, 2 = aborted)."""
        return int(L.llama_decode(self.ptr, batch.batch))

    def logits_row(self, i: int = -1) -> Any:
        """Pointer to the logits of row ``i`` of the last decoded batch (-1 = its last row;
        ``n_vocab`` floats). The row must have asked for logits."""
        return L.llama_get_logits_ith(self.ptr, i)

    def clear_kv(self) -> None:
        L.llama_memory_clear(self.memory, True)

    def keep_kv_prefix(self, n: int) -> None:
        """Drop the KV cache from position ``n`` on (``n`` = 0 clears it)."""
        if n == 0:
            L.llama_memory_clear(self.memory, True)
        else:
            L.llama_memory_seq_rm(self.memory, 0, n, -1)

    def kv_len(self, seq: int = 0) -> int:
        """Tokens held in the KV cache of sequence ``seq``."""
        return int(L.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def drop_seq(self, seq: int) -> None:
        """Drop every KV entry of sequence ``seq`` (the other sequences keep theirs)."""
        L.llama_memory_seq_rm(self.memory, seq, -1, -1)

    @property
    def n_ctx_seq(self) -> int:
        """Tokens one sequence may hold (``n_ctx`` split over ``n_seq_max`` without a unified KV cache)."""
        return int(L.llama_n_ctx_seq(self.ptr))

    def set_abort(self, cb: Any) -> None:
        """Install a ``ggml_abort_callback`` (None removes it: no per-node call at all)."""
        self._abort_cb = cb if cb is not None else L.ggml_abort_callback()
        L.llama_set_abort_callback(self.ptr, self._abort_cb, None)


class TokenBatch:
    """A reusable ``llama_batch`` over one token array of ``capacity`` tokens (positions are
    assigned by llama.cpp from the KV cache, as with ``llama_batch_get_one``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self.tokens = (L.llama_token * self.capacity)()
        self.batch = L.llama_batch_get_one(self.tokens, 1)

    def set(self, toks: Sequence[int]) -> TokenBatch:
        n = len(toks)
        if n > self.capacity:
            raise ValueError(f"{n} tokens do not fit a batch of {self.capacity}")
        if n == 1:
            self.tokens[0] = toks[0]
        else:
            self.tokens[:n] = list(toks)
        self.batch.n_tokens = n
        return self


class SeqBatch:
    """A reusable ``llama_batch`` of up to ``capacity`` rows, each a token with its position, its
    one sequence id and whether its logits are wanted (several sequences decoded in one call)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self.batch = L.llama_batch_init(self.capacity, 0, 1)
        self._freed = False

    def set(self, rows: Sequence[tuple[int, int, int, bool]]) -> SeqBatch:
        """``rows``: (token, position, sequence id, logits wanted), in batch order."""
        n = len(rows)
        if n > self.capacity:
            raise ValueError(f"{n} tokens do not fit a batch of {self.capacity}")
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(rows):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if out else 0
        b.n_tokens = n
        return self

    def close(self) -> None:
        if not self._freed:
            self._freed = True
            L.llama_batch_free(self.batch)


class GreedySampler:
    """llama.cpp's sampler chain with its greedy sampler (argmax; ties go to the lowest id, as
    :func:`numpy.argmax`). Registered on ``ctx``'s stack, so it is freed with the context."""

    def __init__(self, ctx: LlamaContext) -> None:
        self.ctx = ctx
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        self.ptr = chain
        ctx.stack.callback(self._free)

    def _free(self) -> None:
        if self.ptr:
            L.llama_sampler_free(self.ptr)
            self.ptr = None

    def sample(self, i: int = -1) -> int:
        """The next token from the logits of row ``i`` of the last decoded batch (-1 = its last row)."""
        return int(L.llama_sampler_sample(self.ptr, self.ctx.ptr, i))
