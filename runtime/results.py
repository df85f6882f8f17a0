"""What the engine reports: one decoded token (:class:`TokenStats`), one generation
(:class:`GenerationResult`) and the cache since load (:class:`CacheStats`).

Units: times in ms per token and s per generation, bytes in bytes, sizes in MiB where the name
says so. The contract (telemetry-contract.md "Per-token lines") and the extensions bmoe-run adds
are listed in docs/telemetry.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1024 * 1024

__all__ = ["TokenStats", "GenerationResult", "CacheStats", "TextSoFar", "MIB"]


class TextSoFar:
    """The answer of one generation as a list of pieces; :meth:`upto` joins the first ``n``
    pieces once per new length, so a consumer that never asks for the text pays nothing."""

    __slots__ = ("parts", "_n", "_s")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._n = 0
        self._s = ""

    def upto(self, n: int) -> str:
        if n != self._n:
            if n > self._n:
                self._s += "".join(self.parts[self._n : n])
            else:
                self._s = "".join(self.parts[:n])
            self._n = n
        return self._s


@dataclass(eq=False)
class TokenStats:
    """One decoded token (telemetry-contract.md "Per-token lines"). Times in ms, bytes in bytes.

    ``wall_ms`` is the token's wall time (sampling, the decode call and the engine's own work);
    ``decode_ms`` the ``llama_decode`` call alone. ``cache_hit_pct`` is cumulative over this
    generation's decode steps and ``hit_pct_since_load`` over every lookup since the model was
    loaded (prompts included); both -1 when no cache is used. ``read_bytes`` is the expert
    payload read this token, ``xfer_bytes`` the page-aligned bytes the reads transferred.
    ``resident_mib``/``budget_mib``: the cache after this token. ``rss_mib``, ``majflt``
    (this token), ``cpu_ms`` (process CPU this token) are filled when the engine was built with
    ``process_stats=True`` (else -1). ``route``: per layer the routed ids and 1/0 hit flags, with
    ``route_telemetry=True`` only; layers without MoE are empty. ``pagecache_bytes``: of
    ``read_bytes``, the bytes the page cache served, and ``pagecache_misses`` of ``misses`` the
    experts it served whole (docs/memory.md "The three tiers in bmoe-run"); -1 when the reads
    cannot tell (no cache reads at all, or buffered reads without ``RWF_NOWAIT``).
    """

    step: int
    steps: int
    token: int
    piece: str
    wall_ms: float
    io_ms: float
    compute_ms: float
    mgmt_ms: float
    stall_ms: float
    read_bytes: int
    cache_hit_pct: float
    answer: TextSoFar = field(default_factory=TextSoFar, repr=False)
    n_pieces: int = 0
    hits: int = 0
    misses: int = 0
    spec_bytes: int = 0
    pos: int = 0
    decode_ms: float = 0.0
    xfer_bytes: int = 0
    hit_pct_since_load: float = -1.0
    resident_mib: float = 0.0
    budget_mib: float = 0.0
    rss_mib: float = -1.0
    majflt: int = -1
    cpu_ms: float = -1.0
    route: list[tuple[list[int], list[int]]] | None = None
    #: with ``route``, when the reads tell the tiers: per layer, aligned with the routed ids, the
    #: tier that served each (0 expert cache, 1 page cache, 2 disk)
    route_tier: list[list[int]] | None = None
    pagecache_bytes: int = -1
    pagecache_misses: int = -1

    @property
    def pagecache_mb(self) -> float:
        """MiB of this token's reads the page cache served (-1: unknown)."""
        return self.pagecache_bytes / MIB if self.pagecache_bytes >= 0 else -1.0

    @property
    def text(self) -> str:
        """The whole answer so far (contract field ``text``)."""
        return self.answer.upto(self.n_pieces)

    @property
    def read_mb(self) -> float:
        """MiB read this token (the contract's ``read_mb``/``mb`` are MiB)."""
        return self.read_bytes / MIB

    @property
    def xfer_mb(self) -> float:
        return self.xfer_bytes / MIB


@dataclass
class GenerationResult:
    """The outcome of ``Engine.generate``. Times in seconds; ``text`` is the generated text only.

    ``tok_s``/``s_per_tok`` use each token's wall time; ``decode_tok_s`` the ``llama_decode``
    calls alone (bmoe-cli's definition). ``ttft_s``: from the request to the first token.
    ``hit_pct``: this generation's decode lookups (-1 without cache).
    """

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
    xfer_bytes: int = 0
    n_reads: int = 0
    io_s: float = 0.0
    mgmt_s: float = 0.0
    stall_s: float = 0.0
    compute_s: float = 0.0
    decode_s: float = 0.0
    decode_call_s: float = 0.0
    decode_tok_s: float = 0.0
    ttft_s: float = 0.0
    hit_pct: float = -1.0
    prefill_read_bytes: int = 0
    #: experts read after the prefill because the cache holds the whole bank (Engine ``fill``)
    fill_bytes: int = 0
    fill_s: float = 0.0
    #: of ``read_bytes``, the bytes the page cache served (-1: the reads cannot tell)
    pagecache_bytes: int = -1
    evictions: int = 0  # expert evictions during this generation (prompt included)
    rereads: int = 0  # misses on experts evicted earlier (prompt included)
    spec_bytes: int = 0
    spec_experts: int = 0
    spec_useful: int = 0
    majflt: int = 0
    cpu_s: float = 0.0
    stop_reason: str = "length"  # length | eog | cancelled
    #: with route_telemetry: per layer (experts routed by the prompt, union; hit flags)
    prefill_route: list[tuple[list[int], list[int]]] | None = None

    @property
    def read_mib(self) -> float:
        return self.read_bytes / MIB

    @property
    def xfer_mib(self) -> float:
        return self.xfer_bytes / MIB


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
    #: misses the page cache served whole, per layer and in all (None: the reads cannot tell)
    layer_pagecache: list[int] | None = None
    pagecache_misses: int | None = None
