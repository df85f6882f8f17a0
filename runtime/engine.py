"""The bmoe-run engine: llama.cpp (llama-cpp-python low-level API) does the math, the expert cache
decides which expert weights are in RAM. See docs/runtime.md ("Engine API") for the contract.

Typical use::

    eng = Engine("model.gguf", cache_mb=8)
    res = eng.generate("hello", n_predict=32, on_token=lambda st: print(st.step, st.wall_ms))
    print(res.text, res.tok_s, eng.cache_stats().hit_pct)
    eng.close()

Rooms: native handles (:mod:`.llama_handles`), streaming setup (:mod:`.streaming`), the cache
(:mod:`.expert_cache`) and its memory and reads (:mod:`.expert_store`, :mod:`.expert_io`),
the eval callback (:mod:`.router_hook`); this module holds the generate loop.

Threading: ``generate`` runs llama_decode on the calling thread and the eval callback runs on
that same thread, holding the GIL while it routes. ``cancel`` (a ``threading.Event``) may be set
from another thread; it is honoured within one decode step through llama's abort callback.
An Engine is not re-entrant: one ``generate`` at a time (calls are serialized by a lock).
"""

from __future__ import annotations

import codecs
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bmoe_top.parsers.gguf_layout import ModelError, ModelLayout, read_layout

from . import demo_model
from .expert_cache import ExpertCache, TokenCounters
from .expert_io import ExpertIOError, ExpertReader
from .expert_sink import ExpertSink, SinkError
from .huge_pages import HugePageLoad, worth_huge_pages
from .llama_handles import GreedySampler, LlamaContext, LlamaModel, SeqBatch, TokenBatch, route_llama_log
from .llama_lib import L
from .results import MIB, CacheStats, GenerationResult, TextSoFar, TokenStats
from .router_hook import RouterHook
from .sampling import GREEDY, Sampling
from .streaming import EngineError, Streaming, capture_graph

__all__ = [
    "Engine",
    "EngineError",
    "ModelError",
    "RequestError",
    "GenerationError",
    "TokenStats",
    "GenerationResult",
    "CacheStats",
    "MIB",
    "default_cache_mb",
    "resolve_budget",
]

Route = list[tuple[list[int], list[int]]]


class RequestError(ValueError):
    """A rejected generate request (prompt too long for n_ctx, bad n_predict). The engine stays usable."""


class GenerationError(RuntimeError):
    """A generation aborted by an error (e.g. an expert read failed). The engine stays usable."""


def default_cache_mb(layout: ModelLayout) -> float:
    """Default budget: 25% of the expert bank, but never below two tokens' working set (MiB)."""
    bank = layout.expert_bank_bytes
    ws = layout.token_working_set_bytes()
    return round(min(bank, max(bank * 0.25, 2 * ws)) / MIB, 2)


def resolve_budget(layout: ModelLayout, cache_mb: float | None, demo_budget_mb: float | None,
                   force_cache: bool) -> tuple[float, int | None]:
    """(cache_mb, budget bytes) for a requested ``cache_mb`` (None = the demo model's budget when
    usable, else :func:`default_cache_mb`). Budget None = every expert fits; 0 = no cache.
    Raises :class:`EngineError` for a negative value or one below a token's working set (unless
    ``force_cache``)."""
    ws = layout.token_working_set_bytes()
    if cache_mb is None:
        cache_mb = float(demo_budget_mb) if demo_budget_mb and demo_budget_mb * MIB >= ws else default_cache_mb(layout)
    if cache_mb < 0:
        raise EngineError(f"--cache-mb must be >= 0 (got {cache_mb})")
    budget: int | None = int(cache_mb * MIB)
    if budget and budget >= layout.expert_bank_bytes:
        budget = None  # every expert fits
    if budget and budget < ws and not force_cache:
        raise EngineError(
            f"--cache-mb {cache_mb:g} is below one token's expert working set "
            f"({ws / MIB:.2f} MiB = {layout.n_expert_used} experts x {len(layout.moe_layers)} layers); "
            "raise it, use --cache-mb 0 for no cache, or --force-cache"
        )
    return float(cache_mb), budget


class _ProcessClock:
    """Process CPU time, major faults (``getrusage``) and current RSS (``/proc/self/statm``)."""

    def __init__(self) -> None:
        self._page_mib = os.sysconf("SC_PAGE_SIZE") / MIB
        try:
            self._statm: int | None = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._statm = None

    def sample(self) -> tuple[float, int]:
        """(cpu seconds, major faults) since the process started."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_majflt

    def rss_mib(self) -> float:
        if self._statm is None:
            return -1.0
        return int(os.pread(self._statm, 64, 0).split()[1]) * self._page_mib

    def close(self) -> None:
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None


@dataclass
class _Turn:
    """The running generation's state the per-token steps share."""

    res: GenerationResult
    n_predict: int
    sampling: Sampling
    rng: Any
    cancel: threading.Event | None
    on_token: Callable[[TokenStats], None] | None
    t_request: float
    answer: TextSoFar
    utf8: Any
    budget_mib: float = 0.0
    hits: int = 0
    misses: int = 0
    cpu0: float = 0.0
    flt0: int = 0
    #: the KV sequence and its tokens (serial generation: sequence 0 and ``Engine.kv_tokens``)
    seq: int = 0
    kv: list[int] = field(default_factory=list)


class Engine:
    """A loaded MoE model with (by default) streamed experts.

    Parameters: ``model_path`` (GGUF, the first shard of a split model; None =
    :func:`bmoe_top.runtime.demo_model.default_model_path`), ``n_ctx`` tokens, ``n_threads``
    (default: all cores), ``n_batch`` (prefill batch = ubatch; default ``min(n_ctx, 2048)``;
    numerics depend on it, compare runs with the same value), ``cache_mb`` (MiB; None =
    :func:`default_cache_mb`, or ``demo_model.DEFAULT_DEMO_CACHE_MB`` for the default demo model;
    0 = no cache), ``stream`` (False = fully resident through llama's mmap, no expert cache),
    ``io_threads``, ``o_direct``, ``overlap``, ``prefetch`` (layers ahead), ``early_prefetch``
    (experts per layer the native callback predicts for the next layer from that layer's router,
    0..8, 0 = off; docs/runtime.md "How streaming works"), ``force_cache``
    (accept a budget below one token's working set), ``route_telemetry`` (fill
    :attr:`TokenStats.route`), ``route_weights`` (also read routing weights, for route traces),
    ``quiet`` (drop llama.cpp's log; otherwise it goes to stderr), ``flash_attn`` (None =
    llama.cpp's auto; True/False force it), ``native_hook`` (None = use the compiled
    eval-callback shim when it builds, False = pure-Python callback; same results), ``repack``
    (let llama.cpp repack weights; streaming then refuses: for tests of the refusal),
    ``huge_pages`` (resident: llama.cpp reads the weights into memory that is then collapsed
    into 2 MiB pages, :mod:`bmoe_top.runtime.huge_pages`; None = for a file of 8 MiB or more that
    fits in half the memory available to the process, False = llama.cpp's mmap of the file;
    streaming in frames: the frame pools in 2 MiB pages, None or True; False = 4 KiB pages),
    ``fill`` (with a cache that holds every expert, read the experts no prompt routed right after
    the first prefill, so the decode runs with the whole bank resident and no routing lookups;
    docs/runtime.md "Every expert fits: the fill"; False = read each expert when first routed),
    ``sampling`` (default greedy, with llama.cpp's greedy sampler), ``process_stats`` (fill the
    per-token RSS / major faults / CPU figures), ``n_seq`` (KV sequences the context holds, each
    ``n_ctx // n_seq`` tokens long: :class:`bmoe_top.runtime.slots.SlotDecoder` decodes them
    together; 1 = the serial :meth:`generate`).

    Raises :class:`ModelError` (bad file / not MoE) or :class:`EngineError` (streaming refused,
    unusable budget, llama.cpp could not load the model). Attributes after load: ``load_s``,
    ``arch``, ``n_ctx``, ``n_layer``, ``n_expert``, ``n_expert_used``, ``layout``, ``stream``,
    ``budget_mib``, ``o_direct`` (True if O_DIRECT is really in use); with the weights read into
    huge pages ``weights_read_mib`` (MiB of tensors read), ``load_mem_mib`` (MiB of memory the load
    mapped: the weights and what it allocated beside them) and ``load_huge_mib`` (MiB of that in
    2 MiB pages), all None when llama.cpp maps the file.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        n_batch: int | None = None,
        cache_mb: float | None = None,
        stream: bool = True,
        io_threads: int = 1,
        o_direct: bool = True,
        overlap: bool = False,
        prefetch: int = 0,
        early_prefetch: int = 0,
        force_cache: bool = False,
        route_telemetry: bool = False,
        route_weights: bool = False,
        quiet: bool = True,
        flash_attn: bool | None = None,
        native_hook: bool | None = None,
        repack: bool = False,
        huge_pages: bool | None = None,
        fill: bool = True,
        sampling: Sampling | None = None,
        process_stats: bool = False,
        n_seq: int = 1,
    ) -> None:
        t_start = time.perf_counter()
        self._lock = threading.Lock()
        self._closed = False
        self.model: LlamaModel | None = None
        self.ctx: LlamaContext | None = None
        self.seq_batch: SeqBatch | None = None  # rows of several sequences (n_seq > 1)
        self.cache: ExpertCache | None = None
        self.streaming: Streaming | None = None
        self.expert_sink: ExpertSink | None = None  # the load's expert buffer type (streaming only)
        self.weights_read_mib: float | None = None
        self.load_mem_mib: float | None = None
        self.load_huge_mib: float | None = None
        self.sampling = sampling or GREEDY
        self.quiet = bool(quiet)
        # for tests that must act mid-generation on a tiny, very fast model: BMOE_TOKEN_DELAY_MS=N
        # sleeps N ms after every decoded token (0 = off)
        self._token_delay_s = float(os.environ.get("BMOE_TOKEN_DELAY_MS", "0") or 0) / 1000.0
        self._clock = _ProcessClock() if process_stats else None
        demo_budget = None
        if model_path is None:
            model_path = demo_model.default_model_path()
            demo_budget = demo_model.DEFAULT_DEMO_CACHE_MB
        self.layout = lay = read_layout(model_path)
        self.model_path = lay.path
        self.arch, self.n_layer = lay.arch, lay.n_layer
        self.n_expert, self.n_expert_used = lay.n_expert, lay.n_expert_used
        self.stream = bool(stream)
        self.io_threads = max(1, int(io_threads))
        self.overlap = bool(overlap)
        self.prefetch = max(0, int(prefetch))
        self.early_prefetch = max(0, int(early_prefetch))
        self.route_telemetry = bool(route_telemetry)
        self.route_weights = bool(route_weights)
        self.fill = bool(fill)
        self.n_threads = int(n_threads or os.cpu_count() or 1)
        self.cache_mb, self.budget = resolve_budget(lay, cache_mb, demo_budget, force_cache)
        self.hook = RouterHook(native_shim=native_hook)
        self.observe = self.stream or self.route_telemetry or self.route_weights
        self.kv_tokens: list[int] = []  # tokens whose K/V are in the cache, in order
        self.n_seq = max(1, int(n_seq))
        #: a batch of several sequences' tokens is being decoded: each row's sequence, and per
        #: layer each routed expert's owner (the sequence of the first row that routed it)
        self._row_seq: list[int] | None = None
        self.owners: dict[int, dict[int, int]] = {}
        self.turn = 0
        self.last_prefill_route: Route | None = None
        self.route_sink: Callable[[str, int, int, dict], None] | None = None  # set by telemetry
        self._gen_route: Route | None = None
        self._pending_ids: dict[int, np.ndarray] = {}
        self._pending_w: dict[int, np.ndarray] = {}
        self._cancel: threading.Event | None = None
        self._abort_flag = False
        self._abort_installed = False
        try:
            self._load_model(repack, huge_pages)
            self._create_context(n_ctx, n_batch, flash_attn)
            self._install_abort()
            if self.stream:
                self._setup_streaming(o_direct, huge_pools=huge_pages is not False)
            self._start_routing()
        except Exception:
            self.close()
            raise
        self.load_s = time.perf_counter() - t_start

    # -- start-up steps ------------------------------------------------------------------------
    def _load_model(self, repack: bool, huge_pages: bool | None) -> None:
        """Load the model. Streaming: through :class:`ExpertSink` (expert bytes are neither read
        nor kept resident); fully resident: llama.cpp's mmap, or with ``huge`` read into
        2 MiB pages (:class:`HugePageLoad`). Expert tensors keep the file's layout (no
        weight repacking unless ``repack``, which exists only to show the refusal; it loads
        with mmap)."""
        route_llama_log(self.quiet)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mode = L.LLAMA_LOAD_MODE_MMAP
        mp.lazy_mode = L.LLAMA_LAZY_MODE_OFF
        mp.use_extra_bufts = bool(repack)
        huge = not self.stream and not repack and (worth_huge_pages(self.layout.file_size) if huge_pages is None
                                                   else bool(huge_pages))
        huge_load = HugePageLoad() if huge else None
        if huge_load is not None:
            huge_load.apply(mp)
        load_paths = None
        if self.stream and not repack:
            try:
                self.expert_sink = ExpertSink(self.layout)
            except SinkError as e:
                print(f"bmoe-run: loading with mmap (the whole file is resident while loading): {e}",
                      file=sys.stderr, flush=True)
            else:
                self.expert_sink.apply(mp)
                try:
                    load_paths = self.expert_sink.load_paths()
                except OSError:
                    pass  # no skeleton (a file-size limit, no memory): llama.cpp reads the file itself
        try:
            self.model = LlamaModel(self.model_path, mp, keep=(self.expert_sink,), load_paths=load_paths)
        except RuntimeError as e:
            raise EngineError(str(e)) from None
        finally:
            if self.expert_sink is not None:
                self.expert_sink.loaded()
        if huge_load is not None:
            mem, in_huge = huge_load.finish()
            self.load_mem_mib, self.load_huge_mib = mem / MIB, in_huge / MIB
            self.weights_read_mib = L.llama_model_size(self.model.ptr) / MIB
        self.n_vocab = self.model.n_vocab

    def _create_context(self, n_ctx: int, n_batch: int | None, flash_attn: bool | None) -> None:
        assert self.model is not None
        cp = L.llama_context_default_params()
        cp.n_ctx = int(n_ctx)
        # one decode call holds a row of every slot: the batch is at least n_seq tokens
        self.n_batch = max(int(n_batch or min(int(n_ctx), 2048)), self.n_seq)
        cp.n_batch = cp.n_ubatch = self.n_batch
        cp.n_seq_max = self.n_seq
        cp.kv_unified = False  # each sequence its own n_ctx // n_seq cells (llama-server's slots)
        cp.n_threads = cp.n_threads_batch = self.n_threads
        cp.no_perf = True
        if flash_attn is not None:
            cp.flash_attn_type = 1 if flash_attn else 0
        if self.observe:
            cp.cb_eval = self.hook.cb_eval
            cp.cb_eval_user_data = self.hook.cb_eval_user_data
        try:
            self.ctx = LlamaContext(self.model, cp, keep=(self.hook,))
        except RuntimeError as e:
            raise EngineError(str(e)) from None
        self.n_ctx = self.ctx.n_ctx
        self.n_ctx_seq = self.ctx.n_ctx_seq
        if self.n_ctx != int(n_ctx):  # llama.cpp pads the context (e.g. to a multiple of 256): say so
            print(f"bmoe-run: n_ctx {n_ctx} was set to {self.n_ctx} by llama.cpp", file=sys.stderr, flush=True)
        self.batch = TokenBatch(self.n_batch)
        self._one = TokenBatch(1)
        self.seq_batch = SeqBatch(max(self.n_batch, self.n_seq)) if self.n_seq > 1 else None
        self.sampler = GreedySampler(self.ctx)

    def _install_abort(self) -> None:
        """llama's abort callback, installed only while an abort is wanted (no per-node Python
        call otherwise)."""
        self._abort_cb = L.ggml_abort_callback(
            lambda _ud: bool(self._abort_flag or (self._cancel is not None and self._cancel.is_set()))
        )
        self.hook.on_error = lambda _e: self._request_abort()

    def _setup_streaming(self, o_direct: bool, huge_pools: bool) -> None:
        assert self.ctx is not None and self.model is not None
        self.streaming = Streaming(self.layout, self.budget, self.io_threads, o_direct, self.overlap, self.prefetch,
                                   huge=huge_pools)
        bos = max(0, self.model.bos())
        capture_graph(self.hook, lambda: self.ctx.decode(self._one.set([bos])), self.layout)  # type: ignore[union-attr]
        self.ctx.clear_kv()
        if self.budget and self.budget >= self.layout.expert_bank_bytes:  # capture may drop unused layers
            self.budget = self.streaming.budget = None
        # frame pools unless the early prefetch reads predicted experts into their places
        self.cache = self.streaming.attach(self.hook.captured, self.expert_sink, self.hook.layers_in_sequence(),
                                           hook=None if self.early_prefetch else self.hook)
        self.cache.early_prefetch = self.early_prefetch
        if self.hook.native:
            self.cache.attach_native(self.hook.state)

    def _start_routing(self) -> None:
        if self.observe:
            self.hook.mode = "route"
            self.hook.on_route = self._on_route
            self.hook.want_weights = self.route_weights
            self.hook.on_weights = self._on_weights if self.route_weights else None

    @property
    def process_stats(self) -> bool:
        """Whether each token's ``rss_mib``, ``majflt`` and ``cpu_ms`` are measured (else -1)."""
        return self._clock is not None

    @property
    def reader(self) -> ExpertReader | None:
        return self.streaming.reader if self.streaming is not None else None

    @property
    def o_direct(self) -> bool:
        return self.streaming is not None and self.streaming.o_direct

    # -- abort ---------------------------------------------------------------------------------
    def _request_abort(self) -> None:
        self._abort_flag = True
        if not self._abort_installed and self.ctx is not None:
            self.ctx.set_abort(self._abort_cb)
            self._abort_installed = True

    def _clear_abort(self) -> None:
        self._abort_flag = False
        if self._abort_installed and self.ctx is not None:
            self.ctx.set_abort(None)
            self._abort_installed = False

    # -- routing (eval callback, decode thread) ------------------------------------------------
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
            if self._row_seq is not None:
                owner: dict[int, int] = {}
                for seq, row in zip(self._row_seq, ids.tolist()):
                    for e in row:
                        owner.setdefault(e, seq)
                self.owners[il] = owner
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

    # -- helpers -------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """Token ids of ``text`` (``add_special``: prepend BOS when the vocab wants it)."""
        assert self.model is not None
        return self.model.tokenize(text, add_special)

    def chat_prompt(self, messages: list[tuple[str, str]], add_assistant: bool = True) -> str:
        """The prompt text for ``messages`` ((role, content) pairs, in order) built by llama.cpp's
        ``llama_chat_apply_template`` with the model's chat template (GGUF
        ``tokenizer.chat_template``; llama.cpp uses chatml when the model has none), ending with
        the assistant's turn opener when ``add_assistant``. Raises :class:`RequestError` when a
        text holds a NUL byte or llama.cpp does not support the model's template."""
        assert self.model is not None
        if not messages:
            raise RequestError("messages must not be empty")
        if any("\x00" in role or "\x00" in content for role, content in messages):
            raise RequestError("a message holds a NUL character")
        try:
            return self.model.apply_chat_template(messages, add_assistant)
        except ValueError as e:
            raise RequestError(str(e)) from None

    def token_bytes(self, tok: int) -> bytes:
        assert self.model is not None
        return self.model.token_bytes(tok)

    def _decode(self, toks: list[int], seq: int | None = None, pos0: int = 0) -> int:
        """``llama_decode`` of ``toks``: the serial context (``seq`` None: positions from the KV
        cache), or sequence ``seq`` from position ``pos0`` (logits of the last token only)."""
        assert self.ctx is not None
        if self.cache is not None:
            self.cache.ubatch_tokens = len(toks)
            self.cache.arm_native(self.route_sink is not None, self.route_telemetry)
        if seq is None:
            return self.ctx.decode((self._one if len(toks) == 1 else self.batch).set(toks))
        assert self.seq_batch is not None
        last = len(toks) - 1
        return self.ctx.decode(self.seq_batch.set([(t, pos0 + i, seq, i == last) for i, t in enumerate(toks)]))

    def _sync_kv_after_failure(self, turn: _Turn | None = None) -> None:
        assert self.ctx is not None
        if turn is None or self.n_seq == 1:
            self.kv_tokens = self.kv_tokens[: max(0, self.ctx.kv_len())]
        else:
            del turn.kv[max(0, self.ctx.kv_len(turn.seq)):]

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

    # -- public API ----------------------------------------------------------------------------
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
            return self._generate(prompt, int(n_predict), clear_kv, on_token, cancel, on_prefill,
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
        n_ctx = self.n_ctx_seq  # n_ctx with one sequence
        if len(target) + n_predict > n_ctx:
            raise RequestError(
                f"prompt ({len(target)} tokens in context) plus n_predict ({n_predict}) exceeds n_ctx ({n_ctx})"
            )
        return target

    # -- the generate loop, in steps -----------------------------------------------------------
    def _generate(self, prompt: str, n_predict: int, clear_kv: bool, on_token: Callable[[TokenStats], None] | None,
                  cancel: threading.Event | None, on_prefill: Callable[[float, int], None] | None,
                  sampling: Sampling) -> GenerationResult:
        t_request = time.perf_counter()
        target = self._target(prompt, n_predict, clear_kv)
        self._begin(cancel)
        p = self._reuse_kv_prefix(target, clear_kv)
        res = GenerationResult(tokens=[], text="", n_tokens=0, tok_s=0.0, s_per_tok=0.0, prefill_s=0.0,
                               n_prompt=len(target) - p, n_past=p, cancelled=False)
        marks = self._cache_marks()
        rc = self._prefill(target, p, res)
        if rc != 0:
            return self._prefill_failed(res, rc)
        self.last_prefill_route = res.prefill_route
        self._end_prefill_poll()
        if on_prefill is not None:
            on_prefill(res.prefill_s, res.n_prompt)
        turn = _Turn(res=res, n_predict=n_predict, sampling=sampling, rng=sampling.rng(), cancel=cancel,
                     on_token=on_token, t_request=t_request, answer=TextSoFar(),
                     utf8=codecs.getincrementaldecoder("utf-8")(errors="replace"), budget_mib=self.budget_mib)
        if self._clock is not None:
            turn.cpu0, turn.flt0 = self._clock.sample()
        t_dec0 = time.perf_counter()
        self._decode_loop(turn)
        res.decode_s = time.perf_counter() - t_dec0
        self._finish(turn, marks)
        return res

    def _begin(self, cancel: threading.Event | None) -> None:
        self._cancel = cancel
        self._clear_abort()
        self.hook.error = None
        if cancel is not None and not self.observe:
            # no eval callback to check the event: let llama's abort callback poll it per node
            # during the prefill (one batch may take seconds); _end_prefill_poll removes it
            self._request_abort()
            self._abort_flag = False

    def _end_prefill_poll(self) -> None:
        """Remove the per-node cancel poll of :meth:`_begin` before the one-token decodes, which
        check the cancel between tokens (``_decode_loop``): the poll is a Python call at every
        graph node (245 a token on bench-q4_k, ~0.4 us each) while the other compute threads
        wait at the node's barrier (docs/runtime.md, Traps)."""
        if self._cancel is not None and not self.observe:
            self._clear_abort()

    def _reuse_kv_prefix(self, target: list[int], clear_kv: bool) -> int:
        """Keep the KV entries the new conversation shares with the old one; returns how many."""
        assert self.ctx is not None
        if clear_kv:
            self.turn = 0 if not self.kv_tokens else self.turn + 1
        else:
            self.turn += 1
        p = 0
        if not clear_kv:
            m = min(len(self.kv_tokens), len(target))
            while p < m and self.kv_tokens[p] == target[p]:
                p += 1
        p = min(p, len(target) - 1)
        self.ctx.keep_kv_prefix(p)
        self.kv_tokens = self.kv_tokens[:p]
        return p

    def _cache_marks(self) -> tuple[int, ...]:
        c = self.cache
        if c is None:
            return (0, 0, 0, 0, 0)
        return (c.spec_bytes, c.spec_experts, c.spec_useful, c.evictions, c.rereads)

    def _prefill(self, target: list[int], p: int, res: GenerationResult, seq: int | None = None,
                 kv: list[int] | None = None) -> int:
        """Decode the prompt suffix ``target[p:]`` in batches of ``n_batch`` (into sequence ``seq``
        whose tokens ``kv`` grows, or the serial context); llama's return code."""
        kv = self.kv_tokens if kv is None else kv
        cache = self.cache
        t0 = time.perf_counter()
        if cache:
            cache.begin_token()
        pos = p
        rc = 0
        # per layer: experts routed over the whole prompt (union, first-seen order) and 1 when the
        # expert was resident the first time the prompt routed it
        pre_route: list[dict[int, int]] = [{} for _ in range(self.n_layer)]
        for i in range(p, len(target), self.n_batch):
            chunk = target[i : i + self.n_batch]
            self._pending_ids, self._pending_w = {}, {}
            self._gen_route = (
                [([], []) for _ in range(self.n_layer)] if (cache is None and self.route_telemetry) else None
            )
            rc = self._decode(chunk, seq, pos)
            if cache:
                cache.end_decode()
            if rc != 0:
                break
            if self.route_telemetry:
                src = cache.tok.route if cache else dict(enumerate(self._gen_route or []))
                for il, (r, h) in src.items():
                    for e, hit in zip(r, h):
                        pre_route[il].setdefault(e, hit)
            self._flush_route("prefill", pos, len(chunk))
            kv.extend(chunk)
            pos += len(chunk)
            if cache:
                res.prefill_read_bytes += cache.tok.read_bytes
                cache.begin_token()
        res.prefill_s = time.perf_counter() - t0
        if rc == 0 and cache and self.fill:
            self._fill(cache, res)
        if self.route_telemetry:
            res.prefill_route = [(list(d.keys()), list(d.values())) for d in pre_route]
        return rc

    def _fill(self, cache: ExpertCache, res: GenerationResult) -> None:
        """Read the experts the cache still lacks when it holds them all (:meth:`ExpertCache.fill`);
        its bytes count as the prefill's reads. Raises :class:`GenerationError` when a read fails."""
        t0 = time.perf_counter()
        try:
            n = cache.fill()
        except ExpertIOError as e:
            raise GenerationError(f"reading the rest of the expert bank failed: {e}") from None
        if n:
            res.fill_bytes, res.fill_s = n, time.perf_counter() - t0
            res.prefill_read_bytes += n
            cache.begin_token()  # the fill's reads are not the first token's

    def _decode_loop(self, turn: _Turn) -> None:
        res = turn.res
        cancel = turn.cancel
        step = 0
        while step < turn.n_predict:
            if cancel is not None and cancel.is_set():
                res.cancelled, res.stop_reason = True, "cancelled"
                return
            tw0 = time.perf_counter()
            tok = self._pick(turn)
            if self._token_delay_s:
                time.sleep(self._token_delay_s)
            assert self.model is not None
            if self.model.is_eog(tok):
                res.stop_reason = "eog"
                return
            td0 = time.perf_counter()
            rc = self._decode_step(tok)
            decode_s = time.perf_counter() - td0
            if rc != 0:
                self._decode_failed(rc, cancel)
                res.cancelled, res.stop_reason = True, "cancelled"
                return
            step += 1
            st = self._token_stats(turn, step, tok, time.perf_counter() - tw0, decode_s)
            if turn.on_token is not None:
                turn.on_token(st)

    def _pick(self, turn: _Turn, i: int = -1) -> int:
        """The next token from row ``i`` of the last decoded batch: llama.cpp's greedy sampler,
        or :class:`Sampling` on the logits row."""
        if turn.sampling.greedy:
            return self.sampler.sample(i)
        assert self.ctx is not None
        row = np.ctypeslib.as_array(self.ctx.logits_row(i), shape=(self.n_vocab,))
        return turn.sampling.pick(row, turn.kv if self.n_seq > 1 else self.kv_tokens, turn.rng)

    def _decode_step(self, tok: int) -> int:
        cache = self.cache
        if cache:
            cache.begin_token()
        if self.route_telemetry and cache is None:
            self._gen_route = [([], []) for _ in range(self.n_layer)]
        if self.route_sink is not None:
            self._pending_ids, self._pending_w = {}, {}
        rc = self._decode([tok])
        if cache:
            cache.end_decode()
        if rc == 0:
            self._flush_route("decode", len(self.kv_tokens), 1)
            self.kv_tokens.append(tok)
        return rc

    def _decode_failed(self, rc: int, cancel: threading.Event | None) -> None:
        """A decode returned ``rc`` != 0: raise for an error, return for a cancel."""
        self._sync_kv_after_failure()
        err = self.hook.error
        if err is not None:
            self._clear_abort()
            self.hook.error = None
            if isinstance(err, KeyboardInterrupt):
                raise KeyboardInterrupt
            raise GenerationError(f"decode aborted: {err}")
        if rc == 2 or (cancel is not None and cancel.is_set()):
            return
        raise GenerationError(f"llama_decode returned {rc}")

    def _token_stats(self, turn: _Turn, step: int, tok: int, wall: float, decode_s: float,
                     tk: TokenCounters | None = None) -> TokenStats:
        """Account one decoded token and build its :class:`TokenStats` (``tk``: the cache work
        charged to it; None = the whole last decode's)."""
        res = turn.res
        piece = turn.utf8.decode(self.token_bytes(tok))
        turn.answer.parts.append(piece)
        res.tokens.append(tok)
        cache = self.cache
        st = TokenStats(step=step, steps=turn.n_predict, token=tok, piece=piece, wall_ms=wall * 1e3, io_ms=0.0,
                        compute_ms=wall * 1e3, mgmt_ms=0.0, stall_ms=0.0, read_bytes=0, cache_hit_pct=-1.0,
                        answer=turn.answer, n_pieces=len(turn.answer.parts),
                        pos=len(turn.kv if self.n_seq > 1 else self.kv_tokens) - 1,
                        decode_ms=decode_s * 1e3, budget_mib=turn.budget_mib)
        if cache is not None:
            self._cache_token_stats(turn, st, cache, wall, cache.tok if tk is None else tk)
        else:
            st.resident_mib = turn.budget_mib
            st.route = self._gen_route if self.route_telemetry else None
        if self._clock is not None:
            cpu, flt = self._clock.sample()
            st.cpu_ms, st.majflt, st.rss_mib = (cpu - turn.cpu0) * 1e3, flt - turn.flt0, self._clock.rss_mib()
            turn.cpu0, turn.flt0 = cpu, flt
            res.cpu_s += st.cpu_ms / 1e3
            res.majflt += st.majflt
        res.compute_s += st.compute_ms / 1e3
        res.decode_call_s += decode_s
        if step == 1:
            res.ttft_s = time.perf_counter() - turn.t_request
        res.stats.append(st)
        return st

    def _cache_token_stats(self, turn: _Turn, st: TokenStats, cache: ExpertCache, wall: float,
                           tk: TokenCounters) -> None:
        if cache.overlap:
            io_s = tk.io_s + cache.take_spec_busy()
            compute = wall - tk.stall_s - tk.mgmt_s
        else:
            io_s = tk.io_s
            compute = wall - tk.io_s - tk.mgmt_s
        turn.hits += tk.hits
        turn.misses += tk.misses
        lookups = turn.hits + turn.misses
        st.io_ms, st.compute_ms = io_s * 1e3, max(0.0, compute) * 1e3
        st.mgmt_ms, st.stall_ms = tk.mgmt_s * 1e3, tk.stall_s * 1e3
        st.read_bytes, st.xfer_bytes, st.spec_bytes = tk.read_bytes, tk.xfer_bytes, tk.spec_bytes
        st.hits, st.misses = tk.hits, tk.misses
        if cache.tiers:
            st.pagecache_bytes, st.pagecache_misses = tk.pagecache_bytes, tk.pagecache_misses
            turn.res.pagecache_bytes = max(0, turn.res.pagecache_bytes) + tk.pagecache_bytes
        if not cache.no_cache:
            st.cache_hit_pct = 100.0 * turn.hits / lookups if lookups else -1.0
            total = cache.hits + cache.misses
            st.hit_pct_since_load = 100.0 * cache.hits / total if total else -1.0
        st.resident_mib = cache.resident_mib
        if self.route_telemetry:
            st.route = [tk.route.get(il, ([], [])) for il in range(self.n_layer)]
            if cache.tiers:
                pcs = tk.route_pagecache
                st.route_tier = [[0 if h else (1 if e in pcs.get(il, ()) else 2) for e, h in zip(*r)]
                                 for il, r in enumerate(st.route)]
        res = turn.res
        res.io_s += io_s
        res.mgmt_s += tk.mgmt_s
        res.stall_s += tk.stall_s
        res.read_bytes += tk.read_bytes
        res.xfer_bytes += tk.xfer_bytes
        res.n_reads += tk.reads

    def _finish(self, turn: _Turn, marks: tuple[int, ...]) -> None:
        res = turn.res
        tail = turn.utf8.decode(b"", final=True)
        if tail:
            turn.answer.parts.append(tail)
        res.text = turn.answer.upto(len(turn.answer.parts))
        res.n_tokens = len(res.tokens)
        wall_sum = sum(s.wall_ms for s in res.stats) / 1e3
        res.s_per_tok = wall_sum / res.n_tokens if res.n_tokens else 0.0
        res.tok_s = res.n_tokens / wall_sum if wall_sum > 0 else 0.0
        res.decode_tok_s = res.n_tokens / res.decode_call_s if res.decode_call_s > 0 else 0.0
        cache = self.cache
        if cache is not None:
            if not cache.no_cache:
                n = turn.hits + turn.misses
                res.hit_pct = 100.0 * turn.hits / n if n else 0.0
            res.spec_bytes = cache.spec_bytes - marks[0]
            res.spec_experts = cache.spec_experts - marks[1]
            res.spec_useful = cache.spec_useful - marks[2]
            res.evictions = cache.evictions - marks[3]
            res.rereads = cache.rereads - marks[4]
        res.n_past = len(turn.kv if self.n_seq > 1 else self.kv_tokens)
        self._clear_abort()
        self._cancel = None

    def _prefill_failed(self, res: GenerationResult, rc: int) -> GenerationResult:
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

    # -- cache -------------------------------------------------------------------------------
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
            budget_mib=self.budget_mib,
            spec_bytes=c.spec_bytes,
            spec_experts=c.spec_experts,
            spec_useful=c.spec_useful,
            layer_pagecache=list(c.layer_pagecache) if c.tiers else None,
            pagecache_misses=c.pagecache_misses if c.tiers else None,
        )

    @property
    def budget_mib(self) -> float:
        """The expert budget in MiB (the whole bank when every expert fits or without streaming)."""
        if not self.stream or self.budget is None:
            return self.layout.expert_bank_bytes / MIB
        return self.budget / MIB

    def close(self) -> None:
        """Free the llama context and model, the I/O lanes and the expert buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.cache is not None:
            try:
                self.cache.drain()
            except Exception:  # noqa: BLE001 - closing must not fail on a lost speculative read
                pass
        if self.model is not None:
            self.model.close()  # frees the context (and its sampler) first
        if self.seq_batch is not None:
            self.seq_batch.close()
        if self.expert_sink is not None:
            self.expert_sink.close()
        if self.streaming is not None:
            self.streaming.close()
        if self._clock is not None:
            self._clock.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
