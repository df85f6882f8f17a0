"""The cache policies of the what-if simulator: one registry that the simulator, the report and
the screens read (docs/analysis.md "Policies"; architecture.md "A new cache policy").

Each :class:`Policy` names how it is replayed (``replay``): ``one_pass`` (LRU: every budget in
one pass over the trace), ``per_budget`` (a cache of its own at each budget, a compiled kernel
replaying a group of budgets in one pass; ``code`` names it in tui/analysis/_kernels.py),
``profile`` (a profile built on a train part, scored on the rest) or ``per_layer`` (one LRU per
layer from each layer's own curve). Importing this module imports neither numpy nor the compiled
kernels, so the views can read it at startup.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Policy", "POLICIES", "BY_NAME", "NAMES", "MAIN", "KERNEL_CODES", "policy", "label"]


@dataclass(frozen=True, slots=True)
class Policy:
    """``name`` the key in the report and ``--json``; ``label`` the short name of tables and the
    chart legend; ``description`` what it models (the report's ``label``); ``replay`` how it is
    replayed; ``code`` its kernel (``per_budget`` only); ``main`` among the four the narrowed
    chart shows; ``ceiling`` the bound the others are measured against."""

    name: str
    label: str
    description: str
    replay: str
    code: int | None = None
    main: bool = False
    ceiling: bool = False


#: every policy, in the order the tables list and the chart draws them (the ceiling last)
POLICIES: tuple[Policy, ...] = (
    Policy("lru", "LRU", "least recently used: bmoe-run's cache", "one_pass", main=True),
    Policy("lfu", "LFU", "least frequently used (lookups since the start; ties: least recent)", "per_budget", code=0),
    Policy("fifo", "FIFO", "first in, first out", "per_budget", code=3),
    Policy("sieve", "SIEVE", "SIEVE: FIFO with a visited bit and a moving hand", "per_budget", code=1),
    Policy("static", "static profile", "static profile of the hottest experts (train part), nothing else kept",
           "profile", main=True),
    Policy("lru_profile", "LRU + profile",
           "LRU filled at load from the train part's profile (bmoe-run --moe-cache-profile)", "profile"),
    Policy("lru_layer_equal", "LRU per layer (even)", "one LRU per layer, budget split evenly", "per_layer"),
    Policy("lru_layer_alloc", "LRU per layer (allocated)",
           "one LRU per layer, budget allocated greedily by each layer's curve", "per_layer", main=True),
    Policy("belady", "Belady (ceiling)", "Belady: evict the expert needed farthest ahead (offline ceiling)",
           "per_budget", code=2, main=True, ceiling=True),
)
BY_NAME: dict[str, Policy] = {p.name: p for p in POLICIES}
#: the names, in order
NAMES: tuple[str, ...] = tuple(p.name for p in POLICIES)
#: the policies the narrowed chart shows
MAIN: frozenset[str] = frozenset(p.name for p in POLICIES if p.main)
#: per-budget policy -> its kernel code (tui/analysis/_kernels.py ``POLICY_*``)
KERNEL_CODES: dict[str, int] = {p.name: p.code for p in POLICIES if p.code is not None}


def policy(name: str) -> Policy:
    """The policy called ``name``. Raises ValueError naming the known ones."""
    got = BY_NAME.get(name)
    if got is None:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(NAMES)}")
    return got


def label(name: str) -> str:
    """The short label of ``name`` (the name itself for one not in the registry)."""
    got = BY_NAME.get(name)
    return got.label if got is not None else name
