"""A growing text (a turn's answer or reasoning) whose append costs O(1) amortised.

``self.text += piece`` copies the whole text on every token (O(length) per token: 330 us a line
at 300 k tokens); :class:`TextBuffer` keeps the pieces and joins them only when the whole text is
read, caching the result until the next append. Reading the end (:meth:`tail`) never joins.
"""

from __future__ import annotations


class TextBuffer:
    """Pieces of text joined lazily. ``len()`` is O(1); :attr:`value` joins (once per change)."""

    __slots__ = ("_pieces", "_len")

    def __init__(self, text: str = "") -> None:
        self._pieces: list[str] = [text] if text else []
        self._len = len(text)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, piece: str) -> None:
        if piece:
            self._pieces.append(piece)
            self._len += len(piece)

    def set(self, text: str) -> None:
        """Replace the whole text."""
        self._pieces = [text] if text else []
        self._len = len(text)

    @property
    def value(self) -> str:
        """The whole text (joined once after each change, then cached as one piece)."""
        p = self._pieces
        if len(p) > 1:
            joined = "".join(p)
            self._pieces = [joined]
            return joined
        return p[0] if p else ""

    def tail(self, n: int) -> str:
        """The last ``n`` characters (at most), without joining the whole text."""
        if n <= 0:
            return ""
        out: list[str] = []
        size = 0
        for piece in reversed(self._pieces):
            out.append(piece)
            size += len(piece)
            if size >= n:
                break
        s = "".join(reversed(out))
        return s[-n:]

    def prefix(self, n: int) -> str:
        """The first ``n`` characters."""
        if n >= self._len:
            return self.value
        return self.value[: max(0, n)]
