"""Synthetic routing for the analysis tests: skewed, seeded, with optional prefill."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.analysis.lookups import Lookups, from_routing


def random_routing(rng: np.random.Generator, n_tokens: int, n_layer: int, n_expert: int, k: int,
                   skew: float = 0.5) -> np.ndarray:
    """int64 [n_tokens, n_layer, k]: top-k distinct experts per token and layer, drawn from a
    per-layer Dirichlet(skew) popularity (small skew = a few hot experts)."""
    p = rng.dirichlet(np.full(n_expert, skew), size=n_layer)
    out = np.empty((n_tokens, n_layer, k), dtype=np.int64)
    for t in range(n_tokens):
        for il in range(n_layer):
            out[t, il] = rng.choice(n_expert, size=k, replace=False, p=p[il])
    return out


def random_lookups(rng: np.random.Generator, n_tokens: int = 20, n_layer: int = 3, n_expert: int = 6, k: int = 2,
                   prefill_tokens: int = 0, prefill_batch: int | None = None,
                   layer_bytes: list[int] | None = None) -> Lookups:
    """Lookups of a random run (sizes default to 1..3 units per layer)."""
    dec = random_routing(rng, n_tokens, n_layer, n_expert, k)
    pre = random_routing(rng, prefill_tokens, n_layer, n_expert, k) if prefill_tokens else None
    lb = layer_bytes if layer_bytes is not None else rng.integers(1, 4, size=n_layer).tolist()
    return from_routing(dec, lb, n_expert, pre, prefill_batch)
