"""bmoe-top's settings file: what a user changes on a screen is kept for the next start, like
htop's htoprc and btop's btop.conf (docs/user-guide.md "Settings"). No Textual.

The file is TOML, ``settings.toml`` in the user's config folder (``platformdirs``:
``~/.config/bmoe-top/settings.toml`` on Linux), or the file ``--config FILE`` names; ``--no-config``
reads and writes none. Every entry is one ``key = value`` line under its ``[section]``, each with a
comment that says what it is and which key changes it; per-table sorts are ``[sort.TABLE]`` tables.

Reading (:func:`load`) never raises for what is in the file: a line that is not TOML, a value of
the wrong type or out of range, an unknown section or key each give one :class:`Problem` line
(``line 7: [view] refresh_s = "fast": must be a number of seconds from 0.1 to 10; the default 1 is
used``) and the entry's default; every other entry is kept. A file that cannot be read at all (a
folder, no permission, over :data:`MAX_BYTES`, another program's file) gives one problem, the
defaults, and a store that does not write (it would replace what it could not read). Entries this
version does not know are kept when the file is written again (a newer bmoe-top's, or a typo the
start-up line names).

Writing (:meth:`SettingsStore.set`) happens when a setting changes on screen: the file is read
again, the one entry replaced (so two bmoe-tops never undo each other's other changes), and the
whole file written atomically, never through a symbolic link (:func:`bmoe_top.outfile.write_atomic`).
A write that fails is one line, said once.

The schema is :class:`Settings`: one frozen dataclass per section, each field an entry with its
default, its check and its help (:func:`entry`); :data:`VERSION` is the file's format version.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import tomli_w

from bmoe_top.outfile import OutputFileError, write_atomic
from bmoe_top.parsers.sanitize import sanitize
from bmoe_top.tui.model.alerts import DEFAULT_RULES, Rule, Severity, with_threshold
from bmoe_top.tui.sources.prometheus import parse_duration

__all__ = ["AlertSettings", "COLOUR_SCALES", "CompareSettings", "FleetSettings", "LookSettings", "MAX_BYTES",
           "PanelSettings", "ProbeSettings", "Problem", "ScreenshotSettings", "Settings", "SettingsStore",
           "SortSetting", "VERSION",
           "ViewSettings", "WhatIfSettings", "default_path", "dumps", "entry", "load", "parse", "parse_rule"]

#: The file's format version (``version = 1`` at its top). A file of a later version is read for
#: the entries this one knows; its other entries are kept when it is written again.
VERSION = 1
#: The file's name in the config folder.
FILE_NAME = "settings.toml"
#: A settings file larger than this is not read (bytes): no settings file is that big.
MAX_BYTES = 256 * 1024
#: Per-table sorts kept (``[sort.TABLE]``); names are ``[A-Za-z0-9_-]``, up to 64 characters.
MAX_SORTS = 64
#: The colour scales of the maps (``c`` cycles through them; docs/user-guide.md).
COLOUR_SCALES = ("viridis", "cividis", "classic")

Check = Callable[[object], Any]
#: What a line that is not UTF-8 is read as (not TOML: :func:`_read_doc` names it).
_NOT_UTF8 = "\ufffd\ufffd not UTF-8"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


# ------------------------------------------------------------------------------------ checks
def _number(lo: float, hi: float, what: str) -> Check:
    def check(v: object) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"must be a number {what} from {lo:g} to {hi:g}")
        return float(v)

    return check


def _flag(v: object) -> bool:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def _choice(*names: str) -> Check:
    def check(v: object) -> str:
        if v not in names:
            raise ValueError("must be one of " + ", ".join(names))
        assert isinstance(v, str)
        return v

    return check


def _word(v: object) -> str:
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise ValueError("must be a name of letters, digits, _ and - (up to 64)")
    return v


def _text(limit: int) -> Check:
    def check(v: object) -> str:
        if not isinstance(v, str) or len(v) > limit or not v.isprintable():
            raise ValueError(f"must be text of up to {limit} printable characters")
        return v

    return check


def _words(limit: int) -> Check:
    def check(v: object) -> tuple[str, ...]:
        if not isinstance(v, list) or len(v) > limit:
            raise ValueError(f"must be a list of up to {limit} names")
        return tuple(_word(x) for x in v)

    return check


def _rates(limit: int, hi: float) -> Check:
    def check(v: object) -> tuple[float, ...]:
        if not isinstance(v, list) or len(v) > limit:
            raise ValueError(f"must be a list of up to {limit} numbers")
        return tuple(_number(0.0, hi, "")(x) for x in v)

    return check


def _duration(v: object) -> str:
    """A time window: a Prometheus duration (``5m``, ``1h30m``) or seconds (``300``)."""
    if isinstance(v, str):
        try:
            s = float(v) if v.replace(".", "", 1).isdigit() else parse_duration(v)
        except ValueError:
            s = -1.0
        if 0 < s <= 366 * 86400:
            return v
    raise ValueError("must be a duration like \"5m\", \"1h30m\" or \"300\" (seconds), up to a year")


def entry(default: Any, check: Check, help: str) -> Any:
    """A field of a section: its ``default``, the ``check`` a value from the file passes (it
    returns the typed value or raises ``ValueError`` with the reason: "must be ..."), and the
    ``help`` written above it in the file (what it is, which key changes it)."""
    return field(default=default, metadata={"check": check, "help": help})


# ------------------------------------------------------------------------------------ schema
@dataclass(frozen=True)
class LookSettings:
    """``[look]``: how every screen draws."""

    theme: str = entry("textual-dark", _text(64), "Textual theme (ctrl+p: Change theme)")
    colour_scale: str = entry("viridis", _choice(*COLOUR_SCALES),
                              "colour scale of the maps: viridis, cividis or classic (c)")


@dataclass(frozen=True)
class ViewSettings:
    """``[view]``: the run screens' views."""

    refresh_s: float = entry(1.0, _number(0.1, 10.0, "of seconds"),
                             "seconds between repaints of the views while data streams ({ and }; --refresh)")
    fold_maps: bool = entry(True, _flag, "the layer maps fold their layers to fit the height, else scroll (f)")
    compact_map: str = entry("tokens", _choice("tokens", "experts"),
                             "the map the compact layout shows: tokens (layer x token) or experts (m)")
    expert_map: str = entry("heat", _choice("heat", "tiers"),
                            "the layer x expert map's view: heat (routing) or tiers (misses by memory tier) (v)")


@dataclass(frozen=True)
class PanelSettings:
    """``[panels]``: which panel groups of the run screens show."""

    trends: bool = entry(True, _flag, "the trends (tok/s, hit %, MiB read, memory)")
    answer: bool = entry(True, _flag, "the answer's tail beside the run panel")
    maps: bool = entry(True, _flag, "the layer x token and layer x expert maps")


@dataclass(frozen=True)
class FleetSettings:
    """``[fleet]``: ``bmoe-top fleet``'s table."""

    window: str = entry("5m", _duration, "span of the sparklines and the drill-down (--window)")
    sort: str = entry("rank", _word, "sort column key, or rank for worst first (s, <, >, w, a header click)")
    descending: bool = entry(False, _flag, "sort descending (i)")
    sparklines: bool = entry(True, _flag, "a sparkline under each number (v)")
    hidden_columns: tuple[str, ...] = entry((), _words(64), "column keys left out of the table")


@dataclass(frozen=True)
class WhatIfSettings:
    """``[whatif]``: ``bmoe-top whatif``'s charts."""

    metric: str = entry("read", _word, "the lower chart: read (MiB read/token), io (flash I/O), tok_s (predicted) (y)")
    all_policies: bool = entry(False, _flag, "every cache policy on the charts, else the main ones (a)")
    whole_bank: bool = entry(False, _flag, "the x axis spans the whole bank, else the interesting part (z)")


@dataclass(frozen=True)
class CompareSettings:
    """``[compare]``: ``bmoe-top compare``'s per-token chart."""

    token_metric: str = entry("wall_ms", _word, "the per-token chart: wall_ms, flash or cache_hit_pct (y)")


@dataclass(frozen=True)
class AlertSettings:
    """``[alerts]``: the thresholds and ``for:`` of the default alert rules (docs/alerts.md); an
    entry left out (the file's default: commented out) keeps the rule's own. ``tok_s_below`` and
    ``rss_mib_above`` add a rule when set."""

    hit_pct_below: float | None = entry(None, _number(0.0, 100.0, "(percent)"),
                                        "CacheHitLow: decode hit % under this (default 30)")
    flash_share_pct_above: float | None = entry(None, _number(0.0, 100.0, "(percent)"),
                                                "FlashWaitHigh: flash wait's share of wall time, % over this "
                                                "(default 70)")
    stall_share_pct_above: float | None = entry(None, _number(0.0, 100.0, "(percent)"),
                                                "StallShareHigh: stall's share of wall time under --overlap, % over "
                                                "this (default 50)")
    mem_available_mib_below: float | None = entry(None, _number(0.0, 1e9, "(MiB)"),
                                                  "MemAvailableLow: the device's MemAvailable under this, MiB "
                                                  "(default 512)")
    tok_s_collapse_pct_below: float | None = entry(None, _number(0.0, 100.0, "(percent)"),
                                                   "TokSCollapse: tok/s under this % of the run's first steady "
                                                   "window (default 50)")
    tok_s_below: float | None = entry(None, _number(0.0, 1e6, "(tokens a second)"), "TokSLow: tok/s under this")
    rss_mib_above: float | None = entry(None, _number(0.0, 1e9, "(MiB)"), "RssHigh: resident memory over this, MiB")
    temp_c_above: float | None = entry(None, _number(0.0, 200.0, "(degrees C)"),
                                       "TemperatureHigh: CPU temperature over this, °C (default 85)")
    for_s: float | None = entry(None, _number(0.0, 86400.0, "of seconds"),
                                "how long every default rule's condition must hold before it fires, seconds "
                                "(default: each rule's own)")
    quiet_s_above: float | None = entry(None, _number(1.0, 86400.0, "of seconds"),
                                        "a live source quiet for longer than this, seconds")


@dataclass(frozen=True)
class ScreenshotSettings:
    """``[screenshots]``: where ctrl+s (and the palette's Screenshot) saves."""

    folder: str = entry("", _text(4096), "folder for screenshots (empty: screenshots in the user's data folder, "
                        "e.g. ~/.local/share/bmoe-top/screenshots)")


@dataclass(frozen=True)
class ProbeSettings:
    """``[probe]``: the read bandwidth ``bmoe-top probe PATH --remember`` measured (docs/user-guide.md
    "probe"), one number per queue depth from 1; the what-if reads it when a run recorded none;
    and the rate plain mmap's faults read at, which the what-if's plain-mmap line reads."""

    file: str = entry("", _text(4096), "the file probed")
    slice_bytes: float | None = entry(None, _number(1.0, 2.0**40, "of bytes"), "bytes of one expert slice")
    direct_mb_s: tuple[float, ...] = entry((), _rates(64, 1e7), "O_DIRECT MB/s at queue depth 1, 2, ...")
    buffered_mb_s: tuple[float, ...] = entry((), _rates(64, 1e7), "buffered (cold) MB/s at queue depth 1, 2, ...")
    mmap_mb_s: float | None = entry(None, _number(0.001, 1e7, "MB/s"),
                                    "MB/s plain mmap's page faults read at (the file mapped and advised sequential)")
    mmap_readahead_kb: float | None = entry(None, _number(1.0, 2.0**30, "KiB"), "the device's readahead then (KiB)")

    @property
    def best_mb_s(self) -> float | None:
        """The highest bandwidth probed at any queue depth, O_DIRECT or buffered (MB/s); None
        when nothing was probed (the diagnosis's flash rule then does not fire)."""
        rates = [*self.direct_mb_s, *self.buffered_mb_s]
        return max(rates) if rates else None


@dataclass(frozen=True)
class SortSetting:
    """``[sort.TABLE]``: a table's sort (``s``, ``S``, a header click): a column key and its direction."""

    column: str = entry("", _text(64), "the column's key")
    descending: bool = entry(False, _flag, "descending")


#: The section of user alert rules (one ``NAME = "RULE"`` a line, :func:`parse_rule`).
RULES = "alert_rules"
#: Default rule -> the ``[alerts]`` entry that sets its threshold.
_THRESHOLDS = {"CacheHitLow": "hit_pct_below", "FlashWaitHigh": "flash_share_pct_above",
               "StallShareHigh": "stall_share_pct_above", "MemAvailableLow": "mem_available_mib_below",
               "TokSCollapse": "tok_s_collapse_pct_below", "TemperatureHigh": "temp_c_above"}

#: The sections, in the file's order: name -> section class.
SECTIONS: dict[str, type] = {"look": LookSettings, "view": ViewSettings, "panels": PanelSettings,
                             "fleet": FleetSettings, "whatif": WhatIfSettings, "compare": CompareSettings,
                             "alerts": AlertSettings, "screenshots": ScreenshotSettings, "probe": ProbeSettings}


@dataclass(frozen=True)
class Settings:
    """Everything the file holds (every field has its default: ``Settings()`` is the defaults).
    ``sort``: table name -> its sort."""

    look: LookSettings = field(default_factory=LookSettings)
    view: ViewSettings = field(default_factory=ViewSettings)
    panels: PanelSettings = field(default_factory=PanelSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    whatif: WhatIfSettings = field(default_factory=WhatIfSettings)
    compare: CompareSettings = field(default_factory=CompareSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    screenshots: ScreenshotSettings = field(default_factory=ScreenshotSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    sort: Mapping[str, SortSetting] = field(default_factory=dict)
    alert_rules: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The value of ``"section.key"`` (``"sort.TABLE"``: its :class:`SortSetting` or None;
        ``"alert_rules.NAME"``: the rule's text or None)."""
        section, key = _split(name)
        if section == "sort":
            return self.sort.get(key)
        if section == RULES:
            return self.alert_rules.get(key)
        return getattr(getattr(self, section), key)

    def rules(self) -> tuple[Rule, ...]:
        """The alert rules in use: :data:`DEFAULT_RULES` with the ``[alerts]`` thresholds and
        ``for:``, the rules ``tok_s_below`` / ``rss_mib_above`` add, then ``[alert_rules]``: a
        rule of a default's name replaces it (``off`` drops it), any other is added."""
        a = self.alerts
        out: dict[str, Rule] = {}
        for rule in DEFAULT_RULES:
            threshold = getattr(a, _THRESHOLDS[rule.name]) if rule.name in _THRESHOLDS else None
            out[rule.name] = with_threshold(rule, threshold, a.for_s)
        if a.tok_s_below is not None:
            out["TokSLow"] = Rule("TokSLow", "recent.tok_s", "<", a.tok_s_below, _or(a.for_s, 30.0), Severity.WARNING,
                                  "tok/s under the threshold the settings file sets.")
        if a.rss_mib_above is not None:
            out["RssHigh"] = Rule("RssHigh", "token.rss_mib", ">", a.rss_mib_above, _or(a.for_s, 10.0),
                                  Severity.WARNING, "The runtime's resident memory over the settings file's threshold.")
        for name, text in self.alert_rules.items():
            user = parse_rule(name, text)
            if user is None:
                out.pop(name, None)
            else:
                out[name] = user
        return tuple(out.values())

    def with_value(self, name: str, value: Any) -> Settings:
        """A copy with ``"section.key"`` set to ``value`` (``"sort.TABLE"``: a :class:`SortSetting`).
        Raises ``ValueError`` for an unknown name or a value its check refuses (the caller's
        mistake: values from the file go through :func:`parse`)."""
        section, key = _split(name)
        if section == "sort":
            if not isinstance(value, SortSetting) or not _NAME.fullmatch(key):
                raise ValueError(f"sort.{key}: a SortSetting for a table name")
            return dataclasses.replace(self, sort={**self.sort, key: value})
        if section == RULES:
            rules = {k: v for k, v in self.alert_rules.items() if k != key}
            if value is not None:
                _word(key)
                parse_rule(key, value)
                rules[key] = value
            return dataclasses.replace(self, alert_rules=rules)
        part = getattr(self, section)
        f = next((f for f in dataclasses.fields(part) if f.name == key), None)
        if f is None:
            raise ValueError(f"unknown setting {name!r}")
        if value is not None or f.default is not None:
            value = f.metadata["check"](list(value) if isinstance(value, tuple) else value)
        return dataclasses.replace(self, **{section: dataclasses.replace(part, **{key: value})})


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _split(name: str) -> tuple[str, str]:
    section, _, key = name.partition(".")
    if section not in ("sort", RULES) and section not in SECTIONS or not key:
        raise ValueError(f"unknown setting {name!r}")
    return section, key


# ------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class Problem:
    """One thing wrong in the file, in one line (``str()``): where, what, and what is used instead."""

    text: str
    line: int | None = None

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}" if self.line is not None else self.text


@dataclass
class _Doc:
    """The file as read: TOML values by section (``""``: the top level), the line each key was on."""

    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: dict[tuple[str, str], int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _show(value: Any) -> str:
    """A value from the file as it is quoted in a problem line (short, safe for a terminal)."""
    try:
        text = tomli_w.dumps({"v": value}).partition("=")[2].strip()
    except (TypeError, ValueError):
        text = repr(value)
    return sanitize(text if len(text) <= 40 else text[:39] + "…")


def _read_doc(text: str) -> _Doc:
    """TOML -> values by section. A file TOML reads whole is used as it is; one it cannot is read
    line by line, and each line that is not TOML on its own is a problem (its neighbours kept)."""
    doc = _Doc()
    try:
        whole = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        whole = None
    if whole is not None:
        _fill_whole(doc, whole, text)
        return doc
    section = ""
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == _NOT_UTF8:
            doc.problems.append(Problem("not UTF-8 text; skipped", lineno))
            continue
        try:
            got = tomllib.loads(line)
        except tomllib.TOMLDecodeError as e:
            doc.problems.append(Problem(f"not a setting ({sanitize(str(e).split(' (at ')[0])}): "
                                        f"{sanitize(line[:60])}; skipped", lineno))
            continue
        if line.startswith("["):
            path = _header_path(got)
            if path is None:
                doc.problems.append(Problem(f"not a section header: {sanitize(line[:60])}; skipped", lineno))
                section = "\0"  # the keys under it are skipped too
                continue
            section = ".".join(path)
            doc.values.setdefault(section, {})
            continue
        if section == "\0":
            continue
        for key, value in _flatten(got):
            full = ".".join(p for p in (section, *key[:-1]) if p)
            slot = doc.values.setdefault(full, {})
            if key[-1] in slot:
                doc.problems.append(Problem(f"{_where(full, key[-1])} given again; the first is kept", lineno))
                continue
            slot[key[-1]] = value
            doc.lines[(full, key[-1])] = lineno
    return doc


def _header_path(got: dict[str, Any]) -> list[str] | None:
    """The table path of a header line TOML read alone (``[sort.turns]`` -> ``["sort", "turns"]``)."""
    path: list[str] = []
    node: Any = got
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        path.append(key)
    return path if path and node == {} else None


def _flatten(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flatten(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def _fill_whole(doc: _Doc, whole: dict[str, Any], text: str) -> None:
    """A file TOML read whole: its sections, and the line of each key (for the problem lines)."""
    for key, value in whole.items():
        if isinstance(value, dict) and key == "sort":
            for table, sub in value.items():
                doc.values[f"sort.{table}"] = sub if isinstance(sub, dict) else {"": sub}
        elif isinstance(value, dict):
            doc.values[key] = dict(value)
        else:
            doc.values.setdefault("", {})[key] = value
    section = ""
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        m = re.fullmatch(r"\[\s*([A-Za-z0-9_.\- \"]+?)\s*\]\s*(#.*)?", line)
        if m:
            section = m.group(1).replace('"', "").replace(" ", "")
            continue
        m = re.match(r"([A-Za-z0-9_-]+)\s*=", line)
        if m:
            doc.lines.setdefault((section, m.group(1)), lineno)


def _where(section: str, key: str) -> str:
    return f"[{sanitize(section)}] {sanitize(key)}" if section else sanitize(key)


def parse(text: str) -> tuple[Settings, list[Problem], dict[str, dict[str, Any]]]:
    """The settings in ``text`` (a settings file's content): ``(settings, problems, unknown)``,
    ``unknown`` the entries this version does not know, by section (kept when the file is written
    again). Never raises."""
    doc = _read_doc(text)
    problems = list(doc.problems)
    unknown: dict[str, dict[str, Any]] = {}
    s = Settings()

    def line(section: str, key: str) -> int | None:
        return doc.lines.get((section, key))

    top = doc.values.get("", {})
    for key, value in top.items():
        if key == "version":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(Problem(f"version = {_show(value)}: must be a whole number from 1; read as "
                                        f"version {VERSION}", line("", key)))
            elif value > VERSION:
                problems.append(Problem(f"written by a newer bmoe-top (version {value}; this one reads {VERSION}): "
                                        "the entries it does not know are kept, unused", line("", key)))
                unknown.setdefault("", {})["version"] = value
        else:
            problems.append(Problem(f"unknown setting {sanitize(key)} (it belongs in a [section]); ignored",
                                    line("", key)))
            unknown.setdefault("", {})[key] = value
    sorts: dict[str, SortSetting] = {}
    for section, values in doc.values.items():
        if not section:
            continue
        if section == RULES:
            s = dataclasses.replace(s, alert_rules=_rule_entries(values, line, problems))
            continue
        if section.startswith("sort."):
            got = _sort_entry(section, values, line, problems)
            if got is not None and len(sorts) < MAX_SORTS:
                sorts[section[5:]] = got
            elif got is not None:
                problems.append(Problem(f"[{sanitize(section)}]: more than {MAX_SORTS} table sorts; ignored"))
            continue
        cls = SECTIONS.get(section)
        if cls is None:
            problems.append(Problem(f"unknown section [{sanitize(section)}]; ignored"))
            unknown[section] = dict(values)
            continue
        part = getattr(s, section)
        known = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            f = known.get(key)
            if f is None:
                problems.append(Problem(f"unknown setting {_where(section, key)}; ignored", line(section, key)))
                unknown.setdefault(section, {})[key] = value
                continue
            try:
                changes[key] = f.metadata["check"](value)
            except ValueError as e:
                problems.append(Problem(f"{_where(section, key)} = {_show(value)}: {e}; the default "
                                        f"{_default_text(f.default)} is used", line(section, key)))
        if changes:
            s = dataclasses.replace(s, **{section: dataclasses.replace(part, **changes)})
    if sorts:
        s = dataclasses.replace(s, sort=sorts)
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return s, problems, unknown


def _default_text(value: Any) -> str:
    if value is None:
        return "(none)"
    if value == ():
        return "(none)"
    if isinstance(value, str) and not value:
        return '""'
    return _show(list(value) if isinstance(value, tuple) else value)


def _sort_entry(section: str, values: dict[str, Any], line: Callable[[str, str], int | None],
                problems: list[Problem]) -> SortSetting | None:
    name = section[5:]
    if not _NAME.fullmatch(name):
        problems.append(Problem(f"[{sanitize(section)}]: a table name is letters, digits, _ and -; ignored"))
        return None
    column, descending = values.get("column"), values.get("descending", False)
    for key in values:
        if key not in ("column", "descending"):
            problems.append(Problem(f"unknown setting {_where(section, key)}; ignored", line(section, key)))
    if column is None:
        problems.append(Problem(f"[{sanitize(section)}] has no column; the table is not sorted"))
        return None
    if not isinstance(column, str) or not column or len(column) > 64 or not column.isprintable():
        problems.append(Problem(f"[{sanitize(section)}] column = {_show(column)}: must be a column's key; "
                                "the table is not sorted", line(section, "column")))
        return None
    if not isinstance(descending, bool):
        problems.append(Problem(f"[{sanitize(section)}] descending = {_show(descending)}: must be true or "
                                "false; ascending is used", line(section, "descending")))
        descending = False
    return SortSetting(column, descending)


def _rule_entries(values: dict[str, Any], line: Callable[[str, str], int | None],
                  problems: list[Problem]) -> dict[str, str]:
    """``[alert_rules]``: each rule on its line; a damaged one is one problem and skipped, the
    others kept."""
    out: dict[str, str] = {}
    for name, text in values.items():
        try:
            _word(name)
            if not isinstance(text, str):
                raise ValueError("must be a rule in quotes, like \"token.cache_hit_pct < 40 for 1m warning\"")
            parse_rule(name, text)
        except (ValueError, KeyError) as e:
            why = e.args[0] if isinstance(e, KeyError) else str(e)
            problems.append(Problem(f"{_where(RULES, name)} = {_show(text)}: {sanitize(str(why))}; the rule is "
                                    "skipped", line(RULES, name)))
            continue
        out[name] = text
    return out


def parse_rule(name: str, text: str) -> Rule | None:
    """One ``[alert_rules]`` entry: ``KEY OP THRESHOLD [for DURATION] [SEVERITY]`` (``KEY`` a
    catalogue key, ``OP`` one of ``< <= > >= == !=``, ``DURATION`` a Prometheus duration or
    seconds, ``SEVERITY`` info, warning or critical; docs/alerts.md), or ``off`` (None: the rule
    of that name is dropped). A ``fleet.*`` key, or a local key a default rule reads, is exported
    to Prometheus (``bmoe-top fleet --rules``). Raises ``ValueError`` (or ``KeyError`` for a key not in the
    catalogue) naming what is wrong."""
    words = text.split()
    if words == ["off"]:
        return None
    if len(words) < 3 or len(text) > 200:
        raise ValueError("must be KEY OP THRESHOLD [for DURATION] [SEVERITY], or off")
    key, op, value, rest = words[0], words[1], words[2], words[3:]
    try:
        threshold = float(value)
    except ValueError:
        raise ValueError(f"threshold {value!r} is not a number") from None
    for_s = 0.0
    if len(rest) >= 2 and rest[0] == "for":
        for_s = float(rest[1]) if rest[1].replace(".", "", 1).isdigit() else parse_duration(rest[1])
        rest = rest[2:]
    severity = Severity.WARNING
    if rest:
        if len(rest) > 1 or rest[0] not in tuple(Severity):
            raise ValueError(f"{' '.join(rest)!r}: after the threshold come only 'for DURATION' and a severity "
                             "(info, warning, critical)")
        severity = Severity(rest[0])
    # the fleet's twin: a fleet quantity is its own; a local one has its default rule's
    fleet = key if key.startswith("fleet.") else next((r.fleet for r in DEFAULT_RULES if r.key == key), "")
    return Rule(name, key, op, threshold, for_s, severity, f"{key} {op} {threshold:g} (settings file)", fleet)


# ------------------------------------------------------------------------------------ writing
HEADER = ("# bmoe-top settings (docs/user-guide.md \"Settings\"): written by bmoe-top when a setting\n"
          "# changes on screen, read at start. Edit freely: a damaged or unknown entry is named at start\n"
          "# and its default used, the rest kept.\n")


def _line(key: str, value: Any) -> str:
    """``key = value`` on one line (tomli-w writes a list over several: one line per entry is what
    lets :func:`_read_doc` lose only the line that is damaged)."""
    if isinstance(value, (tuple, list)):
        items = (tomli_w.dumps({"v": x}).partition("=")[2].strip() for x in value)
        return f"{tomli_w.dumps({key: 0}).partition('=')[0].strip()} = [{', '.join(items)}]"
    return tomli_w.dumps({key: value}).strip()


def dumps(settings: Settings, unknown: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The file for ``settings``: every entry with its help above it (an entry without a value,
    an alert threshold left out, commented out), then the per-table sorts, then ``unknown``
    entries (by section, as :func:`parse` returned them) as they were."""
    unknown = unknown or {}
    version = unknown.get("", {}).get("version", VERSION)
    out = [HEADER, _line("version", version)]
    for key, value in unknown.get("", {}).items():
        if key != "version":
            out.append(_line(key, value))
    for name, cls in SECTIONS.items():
        part = getattr(settings, name)
        out.append(f"\n[{name}]")
        for f in dataclasses.fields(cls):
            out.append(f"# {f.metadata['help']}")
            value = getattr(part, f.name)
            out.append(f"# {f.name} =" if value is None else _line(f.name, value))
        for key, value in unknown.get(name, {}).items():
            out.append("# (not known to this version of bmoe-top: kept)")
            out.append(_line(key, value))
    out.append(f"\n[{RULES}]")
    out.append("# alert rules, one a line: NAME = \"KEY OP THRESHOLD [for DURATION] [SEVERITY]\" (docs/alerts.md);")
    out.append("# a default rule's NAME replaces it, \"off\" drops it")
    if not settings.alert_rules:
        out.append('# LowHit = "token.cache_hit_pct < 40 for 1m warning"')
    for name, text in settings.alert_rules.items():
        out.append(_line(name, text))
    for table, srt in sorted(settings.sort.items()):
        out.append(f"\n[sort.{table}]")
        out.append(_line("column", srt.column))
        out.append(_line("descending", srt.descending))
    for section, values in unknown.items():
        if section and section not in SECTIONS and section != RULES:
            kept = tomli_w.dumps({section: dict(values)}).strip()
            out.append(f"\n# (not known to this version of bmoe-top: kept)\n{kept}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ the store
def default_path() -> Path:
    """The settings file in the user's config folder (``platformdirs``)."""
    return Path(platformdirs.user_config_dir("bmoe-top", appauthor=False)) / FILE_NAME


class _Unreadable(Exception):
    """The file exists but cannot be read as a settings file (the reason in words)."""


def _read_text(path: Path) -> str | None:
    """The file's text (None: there is no file). Raises :class:`_Unreadable`."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise _Unreadable("it is a directory") from None
    except OSError as e:
        raise _Unreadable((e.strerror or str(e)).lower()) from None
    if len(data) > MAX_BYTES:
        raise _Unreadable(f"larger than {MAX_BYTES // 1024} KiB: not a settings file")
    # a line that is not UTF-8 is damaged alone, its neighbours kept
    lines = data.split(b"\n")
    out = []
    for raw in lines:
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(_NOT_UTF8)  # reported as a damaged line
    return "\n".join(out).removeprefix("\ufeff")


class SettingsStore:
    """The settings of one bmoe-top process and the file they come from (``path`` None: none;
    ``--no-config``, and tests). ``settings``: the values in use; ``problems``: what reading the
    file found wrong (one line each); ``writable``: whether a change is written (False without a
    file, or when the file could not be read). Build with :meth:`open`."""

    def __init__(self, path: Path | None = None, settings: Settings | None = None,
                 problems: list[Problem] | None = None, *, writable: bool | None = None,
                 create_folder: bool = False) -> None:
        self.path = path
        self.settings = settings if settings is not None else Settings()
        self.problems = list(problems or [])
        self.writable = path is not None if writable is None else writable
        self.create_folder = create_folder
        self.write_error: str | None = None
        self.writes = 0

    @classmethod
    def open(cls, path: Path | None, *, create_folder: bool = False) -> SettingsStore:
        """Read ``path`` (None: no file, the defaults). ``create_folder``: make the file's folder on
        the first write (the default path in the config folder; a ``--config`` file's folder must
        exist). Never raises: what is wrong is in :attr:`problems`."""
        if path is None:
            return cls(None)
        try:
            text = _read_text(path)
        except _Unreadable as e:
            return cls(path, None, [Problem(f"{sanitize(str(path))}: {e}; the defaults are used and changes "
                                            "are not saved")], writable=False)
        if text is None:
            return cls(path, create_folder=create_folder)
        settings, problems, _unknown = parse(text)
        return cls(path, settings, problems, create_folder=create_folder)

    def set(self, name: str, value: Any) -> str | None:
        """Set ``"section.key"`` (see :meth:`Settings.with_value`) and write the file: the file is
        read again, this one entry replaced, the whole written atomically. Returns the line to show
        when the write failed (once per reason; None otherwise, and when nothing changed). Raises
        ``ValueError`` for an unknown name or a value the entry refuses."""
        new = self.settings.with_value(name, value)
        if new == self.settings:
            return None
        self.settings = new
        if not self.writable or self.path is None:
            return None
        try:
            self._write(name, new.get(name))
        except OutputFileError as e:
            line = f"settings not saved: {e}"
            if line == self.write_error:
                return None
            self.write_error = line
            return sanitize(line)
        self.write_error = None
        return None

    def _write(self, name: str, value: Any) -> None:
        assert self.path is not None
        try:
            text = _read_text(self.path)
        except _Unreadable as e:
            raise OutputFileError(str(self.path), str(e)) from None
        on_disk, _problems, unknown = parse(text) if text is not None else (Settings(), [], {})
        merged = on_disk.with_value(name, value) if value is not None or not name.startswith("sort.") else on_disk
        if self.create_folder:
            try:
                os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            except OSError as e:
                raise OutputFileError(str(self.path), (e.strerror or str(e)).lower(), e.errno) from None
        write_atomic(self.path, dumps(merged, unknown).encode("utf-8"), force=True, mode=0o600)
        self.writes += 1


def load(path: Path | None) -> SettingsStore:
    """:meth:`SettingsStore.open` of ``path`` (the default file creates its folder when written)."""
    return SettingsStore.open(path, create_folder=path is not None and path == default_path())
