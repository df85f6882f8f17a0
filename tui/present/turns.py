"""A run's turns, request by request, as plain data: the ``turn_list`` of the summary document
(``replay --summary --json``), the compact table ``replay --summary`` prints, and the rows of
the replay screen's Turns tab (docs/user-guide.md "Replay of a session").

One entry per request the session took, in order: each turn (numbered from 1) and each request
that generated no turn (refused, failed before its first token, or unanswered: no turn number).
A turn's ``tokens``, ``tok_s`` and ``cache_hit_pct`` are its end record's (``BMOE_DONE`` or the
CSV's ``# summary`` of that turn: bmoe-cli's tok/s is the turn's tokens over its decode time,
its hit % the cache's since load); a turn without one (still running, or a file that ends inside
it) takes what its token rows give (their count, 1000 / mean ``wall_ms``, the newest row's hit %).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from bmoe_top.tui.model import RunModel, Turn, in_session_order
from bmoe_top.tui.present.numbers import MISSING, count, fmt, num, sig, whole
from bmoe_top.tui.present.tables import Column

__all__ = ["TURN_COLUMNS", "TURN_TABLE", "TurnEntry", "is_session", "turn_list", "turn_rows", "turns_text"]


class TurnEntry(TypedDict):
    """One request of the session: ``turn`` its 1-based turn number (None: it generated no turn),
    ``id`` the request id (None: no file said it), ``prompt`` as sent (None: no request log or
    recording gave it), ``tokens`` generated, ``tok_s`` tokens per second of the turn, ``cache_hit_pct``
    (-1: no cache), ``status`` (``done``, ``cancelled``, ``failed``, ``running``, ``no end record``,
    ``rejected``, ``unanswered``), ``reason`` the runtime's message for a failed or refused one."""

    turn: int | None
    id: int | None
    prompt: str | None
    tokens: int | float | None
    tok_s: float | None
    cache_hit_pct: float | None
    status: str
    reason: str | None


def _from_rows(run: RunModel, lo: int, hi: int) -> tuple[int, float | None, float | None]:
    """Token rows ``lo:hi`` of a turn: their count, tok/s (1000 / mean wall), the newest hit %."""
    n = max(0, hi - lo)
    if not n:
        return 0, None, None
    wall = run.column_stats("wall_ms", lo, hi)
    mean = num(wall.mean) if wall.count else None
    hit = num(run.tokens.view("cache_hit_pct", hi - 1, hi)[0]) if hi - 1 >= run.tokens.start else None
    return n, (1000.0 / mean if mean else None), hit


def _turn_entry(run: RunModel, t: Turn, end: int) -> TurnEntry:
    done = t.done
    rows, rate, hit = _from_rows(run, t.first_token, end)
    if t.error is not None:
        status = "failed"
    elif done is not None:
        status = "cancelled" if t.cancelled else "done"
    else:
        status = "running" if run.status.live else "no end record"
    said = done or {}
    tokens, tok_s, hit_pct = num(said.get("tokens")), num(said.get("tok_s")), num(said.get("cache_hit_pct"))
    return {"turn": t.index + 1, "id": t.id, "prompt": t.prompt,
            "tokens": whole(tokens if tokens is not None else rows if done is None else None),
            "tok_s": tok_s if done is not None else rate,
            "cache_hit_pct": hit_pct if done is not None else hit,
            "status": status, "reason": t.error}


def turn_list(run: RunModel) -> list[TurnEntry]:
    """Every request of the run in order (:class:`TurnEntry`): its turns and the requests that
    generated none. A run without session requests has its turns alone (a one-shot run: one)."""
    with run.lock:
        turns = list(run.turns)
        ends = [t.first_token for t in turns[1:]] + [run.tokens.n]
        end_of = {id(t): e for t, e in zip(turns, ends)}
        out: list[TurnEntry] = []
        for e in in_session_order(turns, run.turnless):
            if isinstance(e, Turn):
                out.append(_turn_entry(run, e, end_of[id(e)]))
            else:
                out.append({"turn": None, "id": e.id, "prompt": e.prompt, "tokens": None, "tok_s": None,
                            "cache_hit_pct": None, "status": e.status, "reason": e.reason or None})
        return out


def is_session(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the entries are a session's (worth a table): more than one, or one with a request
    id, a prompt or no turn."""
    return len(entries) > 1 or any(e["id"] is not None or e["prompt"] or e["turn"] is None for e in entries)


#: The Turns table's columns (the text table's too): the status last, as it may hold a reason.
TURN_COLUMNS = ("turn", "id", "tokens", "tok/s", "hit %", "prompt", "status")

#: The replay screen's Turns tab: :data:`TURN_COLUMNS` as table columns; on a narrow screen the
#: request id goes first, then the prompt (the status, with its reason, stays).
TURN_TABLE = (Column("turn", "turn"), Column("id", "id", drop=2), Column("tokens", "tokens", short="tok"),
              Column("tok_s", "tok/s"), Column("hit", "hit %"), Column("prompt", "prompt", numeric=False, drop=1),
              Column("status", "status", numeric=False))


def _one_line(text: str | None, width: int) -> str:
    """A prompt on one line in ``width`` characters: its start and its end around ``...`` when it
    is longer (prompts of one benchmark share their instructions and differ at the end)."""
    if not text:
        return MISSING
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    head = max(1, (width - 3) // 3)
    return flat[:head].rstrip() + "..." + flat[len(flat) - (width - 3 - head):].lstrip()


def turn_rows(entries: Sequence[Mapping[str, Any]], prompt_width: int = 60) -> list[tuple[str, ...]]:
    """One row of :data:`TURN_COLUMNS` per entry: ``-`` for what a request without a turn cannot
    have, the prompt on one line in ``prompt_width`` characters (its start and end), the status with the
    runtime's reason when there is one."""
    rows: list[tuple[str, ...]] = []
    for e in entries:
        hit = e["cache_hit_pct"]
        turnless = e["turn"] is None
        rows.append((
            "-" if turnless else str(e["turn"]),
            "-" if e["id"] is None else str(e["id"]),
            "-" if turnless else count(e["tokens"]),
            "-" if turnless else sig(e["tok_s"], 3),
            "-" if turnless else "no cache" if hit is not None and hit < 0 else fmt(hit, 1),
            _one_line(e["prompt"], prompt_width),
            str(e["status"]) + (f": {e['reason']}" if e["reason"] else ""),
        ))
    return rows


def turns_text(entries: Sequence[Mapping[str, Any]], prompt_width: int = 60) -> list[str]:
    """``replay --summary``'s turns table: a header and one line per entry, columns aligned
    (numbers to the right)."""
    rows = [TURN_COLUMNS, *turn_rows(entries, prompt_width)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TURN_COLUMNS) - 1)]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i < 5 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append(("  " + "  ".join(cells) + "  " + r[-1]).rstrip())
    return out
