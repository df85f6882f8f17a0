"""Per-token CSV (the runtime's ``--csv`` sink) into numpy columns.

Contract: ../shared/seeds/telemetry-contract.md "CSV sink": a header row, one row per token,
``# summary k=v ...`` comment line(s). Real files (../shared/data/real-runs) add
``# bmoe_metrics v1`` and ``# key=value ...`` header comments (model, arch, n_layer, n_expert,
flags) and grow from 7 to 8, 9, 11 and 22 columns: columns are read by NAME from the header, and
any column set works. Several turns: a ``turn`` column and one ``# summary`` line per turn.

Speed: the numeric body is parsed in ~1 MiB chunks by numpy's C CSV reader (``np.loadtxt``,
which also rejects a changed cell count or an empty/non-numeric cell); only a chunk that fails
is parsed line by line, so one bad row costs one chunk, never the file.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .summary_lines import canonical_summary
from .textio import Problem, decode_bytes, sniff_encoding

__all__ = ["TokenTable", "load_token_csv", "NumericCsv", "read_numeric_csv", "parse_kv_comment"]

_CHUNK = 1 << 20  # bytes of numeric body handed to numpy at once
_KV = re.compile(r"([^\s=]+)=(\S*)")
_SUMMARY = re.compile(r"summary(?:\s|$)")
_FORMAT = re.compile(r"([A-Za-z_][\w.-]*)\s+v(\d+)")


@dataclass(slots=True)
class NumericCsv:
    """What :func:`read_numeric_csv` found: ``comments`` as (lineno, text after '#'), in file
    order, each with ``row`` = the number of data rows before it; the ``header`` names; the data
    as a float64 matrix (n_rows x n_cols, NaN = bad cell); ``problems``."""

    header: list[str]
    comments: list[tuple[int, int, str]]  # (lineno, row index of the next row, text)
    matrix: np.ndarray
    problems: list[Problem]
    header_lineno: int = 0


@dataclass(slots=True)
class TokenTable:
    """A per-token CSV.

    ``meta`` run metadata from ``# key=value`` comments (``meta["format"]`` = "bmoe_metrics v1");
    ``header`` column names in file order; ``columns`` name -> float64 array of ``n_rows``
    (NaN = missing or bad cell; units as in the file: ``*_ms`` ms, ``read_bytes`` bytes,
    ``*_mib`` MiB, ``cache_hit_pct`` percent with -1 = no cache); ``summaries`` one dict per
    ``# summary`` line: {"row": index of the next token row, "lineno": line, "raw": {k: v},
    "summary": canonical dict (see summary_lines.canonical_summary)}; ``problems`` bad lines;
    ``comments`` other comment lines kept verbatim.
    """

    meta: dict[str, str]
    header: list[str]
    columns: dict[str, np.ndarray]
    n_rows: int
    summaries: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, float]:
        """The last ``# summary`` line's canonical dict ({} when the file has none)."""
        return self.summaries[-1]["summary"] if self.summaries else {}

    def column(self, name: str) -> np.ndarray | None:
        """The column called ``name``, or None when the file does not have it."""
        return self.columns.get(name)


def parse_kv_comment(text: str) -> dict[str, str]:
    """``key=value key=value`` (whitespace separated) -> dict; tokens without '=' are ignored."""
    return dict(_KV.findall(text))


def _to_utf8(data: bytes) -> bytes:
    name, n = sniff_encoding(data[:4])
    if name == "utf-8":
        return data[n:] if n else data
    return decode_bytes(data).encode("utf-8", "surrogatepass")


def _fallback_lines(
    body: bytes, first_lineno: int, ncol: int, header_line: bytes, problems: list[Problem],
    converters: dict[int, Callable[[str], float]] | None,
) -> tuple[list[list[float]], int]:
    """Line-by-line parse of a chunk the vectorised path rejected. Returns (rows, lines seen)."""
    rows: list[list[float]] = []
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    nan = float("nan")
    for i, raw in enumerate(lines):
        lineno = first_lineno + i
        b = raw.strip()
        if not b or b == header_line:
            continue
        text = b.decode("utf-8", "replace")
        cells = text.split(",")
        if len(cells) != ncol:
            problems.append(Problem(lineno, text, f"{len(cells)} cells, header has {ncol}"))
            continue
        row: list[float] = []
        bad: list[str] = []
        for j, c in enumerate(cells):
            c = c.strip()
            try:
                row.append(float(c))
            except ValueError:
                conv = converters.get(j) if converters else None
                v = None
                if conv is not None:
                    try:
                        v = conv(c)
                    except (ValueError, KeyError):
                        v = None
                if v is None:
                    row.append(nan)
                    bad.append(f"#{j + 1} {c!r:.20}")
                else:
                    row.append(v)
        if bad:
            problems.append(Problem(lineno, text, "bad cell(s) " + ", ".join(bad) + " (read as missing)"))
        rows.append(row)
    return rows, len(lines)


def _fast_chunk(chunk: bytes, ncol: int) -> np.ndarray | None:
    """Vectorised parse of a run of numeric lines (numpy's C ``loadtxt`` reader), or None when
    anything is off: wrong cell count on any line, an empty or non-numeric cell. Blank lines
    are skipped."""
    if b"\r" in chunk:
        chunk = chunk.replace(b"\r", b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "input contained no data" for blank-only chunks
        try:
            arr = np.loadtxt(io.BytesIO(chunk), delimiter=",", dtype=np.float64, comments=None,
                             ndmin=2, quotechar=None)
        except ValueError:
            return None
    if arr.shape[0] and arr.shape[1] != ncol:
        return None
    return arr


class _Columns:
    """Column-major float64 storage filled chunk by chunk (no final concatenate/transpose)."""

    __slots__ = ("data", "n")

    def __init__(self, ncol: int, cap: int) -> None:
        self.data = np.empty((ncol, max(cap, 1)), dtype=np.float64)
        self.n = 0

    def add(self, block: np.ndarray) -> None:
        k = block.shape[0]
        if not k:
            return
        if self.n + k > self.data.shape[1]:  # cannot happen with a newline-count bound; be safe
            grown = np.empty((self.data.shape[0], max(2 * self.data.shape[1], self.n + k)))
            grown[:, : self.n] = self.data[:, : self.n]
            self.data = grown
        self.data[:, self.n : self.n + k] = block.T
        self.n += k

    def finish(self) -> np.ndarray:
        """(ncol, n) C-contiguous array: each row is one contiguous column."""
        if self.n < 0.9 * self.data.shape[1]:
            return np.ascontiguousarray(self.data[:, : self.n])
        return self.data[:, : self.n]


def _parse_run(
    data: bytes, start: int, stop: int, lineno: int, ncol: int, header_line: bytes,
    problems: list[Problem], converters: dict[int, Callable[[str], float]] | None,
    cols: _Columns,
) -> None:
    """Parse data[start:stop] (data lines only) in ~1 MiB chunks into ``cols``."""
    pos = start
    while pos < stop:
        end = min(pos + _CHUNK, stop)
        if end < stop:
            nl = data.find(b"\n", end, stop)
            end = stop if nl < 0 else nl + 1
        chunk = data[pos:end]
        arr = _fast_chunk(chunk, ncol)
        if arr is None:
            rows, _ = _fallback_lines(chunk.replace(b"\r", b""), lineno, ncol, header_line,
                                      problems, converters)
            arr = np.array(rows, dtype=np.float64).reshape(-1, ncol)
        cols.add(arr)
        lineno += chunk.count(b"\n")
        pos = end


def read_numeric_csv(
    data: bytes,
    converters: dict[str, Callable[[str], float]] | None = None,
) -> NumericCsv:
    """Read a comment-headed numeric CSV (token CSV, route trace) into a float64 matrix.

    Lines starting with ``#`` are comments wherever they are (never data rows); the first other
    non-blank line is the header. A data line with the wrong number of cells is a Problem and is
    skipped; a cell that is not a number is NaN and a Problem (the row still counts); a repeat
    of the header line and blank lines are skipped. ``converters`` maps a column name to a
    function for non-numeric cells (e.g. "decode" -> 1.0). The matrix is returned column-major:
    ``matrix.T`` is (n_cols, n_rows) C-contiguous. Never raises on bad content.
    """
    problems: list[Problem] = []
    if not isinstance(data, bytes):
        data = bytes(data)
    data = _to_utf8(data)
    if b"\n" not in data and b"\r" in data:  # old-Mac line ends: bare CR only
        data = data.replace(b"\r", b"\n")
    comments: list[tuple[int, int, str]] = []
    header: list[str] | None = None
    header_line = b""
    header_lineno = 0
    cols: _Columns | None = None
    pos, n, lineno = 0, len(data), 1
    conv_idx: dict[int, Callable[[str], float]] | None = None
    while pos < n:
        # comment or header lines are handled one at a time; runs of data lines go to numpy
        if header is None or data.startswith(b"#", pos):
            nl = data.find(b"\n", pos)
            end = n if nl < 0 else nl + 1
            raw = data[pos:end].rstrip(b"\r\n")
            text = raw.decode("utf-8", "replace")
            if text.startswith("#"):
                comments.append((lineno, cols.n if cols else 0, text[1:].strip()))
            elif text.strip():
                header = [h.strip() for h in text.strip().split(",")]
                header_line = raw.strip()
                header_lineno = lineno
                cols = _Columns(len(header), data.count(b"\n", end) + 1)
                if converters:
                    conv_idx = {header.index(k): f for k, f in converters.items() if k in header}
            pos, lineno = end, lineno + 1
            continue
        nxt = data.find(b"\n#", pos)
        end = n if nxt < 0 else nxt + 1
        _parse_run(data, pos, end, lineno, len(header), header_line, problems, conv_idx, cols)
        lineno += data.count(b"\n", pos, end)
        pos = end
    ncol = len(header) if header else 0
    matrix = cols.finish().T if cols is not None else np.empty((0, ncol), dtype=np.float64)
    return NumericCsv(header or [], comments, matrix, problems, header_lineno)


def load_token_csv(data: bytes) -> TokenTable:
    """Parse a per-token CSV (``--csv`` sink) from its bytes. Never raises on bad content.

    Returns a :class:`TokenTable`; columns are contiguous float64 arrays keyed by header name
    (a duplicated name keeps its first column; the others get ``name.2`` etc.). A file without a
    header row yields no columns and a Problem.
    """
    nc = read_numeric_csv(data)
    problems = nc.problems
    meta: dict[str, str] = {}
    summaries: list[dict] = []
    others: list[str] = []
    for lineno, row, text in nc.comments:
        if _SUMMARY.match(text):
            raw = parse_kv_comment(text[len("summary"):])
            summ = canonical_summary(raw)
            bad = [k for k, v in raw.items() if k not in summ and _not_number(v)]
            for k in bad:
                problems.append(Problem(lineno, "# " + text, f"summary value {k}={raw[k]!r} is not a number"))
            summaries.append({"row": row, "lineno": lineno, "raw": raw, "summary": summ})
            continue
        fm = _FORMAT.fullmatch(text)
        if fm and "=" not in text:
            meta.setdefault("format", text)
            continue
        kv = parse_kv_comment(text)
        if kv:
            for k, v in kv.items():
                meta.setdefault(k, v)
        else:
            others.append(text)
    if not nc.header:
        if data.strip():
            problems.append(Problem(0, "", "no header row (expected column names such as step,wall_ms,...)"))
        return TokenTable(meta, [], {}, 0, summaries, problems, others)
    mat = nc.matrix.T  # (n_cols, n_rows), each row contiguous
    if not mat.flags.c_contiguous:
        mat = np.ascontiguousarray(mat)
    columns: dict[str, np.ndarray] = {}
    names: list[str] = []
    for j, name in enumerate(nc.header):
        key = name
        k = 2
        while key in columns:
            key = f"{name}.{k}"
            k += 1
        columns[key] = mat[j]
        names.append(key)
    return TokenTable(meta, names, columns, int(nc.matrix.shape[0]), summaries, problems, others)


def _not_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return True
    return False
