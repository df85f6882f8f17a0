"""The cache policy on top of the Engine's expert cache (moe-cache-reference.md): filling the cache
from an STRP profile at load (hottest first), ``n_hit_profile`` (hits on experts the profile put
there and that were never evicted since), and ``--moe-cache-adaptive`` (heat-based swaps), plus the
counter set of ``struct llama_moe_cache_stats`` that /metrics and the audit log report.
:func:`load_profile` is the one STRP loader of ``bmoe-run`` and ``bmoe-run serve``.

:class:`MoeCacheExt` attaches to an :class:`bmoe_top.runtime.engine.Engine` that streams experts
(``engine.cache`` is an ``ExpertCache``) through the cache's public hooks: ``on_lookup`` (profile
hits, heat), ``on_evict`` (an evicted profile expert no longer counts), ``ubatch_tokens``,
``admit``/``evict`` (fill and swaps) and ``counters()``. It must be driven from the decode thread:
:meth:`after_token` after each generated token (swaps happen there, between two tokens, so they
never touch what a token computes).

Adaptive (reference "The adaptive cache"): a heat per (layer, expert), +1 once per expert and
ubatch of at most 32 tokens, fading with a half-life of 350 generated tokens. Every 8 generated
tokens free room is filled with the hottest missing experts (at most 128); every 32 generated
tokens the hottest missing experts are swapped in for the coldest resident ones, at most 64, an
expert coming in only when its heat > 1.5 x the evicted one's + 2 picks. Each expert brought in
counts in ``swaps``. Layers the cache holds whole are left alone (they have nothing missing).

The expert reads done here (profile fill, swaps) are flash reads outside the misses: they are
counted in ``extra_read_bytes`` (``bmoe:read_bytes_total``), not in ``upload_bytes``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from bmoe_top.parsers.strp import StrpError, StrpProfile, check_dims, read_strp

__all__ = ["MoeCacheExt", "CacheCounters", "ProfileError", "load_profile", "HALF_LIFE_TOKENS", "ROUND_TOKENS",
           "MAX_SWAPS", "FILL_TOKENS", "MAX_FILL", "HYSTERESIS", "HYSTERESIS_PICKS", "MAX_UBATCH"]

HALF_LIFE_TOKENS = 350.0
ROUND_TOKENS = 32
MAX_SWAPS = 64
FILL_TOKENS = 8
MAX_FILL = 128
HYSTERESIS = 1.5
HYSTERESIS_PICKS = 2.0
MAX_UBATCH = 32


class ProfileError(ValueError):
    """An STRP profile this model cannot use: unreadable, invalid, or made for other dimensions.
    ``reason``: why, without the path when the path is not part of it already."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def load_profile(path: str, n_layer: int, n_expert: int) -> StrpProfile:
    """Read and validate the STRP profile at ``path`` for a model of ``n_layer`` x ``n_expert``.

    Raises :class:`ProfileError` with one sentence (the file, and why it cannot be used)."""
    try:
        profile = read_strp(path)
    except StrpError as exc:
        raise ProfileError(str(exc), str(exc)) from None
    why = check_dims(profile, n_layer, n_expert)
    if why:
        raise ProfileError(f"{path}: {why}", why)
    return profile


@dataclass
class CacheCounters:
    """``struct llama_moe_cache_stats`` for bmoe-run (counters since load, bytes in bytes).

    ``upload_bytes`` = bytes read from flash for misses (and speculative reads); ``cpu_bytes``,
    ``copies``, ``bytes_copy`` are 0 (no hybrid, no device copies on this CPU runtime);
    ``extra_read_bytes``: profile fill and swap reads; ``resident`` / ``resident_bytes``: the
    experts (and their bytes) the cache holds now. Per-layer lists are indexed by layer.
    ``pagecache_misses`` / ``pagecache_bytes`` / ``layer_pagecache``: of the misses, those the page
    cache served whole, the bytes it served, per layer (docs/memory.md "The three tiers in
    bmoe-run"); None when the reads cannot tell."""

    hits: int = 0
    hits_profile: int = 0
    misses: int = 0
    upload_bytes: int = 0
    cpu_bytes: int = 0
    copies: int = 0
    bytes_copy: int = 0
    swaps: int = 0
    slots: int = 0
    prefilled: int = 0
    cache_bytes: int = 0
    hybrid: bool = False
    extra_read_bytes: int = 0
    resident: int = 0
    resident_bytes: int = 0
    layer_hits: tuple = ()
    layer_hits_profile: tuple = ()
    layer_misses: tuple = ()
    pagecache_misses: int | None = None
    pagecache_bytes: int | None = None
    layer_pagecache: tuple | None = None

    def tier_counters(self) -> dict[str, int]:
        """The tiers of the misses (audit records' additive keys; empty when unknown)."""
        if self.pagecache_misses is None:
            return {}
        return {"misses_pagecache": self.pagecache_misses, "bytes_pagecache": self.pagecache_bytes or 0}

    def audit_counters(self) -> dict[str, int]:
        """The counters every audit record carries (reference "Audit log")."""
        return {"hits": self.hits, "hits_profile": self.hits_profile, "misses": self.misses,
                "bytes_upload": self.upload_bytes, "bytes_cpu": self.cpu_bytes, "copies": self.copies,
                "bytes_copy": self.bytes_copy, "swaps": self.swaps}


class MoeCacheExt:
    """Profile fill, profile hits and adaptive swaps for one Engine (see module doc).

    ``profile``: a validated :class:`StrpProfile` (from :func:`load_profile`) or ``None``. ``adaptive``: enable swaps.
    Raises nothing for a cache-less engine: everything is then a no-op and counters stay 0.
    """

    def __init__(self, engine, profile: StrpProfile | None = None, adaptive: bool = False):
        self.engine = engine
        self.cache = engine.cache
        lay = engine.layout
        self.n_layer = engine.n_layer
        self.n_expert = engine.n_expert
        self.moe_layers = list(lay.moe_layers)
        self.expert_bytes = list(lay.expert_bytes)
        self.max_expert_bytes = max(self.expert_bytes) if self.expert_bytes else 0
        self.lock = threading.Lock()
        self.hits_profile = 0
        #: while not None, every profile hit (layer, expert) in lookup order (serve --parallel charges
        #: a shared step's profile hits to the row that routed the expert first)
        self.profile_hit_log: list[tuple[int, int]] | None = None
        self.layer_hits_profile = [0] * self.n_layer
        self.swaps = 0
        self.prefilled = 0
        self.prefill_bytes = 0
        self.extra_read_bytes = 0
        self.swap_rounds = 0
        self.swap_s = 0.0
        self.profile_keys: set[tuple[int, int]] = set()
        self.adaptive = bool(adaptive) and self.cache is not None and not self.cache.no_cache
        self.n_gen = 0  # generated tokens seen (adaptive clock)
        self._ubatch = 1
        self.heat = np.zeros((self.n_layer, self.n_expert), dtype=np.float64)
        self._g = 1.0  # heat is stored scaled by _g = 2^(n_gen/half-life): lazy decay
        self._decay = 2.0 ** (1.0 / HALF_LIFE_TOKENS)
        if self.cache is not None and not self.cache.no_cache and (profile is not None or self.adaptive):
            self._attach_hooks()  # no hook at all (no per-lookup cost) when neither feature is on
        if profile is not None and self.cache is not None and not self.cache.no_cache:
            self.prefill_from(profile)

    # -- geometry ---------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Expert slots: the budget in experts (every MoE expert when the budget holds the bank)."""
        c = self.cache
        if c is None or c.no_cache or not self.max_expert_bytes:
            return 0
        if c.limit is None:
            return len(self.moe_layers) * self.n_expert
        return int(c.limit // self.max_expert_bytes)

    @property
    def cache_bytes(self) -> int:
        c = self.cache
        if c is None or c.no_cache:
            return 0
        return int(c.budget) if c.budget is not None else int(self.engine.layout.expert_bank_bytes)

    # -- the cache's hooks: lookups (profile hits, heat) and evictions -----------------------
    def _attach_hooks(self) -> None:
        """Attach to the cache's public hooks (``on_lookup``, ``on_evict``; ``ubatch_tokens``)."""
        cache = self.cache
        keys = self.profile_keys
        lhp = self.layer_hits_profile
        ext = self

        def on_lookup(il, routed, hit_flags):
            if keys:
                n = 0
                for e, h in zip(routed, hit_flags):
                    if h and (il, e) in keys:
                        n += 1
                        if ext.profile_hit_log is not None:
                            ext.profile_hit_log.append((il, e))
                if n:
                    ext.hits_profile += n
                    lhp[il] += n
            if ext.adaptive and routed and cache.ubatch_tokens <= MAX_UBATCH:
                ext.heat[il, routed] += ext._g

        def on_evict(il, e):
            keys.discard((il, e))

        cache.on_lookup = on_lookup
        cache.on_evict = on_evict  # only profile keys need it; cheap

    # -- bringing experts in -------------------------------------------------------------------
    def _admit(self, il: int, e: int) -> int:
        """Read expert (il, e) into its slots and mark it resident (most recently used) with the
        cache's public ``admit``; returns bytes read (0 if it could not come in). ``admit`` also
        counts the bytes in ``read_bytes``: :meth:`counters` takes them out of ``upload_bytes``."""
        return int(self.cache.admit(il, e))

    def _room(self) -> float:
        c = self.cache
        if c.limit is None:
            return math.inf
        return c.limit - c.resident_bytes - c.inflight_bytes

    def prefill_from(self, profile: StrpProfile) -> int:
        """Fill the cache from ``profile``, hottest first, as many experts as the budget holds.
        Returns the number of experts filled (``prefilled``)."""
        c = self.cache
        room = self._room()
        chosen: list[tuple[int, int]] = []
        for il, e in profile.pairs.tolist():
            if il >= self.n_layer or e >= self.n_expert or not c.layer_bufs[il]:
                continue
            if (il, e) in c.lru:
                continue
            eb = self.expert_bytes[il]
            if eb > room:
                break
            room -= eb
            chosen.append((il, e))
        # coldest first into the LRU so the hottest are evicted last
        n_bytes = 0
        n = 0
        for il, e in reversed(chosen):
            got = self._admit(il, e)
            if got:
                n_bytes += got
                n += 1
                self.profile_keys.add((il, e))
        self.prefilled = n
        self.prefill_bytes = n_bytes
        self.extra_read_bytes += n_bytes
        return self.prefilled

    # -- adaptive ------------------------------------------------------------------------------
    def after_token(self) -> int:
        """Call on the decode thread after each generated token. Advances the heat clock and
        runs a fill (every 8 tokens) or a swap round (every 32). Returns experts swapped in."""
        if not self.adaptive:
            return 0
        self.n_gen += 1
        self._g *= self._decay
        if self._g > 1e200:
            self.heat /= self._g
            self._g = 1.0
        n = 0
        if self.n_gen % FILL_TOKENS == 0 and self._room() >= self.max_expert_bytes:
            n += self._fill()
        if self.n_gen % ROUND_TOKENS == 0:
            n += self.rebalance(MAX_SWAPS)
        return n

    def _missing_hot(self) -> list[tuple[float, int, int]]:
        """Non-resident experts with heat > 0 in MoE layers, hottest first: (heat in picks, il, e)."""
        c = self.cache
        h = self.heat / self._g
        res = np.zeros_like(h, dtype=bool)
        for il, e in c.lru:
            res[il, e] = True
        for il, e in c.inflight:
            res[il, e] = True
        cand = np.argwhere((h > 0) & ~res)
        if cand.size == 0:
            return []
        vals = h[cand[:, 0], cand[:, 1]]
        order = np.argsort(-vals, kind="stable")
        return [(float(vals[i]), int(cand[i, 0]), int(cand[i, 1])) for i in order]

    def _fill(self) -> int:
        t0 = time.perf_counter()
        n = 0
        for _, il, e in self._missing_hot()[:MAX_FILL]:
            if self._room() < self.expert_bytes[il]:
                break
            n += self._swap_in(il, e)
        return self._done_round(n, t0)

    def _swap_in(self, il: int, e: int) -> int:
        """Read expert ``e`` of layer ``il`` into the cache; 1 if it came in, else 0."""
        got = self._admit(il, e)
        self.extra_read_bytes += got
        return 1 if got else 0

    def _done_round(self, n: int, t0: float) -> int:
        self.swaps += n
        self.swap_s += time.perf_counter() - t0
        return n

    def rebalance(self, max_swaps: int = MAX_SWAPS) -> int:
        """One round: swap in at most ``max_swaps`` of the hottest missing experts for the
        coldest resident ones (heat_in > 1.5 x heat_out + 2). Free room is used first.
        Returns the number of experts swapped in (-1 when not adaptive, like the C API)."""
        if not self.adaptive:
            return -1
        t0 = time.perf_counter()
        c = self.cache
        self.swap_rounds += 1
        hot = self._missing_hot()
        if not hot:
            return 0
        h = self.heat / self._g
        cold = sorted(((float(h[il, e]), il, e) for (il, e) in c.lru), key=lambda x: x[0])
        n = 0
        ci = 0
        for hin, il, e in hot:
            if n >= max_swaps:
                break
            eb = self.expert_bytes[il]
            if self._room() < eb:
                # need a victim: the coldest resident one, if the hysteresis allows
                while ci < len(cold) and cold[ci][1:] not in c.lru:
                    ci += 1
                if ci >= len(cold):
                    break
                hout, ol, oe = cold[ci]
                if not hin > HYSTERESIS * hout + HYSTERESIS_PICKS:
                    break  # the rest are colder still
                c.evict(ol, oe)
                ci += 1
                if self._room() < eb:
                    continue
            n += self._swap_in(il, e)
        return self._done_round(n, t0)

    # -- counters ------------------------------------------------------------------------------
    def counters(self) -> CacheCounters:
        """A consistent copy of the counters. Call on the decode thread or between decodes
        (it reads the cache's plain counters and the LRU's length, never walks the LRU)."""
        c = self.cache
        if c is None or c.no_cache:
            z = tuple([0] * self.n_layer)
            misses = c.misses if c is not None else 0
            return CacheCounters(misses=misses, upload_bytes=c.read_bytes if c is not None else 0,
                                 layer_hits=z, layer_hits_profile=z, layer_misses=z,
                                 extra_read_bytes=self.extra_read_bytes)
        hits, misses, read_bytes, layer_hits, layer_misses = c.counters()
        tiers = c.tier_counters()
        return CacheCounters(
            hits=hits, hits_profile=self.hits_profile, misses=misses,
            upload_bytes=read_bytes - self.extra_read_bytes,
            swaps=self.swaps, slots=self.slots, prefilled=self.prefilled, cache_bytes=self.cache_bytes,
            extra_read_bytes=self.extra_read_bytes, resident=len(c.lru), resident_bytes=int(c.resident_bytes),
            layer_hits=layer_hits, layer_hits_profile=tuple(self.layer_hits_profile), layer_misses=layer_misses,
            pagecache_misses=tiers[0] if tiers else None, pagecache_bytes=tiers[1] if tiers else None,
            layer_pagecache=tiers[2] if tiers else None,
        )

    def layers(self) -> list[dict]:
        """Per cached layer ``{il, slots, hits, hits_profile, misses, resident}`` (audit log
        ``layers``), and ``misses_pagecache`` when the reads tell the tiers. ``slots`` = experts
        the layer holds now (the LRU is shared by all layers). Call between decodes (reads the LRU)."""
        c = self.cache
        if c is None:
            return []
        res: dict[int, list[int]] = {il: [] for il in self.moe_layers}
        for il, e in list(c.lru.keys()):
            res.setdefault(il, []).append(e)
        out = []
        for il in self.moe_layers:
            r = sorted(res.get(il, []))
            row = {"il": il, "slots": len(r), "hits": c.layer_hits[il],
                   "hits_profile": self.layer_hits_profile[il], "misses": c.layer_misses[il], "resident": r}
            if c.tiers:
                row["misses_pagecache"] = c.layer_pagecache[il]
            out.append(row)
        return out
