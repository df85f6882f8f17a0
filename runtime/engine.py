"""The bmoe-run engine: llama.cpp (llama-cpp-python low-level API) does the math, our expert cache
decides which expert weights are in RAM. See docs/runtime.md ("Engine API") for the contract.

Typical use::

    eng = Engine("model.gguf", cache_mb=8)
    res = eng.generate("hello", n_predict=32, on_token=lambda st: print(st.step, st.wall_ms))
    print(res.text, res.tok_s, eng.cache_stats().hit_pct)
    eng.close()

Threading: ``generate`` runs llama_decode on the calling thread and the eval callback runs on
that same thread, holding the GIL while it routes. ``cancel`` (a ``threading.Event``) may be set
from another thread; it is honoured within one decode step through llama's abort callback.
An Engine is not re-entrant: one ``generate`` at a time (calls are serialized by a lock).
"""

from __future__ import annotations

import codecs
import ctypes
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .expert_cache import MIB, ExpertCache, ExpertIOError, ExpertReader, TensorBuffer
from .gguf_layout import ModelError, ModelLayout, read_layout
from .sampling import GREEDY, Sampling

__all__ = [
    "Engine",
    "EngineError",
    "ModelError",
    "RequestError",
    "GenerationError",
    "TokenStats",
    "GenerationResult",
    "CacheStats",
    "default_cache_mb",
]


class EngineError(Exception):
    """Start-up refusal (streaming impossible, unusable budget, llama.cpp load failure). One line."""


class RequestError(ValueError):
    """A rejected generate request (prompt too long for n_ctx, bad n_predict). The engine stays usable."""


class GenerationError(RuntimeError):
    """A generation aborted by an error (e.g. an expert read failed). The engine stays usable."""


@dataclass
class TokenStats:
    """One decoded token (telemetry-contract.md "Per-token lines"). Times in ms, bytes in bytes.

    ``cache_hit_pct`` is cumulative over this generation's decode steps, -1 when no cache is used.
    ``route``: per layer (list index = layer) the routed expert ids and 1/0 hit flags, filled only
    when the engine was built with ``route_telemetry=True``; layers without MoE are empty.
    """

    step: int
    steps: int
    token: int
    piece: str
    text: str
    wall_ms: float
    io_ms: float
    compute_ms: float
    mgmt_ms: float
    stall_ms: float
    read_bytes: int
    cache_hit_pct: float
    hits: int = 0
    misses: int = 0
    spec_bytes: int = 0
    pos: int = 0
    route: list[tuple[list[int], list[int]]] | None = None

    @property
    def read_mb(self) -> float:
        """MiB read this token (the contract's ``read_mb``/``mb`` are MiB)."""
        return self.read_bytes / MIB


@dataclass
class GenerationResult:
    """The outcome of :meth:`Engine.generate`. Times in seconds; ``text`` is the generated text only."""

    tokens: list[int]
    text: str
    n_tokens: int
    tok_s: float
    s_per_tok: float
    prefill_s: float
    n_prompt: int
    n_past: int
    cancelled: bool
    stats: list[TokenStats] = field(default_factory=list)
    read_bytes: int = 0
    io_s: float = 0.0
    mgmt_s: float = 0.0
    stall_s: float = 0.0
    compute_s: float = 0.0
    decode_s: float = 0.0
    hit_pct: float = -1.0
    prefill_read_bytes: int = 0
    evictions: int = 0  # expert evictions during this generation (prompt included)
    rereads: int = 0  # misses on experts evicted earlier (prompt included)
    spec_bytes: int = 0
    spec_experts: int = 0
    spec_useful: int = 0
    stop_reason: str = "length"  # length | eog | cancelled | error
    #: with route_telemetry: per layer (experts routed by the prompt, union; hit flags)
    prefill_route: list[tuple[list[int], list[int]]] | None = None

    @property
    def read_mib(self) -> float:
        return self.read_bytes / MIB


@dataclass
class CacheStats:
    """Expert-cache counters since load (sizes in MiB; per-layer lists indexed by layer)."""

    enabled: bool
    hits: int
    misses: int
    hit_pct: float
    read_bytes: int
    evictions: int
    layer_hits: list[int]
    layer_misses: list[int]
    resident: list[list[int]]
    resident_mib: float
    budget_mib: float
    spec_bytes: int = 0
    spec_experts: int = 0
    spec_useful: int = 0


def default_cache_mb(layout: ModelLayout) -> float:
    """Default budget: 25% of the expert bank, but never below two tokens' working set (MiB)."""
    bank = layout.expert_bank_bytes
    ws = layout.token_working_set_bytes()
    return round(min(bank, max(bank * 0.25, 2 * ws)) / MIB, 2)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_LIBC.madvise.restype = ctypes.c_int


def _release_range(addr: int, n: int) -> None:
    """MADV_DONTNEED the whole pages inside [addr, addr+n) of llama's own model mapping."""
    page = mmap.PAGESIZE
    a = (addr + page - 1) // page * page
    b = (addr + n) // page * page
    if b > a:
        _LIBC.madvise(a, b - a, mmap.MADV_DONTNEED)


_log_cb_ref = None


def _set_llama_log(quiet: bool) -> None:
    """Route llama.cpp's log to stderr (or drop it with ``quiet``). stdout never sees it."""
    global _log_cb_ref
    import llama_cpp as L

    if quiet:

        def cb(level, text, ud):  # noqa: ARG001
            return None

    else:

        def cb(level, text, ud):  # noqa: ARG001
            try:
                sys.stderr.write(text.decode("utf-8", "replace"))
                sys.stderr.flush()
            except Exception:  # noqa: BLE001
                pass

    _log_cb_ref = L.llama_log_callback(cb)
    L.llama_log_set(_log_cb_ref, ctypes.c_void_p(0))


class Engine:
    """A loaded MoE model with (by default) streamed experts.

    Parameters: ``model_path`` (GGUF; None = :func:`bmoe_top.runtime.models.default_model_path`),
    ``n_ctx`` tokens, ``n_threads`` (default: all cores), ``n_batch`` (prefill batch = ubatch;
    default ``n_ctx``; numerics depend on it, compare runs with the same value), ``cache_mb``
    (MiB; None = :func:`default_cache_mb`, or ``models.DEFAULT_DEMO_CACHE_MB`` for the default
    demo model; 0 = no cache), ``stream`` (False = fully resident
    through llama's mmap, no expert cache), ``io_threads``, ``o_direct``, ``overlap``,
    ``prefetch`` (layers ahead), ``force_cache`` (accept a budget below one token's working set),
    ``route_telemetry`` (fill :attr:`TokenStats.route`), ``route_weights`` (also read routing
    weights, for route traces), ``quiet`` (drop llama.cpp's log; otherwise it goes to stderr),
    ``flash_attn`` (None = llama.cpp's auto; True/False force it), ``native_hook`` (None = use
    the compiled eval-callback shim when it builds, False = pure-Python callback; same results),
    ``repack`` (let llama.cpp repack weights; streaming then refuses: for tests of the refusal).

    Raises :class:`ModelError` (bad file / not MoE) or :class:`EngineError` (streaming refused,
    unusable budget, llama.cpp could not load the model). Attributes after load: ``load_s``,
    ``arch``, ``n_ctx``, ``n_layer``, ``n_expert``, ``n_expert_used``, ``layout``, ``stream``,
    ``budget_mib``, ``o_direct`` (True if O_DIRECT is really in use).
    """

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        n_batch: int | None = None,
        cache_mb: float | None = None,
        stream: bool = True,
        io_threads: int = 1,
        o_direct: bool = True,
        overlap: bool = False,
        prefetch: int = 0,
        force_cache: bool = False,
        route_telemetry: bool = False,
        route_weights: bool = False,
        quiet: bool = True,
        flash_attn: bool | None = None,
        native_hook: bool | None = None,
        repack: bool = False,
        sampling: Sampling | None = None,
    ) -> None:
        t_start = time.perf_counter()
        import llama_cpp as L

        self._L = L
        self.sampling = sampling or GREEDY  # token selection (runtime/sampling.py); greedy by default
        # for tests that must act mid-generation on a tiny, very fast model: BMOE_TOKEN_DELAY_MS=N
        # sleeps N ms after every decoded token (0 = off)
        self._token_delay_s = float(os.environ.get("BMOE_TOKEN_DELAY_MS", "0") or 0) / 1000.0
        self._lock = threading.Lock()
        self._closed = False
        self.model = None
        self.ctx = None
        self.cache: ExpertCache | None = None
        self.reader: ExpertReader | None = None
        self.buffers: dict[str, TensorBuffer] = {}
        demo_budget = None
        if model_path is None:
            from . import models

            model_path = models.default_model_path()
            demo_budget = getattr(models, "DEFAULT_DEMO_CACHE_MB", None)
        self.layout = read_layout(model_path)
        self.model_path = self.layout.path
        lay = self.layout
        self.arch = lay.arch
        self.n_layer = lay.n_layer
        self.n_expert = lay.n_expert
        self.n_expert_used = lay.n_expert_used
        self.stream = bool(stream)
        self.io_threads = max(1, int(io_threads))
        self.overlap = bool(overlap)
        self.prefetch = max(0, int(prefetch))
        self.route_telemetry = bool(route_telemetry)
        self.route_weights = bool(route_weights)
        n_threads = int(n_threads or os.cpu_count() or 1)
        self.n_threads = n_threads

        # budget
        bank = lay.expert_bank_bytes
        ws = lay.token_working_set_bytes()
        if cache_mb is None:
            # the demo model's recommended budget (models.DEFAULT_DEMO_CACHE_MB) when usable
            if demo_budget and demo_budget * MIB >= ws:
                cache_mb = float(demo_budget)
            else:
                cache_mb = default_cache_mb(lay)
        if cache_mb < 0:
            raise EngineError(f"--cache-mb must be >= 0 (got {cache_mb})")
        self.cache_mb = float(cache_mb)
        budget: int | None = int(cache_mb * MIB)
        if budget and budget >= bank:
            budget = None  # every expert fits
        if budget and budget < ws and not force_cache:
            raise EngineError(
                f"--cache-mb {cache_mb:g} is below one token's expert working set "
                f"({ws / MIB:.2f} MiB = {lay.n_expert_used} experts x {len(lay.moe_layers)} layers); "
                "raise it, use --cache-mb 0 for no cache, or --force-cache"
            )
        self.budget = budget

        _set_llama_log(quiet)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mode = L.LLAMA_LOAD_MODE_MMAP  # expert tensors must live in a CPU_Mapped buffer
        mp.lazy_mode = L.LLAMA_LAZY_MODE_OFF
        # no weight repacking: expert tensors keep the file layout (``repack=True`` exists only to
        # show the refusal: repacked experts are not in a CPU_Mapped buffer)
        mp.use_extra_bufts = bool(repack)
        self.model = L.llama_model_load_from_file(str(self.model_path).encode(), mp)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {self.model_path} (see its log with --verbose)")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

        self.n_ctx = int(n_ctx)
        nb = int(n_batch or min(self.n_ctx, 2048))
        self.n_batch = nb
        cp = L.llama_context_default_params()
        cp.n_ctx = self.n_ctx
        cp.n_batch = nb
        cp.n_ubatch = nb
        cp.n_seq_max = 1
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        cp.no_perf = True
        if flash_attn is not None:
            cp.flash_attn_type = 1 if flash_attn else 0

        from .router_hook import RouterHook

        self.hook = RouterHook(native=native_hook)
        self.observe = self.stream or self.route_telemetry or self.route_weights
        if self.observe:
            cp.cb_eval = self.hook.cb_eval
            cp.cb_eval_user_data = self.hook.cb_eval_user_data
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            self.close()
            raise EngineError(f"llama.cpp could not create a context (n_ctx={self.n_ctx})")
        asked = self.n_ctx
        self.n_ctx = int(L.llama_n_ctx(self.ctx))
        if self.n_ctx != asked:  # llama.cpp pads the context (e.g. to a multiple of 256): say so
            print(f"bmoe-run: n_ctx {asked} was set to {self.n_ctx} by llama.cpp", file=sys.stderr, flush=True)
        self.mem = L.llama_get_memory(self.ctx)

        # abort callback (installed only while an abort is wanted: no per-node Python call otherwise)
        self._abort_flag = False
        self._abort_installed = False
        self._abort_cb = L.ggml_abort_callback(
            lambda _ud: bool(self._abort_flag or (self._cancel is not None and self._cancel.is_set()))
        )
        self._null_abort = L.ggml_abort_callback()
        self._cancel: threading.Event | None = None
        self.hook.on_error = lambda _e: self._request_abort()

        self.kv_tokens: list[int] = []  # tokens whose K/V are in the cache, in order
        self.turn = 0
        self._gen_route: list[tuple[list[int], list[int]]] | None = None
        self.last_prefill_route: list[tuple[list[int], list[int]]] | None = None
        self._pending_ids: dict[int, np.ndarray] = {}
        self._pending_w: dict[int, np.ndarray] = {}
        self.route_sink: Callable[[str, int, int, dict], None] | None = None  # set by telemetry
        self._phase = "prefill"

        try:
            if self.stream:
                self._setup_streaming(o_direct)
            else:
                self.o_direct = False
            if self.observe:
                self.hook.mode = "route"
                self.hook.on_route = self._on_route
                self.hook.want_weights = self.route_weights
                self.hook.on_weights = self._on_weights if self.route_weights else None
        except Exception:
            self.close()
            raise
        self.load_s = time.perf_counter() - t_start

    # -- start-up ---------------------------------------------------------------------------
    def _setup_streaming(self, o_direct: bool) -> None:
        from .ggml_struct import GGMLLib, LayoutError, check_layout, tensor_at

        L = self._L
        lay = self.layout
        self.hook.mode = "capture"
        tok = (L.llama_token * 1)(max(0, L.llama_vocab_bos(self.vocab)))
        rc = L.llama_decode(self.ctx, L.llama_batch_get_one(tok, 1))
        self.hook.mode = "idle"
        L.llama_memory_clear(self.mem, True)
        if rc != 0:
            raise EngineError(f"warm-up decode failed (llama_decode returned {rc})")
        missing_topk = [il for il in lay.moe_layers if il not in self.hook.topk_seen]
        if missing_topk:
            raise EngineError(
                f"routing node ffn_moe_topk-{missing_topk[0]} not found in the {lay.arch} graph: "
                "cannot stream this architecture (run with --no-moe-stream)"
            )
        missing = sorted(set(lay.tensors) - set(self.hook.captured))
        if missing:
            raise EngineError(f"expert tensor {missing[0]} not seen in the graph: cannot stream")
        try:
            lib = GGMLLib()
            check_layout(lib, list(self.hook.captured.values()))
        except LayoutError as e:
            raise EngineError(f"ggml_tensor layout check failed ({e}): refusing to stream") from None
        fd = os.open(str(self.model_path), os.O_RDONLY)
        try:
            for name, info in lay.tensors.items():
                addr = self.hook.captured[name]
                t = tensor_at(addr)
                bname, base, bsize, host = lib.buffer_info(int(t.buffer or 0))
                data = int(t.data or 0)
                if bname != "CPU_Mapped" or not host or not (base <= data and data + info.n_bytes <= base + bsize):
                    raise EngineError(
                        f"{name} is in a {bname} buffer, not a plain CPU-mapped one "
                        f"(repacked {lib.type_name(t.type)}?): refusing to stream"
                    )
                if int(t.nb[2]) != info.expert_stride or int(t.ne[2]) != lay.n_expert:
                    raise EngineError(f"{name}: graph stride nb[2]={t.nb[2]} != file {info.expert_stride}")
                k = min(4096, info.n_bytes)
                for off in (0, info.n_bytes - k):
                    if ctypes.string_at(data + off, k) != os.pread(fd, k, info.file_offset + off):
                        raise EngineError(f"{name}: in-memory bytes differ from the file: refusing to stream")
        finally:
            os.close(fd)
        try:
            self.reader = ExpertReader(str(self.model_path), io_threads=self.io_threads, o_direct=o_direct)
        except OSError as e:
            raise EngineError(f"cannot open {self.model_path} for expert reads: {e.strerror or e}") from None
        self.o_direct = self.reader.direct
        for name, info in lay.tensors.items():
            tb = TensorBuffer(info)
            self.buffers[name] = tb
            t = tensor_at(self.hook.captured[name])
            old = int(t.data)
            t.data = tb.addr
            _release_range(old, info.n_bytes)
        self.cache = ExpertCache(
            lay, self.buffers, self.reader, self.budget, overlap=self.overlap, prefetch=self.prefetch
        )

    # -- abort ------------------------------------------------------------------------------
    def _request_abort(self) -> None:
        self._abort_flag = True
        if not self._abort_installed:
            self._L.llama_set_abort_callback(self.ctx, self._abort_cb, None)
            self._abort_installed = True

    def _clear_abort(self) -> None:
        self._abort_flag = False
        if self._abort_installed:
            self._L.llama_set_abort_callback(self.ctx, self._null_abort, None)
            self._abort_installed = False

    # -- routing (eval callback, decode thread) ---------------------------------------------
    def _on_route(self, il: int, ids) -> None:
        """``ids``: int32 array (n_tokens, k), or the k ids of a single token as a list."""
        if self._cancel is not None and self._cancel.is_set():
            self._request_abort()
            return
        if type(ids) is list:
            routed = ids
            if self.route_sink is not None:
                ids = np.array([ids], dtype=np.int32)
        else:
            routed = list(dict.fromkeys(ids.ravel().tolist()))
        if routed and (min(routed) < 0 or max(routed) >= self.n_expert):
            raise ExpertIOError(f"layer {il}: router selected an expert id out of range {routed}")
        if self.cache is not None:
            self.cache.ensure(il, routed)
        elif self._gen_route is not None:
            self._gen_route[il] = (routed, [1] * len(routed))
        if self.route_sink is not None:
            self._pending_ids[il] = ids

    def _on_weights(self, il: int, w: np.ndarray) -> None:
        self._pending_w[il] = w

    # -- helpers ----------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """Token ids of ``text`` (``add_special``: prepend BOS when the vocab wants it)."""
        L = self._L
        b = text.encode("utf-8")
        cap = len(b) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, False)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, b, len(b), buf, cap, add_special, False)
        return list(buf[: max(0, n)])

    def chat_prompt(self, messages: list[tuple[str, str]], add_assistant: bool = True) -> str:
        """The prompt text for ``messages`` ((role, content) pairs, in order) built by llama.cpp's
        ``llama_chat_apply_template`` with the model's chat template (GGUF
        ``tokenizer.chat_template``; llama.cpp uses chatml when the model has none), ending with
        the assistant's turn opener when ``add_assistant``. Raises :class:`RequestError` when a
        text holds a NUL byte or llama.cpp does not support the model's template."""
        L = self._L
        if not messages:
            raise RequestError("messages must not be empty")
        enc = []
        for role, content in messages:
            if "\x00" in role or "\x00" in content:
                raise RequestError("a message holds a NUL character")
            enc.append((role.encode("utf-8", "replace"), content.encode("utf-8", "replace")))
        arr = (L.llama_chat_message * len(enc))(*[L.llama_chat_message(r, c) for r, c in enc])
        tmpl = L.llama_model_chat_template(self.model, None)
        cap = 2 * sum(len(r) + len(c) for r, c in enc) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            n = L.llama_chat_apply_template(tmpl, arr, len(enc), add_assistant, buf, cap)
            if n < 0:
                raise RequestError("llama.cpp does not support this model's chat template (llama_chat_apply_template)")
            if n <= cap:
                return buf.raw[:n].decode("utf-8", "replace")
            cap = n
        raise RequestError("the chat template's output kept growing")  # pragma: no cover - llama.cpp sized it

    def token_bytes(self, tok: int) -> bytes:
        L = self._L
        buf = (ctypes.c_char * 64)()
        n = L.llama_token_to_piece(self.vocab, tok, buf, 64, 0, False)
        if n < 0:
            buf = (ctypes.c_char * (-n))()
            n = L.llama_token_to_piece(self.vocab, tok, buf, -n, 0, False)
        return bytes(buf[:n])

    def _decode(self, toks: list[int]) -> int:
        L = self._L
        if self.cache is not None:
            self.cache.ubatch_tokens = len(toks)
        arr = (L.llama_token * len(toks))(*toks)
        return int(L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(toks))))

    def _kv_len(self) -> int:
        return int(self._L.llama_memory_seq_pos_max(self.mem, 0)) + 1

    def _sync_kv_after_failure(self) -> None:
        n = max(0, self._kv_len())
        self.kv_tokens = self.kv_tokens[:n]

    def _flush_route(self, phase: str, step_pos: int, n_tokens: int) -> None:
        """Hand the per-token routing of the last decode to ``route_sink`` (route traces)."""
        if self.route_sink is None:
            return
        hits = {}
        if self.cache is not None:
            for il, (r, h) in self.cache.tok.route.items():
                hits[il] = dict(zip(r, h))
        self.route_sink(phase, self.turn, step_pos, {"ids": self._pending_ids, "w": self._pending_w,
                                                      "hits": hits, "n_tokens": n_tokens})
        self._pending_ids = {}
        self._pending_w = {}

    # -- public API -------------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        n_predict: int,
        clear_kv: bool = True,
        on_token: Callable[[TokenStats], None] | None = None,
        cancel: threading.Event | None = None,
        on_prefill: Callable[[float, int], None] | None = None,
        sampling: Sampling | None = None,
    ) -> GenerationResult:
        """Generate up to ``n_predict`` tokens after ``prompt`` (``sampling`` overrides the
        engine's :class:`Sampling` for this call; greedy unless one was given).

        ``clear_kv=True`` starts a new conversation (BOS + prompt); ``False`` appends ``prompt``
        to the conversation held in the KV cache and prefills only the new suffix.
        ``on_token(TokenStats)`` is called on the decode thread after each token;
        ``cancel`` may be set from any thread (checked at every routed layer and between tokens).
        ``on_prefill(prefill_s, n_prompt)`` is called once after the prompt is processed
        (``self.last_prefill_route`` then holds the prompt's routing with route_telemetry).

        Raises :class:`RequestError` (nothing was changed) when the prompt plus ``n_predict``
        exceeds ``n_ctx`` or ``n_predict`` < 0; :class:`GenerationError` when a decode failed
        (e.g. an expert read error); the KV cache then holds the tokens decoded so far.
        """
        if self._closed:
            raise RequestError("engine is closed")
        with self._lock:
            return self._generate(prompt, n_predict, clear_kv, on_token, cancel, on_prefill,
                                  sampling or self.sampling)

    def check_request(self, prompt: str, n_predict: int, clear_kv: bool = True) -> None:
        """Raise :class:`RequestError` if ``generate`` would reject these arguments (nothing is changed)."""
        self._target(prompt, int(n_predict), clear_kv)

    def _target(self, prompt: str, n_predict: int, clear_kv: bool) -> list[int]:
        if not isinstance(prompt, str):
            raise RequestError("prompt must be a string")
        if n_predict < 0:
            raise RequestError(f"n_predict must be >= 0 (got {n_predict})")
        if clear_kv or not self.kv_tokens:
            target = self.tokenize(prompt, add_special=True)
        else:
            target = self.kv_tokens + self.tokenize(prompt, add_special=False)
        if not target:
            raise RequestError("empty prompt")
        if len(target) + n_predict > self.n_ctx:
            raise RequestError(
                f"prompt ({len(target)} tokens in context) plus n_predict ({n_predict}) exceeds n_ctx ({self.n_ctx})"
            )
        return target

    def _generate(self, prompt, n_predict, clear_kv, on_token, cancel, on_prefill, sampling) -> GenerationResult:
        L = self._L
        rng = sampling.rng()
        n_predict = int(n_predict)
        target = self._target(prompt, n_predict, clear_kv)
        self._cancel = cancel
        self._clear_abort()
        self.hook.error = None
        if cancel is not None and not self.observe:
            # no eval callback to check the event: let llama's abort callback poll it per node
            self._L.llama_set_abort_callback(self.ctx, self._abort_cb, None)
            self._abort_installed = True
        if clear_kv:
            self.turn = 0 if not self.kv_tokens else self.turn + 1
        else:
            self.turn += 1
        # reuse the KV prefix
        p = 0
        if not clear_kv:
            m = min(len(self.kv_tokens), len(target))
            while p < m and self.kv_tokens[p] == target[p]:
                p += 1
        if p >= len(target):
            p = len(target) - 1
        if p == 0:
            L.llama_memory_clear(self.mem, True)
        else:
            L.llama_memory_seq_rm(self.mem, 0, p, -1)
        self.kv_tokens = self.kv_tokens[:p]
        n_prompt = len(target) - p

        cache = self.cache
        res = GenerationResult(tokens=[], text="", n_tokens=0, tok_s=0.0, s_per_tok=0.0, prefill_s=0.0,
                               n_prompt=n_prompt, n_past=p, cancelled=False)
        spec0 = (cache.spec_bytes, cache.spec_experts, cache.spec_useful) if cache else (0, 0, 0)
        ev0 = (cache.evictions, cache.rereads) if cache else (0, 0)

        # prefill
        t0 = time.perf_counter()
        self._phase = "prefill"
        if cache:
            cache.begin_token()
        pos = p
        ok = True
        # per layer: experts routed over the whole prompt (union, first-seen order) and 1 when the
        # expert was resident the first time the prompt routed it
        pre_route: list[dict[int, int]] = [{} for _ in range(self.n_layer)]
        for i in range(p, len(target), self.n_batch):
            chunk = target[i : i + self.n_batch]
            self._pending_ids, self._pending_w = {}, {}
            self._gen_route = (
                [([], []) for _ in range(self.n_layer)] if (cache is None and self.route_telemetry) else None
            )
            rc = self._decode(chunk)
            if cache:
                cache.end_decode()
            if rc != 0:
                ok = False
                break
            if self.route_telemetry:
                src = cache.tok.route if cache else dict(enumerate(self._gen_route or []))
                for il, (r, h) in src.items():
                    for e, hit in zip(r, h):
                        pre_route[il].setdefault(e, hit)
            self._flush_route("prefill", pos, len(chunk))
            self.kv_tokens.extend(chunk)
            pos += len(chunk)
            if cache:
                res.prefill_read_bytes += cache.tok.read_bytes
                cache.begin_token()
        res.prefill_s = time.perf_counter() - t0
        if self.route_telemetry:
            res.prefill_route = [(list(d.keys()), list(d.values())) for d in pre_route]
        if not ok:
            return self._finish_failed(res, rc, spec0)
        self.last_prefill_route = res.prefill_route
        if on_prefill is not None:
            on_prefill(res.prefill_s, n_prompt)

        # decode
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text_parts: list[str] = []
        hits = misses = 0
        t_dec0 = time.perf_counter()
        self._phase = "decode"
        step = 0
        while step < n_predict:
            if cancel is not None and cancel.is_set():
                res.cancelled = True
                res.stop_reason = "cancelled"
                break
            tw0 = time.perf_counter()
            logits = L.llama_get_logits_ith(self.ctx, -1)
            row = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
            tok = sampling.pick(row, self.kv_tokens, rng)
            if self._token_delay_s:
                time.sleep(self._token_delay_s)
            if L.llama_vocab_is_eog(self.vocab, tok):
                res.stop_reason = "eog"
                break
            if cache:
                cache.begin_token()
            self._gen_route = (
                [([], []) for _ in range(self.n_layer)] if (cache is None and self.route_telemetry) else None
            )
            self._pending_ids, self._pending_w = {}, {}
            rc = self._decode([tok])
            if cache:
                cache.end_decode()
            if rc != 0:
                self._sync_kv_after_failure()
                if self.hook.error is not None:
                    err = self.hook.error
                    self._clear_abort()
                    self.hook.error = None
                    if isinstance(err, KeyboardInterrupt):
                        raise KeyboardInterrupt
                    raise GenerationError(f"decode aborted: {err}")
                if rc == 2 or (cancel is not None and cancel.is_set()):
                    res.cancelled = True
                    res.stop_reason = "cancelled"
                    break
                raise GenerationError(f"llama_decode returned {rc}")
            self._flush_route("decode", len(self.kv_tokens), 1)
            self.kv_tokens.append(tok)
            step += 1
            piece_b = self.token_bytes(tok)
            piece = dec.decode(piece_b)
            text_parts.append(piece)
            res.tokens.append(tok)
            wall = time.perf_counter() - tw0
            if cache:
                tk = cache.tok
                if cache.overlap:
                    io_s = tk.io_s + cache.take_spec_busy()
                    compute = wall - tk.stall_s - tk.mgmt_s
                else:
                    io_s = tk.io_s
                    compute = wall - tk.io_s - tk.mgmt_s
                hits += tk.hits
                misses += tk.misses
                hit_pct = 100.0 * hits / (hits + misses) if (hits + misses) and not cache.no_cache else -1.0
                route = None
                if self.route_telemetry:
                    route = [tk.route.get(il, ([], [])) for il in range(self.n_layer)]
                st = TokenStats(step=step, steps=n_predict, token=tok, piece=piece, text="".join(text_parts),
                                wall_ms=wall * 1e3, io_ms=io_s * 1e3, compute_ms=max(0.0, compute) * 1e3,
                                mgmt_ms=tk.mgmt_s * 1e3, stall_ms=tk.stall_s * 1e3, read_bytes=tk.read_bytes,
                                cache_hit_pct=hit_pct, hits=tk.hits, misses=tk.misses,
                                spec_bytes=tk.spec_bytes, pos=len(self.kv_tokens) - 1, route=route)
                res.io_s += io_s
                res.mgmt_s += tk.mgmt_s
                res.stall_s += tk.stall_s
                res.read_bytes += tk.read_bytes
            else:
                route = self._gen_route if self.route_telemetry else None
                st = TokenStats(step=step, steps=n_predict, token=tok, piece=piece, text="".join(text_parts),
                                wall_ms=wall * 1e3, io_ms=0.0, compute_ms=wall * 1e3, mgmt_ms=0.0, stall_ms=0.0,
                                read_bytes=0, cache_hit_pct=-1.0, pos=len(self.kv_tokens) - 1, route=route)
            res.compute_s += st.compute_ms / 1e3
            res.stats.append(st)
            if on_token is not None:
                on_token(st)
        tail = dec.decode(b"", final=True)
        if tail:
            text_parts.append(tail)
        res.decode_s = time.perf_counter() - t_dec0
        res.text = "".join(text_parts)
        res.n_tokens = len(res.tokens)
        wall_sum = sum(s.wall_ms for s in res.stats) / 1e3
        res.s_per_tok = wall_sum / res.n_tokens if res.n_tokens else 0.0
        res.tok_s = res.n_tokens / wall_sum if wall_sum > 0 else 0.0
        if cache and not cache.no_cache:
            res.hit_pct = 100.0 * hits / (hits + misses) if (hits + misses) else 0.0
        if cache:
            res.evictions = cache.evictions - ev0[0]
            res.rereads = cache.rereads - ev0[1]
            res.spec_bytes = cache.spec_bytes - spec0[0]
            res.spec_experts = cache.spec_experts - spec0[1]
            res.spec_useful = cache.spec_useful - spec0[2]
        res.n_past = len(self.kv_tokens)
        self._clear_abort()
        self._cancel = None
        return res

    def _finish_failed(self, res: GenerationResult, rc: int, spec0) -> GenerationResult:
        self._sync_kv_after_failure()
        err = self.hook.error
        self.hook.error = None
        cancelled = self._cancel is not None and self._cancel.is_set()
        self._clear_abort()
        self._cancel = None
        if isinstance(err, KeyboardInterrupt):
            raise KeyboardInterrupt
        if err is not None:
            raise GenerationError(f"prefill aborted: {err}")
        if rc == 2 or cancelled:
            res.cancelled = True
            res.stop_reason = "cancelled"
            res.n_past = len(self.kv_tokens)
            return res
        raise GenerationError(f"prefill failed: llama_decode returned {rc}")

    def preload(self, pairs: list[tuple[int, int]] | None = None) -> int:
        """Read experts into the cache before generating: ``pairs`` of (layer, expert) in order,
        or every expert layer by layer; stops when the budget is full. Returns bytes read
        (0 without streaming or with --cache-mb 0). Not counted as hits/misses."""
        if self.cache is None:
            return 0
        with self._lock:
            return self.cache.preload(pairs)

    def cache_stats(self) -> CacheStats:
        """Counters since load; with ``stream=False`` every expert is resident (no cache)."""
        c = self.cache
        if c is None:
            bank = self.layout.expert_bank_bytes / MIB
            return CacheStats(False, 0, 0, -1.0, 0, 0, [0] * self.n_layer, [0] * self.n_layer,
                              [list(range(self.n_expert)) if ts else [] for ts in self.layout.layers], bank, bank)
        tot = c.hits + c.misses
        return CacheStats(
            enabled=not c.no_cache,
            hits=c.hits,
            misses=c.misses,
            hit_pct=(100.0 * c.hits / tot) if tot and not c.no_cache else -1.0,
            read_bytes=c.read_bytes,
            evictions=c.evictions,
            layer_hits=list(c.layer_hits),
            layer_misses=list(c.layer_misses),
            resident=c.resident_ids(),
            resident_mib=c.resident_mib,
            budget_mib=(self.budget / MIB) if self.budget is not None else self.layout.expert_bank_bytes / MIB,
            spec_bytes=c.spec_bytes,
            spec_experts=c.spec_experts,
            spec_useful=c.spec_useful,
        )

    @property
    def budget_mib(self) -> float:
        if not self.stream:
            return self.layout.expert_bank_bytes / MIB
        if self.budget is None:
            return self.layout.expert_bank_bytes / MIB
        return self.budget / MIB

    def close(self) -> None:
        """Free the llama context and model, the I/O threads and the expert buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        L = self._L
        try:
            if self.cache is not None:
                self.cache.drain()
        except Exception:  # noqa: BLE001
            pass
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None
        if self.reader is not None:
            self.reader.close()
        for tb in self.buffers.values():
            tb.close()
        self.buffers = {}

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
