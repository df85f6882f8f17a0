"""The run model: the one store every source feeds (through ``bmoe_top.tui.feed``) and every view
reads. docs/architecture.md "The run model" lists its API.

Writes go through the typed methods below only (each takes :attr:`RunModel.lock` and bumps
:attr:`RunModel.version`); reads return read-only data. No Textual import.

Shapes and units
----------------
* Token columns (:attr:`RunModel.tokens`, :class:`~bmoe_top.tui.model.columns.TokenColumns`): one
  row per generated (decode) token (or per scrape interval / audit request: :attr:`row_unit`),
  float64, NaN where the source did not send the value. Canonical names: ``step``, ``steps``,
  ``turn``, ``t`` (unix s, when the source timestamps lines), ``wall_ms``, ``io_ms``,
  ``compute_ms``, ``mgmt_ms``, ``stall_ms``, ``read_mib`` (MiB read from flash this token),
  ``cache_hit_pct`` (cumulative, -1 = no cache), ``load_mib``/``load_ms`` (``BMOE_LOAD``),
  ``text_end`` (length of the turn's answer after this token), plus every extra numeric field the
  source had (``majflt``, ``cpu_ms``, ``rss_mib``, ...).
* Routing (:attr:`RunModel.routes`, :class:`~bmoe_top.tui.model.routes.RouteStore`): rows
  ``(tok, layer, expert, hit)``; ``tok`` is the token row, ``-1 - turn`` for prefill rows; per
  (layer, row) hit/lookup counts.
* Resident map (:attr:`RunModel.resident`): bool ``[n_layer, n_expert]``, or None when the source
  never said; :meth:`RunModel.resident_at` the map as it was at an earlier token row (each map
  the source sent is kept with the row it came after, packed, while it differs from the one
  before; past :data:`RESIDENT_KEPT` of them every other older one is let go).

Retention: :data:`KEEP_ALL` (files: every row kept) or :data:`LIVE` (long live runs: the newest
rows at full resolution, the rest in the history; memory stays bounded however long the run).

Terminal safety: every string a source writes through this API (run header, status reason, source
names, problems, log lines, summary extras, sidecar, READY fields, turn errors, alerts) is passed
through :func:`bmoe_top.parsers.sanitize.sanitize` (one line) here, where outside text enters the
model, so no view can draw an escape sequence, a C1 control or a bidi override from it
(docs/telemetry.md "Terminal safety"). Answer text, reasoning and prompts are kept as sent (they
are multi-line; the answer view sanitizes them with ``multiline=True``).
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.model.columns import ColumnsReader, ColumnStats, Series, TokenColumns
from bmoe_top.tui.model.events import EventLog
from bmoe_top.tui.model.health import AuditIndex, ScrapeHealth, SessionHealth, TailHealth
from bmoe_top.tui.model.history import CAPACITY, F64, I64
from bmoe_top.tui.model.quantities import Scope
from bmoe_top.tui.model.routes import ExpertCounts, LayerShares, RoutesReader, RouteStore
from bmoe_top.tui.model.status import RowUnit, Status
from bmoe_top.tui.model.turns import TURNLESS_STATUSES, ProblemEntry, Turn, TurnlessRequest

__all__ = ["BASE_COLUMNS", "KEEP_ALL", "LIVE", "MAX_ALERTS", "MAX_PROBLEMS", "ProcessMemory", "Retention", "RunModel",
           "robust_top", "safe"]

#: Token columns every run has (NaN when the source did not send them).
BASE_COLUMNS = (
    "step", "steps", "turn", "t", "wall_ms", "io_ms", "compute_ms", "mgmt_ms", "stall_ms",
    "read_mib", "cache_hit_pct", "load_mib", "load_ms", "text_end",
)

#: Problem entries kept (all are counted in ``problem_count``); their text is cut to 200 characters.
MAX_PROBLEMS = 10_000
PROBLEM_TEXT = 200
#: Log-pane lines kept (stderr, loader output, records without a view).
LOG_LINES = 5000
#: Alerts kept (the banner shows the newest; all are counted).
MAX_ALERTS = 100
#: Resident maps kept for :meth:`RunModel.resident_at` (each packed: 768 bytes for 48 x 128 experts)
RESIDENT_KEPT = 4096
#: Rows a file's columns are compared in at a time (bounded temporaries).
_BLOCK_ROWS = 1 << 16
#: Routing batches (a live token's BMOE_ROUTE line each) held before they go into the route store
#: even when nothing reads them.
PENDING_ROUTES = 64


RouteLine = tuple[int, Sequence[Sequence[int]], Sequence[Sequence[int]], Sequence[Sequence[int]] | None]


def _aligned(lists: Sequence[Sequence[Sequence[int]]], experts: Sequence[Sequence[Sequence[int]]],
             n_layers: list[int], lens: list[int], total: int) -> I64:
    """Per-layer value lists ``lists`` (one per line) aligned with the lines' ``experts``, as one
    row array: a list shorter than its layer's experts (or a layer without one) gives -1 (not
    known) for the rest, a longer one is cut."""
    rows = list(chain.from_iterable(lists))
    if [len(v) for v in lists] == n_layers and list(map(len, rows)) == lens:
        return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=total)
    return np.array([vrow[j] if j < len(vrow) else -1
                     for e, v in zip(experts, lists)
                     for vrow, n in zip([*v, *[[]] * (len(e) - len(v))], (len(r) for r in e))
                     for j in range(n)], dtype=np.int64)


def route_arrays(lines: Sequence[RouteLine]) -> tuple[I64, I64, I64, I64, I64 | None]:
    """(token, layer, expert, hit, tier) row arrays of routing lines ``(tok, experts, hits, tiers)``
    (see :meth:`RunModel.add_route_lists`), in order: a hit or tier list shorter than its layer's
    experts gives -1 (not known) for the rest; ``tier`` is None when no line has tiers, and -1
    on the rows of a line without them."""
    es = [e for _t, e, _h, _r in lines]
    rows = list(chain.from_iterable(es))  # one id list per (token, layer), in order
    n_layers = [len(e) for e in es]
    lens = list(map(len, rows))
    total = sum(lens)
    nl: I64 = np.array(n_layers, dtype=np.int64)
    starts: I64 = np.repeat(np.cumsum(nl) - nl, nl)  # each row's token's first row
    layer: I64 = np.repeat(np.arange(len(rows), dtype=np.int64) - starts, lens)
    tok = np.repeat(np.repeat(np.array([line[0] for line in lines], dtype=np.int64), n_layers), lens)
    expert = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=total)
    hit = _aligned([h for _t, _e, h, _r in lines], es, n_layers, lens, total)
    tiers = [r for _t, _e, _h, r in lines]
    if all(r is None for r in tiers):
        return tok, layer, expert, hit, None
    # a line without tiers among lines with them (a turn's prefill line): -1 lists of its shape
    told = [r if r is not None else [[-1] * len(row) for row in e] for r, e in zip(tiers, es)]
    return tok, layer, expert, hit, _aligned(told, es, n_layers, lens, total)


def safe(value: object) -> str:
    """``value`` as one line of text a terminal shows literally (``str()`` then
    :func:`~bmoe_top.parsers.sanitize.sanitize`); the same object when it is a clean ``str``."""
    return sanitize(value if type(value) is str else str(value))


def _safe_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keys and string values made safe; numbers and other values kept as they are."""
    return {safe(k): (safe(v) if isinstance(v, str) else v) for k, v in values.items()}


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """A live runtime process's memory (docs/memory.md "What each number counts"), bytes; None =
    the kernel did not say. ``rss_anon`` / ``rss_file``: ``RssAnon`` / ``RssFile`` of
    ``/proc/PID/status`` (what it allocated, its expert cache included / the file pages it maps);
    ``mem_available``: ``MemAvailable`` of ``/proc/meminfo``, the RAM the page cache may still use."""

    rss_anon: int | None
    rss_file: int | None
    mem_available: int | None


@dataclass(frozen=True, slots=True)
class Retention:
    """How much of a run a model keeps at full resolution (None = everything).

    ``token_rows``: rows of the token columns; ``routing_tokens``: tokens whose routing rows are
    kept (the expert map is exact for a cursor inside them); ``layer_rows``: rows of per-layer
    hit/lookup counts; ``turns``/``requests``: the newest turns (with their text) and requests.
    Every row stays in the tiered history (``history_capacity`` buckets per level) either way.
    """

    token_rows: int | None = None
    routing_tokens: int | None = None
    layer_rows: int | None = None
    turns: int | None = None
    requests: int | None = None
    history_capacity: int = CAPACITY

    @property
    def bounded(self) -> bool:
        return self.token_rows is not None


#: Files: a finite run, kept whole.
KEEP_ALL = Retention()
#: Live sources: memory bounded however long the run (docs/architecture.md "Bounded memory").
LIVE = Retention(token_rows=16_384, routing_tokens=2_048, layer_rows=16_384, turns=2_000, requests=2_000)


class RunModel:
    """The in-memory model of one run (see the module docstring for shapes and units)."""

    def __init__(self, retention: Retention = KEEP_ALL) -> None:
        self.lock = threading.RLock()
        self._version = 0
        self._memory_version = 0
        self.retention = retention
        self._meta: dict[str, str] = {}
        self._summary: dict[str, float] = {}
        self._summary_derived: set[str] = set()  # keys of _summary computed from others, not stated
        self._summary_extra: dict[str, str] = {}
        self._sidecar: dict[str, str] = {}
        self._sources: list[str] = []
        self._status = Status.EMPTY
        self._status_detail = ""
        self._ready: Mapping[str, Any] | None = None
        self._n_layer: int | None = None
        self._n_expert: int | None = None
        self._top_k: int | None = None
        self._resident: NDArray[np.bool_] | None = None
        #: (token row the map came after, -1 before any; its shape; np.packbits of it), in row order
        self._resident_kept: list[tuple[int, tuple[int, int], NDArray[np.uint8]]] = []
        self._resident_rows: list[int] = []  # the rows of _resident_kept, for bisect
        self._expert_rank: NDArray[np.int32] | None = None
        self._resident_mib: float | None = None
        self._process_memory: ProcessMemory | None = None
        self._budget_mib: float | None = None
        self._last_line_t: float | None = None
        self._row_unit = RowUnit.TOKEN
        self._tokens = TokenColumns(BASE_COLUMNS, window=retention.token_rows,
                                    history_capacity=retention.history_capacity)
        self._pending_routes: list[RouteLine] = []  # see _routes_now
        self._routes = RouteStore(window_tokens=retention.routing_tokens, count_rows=retention.layer_rows,
                                  history_capacity=retention.history_capacity)
        self._wall_scale: tuple[tuple[int, int], float] = ((-1, -1), 1.0)
        self._turns: list[Turn] = []
        self._turn_count = 0
        self._turnless: list[TurnlessRequest] = []
        self._turnless_count = 0
        self._problems: list[ProblemEntry] = []
        self._problem_count = 0
        self._log: deque[str] = deque(maxlen=LOG_LINES)
        self._requests: list[Mapping[str, Any]] = []
        self._alerts: list[str] = []
        self._alert_count = 0
        self._listed_alerts: set[str] = set()
        self._absent: dict[str, str] = {}
        self._summary_notes: dict[str, str] = {}
        self._epoch_start = 0
        self._epochs = 1
        self._io_over_wall = 0  # tokens whose io_ms exceeds wall_ms (lane-busy time: overlap)
        self._stall_positive = 0  # tokens with stall_ms > 0
        self._summary_scope: tuple[Scope | None, str] = (None, "")
        self._scrape_health: ScrapeHealth | None = None
        self._tail_health: TailHealth | None = None
        self._audit_index: AuditIndex | None = None
        self._session_health: SessionHealth | None = None
        #: changes of state (docs/events.md): a live model records its source's states and its
        #: turn boundaries here itself; alerts and the diagnosis record theirs
        self.events = EventLog()

    # ---------------------------------------------------------------------------- read access
    @property
    def version(self) -> int:
        """Bumped by every write but a process-memory reading: a view repaints when it changed."""
        return self._version

    @property
    def memory_version(self) -> int:
        """Bumped by a :attr:`process_memory` reading that differs from the one before, and by
        nothing else: the run panel's memory rows follow it while no token comes (a child
        between turns), the views, which do not draw these figures, do not repaint."""
        return self._memory_version

    @property
    def tokens(self) -> ColumnsReader:
        """The token columns (read access; rows are added with :meth:`add_token_row`)."""
        return self._tokens

    @property
    def routes(self) -> RoutesReader:
        """Routing rows and per-layer counts (read access; :meth:`add_routes`, :meth:`add_layer_counts`)."""
        with self.lock:
            return self._routes_now()

    def _routes_now(self) -> RouteStore:
        """The route store with every routing row added so far (the lines of live tokens wait
        in ``_pending_routes`` until something reads routing, then go in as one block)."""
        p = self._pending_routes
        if p:
            self._routes.extend(*route_arrays(p))
            p.clear()
        return self._routes

    @property
    def meta(self) -> Mapping[str, str]:
        """Run header: model, arch, flags, dimensions as the source wrote them (strings)."""
        return MappingProxyType(self._meta)

    @property
    def summary(self) -> Mapping[str, float]:
        """The source's own end-of-run numbers, canonical keys (``bmoe_top.parsers.summary_lines``)."""
        return MappingProxyType(self._summary)

    @property
    def summary_extra(self) -> Mapping[str, str]:
        """Non-canonical summary keys, verbatim."""
        return MappingProxyType(self._summary_extra)

    @property
    def sidecar(self) -> Mapping[str, str]:
        """``key=value`` device sidecar lines."""
        return MappingProxyType(self._sidecar)

    @property
    def sources(self) -> Sequence[str]:
        return tuple(self._sources)

    @property
    def status(self) -> Status:
        return self._status

    @property
    def status_detail(self) -> str:
        """One line that says why the status is what it is ("" when nothing to add)."""
        return self._status_detail

    @property
    def ready(self) -> Mapping[str, Any] | None:
        """The ``BMOE_READY`` fields (load_s, arch, n_ctx and extras), None before it."""
        return self._ready

    @property
    def n_layer(self) -> int | None:
        return self._n_layer

    @property
    def n_expert(self) -> int | None:
        return self._n_expert

    @property
    def top_k(self) -> int | None:
        return self._top_k

    @property
    def resident(self) -> NDArray[np.bool_] | None:
        """bool ``[n_layer, n_expert]``: experts resident in the cache now (read-only)."""
        return self._resident

    def resident_at(self, stop: int) -> tuple[NDArray[np.bool_] | None, int | None]:
        """The resident map as of the token rows before ``stop`` (rows ``0 .. stop-1`` shown):
        ``(map, row)``, ``row`` the token row the map came after (-1: before the first row), or
        ``(resident, None)`` at the newest row (the map now), or ``(None, None)`` when no map was
        sent by then. Caller holds the lock."""
        if stop >= self._tokens.n or not self._resident_kept:
            return (self._resident, None) if stop >= self._tokens.n else (None, None)
        i = bisect_right(self._resident_rows, stop - 1) - 1
        if i < 0:
            return None, None
        row, shape, bits = self._resident_kept[i]
        m = np.unpackbits(bits, count=shape[0] * shape[1]).astype(bool).reshape(shape)
        m.flags.writeable = False
        return m, row

    @property
    def expert_rank(self) -> NDArray[np.int32] | None:
        """int32 ``[n_layer, n_expert]`` from an STRP profile: 0 hottest, -1 unranked (read-only)."""
        return self._expert_rank

    @property
    def resident_mib(self) -> float | None:
        return self._resident_mib

    @property
    def process_memory(self) -> ProcessMemory | None:
        """The runtime process's RSS split and the RAM left to the page cache, newest reading
        (a live child only; None otherwise)."""
        return self._process_memory

    def set_process_memory(self, pm: ProcessMemory) -> None:
        """Keep the newest reading; a new figure bumps :attr:`memory_version` (not :attr:`version`)."""
        with self.lock:
            if pm != self._process_memory:
                self._process_memory = pm
                self._memory_version += 1

    @property
    def budget_mib(self) -> float | None:
        return self._budget_mib

    @property
    def last_line_t(self) -> float | None:
        """``time.monotonic()`` of the last line a live source delivered."""
        return self._last_line_t

    @property
    def row_unit(self) -> RowUnit:
        """What one token-column row is (a token, a scrape interval, an audit request)."""
        return self._row_unit

    @property
    def turns(self) -> Sequence[Turn]:
        """The turns kept (all of them unless the retention bounds them: see :attr:`turn_count`)."""
        return self._turns

    def turn_at(self, row: int) -> Turn | None:
        """The kept turn whose token rows hold token row ``row`` (None before the first kept turn)."""
        with self.lock:
            i = bisect_right(self._turns, row, key=lambda t: t.first_token) - 1
            return self._turns[i] if i >= 0 else None

    @property
    def turn_count(self) -> int:
        """Turns of the whole run (the kept ones are the newest)."""
        return self._turn_count

    @property
    def turnless(self) -> Sequence[TurnlessRequest]:
        """Requests that generated no turn (rejected, failed before their first token, unanswered),
        oldest first; each says how many turns came before it."""
        return self._turnless

    @property
    def turnless_count(self) -> int:
        """Requests without a turn over the whole run (the kept ones, :attr:`turnless`, are the newest)."""
        return self._turnless_count

    @property
    def problems(self) -> Sequence[ProblemEntry]:
        """The first :data:`MAX_PROBLEMS` problems (all are counted in :attr:`problem_count`)."""
        return self._problems

    @property
    def problem_count(self) -> int:
        return self._problem_count

    @property
    def log(self) -> Sequence[str]:
        """The newest :data:`LOG_LINES` log-pane lines."""
        return self._log

    @property
    def requests(self) -> Sequence[Mapping[str, Any]]:
        """Requests sent to (or read for) a session, oldest first."""
        return self._requests

    @property
    def alerts(self) -> Sequence[str]:
        """One-line alerts a person must see at once (a file that is not a recorded run, a
        recording that stopped on a write error), oldest first; the banner shows them. The first
        :data:`MAX_ALERTS` distinct ones are kept (all are counted in :attr:`alert_count`)."""
        return tuple(self._alerts)

    @property
    def alert_count(self) -> int:
        return self._alert_count

    def alert_listed(self, line: str) -> bool:
        """``line`` (one of :attr:`alerts`) sums up lines the problems list names one by one:
        the screen's banner points to it (the text itself names no key, for the headless summary)."""
        with self.lock:
            return line in self._listed_alerts

    @property
    def absent(self) -> Mapping[str, str]:
        """Summary keys the source says it cannot give, with the words to show instead (a
        ``/metrics`` server that does not export a series: ``"not exported"``)."""
        return MappingProxyType(self._absent)

    @property
    def summary_notes(self) -> Mapping[str, str]:
        """How the source counts a summary figure, by key (``tok_s``: "per stream: ..."), for the
        views to say what a number is."""
        return MappingProxyType(self._summary_notes)

    @property
    def summary_scope(self) -> tuple[Scope | None, str]:
        """What the source's own summary figures cover, as the source's feed says it: a
        :class:`~bmoe_top.tui.model.quantities.Scope` (``SINCE_START`` for a ``/metrics`` server's
        totals, ``SINCE_LOAD`` for an audit log's newest process run) and a detail (``pid 4242``);
        ``(None, "")`` when the feed does not say (the run panel then names the last finished turn
        or the run)."""
        return self._summary_scope

    @property
    def scrape_health(self) -> ScrapeHealth | None:
        """The ``/metrics`` poller as of its newest scrape or failure (None for other sources)."""
        return self._scrape_health

    @property
    def tail_health(self) -> TailHealth | None:
        """The followed file (None for other sources)."""
        return self._tail_health

    @property
    def audit_index(self) -> AuditIndex | None:
        """An audit log's process runs and bad lines (None for other sources)."""
        return self._audit_index

    @property
    def session_health(self) -> SessionHealth | None:
        """A live session's state (None for other sources)."""
        return self._session_health

    @property
    def epoch_start(self) -> int:
        """The first token row of the source's current process: rows before it belong to a
        process that restarted (:meth:`new_epoch`); figures derived from the token rows use the
        rows from here on only."""
        return self._epoch_start

    @property
    def epochs(self) -> int:
        """Processes the source has seen (1 + restarts)."""
        return self._epochs

    @property
    def n_tokens(self) -> int:
        return self.tokens.n

    # --------------------------------------------------------------------------------- writes
    def _touch(self) -> None:
        self._version += 1

    def set_status(self, status: Status, detail: str = "") -> None:
        """Set the status and its one-line reason (bumps the version only on a change)."""
        with self.lock:
            status = Status(status)
            detail = safe(detail)
            if (self._status, self._status_detail) != (status, detail):
                if status != self._status and self.retention.bounded:
                    self.events.record("source", "source", str(self._status), str(status), detail)
                self._status, self._status_detail = status, detail
                self._touch()

    def set_row_unit(self, unit: RowUnit) -> None:
        with self.lock:
            self._row_unit = RowUnit(unit)
            self._touch()

    def add_source(self, name: str) -> None:
        """Name a source that fed this run (a path, ``child: CMD``, ``metrics: URL``); once each."""
        with self.lock:
            name = safe(name)
            if name not in self._sources:
                if not self._sources:
                    self.events.source = name
                self._sources.append(name)
                self._touch()

    def mark_line(self) -> None:
        """A live source delivered a line now (for "no telemetry for N s")."""
        self._last_line_t = time.monotonic()

    def update_meta(self, values: Mapping[str, Any], *, overwrite: bool = True) -> None:
        """Add run-header entries (values become strings); ``overwrite=False`` keeps existing keys.
        ``n_layer`` / ``n_expert`` / ``n_expert_used`` also set the dimensions."""
        with self.lock:
            for k, v in values.items():
                k = safe(k)
                if v is None or (not overwrite and k in self._meta):
                    continue
                self._meta[k] = safe(v)
            self._dims_from_meta()
            self._touch()

    def _dims_from_meta(self) -> None:
        for key in ("n_layer", "n_expert", "n_expert_used"):
            v = self._meta.get(key)
            if v is None:
                continue
            try:
                n = int(float(v))
            except ValueError:
                continue
            if key == "n_layer":
                self._n_layer = n
            elif key == "n_expert":
                self._n_expert = n
            else:
                self._top_k = n

    def set_dims(self, *, n_layer: int | None = None, n_expert: int | None = None, top_k: int | None = None,
                 grow: bool = False) -> None:
        """Set the model's dimensions (None leaves one as it is); ``grow=True`` only ever raises them."""
        with self.lock:
            if n_layer is not None:
                self._n_layer = max(self._n_layer or 0, n_layer) if grow else n_layer
            if n_expert is not None:
                self._n_expert = max(self._n_expert or 0, n_expert) if grow else n_expert
            if top_k is not None:
                self._top_k = max(self._top_k or 0, top_k) if grow else top_k
            self._touch()

    def set_ready(self, info: Mapping[str, Any]) -> None:
        """The session is loaded: the ``BMOE_READY`` fields."""
        with self.lock:
            self._ready = MappingProxyType(_safe_mapping(info))
            self._touch()

    def update_summary(self, values: Mapping[str, float | int | None], *, fill_only: bool = False,
                       replace: bool = False, derived: Collection[str] = ()) -> None:
        """Set end-of-run numbers (canonical keys); None values are skipped. ``fill_only`` keeps
        numbers already there, but a number a source states replaces one a source only derived
        from others (``derived``: the keys of ``values`` computed, not stated, e.g. a CSV's
        ``ttft_s`` = load + prefill beside a log that prints its own TTFT); ``replace`` drops the
        old summary first."""
        with self.lock:
            if replace:
                self._summary.clear()
                self._summary_derived.clear()
            for k, v in values.items():
                if v is None or isinstance(v, bool):
                    continue
                if fill_only and k in self._summary and (k in derived or k not in self._summary_derived):
                    continue
                self._summary[k] = float(v)
                if k in derived:
                    self._summary_derived.add(k)
                else:
                    self._summary_derived.discard(k)
            self._touch()

    def update_summary_extra(self, values: Mapping[str, str]) -> None:
        """Non-canonical summary keys, verbatim (made safe to draw)."""
        with self.lock:
            self._summary_extra.update({safe(k): safe(v) for k, v in values.items()})
            self._touch()

    def update_sidecar(self, values: Mapping[str, str]) -> None:
        """``key=value`` device sidecar entries (made safe to draw)."""
        with self.lock:
            self._sidecar.update({safe(k): safe(v) for k, v in values.items()})
            self._touch()

    def set_absent(self, absent: Mapping[str, str]) -> None:
        """Replace the summary keys the source cannot give (key -> the words shown instead)."""
        with self.lock:
            new = {safe(k): safe(v) for k, v in absent.items()}
            if new != self._absent:
                self._absent = new
                self._touch()

    def set_summary_notes(self, notes: Mapping[str, str]) -> None:
        """Replace the notes saying how the source counts summary figures (key -> words)."""
        with self.lock:
            new = {safe(k): safe(v) for k, v in notes.items()}
            if new != self._summary_notes:
                self._summary_notes = new
                self._touch()

    def set_summary_scope(self, scope: Scope | None, detail: str = "") -> None:
        """Say what the summary figures cover (:attr:`summary_scope`)."""
        with self.lock:
            new = (scope, safe(detail))
            if new != self._summary_scope:
                self._summary_scope = new
                self._touch()

    def set_scrape_health(self, health: ScrapeHealth) -> None:
        """Publish the poller's state (a frozen snapshot: docs/architecture.md "Source health")."""
        with self.lock:
            if health != self._scrape_health:
                self._scrape_health = health
                self._touch()

    def set_tail_health(self, health: TailHealth) -> None:
        """Publish the followed file's state."""
        with self.lock:
            if health != self._tail_health:
                self._tail_health = health
                self._touch()

    def set_audit_index(self, index: AuditIndex) -> None:
        """Publish an audit log's process runs and bad lines."""
        with self.lock:
            if index is not self._audit_index:
                self._audit_index = index
                self._touch()

    def set_session_health(self, health: SessionHealth) -> None:
        """Publish a live session's state."""
        with self.lock:
            if health != self._session_health:
                self._session_health = health
                self._touch()

    def new_epoch(self, detail: str = "") -> None:
        """The source restarted (a new process): the next token row starts a new epoch, so no
        figure derived from the dead process's rows is shown beside the new process's totals; a
        ``restarted`` event says so (:meth:`note_restart`)."""
        with self.lock:
            self._epoch_start = self.tokens.n
            self._epochs += 1
            self.note_restart(detail)
            self._touch()

    def note_restart(self, detail: str = "") -> None:
        """The source's process restarted (a server's counters went down, a session socket came
        back to a new session): a ``source`` event from the status to ``restarted``."""
        with self.lock:
            self.events.record("source", "source", str(self._status), "restarted", detail)

    def add_alert(self, text: str, *, listed: bool = False) -> None:
        """One line a person must see at once (the banner); a repeat of a kept alert is not added.
        ``listed``: it sums up problems :meth:`add_problem` recorded one by one (:meth:`alert_listed`)."""
        with self.lock:
            line = safe(text)
            if listed:
                self._listed_alerts.add(line)
            if line in self._alerts:
                return
            self._alert_count += 1
            if len(self._alerts) < MAX_ALERTS:
                self._alerts.append(line)
            self._touch()

    def add_problem(self, source: str, lineno: int, text: str, reason: str) -> None:
        """Record a line a source could not use. Every one is counted; the first
        :data:`MAX_PROBLEMS` are kept, their text cut to 200 characters."""
        with self.lock:
            self._problem_count += 1
            if len(self._problems) < MAX_PROBLEMS:
                self._problems.append(ProblemEntry(safe(source), int(lineno), safe(text[:PROBLEM_TEXT]),
                                                   safe(reason)))
            self._touch()

    def add_log(self, line: str) -> None:
        """One log-pane line (stderr, loader output, a record no view shows)."""
        with self.lock:
            self._log.append(safe(line))
            self._touch()

    def add_log_lines(self, lines: Iterable[str]) -> None:
        """Several log-pane lines (each made safe to draw, like :meth:`add_log`)."""
        with self.lock:
            self._log.extend(safe(x) for x in lines)
            self._touch()

    def note_request(self, request: Mapping[str, Any]) -> None:
        """Remember a request sent to (or read for) a session, so its turn knows its prompt."""
        with self.lock:
            self._requests.append(MappingProxyType(dict(request)))
            cap = self.retention.requests
            if cap is not None and len(self._requests) > 2 * cap:
                del self._requests[:-cap]
            self._touch()

    def find_request(self, request_id: int | None, cmd: str = "generate") -> Mapping[str, Any] | None:
        """The newest request with this id and command (None when not known)."""
        with self.lock:
            for r in reversed(self._requests):
                if r.get("id") == request_id and r.get("cmd") == cmd:
                    found: Mapping[str, Any] = r
                    return found
            return None

    # -- tokens ----------------------------------------------------------------------------------
    def add_token_row(self, row: Mapping[str, float | int | None]) -> int:
        """Append one token row (see the column names in the module docstring); returns its index."""
        with self.lock:
            io, wall, stall = row.get("io_ms"), row.get("wall_ms"), row.get("stall_ms")
            if io is not None and wall is not None and io > wall * 1.0001:
                self._io_over_wall += 1
            if stall is not None and stall > 0:
                self._stall_positive += 1
            i = self._tokens.append(row)
            self._touch()
            return i

    def add_token_rows(self, columns: Mapping[str, Sequence[float] | F64], n: int, adopt: bool = False) -> int:
        """Append ``n`` token rows given as columns (length ``n`` each); returns the first row's index.
        ``adopt``: a file's float64 columns are kept without a copy when they are the run's first
        rows (the caller never writes them afterwards; :meth:`TokenColumns.extend`)."""
        with self.lock:
            first = self.tokens.n
            io, wall, stall = columns.get("io_ms"), columns.get("wall_ms"), columns.get("stall_ms")
            with np.errstate(invalid="ignore"):
                if io is not None and wall is not None:
                    io_a, wall_a = np.asarray(io, dtype=np.float64)[:n], np.asarray(wall, dtype=np.float64)[:n]
                    for a in range(0, n, _BLOCK_ROWS):  # in blocks: no temporary as long as the run
                        b = a + _BLOCK_ROWS
                        self._io_over_wall += int(np.count_nonzero(io_a[a:b] > wall_a[a:b] * 1.0001))
                if stall is not None:
                    self._stall_positive += int(np.count_nonzero(np.asarray(stall, dtype=np.float64)[:n] > 0))
            self._tokens.extend(columns, n, adopt=adopt)
            self._touch()
            return first

    # -- routing and per-layer counts --------------------------------------------------------------
    def add_routes(self, tok: NDArray[np.integer], layer: NDArray[np.integer], expert: NDArray[np.integer],
                   hit: NDArray[np.integer], tier: NDArray[np.integer] | None = None) -> None:
        """Routing rows (arrays of one length): ``tok`` token row (``-1 - turn`` for prefill),
        ``layer``, ``expert``, ``hit`` (1 hit, 0 miss, -1 not known), ``tier`` the memory tier that
        served each (0 expert cache, 1 page cache, 2 disk, -1 not known; None: the source does
        not say). Grows the dimensions to cover the layers and experts seen."""
        with self.lock:
            if len(tok) == 0:
                return
            routes = self._routes_now()
            routes.extend(tok, layer, expert, hit, tier)
            self._n_layer = max(self._n_layer or 0, routes.max_layer + 1)
            self._n_expert = max(self._n_expert or 0, routes.max_expert + 1)
            self._touch()

    def add_route_lists(self, tok: int, experts: Sequence[Sequence[int]], hits: Sequence[Sequence[int]],
                        tiers: Sequence[Sequence[int]] | None = None) -> None:
        """One token's routing as a BMOE_ROUTE line gives it (docs/telemetry.md): ``experts[layer]``
        the expert ids, ``hits[layer]`` aligned 1/0 (a shorter or missing list: not known, -1),
        ``tiers[layer]`` aligned the tier that served each (0 expert cache, 1 page cache, 2 disk;
        None: the line has none), for token row ``tok`` (``-1 - turn`` for prefill). The rows
        wait, with those of the next lines, until something reads routing (one block then: each
        block has a fixed cost)."""
        with self.lock:
            if not any(experts):
                return
            self._pending_routes.append((tok, experts, hits, tiers))
            if len(self._pending_routes) >= PENDING_ROUTES:
                self._routes_now()
            self._n_layer = max(self._n_layer or 0, len(experts))
            self._n_expert = max(self._n_expert or 0, 1 + max(map(max, filter(None, experts))))
            self._touch()

    def add_layer_counts(self, row: int, hits: F64, misses: F64) -> None:
        """Per-layer cache lookups of token row ``row``, from a source that has counts rather than
        routing rows (``/metrics`` per-layer counters over a scrape interval, audit ``layers``
        deltas). ``hits``/``misses``: ``[n_layer]``, NaN = not known for that layer. Grows
        ``n_layer`` to cover the layers given."""
        with self.lock:
            routes = self._routes_now()
            routes.add_counts(int(row), hits, misses)
            if routes.max_layer >= 0:
                self._n_layer = max(self._n_layer or 0, routes.max_layer + 1)
            self._touch()

    def set_resident(self, resident: NDArray[np.bool_] | None, *, resident_mib: float | None = None,
                     budget_mib: float | None = None, after_row: int | None = None) -> None:
        """The experts resident in the cache (bool ``[n_layer, n_expert]``; grows the dimensions
        to its shape) after token row ``after_row`` (None: the newest row, the map now; -1: from
        before the first row, as a profile's plan holds for the whole run; an earlier row than
        a map already kept is kept for :meth:`resident_at` and leaves the map now as it is), and
        the cache's size in MiB when known."""
        with self.lock:
            if resident is not None:
                m = np.array(resident, dtype=bool)
                m.flags.writeable = False
                row = self._tokens.n - 1 if after_row is None else int(after_row)
                if self._keep_resident(m, row):
                    self._resident = m
                self._n_layer = max(self._n_layer or 0, m.shape[0])
                self._n_expert = max(self._n_expert or 0, m.shape[1])
            self._set_cache_mib(resident_mib, budget_mib)
            self._touch()

    def _keep_resident(self, m: NDArray[np.bool_], row: int) -> bool:
        """Keep ``m`` as the map after token ``row`` (not when it equals the map before it, or
        replacing one kept for the same row); True when it is the newest map."""
        kept, rows = self._resident_kept, self._resident_rows
        at = bisect_right(rows, row)
        if at and rows[at - 1] != row:  # the same map as the one before it: nothing new
            shape = kept[at - 1][1]
            before = self._resident if at == len(kept) else \
                np.unpackbits(kept[at - 1][2], count=shape[0] * shape[1]).reshape(shape)
            if before is not None and before.shape == m.shape and np.array_equal(before, m):
                return at == len(kept)
        entry = (row, (int(m.shape[0]), int(m.shape[1])), np.packbits(m, axis=None))
        if at and rows[at - 1] == row:
            kept[at - 1] = entry
        else:
            kept.insert(at, entry)
            rows.insert(at, row)
            at += 1
        newest = at == len(kept)
        if len(kept) > RESIDENT_KEPT:  # memory stays bounded: the older half thinned to every other one
            half = len(kept) // 2
            kept[:half] = kept[:half:2]
            rows[:half] = rows[:half:2]
        return newest

    def set_cache_mib(self, *, resident_mib: float | None = None, budget_mib: float | None = None) -> None:
        """Cache size in MiB: what is resident and the budget (None leaves a value as it is)."""
        with self.lock:
            self._set_cache_mib(resident_mib, budget_mib)
            self._touch()

    def _set_cache_mib(self, resident_mib: float | None, budget_mib: float | None) -> None:
        if resident_mib is not None:
            self._resident_mib = float(resident_mib)
        if budget_mib is not None:
            self._budget_mib = float(budget_mib)

    def set_expert_rank(self, rank: NDArray[np.int32]) -> None:
        """An STRP profile's rank map (int32 ``[n_layer, n_expert]``, 0 hottest, -1 unranked)."""
        with self.lock:
            r = np.array(rank, dtype=np.int32)
            r.flags.writeable = False
            self._expert_rank = r
            self._touch()

    # -- turns --------------------------------------------------------------------------------------
    def begin_turn(self, *, id: int | None = None, prompt: str | None = None,  # noqa: A002
                   first_token: int | None = None, done: Mapping[str, Any] | None = None) -> Turn:
        """Start a turn (its first token is the next token row unless ``first_token`` says)."""
        with self.lock:
            t = Turn(self._turn_count, id=id, prompt=prompt,
                     first_token=self.tokens.n if first_token is None else first_token, done=done)
            self._turns.append(t)
            self._turn_count += 1
            if self.retention.bounded:
                self.events.record("turn", f"turn {t.index + 1}", None, "started",
                                   "" if id is None else f"request {id}")
            cap = self.retention.turns
            if cap is not None and len(self._turns) > 2 * cap:
                del self._turns[:-cap]
            self._touch()
            return t

    def current_turn(self) -> Turn | None:
        """The newest turn, None before the first."""
        with self.lock:
            return self._turns[-1] if self._turns else None

    def ensure_turn(self) -> Turn:
        """The newest turn, starting one at the first token when there is none yet (tokens of a
        one-shot run have no ``BMOE_BEGIN``)."""
        with self.lock:
            if not self._turns:
                return self.begin_turn(first_token=0)
            return self._turns[-1]

    def append_answer(self, text: str = "", reasoning: str = "") -> None:
        """Extend the newest turn's answer and reasoning (O(1) amortised)."""
        with self.lock:
            t = self.ensure_turn()
            t._text.append(text)
            t._reasoning.append(reasoning)
            self._touch()

    def set_answer(self, text: str | None = None, reasoning: str | None = None, *,
                   turn: Turn | None = None) -> None:
        """Replace a turn's (default the newest) answer and/or reasoning."""
        with self.lock:
            t = turn if turn is not None else self.ensure_turn()
            if text is not None:
                t._text.set(text)
            if reasoning is not None:
                t._reasoning.set(reasoning)
            self._touch()

    def set_prompt(self, prompt: str, *, turn: Turn | None = None) -> None:
        with self.lock:
            (turn if turn is not None else self.ensure_turn())._prompt = prompt
            self._touch()

    def finish_turn(self, done: Mapping[str, Any], *, cancelled: bool = False, turn: Turn | None = None) -> None:
        """Record a turn's end: its end-record fields (``done``) and whether it was cancelled."""
        with self.lock:
            t = turn if turn is not None else self.ensure_turn()
            if self.retention.bounded and t._done is None:
                self.events.record("turn", f"turn {t.index + 1}", "started", "cancelled" if cancelled else "done",
                                   _turn_detail(done))
            t._done = MappingProxyType(_safe_mapping(done))
            t._cancelled = bool(cancelled)
            t._text.compact()  # a finished turn's text is one string: no per-token pieces kept
            t._reasoning.compact()
            self._touch()

    def set_turn_request(self, turn: Turn, request_id: int | None, prompt: str | None) -> None:
        """Name the request a turn answered (a CSV's turn matched to its request): its id, and its
        prompt when the turn has none yet."""
        with self.lock:
            turn._id = request_id
            if prompt is not None and turn._prompt is None:
                turn._prompt = prompt
            self._touch()

    def add_turnless(self, request_id: int | None, prompt: str | None, status: str, reason: str = "",
                     after: int | None = None) -> None:
        """Keep a request that generated no turn (:class:`TurnlessRequest`), placed after ``after``
        turns (default: the turns so far). ``status`` is one of :data:`TURNLESS_STATUSES`
        (ValueError otherwise)."""
        if status not in TURNLESS_STATUSES:
            raise ValueError(f"turn-less status {status!r} is not one of {', '.join(TURNLESS_STATUSES)}")
        with self.lock:
            self._turnless.append(TurnlessRequest(request_id, prompt, status, safe(reason) if reason else "",
                                                  self._turn_count if after is None else after))
            self._turnless_count += 1
            cap = self.retention.requests
            if cap is not None and len(self._turnless) > 2 * cap:
                del self._turnless[:-cap]
            self._touch()

    def set_turnless_prompt(self, index: int, prompt: str) -> None:
        """Give the turn-less request at ``index`` (of :attr:`turnless`) its prompt (a request log
        matched to it), when it has none yet."""
        with self.lock:
            r = self._turnless[index]
            if r.prompt is None:
                self._turnless[index] = replace(r, prompt=prompt)
                self._touch()

    def reject_request(self, request_id: int | None, message: str, *, fatal: bool = False) -> bool:
        """A ``BMOE_ERROR`` for request ``request_id``. When the newest turn is that request's
        (its ``BMOE_BEGIN`` opened it) and holds nothing yet (no token row, no text, no end record),
        or no turn is (a runtime that refuses before ``BMOE_BEGIN``, as bmoe-run does) and the session
        is ready, the runtime refused it before its first token: the empty turn is withdrawn and
        the request kept turn-less (``rejected``, or ``failed`` when ``fatal``) with its prompt (the
        turn's, else the noted request's) and ``message``; returns True. An error of a turn that
        ran stays on it (:meth:`set_turn_error`), and an error of no request (no id, or before the
        session is ready) is neither; returns False."""
        with self.lock:
            t = self._turns[-1] if self._turns else None
            if request_id is None or (t is None or t.id != request_id) and self._ready is None:
                return False
            if t is not None and t.id == request_id:
                if t.done is not None or t.text_len or t.reasoning or t.first_token != self._tokens.n:
                    self.set_turn_error(request_id, message)
                    return False
                self._turns.pop()
                self._turn_count -= 1
                prompt = t.prompt
            else:
                req = self.find_request(request_id)
                prompt = req.get("prompt") if req is not None and isinstance(req.get("prompt"), str) else None
            self.add_turnless(request_id, prompt, "failed" if fatal else "rejected", message)
            return True

    def set_turn_error(self, request_id: int | None, message: str, *, turn: Turn | None = None) -> None:
        """A failed request: attach the message to ``turn``, else to the newest turn when it is
        request ``request_id``'s."""
        with self.lock:
            if turn is None and self._turns and request_id is not None and self._turns[-1].id == request_id:
                turn = self._turns[-1]
            if turn is not None:
                turn._error = safe(message)
                self._touch()

    # ------------------------------------------------------------------------------ derived reads
    def mode(self) -> tuple[str, str]:
        """("serial" | "overlap" | "none" | "unknown", why): which term is the wall-additive flash wait.

        Overlap when the run header says ``overlap=1``, or when any token has ``io_ms > wall_ms``
        (lane-busy time can only exceed wall under overlap), or any ``stall_ms > 0``; "none" when
        the rows carry no per-token time at all (a ``/metrics`` server without per-token time
        sums: there is no mode to tell); "unknown" when there are no token rows and no summary
        stall figure (it draws like serial)."""
        with self.lock:
            flag = self._meta.get("overlap")
            if flag is not None:
                if flag not in ("0", "false"):
                    return "overlap", "flag overlap=1 in the run header"
                return "serial", "flag overlap=0 in the run header"
            n = self.tokens.n
            if n and not any(self.tokens.has(c) for c in ("wall_ms", "io_ms", "stall_ms", "compute_ms")):
                return "none", "no per-token times in this source"
            if n:
                if self._io_over_wall:
                    return "overlap", f"io_ms > wall_ms on {self._io_over_wall}/{n} tokens (io is lane-busy time)"
                if self._stall_positive:
                    return "overlap", f"stall_ms > 0 on {self._stall_positive}/{n} tokens"
                if self.tokens.has("stall_ms"):
                    return "serial", "stall_ms is 0 on every token and io_ms <= wall_ms"
                return "serial", "no stall_ms column and io_ms <= wall_ms on every token"
            stall = self._summary.get("stall_s_tok")
            if stall is not None and stall == stall:
                if stall > 0:
                    return "overlap", f"summary stall {stall:g} s/token > 0 (no token rows)"
                return "serial", "summary stall 0 s/token (no token rows)"
            return "unknown", "no token rows and no stall figure in this source"

    def breakdown(self, lo: int = 0, hi: int | None = None) -> dict[str, F64]:
        """Per-token wall = compute + flash + mgmt (ms) for rows ``[lo, hi)`` (default all).

        flash is ``io_ms`` in serial runs and ``stall_ms`` under overlap (never io on wall under
        overlap); compute is ``compute_ms`` when sent, else the residual wall - flash - mgmt.
        Returns ``wall``, ``compute``, ``flash``, ``mgmt`` arrays (NaN = missing)."""
        with self.lock:
            mode, _ = self.mode()
            tok = self.tokens
            wall = tok.view("wall_ms", lo, hi)
            flash = tok.view("stall_ms" if mode == "overlap" else "io_ms", lo, hi)
            mgmt = tok.view("mgmt_ms", lo, hi)
            if tok.has("compute_ms"):
                compute = tok.view("compute_ms", lo, hi)
            else:
                compute = wall - np.nan_to_num(flash) - np.nan_to_num(mgmt)
            return {"wall": wall, "compute": compute, "flash": flash, "mgmt": mgmt}

    def column_stats(self, name: str, lo: int = 0, hi: int | None = None) -> ColumnStats:
        """Exact count/sum/min/max of a token column over rows ``[lo, hi)`` (default the whole run)."""
        with self.lock:
            return self._tokens.stats(name, lo, hi)

    def series(self, names: Iterable[str], lo: int = 0, hi: int | None = None, bins: int = 100) -> Series:
        """Token columns in about ``bins`` bins over rows ``[lo, hi)`` (default the whole run):
        count/sum/min/max per bin, exact, from the finest resolution still held (an overview strip,
        a zoomed window)."""
        with self.lock:
            return self._tokens.series(names, lo, hi, bins)

    def route_token_count(self) -> int:
        """Rows that have routing rows or per-layer counts (decode tokens; prefill rows do not count)."""
        with self.lock:
            return max(0, self.routes.count_rows)

    def hit_matrix(self, stop: int | None = None, start: int = 0) -> F64:
        """Layer x row hit share, float ``[n_layer, stop - start]``; NaN where nothing was looked
        up (or the row is older than the per-layer rows kept: see :meth:`layer_series`)."""
        with self.lock:
            stop = self.route_token_count() if stop is None else stop
            return self._routes_now().hit_share(self._n_layer or 0, start, stop)

    def layer_series(self, lo: int = 0, hi: int | None = None, bins: int = 100) -> LayerShares:
        """Hit share per layer in about ``bins`` bins over rows ``[lo, hi)`` (default every row with
        counts): exact per bin, for the whole-run heatmap and zoomed windows."""
        with self.lock:
            hi = self.route_token_count() if hi is None else hi
            return self._routes_now().layer_series(self._n_layer or 0, lo, hi, bins)

    def tier_split(self, lo: int, hi: int, l0: int, l1: int) -> tuple[int, int] | None:
        """(page-cache misses, disk misses) of tokens ``[lo, hi)`` in layers ``[l0, l1)``, from
        the routing rows' tiers (docs/memory.md "The tiers on the maps"); None when the source
        did not say or those rows are no longer held."""
        with self.lock:
            return self._routes_now().tier_split(lo, hi, l0, l1)

    def expert_aggregates(self, stop: int | None = None) -> ExpertCounts:
        """Per (layer, expert) routed/hit counts and last-routing hit over tokens ``[0, stop)``
        (prefill rows of turns started before ``stop`` included). ``as_of`` is set when ``stop`` is
        older than the routing rows kept and the counts stop at an earlier checkpoint."""
        with self.lock:
            return self._routes_now().expert_counts(self._n_layer or 0, self._n_expert or 0, stop)

    def expert_counts(self, stop: int | None = None) -> tuple[I64, I64]:
        """(routed counts, hit counts), int ``[n_layer, n_expert]``, over tokens ``[0, stop)``."""
        a = self.expert_aggregates(stop)
        return a.routed, a.hits

    def last_routing_hit(self, stop: int | None = None) -> NDArray[np.int8]:
        """int8 ``[n_layer, n_expert]``: 1 hit / 0 miss at the expert's last routing, -1 never routed."""
        return self.expert_aggregates(stop).last

    def wall_scale(self) -> float:
        """A y scale for per-token wall time (ms): :func:`robust_top` of ``wall_ms`` over the rows
        held at full resolution (1.0 when there is none)."""
        with self.lock:
            held = (self._tokens.n, self._tokens.start)  # rows are append-only: these say what is held
            if self._wall_scale[0] == held:
                return self._wall_scale[1]
            top = robust_top(self._tokens.view("wall_ms", self._tokens.start))
            self._wall_scale = (held, top)
            return top


def _turn_detail(done: Mapping[str, Any]) -> str:
    """A finished turn's event detail: its tokens and tok/s as its end record gives them."""
    parts = []
    for key, unit in (("tokens", "tokens"), ("tok_s", "tok/s")):
        v = done.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            parts.append(f"{v:g} {unit}")
    return ", ".join(parts)


def robust_top(values: np.ndarray) -> float:
    """The top of a y scale for ``values`` (NaN ignored) that a few outliers do not set: the 98th
    percentile, or the far-outlier fence Q3 + 3 x IQR when that is lower (a cold cache's first
    tokens at 300 ms over a run of 5-30 ms tokens would leave the bars a row tall). 1.0 when
    nothing is finite and positive."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if not finite.size:
        return 1.0
    q1, q3, p98 = np.percentile(finite, (25, 75, 98))
    top = float(min(p98, q3 + 3.0 * (q3 - q1)))
    return top if top > 0 and math.isfinite(top) else (float(p98) if p98 > 0 else 1.0)
