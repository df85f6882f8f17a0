"""The diagnosis: what is wrong with a run, from its own numbers (docs/diagnosis.md).

:func:`facts` reads what the rules need from a :class:`~bmoe_top.tui.model.run.RunModel` once
(the newest :data:`WINDOW_ROWS` token rows, the run's first steady window, the cache, the device
sidecar, the routing held); each rule of :data:`RULES` is a small pure function of those
:class:`Facts` that returns a :class:`Finding` or None. A rule whose inputs are absent does not
fire (absent is not zero), and every finding carries the number behind it (a catalogue quantity's
key and its value) and the threshold it crossed. :func:`diagnose` runs them all, worst first.

``path`` (resident, streaming serial, streaming with overlap, prefetch on; plain mmap for a
process attached by ``--pid``) and ``bottleneck`` (compute, flash wait, stall, cache management,
page faults) say what ran and where its newest window's wall time went; both are None when the
run does not say. No Textual or Rich import: ``bmoe_top.tui.present.diagnosis`` words the line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.model.run import RunModel

__all__ = [
    "BATT_HOT_C", "COLLAPSE_RATIO", "CPU_HOT_C", "DEAD_CACHE_HIT_PCT", "FLASH_DOMINANT_SHARE", "MAJFLT_RISE_RATIO",
    "MAJFLT_TOKEN_MIN", "MEM_AVAILABLE_LOW_MIB", "MEM_FLOOR_LOW_MIB", "MGMT_SHARE", "PAGE_FAULT_BOTTLENECK_TOK",
    "PROBE_SHARE", "PROFILE_DROP_PT", "RULES", "WARMUP_ROWS", "WINDOW_ROWS", "Facts", "Finding", "diagnose",
    "diagnose_memory", "facts", "running_path",
]

#: Token rows of "the last window" (the title's newest rows: ``recent.tok_s``).
WINDOW_ROWS = 32
#: Rows the cache warms over before the first steady window starts (a cold cache's first tokens
#: read every expert they route and are not the run's steady speed).
WARMUP_ROWS = 16
#: A hit rate under this (%) with a budget below one token's cycle: LRU evicts each expert before
#: it comes round again.
DEAD_CACHE_HIT_PCT = 5.0
#: Cache management over this share of the token's wall time.
MGMT_SHARE = 0.20
#: Flash wait over this share of the wall time dominates the token.
FLASH_DOMINANT_SHARE = 0.50
#: Reads during the flash wait slower than this share of the probed bandwidth leave the device idle.
PROBE_SHARE = 0.50
#: MemAvailable under this (MiB) at any row of the window: the page cache has no room.
MEM_AVAILABLE_LOW_MIB = 512.0
#: The device sidecar's MemAvailable floor under this (MiB): memory pressure during the run.
MEM_FLOOR_LOW_MIB = 256.0
#: Major faults per token of the window at least this many ...
MAJFLT_TOKEN_MIN = 10.0
#: ... and this many times the first steady window's: they are rising.
MAJFLT_RISE_RATIO = 2.0
#: Major faults per token that make page faults the bottleneck of a run that times no flash wait.
PAGE_FAULT_BOTTLENECK_TOK = 100.0
#: CPU temperature (°C) at which phone and laptop SoCs throttle.
CPU_HOT_C = 85.0
#: Battery temperature (°C) at which Android's thermal service throttles.
BATT_HOT_C = 45.0
#: The window's tok/s under this share of the first steady window's: a collapse.
COLLAPSE_RATIO = 0.5
#: The profile's hot set covers this many points less of the newest routing than of the first.
PROFILE_DROP_PT = 20.0

_OFF = frozenset({"0", "false", "False", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule that fired: ``rule`` (its id), ``severity`` (``"warning"`` | ``"critical"``),
    ``path`` and ``bottleneck`` (as :func:`diagnose` saw them; None = not known), ``change`` (the
    first thing to change, in words), ``quantity`` (a catalogue key: what ``value`` is, its unit
    and format), ``value`` and ``threshold`` (the number behind it and the line it crossed, in the
    quantity's unit), ``against`` (the number it was compared with, same unit; None when the
    threshold alone decides)."""

    rule: str
    severity: str
    path: str | None
    bottleneck: str | None
    change: str
    quantity: str
    value: float
    threshold: float
    against: float | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules read (None = absent). Times are means over the newest :data:`WINDOW_ROWS`
    token rows (ms per token); ``steady_*`` the same over the first steady window (rows
    ``[WARMUP_ROWS, WARMUP_ROWS + WINDOW_ROWS)``, only when the run has a newer window apart
    from it); ``cycle_mib``: the bytes one token's routed experts take (its reads over its miss
    share); ``probe_mb_s``: the best read bandwidth ``bmoe-top probe --remember`` measured (MB/s,
    10^6 bytes); ``cover_pct`` / ``steady_cover_pct``: the share of routed lookups the profile
    ranks, over the newest window and the oldest routing held."""

    path: str | None = None
    mode: str = "unknown"
    rows: int = 0
    wall_ms: float | None = None
    compute_ms: float | None = None
    flash_ms: float | None = None
    mgmt_ms: float | None = None
    read_mib: float | None = None
    hit_pct: float | None = None
    budget_mib: float | None = None
    majflt: float | None = None
    steady_majflt: float | None = None
    mem_available_mib: float | None = None
    tok_s: float | None = None
    steady_tok_s: float | None = None
    cpu_temp_c: float | None = None
    batt_temp_c: float | None = None
    mem_floor_mib: float | None = None
    probe_mb_s: float | None = None
    cover_pct: float | None = None
    steady_cover_pct: float | None = None
    steady_rows: tuple[int, int] | None = field(default=None)

    @property
    def cycle_mib(self) -> float | None:
        """One token's routed experts in MiB: read MiB / miss share (None below 1 % misses)."""
        if self.read_mib is None or self.hit_pct is None:
            return None
        miss = 1.0 - self.hit_pct / 100.0
        return self.read_mib / miss if miss >= 0.01 else None

    @property
    def bottleneck(self) -> str | None:
        """Where the window's wall went most: ``compute``, ``flash wait`` (serial), ``stall``
        (overlap: the compute waited for the lanes), ``cache management``; ``page faults`` for a
        run that times no flash wait and faults over :data:`PAGE_FAULT_BOTTLENECK_TOK` a token."""
        if self.flash_ms is None and self.majflt is not None and self.majflt >= PAGE_FAULT_BOTTLENECK_TOK:
            return "page faults"
        parts = {"compute": self.compute_ms, "flash wait" if self.mode != "overlap" else "stall": self.flash_ms,
                 "cache management": self.mgmt_ms}
        known = {k: v for k, v in parts.items() if v is not None and v > 0}
        return max(known, key=lambda k: known[k]) if known else None

    def share(self, ms: float | None) -> float | None:
        """``ms`` over the window's wall time (None when either is absent)."""
        if ms is None or self.wall_ms is None or self.wall_ms <= 0:
            return None
        return ms / self.wall_ms


def _num(x: object) -> float | None:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _mean(v: np.ndarray) -> float | None:
    finite = v[np.isfinite(v)]
    return float(finite.mean()) if finite.size else None


def _flag(run: RunModel, *keys: str) -> bool | None:
    """The first of ``keys`` the run header or BMOE_READY gives, as a flag (None: neither)."""
    ready = run.ready or {}
    for k in keys:
        for src in (run.meta, ready):
            if k in src:
                return str(src[k]).strip() not in _OFF
    return None


def running_path(run: RunModel) -> str | None:
    """``resident``, ``streaming serial``, ``streaming with overlap`` (``, prefetch on``) from the
    run header's flags (``moe_stream``, ``overlap``, ``prefetch``; BMOE_READY's ``stream``) or
    the rows (:meth:`RunModel.mode`); None when neither says."""
    with run.lock:
        stream = _flag(run, "moe_stream", "stream")
        if stream is False:
            return "resident"
        mode, _why = run.mode()
        if mode not in ("serial", "overlap"):
            return "streaming" if stream else None
        path = "streaming with overlap" if mode == "overlap" else "streaming serial"
        if _flag(run, "prefetch"):
            path += ", prefetch on"
        return path


def _window_mean(run: RunModel, name: str, lo: int, hi: int) -> float | None:
    if not run.tokens.has(name):
        return None
    st = run.column_stats(name, lo, hi)
    return _num(st.mean) if st.count else None


def _coverage(run: RunModel, newest: bool) -> float | None:
    """% of the routed lookups of the newest (or the oldest held) :data:`WINDOW_ROWS` decode tokens
    of routing whose expert the profile ranks (``expert_rank >= 0``). Reads a slice of the rows
    at the routing's end (or start) of a window's size: O(window), not O(rows held)."""
    rank = run.expert_rank
    r = run.routes
    if rank is None or r.n == 0:
        return None
    span = WINDOW_ROWS * max(1, run.n_layer or 1) * max(1, run.top_k or 1) * 2
    sel = slice(max(0, r.n - span), r.n) if newest else slice(0, min(r.n, span))
    tok = r.tok[sel]
    decode = tok >= 0  # prefill rows are -1 - turn
    if not decode.any():
        return None
    if newest:
        mask = decode & (tok > int(tok[decode].max()) - WINDOW_ROWS)
    else:
        first = int(tok[decode].min())
        mask = decode & (tok < first + WINDOW_ROWS)
    layer, expert = r.layer[sel][mask], r.expert[sel][mask]
    ok = (layer >= 0) & (layer < rank.shape[0]) & (expert >= 0) & (expert < rank.shape[1])
    if not ok.any():
        return None
    return 100.0 * float(np.mean(rank[layer[ok], expert[ok]] >= 0))


def facts(run: RunModel, probe_mb_s: float | None = None) -> Facts:
    """The :class:`Facts` of ``run`` now (its newest rows), and the probed bandwidth ``probe_mb_s``
    (MB/s) when the settings hold one. O(:data:`WINDOW_ROWS`) column reads, the routing of the
    newest and the oldest window held, and the run's exact history for the steady window."""
    with run.lock:
        n = run.tokens.n
        lo = max(0, n - WINDOW_ROWS)
        mode, _ = run.mode()
        bd = run.breakdown(lo, n) if n else None
        wall = _mean(bd["wall"]) if bd is not None else None
        flash = _mean(bd["flash"]) if bd is not None and run.tokens.has("stall_ms" if mode == "overlap" else "io_ms") \
            else None
        mgmt = _mean(bd["mgmt"]) if bd is not None and run.tokens.has("mgmt_ms") else None
        compute = None
        if bd is not None and wall is not None and (run.tokens.has("compute_ms") or flash is not None):
            compute = _mean(bd["compute"])
        steady = (WARMUP_ROWS, WARMUP_ROWS + WINDOW_ROWS) if n >= WARMUP_ROWS + 2 * WINDOW_ROWS else None
        steady_wall = _window_mean(run, "wall_ms", *steady) if steady else None
        budget = _num(run.budget_mib)
        if budget is None and run.tokens.has("cache_budget_mib") and n:
            budget = _num(run.tokens.last("cache_budget_mib"))
        if budget is None:
            budget = _num(run.meta.get("cache_mb"))
        hit = _num(run.tokens.last("cache_hit_pct")) if run.tokens.has("cache_hit_pct") and n else None
        if hit is not None and hit < 0:  # -1: no cache
            hit = None
        mem = None
        if run.tokens.has("mem_available_mib") and n:
            v = run.tokens.view("mem_available_mib", lo, n)
            mem = float(np.nanmin(v)) if np.isfinite(v).any() else None
        side = run.sidecar
        cpu = _num(side.get("cpu_temp_max_mC"))
        batt = _num(side.get("batt_temp_max_dC"))
        floor = _num(side.get("mem_avail_floor_kb"))
        cover = _coverage(run, newest=True)
        first_cover = _coverage(run, newest=False) if cover is not None and run.routes.max_tok >= 2 * WINDOW_ROWS \
            else None
        return Facts(
            path=running_path(run), mode=mode, rows=n - lo, wall_ms=wall, compute_ms=compute, flash_ms=flash,
            mgmt_ms=mgmt, read_mib=_window_mean(run, "read_mib", lo, n) if n else None, hit_pct=hit,
            budget_mib=budget, majflt=_window_mean(run, "majflt", lo, n) if n else None,
            steady_majflt=_window_mean(run, "majflt", *steady) if steady else None,
            mem_available_mib=mem, tok_s=1000.0 / wall if wall else None,
            steady_tok_s=1000.0 / steady_wall if steady_wall else None,
            cpu_temp_c=cpu / 1000.0 if cpu is not None else None,
            batt_temp_c=batt / 10.0 if batt is not None else None,
            mem_floor_mib=floor / 1024.0 if floor is not None else None,
            probe_mb_s=probe_mb_s if probe_mb_s is not None and probe_mb_s > 0 else None,
            cover_pct=cover, steady_cover_pct=first_cover, steady_rows=steady)


# -- the rules: Facts -> Finding | None ----------------------------------------------------------

def _finding(f: Facts, rule: str, severity: str, change: str, quantity: str, value: float, threshold: float,
             against: float | None = None) -> Finding:
    return Finding(rule, severity, f.path, f.bottleneck, change, quantity, value, threshold, against)


def budget_below_cycle(f: Facts) -> Finding | None:
    """The budget holds less than one token's routed experts and the cache hits under
    :data:`DEAD_CACHE_HIT_PCT`: LRU evicts every expert before it comes round again."""
    cycle = f.cycle_mib
    if f.budget_mib is None or f.budget_mib <= 0 or cycle is None or f.hit_pct is None:
        return None
    if f.budget_mib >= cycle or f.hit_pct >= DEAD_CACHE_HIT_PCT:
        return None
    return _finding(f, "budget_below_cycle", "critical",
                    "cache off (--cache-mb 0) or a bigger budget", "summary.budget_mib",
                    f.budget_mib, cycle)


def mgmt_share(f: Facts) -> Finding | None:
    """Cache management takes over :data:`MGMT_SHARE` of the token's wall time."""
    share = f.share(f.mgmt_ms)
    if share is None or share <= MGMT_SHARE:
        return None
    return _finding(f, "mgmt_share", "warning", "fewer evictions (a bigger budget, a profile)",
                    "recent.mgmt_pct", 100.0 * share, 100.0 * MGMT_SHARE)


def flash_below_probe(f: Facts) -> Finding | None:
    """The flash wait dominates (over :data:`FLASH_DOMINANT_SHARE` of wall) while the reads run
    under :data:`PROBE_SHARE` of the bandwidth the device was probed at."""
    share = f.share(f.flash_ms)
    if share is None or share <= FLASH_DOMINANT_SHARE or f.probe_mb_s is None or f.read_mib is None \
            or f.flash_ms is None or f.flash_ms <= 0:
        return None
    rate = f.read_mib * 1.048576 / (f.flash_ms / 1000.0)  # MB/s while the token waited
    if rate >= PROBE_SHARE * f.probe_mb_s:
        return None
    return _finding(f, "flash_below_probe", "warning", "more reads in flight (--io-threads)",
                    "recent.read_mb_s", rate, PROBE_SHARE * f.probe_mb_s, f.probe_mb_s)


def page_cache_starved(f: Facts) -> Finding | None:
    """MemAvailable under :data:`MEM_AVAILABLE_LOW_MIB` while major faults per token are over
    :data:`MAJFLT_TOKEN_MIN` and :data:`MAJFLT_RISE_RATIO` times the first steady window's."""
    if f.mem_available_mib is None or f.majflt is None or f.steady_majflt is None:
        return None
    if f.mem_available_mib >= MEM_AVAILABLE_LOW_MIB or f.majflt < MAJFLT_TOKEN_MIN \
            or f.majflt < MAJFLT_RISE_RATIO * f.steady_majflt:
        return None
    return _finding(f, "page_cache_starved", "critical", "lower --cache-mb (page cache starved)",
                    "token.mem_available_mib", f.mem_available_mib, MEM_AVAILABLE_LOW_MIB)


def device_thermal(f: Facts) -> Finding | None:
    """The device sidecar's CPU over :data:`CPU_HOT_C` or battery over :data:`BATT_HOT_C`."""
    if f.cpu_temp_c is not None and f.cpu_temp_c >= CPU_HOT_C:
        return _finding(f, "device_thermal", "warning", "cool the device or fewer threads",
                        "device.cpu_temp_max", f.cpu_temp_c, CPU_HOT_C)
    if f.batt_temp_c is not None and f.batt_temp_c >= BATT_HOT_C:
        return _finding(f, "device_thermal", "warning", "cool the device or fewer threads",
                        "device.batt_temp_max", f.batt_temp_c, BATT_HOT_C)
    return None


def device_memory(f: Facts) -> Finding | None:
    """The device sidecar's MemAvailable floor under :data:`MEM_FLOOR_LOW_MIB`."""
    if f.mem_floor_mib is None or f.mem_floor_mib >= MEM_FLOOR_LOW_MIB:
        return None
    return _finding(f, "device_memory", "warning", "lower --cache-mb (memory pressure)",
                    "device.mem_floor", f.mem_floor_mib, MEM_FLOOR_LOW_MIB)


def tok_s_collapse(f: Facts) -> Finding | None:
    """The window's tok/s under :data:`COLLAPSE_RATIO` of the run's first steady window's."""
    if f.tok_s is None or f.steady_tok_s is None or f.steady_tok_s <= 0:
        return None
    if f.tok_s >= COLLAPSE_RATIO * f.steady_tok_s:
        return None
    return _finding(f, "tok_s_collapse", "critical", "find what changed: heat, memory, context",
                    "recent.tok_s", f.tok_s, COLLAPSE_RATIO * f.steady_tok_s, f.steady_tok_s)


def profile_stale(f: Facts) -> Finding | None:
    """The profile's hot set covers :data:`PROFILE_DROP_PT` points less of the newest routing than
    of the oldest routing held."""
    if f.cover_pct is None or f.steady_cover_pct is None:
        return None
    if f.steady_cover_pct - f.cover_pct < PROFILE_DROP_PT:
        return None
    return _finding(f, "profile_stale", "warning", "a new profile (whatif --strp)",
                    "recent.profile_cover_pct", f.cover_pct, f.steady_cover_pct - PROFILE_DROP_PT,
                    f.steady_cover_pct)


#: Every rule, in the order the line prefers a finding of equal severity.
RULES: tuple[Callable[[Facts], Finding | None], ...] = (
    budget_below_cycle, page_cache_starved, tok_s_collapse, device_memory, device_thermal, flash_below_probe,
    mgmt_share, profile_stale,
)
_RANK = {"critical": 0, "warning": 1}


def evaluate(f: Facts) -> list[Finding]:
    """Every rule over ``f``: the findings, critical first, then in :data:`RULES` order."""
    out = [x for rule in RULES if (x := rule(f)) is not None]
    return sorted(out, key=lambda x: _RANK.get(x.severity, 2))


def diagnose(run: RunModel, probe_mb_s: float | None = None) -> tuple[Facts, list[Finding]]:
    """The facts of ``run`` and its findings (empty: no problem found)."""
    f = facts(run, probe_mb_s)
    return f, evaluate(f)


def diagnose_memory(m: MemoryModel) -> tuple[Facts, list[Finding]]:
    """A process attached by ``--pid`` (plain mmap: the page cache holds the experts): page faults
    are its bottleneck at :data:`PAGE_FAULT_BOTTLENECK_TOK` major faults a token, and its page
    cache is starved when MemAvailable is low and faults per token rise against the first
    reading's (:attr:`MemoryModel.first_faults_per_token`). Faults per token need the server's
    token count (``--metrics``): without it those rules do not fire."""
    with m.lock:
        fig = m._figures()
        system = m.newest.system if m.newest is not None else None
        avail = system.mem_available if system is not None else None
        f = Facts(path="plain mmap", mode="none", majflt=fig.faults_per_token,
                  steady_majflt=m.first_faults_per_token,
                  mem_available_mib=avail / 1048576.0 if avail is not None else None)
    return f, evaluate(f)


def as_mapping(x: Finding) -> Mapping[str, object]:
    """A finding's fields by name."""
    return {k: getattr(x, k) for k in Finding.__slots__}
