"""Tolerant text decoding and line splitting shared by every parser.

Every telemetry source (pipes, sockets, recorded files) is read through here, so the rules are the
same everywhere:

* Encoding is sniffed from a byte-order mark: UTF-8 BOM (stripped), UTF-16 LE/BE with BOM. A whole
  file (:func:`decode_bytes`) is also recognised as UTF-16 without a BOM (Windows tools write it: every
  other byte NUL, the text printable). Otherwise the bytes are UTF-8; invalid bytes become U+FFFD.
  Decoding never raises.
* Line terminators are LF, CRLF, or a bare CR (like Python's universal newlines). A CRLF split
  across two chunks is one terminator. Terminators are stripped from the returned lines.
  Only these three split lines: U+2028, form feed etc. are ordinary characters (orjson writes
  U+2028 unescaped inside JSON strings, so splitting on it would break BMOE lines).
* A missing final newline is fine: the last partial line comes out of ``flush()``.

docs/telemetry.md "Parsers". Making outside text safe for a terminal is sanitize.py's job.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "Problem",
    "decode_bytes",
    "sniff_encoding",
    "guess_encoding",
    "split_text",
    "iter_lines",
    "LineSplitter",
    "PROBLEM_TEXT_MAX",
]

#: Problem.text is cut to this many characters (the full line may be megabytes).
PROBLEM_TEXT_MAX = 200

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(slots=True)
class Problem:
    """A line a parser could not use: 1-based ``lineno`` (0 when not tied to a line), the line's
    ``text`` (cut to ~200 characters), and a human ``reason``."""

    lineno: int
    text: str
    reason: str

    def __post_init__(self) -> None:
        if len(self.text) > PROBLEM_TEXT_MAX:
            self.text = self.text[:PROBLEM_TEXT_MAX] + "…"


def sniff_encoding(head: bytes) -> tuple[str, int]:
    """Return ``(codec name, BOM length in bytes)`` for data starting with ``head``.

    UTF-8 BOM -> ("utf-8", 3); UTF-16 LE/BE BOM -> ("utf-16-le"/"utf-16-be", 2);
    otherwise ("utf-8", 0).
    """
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    return "utf-8", 0


def guess_encoding(data: bytes) -> tuple[str, int]:
    """:func:`sniff_encoding`, and for data without a BOM, UTF-16 LE/BE when its first 4 KiB look
    like it: at least 40 % of the high bytes NUL, at most 5 % of the low bytes, and the decoded text
    printable (so a zero-filled block, a binary file or UTF-8 with a few NULs is not taken for it).
    Returns ``(codec name, BOM length)``."""
    name, n = sniff_encoding(data[:4])
    if n or b"\x00" not in data[:4096]:
        return name, n
    sample = data[:4096]
    sample = sample[: len(sample) & ~1]
    half = len(sample) // 2
    if half < 8:
        return name, n
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    for codec, high, low in (("utf-16-le", odd, even), ("utf-16-be", even, odd)):
        if high >= 0.4 * half and low <= 0.05 * half:
            try:
                text, replaced = sample.decode(codec), False
            except UnicodeDecodeError:  # a lone surrogate (or the sample cut a pair in two)
                text, replaced = sample.decode(codec, errors="replace"), True
            if _looks_like_text(text, replaced):
                return codec, 0
    return name, n


def _looks_like_text(text: str, replaced: bool) -> bool:
    """At most 5 % of ``text`` is U+FFFD where the decoding ``replaced`` undecodable bytes (a
    U+FFFD the file itself holds is text), a lone surrogate or a control character other than
    tab / LF / CR. Unassigned and private-use code points count as text: a writer may use them,
    and a short sample with one of them is still text."""
    bad = sum(1 for c in text
              if (replaced and c == "\ufffd") or (unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n\r"))
    return bad <= 0.05 * len(text)


def _could_be_bom_prefix(head: bytes) -> bool:
    return any(bom.startswith(head) and len(head) < len(bom) for bom, _ in _BOMS)


def decode_bytes(data: bytes | bytearray | memoryview | str) -> str:
    """Decode a whole file's bytes to ``str``; never raises.

    Encoding as in :func:`guess_encoding` (BOM, or BOM-less UTF-16); a BOM is stripped. Invalid
    bytes (or a UTF-16 file with an odd byte count) become U+FFFD. A ``str`` argument is returned without its
    leading U+FEFF, if any.
    """
    if isinstance(data, str):
        return data[1:] if data.startswith("\ufeff") else data
    data = bytes(data)
    name, n = guess_encoding(data)
    return data[n:].decode(name, errors="replace")


def split_text(text: str) -> list[str]:
    """Split decoded text into lines on LF / CRLF / CR, terminators stripped.

    A final terminator does not produce an empty last line; ``""`` gives ``[]``.
    """
    if not text:
        return []
    if "\r" in text:
        parts = _NEWLINE.split(text)
    else:
        parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def iter_lines(data: bytes | str) -> Iterator[tuple[int, str]]:
    """Yield ``(lineno, line)`` for a whole file, 1-based line numbers, terminators stripped.

    Same decoding and line-ending rules as :class:`LineSplitter`.
    """
    return enumerate(split_text(decode_bytes(data)), 1)


class LineSplitter:
    """Turn a stream of byte chunks (pipe reads, socket recv) into complete text lines.

    ``feed(chunk) -> list[str]`` returns the lines completed by this chunk, terminators
    stripped; ``flush() -> str | None`` returns the unterminated last line (None when there is
    none) at end of stream. The encoding is sniffed from the first bytes (BOM); a multi-byte
    UTF-8 or UTF-16 character split across chunks is joined; CRLF split across chunks is one
    terminator.

    ``max_line`` (characters, optional) bounds memory: a longer line is cut to ``max_line``
    characters, still returned, and a :class:`Problem` is appended to ``problems`` (the rest of
    that line is dropped while it streams in, so a runaway writer never exhausts memory).
    ``lines_out`` counts the lines returned so far (the 1-based number of the last one).
    """

    __slots__ = ("max_line", "problems", "lines_out", "_dec", "_head", "_buf", "_cr", "_dropped")

    def __init__(self, max_line: int | None = None) -> None:
        if max_line is not None and max_line < 1:
            raise ValueError("max_line must be >= 1")
        self.max_line = max_line
        self.problems: list[Problem] = []
        self.lines_out = 0
        self._dec: codecs.IncrementalDecoder | None = None
        self._head = b""
        self._buf = ""
        self._cr = False  # the last text ended with CR: a leading LF next is its CRLF partner
        self._dropped = 0  # characters dropped from the current (over-long) line

    def _decode(self, chunk: bytes, final: bool = False) -> str:
        if self._dec is None:
            head = self._head + bytes(chunk)
            if not final and _could_be_bom_prefix(head):
                self._head = head
                return ""
            self._head = b""
            name, n = sniff_encoding(head)
            self._dec = codecs.getincrementaldecoder(name)(errors="replace")
            return self._dec.decode(head[n:], final)
        return self._dec.decode(chunk, final)

    def _cut(self, line: str, lineno: int) -> str:
        over = len(line) - self.max_line + self._dropped  # type: ignore[operator]
        if over > 0:
            total = len(line) + self._dropped
            self.problems.append(
                Problem(lineno, line[:PROBLEM_TEXT_MAX],
                        f"line of {total} characters cut to max_line={self.max_line}")
            )
            line = line[: self.max_line]
        self._dropped = 0
        return line

    def _split(self, text: str) -> list[str]:
        if not text:
            return []
        if self._cr:
            self._cr = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        s = self._buf + text if self._buf else text
        if "\r" in s:
            if s[-1] == "\r":
                self._cr = True
                parts = _NEWLINE.split(s[:-1])
                parts.append("")
            else:
                parts = _NEWLINE.split(s)
        else:
            parts = s.split("\n")
        rest = parts.pop()
        if self.max_line is not None:
            for i, part in enumerate(parts):
                if len(part) > self.max_line or (i == 0 and self._dropped):
                    parts[i] = self._cut(part, self.lines_out + i + 1)
            if len(rest) > self.max_line:
                self._dropped += len(rest) - self.max_line
                rest = rest[: self.max_line]
        self._buf = rest
        self.lines_out += len(parts)
        return parts

    def feed(self, chunk: bytes) -> list[str]:
        """Decode ``chunk`` and return the lines it completes (possibly none)."""
        if not chunk:
            return []
        return self._split(self._decode(chunk))

    def flush(self) -> str | None:
        """End of stream: return the partial last line (no final newline), or None if the stream
        ended with a terminator. Resets the splitter for a new stream."""
        tail = self._decode(b"", final=True)
        lines = self._split(tail) if tail else []
        rest = self._buf
        if lines:  # cannot happen for valid decoders (a held BOM prefix has no newline); be safe
            rest = "\n".join(lines + ([rest] if rest else []))
        had_partial = bool(rest) or bool(self._dropped)
        if self.max_line is not None and had_partial:
            rest = self._cut(rest, self.lines_out + 1)
        self._buf = ""
        self._cr = False
        self._dropped = 0
        self._dec = None
        self._head = b""
        if not had_partial:
            return None
        self.lines_out += 1
        return rest
