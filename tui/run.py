"""The one run model every source feeds, and every widget renders from.

No Textual import here: sources (file replay, child session, session socket, metrics poll, audit
tail) call the ``ingest_*`` / ``load_*`` methods from their own threads under :attr:`RunModel.lock`;
the app polls :attr:`RunModel.version` on a timer and repaints at a bounded rate.

Shapes and units
----------------
* Per-token columns (:attr:`RunModel.tokens`): one row per generated (decode) token, float64,
  NaN where the source did not send the value. Canonical names: ``step``, ``steps``, ``turn``,
  ``t`` (unix s, when the source timestamps lines), ``wall_ms``, ``io_ms``, ``compute_ms``,
  ``mgmt_ms``, ``stall_ms``, ``read_mib`` (MiB read from flash this token; CSV ``read_bytes`` / 2**20,
  BMOE ``read_mb``), ``cache_hit_pct`` (cumulative, -1 = no cache), ``load_mib``/``load_ms``
  (``BMOE_LOAD``), ``text_end`` (length of the turn's answer after this token), plus every extra
  numeric column the source had (``majflt``, ``cpu_ms``, ``rss_mib``, ...).
* Routing rows (:attr:`RunModel.routes`): one row per (token, layer, routed expert): ``tok`` (token
  index, -1 - turn for prefill rows), ``layer``, ``expert``, ``hit`` (1 resident when routed, 0
  miss). From a route-trace CSV or ``BMOE_ROUTE`` lines.
* Resident map (:attr:`RunModel.resident`): bool ``[n_layer, n_expert]`` from ``BMOE_RESIDENT``, or
  None when the source never said.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Token columns every run has (NaN when the source did not send them).
BASE_COLUMNS = (
    "step", "steps", "turn", "t", "wall_ms", "io_ms", "compute_ms", "mgmt_ms", "stall_ms",
    "read_mib", "cache_hit_pct", "load_mib", "load_ms", "text_end",
)

_MIB = float(1 << 20)
_HANDLERS: dict[type, str] = {}  # record class -> RunModel handler name (ingest is per line)


class Columns:
    """Named float64 columns grown in chunks (capacity doubles; never per append).

    ``view(name)`` returns a read-only view of the first ``n`` rows; a column that no row ever
    set is all NaN and reported by :meth:`has` as absent.
    """

    def __init__(self, names: Iterable[str] = (), capacity: int = 4096, dtype=np.float64):
        self._dtype = dtype
        self._cap = max(16, capacity)
        self.n = 0
        self._cols: dict[str, np.ndarray] = {}
        self._seen: set[str] = set()
        for name in names:
            self._add(name)

    def _add(self, name: str) -> np.ndarray:
        col = np.full(self._cap, np.nan, dtype=self._dtype)
        self._cols[name] = col
        return col

    def _grow(self, need: int) -> None:
        cap = self._cap
        while cap < need:
            cap *= 2
        if cap == self._cap:
            return
        for name, col in self._cols.items():
            new = np.full(cap, np.nan, dtype=self._dtype)
            new[: self.n] = col[: self.n]
            self._cols[name] = new
        self._cap = cap

    @property
    def names(self) -> list[str]:
        return list(self._cols)

    def has(self, name: str) -> bool:
        """True when at least one row carried a value for ``name``."""
        return name in self._seen

    def append(self, row: dict[str, float]) -> int:
        """Append one row (missing names stay NaN); returns its index."""
        if self.n >= self._cap:
            self._grow(self.n + 1)
        i = self.n
        for name, value in row.items():
            if value is None:
                continue
            col = self._cols.get(name)
            if col is None:
                col = self._add(name)
            col[i] = value
            self._seen.add(name)
        self.n = i + 1
        return i

    def set(self, i: int, name: str, value: float) -> None:
        col = self._cols.get(name)
        if col is None:
            col = self._add(name)
        col[i] = value
        self._seen.add(name)

    def extend(self, columns: dict[str, np.ndarray], n: int) -> None:
        """Append ``n`` rows given as whole arrays (length ``n`` each)."""
        self._grow(self.n + n)
        for name, arr in columns.items():
            col = self._cols.get(name)
            if col is None:
                col = self._add(name)
            col[self.n: self.n + n] = arr[:n]
            if n and not np.all(np.isnan(np.asarray(arr[:n], dtype=np.float64))):
                self._seen.add(name)
        self.n += n

    def view(self, name: str, stop: int | None = None) -> np.ndarray:
        """The first ``stop`` (default all) values of ``name``; all-NaN when absent."""
        stop = self.n if stop is None else min(stop, self.n)
        col = self._cols.get(name)
        if col is None:
            return np.full(stop, np.nan)
        v = col[:stop]
        v = v.view()
        v.flags.writeable = False
        return v

    def last(self, name: str) -> float:
        """Last value of ``name`` (NaN when absent or no rows)."""
        if not self.n or name not in self._cols:
            return math.nan
        return float(self._cols[name][self.n - 1])


class RouteRows:
    """Routing rows (tok, layer, expert, hit) in int32 columns grown in chunks, with the
    aggregates the views need kept incrementally (so a repaint never rescans every row):

    * per (layer, token) routed and hit counts, for the layer x token heatmap;
    * a running maximum of ``tok`` over rows, so "rows before token t" is one binary search
      (rows arrive in time order; a later turn's prefill rows have negative ``tok``);
    * a cursor accumulator of per (layer, expert) routed/hit counts and last-routing hit,
      moved forward (or back, for counts) by the rows between two cursors.
    """

    def __init__(self, capacity: int = 8192):
        self._cap = capacity
        self.n = 0
        self._a = np.zeros((4, capacity), dtype=np.int32)
        self._cummax = np.zeros(capacity, dtype=np.int64)
        self._tl_cnt = np.zeros((0, 0), dtype=np.int32)  # [layer, token]
        self._tl_hit = np.zeros((0, 0), dtype=np.int32)
        self.max_tok = -1
        self.max_layer = -1
        self.max_expert = -1
        self._acc: dict[str, Any] | None = None

    def extend(self, tok: np.ndarray, layer: np.ndarray, expert: np.ndarray, hit: np.ndarray) -> None:
        tok = np.asarray(tok, dtype=np.int64)
        layer = np.asarray(layer, dtype=np.int64)
        expert = np.asarray(expert, dtype=np.int64)
        hit = np.asarray(hit, dtype=np.int64)
        k = len(tok)
        if not k:
            return
        if self.n + k > self._cap:
            cap = self._cap
            while cap < self.n + k:
                cap *= 2
            new = np.zeros((4, cap), dtype=np.int32)
            new[:, : self.n] = self._a[:, : self.n]
            cm = np.zeros(cap, dtype=np.int64)
            cm[: self.n] = self._cummax[: self.n]
            self._a, self._cummax, self._cap = new, cm, cap
        s = slice(self.n, self.n + k)
        self._a[0, s] = tok
        self._a[1, s] = layer
        self._a[2, s] = expert
        self._a[3, s] = hit
        self._cummax[s] = np.maximum.accumulate(np.maximum(tok, self.max_tok))
        self.n += k
        self.max_tok = int(self._cummax[self.n - 1])
        self.max_layer = max(self.max_layer, int(layer.max()))
        self.max_expert = max(self.max_expert, int(expert.max()))
        self._index(tok, layer, hit)

    def _ensure(self, n_layer: int, n_tok: int) -> None:
        """Grow the (layer, token) count arrays to at least ``[n_layer, n_tok]``."""
        L, T = self._tl_cnt.shape
        if n_layer > L or n_tok > T:
            L2 = max(n_layer, L)
            T2 = max(n_tok, T)
            if n_tok > T:
                T2 = max(n_tok, 2 * T, 1024)
            for name in ("_tl_cnt", "_tl_hit"):
                old = getattr(self, name)
                new = np.zeros((L2, T2), dtype=np.int32)
                new[:L, :T] = old
                setattr(self, name, new)

    def _index(self, tok: np.ndarray, layer: np.ndarray, hit: np.ndarray) -> None:
        self._ensure(self.max_layer + 1, self.max_tok + 1)
        m = (tok >= 0) & (layer >= 0) & (hit >= 0)
        if m.any():
            np.add.at(self._tl_cnt, (layer[m], tok[m]), 1)
            np.add.at(self._tl_hit, (layer[m], tok[m]), hit[m] > 0)

    def add_counts(self, tok: int, hits: np.ndarray, misses: np.ndarray) -> None:
        """Add per-layer lookup counts of one row ``tok`` (a token, or a coarser row such as a
        scrape interval) to the same (layer, row) arrays :meth:`hit_share` reads.

        ``hits``/``misses``: float or int ``[n_layer]``; a NaN or negative entry (not exported,
        counter went down) adds nothing for that layer. No routing row is added, so the expert
        aggregates are unchanged; ``max_tok``/``max_layer`` grow as for routing rows.
        """
        h = np.asarray(hits, dtype=np.float64)
        m = np.asarray(misses, dtype=np.float64)
        ok = np.isfinite(h) & np.isfinite(m) & (h >= 0) & (m >= 0)
        if tok < 0 or not ok.any():
            return
        il = np.flatnonzero(ok)
        self.max_tok = max(self.max_tok, int(tok))
        self.max_layer = max(self.max_layer, int(il.max()))
        self._ensure(self.max_layer + 1, self.max_tok + 1)
        self._tl_cnt[il, tok] += (h[il] + m[il]).astype(np.int64).astype(np.int32)
        self._tl_hit[il, tok] += h[il].astype(np.int64).astype(np.int32)

    @property
    def tok(self) -> np.ndarray:
        return self._a[0, : self.n]

    @property
    def layer(self) -> np.ndarray:
        return self._a[1, : self.n]

    @property
    def expert(self) -> np.ndarray:
        return self._a[2, : self.n]

    @property
    def hit(self) -> np.ndarray:
        return self._a[3, : self.n]

    def rows_before(self, stop: int | None) -> int:
        """Number of leading rows that belong to tokens before ``stop`` (all rows when None)."""
        if stop is None or stop > self.max_tok:
            return self.n
        return int(np.searchsorted(self._cummax[: self.n], stop, side="left"))

    def hit_share(self, n_layer: int, lo: int, hi: int) -> np.ndarray:
        """Hit share float ``[n_layer, hi - lo]``; NaN where nothing was routed."""
        out = np.full((n_layer, max(0, hi - lo)), np.nan)
        L, T = self._tl_cnt.shape
        l2, h2 = min(n_layer, L), min(hi, T)
        if l2 <= 0 or h2 <= lo:
            return out
        cnt = self._tl_cnt[:l2, lo:h2].astype(float)
        hits = self._tl_hit[:l2, lo:h2]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:l2, : h2 - lo] = np.where(cnt > 0, hits / cnt, np.nan)
        return out

    def expert_aggregates(
        self, n_layer: int, n_expert: int, stop: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(routed counts, hit counts, last-routing hit) ``[n_layer, n_expert]`` over rows before ``stop``.

        last-routing hit is int8: 1 hit, 0 miss, -1 never routed. Moving the cursor forward
        costs the rows in between; moving back subtracts counts and rescans only for the
        last-routing state.
        """
        R = self.rows_before(stop)
        acc = self._acc
        shape = (n_layer, n_expert)
        if acc is None or acc["shape"] != shape or (R < acc["R"] and R < acc["R"] // 2):
            acc = {"shape": shape, "R": 0, "cnt": np.zeros(shape, np.int64), "hit": np.zeros(shape, np.int64),
                   "last": np.full(shape, -1, np.int8), "last_R": 0}
        r0 = acc["R"]
        lo, hi, sign = (r0, R, 1) if R >= r0 else (R, r0, -1)
        if hi > lo:
            layer, expert, hit = self._a[1, lo:hi], self._a[2, lo:hi], self._a[3, lo:hi]
            m = (layer < n_layer) & (expert < n_expert) & (expert >= 0) & (layer >= 0)
            idx = layer[m].astype(np.int64) * n_expert + expert[m]
            acc["cnt"] += sign * np.bincount(idx, minlength=n_layer * n_expert).reshape(shape)
            acc["hit"] += sign * np.bincount(idx, weights=hit[m] > 0, minlength=n_layer * n_expert).reshape(
                shape).astype(np.int64)
        acc["R"] = R
        if acc["last_R"] != R:
            if R < acc["last_R"]:
                acc["last"][:] = -1
                acc["last_R"] = 0
            a, b = acc["last_R"], R
            layer, expert, hit = self._a[1, a:b], self._a[2, a:b], self._a[3, a:b]
            m = (layer < n_layer) & (expert < n_expert) & (expert >= 0) & (layer >= 0)
            acc["last"][layer[m], expert[m]] = (hit[m] > 0).astype(np.int8)  # later rows win
            acc["last_R"] = R
        self._acc = acc
        return acc["cnt"], acc["hit"], acc["last"]


@dataclass
class Turn:
    """One generation (a session turn, or a CSV ``turn``): its prompt, text and end record."""

    index: int
    id: int | None = None
    prompt: str | None = None
    text: str = ""
    reasoning: str = ""
    first_token: int = 0  # index into the token columns
    done: dict[str, Any] | None = None  # BMOE_DONE fields, or a CSV `# summary` canonical dict
    cancelled: bool = False
    error: str | None = None


@dataclass
class ProblemEntry:
    """A line the source could not use: where, what, why. Counted and shown, never fatal."""

    source: str
    lineno: int
    text: str
    reason: str


@dataclass
class RunModel:
    """The in-memory model of one run (see module docstring for shapes and units)."""

    meta: dict[str, str] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)  # canonical keys (parsers.summary_lines)
    summary_extra: dict[str, str] = field(default_factory=dict)  # non-canonical summary keys, verbatim
    sidecar: dict[str, str] = field(default_factory=dict)  # key=value device sidecar lines
    sources: list[str] = field(default_factory=list)
    # empty | loading | ready | generating | done | aborted | replay; network attach sources:
    # connecting | ok | unreachable | unauthorized | malformed | error (metrics), waiting | ok |
    # error | malformed (audit tail); status_detail holds the one-line reason
    status: str = "empty"
    status_detail: str = ""
    ready: dict[str, Any] | None = None
    n_layer: int | None = None
    n_expert: int | None = None
    top_k: int | None = None
    resident: np.ndarray | None = None  # bool [n_layer, n_expert]
    expert_rank: np.ndarray | None = None  # int32 [n_layer, n_expert] from an STRP profile: 0 hottest, -1 unranked
    resident_mib: float | None = None
    budget_mib: float | None = None
    last_line_t: float | None = None  # monotonic time of the last line a live source delivered
    #: What one row of :attr:`tokens` is: ``token`` (per-token sources), ``interval`` (a
    #: ``/metrics`` scrape interval: per-token means over it), ``request`` (an audit ``request``
    #: record: per-token means over it). The views name their axis and titles after it.
    row_unit: str = "token"

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self.version = 0
        self.tokens = Columns(BASE_COLUMNS)
        self.routes = RouteRows()
        self.turns: list[Turn] = []
        self.problems: list[ProblemEntry] = []
        self.problem_count = 0
        self.log: deque[str] = deque(maxlen=5000)  # stderr / loader noise
        self.requests: list[dict[str, Any]] = []
        self._acc = None  # TextAccumulator of the current turn

    # ------------------------------------------------------------------ basics
    def touch(self) -> None:
        self.version += 1

    def add_problem(self, source: str, lineno: int, text: str, reason: str) -> None:
        """Record a bad line. Only the first 10,000 are kept; all are counted."""
        with self.lock:
            self.problem_count += 1
            if len(self.problems) < 10_000:
                self.problems.append(ProblemEntry(source, lineno, text[:200], reason))
            self.touch()

    @property
    def n_tokens(self) -> int:
        return self.tokens.n

    def current_turn(self, create: bool = True) -> Turn | None:
        if not self.turns and create:
            self.turns.append(Turn(index=0, first_token=self.tokens.n))
        return self.turns[-1] if self.turns else None

    def _new_turn(self, **kw: Any) -> Turn:
        t = Turn(index=len(self.turns), first_token=self.tokens.n, **kw)
        self.turns.append(t)
        self._acc = None
        return t

    # ----------------------------------------------------------- record ingest
    def ingest(self, rec: Any, t: float | None = None, lineno: int = 0, source: str = "") -> None:
        """Apply one parser record (``bmoe_top.parsers.bmoe_lines``) to the model.

        Dispatches on the record's class name, so every source can hand over whatever
        :func:`parse_line` returned. ``t`` is the unix time the line arrived (live, recordings).
        """
        cls = type(rec)
        name = _HANDLERS.get(cls)
        if name is None:
            name = _HANDLERS[cls] = "_on_" + cls.__name__
        handler = getattr(self, name, None)
        with self.lock:
            self.last_line_t = time.monotonic()
            if handler is None:
                self.log.append(str(rec))
            else:
                handler(rec, t, lineno, source)
            self.touch()

    def _prefix(self, rec: Any) -> None:
        prefix = getattr(rec, "prefix", "")
        if prefix:
            self.log.append(prefix)

    def _on_TextLine(self, rec: Any, t, lineno, source) -> None:
        self.log.append(rec.text)

    def _on_BadLine(self, rec: Any, t, lineno, source) -> None:
        self.problem_count += 1
        if len(self.problems) < 10_000:
            self.problems.append(ProblemEntry(source, lineno, rec.text[:200], rec.reason))

    def _on_Ready(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        self.ready = {"load_s": rec.load_s, "arch": rec.arch, "n_ctx": rec.n_ctx, **(rec.extra or {})}
        if rec.arch:
            self.meta.setdefault("arch", rec.arch)
        if rec.n_ctx is not None:
            self.meta["n_ctx"] = str(rec.n_ctx)
        if rec.load_s is not None:
            self.summary["load_s"] = float(rec.load_s)
        for k in ("n_layer", "n_expert", "n_expert_used", "model"):
            v = (rec.extra or {}).get(k)
            if v is not None:
                self.meta[k] = str(v)
        self._apply_dims()
        self.status = "ready"

    def _on_Begin(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        prompt = None
        for r in reversed(self.requests):
            if r.get("id") == rec.id and r.get("cmd") == "generate":
                prompt = r.get("prompt")
                break
        self._new_turn(id=rec.id, prompt=prompt)
        self.status = "generating"

    def _on_Load(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        self._pending_load = (rec.mb, rec.ms)

    def _on_Progress(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        turn = self.current_turn()
        if self._acc is None:
            from bmoe_top.parsers.bmoe_lines import TextAccumulator

            self._acc = TextAccumulator()
        self._acc.feed(rec)
        turn.text = self._acc.text
        turn.reasoning = self._acc.reasoning
        row = {
            "step": rec.step, "steps": rec.steps, "turn": turn.index, "t": t,
            "wall_ms": rec.wall_ms, "io_ms": rec.io_ms, "compute_ms": rec.compute_ms,
            "mgmt_ms": rec.mgmt_ms, "stall_ms": rec.stall_ms, "read_mib": rec.read_mb,
            "cache_hit_pct": rec.cache_hit_pct, "text_end": len(turn.text),
        }
        pending = getattr(self, "_pending_load", None)
        if pending is not None:
            row["load_mib"], row["load_ms"] = pending
            self._pending_load = None
        for k, v in (rec.extra or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[k] = v
        self.tokens.append(row)
        if self.status not in ("replay",):
            self.status = "generating"

    def _on_Done(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        turn = self.current_turn()
        fields = {k: getattr(rec, k) for k in (
            "id", "cancelled", "tokens", "tok_s", "prefill_s", "load_s", "cache_hit_pct", "n_prompt",
            "n_past", "cache_resident_mib", "cache_budget_mib", "spec_recall_pct", "stall_s_tok",
            "mgmt_s_tok")}
        fields.update(rec.extra or {})
        turn.done = fields
        turn.cancelled = bool(rec.cancelled)
        if rec.text is not None and len(rec.text) >= len(turn.text):
            turn.text = rec.text
        # The latest turn's end record is the run's summary.
        mapping = {"tokens": "tokens", "tok_s": "tok_s", "prefill_s": "prefill_s", "load_s": "load_s",
                   "cache_hit_pct": "cache_hit_pct", "n_prompt": "n_prompt",
                   "cache_resident_mib": "resident_mib", "cache_budget_mib": "budget_mib",
                   "stall_s_tok": "stall_s_tok", "mgmt_s_tok": "mgmt_s_tok",
                   "spec_recall_pct": "spec_recall_pct", "read_mib": "read_mib"}
        for src, dst in mapping.items():
            v = fields.get(src)
            if v is not None and not isinstance(v, bool):
                self.summary[dst] = float(v)
        if rec.tok_s:
            self.summary["s_per_tok"] = 1.0 / float(rec.tok_s)
        if fields.get("read_mib") is not None and rec.tokens:
            self.summary["read_mib_per_tok"] = float(fields["read_mib"]) / float(rec.tokens)
        if rec.cache_resident_mib is not None:
            self.resident_mib = float(rec.cache_resident_mib)
        if rec.cache_budget_mib is not None:
            self.budget_mib = float(rec.cache_budget_mib)
        self.status = "ready"
        self._acc = None

    def _on_Error(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        msg = rec.msg or "(no message)"
        self.log.append(f"BMOE_ERROR id={rec.id} fatal={rec.fatal}: {msg}")
        if self.turns and rec.id is not None and self.turns[-1].id == rec.id:
            self.turns[-1].error = msg
        if rec.fatal:
            self.status = "aborted"
            self.status_detail = msg
        else:
            self.status_detail = f"request rejected: {msg}"

    def _on_Route(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        experts = rec.experts or []
        hits = rec.hit or []
        if self.n_layer is None or len(experts) > self.n_layer:
            self.n_layer = len(experts)
        if rec.phase == "prefill":
            tok_index = -1 - (self.current_turn().index if self.turns else 0)
        else:
            # The route line for a token precedes or follows its BMOE_PROGRESS: key by the step.
            tok_index = self.tokens.n if self._route_before_progress(rec) else self.tokens.n - 1
        toks, layers, exps, hs = [], [], [], []
        for il, row in enumerate(experts):
            hrow = hits[il] if il < len(hits) else []
            for j, e in enumerate(row):
                toks.append(tok_index)
                layers.append(il)
                exps.append(int(e))
                hs.append(int(hrow[j]) if j < len(hrow) else -1)
        if exps and (self.n_expert is None or max(exps) >= self.n_expert):
            self.n_expert = max(exps) + 1
        if toks:
            self.routes.extend(np.asarray(toks), np.asarray(layers), np.asarray(exps), np.asarray(hs))
            if rec.phase != "prefill" and not self.meta.get("n_expert_used"):
                k = max(len(r) for r in experts)  # a prefill row is the union over the batch
                if self.top_k is None or k > self.top_k:
                    self.top_k = k

    def _route_before_progress(self, rec: Any) -> bool:
        """True when a decode BMOE_ROUTE belongs to the token whose BMOE_PROGRESS is still to come."""
        n = self.tokens.n
        turn = self.current_turn(create=False)
        if not n or turn is None or turn.first_token >= n:
            return True
        last_step = self.tokens.last("step")
        return rec.step is None or math.isnan(last_step) or rec.step > last_step

    def _on_Resident(self, rec: Any, t, lineno, source) -> None:
        self._prefix(rec)
        resident = rec.resident or []
        n_layer = max(len(resident), self.n_layer or 0)
        n_expert = rec.n_expert or self.n_expert
        if n_expert is None:
            n_expert = 1 + max((max(r) for r in resident if r), default=-1)
        self.n_layer, self.n_expert = n_layer, n_expert
        m = np.zeros((n_layer, n_expert), dtype=bool)
        for il, row in enumerate(resident):
            ids = [e for e in row if 0 <= e < n_expert]
            m[il, ids] = True
        self.resident = m
        if rec.resident_mib is not None:
            self.resident_mib = float(rec.resident_mib)
        if rec.budget_mib is not None:
            self.budget_mib = float(rec.budget_mib)

    def _on_Unknown(self, rec: Any, t, lineno, source) -> None:
        self.log.append(f"BMOE_{rec.tag} {rec.fields}")

    def note_request(self, req: dict[str, Any]) -> None:
        """Remember a request sent to (or read for) a session, so turns know their prompt."""
        with self.lock:
            self.requests.append(dict(req))
            self.touch()

    # ------------------------------------------------------------- bulk loads
    def _apply_dims(self) -> None:
        for key, attr in (("n_layer", "n_layer"), ("n_expert", "n_expert"), ("n_expert_used", "top_k")):
            v = self.meta.get(key)
            if v is not None:
                try:
                    setattr(self, attr, int(float(v)))
                except ValueError:
                    pass

    def load_token_table(self, table: Any, source: str = "") -> None:
        """Adopt a :class:`bmoe_top.parsers.token_csv.TokenTable` (CSV sink; contract "CSV sink")."""
        with self.lock:
            self.sources.append(source)
            self.meta.update(table.meta)
            self._apply_dims()
            n = table.n_rows
            cols: dict[str, np.ndarray] = {}
            for name, arr in table.columns.items():
                if name == "read_bytes":
                    cols["read_mib"] = arr / _MIB
                else:
                    cols[name] = arr
            base = self.tokens.n
            self.tokens.extend(cols, n)
            # Turns: from the `turn` column when present, else one turn (split by summaries).
            turn_col = cols.get("turn")
            if turn_col is not None and n and not np.all(np.isnan(turn_col[:n])):
                tv = np.nan_to_num(turn_col[:n], nan=-1)
                starts = np.flatnonzero(np.r_[True, tv[1:] != tv[:-1]])
                ids = tv[starts]
            else:
                starts = np.array([0]) if n else np.array([], dtype=int)
                ids = np.zeros(len(starts))
                # several `# summary` lines without a turn column also split turns
                rows = [s.get("row", n) for s in table.summaries]
                cuts = sorted({r for r in rows[:-1] if 0 < r < n})
                if cuts:
                    starts = np.array([0, *cuts])
                    ids = np.arange(len(starts), dtype=float)
            if not self.turns or self.turns[-1].first_token != base:
                for s, tid in zip(starts, ids):
                    self.turns.append(Turn(index=len(self.turns), id=int(tid), first_token=base + int(s)))
            for j, s in enumerate(table.summaries):
                canon = s.get("summary", {})
                if j < len(self.turns):
                    self.turns[j].done = dict(canon)
                for k, v in s.get("raw", {}).items():
                    if k not in canon:
                        self.summary_extra[k] = v
            if table.summaries:
                self.summary.update(table.summaries[-1].get("summary", {}))
            for p in table.problems:
                self.problem_count += 1
                self.problems.append(ProblemEntry(source, p.lineno, p.text, p.reason))
            self.status = "replay"
            self.touch()

    def load_route_trace(self, trace: Any, source: str = "") -> None:
        """Adopt a :class:`bmoe_top.parsers.route_trace.RouteTrace` (per token, per layer, routed experts).

        Decode rows (phase 1) map to token indices in (turn, step) order; prefill rows (phase 0)
        get ``tok = -1 - turn``.
        """
        with self.lock:
            self.sources.append(source)
            for k, v in trace.meta.items():
                self.meta.setdefault(k, v)
            self._apply_dims()
            self.n_layer = max(self.n_layer or 0, int(trace.n_layer or 0)) or None
            self.n_expert = max(self.n_expert or 0, int(trace.n_expert or 0)) or None
            if trace.top_k:
                self.top_k = int(trace.top_k)
            turn = np.asarray(trace.turn, dtype=np.int64)
            step = np.asarray(trace.step, dtype=np.int64)
            phase = np.asarray(trace.phase, dtype=np.int64)
            decode = phase == 1
            key = turn * (1 << 32) + step
            uniq = np.unique(key[decode])
            tok = np.full(len(key), -1, dtype=np.int64)
            tok[decode] = np.searchsorted(uniq, key[decode])
            tok[~decode] = -1 - turn[~decode]
            self.routes.extend(tok, np.asarray(trace.layer), np.asarray(trace.expert),
                               np.asarray(trace.residency))
            for p in trace.problems:
                self.problem_count += 1
                self.problems.append(ProblemEntry(source, p.lineno, p.text, p.reason))
            if self.status == "empty":
                self.status = "replay"
            self.touch()

    def load_transcript(self, tr: Any, source: str = "") -> None:
        """Adopt a :class:`bmoe_top.parsers.transcript.Transcript` (stdout capture or log)."""
        with self.lock:
            self.sources.append(source)
        had_tokens = self.tokens.n > 0
        lines = getattr(tr, "record_lines", None) or [0] * len(tr.records)
        for rec, ln in zip(tr.records, lines):
            if had_tokens and type(rec).__name__ in ("Progress", "Load"):
                continue  # the CSV of the same run already gave the token rows
            self.ingest(rec, lineno=ln, source=source)
        with self.lock:
            for k, v in tr.summary.items():
                if had_tokens:  # the CSV of the same run has the summary already: only fill gaps
                    self.summary.setdefault(k, v)
                else:
                    self.summary[k] = v
            self.sidecar.update(tr.sidecar)
            if not any(t.text or t.reasoning for t in self.turns):
                turn = self.current_turn()
                if tr.answer:
                    turn.text = tr.answer
                if getattr(tr, "reasoning", None):
                    turn.reasoning = tr.reasoning
                if getattr(tr, "prompt", None) and not turn.prompt:
                    turn.prompt = tr.prompt
            for line in tr.text_lines:
                self.log.append(line)
            for p in tr.problems:
                self.problem_count += 1
                self.problems.append(ProblemEntry(source, p.lineno, p.text, p.reason))
            self.status = "replay" if self.status in ("empty", "ready") else self.status
            self.touch()

    def load_sidecar(self, kv: dict[str, str], source: str = "") -> None:
        with self.lock:
            self.sources.append(source)
            self.sidecar.update(kv)
            self.touch()

    def load_requests(self, requests: list[Any], problems: list[Any], source: str = "") -> None:
        """Session requests JSONL: each ``generate`` becomes a (not yet answered) turn with its prompt."""
        with self.lock:
            self.sources.append(source)
            for r in requests:
                d = {"cmd": r.cmd, "id": r.id, "prompt": r.prompt, "n_predict": r.n_predict,
                     "think": r.think, "clear_kv": r.clear_kv}
                self.requests.append(d)
                if r.cmd == "generate" and not self.tokens.n:
                    self.turns.append(Turn(index=len(self.turns), id=r.id, prompt=r.prompt,
                                           first_token=0))
            for p in problems:
                self.problem_count += 1
                self.problems.append(ProblemEntry(source, p.lineno, p.text, p.reason))
            if self.status == "empty":
                self.status = "replay"
            self.touch()

    # -------------------------------------------------------------- derived
    def mode(self) -> tuple[str, str]:
        """("serial" | "overlap" | "unknown", why): decides which term is the wall-additive flash
        wait ("unknown" draws like serial: there are no rows to draw).

        Overlap when the run's flags say ``overlap=1``, or when any token has ``io_ms > wall_ms``
        (lane-busy time can only exceed wall under overlap), or any ``stall_ms > 0``.
        """
        flag = self.meta.get("overlap")
        if flag is not None:
            return ("overlap", "flag overlap=1 in the run header") if flag not in ("0", "false") else (
                "serial", "flag overlap=0 in the run header")
        n = self.tokens.n
        if n:
            io = self.tokens.view("io_ms")
            wall = self.tokens.view("wall_ms")
            over = np.count_nonzero(io > wall * 1.0001)
            if over:
                return "overlap", f"io_ms > wall_ms on {over}/{n} tokens (io is lane-busy time)"
            stall = self.tokens.view("stall_ms")
            st = np.count_nonzero(stall > 0)
            if st:
                return "overlap", f"stall_ms > 0 on {st}/{n} tokens"
            if self.tokens.has("stall_ms"):
                return "serial", "stall_ms is 0 on every token and io_ms <= wall_ms"
            return "serial", "no stall_ms column and io_ms <= wall_ms on every token"
        stall = self.summary.get("stall_s_tok")
        if stall is not None and stall == stall:
            if stall > 0:
                return "overlap", f"summary stall {stall:g} s/token > 0 (no token rows)"
            return "serial", "summary stall 0 s/token (no token rows)"
        return "unknown", "no token rows and no stall figure in this source"

    def breakdown(self, stop: int | None = None) -> dict[str, np.ndarray]:
        """Per-token wall = compute + flash + mgmt (ms), for tokens ``[0, stop)``.

        flash is ``io_ms`` in serial runs and ``stall_ms`` under overlap (never io on wall under
        overlap). compute is the contract's residual: ``compute_ms`` when sent, else
        wall - flash - mgmt (mgmt counted as 0 only inside the residual when absent).
        Returns dict with ``wall``, ``compute``, ``flash``, ``mgmt`` arrays (NaN = missing).
        """
        mode, _ = self.mode()
        wall = self.tokens.view("wall_ms", stop)
        flash = self.tokens.view("stall_ms" if mode == "overlap" else "io_ms", stop)
        mgmt = self.tokens.view("mgmt_ms", stop)
        if self.tokens.has("compute_ms"):
            compute = self.tokens.view("compute_ms", stop)
        else:
            compute = wall - np.nan_to_num(flash) - np.nan_to_num(mgmt)
        return {"wall": wall, "compute": compute, "flash": flash, "mgmt": mgmt}

    def hit_matrix(self, stop: int | None = None, start: int = 0) -> np.ndarray:
        """Layer x token hit share, float ``[n_layer, stop - start]``; NaN where nothing was routed."""
        stop = self.route_token_count() if stop is None else stop
        return self.routes.hit_share(self.n_layer or 0, start, stop)

    def route_token_count(self) -> int:
        """Tokens (rows) that have routing rows or per-layer counts (decode tokens; prefill
        rows do not count)."""
        return max(0, self.routes.max_tok + 1)

    def add_layer_counts(self, row_index: int, hits: np.ndarray, misses: np.ndarray) -> None:
        """Per-layer cache lookups of token row ``row_index`` for the layer x row heatmap, from a
        source that has counts rather than routing rows (``/metrics`` per-layer counters over
        a scrape interval, audit ``layers`` deltas). ``hits``/``misses``: ``[n_layer]``, NaN =
        not known for that layer. Grows ``n_layer`` to cover the layers given. Takes the lock.
        """
        with self.lock:
            self.routes.add_counts(int(row_index), hits, misses)
            if self.routes.max_layer >= 0:
                self.n_layer = max(self.n_layer or 0, self.routes.max_layer + 1)
            self.touch()

    def expert_counts(self, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(routed counts, hit counts), int ``[n_layer, n_expert]``, over tokens ``[0, stop)``
        (prefill rows of turns started before ``stop`` included)."""
        cnt, hit, _ = self.routes.expert_aggregates(self.n_layer or 0, self.n_expert or 0, stop)
        return cnt, hit

    def last_routing_hit(self, stop: int | None = None) -> np.ndarray:
        """int8 ``[n_layer, n_expert]``: 1 hit / 0 miss at the expert's last routing, -1 never routed."""
        return self.routes.expert_aggregates(self.n_layer or 0, self.n_expert or 0, stop)[2]


class RunBackedState:
    """Base of a source's own bookkeeping object that sits next to the run model it feeds
    (``run``): ``lock``, ``version``, ``status`` and ``detail`` are the run model's
    (``run.lock``, ``run.version``, ``run.status``, ``run.status_detail``), so a source's
    state and the views never disagree."""

    run: RunModel

    @property
    def lock(self) -> threading.RLock:
        return self.run.lock

    @property
    def version(self) -> int:
        return self.run.version

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def detail(self) -> str:
        return self.run.status_detail

    def set_status(self, status: str, detail: str) -> None:
        """Set ``run.status`` / ``run.status_detail`` (bumps ``version`` only on a change)."""
        with self.run.lock:
            if (self.run.status, self.run.status_detail) != (status, detail):
                self.run.status, self.run.status_detail = status, detail
                self.run.touch()


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def fmt(v: float | None, digits: int = 1, unit: str = "") -> str:
    """Format a number for display, or 'missing' when the source did not send it.

    Small non-zero values keep two significant digits (0.039 MiB is not shown as 0.0)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "missing"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        s = f"{int(v):,}"
    else:
        if v and abs(v) < 10 ** -digits * 10:
            digits = max(digits, 1 - int(math.floor(math.log10(abs(v)))))
        s = f"{v:,.{digits}f}"
    return f"{s} {unit}".rstrip()


#: The run panel's summary rows: (key, label, unit). The headless ``--summary`` prints the same keys.
SUMMARY_FIELDS = (
    ("tokens", "tokens", ""),
    ("tok_s", "tok/s", ""),
    ("s_per_tok", "s/token", "s"),
    ("read_mib", "read", "MiB"),
    ("read_mib_per_tok", "read/token", "MiB"),
    ("cache_hit_pct", "cache hit", "%"),
    ("resident_mib", "resident", "MiB"),
    ("budget_mib", "budget", "MiB"),
    ("n_prompt", "prompt tokens", ""),
    ("prefill_s", "prefill", "s"),
    ("prefill_tps", "prefill tok/s", ""),
    ("load_s", "load", "s"),
    ("ttft_s", "TTFT", "s"),
    ("compute_s_tok", "compute/token", "s"),
    ("io_s_tok", "flash io/token", "s"),
    ("stall_s_tok", "stall/token", "s"),
    ("mgmt_s_tok", "mgmt/token", "s"),
)


def run_summary(run: RunModel) -> dict[str, Any]:
    """The numbers the run panel shows, as plain JSON-able data (None = missing from the source).

    ``summary`` holds the source's own end-of-run numbers (CSV ``# summary``, summary lines,
    ``BMOE_DONE``); ``derived`` holds what bmoe-top computed from the token rows.
    """
    with run.lock:
        s = {key: _num(run.summary.get(key)) for key, _, _ in SUMMARY_FIELDS}
        for key in ("tokens", "n_prompt"):
            if s[key] is not None:
                s[key] = int(s[key])
        n = run.tokens.n
        derived: dict[str, Any] = {"token_rows": n}
        if n:
            wall = run.tokens.view("wall_ms")
            derived["mean_wall_ms"] = _num(np.nanmean(wall)) if np.any(~np.isnan(wall)) else None
            derived["tok_s"] = (1000.0 / derived["mean_wall_ms"]) if derived["mean_wall_ms"] else None
            rm = run.tokens.view("read_mib")
            derived["read_mib"] = _num(np.nansum(rm)) if run.tokens.has("read_mib") else None
            hit = run.tokens.last("cache_hit_pct")
            derived["cache_hit_pct"] = None if math.isnan(hit) else hit
            derived["tokens"] = n
            if derived["mean_wall_ms"]:
                derived["s_per_tok"] = derived["mean_wall_ms"] / 1000.0
            if derived["read_mib"] is not None:
                derived["read_mib_per_tok"] = derived["read_mib"] / n
        if s.get("prefill_tps") is None and s.get("n_prompt") and s.get("prefill_s"):
            derived["prefill_tps"] = s["n_prompt"] / s["prefill_s"]
        mode, why = run.mode()
        out = {
            **s,
            "summary_extra": dict(run.summary_extra),
            "meta": dict(run.meta),
            "mode": mode,
            "mode_reason": why,
            "derived": derived,
            "turns": len(run.turns),
            "n_layer": run.n_layer,
            "n_expert": run.n_expert,
            "top_k": run.top_k,
            "routing_rows": run.routes.n,
            "problems": run.problem_count,
            "sidecar": dict(run.sidecar),
            "status": run.status,
            "status_detail": run.status_detail,
            "row_unit": run.row_unit,
            "sources": list(run.sources),
        }
    return out


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The run panel's summary rows from :func:`run_summary`: (label, text, kind), kind "" for the
    source's own number, "derived" for what the token rows give when the source has no end-of-run
    number (still streaming, or a source without a summary), "missing" when neither exists.
    The headless ``replay --summary`` prints exactly these rows."""
    rows = []
    derived = s["derived"]
    live = s.get("status") in ("generating", "loading")
    for key, label, unit in SUMMARY_FIELDS:
        v = s.get(key)
        kind = ""
        if v is None and derived.get(key) is not None:
            v, kind = derived[key], "derived"
        if v is None:
            rows.append((label, "missing", "missing"))
            continue
        if key == "cache_hit_pct" and v < 0:
            rows.append((label, "no cache", kind))
            continue
        digits = 3 if unit == "s" or key == "tok_s" else 1
        text = fmt(v, digits, unit)
        if kind:
            text += " (so far)" if live else " (from token rows)"
        rows.append((label, text, kind))
    return rows
