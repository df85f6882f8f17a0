"""The files of one bmoe-cli ``--session`` run (CSV, stdout, request log) merge by request id into
one set of turns, whichever of them are given and in whatever order; a refused request is a
request without a turn; files that disagree are said (tests/helpers/cli_session.py writes the
files in the peer's own forms; the real ones in ../shared are read when present)."""

from __future__ import annotations

import itertools
from pathlib import Path

from helpers.cli_session import SessionRequest, SessionRun, cli_session, six_requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.tui.feed.files import MixedRunsError, open_paths
from bmoe_top.tui.model import RunModel, Turn, in_session_order
from bmoe_top.tui.present.turns import turn_list

KINDS = ("csv", "stdout", "requests")
NAMES = {"csv": "bmoe-session.csv", "stdout": "session.stdout", "requests": "session-requests.jsonl"}


def write(tmp: Path, run: SessionRun, kinds: tuple[str, ...]) -> list[str]:
    out = []
    for k in kinds:
        p = tmp / NAMES[k]
        p.write_bytes(getattr(run, k))
        out.append(str(p))
    return out


def entries(run: RunModel) -> list[dict]:
    """Each request of the run in order, as the model holds it."""
    out = []
    for e in in_session_order(run.turns, run.turnless):
        if isinstance(e, Turn):
            done = e.done or {}
            out.append({"id": e.id, "prompt": e.prompt, "turn": e.index,
                        "status": "cancelled" if e.cancelled else "done" if e.done is not None else "open",
                        "tokens": done.get("tokens"), "tok_s": done.get("tok_s"),
                        "cache_hit_pct": done.get("cache_hit_pct"), "reason": None})
        else:
            out.append({"id": e.id, "prompt": e.prompt, "turn": None, "status": e.status, "tokens": None,
                        "tok_s": None, "cache_hit_pct": None, "reason": e.reason or None})
    return out


def expected(run: SessionRun, kinds: set[str]) -> list[dict]:
    """What the files ``kinds`` of ``run`` can say of its requests: the stdout knows every request
    (ids, refusals, cancels); a CSV alone its generated turns only, and with a request log of as
    many requests their ids and prompts by order; the log alone (or beside a CSV of no turn) its
    requests, unanswered."""
    exp = [dict(e) for e in run.expected]
    refused = any(e["turn"] is None for e in exp)
    if "stdout" not in kinds:
        if "csv" not in kinds or ("requests" in kinds and all(e["turn"] is None for e in exp)):
            # a request log alone, or beside a CSV of no turn: nothing in the files answers them
            return [{**e, "turn": None, "status": "unanswered", "tokens": None, "tok_s": None,
                     "cache_hit_pct": None, "reason": None} for e in exp]
        exp = [e for e in exp if e["turn"] is not None]
        for e in exp:
            e["status"] = "done"  # the CSV has no cancel flag: its turn ended with a # summary
            if "requests" not in kinds or refused:
                e["id"] = e["prompt"] = None
        return exp
    if "requests" not in kinds:
        for e in exp:
            e["prompt"] = None
    return exp


def test_six_requests_one_refused_each_file_alone_and_every_combination_give_the_same_turns(tmp_path):
    run = cli_session(six_requests())
    for n in (1, 2, 3):
        for kinds in itertools.permutations(KINDS, n):
            model = open_paths(write(tmp_path, run, kinds))
            got = entries(model)
            assert got == expected(run, set(kinds)), kinds
            generated = 5 if {"csv", "stdout"} & set(kinds) else 0
            assert model.turn_count == generated, kinds  # never 11 (5 of the CSV + 6 BEGINs)
            csv_and_log = set(kinds) == {"csv", "requests"}
            assert bool(model.alerts) == csv_and_log, (kinds, model.alerts)
            if generated:  # every token row is labelled with its turn's number
                for t in model.turns:
                    end = t.first_token + int(t.done["tokens"])
                    assert set(model.tokens.view("turn", t.first_token, end).tolist()) <= {float(t.index)}
    full = open_paths(write(tmp_path, run, KINDS))
    (refused,) = full.turnless
    assert (refused.id, refused.status, refused.after) == (4, "rejected", 3)
    assert refused.reason == "prompt + n_predict exceeds the session n_ctx (4096); open the session with a larger n_ctx"
    assert full.turns[3].id == 5 and full.turns[3].text == "#5 w2 w3 w4 w5 w6 w7"  # the answer from the stdout


def test_a_log_and_a_csv_without_the_stdout_say_why_no_prompt_is_attached(tmp_path):
    run = cli_session(six_requests())
    model = open_paths(write(tmp_path, run, ("csv", "requests")))
    (alert,) = model.alerts
    assert "6 generate requests, the CSV 5 turns" in alert and "stdout" in alert
    assert all(t.prompt is None for t in model.turns)
    # without a refusal the counts agree and the order is the session's: ids and prompts attach
    whole = cli_session([SessionRequest(10 + i, f"q{i}", tokens=3) for i in range(3)])
    model = open_paths(write(tmp_path, whole, ("requests", "csv")))
    assert [(t.id, t.prompt) for t in model.turns] == [(10, "q0"), (11, "q1"), (12, "q2")] and not model.alerts


def test_a_csv_with_more_turns_than_the_stdout_has_generations_is_said(tmp_path):
    run = cli_session(six_requests())
    cut = run.stdout[: run.stdout.index(b'BMOE_BEGIN {"id":6}')]  # the stdout ends before request 6
    (tmp_path / "short.stdout").write_bytes(cut)
    (tmp_path / "s.csv").write_bytes(run.csv)
    model = open_paths([str(tmp_path / "s.csv"), str(tmp_path / "short.stdout")])
    assert model.turn_count == 5 and [t.id for t in model.turns] == [1, 2, 3, 5, None]
    (alert,) = model.alerts
    assert "the CSV has 5 turns, short.stdout 4 generated" in alert and "turn 5 has no request id" in alert
    # the other way round: the CSV of the same session ends a turn earlier than its stdout
    (tmp_path / "four.csv").write_bytes(cli_session(six_requests()[:5]).csv)  # same seed: turns 1-4 alike
    (tmp_path / "s.stdout").write_bytes(run.stdout)
    model = open_paths([str(tmp_path / "four.csv"), str(tmp_path / "s.stdout")])
    assert model.turn_count == 5 and model.turns[4].id == 6 and model.turns[4].done["tokens"] == 5
    (alert,) = model.alerts
    assert "s.stdout has 5 generated turns, the CSV 4: turn 5 has no token rows" in alert


def test_files_of_two_runs_of_the_same_requests_are_said(tmp_path):
    one, other = cli_session(six_requests(), seed=7), cli_session(six_requests(), seed=8)
    (tmp_path / "a.csv").write_bytes(one.csv)
    (tmp_path / "b.stdout").write_bytes(other.stdout)
    try:
        model = open_paths([str(tmp_path / "a.csv"), str(tmp_path / "b.stdout")])
    except MixedRunsError as e:  # the last turn's figures already differ: refused outright
        assert "different runs" in str(e)
        return
    (alert,) = model.alerts
    assert "session files disagree: turn 1 (id 1): tok_s" in alert and "different runs?" in alert


@st.composite
def sessions(draw) -> list[SessionRequest]:
    """Requests with ids that may repeat (bmoe-cli takes 0 for a request without one), each done,
    cancelled (after 0 or more tokens) or refused."""
    n = draw(st.integers(1, 7))
    out = []
    for i in range(n):
        rid = draw(st.integers(0, 4))
        outcome = draw(st.sampled_from(("done", "done", "cancelled", "rejected")))
        tokens = draw(st.integers(0 if outcome == "cancelled" else 1, 6))
        out.append(SessionRequest(rid, f"prompt {i} of id {rid}\nline two", tokens=tokens, outcome=outcome))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=sessions(), seed=st.integers(0, 2**16),
       kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3, unique=True))
def test_any_session_any_files_in_any_order_give_its_turns(tmp_path, reqs, seed, kinds):
    run = cli_session(reqs, seed=seed)
    model = open_paths(write(tmp_path, run, tuple(kinds)))
    want = expected(run, set(kinds))
    assert entries(model) == want
    assert model.turn_count == sum(e["turn"] is not None for e in want)
    # a disagreement is said only where the files cannot tell which request a turn answers
    unmatched = set(kinds) == {"csv", "requests"} and len(reqs) != model.turn_count > 0
    assert bool(model.alerts) == unmatched, model.alerts


def test_the_real_session_files_each_alone_and_together(real_runs):
    d = real_runs / "bigmoeonedge-2026-07-22"
    csv, log = str(d / "bmoe-20260722-142300.csv"), str(d / "session-requests.jsonl")
    alone = open_paths([csv])
    assert alone.turn_count == 1 and alone.turns[0].done["tokens"] == 1469 and not alone.turnless
    reqs = open_paths([log])
    assert not reqs.turns and len(reqs.turnless) == 15 and all(r.prompt for r in reqs.turnless)
    for paths in ([csv, log], [log, csv]):
        both = open_paths(paths)
        # one generated turn of 1,469 tokens and 15 requests: not the same session, and it is said
        assert both.turn_count == 1 and both.turns[0].prompt is None and not both.turnless
        (alert,) = both.alerts
        assert "15 generate requests, the CSV 1 turn: " in alert
        (turn,) = turn_list(both)  # the turn's own figures, from its # summary
        assert (turn["turn"], turn["id"], turn["tokens"], turn["tok_s"], turn["cache_hit_pct"]) == (
            1, None, 1469, 3.938, 77.2)
