"""The files of one session run -> one set of turns (docs/user-guide.md "Replay of a session").

A ``--session`` run of bmoe-cli leaves up to three files, and each knows part of every turn:

* the CSV sink: token rows labelled ``turn``, the 0-based count of *generated* turns, and one
  ``# summary`` per finished generation; no request id, no prompt
  (:func:`~bmoe_top.parsers.token_csv.generated_turns`);
* the stdout transcript: ``BMOE_BEGIN {"id"}`` for every request the session took, in order, then
  its tokens and ``BMOE_DONE``, or ``BMOE_ERROR`` when it refused the request before its first
  token (which then generated no turn and did not move the CSV's counter);
* the request log (the JSONL sent on stdin): ``generate`` requests with their ids and prompts, in
  the order the session takes them (one queue: the order of the ``BMOE_BEGIN`` lines).

So the CSV's turn ``k`` is the stdout's ``k``-th generation that was not refused
(:func:`merge_transcript`), and each turn and refused request is the next request of the log
with its id (:func:`attach_requests`; ids may repeat: bmoe-cli takes 0 for a request without
one). A disagreement (a CSV with more turns than the stdout generated, a turn with other token
counts, a request id the log does not hold, a log and a CSV of different counts with no stdout
to say which request was refused) is an alert on the run, never merged silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bmoe_top.parsers.transcript import Transcript
from bmoe_top.tui.feed.records import DONE_FIELDS
from bmoe_top.tui.model import RunModel, Turn, TurnlessRequest, in_session_order

__all__ = ["attach_requests", "merge_transcript"]


def _many(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural but for one: "1 turn", "15 generate requests"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _refused(g: Mapping[str, Any]) -> bool:
    """A generation the session refused before its first token (an error, no token, no end)."""
    return g["error"] is not None and not g["tokens"] and g["done"] is None


#: A turn's end-of-turn figures both files print from the same number, and the digits the coarser
#: of them prints (bmoe-cli: ``%.3f`` tok/s, ``%.1f`` hit %; bmoe-run: 3 and 2).
_SAME_FIGURES = (("tokens", 0), ("tok_s", 3), ("cache_hit_pct", 1))


def _turn_differs(rows: int, csv_done: Mapping[str, Any] | None, g: Mapping[str, Any], name: str) -> str | None:
    """Why the CSV's turn (``rows`` token rows, its ``# summary``) and the stdout's generation ``g``
    cannot be one turn, None when they can: another token count, or another end-of-turn figure
    beyond the digits both print."""
    if rows != g["tokens"]:
        return f"{rows:,} token rows in the CSV, {g['tokens']:,} BMOE_PROGRESS lines in {name}"
    done = g["done"]
    if csv_done is None or done is None:
        return None
    for key, digits in _SAME_FIGURES:
        a, b = csv_done.get(key), getattr(done, key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) > 0.5 * 10.0 ** -digits + 1e-9:
            return f"{key} {a:g} in the CSV's # summary, {b:g} in {name}'s BMOE_DONE"
    return None


def merge_transcript(run: RunModel, tr: Transcript, source: str) -> None:
    """A session's stdout into the turns a CSV of the same run opened (every turn the run has when
    it is called, in order): the ``k``-th generation that was not refused is turn ``k`` and gives
    it its request id, answer, reasoning and ``BMOE_DONE`` fields (the CSV's ``# summary`` keys
    win where both have one); a refused request becomes turn-less (``rejected`` or ``failed``, its
    reason, its place); a generation past the CSV's turns opens a turn without token rows. Token
    counts that differ, and turns only one file has, are an alert."""
    with run.lock:
        turns = list(run.turns)
        ends = [t.first_token for t in turns[1:]] + [run.tokens.n]
        name = os.path.basename(source) or source
        k = 0
        differs: list[str] = []
        for g in tr.generations:
            err = g["error"]
            if _refused(g):
                run.add_turnless(g["id"], None, "failed" if err.fatal else "rejected", err.msg or "(no message)",
                                 after=turns[k].index if k < len(turns) else run.turn_count)
                continue
            turn = turns[k] if k < len(turns) else run.begin_turn(first_token=run.tokens.n)
            csv_done = turn.done
            run.set_turn_request(turn, g["id"], None)
            if g["answer"] or g["reasoning"]:
                run.set_answer(g["answer"], g["reasoning"], turn=turn)
            done = g["done"]
            if done is not None:
                fields: dict[str, Any] = {f: getattr(done, f) for f in DONE_FIELDS}
                fields.update(done.extra)
                run.finish_turn({**fields, **(turn.done or {})}, cancelled=bool(done.cancelled), turn=turn)
            if err is not None:
                run.set_turn_error(g["id"], err.msg or "(no message)", turn=turn)
            if k < len(turns):
                why = _turn_differs(ends[k] - turn.first_token, csv_done, g, name)
                if why is not None:
                    differs.append(f"turn {turn.index + 1} (id {g['id']}): {why}")
            k += 1
        if k != len(turns) and tr.generations:  # a log without BMOE records says nothing of turns
            more = (f"the CSV has {_many(len(turns), 'turn')}, {name} {k:,} generated (BMOE_BEGIN not refused): "
                    f"turn {k + 1}{f'-{len(turns)}' if len(turns) > k + 1 else ''} has no request id"
                    if len(turns) > k else
                    f"{name} has {_many(k, 'generated turn')}, the CSV {len(turns):,}: turn {len(turns) + 1}"
                    f"{f'-{k}' if k > len(turns) + 1 else ''} has no token rows")
            differs.insert(0, more)
        if differs:
            extra = f" and {len(differs) - 1} more" if len(differs) > 1 else ""
            run.add_alert(f"session files disagree: {differs[0]}{extra}; turns matched by order (files of "
                          "different runs?)")


def _prompt(req: Mapping[str, Any]) -> str | None:
    p = req.get("prompt")
    return p if isinstance(p, str) else None


def attach_requests(run: RunModel) -> None:
    """The requests a request log (or a recording) noted, matched to the turns and turn-less
    requests of the run, once every file is loaded: each of those with an id takes the next
    ``generate`` request with that id, in order, and its prompt; a request nothing answered is
    turn-less ``unanswered``. Turns without ids (a CSV and no stdout) take the requests in order
    when there are as many of each; otherwise nothing is matched and an alert says why."""
    with run.lock:
        reqs = [r for r in run.requests if r.get("cmd") == "generate"]
        if not reqs:
            return
        turns, turnless = list(run.turns), list(run.turnless)
        where = {id(r): i for i, r in enumerate(turnless)}
        entries = in_session_order(turns, turnless)
        if entries and all(e.id is None for e in entries):
            if len(reqs) == len(turns) and not turnless:
                for t, r in zip(turns, reqs):
                    run.set_turn_request(t, r.get("id"), _prompt(r))
            else:
                run.add_alert(f"the request log has {_many(len(reqs), 'generate request')}, the CSV "
                              f"{_many(len(turns), 'turn')}: "
                              "which turn answers which request needs the session's stdout (BMOE_BEGIN ids; a "
                              "refused request has no turn), so no prompt is attached")
            return
        matched: dict[int, Turn | TurnlessRequest] = {}
        missing: list[Any] = []
        nxt = 0
        for e in entries:
            if e.id is None:
                continue
            i = next((i for i in range(nxt, len(reqs)) if reqs[i].get("id") == e.id), None)
            if i is None:
                missing.append(e.id)
                continue
            matched[i], nxt = e, i + 1
            prompt = _prompt(reqs[i])
            if prompt is None:
                continue
            if isinstance(e, Turn):
                run.set_turn_request(e, e.id, prompt)
            else:
                run.set_turnless_prompt(where[id(e)], prompt)
        turns_before = 0
        for i, r in enumerate(reqs):
            answered = matched.get(i)
            if answered is None:
                run.add_turnless(r.get("id"), _prompt(r), "unanswered", after=turns_before)
            elif isinstance(answered, Turn):
                turns_before = answered.index + 1
        if missing:
            shown = ", ".join(str(x) for x in missing[:5]) + (" ..." if len(missing) > 5 else "")
            run.add_alert(f"{len(missing):,} request id{'s' if len(missing) > 1 else ''} of the stdout not in the "
                          f"request log in that order ({shown}): no prompt for {'them' if len(missing) > 1 else 'it'}")
