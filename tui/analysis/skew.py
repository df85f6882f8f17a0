"""Routing-skew statistics: how concentrated the router's choices are, which decides how much
any cache can do. docs/analysis.md "Routing skew".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _kernels as K
from .lookups import Lookups

__all__ = ["Skew", "routing_skew"]


@dataclass(frozen=True, slots=True)
class Skew:
    """Over the decode lookups. ``unique_experts``: distinct (layer, expert) pairs routed;
    ``unique_per_layer``: their mean per MoE layer (out of ``n_expert``); ``top8_share_pct``:
    share of a layer's lookups that went to its 8 most-routed experts (mean over layers);
    ``entropy_bits``: Shannon entropy of a layer's expert distribution (mean over layers; the
    maximum, all experts alike, is ``entropy_max_bits`` = log2 n_expert); ``reuse_tokens_p50`` /
    ``p90``: decode tokens between two lookups of the same expert (NaN when nothing is reused);
    ``never_reused_pct``: share of the routed experts looked up only once."""

    unique_experts: int
    unique_per_layer: float
    top8_share_pct: float
    entropy_bits: float
    entropy_max_bits: float
    reuse_tokens_p50: float
    reuse_tokens_p90: float
    never_reused_pct: float


def routing_skew(lk: Lookups) -> Skew:
    """Skew statistics of the decode lookups of ``lk`` (all NaN/0 without decode lookups)."""
    dec, _every = lk.item_counts()
    counts = dec.reshape(lk.n_layer, lk.n_expert)
    per_layer = counts.sum(axis=1)
    moe = np.flatnonzero(per_layer)
    emax = float(np.log2(lk.n_expert)) if lk.n_expert > 1 else 0.0
    if moe.size == 0:
        nan = float("nan")
        return Skew(0, nan, nan, nan, emax, nan, nan, nan)
    c = counts[moe].astype(np.float64)
    tot = c.sum(axis=1)
    top = np.sort(c, axis=1)[:, ::-1][:, :8].sum(axis=1)
    p = c / tot[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log2(p), 0.0).sum(axis=1)
    # decode tokens between consecutive decode lookups of each expert (one compiled pass)
    gaps: npt.NDArray[np.integer[Any]] = np.empty(int(dec.sum()), dtype=np.int32 if lk.n_decode_tokens < 2**31
                                                   else np.int64)
    gaps = gaps[: K.reuse_gaps(lk.item, lk.decode, lk.token, lk.n_items, gaps)]
    held: Any = gaps  # integers: np.percentile interpolates them as the floats they equal
    reuse = [float(v) for v in np.percentile(held, [50.0, 90.0])] if gaps.size else [float("nan")] * 2
    routed = counts[counts > 0]
    return Skew(
        unique_experts=int((counts > 0).sum()),
        unique_per_layer=float((counts[moe] > 0).sum(axis=1).mean()),
        top8_share_pct=float(100.0 * (top / tot).mean()),
        entropy_bits=float(ent.mean()),
        entropy_max_bits=emax,
        reuse_tokens_p50=reuse[0],
        reuse_tokens_p90=reuse[1],
        never_reused_pct=float(100.0 * (routed == 1).sum() / routed.size),
    )
