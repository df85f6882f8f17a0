"""Several generations decoded together: each request on its own KV sequence (a slot, as
llama-server's ``-np``), one ``llama_decode`` per step for every running sequence (continuous
batching). See docs/runtime.md ("Parallel slots").

Typical use (on one thread; an :class:`~bmoe_top.runtime.engine.Engine` built with ``n_seq=2``)::

    dec = SlotDecoder(eng)
    dec.start(0, "first prompt", 16, on_token=...)   # prefills sequence 0 alone
    dec.start(1, "second prompt", 16, on_token=...)  # joins at the next step
    while dec.running:
        for seq, res, err in dec.step():            # one token for every running sequence
            ...

A request that joins is prefilled alone (its own decode calls, between two steps); from then on
its token is one row of the shared step. Greedy outputs are those of the request run alone
(tests/runtime/test_slots.py): each sequence has its own KV cells (``n_ctx // n_seq``), and
llama.cpp computes each row of a batch as it computes one token.

Attribution of the expert cache's work in a shared step (:class:`StepShare`): the step routes
each layer once for the union of its rows' experts, so each routed expert (one lookup: a hit or
a miss, and for a miss its bytes) is charged to the sequence of the first row that routed it
(rows are in slot order). What no row routed (speculative reads, a failed read done again) goes
to the step's first sequence. Times are not divided: each token waited its whole step, so every
row's ``wall_ms``, ``io_ms``, ``stall_ms``, ``mgmt_ms`` and ``decode_ms`` are the step's.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .engine import Engine, GenerationError, RequestError, _Turn
from .expert_cache import TokenCounters
from .results import GenerationResult, TextSoFar, TokenStats
from .sampling import Sampling

__all__ = ["SlotDecoder", "StepShare", "Finished"]

#: (sequence, its result or None, the error that ended it or None)
Finished = tuple[int, GenerationResult | None, BaseException | None]


@dataclass
class StepShare:
    """The expert-cache lookups of one shared step charged to one sequence: per layer the experts
    it routed first, with their hit flags (1 = resident), and the payload bytes of its misses."""

    route: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    miss_bytes: int = 0


@dataclass
class _Seq:
    turn: _Turn
    pending: int  # the token picked for the next step
    marks: tuple[int, ...]
    t_dec0: float


class SlotDecoder:
    """Runs up to ``eng.n_seq`` generations together on ``eng`` (not thread-safe: one thread
    calls :meth:`start` and :meth:`step`, which hold the engine's lock while they decode).

    ``shares``: after each :meth:`step`, the cache work charged to each sequence of that step
    (:class:`StepShare`; empty for a step of one sequence, which owns all of it)."""

    def __init__(self, eng: Engine) -> None:
        if eng.n_seq < 2:
            raise ValueError("a SlotDecoder needs an Engine built with n_seq >= 2")
        self.eng = eng
        self.seqs: dict[int, _Seq] = {}
        self.shares: dict[int, StepShare] = {}
        self._clock_mark: tuple[float, int] | None = None

    @property
    def running(self) -> int:
        return len(self.seqs)

    def free(self) -> list[int]:
        """Sequence ids no generation holds, lowest first."""
        return [s for s in range(self.eng.n_seq) if s not in self.seqs]

    # -- joining -------------------------------------------------------------------------------
    def target(self, prompt: str, n_predict: int) -> list[int]:
        """The prompt's tokens (BOS first). Raises :class:`RequestError` when the prompt plus
        ``n_predict`` exceeds one sequence's ``n_ctx_seq``, or for a bad argument."""
        return self.target_for(self.eng, prompt, n_predict)

    @staticmethod
    def target_for(eng: Engine, prompt: str, n_predict: int) -> list[int]:
        """:meth:`target` on ``eng`` (any thread: it only tokenizes)."""
        if not isinstance(prompt, str):
            raise RequestError("prompt must be a string")
        if n_predict < 0:
            raise RequestError(f"n_predict must be >= 0 (got {n_predict})")
        target = eng.tokenize(prompt, add_special=True)
        if not target:
            raise RequestError("empty prompt")
        n = eng.n_ctx_seq
        if len(target) + n_predict > n:
            raise RequestError(f"prompt ({len(target)} tokens) plus n_predict ({n_predict}) exceeds "
                               f"the slot's context ({n} = n_ctx {eng.n_ctx} / {eng.n_seq} slots)")
        return target

    def start(self, seq: int, prompt: str, n_predict: int, *, on_token: Callable[[TokenStats], None] | None = None,
              cancel: threading.Event | None = None, on_prefill: Callable[[float, int], None] | None = None,
              sampling: Sampling | None = None) -> GenerationResult | None:
        """Prefill ``prompt`` alone into free sequence ``seq`` and pick its first token; it then
        decodes in every :meth:`step` until it stops. Returns its result at once when it stops
        before any step (``n_predict`` 0, a cancel), else None. Raises :class:`RequestError`
        (nothing changed) or :class:`GenerationError` (the prefill failed; the sequence is free)."""
        eng = self.eng
        if seq in self.seqs or not 0 <= seq < eng.n_seq:
            raise ValueError(f"sequence {seq} is not free")
        t_request = time.perf_counter()
        target = self.target(prompt, int(n_predict))
        assert eng.ctx is not None
        with eng._lock:
            eng.ctx.drop_seq(seq)
            eng.hook.error = None
            res = GenerationResult(tokens=[], text="", n_tokens=0, tok_s=0.0, s_per_tok=0.0, prefill_s=0.0,
                                   n_prompt=len(target), n_past=0, cancelled=False)
            marks = eng._cache_marks()
            kv: list[int] = []
            rc = eng._prefill(target, 0, res, seq=seq, kv=kv)
            if rc != 0:
                eng.ctx.drop_seq(seq)
                self._raise_failed("prefill", rc)
            if on_prefill is not None:
                on_prefill(res.prefill_s, res.n_prompt)
            sm = sampling or eng.sampling
            turn = _Turn(res=res, n_predict=int(n_predict), sampling=sm, rng=sm.rng(), cancel=cancel,
                         on_token=on_token, t_request=t_request, answer=TextSoFar(),
                         utf8=codecs.getincrementaldecoder("utf-8")(errors="replace"), budget_mib=eng.budget_mib,
                         seq=seq, kv=kv)
            s = _Seq(turn=turn, pending=-1, marks=marks, t_dec0=time.perf_counter())
            if turn.n_predict > 0 and not (cancel is not None and cancel.is_set()):
                s.pending = eng._pick(turn)
            self.seqs[seq] = s
            if s.pending < 0 or self._stops(s):
                return self._finish(seq)
        return None

    # -- the shared step -----------------------------------------------------------------------
    def step(self) -> list[Finished]:
        """One decode for every running sequence (rows in sequence order), then each row's
        ``on_token``. Returns the sequences that ended: before the step (n_predict reached, an
        end-of-generation token, a cancel) or because the step failed (every sequence of the step
        ends with the :class:`GenerationError`, its KV dropped)."""
        eng = self.eng
        done: list[Finished] = []
        for seq in sorted(self.seqs):
            if self._stops(self.seqs[seq]):
                done.append((seq, self._finish(seq), None))
        if not self.seqs:
            return done
        with eng._lock:
            done += self._step()
        return done

    def _stops(self, s: _Seq) -> bool:
        turn, res = s.turn, s.turn.res
        if turn.cancel is not None and turn.cancel.is_set():
            res.cancelled, res.stop_reason = True, "cancelled"
            return True
        if len(res.tokens) >= turn.n_predict:
            return True
        assert self.eng.model is not None
        if self.eng.model.is_eog(s.pending):
            res.stop_reason = "eog"
            return True
        return False

    def _step(self) -> list[Finished]:
        eng, cache = self.eng, self.eng.cache
        assert eng.ctx is not None and eng.seq_batch is not None
        t0 = time.perf_counter()
        if eng._token_delay_s:
            time.sleep(eng._token_delay_s)
        self.shares = {}
        order = sorted(self.seqs)
        rows = [(self.seqs[q].pending, len(self.seqs[q].turn.kv), q, True) for q in order]
        if cache:
            cache.begin_token()
            cache.ubatch_tokens = len(rows)
            cache.arm_native(eng.route_sink is not None, eng.route_telemetry)
        eng._row_seq = order if len(order) > 1 else None
        eng.owners = {}
        td0 = time.perf_counter()
        try:
            rc = eng.ctx.decode(eng.seq_batch.set(rows))
        finally:
            eng._row_seq = None
        decode_s = time.perf_counter() - td0
        if cache:
            cache.end_decode()
        if rc != 0:
            return self._step_failed(order, rc)
        toks = [self.seqs[q].pending for q in order]
        for i, q in enumerate(order):
            s = self.seqs[q]
            s.turn.kv.append(toks[i])
            n_done = len(s.turn.res.tokens) + 1
            if n_done < s.turn.n_predict and not (s.turn.cancel is not None and s.turn.cancel.is_set()):
                s.pending = eng._pick(s.turn, i)  # before anything else decodes over the logits
        self.shares = self._charge(order) if len(order) > 1 and cache is not None else {}
        wall = time.perf_counter() - t0
        for i, q in enumerate(order):
            s = self.seqs[q]
            tk = cache.tok if cache is not None else None
            if tk is not None and q in self.shares:
                tk = self._share_counters(tk, self.shares[q], first=(i == 0))
            if eng._clock is not None:
                if self._clock_mark is None:
                    self._clock_mark = eng._clock.sample()
                s.turn.cpu0, s.turn.flt0 = self._clock_mark
            st = eng._token_stats(s.turn, len(s.turn.res.tokens) + 1, toks[i], wall, decode_s, tk)
            if eng._clock is not None:
                self._clock_mark = (s.turn.cpu0, s.turn.flt0)
            if s.turn.on_token is not None:
                s.turn.on_token(st)
        return []

    def _charge(self, order: list[int]) -> dict[int, StepShare]:
        """Each routed expert of the last step to the sequence of the first row that routed it."""
        eng, cache = self.eng, self.eng.cache
        assert cache is not None
        shares = {q: StepShare() for q in order}
        ebytes = eng.layout.expert_bytes
        for il, (routed, flags) in cache.tok.route.items():
            owner = eng.owners.get(il, {})
            for e, h in zip(routed, flags):
                sh = shares[owner.get(e, order[0])]
                sh.route.setdefault(il, []).append((e, h))
                if h:
                    sh.hits += 1
                else:
                    sh.misses += 1
                    sh.miss_bytes += ebytes[il]
        return shares

    def _share_counters(self, tk: TokenCounters, sh: StepShare, first: bool) -> TokenCounters:
        """The step's counters as one row sees them: its times whole, its own lookups and miss
        bytes; the first row also takes the bytes no row routed and the read requests."""
        shared = sum(x.miss_bytes for x in self.shares.values())
        own = replace(tk, hits=sh.hits, misses=sh.misses, route={il: ([e for e, _ in v], [h for _, h in v])
                                                                  for il, v in sh.route.items()},
                      read_bytes=sh.miss_bytes + (tk.read_bytes - shared if first else 0))
        if not first:
            own.xfer_bytes = own.reads = own.spec_bytes = own.pagecache_bytes = own.pagecache_misses = 0
        return own

    def _step_failed(self, order: list[int], rc: int) -> list[Finished]:
        eng = self.eng
        assert eng.ctx is not None
        try:
            self._raise_failed("decode", rc)
        except GenerationError as exc:
            err: BaseException = exc
        out: list[Finished] = []
        for q in order:
            eng.ctx.drop_seq(q)
            del self.seqs[q]
            out.append((q, None, err))
        return out

    def _raise_failed(self, what: str, rc: int) -> None:
        eng = self.eng
        err = eng.hook.error
        eng.hook.error = None
        eng._clear_abort()
        if isinstance(err, KeyboardInterrupt):
            raise KeyboardInterrupt
        if err is not None:
            raise GenerationError(f"{what} aborted: {err}")
        raise GenerationError(f"{what} failed: llama_decode returned {rc}")

    def _finish(self, seq: int) -> GenerationResult:
        s = self.seqs.pop(seq)
        res = s.turn.res
        res.decode_s = time.perf_counter() - s.t_dec0
        self.eng._finish(s.turn, s.marks)
        assert self.eng.ctx is not None
        self.eng.ctx.drop_seq(seq)
        return res
