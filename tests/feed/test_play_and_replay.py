"""One recording, two paths: ``bmoe-top replay FILE`` (every line at once, through the file feed) and
``bmoe-top play FILE`` (at its pace, through the live source and ``bind``) show the same prompts,
turns and numbers. ``play`` used to drop every recorded prompt."""

from __future__ import annotations

import math

from helpers import synth

from bmoe_top.parsers.recording import parse_recording
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.model import KEEP_ALL, RunModel
from bmoe_top.tui.present.summary import run_summary
from bmoe_top.tui.sources.events import LiveState
from bmoe_top.tui.sources.replay import RecordingSource

#: Keys that name how the run was read, not what it holds.
HOW = ("status", "status_detail", "sources")


def played(data: bytes, turn_by_turn: bool = False) -> RunModel:
    src = RecordingSource(parse_recording(data), speed=math.inf, turn_by_turn=turn_by_turn)
    run = bind(src, RunModel(KEEP_ALL)).run
    src.start()
    while turn_by_turn and not src.wait_state(LiveState.EXITED, 0.2):
        src.next_turn()  # release each turn pause until the end
    assert src.wait_state(LiveState.EXITED, 30), src.status()
    src.close()
    return run


def test_play_and_replay_show_the_same_prompts_turns_and_numbers(tmp_path):
    data = synth.session_recording(turns=4, n=12)
    p = tmp_path / "four-turns.rec.jsonl"
    p.write_bytes(data)
    replay = open_paths([str(p)])
    for turn_by_turn in (False, True):
        play = played(data, turn_by_turn)
        assert [t.prompt for t in play.turns] == [t.prompt for t in replay.turns] == [
            "question 0", "question 1", "question 2", "question 3"]
        assert [dict(t.done or {}) for t in play.turns] == [dict(t.done or {}) for t in replay.turns]
        assert [t.text for t in play.turns] == [t.text for t in replay.turns]
        assert [t.first_token for t in play.turns] == [t.first_token for t in replay.turns] == [0, 12, 24, 36]
        assert len(play.requests) == len(replay.requests) == 4
        for name in ("step", "turn", "t", "wall_ms", "io_ms", "read_mib", "cache_hit_pct", "text_end"):
            assert play.tokens.view(name).tolist() == replay.tokens.view(name).tolist(), name
        a = {k: v for k, v in run_summary(play).items() if k not in HOW}
        b = {k: v for k, v in run_summary(replay).items() if k not in HOW}
        assert a == b
        assert play.status == "done" and replay.status == "replay"
