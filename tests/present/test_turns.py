"""The turns of a session as ``replay --summary`` prints them (a compact table) and as the summary
document lists them (``turn_list``): request by request, the refused one without a turn."""

from __future__ import annotations

import orjson
from helpers import synth
from helpers.cli_session import cli_session, six_requests

from bmoe_top.tui.cli import main
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.present.turns import TURN_COLUMNS, is_session, turn_list, turn_rows, turns_text


def test_replay_summary_prints_the_turns_of_a_session(tmp_path, capsys):
    run = cli_session(six_requests())
    paths = []
    for name, data in (("s.stdout", run.stdout), ("s.csv", run.csv), ("r.jsonl", run.requests)):
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    assert main(["replay", "--summary", *paths]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("token rows: 38  turns: 5") for line in out)
    head = next(i for i, line in enumerate(out) if line.split()[:3] == ["turn", "id", "tokens"])
    table = out[head:head + 7]
    assert table[0].split() == " ".join(TURN_COLUMNS).split()
    assert table[1].split()[:5] == ["1", "1", "9", "3.81", "59.5"] and table[1].endswith("How many are left?  done")
    refused = table[4].split()
    assert refused[:5] == ["-", "4", "-", "-", "-"]
    assert table[4].endswith("rejected: prompt + n_predict exceeds the session n_ctx (4096); open the session "
                             "with a larger n_ctx")
    assert table[5].split()[:2] == ["4", "5"]  # the turn after the refused request is turn 4, request 5
    # the columns line up: every row's status starts where the header's does
    at = table[0].index("status")
    assert all(row[at - 2:at] == "  " and row[at] != " " for row in table)


def test_a_one_shot_run_prints_no_table_and_lists_its_one_turn(tmp_path, capsys):
    (tmp_path / "one.csv").write_bytes(synth.token_csv(12))
    assert main(["replay", "--summary", str(tmp_path / "one.csv")]) == 0
    out = capsys.readouterr().out
    assert "turns: 1" in out and "status" not in out
    assert main(["replay", "--summary", "--json", str(tmp_path / "one.csv")]) == 0
    (entry,) = orjson.loads(capsys.readouterr().out)["turn_list"]
    assert entry == {"turn": 1, "id": None, "prompt": None, "tokens": 12, "tok_s": entry["tok_s"],
                     "cache_hit_pct": entry["cache_hit_pct"], "status": "done", "reason": None}
    assert entry["tok_s"] > 0 and not is_session([entry])


def test_a_turn_without_its_end_takes_its_rows_and_says_so():
    run = RunModel()
    run.set_status(Status.GENERATING)
    run.begin_turn(id=3, prompt="tell me\nabout experts")
    for wall, hit in ((100.0, 10.0), (300.0, 20.0)):
        run.add_token_row({"wall_ms": wall, "cache_hit_pct": hit})
    (e,) = turn_list(run)
    assert (e["tokens"], e["tok_s"], e["cache_hit_pct"], e["status"]) == (2, 5.0, 20.0, "running")
    run.set_status(Status.REPLAY)
    assert turn_list(run)[0]["status"] == "no end record"
    run.add_turnless(4, None, "unanswered")
    rows = turn_rows(turn_list(run), prompt_width=20)
    assert rows == [("1", "3", "2", "5.00", "20.0", "tell...bout experts", "no end record"),
                    ("-", "4", "-", "-", "-", "missing", "unanswered")]


def test_a_long_prompt_keeps_its_start_and_its_end():
    prompt = "Solve this grade-school math problem. " * 3 + "Problem: Janet's ducks lay 16 eggs per day."
    (row,) = turn_rows([{"turn": 1, "id": 0, "prompt": prompt, "tokens": 1, "tok_s": 1.0, "cache_hit_pct": -1,
                         "status": "done", "reason": None}], prompt_width=40)
    assert len(row[5]) <= 40 and row[5].startswith("Solve this") and row[5].endswith("lay 16 eggs per day.")
    assert "..." in row[5] and row[4] == "no cache"
    assert turns_text([])[0].split() == " ".join(TURN_COLUMNS).split()
