"""A turn (one generation) and a problem entry (a line a source could not use), as the run model
keeps them. Both are read-only outside the model: the model's write API changes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from bmoe_top.parsers.bmoe_lines import TextBuffer

__all__ = ["TURNLESS_STATUSES", "ProblemEntry", "Turn", "TurnlessRequest", "in_session_order"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class Turn:
    """One generation (a session turn, a CSV ``turn``, an audit ``request``).

    ``index`` counts turns of the run from 0; ``id`` is the source's request id (None when it has
    none); ``first_token`` the token row of its first token; ``done`` its end record (``BMOE_DONE``
    fields, a CSV ``# summary`` as canonical keys, an audit request's numbers), None while it runs;
    ``text`` / ``reasoning`` the answer so far (O(1) to extend; :meth:`text_tail` reads the end
    without joining the whole text).
    """

    __slots__ = ("_index", "_id", "_prompt", "_first_token", "_done", "_cancelled", "_error", "_text",
                 "_reasoning")

    def __init__(self, index: int, *, id: int | None = None, prompt: str | None = None,  # noqa: A002
                 first_token: int = 0, done: Mapping[str, Any] | None = None) -> None:
        self._index = index
        self._id = id
        self._prompt = prompt
        self._first_token = first_token
        self._done: Mapping[str, Any] | None = None if done is None else MappingProxyType(dict(done))
        self._cancelled = False
        self._error: str | None = None
        self._text = TextBuffer()
        self._reasoning = TextBuffer()

    @property
    def index(self) -> int:
        return self._index

    @property
    def id(self) -> int | None:
        return self._id

    @property
    def prompt(self) -> str | None:
        return self._prompt

    @property
    def first_token(self) -> int:
        return self._first_token

    @property
    def done(self) -> Mapping[str, Any] | None:
        return self._done

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def text(self) -> str:
        return self._text.value

    @property
    def text_len(self) -> int:
        return len(self._text)

    def text_tail(self, n: int) -> str:
        return self._text.tail(n)

    def text_prefix(self, n: int) -> str:
        return self._text.prefix(n)

    @property
    def reasoning(self) -> str:
        return self._reasoning.value

    def __repr__(self) -> str:
        return (f"Turn(index={self._index}, id={self._id}, first_token={self._first_token}, "
                f"text_len={len(self._text)}, done={'yes' if self._done is not None else 'no'})")


#: What became of a request that generated no turn: ``rejected`` (``BMOE_ERROR`` with fatal false:
#: the runtime refused it before its first token and the session stays usable), ``failed`` (fatal
#: before its first token: the process ends), ``unanswered`` (a request log's request that no
#: response in the files answers).
TURNLESS_STATUSES = ("rejected", "failed", "unanswered")


@dataclass(frozen=True, slots=True)
class TurnlessRequest:
    """A session request that generated no turn (so no token, no turn number).

    ``id`` the request id (None when the source gives none); ``prompt`` as sent (None when no
    request log or recording gave it); ``status`` one of :data:`TURNLESS_STATUSES`; ``reason`` the
    runtime's message, one line safe to draw ("" for an unanswered request); ``after`` how many
    turns of the run came before it (its place among them).
    """

    id: int | None
    prompt: str | None
    status: str
    reason: str
    after: int


def in_session_order(turns: Sequence[Turn], turnless: Sequence[TurnlessRequest]) -> list[Turn | TurnlessRequest]:
    """Turns and turn-less requests in the order the session took them: a turn-less request
    before the turn numbered after it (:attr:`TurnlessRequest.after`); equal places keep their
    order."""
    rest = sorted(turnless, key=lambda r: r.after)
    out: list[Turn | TurnlessRequest] = []
    j = 0
    for t in turns:
        while j < len(rest) and rest[j].after <= t.index:
            out.append(rest[j])
            j += 1
        out.append(t)
    out.extend(rest[j:])
    return out


@dataclass(frozen=True, slots=True)
class ProblemEntry:
    """A line a source could not use: where (``source``, 1-based ``lineno``, 0 when not tied to a
    line), what (``text``, cut to 200 characters) and why (``reason``). Counted and shown, never
    fatal."""

    source: str
    lineno: int
    text: str
    reason: str
