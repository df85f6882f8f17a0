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


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping): a fixed integer hash, the same on every
    platform and numpy version (no floating point, no generator stream)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def zipf_routing(n_tokens: int, n_layer: int = 48, n_expert: int = 128, k: int = 8, seed: int = 0,
                 first_token: int = 0, chunk: int = 1024) -> np.ndarray:
    """int16 [n_tokens, n_layer, k]: top-k distinct experts per token and layer, each layer's
    popularity Zipf (weight 2^24 // rank) over its own permutation of the experts. Integer
    arithmetic only, so a token's routing depends on (seed, token, layer) alone: the traces the
    scale tests and benchmarks share (tests/analysis/test_scale.py, benchmarks/bench_whatif.py),
    generated in chunks of ``chunk`` tokens so a 10^7-lookup trace needs no large temporaries."""
    s = np.uint64(seed)
    lay = np.arange(n_layer, dtype=np.uint64)
    ex = np.arange(n_expert, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = _mix(s * np.uint64(1_000_003) + lay[:, None] * np.uint64(65_537) + ex[None, :])
    perm = np.argsort(keys, axis=1, kind="stable").astype(np.int64)  # rank -> expert, per layer
    weight = np.int64(1 << 24) // np.arange(1, n_expert + 1, dtype=np.int64)
    cw = np.cumsum(weight)
    total = np.uint64(int(cw[-1]))
    out = np.empty((n_tokens, n_layer, k), dtype=np.int16)
    for c0 in range(0, n_tokens, chunk):
        m = min(chunk, n_tokens - c0)
        t = np.arange(first_token + c0, first_token + c0 + m, dtype=np.uint64)
        base = ((t[:, None, None] * np.uint64(n_layer) + lay[None, :, None]) * np.uint64(k)
                + np.arange(k, dtype=np.uint64)[None, None, :])
        with np.errstate(over="ignore"):
            base = base * np.uint64(64) + s * np.uint64(0x5851F42D4C957F2D)
        rank = np.searchsorted(cw, (_mix(base) % total).astype(np.int64), side="right")
        draw = perm[lay.astype(np.int64)[None, :, None], rank]
        for attempt in range(1, 64):  # redraw a slot that repeats an earlier slot of its row
            dup = np.zeros(draw.shape, dtype=bool)
            for j in range(1, k):
                dup[:, :, j] = (draw[:, :, :j] == draw[:, :, j:j + 1]).any(axis=2)
            if not dup.any():
                break
            ti, li, ji = np.nonzero(dup)
            with np.errstate(over="ignore"):
                h = _mix(base[ti, li, ji] + np.uint64(attempt))
            r2 = np.searchsorted(cw, (h % total).astype(np.int64), side="right")
            draw[ti, li, ji] = perm[li, r2]
        else:
            raise AssertionError("zipf_routing: could not draw distinct experts")
        out[c0:c0 + m] = draw
    return out


#: the layer sizes of the scale traces: two expert sizes, as the real 48-layer Qwen trace has
SCALE_LAYER_BYTES = [3059712 if il % 3 == 0 else 2654208 for il in range(48)]


def scale_lookups(n_lookups: int, seed: int = 0, prefill_tokens: int = 32) -> Lookups:
    """About ``n_lookups`` lookups of a 48-layer, 128-expert, top-8 run: a ``prefill_tokens``
    prompt (one batch per layer), then decode tokens (:func:`zipf_routing`)."""
    n_tok = max(1, n_lookups // (48 * 8))
    r = zipf_routing(prefill_tokens + n_tok, seed=seed)
    return from_routing(r[prefill_tokens:], SCALE_LAYER_BYTES, 128, r[:prefill_tokens] if prefill_tokens else None)
