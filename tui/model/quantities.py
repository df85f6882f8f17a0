"""The catalogue of quantities: every number bmoe-top shows or emits, defined once.

Each :class:`Quantity` says what one number is: its ``key`` (unique here), the ``field`` it is
read from (a run-summary key, a token column, a JSON key, a Prometheus series), its ``label``,
``unit`` and :class:`Scope` (one token, one turn, one request, the run so far, since the server
process started, one scrape interval, a rate window, ...), the ``formula`` over the run model's
fields or the source's series (``promql`` for the fleet: ``bmoe_top.tui.fleet.queries`` builds
its columns from it), a one-sentence ``definition``, what it is ``not_``, and its ``form`` (how
``bmoe_top.tui.present.numbers.show`` formats it: a percentage's difference is in points, bytes
and MiB go through one size formatter, durations through one duration formatter).

Screens, panels, the title, every ``--once --json`` and ``--summary`` document, the fleet's table
and drill-down and the Grafana board read their labels and definitions here; the user guide's
table of numbers (docs/user-guide.md "Numbers") is generated from it
(``bmoe_top.tui.present.numbers.quantity_table``, checked by a test).

Labels and scope: :meth:`Quantity.scoped` is the label with its scope in words
(``tok/s (this request)``, ``tok/s (all slots, 10 s)``). A screen uses it for every quantity
whose label another quantity of another scope shares (:data:`SHARED_LABELS`), so two scopes of
one number on one screen are never told apart by place alone. No Textual import.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CATALOGUE", "NO_CACHE", "NOT_EXPORTED", "SHARED_LABELS", "TIERS", "Form", "Quantity", "Scope", "q",
           "quantities"]

#: What a value the server does not export reads as (one wording, screen and JSON).
NOT_EXPORTED = "not exported"
#: What the hit rate of a run the source says had no expert cache (a hit rate of -1) reads as.
NO_CACHE = "no cache (off in this run)"


class Scope(StrEnum):
    """What a number covers. The value is the word a label uses (:meth:`Quantity.scoped`)."""

    TOKEN = "this token"  # one generated (decode) token, or one row of the run's columns
    TURN = "this turn"  # one generation (a session's request), so far while it runs
    REQUEST = "this request"  # one server request (an audit record)
    RECENT = "last {n}"  # the newest rows up to the viewed one
    RUN = "run"  # the run's rows up to the viewed one
    SUMMARY = "{summary}"  # the source's own end figures: the turn, the run, since start, since load
    SINCE_START = "since start"  # since the server process started (its counters)
    SINCE_LOAD = "since load"  # one process run of an audit log, since its load record
    INTERVAL = "{interval}"  # one /metrics scrape interval, the whole server
    WINDOW = "{window}"  # a Prometheus rate() window, the whole server
    NOW = "now"  # a gauge: its value at the newest reading
    DEVICE = "device"  # the device sidecar: the whole process
    PREDICTED = "predicted"  # the tok/s model at a budget (docs/analysis.md "Predicted speed")


class Form(StrEnum):
    """How a value is formatted (``bmoe_top.tui.present.numbers.show``)."""

    COUNT = "count"  # integer, thousands separated: 1,024
    RATE = "rate"  # 3 significant digits: 3.94, 45.6, 456, 4,560
    PCT = "pct"  # one decimal and %: 79.3 % (a difference: +35.5 pt)
    MIB = "mib"  # a size given in MiB: 812 MiB, 1.59 GiB
    BYTES = "bytes"  # a size given in bytes, shown as MiB/GiB (one size formatter)
    MIB_RATE = "mib_rate"  # MiB/s, 3 significant digits
    MS = "ms"  # a duration given in ms: 245 ms, 1.23 s (one duration formatter)
    SECONDS = "seconds"  # a duration given in s, shown as the same formatter does
    CELSIUS = "celsius"  # a temperature: 41.0 °C
    NUMBER = "number"  # any other number, 3 significant digits


@dataclass(frozen=True, slots=True)
class Quantity:
    """One number (see the module docstring). ``qualifier`` overrides the scope's words in the
    label (``{interval}``, ``{window}``, ``{n}`` are filled by :meth:`scoped`); ``ended``: the
    scope's words once the source has ended and its last row is the one read, where the live
    words (``so far``) no longer hold; ``needs``: for a
    fleet column, the alternatives of exposed series it reads (one alternative exported = the
    column is exported); ``where``: the screens and documents that show it."""

    key: str
    field: str
    label: str
    unit: str
    scope: Scope
    form: Form
    formula: str
    definition: str
    not_: str
    where: tuple[str, ...] = ()
    qualifier: str = ""
    promql: str = ""
    needs: tuple[tuple[str, ...], ...] = ()
    ended: str = ""

    def words(self, **fill: object) -> str:
        """The scope in words (``all slots, 1.0 s``); a placeholder without a value stays general
        (``all slots, interval``)."""
        text = self.qualifier or str(self.scope)
        for name, default in (("interval", "interval"), ("window", "rate window"), ("n", "rows"),
                              ("summary", "the panel's heading")):
            text = text.replace("{" + name + "}", str(fill.get(name, default)))
        return text

    def words_at(self, ended: bool, **fill: object) -> str:
        """:meth:`words` for a row read while the source is live or before its last row, else
        (``ended``: the source has ended and its last row is the one read) :attr:`ended`'s words
        when the quantity has them (``total``)."""
        return self.ended if ended and self.ended else self.words(**fill)

    def scoped(self, **fill: object) -> str:
        """The label with its scope: ``tok/s (all slots, 1.0 s)``."""
        return f"{self.label} ({self.words(**fill)})"

    def screen_label(self, **fill: object) -> str:
        """The label a screen shows: :meth:`scoped` when another quantity of another scope
        shares the label (:data:`SHARED_LABELS`), else the label alone."""
        return self.scoped(**fill) if self.label in SHARED_LABELS else self.label

    def running_words(self) -> str:
        """What a value of a source that still runs covers, for a screen to put beside it when
        :meth:`screen_label` does not already say it (``""``): ``now`` for a gauge
        (:attr:`Scope.NOW`), ``so far`` for what grows with the run."""
        if self.label in SHARED_LABELS:
            return ""
        return str(Scope.NOW) if self.scope is Scope.NOW else "so far"


def _q(key: str, field: str, label: str, unit: str, scope: Scope, form: Form, formula: str, definition: str,
       not_: str, where: tuple[str, ...] = (), **kw: object) -> Quantity:
    return Quantity(key, field, label, unit, scope, form, formula, definition, not_, where, **kw)  # type: ignore[arg-type]


S, F = Scope, Form
PANEL = ("run panel", "replay --summary [--json]", "--once --json (run)")
TITLE = ("title",)
METRICS = ("attach --metrics panel", "attach --metrics --once --json")
AUDIT = ("attach --audit panel", "attach --audit --once --json")
FLEET = ("fleet table", "fleet drill-down", "fleet --once --json", "Grafana board")
TRENDS = ("trends", "breakdown readout")
TIER_PANEL = ("run panel (memory tiers)",)

#: The tiers that serve a routed expert, nearest first: the runtime's expert cache, the kernel's
#: page cache (a buffered read of pages it held), the disk (docs/memory.md)
TIERS = ("expert cache", "page cache", "disk")
ALERTS = ("alert rules",)
DIAGNOSIS = ("diagnosis line", "diagnosis (--json)")

WHATIF = ("whatif screen", "whatif --json")

_TIMED = "bmoe:timed_tokens_total"
_WALL = "bmoe:token_wall_seconds_total"
_COMPUTE = "bmoe:token_compute_seconds_total"
_MGMT = "bmoe:token_mgmt_seconds_total"


def _rate(name: str) -> str:
    return f"sum by ($by) (rate({name}$sel[$r]))"


def _per_token(name: str) -> str:
    return f"1000 * {_rate(name)} / {_rate(_TIMED)}"


_ITEMS: tuple[Quantity, ...] = (
    # -- the run panel: the source's own end figures (its heading names what they cover), else
    #    what bmoe-top derives from the token rows up to the viewed one -------------------------
    _q("summary.tokens", "tokens", "tokens", "tokens", S.SUMMARY, F.COUNT,
       "the source's token count; else the token rows; a routing trace alone: its decode tokens",
       "Generated (decode) tokens.", "Not prompt tokens (`prompt tokens`), not prefill.", PANEL),
    _q("summary.tok_s", "tok_s", "tok/s", "tok/s", S.SUMMARY, F.RATE,
       "tokens / the sum of their own wall time (`1000 / mean(wall_ms)` over the token rows)",
       "Decode speed of one stream: each token's own wall time, sampling and the engine's work included.",
       "Not the throughput of all slots together (`tok/s (all slots, ...)`), not the `llama_decode` call "
       "alone (`decode tok/s`).", PANEL),
    _q("summary.s_per_tok", "s_per_tok", "s/token", "s", S.SUMMARY, F.SECONDS,
       "the sum of the tokens' wall time / tokens", "Mean wall time of one generated token.",
       "Not the time to the first token (TTFT), not prefill time.", PANEL),
    _q("summary.read_mib", "read_mib", "read", "MiB", S.SUMMARY, F.MIB,
       "sum(read_mib) over the token rows; `/metrics`: upload bytes / 2^20",
       "Expert bytes read from flash (payload), in MiB (2^20 bytes).",
       "Not the page-aligned transfer (`read aligned`); from `/metrics` and the audit log it includes the "
       "prompts' reads, from token rows only the decode tokens'.", PANEL),
    _q("summary.read_mib_per_tok", "read_mib_per_tok", "read/token", "MiB", S.SUMMARY, F.MIB,
       "read MiB / tokens", "Expert payload MiB read per generated token.",
       "Not page-aligned (`aligned/tok`).", PANEL),
    _q("summary.cache_hit_pct", "cache_hit_pct", "cache hit", "%", S.SUMMARY, F.PCT,
       "100 * hits / (hits + misses); -1 = no cache; a routing trace alone: its decode rows' residency",
       "Share of expert lookups the cache held (bmoe-run's contract field: this generation's decode "
       "lookups; `/metrics` and the audit log: every lookup since start / load).",
       "Not `hit since load` (bmoe-cli's figure, prompts included) where both are sent; -1 is no cache, "
       "not 0 %.", PANEL),
    _q("summary.resident_mib", "resident_mib", "resident", "MiB", S.NOW, F.MIB,
       "the cache's resident MiB as the source said it last; `/metrics`: llamacpp:moe_cache_resident_bytes / 2^20",
       "Expert bytes the cache holds.",
       "Not the budget (`budget`).", PANEL),
    _q("summary.budget_mib", "budget_mib", "budget", "MiB", S.NOW, F.MIB,
       "`--cache-mb`, as the source says it", "The expert cache's size limit.",
       "Not what it holds now (`resident`).", PANEL),
    _q("summary.n_prompt", "n_prompt", "prompt tokens", "tokens", S.SUMMARY, F.COUNT,
       "the source's prompt token count", "Prompt tokens evaluated (prefill).",
       "Not generated tokens.", PANEL),
    _q("summary.prefill_s", "prefill_s", "prefill", "s", S.SUMMARY, F.SECONDS,
       "the source's prefill time", "Time spent evaluating the prompt.", "Not TTFT (which adds the first token).",
       PANEL),
    _q("summary.prefill_tps", "prefill_tps", "prefill tok/s", "tok/s", S.SUMMARY, F.RATE,
       "prompt tokens / prefill seconds", "Prompt evaluation speed.", "Not decode speed (`tok/s`).", PANEL),
    _q("summary.load_s", "load_s", "load", "s", S.SUMMARY, F.SECONDS, "the source's model load time",
       "Time to load the model.", "Not part of TTFT/turn.", PANEL),
    _q("summary.ttft_s", "ttft_s", "TTFT", "s", S.SUMMARY, F.SECONDS,
       "request (or start) to the first generated token",
       "Time to the first token (bmoe-cli's end-of-run figure adds the model load; a session's is per turn).",
       "Not prefill alone.", PANEL),
    _q("summary.compute_s_tok", "compute_s_tok", "compute/token", "s", S.SUMMARY, F.SECONDS,
       "mean compute_ms / 1000", "Compute time per token: the contract's residual (wall - flash wait - mgmt).",
       "Not CPU time (`cpu/token`).", PANEL),
    _q("summary.io_s_tok", "io_s_tok", "flash io/token", "s", S.SUMMARY, F.SECONDS,
       "mean io_ms / 1000",
       "Time the expert reads took per token: the flash wait in serial I/O, the lanes' busy time under "
       "`--overlap`.",
       "Not a share of wall under overlap: lane-busy time can exceed the wall time.", PANEL),
    _q("summary.stall_s_tok", "stall_s_tok", "stall/token", "s", S.SUMMARY, F.SECONDS,
       "mean stall_ms / 1000",
       "Wall time per token the compute waited for expert reads under `--overlap` (the flash wait there).",
       "Not flash wait in serial I/O: serial I/O has no stall (its flash wait is `flash io/token`).", PANEL),
    _q("summary.mgmt_s_tok", "mgmt_s_tok", "mgmt/token", "s", S.SUMMARY, F.SECONDS, "mean mgmt_ms / 1000",
       "Cache management per token (page commits, evictions, LRU bookkeeping).", "Not I/O.", PANEL),
    # the extra fields a source may send (docs/telemetry.md "Additive fields")
    _q("summary.n_prompt_cached", "n_prompt_cached", "prompt cached", "tokens", S.SUMMARY, F.COUNT,
       "the server's cached prompt tokens", "Prompt tokens reused from the server's cache.",
       "Not evaluated prompt tokens.", PANEL),
    _q("summary.hit_pct_decode", "hit_pct_decode", "hit decode", "%", S.SUMMARY, F.PCT,
       "100 * decode hits / decode lookups of this generation",
       "Cache hit share of this generation's decode lookups.", "Not since load; prompts not included.", PANEL),
    _q("summary.hit_pct_since_load", "hit_pct_since_load", "hit since load", "%", S.SUMMARY, F.PCT,
       "100 * hits / lookups since the model loaded", "Cache hit share since load, prompts included.",
       "Not this generation's decode-only figure (`hit decode`).", PANEL),
    _q("summary.xfer_mib_tok", "xfer_mib_tok", "aligned/tok", "MiB", S.SUMMARY, F.MIB,
       "page-aligned MiB moved / tokens", "Page-aligned MiB per token (what O_DIRECT moves).",
       "Not the payload (`read/token`), which is smaller.", PANEL),
    _q("summary.xfer_mib", "xfer_mib", "read aligned", "MiB", S.SUMMARY, F.MIB, "page-aligned bytes / 2^20",
       "Page-aligned MiB moved from flash.", "Not the payload (`read`).", PANEL),
    _q("summary.decode_tok_s", "decode_tok_s", "decode tok/s", "tok/s", S.SUMMARY, F.RATE,
       "tokens / time in the llama_decode call", "Speed of the decode call alone (bmoe-cli's tok/s).",
       "Not the per-token wall rate (`tok/s`), which includes sampling and the engine's work.", PANEL),
    _q("summary.cache_evictions", "cache_evictions", "evictions", "experts", S.SUMMARY, F.COUNT,
       "experts evicted", "Experts the cache evicted.", "Not misses.", PANEL),
    _q("summary.cache_rereads", "cache_rereads", "re-reads", "experts", S.SUMMARY, F.COUNT,
       "experts read again after an eviction", "Experts read from flash again after being evicted.",
       "Not every miss.", PANEL),
    _q("summary.rereads_tok", "cache_rereads/tok", "re-reads/token", "re-reads", S.SUMMARY, F.NUMBER,
       "re-reads / tokens", "Re-reads per generated token.", "Not misses per token.", PANEL),
    _q("summary.majflt_tok", "majflt/tok", "majflt/token", "majflt", S.SUMMARY, F.NUMBER,
       "major page faults / tokens", "Major page faults per generated token.", "Not minor faults.", PANEL),
    _q("summary.cpu_s_tok", "cpu_s/tok", "cpu/token", "s", S.SUMMARY, F.SECONDS, "process CPU seconds / tokens",
       "CPU time per token, all threads together.", "Not wall time.", PANEL),
    _q("summary.rss_mib", "rss_mib", "RSS", "MiB", S.SUMMARY, F.MIB, "resident set size",
       "The process's resident memory.", "Not the peak (`peak RSS`).", PANEL),
    _q("summary.peak_rss_mib", "peak_rss_mib", "peak RSS", "MiB", S.SUMMARY, F.MIB, "peak resident set size",
       "The process's highest resident memory.", "Not the memory now (`RSS`).", PANEL),
    # bmoe-cli's route-ahead and prediction lines (docs/telemetry.md "Additive fields")
    _q("summary.route_ahead_agree_pct", "route_ahead_agree_pct", "ahead agreed", "%", S.SUMMARY, F.PCT,
       "moe-route-ahead: slots where the committed selection agreed with the router / slots",
       "Share of routed slots where bmoe-cli's route-ahead selection, committed early, agreed with the router.",
       "Not a cache hit rate.", PANEL),
    _q("summary.predict_stale_pct", "predict_stale_pct", "stale-gate hit", "%", S.SUMMARY, F.PCT,
       "moe-predict: routed slots the stale-gate predictor named / routed slots",
       "Share of routed slots bmoe-cli's stale-gate predictor named in advance.",
       "Not the share of whole routings it got exactly right (`predict_stale_exact_pct`).", PANEL),
    _q("summary.predict_control_pct", "predict_control_pct", "predict control", "%", S.SUMMARY, F.PCT,
       "moe-predict: routed slots the fresh-gate control named / routed slots",
       "The fresh-gate control's share of routed slots named (below 100 % only from numerical drift).",
       "Not a prediction made ahead of time.", PANEL),
    # -- the title: the rows up to the viewed one -------------------------------------------------
    _q("recent.tok_s", "tok_s", "tok/s", "tok/s", S.RECENT, F.RATE,
       "token rows: 1000 * n / sum(wall_ms) over the newest 32 rows up to the viewed one; interval rows: "
       "sum(tokens_in_interval) / sum(interval_s); request rows: sum(n_gen) / sum(t_gen)",
       "Generation speed over the newest rows up to the viewed one (a finished file: the whole run up to it).",
       "Not the source's own total (`tok/s` in the run panel); for a server (interval rows) it counts all "
       "slots together.", TITLE),
    _q("recent.flash_pct", "flash_pct", "flash/wall", "% of wall", S.RECENT, F.PCT,
       "mean flash wait / mean wall_ms over the same rows (flash wait: io_ms serial, stall_ms overlap)",
       "Share of the wall time spent waiting for expert reads.",
       "Not io_ms / wall under `--overlap` (lane-busy time can exceed wall).", TITLE),
    _q("recent.stall_pct", "stall_pct", "stall/wall", "% of wall", S.RECENT, F.PCT,
       "mean stall_ms / mean wall_ms over the newest 32 rows up to the row",
       "Share of the wall time compute waited for expert reads under `--overlap`.",
       "Not the flash wait share in serial I/O (serial I/O has no stall: 0); not io_ms / wall.", ALERTS),
    _q("recent.tok_s_pct_first", "tok_s_pct_first", "tok/s vs first", "%", S.RECENT, F.PCT,
       "100 * recent tok/s / the tok/s of rows 8-39 (the run's first steady window); absent before row 71",
       "Speed over the newest 32 rows as a share of the run's own first steady window (100 % = as fast).",
       "Not against another run or a predicted speed.", ALERTS),
    _q("recent.read_mib_tok", "read_mib_tok", "MiB/tok", "MiB", S.RECENT, F.MIB,
       "mean read_mib over the same rows", "Expert payload MiB read per generated token.",
       "Not page-aligned.", TITLE),
    # -- the diagnosis line: the newest 32 rows (docs/diagnosis.md) --------------------------------
    _q("recent.mgmt_pct", "mgmt_pct", "mgmt/wall", "% of wall", S.RECENT, F.PCT,
       "mean mgmt_ms / mean wall_ms over the newest 32 rows",
       "Share of the wall time spent on cache management.", "Not I/O time.", DIAGNOSIS),
    _q("recent.read_mb_s", "read_mb_s", "read during wait", "MB/s", S.RECENT, F.RATE,
       "mean read_mib * 1.048576 / (mean flash wait / 1000) over the newest 32 rows",
       "Expert bytes read per second of flash wait (10^6 bytes, as `probe` measures).",
       "Not the device's bandwidth (`probe`), not MiB/s.", DIAGNOSIS),
    _q("recent.profile_cover_pct", "profile_cover_pct", "profile cover", "%", S.RECENT, F.PCT,
       "100 * routed lookups whose expert the profile ranks / routed lookups, newest 32 tokens of routing",
       "Share of the newest routing the loaded profile's hot set covers.",
       "Not the cache hit rate (the budget may hold less than the profile ranks).", DIAGNOSIS),
    # -- one row of the columns (the breakdown's readout, the trends) --------------------------------
    _q("token.tok_s", "tok_s", "tok/s", "tok/s", S.TOKEN, F.RATE,
       "1000 / wall_ms of the row (interval rows: the interval's all-slot rate)",
       "Speed of the row's token (interval rows: tokens the counter gained over the interval).",
       "Not an average over the run.", TRENDS),
    _q("token.cache_hit_pct", "cache_hit_pct", "hit", "%", S.TURN, F.PCT,
       "the row's cache_hit_pct: cumulative over this generation's decode lookups (interval and request "
       "rows: the server's since start / the process's since load)",
       "The hit rate the run had reached at this row (the cache warm-up curve).",
       "Not the hit share of this token alone (the layer x token heatmap shows that).", TRENDS + TITLE,
       qualifier="so far", ended="total"),
    _q("token.read_mib", "read_mib", "read", "MiB", S.TOKEN, F.MIB, "the row's read_mib",
       "Expert payload MiB read for the row's token (interval and request rows: per token, mean).",
       "Not page-aligned.", TRENDS),
    _q("token.wall_ms", "wall_ms", "wall", "ms/token", S.TOKEN, F.MS, "the row's wall_ms",
       "Wall time of the token: compute + flash wait + mgmt.", "Not CPU time.", TRENDS),
    _q("token.compute_ms", "compute_ms", "compute", "ms/token", S.TOKEN, F.MS,
       "compute_ms, else wall - flash wait - mgmt", "The contract's residual: wall time not spent on flash or mgmt.",
       "Not CPU time.", TRENDS),
    _q("token.flash_ms", "flash_ms", "flash wait", "ms/token", S.TOKEN, F.MS,
       "io_ms in serial I/O, stall_ms under overlap",
       "Wall time the token waited for expert reads.",
       "Not io_ms under `--overlap` (the lanes' busy time, which can exceed wall).", TRENDS),
    _q("token.mgmt_ms", "mgmt_ms", "mgmt", "ms/token", S.TOKEN, F.MS, "the row's mgmt_ms",
       "Cache management time of the token.", "Not I/O.", TRENDS),
    _q("token.io_ms", "io_ms", "io lanes", "ms/token", S.TOKEN, F.MS, "the row's io_ms under overlap",
       "The I/O lanes' busy time for the token under `--overlap`.",
       "Not wall time: it can exceed the token's wall.", TRENDS),
    _q("token.rss_mib", "rss_mib", "rss", "MiB", S.TOKEN, F.MIB, "the row's rss_mib",
       "The runtime process's resident memory at the token.", "Not the peak (`peak RSS`).", TRENDS),
    _q("token.mem_available_mib", "mem_available_mib", "avail", "MiB", S.TOKEN, F.MIB,
       "the row's mem_available_mib", "The device's available memory at the token.", "Not free memory alone.",
       TRENDS),
    _q("token.swap_mib", "swap_mib", "swap", "MiB", S.TOKEN, F.MIB, "the row's swap_mib",
       "Swap in use at the token (e.g. a phone's zram).", "Not swap traffic.", TRENDS),
    _q("token.majflt", "majflt", "majflt", "faults", S.TOKEN, F.COUNT, "the row's majflt",
       "Major page faults during the token.", "Not minor faults.", TRENDS),
    _q("token.cpu_ms", "cpu_ms", "cpu", "ms", S.TOKEN, F.MS, "the row's cpu_ms",
       "Process CPU time during the token, all threads together.", "Not wall time.", TRENDS),
    # -- the live screen's Turns table: one turn (a session's generate request) ----------------------
    _q("turn.tokens", "tokens", "tokens", "tokens", S.TURN, F.COUNT, "BMOE_DONE tokens",
       "Tokens the turn generated.", "Not its prompt.", ("live Turns table",)),
    _q("turn.tok_s", "tok_s", "tok/s", "tok/s", S.TURN, F.RATE, "BMOE_DONE tok_s (the turn's per-token wall)",
       "Decode speed of the turn.", "Not the run's (`tok/s` in the run panel), not the title's newest rows.",
       ("live Turns table",)),
    _q("turn.prefill_s", "prefill_s", "prefill", "s", S.TURN, F.SECONDS, "BMOE_DONE prefill_s",
       "The turn's prompt evaluation time.", "Not its TTFT.", ("live Turns table",)),
    _q("turn.ctx_pct", "ctx_pct", "ctx", "%", S.TURN, F.PCT, "100 * n_past / n_ctx",
       "Share of the context the session holds after the turn.", "Not the turn's own tokens.",
       ("live Turns table",)),
    _q("turn.hit_pct", "cache_hit_pct", "hit", "%", S.TURN, F.PCT, "BMOE_DONE cache_hit_pct",
       "Cache hit share of the turn's decode lookups.", "Not since load.", ("live Turns table",)),
    # -- attach --metrics: one scrape interval (all slots) ------------------------------------------
    _q("interval.count", "intervals", "intervals", "intervals", S.RUN, F.COUNT,
       "good scrapes - 1 - restarts seen (each process's first scrape is its baseline)",
       "Completed scrape intervals: one row of the run per pair of consecutive good scrapes of one server "
       "process (the title, the breakdown's rows and `intervals` of `--once --json` count the same).",
       "Not the scrapes: n good scrapes of one process give n - 1 intervals (the status line counts the "
       "scrapes).", ("title", "breakdown", "attach --metrics status line", "attach --metrics --once --json")),
    _q("interval.length", "interval_s", "length", "s", S.INTERVAL, F.SECONDS, "t(scrape) - t(previous scrape)",
       "Time between the two scrapes the rates are over.", "Not the poll interval asked for.", METRICS,
       qualifier="this interval"),
    _q("interval.tok_s", "tok_s", "tok/s", "tok/s", S.INTERVAL, F.RATE,
       "Δ llamacpp:tokens_predicted_total / interval seconds",
       "Tokens all slots generated in the interval, over its wall time.",
       "Not one stream's decode speed (`tok/s` in the run panel); llama-server adds a request's tokens "
       "at its end, so a long request shows 0 until it ends.", METRICS, qualifier="all slots, {interval}"),
    _q("interval.slot_tok_s", "slot_tok_s", "live tok/s", "tok/s", S.INTERVAL, F.RATE,
       "(Δ tokens counter + Δ tokens the processing slots hold) / interval seconds (`/slots`)",
       "Tokens generated in the interval, finished requests or not, all slots.",
       "Not the counter's rate alone (`tok/s`).", METRICS, qualifier="all slots, /slots, {interval}"),
    _q("interval.prompt_tok_s", "prompt_tok_s", "prompt tok/s", "tok/s", S.INTERVAL, F.RATE,
       "Δ llamacpp:prompt_tokens_total / interval seconds", "Prompt tokens all slots evaluated in the interval, "
       "over its wall time.", "Not prefill speed of one request (`prefill tok/s`).", METRICS,
       qualifier="all slots, {interval}"),
    _q("interval.prompt_cached", "prompt_cached", "prompt cached", "tokens", S.INTERVAL, F.COUNT,
       "Δ llamacpp:prompt_tokens_cached_total", "Prompt tokens reused from the server's cache in the interval.",
       "Not evaluated prompt tokens.", METRICS),
    _q("interval.hit_pct", "hit_pct", "hit", "%", S.INTERVAL, F.PCT,
       "100 * Δhits / (Δhits + Δmisses)", "Cache hit share of the interval's lookups.",
       "Not since start (`hit (since start)`); no lookups = idle, not 0 %.", METRICS),
    _q("interval.read_mib_s", "read_mib_s", "read", "MiB/s", S.INTERVAL, F.MIB_RATE,
       "Δ llamacpp:moe_cache_upload_bytes_total / 2^20 / interval seconds",
       "Expert bytes read from flash per second in the interval, prompts included.", "Not per token.", METRICS),
    _q("interval.swaps", "swaps", "swaps", "experts", S.INTERVAL, F.COUNT, "Δ llamacpp:moe_cache_swaps_total",
       "Experts the adaptive cache swapped in during the interval.", "Not evictions of the LRU cache.", METRICS),
    _q("interval.token_ms", "token_ms", "ms per token", "ms/token", S.INTERVAL, F.MS,
       "Δ bmoe:token_<part>_seconds_total * 1000 / Δ bmoe:timed_tokens_total",
       "Mean wall, io, stall, mgmt and compute time per token generated in the interval.",
       "Not the newest token's time.", METRICS, qualifier="mean over {interval}"),
    # -- attach --metrics: the counters since the server process started --------------------------
    _q("since_start.hit_pct", "hit_pct", "hit", "%", S.SINCE_START, F.PCT,
       "llamacpp:moe_cache_hit_ratio * 100, else 100 * hits / (hits + misses)",
       "Cache hit share of every lookup since the server started, prompts included.",
       "Not the interval's (`hit (all slots, ...)`).", METRICS),
    _q("since_start.tokens_predicted", "tokens_predicted", "generated", "tokens", S.SINCE_START, F.COUNT,
       "llamacpp:tokens_predicted_total", "Tokens generated since the server started.", "Not prompt tokens.",
       METRICS),
    _q("since_start.prompt_tokens", "prompt_tokens", "prompt", "tokens", S.SINCE_START, F.COUNT,
       "llamacpp:prompt_tokens_total", "Prompt tokens evaluated since the server started.",
       "Not cached prompt tokens.", METRICS),
    _q("since_start.hits", "hits", "hits", "lookups", S.SINCE_START, F.COUNT, "llamacpp:moe_cache_hits_total",
       "Expert lookups the cache held since the server started.", "Not experts.", METRICS),
    _q("since_start.hits_profile", "hits_profile", "from profile", "lookups", S.SINCE_START, F.COUNT,
       "llamacpp:moe_cache_hits_profile_total", "Of the hits, experts the profile put there.",
       "Not every hit.", METRICS),
    _q("since_start.misses", "misses", "misses", "lookups", S.SINCE_START, F.COUNT,
       "llamacpp:moe_cache_misses_total", "Expert lookups the cache did not hold since the server started.",
       "Not re-reads.", METRICS),
    _q("since_start.upload_bytes", "upload_bytes", "read", "MiB", S.SINCE_START, F.BYTES,
       "llamacpp:moe_cache_upload_bytes_total (bytes, shown in MiB)",
       "Expert bytes read from flash since the server started, prompts and decode.",
       "Not decode only (the CSV's rows); not page-aligned.", METRICS),
    _q("since_start.swaps", "swaps", "swaps", "experts", S.SINCE_START, F.COUNT, "llamacpp:moe_cache_swaps_total",
       "Experts the adaptive cache swapped in since start.", "Not evictions.", METRICS),
    _q("since_start.slots", "slots", "cache slots", "experts", S.NOW, F.COUNT, "llamacpp:moe_cache_slots",
       "Experts the cache can hold.", "Not server slots (`slots busy`).", METRICS),
    _q("since_start.prefilled", "prefilled", "prefilled", "experts", S.SINCE_START, F.COUNT,
       "llamacpp:moe_cache_prefilled", "Experts the profile filled at load.", "Not hits.", METRICS),
    _q("since_start.cache_bytes", "cache_bytes", "cache", "MiB", S.NOW, F.BYTES, "llamacpp:moe_cache_bytes",
       "The cache's size (bytes, shown in MiB).", "Not what it holds (`resident`).", METRICS),
    _q("since_start.requests_processing", "requests_processing", "processing", "requests", S.NOW, F.COUNT,
       "llamacpp:requests_processing", "Requests decoding now.", "Not queued ones.", METRICS + FLEET),
    _q("since_start.requests_deferred", "requests_deferred", "queued", "requests", S.NOW, F.COUNT,
       "llamacpp:requests_deferred", "Requests waiting for a slot now.", "Not processing ones.", METRICS + FLEET),
    _q("slots.busy", "slots", "slots busy", "slots", S.NOW, F.COUNT, "`/slots`: slots processing",
       "Server slots with a request in them, of all slots.", "Not cache slots.", METRICS),
    # -- attach --audit: a request, a process run since its load ----------------------------------
    _q("request.tok_s", "gen_tok_s", "tok/s", "tok/s", S.REQUEST, F.RATE, "1000 * n_gen / t_gen_ms",
       "Generation speed of one request.", "Not the process run's (`tok/s (since load)`).", AUDIT),
    _q("request.hit_pct", "hit_pct", "hit", "%", S.REQUEST, F.PCT, "100 * req_hits / (req_hits + req_misses)",
       "Cache hit share of one request's lookups, prompt included.", "Not since load.", AUDIT),
    _q("request.read_mib", "req_bytes_upload", "read", "MiB", S.REQUEST, F.BYTES, "req_bytes_upload / 2^20",
       "Expert bytes one request read from flash, prompt included.", "Not per token.", AUDIT),
    _q("request.prompt_ms", "t_prompt_ms", "prompt", "ms", S.REQUEST, F.MS, "t_prompt_ms",
       "Prompt evaluation time of one request.", "Not TTFT.", AUDIT),
    _q("request.gen_ms", "t_gen_ms", "gen", "ms", S.REQUEST, F.MS, "t_gen_ms",
       "Generation time of one request.", "Not wall clock including the queue.", AUDIT),
    _q("since_load.hit_pct", "hit_pct", "hit", "%", S.SINCE_LOAD, F.PCT, "100 * hits / (hits + misses) of the "
       "newest record", "Cache hit share of the process run's lookups since its load.", "Not one request's.",
       AUDIT),
    _q("since_load.bytes_upload", "bytes_upload", "read", "MiB", S.SINCE_LOAD, F.BYTES,
       "bytes_upload of the newest record (bytes, shown in MiB)",
       "Expert bytes the process run read from flash since load, prompts included.", "Not one request's.", AUDIT),
    _q("since_load.requests", "requests", "requests", "requests", S.SINCE_LOAD, F.COUNT, "request records",
       "Requests the process run finished.", "Not queued ones.", AUDIT),
    _q("since_load.gen_tps", "gen_tps", "tok/s", "tok/s", S.SINCE_LOAD, F.RATE, "exit perf: n_gen / t_gen",
       "Generation speed over the process run's requests.", "Not all slots' throughput.", AUDIT),
    _q("since_load.prompt_tps", "prompt_tps", "prompt tok/s", "tok/s", S.SINCE_LOAD, F.RATE,
       "exit perf: n_prompt / t_prompt", "Prompt speed over the process run's requests.", "Not decode speed.",
       AUDIT),
    _q("since_load.layer_hit_pct", "layer_hit_pct", "layer hit", "%", S.SINCE_LOAD, F.PCT,
       "per layer: 100 * hits / (hits + misses) of the exit (else load) record",
       "Cache hit share of each layer's lookups.", "Not per expert.", AUDIT),
    _q("since_load.cache_bytes", "cache_bytes", "cache", "MiB", S.SINCE_LOAD, F.BYTES, "load: cache.bytes",
       "The cache's size as the load record says it.", "Not what it holds.", AUDIT),
    _q("since_load.load_ms", "load_ms", "load", "ms", S.SINCE_LOAD, F.MS, "load: load_ms",
       "Time the process took to load the model (and fill the profile).", "Not TTFT.", AUDIT),
    # -- the fleet: one rate window of Prometheus, all slots ---------------------------------------
    _q("fleet.tok_s", "tok_s", "tok/s", "tok/s", S.WINDOW, F.RATE, "rate(llamacpp:tokens_predicted_total[r])",
       "Tokens the instance generated per second over the rate window, all slots together.",
       "Not one stream's decode speed (that is 1000 / `wall ms/tok`).", FLEET, qualifier="all slots, {window}",
       promql=_rate("llamacpp:tokens_predicted_total"), needs=(("llamacpp:tokens_predicted_total",),)),
    _q("fleet.prompt_tok_s", "prompt_tok_s", "prompt tok/s", "tok/s", S.WINDOW, F.RATE,
       "rate(llamacpp:prompt_tokens_total[r])", "Prompt tokens evaluated per second over the rate window.",
       "Not prefill speed of one request.", FLEET, qualifier="all slots, {window}",
       promql=_rate("llamacpp:prompt_tokens_total"), needs=(("llamacpp:prompt_tokens_total",),)),
    _q("fleet.hit_pct", "hit_pct", "hit", "%", S.WINDOW, F.PCT,
       "100 * rate(hits) / (rate(hits) + rate(misses))", "Cache hit share of the window's lookups.",
       "Not since start; no lookups = undefined, not 0 %.", FLEET,
       promql=f"100 * {_rate('llamacpp:moe_cache_hits_total')} / ({_rate('llamacpp:moe_cache_hits_total')} + "
              f"{_rate('llamacpp:moe_cache_misses_total')})",
       needs=(("llamacpp:moe_cache_hits_total", "llamacpp:moe_cache_misses_total"),)),
    _q("fleet.read_mib_s", "read_mib_s", "read", "MiB/s", S.WINDOW, F.MIB_RATE,
       "rate(llamacpp:moe_cache_upload_bytes_total[r]) / 2^20", "Expert MiB read from flash per second.",
       "Not per token.", FLEET,
       promql=f"{_rate('llamacpp:moe_cache_upload_bytes_total')} / 1048576",
       needs=(("llamacpp:moe_cache_upload_bytes_total",),)),
    # wall = compute + flash wait + mgmt, each in ms per generated token. bmoe-run's time sums when
    # exported; else llama-server's own generation time (wall only, no split).
    _q("fleet.wall_ms", "wall_ms", "wall", "ms/token", S.WINDOW, F.MS,
       "1000 * rate(bmoe:token_wall_seconds_total) / rate(bmoe:timed_tokens_total), else llama-server's "
       "generation seconds / tokens",
       "Mean wall time per generated token in the window (one stream's; 1000 / it is the stream's tok/s).",
       "Not the window divided by all slots' tokens.", FLEET, qualifier="mean over {window}",
       promql=f"{_per_token(_WALL)} or "
              f"1000 * {_rate('llamacpp:tokens_predicted_seconds_total')} / {_rate('llamacpp:tokens_predicted_total')}",
       needs=((_WALL, _TIMED), ("llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total"))),
    _q("fleet.compute_ms", "compute_ms", "compute", "ms/token", S.WINDOW, F.MS,
       "1000 * rate(bmoe:token_compute_seconds_total) / rate(timed tokens)", "Mean compute time per token.",
       "Not CPU time.", FLEET, qualifier="mean over {window}",
       promql=_per_token(_COMPUTE), needs=((_COMPUTE, _TIMED),)),
    # flash wait = what the wall spent waiting for expert reads: io_ms in serial mode, stall_ms under
    # overlap; both are wall - compute - mgmt, compute being the contract's residual. clamp_min only
    # removes float rounding below 0.
    _q("fleet.flash_ms", "flash_ms", "flash wait", "ms/token", S.WINDOW, F.MS,
       "1000 * (rate(wall) - rate(compute) - rate(mgmt)) / rate(timed tokens)",
       "Mean wall time per token spent waiting for expert reads (io in serial I/O, stall under overlap).",
       "Not io lane time under overlap.", FLEET, qualifier="mean over {window}",
       promql=f"clamp_min(1000 * ({_rate(_WALL)} - {_rate(_COMPUTE)} - {_rate(_MGMT)}) / {_rate(_TIMED)}, 0)",
       needs=((_WALL, _COMPUTE, _MGMT, _TIMED),)),
    _q("fleet.mgmt_ms", "mgmt_ms", "mgmt", "ms/token", S.WINDOW, F.MS,
       "1000 * rate(bmoe:token_mgmt_seconds_total) / rate(timed tokens)", "Mean cache management time per token.",
       "Not I/O.", FLEET, qualifier="mean over {window}", promql=_per_token(_MGMT), needs=((_MGMT, _TIMED),)),
    _q("fleet.resident_experts", "resident_experts", "resident", "experts", S.NOW, F.COUNT,
       "llamacpp:moe_cache_resident", "Experts the cache holds now.", "Not the budget.", FLEET,
       promql="sum by ($by) (llamacpp:moe_cache_resident$sel)", needs=(("llamacpp:moe_cache_resident",),)),
    _q("fleet.resident_mib", "resident_mib", "resident", "MiB", S.NOW, F.MIB,
       "llamacpp:moe_cache_resident_bytes / 2^20", "Expert bytes the cache holds now.", "Not the budget.", FLEET,
       promql="sum by ($by) (llamacpp:moe_cache_resident_bytes$sel) / 1048576",
       needs=(("llamacpp:moe_cache_resident_bytes",),)),
    _q("fleet.budget_experts", "budget_experts", "budget", "experts", S.NOW, F.COUNT, "llamacpp:moe_cache_slots",
       "Experts the cache can hold.", "Not what it holds.", FLEET,
       promql="sum by ($by) (llamacpp:moe_cache_slots$sel)", needs=(("llamacpp:moe_cache_slots",),)),
    _q("fleet.budget_mib", "budget_mib", "budget", "MiB", S.NOW, F.MIB, "llamacpp:moe_cache_bytes / 2^20",
       "The cache's size.", "Not what it holds.", FLEET,
       promql="sum by ($by) (llamacpp:moe_cache_bytes$sel) / 1048576", needs=(("llamacpp:moe_cache_bytes",),)),
    _q("fleet.requests_processing", "requests_processing", "processing", "requests", S.NOW, F.COUNT,
       "llamacpp:requests_processing", "Requests decoding now.", "Not queued ones.", FLEET,
       promql="sum by ($by) (llamacpp:requests_processing$sel)", needs=(("llamacpp:requests_processing",),)),
    _q("fleet.requests_deferred", "requests_deferred", "deferred", "requests", S.NOW, F.COUNT,
       "llamacpp:requests_deferred", "Requests waiting now.", "Not processing ones.", FLEET,
       promql="sum by ($by) (llamacpp:requests_deferred$sel)", needs=(("llamacpp:requests_deferred",),)),
    # the drill-down's own columns: the two flash terms apart, so its breakdown knows the mode
    # (serial: the flash wait is io_ms; overlap: stall_ms, io_ms being lane-busy time)
    _q("fleet.io_ms", "io_ms", "io", "ms/token", S.WINDOW, F.MS,
       "1000 * rate(bmoe:token_io_seconds_total) / rate(timed tokens)",
       "Mean time per token the expert reads took (serial: the flash wait; overlap: lane-busy time).",
       "Not a share of wall under overlap.", ("fleet drill-down",), qualifier="mean over {window}",
       promql=_per_token("bmoe:token_io_seconds_total"), needs=(("bmoe:token_io_seconds_total", _TIMED),)),
    _q("fleet.stall_ms", "stall_ms", "stall", "ms/token", S.WINDOW, F.MS,
       "1000 * rate(bmoe:token_stall_seconds_total) / rate(timed tokens)",
       "Mean wall time per token the compute waited for reads under overlap.",
       "Not flash wait in serial I/O: serial I/O has no stall.", ("fleet drill-down",),
       qualifier="mean over {window}",
       promql=_per_token("bmoe:token_stall_seconds_total"), needs=(("bmoe:token_stall_seconds_total", _TIMED),)),
    _q("fleet.stall_share", "stall_share", "flash/wall", "% of wall", S.WINDOW, F.PCT,
       "100 * flash_ms / wall_ms (per point, no query)",
       "Share of the wall time per token spent waiting for expert reads (serial: io; overlap: stall).",
       "Not a stall share in serial I/O (serial I/O has no stall); not io / wall under overlap.", FLEET),
    _q("fleet.stall_pct", "stall_pct", "stall/wall", "% of wall", S.WINDOW, F.PCT,
       "100 * rate(bmoe:token_stall_seconds_total) / rate(bmoe:token_wall_seconds_total)",
       "Share of the wall time per token the compute waited for reads under `--overlap`.",
       "Not the flash wait share in serial I/O (serial I/O has no stall).", ALERTS,
       promql=f"100 * {_rate('bmoe:token_stall_seconds_total')} / {_rate(_WALL)}",
       needs=(("bmoe:token_stall_seconds_total", _WALL),)),
    _q("fleet.speed_pct_best", "speed_pct_best", "speed vs best", "%", S.WINDOW, F.PCT,
       "100 * min_over_time(wall ms/token [1h]) / wall ms/token: one stream's tok/s against its best of the "
       "last hour",
       "One stream's speed (1000 / `wall ms/tok`) as a share of its best over the last hour.",
       "Not all slots' throughput (`tok/s`), which falls whenever the instance is idle.", ALERTS,
       promql=f"100 * min_over_time(({_per_token(_WALL)})[1h:]) / ({_per_token(_WALL)})",
       needs=((_WALL, _TIMED),)),
    _q("fleet.up", "up", "up", "targets", S.NOW, F.COUNT, "Prometheus' up: 1 scraped, 0 not",
       "Whether Prometheus' last scrape of the instance succeeded (1) or failed (0).",
       "Not whether the instance generates tokens.", FLEET + ALERTS,
       promql="max by ($by) (up$sel)", needs=(("up",),)),
    # -- the memory tiers of a bmoe-run run (docs/memory.md "The three tiers in bmoe-run") ----------
    _q("tier.cache_pct", "hits", TIERS[0], "% of routed", S.RUN, F.PCT,
       "100 * sum(hits) / sum(hits + misses) over the token rows that carry the tiers",
       "Share of the routed experts the runtime's own expert cache served (hits).",
       "Not bytes; not the source's own hit rate (`hit`), which may count prompts too.", TIER_PANEL),
    _q("tier.page_cache_pct", "misses_pagecache", TIERS[1], "% of routed", S.RUN, F.PCT,
       "100 * sum(misses_pagecache) / sum(hits + misses) over the same rows",
       "Share of the routed experts missed by the expert cache whose every byte a buffered read "
       "(`--no-odirect`) found in the kernel's page cache.",
       "Not what the page cache holds of the model (`attach --pid` shows that); 0 with O_DIRECT.", TIER_PANEL),
    _q("tier.disk_pct", "misses_disk", TIERS[2], "% of routed", S.RUN, F.PCT,
       "100 * sum(misses - misses_pagecache) / sum(hits + misses) over the same rows",
       "Share of the routed experts read (some byte of them at least) from the disk.",
       "Not the bytes read (`read from disk`).", TIER_PANEL),
    _q("tier.page_cache_mib", "pagecache_mib", "read from page cache", "MiB", S.RUN, F.MIB,
       "sum(pagecache_mib) over the token rows",
       "Expert payload MiB the page cache served (buffered reads of pages the kernel held).",
       "Not the page cache's size.", TIER_PANEL),
    _q("tier.disk_mib", "disk_mib", "read from disk", "MiB", S.RUN, F.MIB,
       "sum(read_mib - pagecache_mib) over the rows that carry pagecache_mib",
       "Expert payload MiB read from the disk.", "Not page-aligned (`read aligned`).", TIER_PANEL),
    _q("token.pagecache_mib", "pagecache_mib", "read page cache", "MiB", S.TOKEN, F.MIB, "the row's pagecache_mib",
       "Of the row's read MiB, what the page cache served.", "Not the page cache's size.", TRENDS),
    _q("map.page_cache_share", "pagecache / (pagecache + disk)", "page cache share of misses", "% of misses",
       S.RUN, F.PCT,
       "100 * page_cache / (page_cache + disk) per (layer, expert) cell: its routed experts that missed the expert "
       "cache and whose tier the source said, tokens up to the viewed one",
       "Of an expert's misses, the share a buffered read found in the kernel's page cache (the rest came from "
       "the disk); a cell without such a miss has none (no miss), not 0.",
       "Not a share of all routed experts (`page cache`, run panel); not what the page cache holds of the "
       "model (`attach --pid`).", ("layer × expert map (tiers, v)",)),
    _q("tier.rss_anon", "rss_anon", "RSS anon", "MiB", S.NOW, F.BYTES, "RssAnon of /proc/PID/status",
       "The runtime process's anonymous resident memory: what it allocated, its expert cache included.",
       "Not VmRSS, which adds the file pages it maps.", TIER_PANEL),
    _q("tier.rss_file", "rss_file", "RSS file", "MiB", S.NOW, F.BYTES, "RssFile of /proc/PID/status",
       "The file pages the runtime process maps and has in RAM (page cache it maps).",
       "Not the page cache's share of the model: cached pages it does not map are not in it.", TIER_PANEL),
    _q("tier.mem_available", "mem_available", "MemAvailable", "MiB", S.NOW, F.BYTES,
       "MemAvailable of /proc/meminfo",
       "RAM available without swapping: free memory plus the page cache the kernel may reclaim, the room "
       "the page cache has to hold the model.", "Not free memory alone.", TIER_PANEL),
    # -- the tok/s model: one decode token predicted at a cache budget (tui/analysis/speed.py) -----
    _q("predict.tok_s", "tok_s", "tok/s", "tok/s", S.PREDICTED, F.RATE,
       "1000 / (overlap: max(compute, flash_ms) + mgmt + stall_ms; serial: compute + flash_ms + mgmt), "
       "compute = compute_ms + miss_ms x misses, mgmt = mgmt_ms + evict_ms x evictions",
       "Decode speed the tok/s model predicts at a budget, in the run's mode (overlap or serial).",
       "Not a measured tok/s (`tok/s measured` in a sweep); not prefill.", WHATIF),
    _q("predict.serial_tok_s", "serial_tok_s", "tok/s serial", "tok/s", S.PREDICTED, F.RATE,
       "1000 / (compute + flash_ms + mgmt)", "Predicted decode speed with reads and compute one after the other.",
       "Not the overlap prediction.", WHATIF),
    _q("predict.overlap_tok_s", "overlap_tok_s", "tok/s overlap", "tok/s", S.PREDICTED, F.RATE,
       "1000 / (max(compute, flash_ms) + mgmt + stall_ms)",
       "Predicted decode speed with reads under compute (and the stall the run measured).",
       "Not the serial prediction.", WHATIF),
    _q("predict.flash_ms", "flash_ms", "flash wait", "ms/token", S.PREDICTED, F.MS,
       "lookups x (1 - hit) x miss_bytes / (read MB/s x 10^6) x 1000",
       "Time per token the predicted reads take at the read bandwidth.",
       "Not the stall under overlap (that is measured, not predicted).", WHATIF),
    _q("predict.hit_pct", "hit_pct", "hit (both levels)", "%", S.PREDICTED, F.PCT,
       "100 x h(max(B, P)): the policy's decode hit at the larger of the budget and the page cache",
       "Share of decode lookups that need no read: the expert cache's and, with a RAM, the page cache's.",
       "Not the expert cache's hit % alone when a RAM is given.", WHATIF),
    _q("predict.mmap_tok_s", "mmap_tok_s", "tok/s plain mmap", "tok/s", S.PREDICTED, F.RATE,
       "the B = 0 prediction: the bytes a token reads from the page cache replayed over the trace "
       "(--model), else readahead-sized reads (ceil(miss_bytes / R) x R a miss)",
       "Predicted decode speed of plain llama.cpp (mmap, no expert cache) in the same RAM.",
       "Not expert streaming at any budget.", WHATIF),
    _q("predict.best_mib", "best_mib", "fastest budget", "MiB", S.PREDICTED, F.MIB,
       "the budget of the highest predicted tok/s (the smaller of equals)",
       "The cache budget the tok/s model predicts fastest.", "Not the hit-% recommendation.", WHATIF),
    _q("predict.knee_mib", "knee_mib", "knee", "MiB", S.PREDICTED, F.MIB,
       "the first budget past which one more GiB buys less than knee_share of its tok/s",
       "Where more cache stops paying in tok/s.", "Not the fastest budget.", WHATIF),
    _q("predict.break_even_mib", "break_even_mib", "break-even vs mmap", "MiB", S.PREDICTED, F.MIB,
       "the smallest budget whose predicted tok/s is at least plain mmap's in the same RAM",
       "The smallest expert cache that beats plain mmap at the same RAM.",
       "Not defined without a RAM (--ram); absent when no budget beats mmap.", WHATIF),
    _q("predict.cache_to_demand", "cache_to_demand", "cache/demand", "x", S.PREDICTED, F.NUMBER,
       "budget bytes / (lookups per token x bytes per miss)",
       "The budget over the distinct expert bytes one token needs (0.4-0.8x is the published sweet spot).",
       "Not a hit rate.", WHATIF),
    _q("predict.error_pct", "error_pct", "prediction error", "%", S.PREDICTED, F.PCT,
       "100 x (predicted tok/s - measured tok/s) / measured tok/s",
       "How far the prediction is from what a run measured at the same budget.",
       "Not a difference of hit rates.", WHATIF + ("sweep", "sweep --once --json")),
    _q("sweep.measured_tok_s", "measured_tok_s", "tok/s measured", "tok/s", S.RUN, F.RATE,
       "median over the arm's runs with the reference routing of each run's # summary tok/s",
       "Decode speed a sweep's arm measured: the median of its runs.",
       "Not predicted (`tok/s`, predicted); not one run's; runs with another routing are left out.",
       ("sweep screen", "sweep --once --json"), qualifier="median of the arm's runs"),
    _q("sweep.spread_pct", "spread_pct", "spread", "%", S.RUN, F.PCT,
       "100 x (largest - smallest tok/s) / median tok/s over the arm's runs with the reference routing",
       "How far apart an arm's runs are: the noise a prediction's error is read against.",
       "Not a standard deviation; absent with fewer than two runs.",
       ("sweep screen", "sweep --once", "sweep --once --json"), qualifier="the arm's runs"),
    # -- the device sidecar -----------------------------------------------------------------------
    _q("device.peak_rss", "peak_rss_kb", "peak RSS", "MiB", S.DEVICE, F.MIB, "peak_rss_kb / 1024",
       "The process's highest resident memory (device sidecar).", "Not the memory now.", PANEL + TITLE),
    _q("device.cpu_temp_max", "cpu_temp_max_mC", "CPU temp max", "°C", S.DEVICE, F.CELSIUS,
       "cpu_temp_max_mC / 1000", "Highest CPU temperature during the run.", "Not the temperature now.",
       PANEL + TITLE),
    _q("device.mem_floor", "mem_avail_floor_kb", "MemAvailable floor", "MiB", S.DEVICE, F.MIB,
       "mem_avail_floor_kb / 1024", "Lowest available memory of the device during the run (device sidecar).",
       "Not the memory available now.", DIAGNOSIS),
    _q("device.batt_temp_max", "batt_temp_max_dC", "battery max", "°C", S.DEVICE, F.CELSIUS,
       "batt_temp_max_dC / 10", "Highest battery temperature during the run.", "Not the temperature now.",
       PANEL + TITLE),
)

#: key -> quantity, in catalogue order.
CATALOGUE: dict[str, Quantity] = {x.key: x for x in _ITEMS}
assert len(CATALOGUE) == len(_ITEMS), "a catalogue key is defined twice"

#: The forms whose values change with the span they cover (rates, shares, amounts read): the
#: ones a label must name the scope of when two scopes share it.
_SPAN_FORMS = frozenset({Form.RATE, Form.PCT, Form.MIB, Form.BYTES, Form.MIB_RATE})

#: Labels that more than one scope uses for a rate, a share or an amount: a screen names the
#: scope beside them (the device sidecar has its own section).
SHARED_LABELS: frozenset[str] = frozenset(
    label for label in {x.label for x in _ITEMS}
    if len({(x.scope, x.qualifier) for x in _ITEMS
            if x.label == label and x.form in _SPAN_FORMS and x.scope is not Scope.DEVICE}) > 1)


def q(key: str) -> Quantity:
    """The quantity ``key`` (``KeyError`` names it when it is not in the catalogue)."""
    try:
        return CATALOGUE[key]
    except KeyError:
        raise KeyError(f"{key!r} is not in the catalogue of quantities (bmoe_top.tui.model.quantities)") from None


def quantities(prefix: str) -> tuple[Quantity, ...]:
    """Every quantity whose key starts with ``prefix`` (``"summary."``), in catalogue order."""
    return tuple(x for x in _ITEMS if x.key.startswith(prefix))
