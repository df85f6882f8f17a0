"""Binary routing traces: Strata's ``--dump-routing`` layout written by extended-strata-moe's
``tools/routing_trace`` (moe-cache-reference.md "Routing trace format").

One record per token and MoE layer, little-endian, no header::

    int32 layer, int32 k, k x int32 expert id, k x float32 weight

(``routing_trace`` writes the weights as 0; nothing downstream reads them.) A record's token is
its occurrence within its layer: the n-th record of layer L is token n, whether the file is
written token by token or layer by layer within a batch.

:func:`parse_routing_bin` never raises on content: the records up to the first one that cannot
be a record (a negative layer, k outside 1..:data:`K_MAX`, an id outside 0..:data:`EXPERT_MAX`
or the given ``n_expert``, a cut-off tail) are kept and the rest is reported as one
:class:`~bmoe_top.parsers.textio.Problem` (the format has no markers to resynchronise on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .textio import Problem

__all__ = ["RoutingBin", "parse_routing_bin", "looks_like_routing_bin", "routing_bin_bytes", "K_MAX",
           "LAYER_MAX", "EXPERT_MAX"]

#: bounds a record must respect (sizes read from a file never drive an allocation unchecked)
K_MAX = 256
LAYER_MAX = 4096
EXPERT_MAX = 65536


@dataclass(slots=True)
class RoutingBin:
    """Parsed records. ``layer``, ``token``, ``k`` int64 [n_records]; ``experts`` int32
    [n_records, k_max] (-1 past a record's k); ``weights`` float32 [n_records, k_max] (NaN past
    its k); ``n_layer`` (max layer + 1), ``n_tokens`` (the most records any layer has),
    ``k_max``; ``bytes_used`` of the input; ``problems``. When every record has the same k (the
    usual file), ``experts`` and ``weights`` are views of the parsed bytes, not copies: read-only
    for ``bytes``, and changed by a change of a ``bytearray`` the bytes came from."""

    layer: npt.NDArray[np.int64]
    token: npt.NDArray[np.int64]
    k: npt.NDArray[np.int64]
    experts: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    n_layer: int
    n_tokens: int
    k_max: int
    bytes_used: int
    problems: list[Problem] = field(default_factory=list)

    @property
    def n_records(self) -> int:
        return int(self.layer.shape[0])

    def routing(self) -> npt.NDArray[np.int64]:
        """int64 [n_tokens, n_layer, k_max] expert ids, -1 where a token has no record for a
        layer (a layer without MoE, or a token the last layer did not route)."""
        out = np.full((self.n_tokens, self.n_layer, self.k_max), -1, dtype=np.int64)
        if self.n_records:
            out[self.token, self.layer, :] = self.experts
        return out


def _problem(index: int, offset: int, reason: str) -> Problem:
    return Problem(0, f"record {index} at byte {offset}", reason)


def parse_routing_bin(data: bytes, n_expert: int | None = None, n_layer: int | None = None) -> RoutingBin:
    """Parse a binary routing trace. ``n_expert`` / ``n_layer`` (from the model, when known)
    tighten the range checks. Never raises on content."""
    n = len(data)
    emax = min(EXPERT_MAX, n_expert) if n_expert else EXPERT_MAX
    lmax = min(LAYER_MAX, n_layer) if n_layer else LAYER_MAX
    problems: list[Problem] = []
    # a fast path for the common file whose records all have the same k: its records are kept as
    # a count (no per-record objects), the general walk's in lists
    n_fast = 0
    k0 = 0
    offsets: list[int] = []
    ks: list[int] = []
    pos = 0
    idx = 0
    head = np.frombuffer(data, dtype="<i4", count=min(n // 4, 2)) if n >= 8 else np.zeros(0, dtype=np.int32)
    k0 = int(head[1]) if head.shape[0] == 2 else 0
    if 1 <= k0 <= K_MAX and n >= 8 + 8 * k0:
        rec = 8 + 8 * k0
        m = n // rec
        words = np.frombuffer(data, dtype="<i4", count=m * rec // 4).reshape(m, rec // 4)
        same = words[:, 1] == k0
        good = same & (words[:, 0] >= 0) & (words[:, 0] < lmax)
        ids = words[:, 2:2 + k0].view("<u4")  # a negative id reads as >= 2^31: one comparison
        good &= (ids < emax).all(axis=1)
        first_bad = int(np.argmin(good)) if not good.all() else m
        n_fast = first_bad
        pos = first_bad * rec
        idx = first_bad
    # the general walk (different k, or past the fast path's first odd record)
    while pos < n:
        if n - pos < 8:
            problems.append(_problem(idx, pos, f"{n - pos} trailing bytes: not a whole record header"))
            break
        lay, k = (int(v) for v in np.frombuffer(data, dtype="<i4", count=2, offset=pos))
        if not 0 <= lay < lmax or not 1 <= k <= K_MAX:
            problems.append(_problem(idx, pos, f"not a record (layer {lay}, k {k}): {n - pos} bytes ignored"))
            break
        size = 8 + 8 * k
        if n - pos < size:
            problems.append(_problem(idx, pos, f"cut-off record: needs {size} bytes, {n - pos} left"))
            break
        ids = np.frombuffer(data, dtype="<i4", count=k, offset=pos + 8)
        if ((ids < 0) | (ids >= emax)).any():
            problems.append(_problem(idx, pos, f"expert id out of range in layer {lay}: {n - pos} bytes ignored"))
            break
        offsets.append(pos)
        ks.append(k)
        pos += size
        idx += 1
    fast_rec = 8 + 8 * k0
    off = np.concatenate([np.arange(n_fast, dtype=np.int64) * fast_rec, np.asarray(offsets, dtype=np.int64)])
    k_arr = np.concatenate([np.full(n_fast, k0, dtype=np.int64), np.asarray(ks, dtype=np.int64)])
    nr = int(off.shape[0])
    k_max = int(k_arr.max()) if nr else 0
    if nr and (k_arr == k_max).all() and (np.diff(off) == 8 + 8 * k_max).all():
        # every record the same k, back to back: the ids and weights are views of ``data``
        rec = 8 + 8 * k_max
        words = np.frombuffer(data, dtype="<i4", count=nr * rec // 4, offset=int(off[0])).reshape(nr, rec // 4)
        layer = words[:, 0].astype(np.int64)
        experts = words[:, 2:2 + k_max]
        weights = words[:, 2 + k_max:].view("<f4")
    else:
        experts = np.full((nr, k_max), -1, dtype=np.int32)
        weights = np.full((nr, k_max), np.nan, dtype=np.float32)
        layer = np.zeros(nr, dtype=np.int64)
        for r, (o, k) in enumerate(zip(off.tolist(), k_arr.tolist())):
            layer[r] = int(np.frombuffer(data, dtype="<i4", count=1, offset=o)[0])
            experts[r, :k] = np.frombuffer(data, dtype="<i4", count=k, offset=o + 8)
            weights[r, :k] = np.frombuffer(data, dtype="<f4", count=k, offset=o + 8 + 4 * k)
    # token = occurrence of the record within its layer
    token = np.zeros(nr, dtype=np.int64)
    if nr:
        order = np.argsort(layer, kind="stable")
        sl = layer[order]
        starts = np.flatnonzero(np.concatenate([[True], sl[1:] != sl[:-1]]))
        run = np.arange(nr) - np.repeat(starts, np.diff(np.append(starts, nr)))
        token[order] = run
    nl = int(layer.max()) + 1 if nr else 0
    nt = int(token.max()) + 1 if nr else 0
    # pos stops at the first byte that is not part of a good record
    return RoutingBin(layer, token, k_arr, experts, weights, nl, nt, k_max, pos, problems)


def looks_like_routing_bin(data: bytes) -> bool:
    """True when the first bytes parse as at least two plausible records (the format has no magic)."""
    rb = parse_routing_bin(data[: 64 * 1024])
    return rb.n_records >= 2 and rb.bytes_used >= min(len(data), 64 * 1024) - (8 + 8 * K_MAX)


def routing_bin_bytes(layer: npt.ArrayLike, experts: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> bytes:
    """Serialize records (``layer`` int [n], ``experts`` int [n, k], ``weights`` float [n, k] or
    None for zeros, as ``routing_trace`` writes): the inverse of :func:`parse_routing_bin` for
    traces and tests."""
    lay = np.asarray(layer, dtype=np.int64).reshape(-1)
    ex = np.asarray(experts, dtype=np.int64)
    if ex.ndim != 2 or ex.shape[0] != lay.shape[0]:
        raise ValueError("experts must be [n_records, k]")
    k = ex.shape[1]
    w = np.zeros(ex.shape, dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
    rec = np.empty((lay.shape[0], 2 + 2 * k), dtype="<i4")
    rec[:, 0] = lay
    rec[:, 1] = k
    rec[:, 2:2 + k] = ex
    rec[:, 2 + k:] = w.astype("<f4").view("<i4")
    return rec.tobytes()
