"""Chunked line reading for live sources (child pipes, sockets).

A live source reads raw chunks with ``os.read``/``recv`` and must split lines itself: a
single line of several megabytes must not kill the reader, and a line with no terminator
at EOF must still be delivered (and reported as truncated by the caller).

``new_splitter()`` returns helper P's ``bmoe_top.parsers.textio.LineSplitter`` when it is
installed, otherwise the small fallback below with the same ``feed``/``flush`` API.
No Textual import here.
"""

from __future__ import annotations

#: Longest line kept whole (bytes). A longer line is cut at this size and the rest up to
#: the next newline is dropped (the cut is counted in ``ChunkSplitter.cut_lines``).
MAX_LINE_BYTES = 16 * 1024 * 1024


class ChunkSplitter:
    """Split a byte stream into text lines: ``feed(chunk) -> list[str]``, ``flush() -> str | None``.

    Terminators LF and CRLF are stripped (a CR split from its LF across chunks is handled).
    Invalid UTF-8 is replaced with U+FFFD, never raised. Lines longer than ``max_line`` bytes
    are cut: the first ``max_line`` bytes are delivered, the remainder is skipped and
    ``cut_lines`` counts it.
    """

    __slots__ = ("_buf", "_skipping", "max_line", "cut_lines")

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._skipping = False
        self.max_line = max_line
        self.cut_lines = 0

    def feed(self, chunk: bytes) -> list[str]:
        out: list[str] = []
        if not chunk:
            return out
        start = 0
        n = len(chunk)
        while start < n:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not self._skipping:
                    self._buf += chunk[start:]
                    if len(self._buf) > self.max_line:
                        out.append(_decode(bytes(self._buf[: self.max_line])))
                        self._buf.clear()
                        self._skipping = True
                        self.cut_lines += 1
                break
            if self._skipping:
                self._skipping = False
            else:
                if self._buf:
                    self._buf += chunk[start:nl]
                    piece = bytes(self._buf)
                    self._buf.clear()
                else:
                    piece = chunk[start:nl]
                if len(piece) > self.max_line:
                    piece = piece[: self.max_line]
                    self.cut_lines += 1
                if piece.endswith(b"\r"):
                    piece = piece[:-1]
                out.append(_decode(piece))
            start = nl + 1
        return out

    def flush(self) -> str | None:
        """The partial last line (no final newline), or None when the stream ended cleanly."""
        if self._skipping or not self._buf:
            self._buf.clear()
            self._skipping = False
            return None
        piece = bytes(self._buf)
        self._buf.clear()
        if piece.endswith(b"\r"):
            piece = piece[:-1]
        return _decode(piece)


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def new_splitter(max_line: int = MAX_LINE_BYTES):
    """A line splitter for one stream: helper P's ``textio.LineSplitter`` when available.

    Returns an object with ``feed(chunk: bytes) -> list[str]`` and ``flush() -> str | None``.
    """
    try:
        from bmoe_top.parsers.textio import LineSplitter
    except Exception:  # noqa: BLE001 - parsers not installed yet: use the fallback
        return ChunkSplitter(max_line)
    try:
        return LineSplitter(max_line=max_line)
    except TypeError:
        return LineSplitter()
