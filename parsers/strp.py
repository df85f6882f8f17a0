"""STRP expert profiles, moe-cache-reference.md "Profile format (STRP)".

Little-endian::

    0   4 bytes  magic "STRP"
    4   u32      version, 1
    8   u32      n_layers
    12  u32      n_expert
    16  u32      slots the profile was made for (informational)
    20  u32      n_ranked
    24  n_ranked x (u16 layer, u16 expert)   the pairs, hottest first
    ... n_layers x n_expert x i32            each pair's rank, -1 if unranked

:func:`read_strp` validates what llama.cpp validates (magic, version, n_ranked <=
n_layers x n_expert, every pair's range) plus the file's length and parsers/limits.py's caps on
n_layers and n_expert (so a 24-byte file cannot ask for a 16 GiB rank table), and raises
:class:`StrpError` with one clear sentence. :func:`check_dims` compares a profile with a model's
n_layer x n_expert. :func:`write_strp` writes one; :func:`profile_from_counts` ranks experts
by a (layer, expert) count table, hottest first. As implemented: docs/metrics.md "Profiles".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bmoe_top.outfile import write_atomic

from .limits import dims_problem

__all__ = ["StrpError", "StrpProfile", "read_strp", "parse_strp", "write_strp", "strp_bytes",
           "check_dims", "profile_from_counts", "MAGIC", "VERSION"]

MAGIC = b"STRP"
VERSION = 1
_HEADER = struct.Struct("<4sIIIII")
_PAIR = np.dtype([("layer", "<u2"), ("expert", "<u2")])


class StrpError(ValueError):
    """An STRP file that cannot be used; the message says why in one sentence."""


@dataclass(slots=True)
class StrpProfile:
    """A profile. ``pairs``: int array (n_ranked, 2) of (layer, expert), hottest first.
    ``ranks``: int32 array (n_layers, n_expert), -1 where unranked, or ``None`` when the file
    ended after the pairs (llama.cpp does not read the table). ``warnings``: what was odd
    but usable."""

    n_layers: int
    n_expert: int
    slots: int
    pairs: np.ndarray
    ranks: np.ndarray | None = None
    version: int = VERSION
    warnings: list[str] = field(default_factory=list)

    @property
    def n_ranked(self) -> int:
        """Ranked (layer, expert) pairs."""
        return int(self.pairs.shape[0])

    def rank_map(self) -> np.ndarray:
        """(n_layers, n_expert) int32: each pair's rank (0 = hottest), -1 if unranked,
        derived from ``pairs`` (the table in the file is informational)."""
        m = np.full((self.n_layers, self.n_expert), -1, dtype=np.int32)
        if self.n_ranked:
            m[self.pairs[:, 0], self.pairs[:, 1]] = np.arange(self.n_ranked, dtype=np.int32)
        return m

    def per_layer(self) -> dict[int, list[int]]:
        """Layer -> its ranked experts, hottest first."""
        out: dict[int, list[int]] = {}
        for il, e in self.pairs.tolist():
            out.setdefault(il, []).append(e)
        return out


def parse_strp(data: bytes, name: str = "profile") -> StrpProfile:
    """Parse STRP bytes. Raises :class:`StrpError` (bad magic, version, dimensions, truncated,
    pair out of range, duplicate pair)."""
    if len(data) < _HEADER.size:
        raise StrpError(f"{name}: too short for an STRP header ({len(data)} bytes, need {_HEADER.size})")
    magic, version, n_layers, n_expert, slots, n_ranked = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise StrpError(f"{name}: not an STRP profile (magic {magic!r}, expected b'STRP')")
    if version != VERSION:
        raise StrpError(f"{name}: STRP version {version} is not supported (only {VERSION})")
    if n_layers == 0 or n_expert == 0 or n_layers > 0xFFFF or n_expert > 0xFFFF:
        raise StrpError(f"{name}: bad dimensions n_layers={n_layers} n_expert={n_expert}")
    too_big = dims_problem(n_layer=n_layers, n_expert=n_expert)
    if too_big is not None:  # the tables below are n_layers x n_expert: never sized from a bad header
        raise StrpError(f"{name}: profile refused: {too_big}")
    if n_ranked > n_layers * n_expert:
        raise StrpError(f"{name}: n_ranked={n_ranked} exceeds n_layers x n_expert = {n_layers * n_expert}")
    end_pairs = _HEADER.size + 4 * n_ranked
    if len(data) < end_pairs:
        raise StrpError(f"{name}: truncated: {n_ranked} pairs need {end_pairs} bytes, file has {len(data)}")
    raw = np.frombuffer(data, dtype=_PAIR, count=n_ranked, offset=_HEADER.size)
    pairs = np.empty((n_ranked, 2), dtype=np.int64)
    pairs[:, 0] = raw["layer"]
    pairs[:, 1] = raw["expert"]
    if n_ranked:
        bad_l = np.nonzero(pairs[:, 0] >= n_layers)[0]
        if bad_l.size:
            i = int(bad_l[0])
            raise StrpError(f"{name}: pair {i} has layer {pairs[i, 0]} >= n_layers {n_layers}")
        bad_e = np.nonzero(pairs[:, 1] >= n_expert)[0]
        if bad_e.size:
            i = int(bad_e[0])
            raise StrpError(f"{name}: pair {i} has expert {pairs[i, 1]} >= n_expert {n_expert}")
        flat = pairs[:, 0] * n_expert + pairs[:, 1]
        if np.unique(flat).size != n_ranked:
            raise StrpError(f"{name}: a (layer, expert) pair appears twice")
    warnings: list[str] = []
    table = n_layers * n_expert * 4
    ranks = None
    rest = len(data) - end_pairs
    if rest == 0:
        warnings.append("no rank table after the pairs (llama.cpp does not read it)")
    elif rest == table:
        ranks = np.frombuffer(data, dtype="<i4", count=n_layers * n_expert, offset=end_pairs)
        ranks = ranks.astype(np.int32).reshape(n_layers, n_expert)
    elif rest > table:
        ranks = np.frombuffer(data, dtype="<i4", count=n_layers * n_expert, offset=end_pairs)
        ranks = ranks.astype(np.int32).reshape(n_layers, n_expert)
        warnings.append(f"{rest - table} trailing bytes after the rank table ignored")
    else:
        warnings.append(f"rank table truncated ({rest} of {table} bytes) and ignored")
    return StrpProfile(n_layers=n_layers, n_expert=n_expert, slots=slots, pairs=pairs,
                       ranks=ranks, version=version, warnings=warnings)


def read_strp(path: str | Path) -> StrpProfile:
    """Read and validate an STRP file. Raises :class:`StrpError` (also for an unreadable file)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise StrpError(f"{p}: cannot read profile ({exc.strerror or exc})") from None
    return parse_strp(data, str(p))


def check_dims(profile: StrpProfile, n_layer: int, n_expert: int) -> str | None:
    """``None`` when the profile fits a model of n_layer x n_expert, else the warning text
    (the reference: such a profile is refused and the cache starts empty)."""
    if profile.n_layers != n_layer or profile.n_expert != n_expert:
        return (f"profile made for {profile.n_layers} layers x {profile.n_expert} experts, "
                f"model has {n_layer} x {n_expert}: profile refused, the cache starts empty")
    return None


def strp_bytes(profile: StrpProfile) -> bytes:
    """Serialize ``profile`` (rank table written from :meth:`StrpProfile.rank_map`)."""
    pairs = np.asarray(profile.pairs, dtype=np.int64).reshape(-1, 2)
    if pairs.size and (pairs[:, 0].max() >= profile.n_layers or pairs[:, 1].max() >= profile.n_expert
                       or pairs.min() < 0):
        raise StrpError("a pair is out of the profile's n_layers x n_expert range")
    head = _HEADER.pack(MAGIC, VERSION, profile.n_layers, profile.n_expert, profile.slots, pairs.shape[0])
    raw = np.empty(pairs.shape[0], dtype=_PAIR)
    raw["layer"] = pairs[:, 0]
    raw["expert"] = pairs[:, 1]
    prof = StrpProfile(profile.n_layers, profile.n_expert, profile.slots, pairs)
    return head + raw.tobytes() + prof.rank_map().astype("<i4").tobytes()


def write_strp(path: str | Path, profile: StrpProfile, force: bool = True) -> int:
    """Write ``profile`` to ``path`` atomically (bmoe_top.outfile.write_atomic: a new temporary file
    beside it, then a rename; a symbolic link at ``path`` is refused). An existing profile is
    replaced unless ``force`` is False. Returns bytes written. Raises ``OutputFileError`` (an
    ``OSError``) when the file cannot be written."""
    return write_atomic(path, strp_bytes(profile), force=force)


def profile_from_counts(counts: np.ndarray, slots: int = 0, min_count: float = 1) -> StrpProfile:
    """Rank (layer, expert) pairs by ``counts`` (shape (n_layers, n_expert): how often the
    router picked each, or a pick frequency), hottest first; ties broken by layer then expert.
    Pairs below ``min_count`` are left unranked."""
    c = np.asarray(counts)
    n_layers, n_expert = c.shape
    flat = c.reshape(-1)
    idx = np.nonzero(flat >= min_count)[0]
    # stable sort on -count keeps (layer, expert) order among ties
    order = idx[np.argsort(-flat[idx], kind="stable")]
    pairs = np.stack([order // n_expert, order % n_expert], axis=1).astype(np.int64)
    return StrpProfile(n_layers=n_layers, n_expert=n_expert, slots=slots, pairs=pairs)
