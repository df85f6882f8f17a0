"""Per-token CSV (the runtime's ``--csv`` sink) into numpy columns (docs/telemetry.md "Per-token CSV").

Contract: ../shared/seeds/telemetry-contract.md "CSV sink": a header row, one row per token,
``# summary k=v ...`` comment line(s). Real files (../shared/data/real-runs) add
``# bmoe_metrics v1`` and ``# key=value ...`` header comments (model, arch, n_layer, n_expert,
flags) and grow from 7 to 8, 9, 11 and 22 columns: columns are read by NAME from the header, and
any column set works. Several turns: a ``turn`` column and one ``# summary`` line per turn.

Damaged files lose only what is damaged (each repair is a :class:`~.textio.Problem`, never silent):

* the header is the line just before the first numeric row; lines above it that are not comments
  are stray (reported) or comments whose ``#`` was lost (``key=value``, ``bmoe_metrics v1``,
  ``summary ...``: read as the comment they were, reported); a header split in two by a damaged
  byte is joined; a header name one character off a known column (``stap``), two names glued by
  a damaged comma (``io_ms.compute_ms``) or one name cut by a stray comma (``wa,l_ms``) is read
  as the known name; a header commented out by a damaged first byte (``#tep,...``) is used; no
  header at all: a body as wide as the contract's 7, 8 or 9 columns gets the contract's names;
* the delimiter is the header's (``,``, ``;`` or tab); with ``;`` or tab a decimal comma (``12,5``)
  is a decimal mark; with ``,`` a quoted ``"12,5"`` is one, and unquoted decimal commas (``12,5``
  split into two fields) are rejoined when the header's integer columns (``step``, ``read_bytes``
  ...) and the file's fraction widths explain every extra field;
* a row with fewer fields than the header keeps them (the missing ones are NaN: absent), unless
  it is the last line and no line end follows it (a file cut off while it was written: that row
  is reported and not read); a row with more keeps the extras as columns ``unnamed_<n>`` (up to
  :data:`~.limits.MAX_CSV_COLUMNS`);
* NUL bytes: a cell holding a NUL is NaN (reported); a run of NULs (a zero-filled block after a
  crash) drops the row fragments it touches, keeps every other row and any comment after it;
* UTF-8 with or without BOM, UTF-16 with or without BOM, LF/CRLF/CR line ends.

Speed: the numeric body is parsed in 256 KiB chunks. A chunk made only of well-formed rows (every
row has the file's field count, only numbers) is read by a fast reader: the native reader
(parsers/csv_native.c) straight into the columns; without a C compiler (and for a chunk of many
16-17 digit numbers) one ``bytes.translate`` checks the shape and orjson parses it. Either reads
every number exactly as ``float()`` does. Any other chunk is parsed line by line, so one bad row
costs one chunk, never the file.
benchmarks/bench_csv_load.py compares with pyarrow.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import io
import math
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from . import csv_native
from .limits import MAX_CSV_CELLS, MAX_CSV_COLUMNS, dims_problem
from .summary_lines import canonical_summary
from .textio import Problem, decode_bytes, guess_encoding

__all__ = ["TokenTable", "load_token_csv", "generated_turns", "NumericCsv", "read_numeric_csv", "parse_kv_comment",
           "find_header", "headerless_contract", "CsvHead", "TOKEN_COLUMNS", "KNOWN_TOKEN_COLUMNS",
           "INTEGER_COLUMNS", "VALID_RANGES"]

#: The contract's columns, in the order the runtime writes them (7 original + stall_ms, mgmt_ms).
TOKEN_COLUMNS: tuple[str, ...] = ("step", "steps", "wall_ms", "io_ms", "compute_ms", "read_bytes",
                                  "cache_hit_pct", "stall_ms", "mgmt_ms")
#: Every per-token column real files carry (../shared/data/real-runs), for header repair.
KNOWN_TOKEN_COLUMNS: frozenset[str] = frozenset(TOKEN_COLUMNS) | {
    "majflt", "cpu_ms", "dense_resident_frac", "turn", "majflt_mib", "cache_budget_mib", "rss_mib",
    "rss_anon_mib", "rss_file_mib", "swap_mib", "mem_available_mib", "mem_free_mib", "swap_free_mib"}
#: Columns written as integers (never with a decimal mark): what tells a decimal comma from a field
#: separator in an unquoted comma-separated file.
INTEGER_COLUMNS: frozenset[str] = frozenset({
    "step", "steps", "read_bytes", "turn", "majflt", "layer", "expert", "slot", "phase", "residency",
    "expert_bytes"})
_DIM_KEYS = ("n_layer", "n_expert", "n_expert_used")

_CHUNK = 1 << 18  # bytes of numeric body handed to the fast parser at once
_READ = 1 << 22  # bytes read from a file at once
_WINDOW = 8  # chunks the native reader may read at once (with a pmap)
_HEAD_BYTES = 1 << 26  # the most of a file's top searched for its header (the rest is body)
_SAMPLE_ROWS = 200  # data rows looked at to learn the file's width and number format
_HEAD_LINES = 10_000  # lines searched for the first data row (the rest is body, read line by line)
_KV = re.compile(r"([^\s=]+)=(\S*)")
_SUMMARY = re.compile(r"summary(?:\s|$)")
_FORMAT = re.compile(r"([A-Za-z_][\w.-]*)\s+v(\d+)")
_DELIMS = (",", ";", "\t")
_INT = re.compile(r"[-+]?\d+")
_DIGITS = re.compile(r"\d+")
_COMMA_NUMBER = re.compile(r"[-+]?\d+,\d+")
_DOT_DECIMAL = re.compile(rb"\d\.\d")
_NUL_RUN = re.compile(r"\x00{2,}")
_NUMBER_BYTES = b"0123456789.-+eE"
# every byte of a well-formed numeric chunk after deleting _NUMBER_BYTES is ',' or '\n'
_SHAPE = bytes(c if c in b",\n" else ord("x") for c in range(256))
_NAN = float("nan")
#: a ``map`` whose calls may run at once (``ThreadPoolExecutor.map``)
Pmap = Callable[[Callable[[int], tuple[int, int]], Iterable[int]], Iterable[tuple[int, int]]]
_NATIVE_FIXUPS = 4096  # long numbers fixed up per chunk before the orjson reader takes the chunk


def parse_kv_comment(text: str) -> dict[str, str]:
    """``key=value key=value`` (whitespace separated) -> dict; tokens without '=' are ignored."""
    return dict(_KV.findall(text))


def _comment_like(text: str) -> bool:
    """A line that reads as one of the comments real files carry once its ``#`` is put back:
    ``summary k=v ...``, ``name vN`` (format line), or ``key=value`` tokens only."""
    s = text.strip()
    if not s:
        return False
    if _SUMMARY.match(s) or (_FORMAT.fullmatch(s) and "," not in s):
        return True
    toks = s.split()
    return all("=" in t and not t.startswith("=") for t in toks) and "," not in s


# ---------------------------------------------------------------------------------------------
# cells and lines

def _cells(line: str, delim: str) -> list[str]:
    """Split one line into stripped cells; double quotes are honoured (a quoted cell may hold the
    delimiter) when the line has any."""
    if '"' in line:
        try:
            return [c.strip() for c in next(csv.reader([line], delimiter=delim))]
        except (csv.Error, StopIteration):
            pass
    return [c.strip() for c in line.split(delim)]


def _number(cell: str, decimal_comma: bool) -> float | None:
    """The value of one cell, or None when it is not a number (empty cells too)."""
    if not cell:
        return None
    if "," in cell and (decimal_comma or '"' not in cell) and _COMMA_NUMBER.fullmatch(cell):
        cell = cell.replace(",", ".")
    try:
        v = float(cell)
    except ValueError:
        return None
    return v if v - v == 0.0 else None  # nan, inf, 1e999: no measurement is infinite or not a number


def _not_finite(cell: str) -> bool:
    """A cell that is a number, but an infinite one or NaN (``inf``, ``-Infinity``, ``nan``, ``1e999``)."""
    try:
        v = float(cell.replace(",", "."))
    except ValueError:
        return False
    return v - v != 0.0


def _numbers(line: str, d: str) -> tuple[int, int]:
    """(cells that are numbers, cells that are not) of ``line`` split at ``d`` (a decimal comma
    counts as a decimal mark unless ``d`` is the comma; empty cells count for neither)."""
    good = bad = 0
    for c in _cells(line, d):
        if not c:
            continue
        if _number(c, d != ",") is None:
            bad += 1
        else:
            good += 1
    return good, bad


def _best_delim(line: str) -> str:
    """The delimiter of a data row: the one whose cells are most often numbers, then the most
    frequent one, then the comma. ``1;1,25;2,25`` is split at the semicolons: as many commas, but
    split at them no cell is a number."""
    def score(d: str) -> tuple[int, int, bool]:
        good, bad = _numbers(line, d) if d in line else (0, 1)
        return good - bad, line.count(d), d == ","
    return max(_DELIMS, key=score)


def _is_data(line: str, delim: str | None = None) -> bool:
    """The first data row of a file: more of its cells are numbers than are not (empty cells count
    for neither). Later rows need only as many numbers as other cells (:meth:`_Body.row`)."""
    good, bad = _numbers(line, delim or _best_delim(line))
    return good > bad


# ---------------------------------------------------------------------------------------------
# header repair

def _edit1(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ by at most one substitution, insertion or deletion."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    if la == lb:
        return sum(x != y for x, y in zip(a, b)) == 1
    if la > lb:
        a, b, la, lb = b, a, lb, la
    i = 0
    while i < la and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1:]


def _fuzzy(name: str, known: frozenset[str], taken: set[str]) -> str | None:
    """The one known name ``name`` is a damaged byte away from (not already in the header)."""
    clean = name.replace("\x00", "").strip()
    if clean in known:
        return clean
    if len(clean) < 3:
        return None
    hits = [k for k in known if k not in taken and len(k) >= 4 and _edit1(clean, k)]
    return hits[0] if len(hits) == 1 else None


def _repair_header(names: list[str], width: int, known: frozenset[str], lineno: int, text: str,
                   problems: list[Problem]) -> list[str]:
    """Known names for the damaged ones (see the module doc), each change reported."""
    if not known:
        return names
    out = list(names)
    # a damaged comma glued two names ("io_ms.compute_ms"), while rows have more fields than names
    j = 0
    while len(out) < width and j < len(out):
        c = out[j]
        if c not in known:
            for p in range(1, len(c) - 1):
                a, b = c[:p], c[p + 1:]
                if a in known and b in known and a not in out and b not in out:
                    problems.append(Problem(lineno, text, f"header: {c!r} read as {a!r} and {b!r} "
                                                          "(a damaged separator)"))
                    out[j:j + 1] = [a, b]
                    break
        j += 1
    # a stray separator cut one name in two ("wa,l_ms"), while rows have fewer fields than names
    j = 0
    while len(out) > width > 0 and j + 1 < len(out):
        a, b = out[j], out[j + 1]
        if a not in known or b not in known:
            taken = set(out) - {a, b}
            hit = next((k for k in known if k not in taken and (a + b == k or _edit1(a + "?" + b, k))), None)
            if hit is not None:
                problems.append(Problem(lineno, text, f"header: {a!r},{b!r} read as {hit!r} "
                                                      "(a damaged byte became a separator)"))
                out[j:j + 2] = [hit]
                continue
        j += 1
    # one character off a known name
    for j, c in enumerate(out):
        if c in known:
            continue
        hit = _fuzzy(c, known, set(out))
        if hit is not None and hit != c:
            problems.append(Problem(lineno, text, f"header: column {j + 1} {c!r} read as {hit!r} "
                                                  "(one damaged character)"))
            out[j] = hit
    return out


def _known_count(names: Iterable[str], known: frozenset[str]) -> int:
    return sum(1 for n in names if n in known)


# ---------------------------------------------------------------------------------------------
# where the body starts, what the header is, how numbers are written

@dataclass(slots=True)
class CsvHead:
    """What :func:`find_header` learned from the top of a CSV. ``header``: the column names
    (repaired; [] when there is none); ``header_lineno`` (0 = none) and ``header_line`` (the raw
    line, to skip repeats); ``delim``; ``width``: the most common field count of the first data
    rows (0 without rows); ``decimal``: "" (a dot), "comma" (the delimiter is not a comma, so a
    comma is the decimal mark) or "split" (unquoted decimal commas split into two fields, rejoined
    by the column formats); ``body``: byte offset of the first line after the header (or of the
    first data row); ``comments``: (lineno, text after '#') before the body; ``problems``."""

    header: list[str] = field(default_factory=list)
    header_lineno: int = 0
    header_line: str = ""
    delim: str = ","
    width: int = 0
    decimal: str = ""
    body: int = 0
    body_lineno: int = 1
    comments: list[tuple[int, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    int_cols: frozenset[int] = frozenset()
    frac_width: dict[int, int] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)


def _fragments(line: str) -> list[str]:
    """The parts of a line between runs of NUL bytes (a zero-filled block)."""
    return [p for p in _NUL_RUN.split(line) if p.strip("\x00").strip()]


def find_header(data: bytes, known: frozenset[str] = frozenset(),
                default_header: Callable[[int], Sequence[str] | None] | None = None) -> CsvHead:
    """Find the header, the delimiter and the number format of a CSV from its first lines (UTF-8
    bytes, LF line ends: see :func:`read_numeric_csv`). ``known``: the column names of the format,
    for repairs; ``default_header(width)``: names for a file without a header. Never raises."""
    head = CsvHead()
    problems = head.problems
    pos, n, lineno = 0, len(data), 1
    candidates: list[tuple[int, str]] = []  # (lineno, text): lines above the data that are neither
    comment_lines: list[tuple[int, str]] = []
    first_data: tuple[int, int] | None = None  # (lineno, offset)
    while pos < n and first_data is None and lineno <= _HEAD_LINES:
        nl = data.find(b"\n", pos)
        end = n if nl < 0 else nl + 1
        text = data[pos:end].decode("utf-8", "replace").rstrip("\n")
        damaged = "\x00\x00" in text
        if damaged:
            problems.append(Problem(lineno, text.replace("\x00", ""), "a run of NUL bytes (a zero-filled block): "
                                                                      "the parts it touches are not data"))
        for part in (_fragments(text) if damaged else [text.replace("\x00", "")]):
            s = part.strip()
            if not s:
                continue
            if s.startswith("#"):
                comment_lines.append((lineno, s[1:].strip()))
            elif _is_data(s):
                if not damaged:
                    first_data = (lineno, pos)
            else:
                candidates.append((lineno, s))
        pos, lineno = end, lineno + 1
    body_line, body_pos = first_data if first_data is not None else (lineno, pos)
    # the data's delimiter and width, from the first rows
    sample: list[str] = []
    p = body_pos
    while p < n and len(sample) < _SAMPLE_ROWS:
        nl = data.find(b"\n", p)
        e = n if nl < 0 else nl + 1
        row = data[p:e].decode("utf-8", "replace").strip()
        if row and not row.startswith("#") and "\x00" not in row and _is_data(row):
            sample.append(row)
        p = e
    headers = [i for i, (_, t) in enumerate(candidates) if not _comment_like(t)]
    if sample:
        delim = _best_delim(sample[0])
    elif headers:
        hl = candidates[headers[-1]][1]
        delim = max(_DELIMS, key=lambda d: (hl.count(d), d == ","))
    else:
        delim = ","
    head.delim, head.sample = delim, sample
    widths = [len(_cells(r, delim)) for r in sample]
    head.width = max(set(widths), key=widths.count) if widths else 0
    if delim != "," and any(_COMMA_NUMBER.fullmatch(c) for r in sample[:20] for c in _cells(r, delim)):
        head.decimal = "comma"

    def score(i: int) -> tuple[int, bool, int, int]:
        cells = _cells(candidates[i][1], delim)
        fixed = _repair_header(cells, head.width or len(cells), known, 0, "", [])
        return _known_count(fixed, known), len(cells) == head.width, min(len(cells), 2), i

    header: list[str] = []
    header_idx = max(headers, key=score) if headers else None
    if header_idx is not None:
        h_lineno, h_text = candidates[header_idx]
        header = _cells(h_text, delim)
        # a header split in two by a damaged byte (it became a line break)
        if header_idx > 0 and candidates[header_idx - 1][0] == h_lineno - 1 and head.width \
                and len(header) != head.width:
            prev = candidates[header_idx - 1][1]
            for glue in (delim, "?"):
                joined = _cells(prev + glue + h_text, delim)
                if len(joined) == head.width:
                    fixed = _repair_header(joined, head.width, known, h_lineno, h_text, [])
                    if not known or _known_count(fixed, known) > _known_count(header, known):
                        problems.append(Problem(h_lineno - 1, prev, "header: line split in two by a damaged "
                                                                   "byte; the two lines are read as one"))
                        candidates.pop(header_idx - 1)
                        header_idx -= 1
                        header = joined
                        break
        head.header_lineno, head.header_line = h_lineno, h_text
        header = _repair_header(header, head.width or len(header), known, h_lineno, h_text, problems)
    else:
        # a header commented out by a damaged first byte ("#tep,steps,...")
        if comment_lines and head.width >= 2:
            c_lineno, c_text = comment_lines[-1]
            cells = _cells(c_text, delim)
            if len(cells) == head.width and not _comment_like(c_text) and not _is_data(c_text, delim):
                fixed = _repair_header(cells, head.width, known, c_lineno, "#" + c_text, [])
                if not known or _known_count(fixed, known) >= max(1, len(fixed) // 2):
                    problems.append(Problem(c_lineno, "#" + c_text, "header line starts with '#' "
                                                                    "(a damaged byte?): read as the header"))
                    comment_lines.pop()
                    header = _repair_header(cells, head.width, known, c_lineno, "#" + c_text, problems)
                    head.header_lineno, head.header_line = c_lineno, "#" + c_text
        if not header and head.width:
            names = default_header(head.width) if default_header else None
            if names:
                header = list(names)
                problems.append(Problem(body_line, sample[0] if sample else "",
                                        f"no header row: the {head.width} columns are named in the "
                                        "contract's order (" + ",".join(header) + ")"))
            else:
                problems.append(Problem(body_line, sample[0] if sample else "",
                                        "no header row (expected column names such as step,wall_ms,...): "
                                        "columns are unnamed"))
                header = [f"unnamed_{j + 1}" for j in range(min(head.width, MAX_CSV_COLUMNS))]
    # every other candidate above the header: a comment that lost its '#', or a stray line
    for i, (c_lineno, c_text) in enumerate(candidates):
        if i == header_idx:
            continue
        if _comment_like(c_text):
            comment_lines.append((c_lineno, c_text))
            problems.append(Problem(c_lineno, c_text, "a comment line without its '#': read as a comment"))
        else:
            where = "before" if header_idx is None or i < header_idx else "after"
            problems.append(Problem(c_lineno, c_text, f"stray line {where} the header: not data, skipped"))
    comment_lines.sort()
    head.comments = comment_lines
    head.header = header
    head.body, head.body_lineno = body_pos, body_line

    # decimal commas in a comma-separated file: rejoin split fields by the column formats. Taken only
    # when every non-integer column shows one fraction width in the rows that split all of them.
    if delim == "," and header and head.width > len(header) and len(sample) >= 3 \
            and not any(_DOT_DECIMAL.search(r.encode()) for r in sample):
        int_cols = frozenset(j for j, name in enumerate(header) if name in INTEGER_COLUMNS)
        all_split = len(header) + len(header) - len(int_cols)
        fw: dict[int, list[int]] = {}
        full = 0
        for r in sample:
            cells = _cells(r, ",")
            if len(cells) != all_split:
                continue
            full += 1
            j = 0
            for col in range(len(header)):
                if col in int_cols:
                    j += 1
                else:
                    fw.setdefault(col, []).append(len(cells[j + 1]))
                    j += 2
        widths_ok = full >= max(3, len(sample) // 2) and all(
            v.count(max(set(v), key=v.count)) >= 0.9 * len(v) for v in fw.values())
        if widths_ok:
            frac = {c: max(set(v), key=v.count) for c, v in fw.items()}
            solved = sum(1 for r in sample if _merge_decimal(_cells(r, ","), len(header), int_cols, frac) is not None)
            if solved >= 0.9 * len(sample):
                head.decimal, head.int_cols, head.frac_width = "split", int_cols, frac
                problems.append(Problem(head.body_lineno, sample[0], "decimal commas in a comma-separated "
                                                                    "file: split fields are rejoined by the "
                                                                    "column formats"))
    return head


def _merge_decimal(cells: list[str], ncol: int, int_cols: frozenset[int],
                   frac_width: dict[int, int]) -> list[float] | None:
    """Read ``cells`` as ``ncol`` values where some non-integer columns were written with a decimal
    comma that split them into two fields. Returns the values, or None when no reading (or more than
    one equally good reading) explains the fields."""
    m = len(cells)
    extra = m - ncol
    if extra < 0 or extra > ncol:
        return None
    if not all(_INT.fullmatch(c) or (_number(c, False) is not None and "," not in c) for c in cells):
        return None
    memo: dict[tuple[int, int], tuple[int, int, list[float] | None]] = {}

    def go(i: int, j: int) -> tuple[int, int, list[float] | None]:
        """(score, number of best readings, values) for cells[i:] into columns j.."""
        if j == ncol:
            return (0, 1, []) if i == m else (-1, 0, None)
        key = (i, j)
        if key in memo:
            return memo[key]
        best: tuple[int, int, list[float] | None] = (-1, 0, None)
        options: list[tuple[int, float, int]] = []
        if i < m:
            v = _number(cells[i], False)
            if v is not None and (j not in int_cols or _INT.fullmatch(cells[i])):
                options.append((i + 1, v, 0))
        if j not in int_cols and i + 1 < m and _INT.fullmatch(cells[i]) and _DIGITS.fullmatch(cells[i + 1]):
            bonus = 1 if frac_width.get(j) == len(cells[i + 1]) else 0
            options.append((i + 2, float(cells[i] + "." + cells[i + 1]), bonus))
        for ni, v, bonus in options:
            sc, cnt, rest = go(ni, j + 1)
            if rest is None:
                continue
            sc += bonus
            if sc > best[0]:
                best = (sc, cnt, [v, *rest])
            elif sc == best[0]:
                best = (sc, best[1] + cnt, best[2])
        memo[key] = best
        return best

    score, count, values = go(0, 0)
    return values if values is not None and count == 1 else None


# ---------------------------------------------------------------------------------------------
# the body

class _Columns:
    """Float64 columns, one array each, filled block by block; grow in rows (one column at a time,
    so growing never holds a second copy of the table) and in columns. Rows past ``n`` are not
    written, so room reserved ahead costs address space, not memory."""

    __slots__ = ("cols", "cap", "n")

    def __init__(self, ncol: int, cap: int) -> None:
        self.cap = max(cap, 16)
        self.cols = [np.empty(self.cap, dtype=np.float64) for _ in range(max(ncol, 0))]
        self.n = 0

    @property
    def ncol(self) -> int:
        return len(self.cols)

    def widen(self, ncol: int) -> None:
        while len(self.cols) < ncol:
            col = np.empty(self.cap, dtype=np.float64)
            col[: self.n] = np.nan
            self.cols.append(col)

    def add(self, block: np.ndarray) -> None:
        k, w = block.shape
        if not k:
            return
        if w > self.ncol:
            self.widen(w)
        self.reserve(k)
        for j in range(w):
            self.cols[j][self.n: self.n + k] = block[:, j]
        self.took(k, w)

    def reserve(self, k: int) -> None:
        """Room for ``k`` more rows."""
        if self.n + k > self.cap:
            self.cap = max(2 * self.cap, self.n + k)
            for j, col in enumerate(self.cols):
                grown = np.empty(self.cap, dtype=np.float64)
                grown[: self.n] = col[: self.n]
                self.cols[j] = grown

    def took(self, k: int, w: int) -> None:
        """Count ``k`` rows of ``w`` columns written in place after the last row."""
        for col in self.cols[w:]:
            col[self.n: self.n + k] = np.nan
        self.n += k

    def drop_last(self) -> None:
        """Forget the last row read."""
        self.n = max(0, self.n - 1)

    def finish(self) -> list[np.ndarray]:
        """The columns, ``n`` rows each (views: the rows never written are never touched)."""
        return [col[: self.n] for col in self.cols]


def _fast_block(chunk: bytes, ncol: int) -> np.ndarray | None:
    """Parse complete lines of well-formed rows (every line ``ncol`` numbers, nothing else) into a
    (rows, ncol) block, or None when the chunk is anything else."""
    shape = chunk.translate(_SHAPE, _NUMBER_BYTES)
    if not shape or len(shape) % ncol:
        return None
    k = len(shape) // ncol
    if shape != (b"," * (ncol - 1) + b"\n") * k:
        return None
    try:
        vals = orjson.loads(b"".join((b"[", memoryview(chunk.replace(b"\n", b","))[:-1], b"]")))
        if len(vals) != k * ncol:
            return None
        # struct packs a list of numbers into doubles faster than numpy converts one
        return np.frombuffer(struct.Struct(f"<{k * ncol}d").pack(*vals), dtype="<f8").reshape(k, ncol)
    except (orjson.JSONDecodeError, struct.error, OverflowError, ValueError, TypeError):
        return None


def _native_block(rdr: csv_native.Reader, chunk: csv_native.Buffer, ncol: int, delim: int, dec: int,
                  cols: _Columns) -> tuple[int | None, bool]:
    """Read complete lines of well-formed rows with the native reader (parsers/csv_native.c)
    straight into ``cols`` after its last row, not yet counted: (the rows written, False), or
    (None, retry) when refused; ``retry`` is True when the rows are well formed but hold more long
    numbers than the reader fixes up (the orjson reader takes those)."""
    fix = np.empty((_NATIVE_FIXUPS, 4), dtype=np.int64)
    got, nfix = rdr.rows(chunk, ncol, delim, dec, cols.cols, cols.n, fix)
    if got == csv_native.NO_ROOM:
        cols.reserve(bytes(chunk).count(b"\n"))
        got, nfix = rdr.rows(chunk, ncol, delim, dec, cols.cols, cols.n, fix)
    if got < 0:
        return None, got == csv_native.FIXUPS_FULL
    return _fixed_up(chunk, got, nfix, fix, dec, cols), False


def _fixed_up(chunk: csv_native.Buffer, got: int, nfix: int, fix: np.ndarray, dec: int, cols: _Columns) -> int | None:
    """The numbers the native reader left to ``float()`` (``fix[:nfix]``) written; ``got`` (the
    rows read), or None when one is not finite (the line reader reports it)."""
    for r, c, a, b in fix[:nfix].tolist():
        cell = bytes(chunk[a:b]).decode("ascii")
        v = float(cell.replace(",", ".") if dec == 0x2C else cell)
        if math.isinf(v):
            return None
        cols.cols[c][r] = v
    return got


class _Body:
    """The line-by-line reader for chunks the fast path refused, and the notes it aggregates."""

    def __init__(self, head: CsvHead, converters: dict[int, Callable[[str], float]] | None,
                 problems: list[Problem], comments: list[tuple[int, int, str]]) -> None:
        self.head = head
        self.ncol = len(head.header)
        self.width = self.ncol  # the field count of most rows (more than ncol: an older header)
        self.delim = head.delim
        self.converters = converters
        self.problems = problems
        self.comments = comments
        self.header_line = head.header_line.strip()
        self.ragged: dict[tuple[str, int], list[Any]] = {}  # (short|long, fields) -> [count, lineno, text]
        self.last_short: tuple[int, int, str] | None = None  # (lineno, fields, text) of the last short row
        self.capped = False
        self.nul_only = 0
        #: the line number of each row :meth:`lines` returned last, in order
        self.row_lines: list[int] = []
        #: cells that were numbers but not finite (``inf``, ``nan``, ``1e999``)
        self.impossible = 0

    def _note_ragged(self, kind: str, nfield: int, lineno: int, text: str) -> None:
        r = self.ragged.setdefault((kind, nfield), [0, lineno, text])
        r[0] += 1

    def unnote_short(self, nfield: int) -> None:
        """Take back the last short row's note (the row was not kept after all)."""
        r = self.ragged.get(("short", nfield))
        if r is not None:
            r[0] -= 1
            if r[0] <= 0:
                del self.ragged[("short", nfield)]

    def finish(self, names: list[str]) -> None:
        for (kind, nfield), (count, lineno, text) in sorted(self.ragged.items(), key=lambda kv: kv[1][1]):
            rows = f"{count} row{'s' if count != 1 else ''}"
            if kind == "short":
                why = (f"{rows} with {nfield} fields, the header has {self.ncol}: the missing fields are "
                       f"absent (first: line {lineno})")
            else:
                kept = ", ".join(names[self.ncol: min(nfield, len(names))])
                why = (f"{rows} with {nfield} fields, the header has {self.ncol}: the extra fields are kept "
                       f"as {kept} (first: line {lineno})")
            self.problems.append(Problem(lineno, text, why))
        if self.capped:
            self.problems.append(Problem(0, "", f"fields beyond column {MAX_CSV_COLUMNS} dropped "
                                                "(the column cap, parsers/limits.py)"))
        if self.nul_only:
            self.problems.append(Problem(0, "", f"{self.nul_only} line(s) of NUL bytes only (zero-filled) skipped"))

    def lines(self, body: bytes, first_lineno: int, row0: int) -> list[list[float]]:
        """Rows of ``body`` (complete lines); comments found on the way go to ``self.comments``."""
        rows: list[list[float]] = []
        self.row_lines = []
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for i, raw in enumerate(lines):
            lineno = first_lineno + i
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            if "\x00" in text:
                self._nul_line(text, lineno, rows, row0)
                continue
            row = self.row(text, lineno, row0 + len(rows))
            if row is not None:
                rows.append(row)
                self.row_lines.append(lineno)
        return rows

    def _nul_line(self, text: str, lineno: int, rows: list[list[float]], row0: int) -> None:
        if "\x00\x00" in text:
            parts = _fragments(text)
            if not parts:
                self.nul_only += 1
                return
            for part in parts:
                s = part.strip()
                if s.startswith("#"):
                    self.comments.append((lineno, row0 + len(rows), s[1:].strip()))
                    self.problems.append(Problem(lineno, s, "comment after a run of NUL bytes (a zero-filled "
                                                            "block): kept"))
                else:
                    self.problems.append(Problem(lineno, s, "row fragment next to a run of NUL bytes (a "
                                                            "zero-filled block): not data, skipped"))
            return
        cells = _cells(text, self.delim)
        if self.ncol and len(cells) not in (self.ncol, self.width):
            self.problems.append(Problem(lineno, text.replace("\x00", "\\0"),
                                         f"NUL byte(s) in a row of {len(cells)} fields, the header has "
                                         f"{self.ncol}: row skipped"))
            return
        row = self.row(text.replace("\x00", "\ufffd"), lineno, row0 + len(rows))
        if row is not None:
            rows.append(row)
            self.row_lines.append(lineno)

    def row(self, text: str, lineno: int, row_index: int) -> list[float] | None:
        """One line -> its values, or None (a repeated header, a comment without '#', not a row)."""
        if text == self.header_line:
            return None
        if text.startswith("#"):
            self.comments.append((lineno, row_index, text[1:].strip()))
            return None
        cells = _cells(text, self.delim)
        head = self.head
        if head.decimal == "split" and len(cells) > self.ncol:
            vals = _merge_decimal(cells, self.ncol, head.int_cols, head.frac_width)
            if vals is not None:
                return vals
        decimal_comma = head.decimal == "comma"
        row: list[float] = []
        bad: list[str] = []
        infinite: list[str] = []
        good = nbad = 0
        for j, c in enumerate(cells):
            v = _number(c, decimal_comma)
            if v is None and c:
                conv = self.converters.get(j) if self.converters else None
                if conv is not None:
                    try:
                        v = float(conv(c))
                    except (ValueError, KeyError, TypeError):
                        v = None
                if v is None and _not_finite(c):
                    infinite.append(f"#{j + 1} {c!r:.20}")  # a number, but not a finite one: a cell of this row
                    row.append(_NAN)
                    continue
                if v is None:
                    nbad += 1
            if v is None:
                bad.append(f"#{j + 1} {c!r:.20}")
            else:
                good += 1
            row.append(_NAN if v is None else v)
        if not good or good < nbad:
            if _comment_like(text):
                self.comments.append((lineno, row_index, text.strip()))
                self.problems.append(Problem(lineno, text, "a comment line without its '#': read as a comment"))
            else:
                self.problems.append(Problem(lineno, text, "not a data row (its fields are not numbers): skipped"))
            return None
        if bad:
            self.problems.append(Problem(lineno, text, "bad cell(s) " + ", ".join(bad) + " (read as missing)"))
        if infinite:
            self.impossible += len(infinite)
            self.problems.append(Problem(lineno, text, "impossible cell(s) " + ", ".join(infinite)
                                         + ": not finite (read as missing)"))
        if self.ncol and len(row) < self.ncol:
            self._note_ragged("short", len(row), lineno, text)
            self.last_short = (lineno, len(row), text)
        elif len(row) > self.ncol:
            self._note_ragged("long", len(row), lineno, text)
            if len(row) > MAX_CSV_COLUMNS:
                del row[MAX_CSV_COLUMNS:]
                self.capped = True
        return row


def _prepare(data: bytes) -> bytes:
    """UTF-8 bytes with LF line ends and a final LF."""
    name, n = guess_encoding(data[:4096] if len(data) > 4096 else data)
    if name == "utf-8":
        data = data[n:] if n else data
    else:
        data = decode_bytes(data).encode("utf-8", "surrogatepass")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return data


class _Input:
    """A CSV's bytes as :func:`_prepare` makes them (UTF-8, LF line ends, a final LF), in pieces of
    whole lines ``(buffer, start, stop)``, never the whole of a file at once: ``bytes`` are one
    piece; a UTF-8 file with LF line ends is read into one buffer :data:`_READ` bytes at a time
    (a piece is read before the next read reuses the buffer); any other file (UTF-16, CR line
    ends) is read as blocks of text, its encoding guessed from its first 4 KiB, a CRLF split
    between two reads one line end. ``size``: the input's bytes (0 when not known), to size the
    columns."""

    def __init__(self, data: bytes | bytearray | memoryview | io.BufferedIOBase) -> None:
        #: the input ended inside a line (no line end after its last byte): a file cut off mid-write
        self.cut = False
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)
            self.size = len(data)
            self.cut = bool(data.strip(b"\x00")) and not data.endswith((b"\n", b"\r", b"\n\x00", b"\r\x00"))
            first = _prepare(data)
            self._pieces: Iterator[tuple[bytes | bytearray, int, int]] = iter(())
            self._first = first
            return
        try:
            self.size = max(0, os.fstat(data.fileno()).st_size - data.tell())
        except (OSError, AttributeError, ValueError):
            self.size = 0
        self._pieces = self._read(data)
        parts: list[bytes] = []
        lines = size = 0
        for piece, a, b in self._pieces:
            parts.append(bytes(piece[a:b]) if a or b < len(piece) or not isinstance(piece, bytes) else piece)
            lines += parts[-1].count(b"\n")
            size += b - a
            if lines > _HEAD_LINES + _SAMPLE_ROWS or size >= _HEAD_BYTES:
                break
        self._first = parts[0] if len(parts) == 1 else b"".join(parts)

    def _read(self, f: io.BufferedIOBase) -> Iterator[tuple[bytes | bytearray, int, int]]:
        buf = bytearray(_READ)
        have = f.readinto(buf) or 0
        if not have:
            return
        name, start = guess_encoding(bytes(buf[:4096]))
        if name != "utf-8":
            yield from self._text(f, bytes(buf[start:have]), codecs.getincrementaldecoder(name)(errors="replace"))
            return
        while True:
            if buf.find(b"\r", start, have) >= 0:  # CR line ends: the text reader from here
                yield from self._text(f, bytes(buf[start:have]), None)
                return
            last = buf.rfind(b"\n", start, have) + 1
            if last:
                yield buf, start, last
                start = last
            rest = have - start
            if rest == len(buf):  # a line longer than the buffer
                buf.extend(bytes(len(buf)))
            buf[:rest] = buf[start:have]
            with memoryview(buf) as view:
                got = f.readinto(view[rest:]) or 0
            if not got:
                if rest:
                    self.cut = True
                    yield bytes(buf[:rest]) + b"\n", 0, rest + 1
                return
            start, have = 0, rest + got

    def _text(self, f: io.BufferedIOBase, raw: bytes,
              dec: codecs.IncrementalDecoder | None) -> Iterator[tuple[bytes, int, int]]:
        """Blocks of whole lines from ``raw`` and the rest of ``f``, decoded by ``dec`` (None:
        UTF-8 as it is), CR and CRLF line ends made LF."""
        partial: list[bytes] = []  # the last line so far, not yet ended (a CR held back at its end)
        while True:
            nxt = f.read(_READ)
            final = not nxt
            text = dec.decode(raw, final).encode("utf-8", "surrogatepass") if dec is not None else raw
            if partial:
                partial.append(text)
                text = b"".join(partial)
                partial = []
            held = not final and text.endswith(b"\r")  # its LF may start the next read
            if held:
                text = text[:-1]
            if b"\r" in text:
                text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if final:
                if text and not text.endswith(b"\n"):
                    self.cut = True
                    text += b"\n"
                if text:
                    yield text, 0, len(text)
                return
            cut = text.rfind(b"\n") + 1
            if cut:
                yield text, 0, cut
            if cut < len(text):
                partial.append(text[cut:])
            if held:
                partial.append(b"\r")
            raw = nxt

    def head(self) -> bytes:
        """The first lines, up to where :func:`find_header` stops looking (or all)."""
        return self._first

    def body(self, offset: int) -> Iterator[tuple[bytes | bytearray, int, int]]:
        """``(buffer, start, stop)``: the lines from byte ``offset`` of :meth:`head` to the end."""
        first, self._first = self._first, b""
        yield first, offset, len(first)
        del first
        yield from self._pieces


@dataclass(slots=True)
class NumericCsv:
    """What :func:`read_numeric_csv` found: the ``header`` names (extras as ``unnamed_<n>``);
    ``comments`` as (lineno, row index of the next data row, text after '#'), in file order;
    the data as float64 ``columns``, one contiguous array of ``n_rows`` per name (NaN = absent
    or bad cell); ``problems``; ``header_lineno`` (0 = no header line)."""

    header: list[str]
    comments: list[tuple[int, int, str]]
    columns: list[np.ndarray]
    problems: list[Problem]
    header_lineno: int = 0
    #: (first row, its line, the line of every row or None when one row a line) per block read
    blocks: list[tuple[int, int, list[int] | None]] = field(default_factory=list)
    #: cells read as missing because they were numbers but not finite
    impossible: int = 0
    #: the input holds nothing but white space (known when there is no header)
    blank: bool = False

    @property
    def n_rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def lineno(self, row: int) -> int:
        """The file line the data row ``row`` was read from (0 when not known)."""
        i = bisect.bisect_right([b[0] for b in self.blocks], row) - 1
        if i < 0:
            return 0
        row0, line0, lines = self.blocks[i]
        if lines is None:
            return line0 + row - row0
        return lines[row - row0] if row - row0 < len(lines) else 0


class _Rows:
    """The body of a CSV, piece after piece: comment lines wherever they are, well-formed chunks
    through the native or the orjson reader, any other chunk line by line (:class:`_Body`), into
    one :class:`_Columns` up to :data:`~.limits.MAX_CSV_CELLS`; past the cap, lines are counted
    (and named in one problem) and comments still read. With ``pmap`` (a ``map`` whose calls may
    run at once, such as a thread pool's: the native reader runs without the GIL) the native reader
    reads up to :data:`_WINDOW` chunks of a run of rows at once, each at the rows its lines take
    when every line is a row; a chunk that is not (a damaged line) is read again on its own, and so
    are the chunks after it when it changed the row count."""

    def __init__(self, head: CsvHead, body: _Body, cols: _Columns, ncol: int, problems: list[Problem],
                 comments: list[tuple[int, int, str]], pmap: Pmap | None) -> None:
        self.head, self.body, self.cols, self.ncol = head, body, cols, ncol
        self.problems, self.comments = problems, comments
        self.blocks: list[tuple[int, int, list[int] | None]] = []
        self.lineno = head.body_lineno
        self.fast = head.decimal == ""
        self.translate = head.decimal == "comma"
        self.native = csv_native.reader() if self.fast or self.translate else None
        self.pmap = pmap if self.native is not None else None
        self.delim, self.dec = ord(head.delim), ord("," if self.translate else ".")
        self.left_out: list[int] = []  # [first line, last line] of the rows past the cell cap

    @staticmethod
    def _count(data: bytes | bytearray, a: int, e: int) -> int:
        return data.count(b"\n", a, e)

    def scan(self, data: bytes | bytearray, pos: int, stop: int) -> None:
        """Read the whole lines ``data[pos:stop]`` (the line numbers go on from the last piece)."""
        with memoryview(data) as view:
            while pos < stop:
                if data[pos] == 0x23:  # '#': a comment line, wherever it is
                    nl = data.find(b"\n", pos, stop)
                    end = stop if nl < 0 else nl + 1
                    text = bytes(data[pos:end]).decode("utf-8", "replace")[1:].strip()
                    self.comments.append((self.lineno, self.cols.n, text))
                    pos, self.lineno = end, self.lineno + 1
                    continue
                plan = self._plan(data, pos, stop)
                pre = self._parallel(data, view, plan) if self.pmap is not None and len(plan) > 1 else None
                for i, (a, e) in enumerate(plan):
                    row0 = self.cols.n
                    self._chunk(data, view, a, e, None if pre is None else pre[i])
                    if pre is not None and self.cols.n - row0 != pre[i][2]:
                        pre = None  # the rows after this chunk are not where they were read to
                pos = plan[-1][1]

    def _plan(self, data: bytes | bytearray, pos: int, stop: int) -> list[tuple[int, int]]:
        """The next chunks of rows from ``pos`` (``_CHUNK`` bytes each, ending at a line end),
        up to a comment line; up to :data:`_WINDOW` of them when they may be read at once."""
        plan: list[tuple[int, int]] = []
        most = _WINDOW if self.pmap is not None and not self.left_out else 1
        while pos < stop and len(plan) < most and data[pos] != 0x23:
            end = min(pos + _CHUNK, stop)
            if end < stop:
                nl = data.find(b"\n", end, stop)
                end = stop if nl < 0 else nl + 1
            hashmark = data.find(b"#", pos, end)  # memchr: numeric rows never hold one
            while hashmark >= 0 and data[hashmark - 1] != 0x0A:
                hashmark = data.find(b"#", hashmark + 1, end)
            if hashmark >= 0:
                end = hashmark  # the run of rows stops at the comment line
            plan.append((pos, end))
            pos = end
        return plan

    def _parallel(self, data: bytes | bytearray, view: memoryview, plan: list[tuple[int, int]]
                  ) -> list[tuple[int, int, int, np.ndarray]]:
        """Each chunk of ``plan`` read by the native reader at once (``pmap``), each at the rows it
        takes when every line is a row: ``(rows read or a refusal, fix-ups used, lines, fix-ups)``."""
        rdr, cols, ncol = self.native, self.cols, self.ncol
        assert rdr is not None and self.pmap is not None
        lines = [self._count(data, a, e) for a, e in plan]
        cols.reserve(sum(lines))
        row0 = np.cumsum([cols.n, *lines[:-1]]).tolist()
        fixes = [np.empty((_NATIVE_FIXUPS, 4), dtype=np.int64) for _ in plan]

        def read(i: int) -> tuple[int, int]:
            a, e = plan[i]
            return rdr.rows(view[a:e], ncol, self.delim, self.dec, cols.cols, row0[i], fixes[i])

        got = list(self.pmap(read, range(len(plan))))  # every call ends before the columns change again
        return [(g, nf, k, fx) for (g, nf), k, fx in zip(got, lines, fixes)]

    def _chunk(self, data: bytes | bytearray, view: memoryview, a: int, e: int,
               pre: tuple[int, int, int, np.ndarray] | None) -> None:
        """The rows of ``data[a:e]`` (whole lines, no comment line first) into the columns; ``pre``:
        the native reader's result for them, read at the columns' next row (see :meth:`_parallel`)."""
        cols, body, ncol = self.cols, self.body, self.ncol
        if self.left_out:  # past the cap: the lines are counted, not read
            k = self._count(data, a, e)
            self.left_out[1] = self.lineno + k - 1
            self.lineno += k
            return
        block: np.ndarray | None = None
        got: int | None = None
        retry = True
        if pre is not None:  # read already (_parallel)
            if pre[0] >= 0:
                got, retry = _fixed_up(view[a:e], pre[0], pre[1], pre[3], self.dec, cols), False
            else:
                retry = pre[0] == csv_native.FIXUPS_FULL
        elif self.native is not None:
            got, retry = _native_block(self.native, view[a:e], ncol, self.delim, self.dec, cols)
        chunk = b""
        if got is None:
            chunk = bytes(data[a:e])
            if (self.fast or self.translate) and retry:
                fchunk = (chunk.replace(b",", b".").replace(self.head.delim.encode(), b",") if self.translate
                          else chunk)
                block = _fast_block(fchunk, ncol)
        row_lines: list[int] | None = None
        if got is None and block is None:
            rows = body.lines(chunk, self.lineno, cols.n)
            width = max((len(r) for r in rows), default=0)
            block = np.full((len(rows), max(width, 1)), np.nan)
            for i, r in enumerate(rows):
                block[i, : len(r)] = r
            nlines = chunk.count(b"\n")
            row_lines = body.row_lines
            if rows:
                self.blocks.append((cols.n, self.lineno, row_lines))
        else:
            nlines = got if got is not None else block.shape[0]  # type: ignore[union-attr]
            self.blocks.append((cols.n, self.lineno, None))  # a well-formed chunk: one row a line
            if ncol > len(self.head.header):
                first = bytes(data[a:min(e, a + 200)]).decode("utf-8", "replace").split("\n", 1)[0]
                body.ragged.setdefault(("long", ncol), [0, self.lineno, first])[0] += nlines
        k = got if got is not None else block.shape[0]  # type: ignore[union-attr]
        width = ncol if got is not None else block.shape[1]  # type: ignore[union-attr]
        room = max(0, MAX_CSV_CELLS // max(cols.ncol, width, 1) - cols.n)
        if k > room:
            first_left = (self.lineno + room if row_lines is None
                          else row_lines[room] if room < len(row_lines) else self.lineno + nlines)
            self.left_out = [first_left, self.lineno + nlines - 1]
            k = room
            if block is not None:
                block = block[:room]
        if got is not None:
            cols.took(k, ncol)
        elif block is not None:
            cols.add(block)
        self.lineno += nlines

    def finish(self) -> None:
        if self.left_out:
            first, last = self.left_out
            cap = MAX_CSV_CELLS // max(self.cols.ncol, 1)
            why = (f"lines {first:,} to {last:,} ({last - first + 1:,} lines) left out: the table is over the cap "
                   f"of {MAX_CSV_CELLS:,} cells ({cap:,} rows of {self.cols.ncol} columns, parsers/limits.py); "
                   "the comment lines among and after them (# summary) are read")
            self.problems.append(Problem(first, "", why))


def read_numeric_csv(
    data: bytes | io.BufferedIOBase,
    converters: dict[str, Callable[[str], float]] | None = None,
    known: frozenset[str] = frozenset(),
    default_header: Callable[[int], Sequence[str] | None] | None = None,
    pmap: Pmap | None = None,
) -> NumericCsv:
    """Read a comment-headed numeric CSV (token CSV, route trace) into float64 columns.

    ``data``: the file's bytes, or a binary file (mapped, or read in blocks: never held whole, so
    memory holds the columns and one block). ``pmap``: a ``map`` whose calls may run at once (a
    thread pool's): runs of well-formed rows are then read several chunks at a time; the result
    is the same. Lines starting with ``#`` are comments wherever they are (never data
    rows). The header, the delimiter and the decimal mark are found by :func:`find_header`
    (``known``: the format's column names, used to repair a damaged header;
    ``default_header(width)``: names for a headerless body). A cell that is not a number is NaN
    and a Problem (the row still counts); ``converters`` maps a column name to a function for
    non-numeric cells (e.g. "decode" -> 1.0). A row with fewer fields than the header keeps them
    (NaN for the rest), except a last one with no line end after it (cut off: reported, not
    read); extra fields become columns. A repeat of the header, blank lines and lines
    of NUL bytes are skipped. The columns hold at most :data:`~.limits.MAX_CSV_CELLS` cells: the
    lines of rows after that are left out and named in one Problem, and the comments among and
    after them are still read. Never raises on bad content (a read error of the file is raised).
    Module doc: every repair.
    """
    src = _Input(data)
    first = src.head()
    head = find_header(first, known, default_header)
    problems = list(head.problems)
    comments: list[tuple[int, int, str]] = [(ln, 0, t) for ln, t in head.comments]
    header = list(head.header)
    if not header:
        return NumericCsv([], comments, [], problems, head.header_lineno, blank=not first.strip())
    if len(header) > MAX_CSV_COLUMNS:
        problems.append(Problem(head.header_lineno, "", f"header has {len(header)} columns: columns beyond "
                                                         f"{MAX_CSV_COLUMNS} dropped (the column cap)"))
        del header[MAX_CSV_COLUMNS:]
        head.header = header
    conv_idx = {header.index(k): f for k, f in converters.items() if k in header} if converters else None
    body = _Body(head, conv_idx, problems, comments)
    fast_ncol = len(header)
    if head.decimal != "split" and head.width > len(header):
        fast_ncol = min(head.width, MAX_CSV_COLUMNS)  # every row has more fields: the fast path takes them
    body.width = fast_ncol
    # rows expected: the body's bytes over the first rows' mean length (+10 %), so the columns are
    # filled in place and returned without a copy
    line_len = (sum(len(r) + 1 for r in head.sample) / len(head.sample)) if head.sample else 8.0
    est = int(max(src.size - head.body, len(first) - head.body) / max(line_len, 2.0) * 1.1) + 64
    cols = _Columns(max(fast_ncol, len(header)), min(est, MAX_CSV_CELLS // max(1, fast_ncol)))
    rows = _Rows(head, body, cols, fast_ncol, problems, comments, pmap)
    del first
    for piece, start, stop in src.body(head.body):
        rows.scan(piece, start, stop)
    rows.finish()
    cut = body.last_short
    if src.cut and cut is not None and cut[0] == rows.lineno - 1 and cols.n and not rows.left_out:
        # the file ends inside its last row (a run killed while it wrote): its fields are not all
        # there and its last one may be cut short, so none of it is read
        cols.drop_last()
        body.unnote_short(cut[1])
        problems.append(Problem(cut[0], cut[2], f"the file ends inside this row ({cut[1]} of {body.ncol} fields, "
                                                "cut off while it was written): not read"))
    names = header + [f"unnamed_{j + 1}" for j in range(len(header), cols.ncol)]
    body.finish(names)
    comments.sort(key=lambda c: c[0])
    return NumericCsv(names, comments, cols.finish(), problems, head.header_lineno, rows.blocks, body.impossible)


# ---------------------------------------------------------------------------------------------
# the per-token CSV

@dataclass(slots=True)
class TokenTable:
    """A per-token CSV.

    ``meta`` run metadata from ``# key=value`` comments (``meta["format"]`` = "bmoe_metrics v1";
    ``n_layer``/``n_expert``/``n_expert_used`` only when within parsers/limits.py's caps);
    ``header`` column names in file order; ``columns`` name -> float64 array of ``n_rows``
    (NaN = missing or bad cell; units as in the file: ``*_ms`` ms, ``read_bytes`` bytes,
    ``*_mib`` MiB, ``cache_hit_pct`` percent with -1 = no cache); ``summaries`` one dict per
    ``# summary`` line: {"row": index of the next token row, "lineno": line, "raw": {k: v},
    "summary": canonical dict (see summary_lines.canonical_summary), "derived": the keys of it the
    line does not state, computed from others (summary_lines.derive_summary)}; ``problems`` bad lines and
    every repair; ``comments`` other comment lines kept verbatim.
    """

    meta: dict[str, str]
    header: list[str]
    columns: dict[str, np.ndarray]
    n_rows: int
    summaries: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    #: cells read as missing because no measurement can hold them (:data:`VALID_RANGES`, not finite)
    impossible: int = 0

    @property
    def summary(self) -> dict[str, float]:
        """The last ``# summary`` line's canonical dict ({} when the file has none)."""
        if not self.summaries:
            return {}
        s: dict[str, float] = self.summaries[-1]["summary"]
        return s

    @property
    def identity(self) -> dict[str, str]:
        """The run this file is from: ``model`` and ``arch`` when the header comments name them."""
        return {k: self.meta[k] for k in ("model", "arch") if k in self.meta}

    def column(self, name: str) -> np.ndarray | None:
        """The column called ``name``, or None when the file does not have it."""
        return self.columns.get(name)


def generated_turns(table: TokenTable) -> tuple[list[int], str | None]:
    """The generated turns of a per-token CSV: the first row of each, in order (the position is the
    turn's 0-based number), and why the ``turn`` column could not be read as a turn counter (None
    when it could, or when there is none).

    bmoe-cli's ``turn`` counts generated turns from 0 and moves on after each ``# summary``; a
    turn with no row (cancelled before its first token) still has its ``# summary`` and skips a
    number, so turn ``k`` starts at the first row labelled ``k`` or more (or at the end), and
    ``summaries[j]`` is turn ``j``'s. A missing cell takes the row before it. A column that goes
    back, holds a fraction, or numbers more turns than its rows and summaries can hold is split
    where it changes instead (and the reason says so). Without a ``turn`` column, ``# summary``
    lines inside the rows split the turns; no row and no summary: no turn.
    """
    n = table.n_rows
    n_summ = len(table.summaries)
    col = table.columns.get("turn")
    if col is None or not n or np.isnan(col[:n]).all():
        ends = [min(max(int(s.get("row", n)), 0), n) for s in table.summaries]
        starts = [0, *ends[:-1]] if ends else ([0] if n else [])
        if ends and ends[-1] < n:  # rows after the last summary: a turn without its end
            starts.append(ends[-1])
        return [max(starts[: i + 1]) for i in range(len(starts))], None
    tv = col[:n].copy()
    ok = ~np.isnan(tv)
    tv = tv[np.maximum.accumulate(np.where(ok, np.arange(n), 0))]  # a missing cell: the row before it
    tv[: int(np.argmax(ok))] = tv[int(np.argmax(ok))]  # leading missing cells: the first value
    changes = np.flatnonzero(np.r_[True, tv[1:] != tv[:-1]])
    top = int(tv.max()) if np.isfinite(tv).all() else -1
    if top < 0 or (np.diff(tv) < 0).any() or (tv != np.floor(tv)).any() or top + 1 > len(changes) + n_summ:
        return [int(x) for x in changes], ("the turn column is not a counter of turns from 0 (it goes back, holds "
                                           "a fraction or skips more turns than the file has summaries): turns "
                                           "are split where it changes")
    count = max(top + 1, n_summ)
    firsts = np.searchsorted(tv, np.arange(count, dtype=np.float64), side="left")
    return [int(x) for x in firsts], None


def _contract_header(width: int) -> Sequence[str] | None:
    return TOKEN_COLUMNS[:width] if 7 <= width <= len(TOKEN_COLUMNS) else None


def headerless_contract(head: CsvHead) -> bool:
    """A body without a header (``head`` from :func:`find_header`) that :func:`load_token_csv`
    reads under the contract's names: as wide as its 7 to 9 columns (nine in ten sampled rows;
    the first may be the end of a line cut by a zero-filled block), every cell of every sampled
    row a number (sniffing: such a file is a per-token CSV)."""
    rows = [_cells(row, head.delim) for row in head.sample if "\x00" not in row]
    if head.header_lineno or _contract_header(head.width) is None or not rows:
        return False
    comma = head.delim != ","
    full = sum(1 for cells in rows if len(cells) == head.width)
    return full >= 0.9 * len(rows) and all(_number(c, comma) is not None for cells in rows for c in cells)


def load_token_csv(data: bytes | io.BufferedIOBase, pmap: Pmap | None = None) -> TokenTable:
    """Parse a per-token CSV (``--csv`` sink) from its bytes or a binary file (read in blocks, never
    whole; ``pmap``: a thread pool's ``map``, see :func:`read_numeric_csv`). Never raises on bad
    content.

    Returns a :class:`TokenTable`; columns are contiguous float64 arrays of shape (n_rows,) keyed by
    header name (a duplicated name keeps its first column; the others get ``name.2`` etc.). Damaged
    files: the module doc. A file without a header row whose body is as wide as the contract's
    7-9 columns gets the contract's names; otherwise its columns are ``unnamed_<n>`` and a Problem.
    """
    nc = read_numeric_csv(data, known=KNOWN_TOKEN_COLUMNS, default_header=_contract_header, pmap=pmap)
    problems = nc.problems
    meta: dict[str, str] = {}
    summaries: list[dict[str, Any]] = []
    others: list[str] = []
    for lineno, row, text in nc.comments:
        if _SUMMARY.match(text):
            raw = parse_kv_comment(text[len("summary"):])
            derived: set[str] = set()
            summ = canonical_summary(raw, derived)
            bad = [k for k, v in raw.items() if k not in summ and _not_number(v)]
            for k in bad:
                problems.append(Problem(lineno, "# " + text, f"summary value {k}={raw[k]!r} is not a number"))
            summaries.append({"row": row, "lineno": lineno, "raw": raw, "summary": summ, "derived": sorted(derived)})
            continue
        fm = _FORMAT.fullmatch(text)
        if fm and "=" not in text:
            meta.setdefault("format", text)
            continue
        kv = parse_kv_comment(text)
        if kv:
            for k, v in kv.items():
                if k in _DIM_KEYS and k not in meta:
                    why = dims_problem(**{("top_k" if k == "n_expert_used" else k): v})
                    if why is not None:
                        problems.append(Problem(lineno, "# " + text, f"{why}: ignored"))
                        meta[k] = ""  # the first value is the one that counts: a later one does not sneak in
                        continue
                meta.setdefault(k, v)
        else:
            others.append(text)
    meta = {k: v for k, v in meta.items() if not (k in _DIM_KEYS and v == "")}
    if not nc.header:
        if not nc.blank and not problems:
            problems.append(Problem(0, "", "no header row (expected column names such as step,wall_ms,...)"))
        return TokenTable(meta, [], {}, 0, summaries, problems, others)
    columns: dict[str, np.ndarray] = {}
    names: list[str] = []
    for j, name in enumerate(nc.header):
        key = name
        dup = 2
        while key in columns:
            key = f"{name}.{dup}"
            dup += 1
        columns[key] = nc.columns[j]
        names.append(key)
    impossible = nc.impossible + sum(_drop_impossible(key, columns[key], nc, problems)
                                     for key in names if key in VALID_RANGES)
    return TokenTable(meta, names, columns, nc.n_rows, summaries, problems, others, impossible)


_DAY_MS = 86_400_000.0
_PIB_MIB = float(1 << 30)
#: What a per-token column can hold: (lowest, highest, a sentinel allowed besides, why). A cell
#: outside is not a measurement (a negative time, a hit rate of 200 %, 1e99 bytes): it is read as
#: missing and is a problem of its line, like a cell that is not a number. Columns not listed are
#: only checked for being finite (every cell is: :func:`_number`).
VALID_RANGES: dict[str, tuple[float, float, float | None, str]] = {
    **{c: (0.0, _DAY_MS, None, "a time per token is 0 to 24 h")
       for c in ("wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms", "cpu_ms")},
    "read_bytes": (0.0, float(1 << 50), None, "bytes read per token are 0 to 1 PiB"),
    "cache_hit_pct": (0.0, 100.0, -1.0, "a hit rate is 0 to 100 % (-1: no cache)"),
    "dense_resident_frac": (0.0, 1.0, -1.0, "a fraction is 0 to 1 (-1: not known)"),
    **{c: (0.0, float(1 << 53), None, "a count is never negative") for c in ("step", "steps", "turn", "majflt")},
    **{c: (0.0, _PIB_MIB, None, "a size is 0 to 1 PiB")
       for c in ("majflt_mib", "cache_budget_mib", "rss_mib", "rss_anon_mib", "rss_file_mib", "swap_mib",
                 "mem_available_mib", "mem_free_mib", "swap_free_mib")},
}
#: Impossible cells of one column reported one by one; the rest are counted in one more problem.
_IMPOSSIBLE_LISTED = 10_000


def _drop_impossible(name: str, col: np.ndarray, nc: NumericCsv, problems: list[Problem]) -> int:
    """Cells of ``col`` outside :data:`VALID_RANGES` become NaN (in place), each a problem of its
    line; the other cells of the row are kept. Returns how many."""
    lo, hi, sentinel, why = VALID_RANGES[name]
    if not len(col) or (lo <= col.min() and col.max() <= hi):  # the usual file: two fast passes (a NaN fails them)
        return 0
    with np.errstate(invalid="ignore"):
        bad = (col < lo) | (col > hi)
    if sentinel is not None:
        bad &= col != sentinel
    if not bad.any():
        return 0
    rows = np.flatnonzero(bad)
    reason = f"impossible {name}: {why} (read as missing)"
    for r in rows[:_IMPOSSIBLE_LISTED]:
        problems.append(Problem(nc.lineno(int(r)), f"{name}={col[r]:g}", reason))
    if len(rows) > _IMPOSSIBLE_LISTED:
        problems.append(Problem(nc.lineno(int(rows[_IMPOSSIBLE_LISTED])), "",
                                f"{len(rows) - _IMPOSSIBLE_LISTED:,} more impossible {name} cells (read as missing)"))
    col[rows] = np.nan
    return len(rows)


def _not_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return True
    return False
