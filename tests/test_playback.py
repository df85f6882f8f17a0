"""tui/playback.py: a view that plays on from an earlier token of a live run that still streams
catches up and follows live again, whatever the speed, and a batch of rows arriving at once does
not keep it behind. Simulated time: the ticks are called with their dt, no clock is read."""

from __future__ import annotations

import pytest

from bmoe_top.tui.model import LIVE, RunModel, Status
from bmoe_top.tui.playback import SPEEDS, Playback

BATCH_S = 0.25  # a live source hands its token lines over in batches of up to this
TOKEN_MS = 10.0


def stream(run: RunModel, t: float, rows: int) -> None:
    """``rows`` tokens of TOKEN_MS each, arriving together at time ``t`` (one batch)."""
    for _ in range(rows):
        run.add_token_row({"wall_ms": TOKEN_MS, "t": t})


@pytest.mark.parametrize("speed", [1.0, 2.0, 4.0])
def test_playing_on_from_a_seek_converges_on_a_streaming_run(speed):
    run = RunModel(LIVE)
    run.set_status(Status.GENERATING, "")
    per_batch = int(BATCH_S * 1000 / TOKEN_MS)  # the run streams at exactly 1x
    t = 0.0
    for _ in range(40):  # 10 s of run, 1,000 tokens
        t += BATCH_S
        stream(run, t, per_batch)
    pb = Playback(run, follow=True)
    pb.speed_index = SPEEDS.index(1.0)
    pb.tick(0.1)
    pb.seek(700)  # 300 tokens (3 s of run time) back
    pb.speed_index = SPEEDS.index(speed)
    pb.toggle()  # resume: play on from there
    assert pb.playing and not pb.follow
    seen, clock, next_batch = [], 0.0, BATCH_S
    while clock < 60.0 and not pb.follow:
        pb.tick(0.1)
        clock += 0.1
        if clock >= next_batch - 1e-9:
            stream(run, t + next_batch, per_batch)
            next_batch += BATCH_S
        seen.append(pb.behind)
    assert pb.follow, f"still {pb.behind} behind after 60 s: {seen[::10]}"
    # it closes the gap: each second it trails by less than the second before
    per_second = seen[::10]
    assert all(b < a for a, b in zip(per_second, per_second[1:])), per_second
    # and once live, it stays live as batches keep arriving
    for _ in range(20):
        stream(run, t, per_batch)
        pb.tick(0.1)
        assert pb.follow and pb.behind == 0


def test_a_finished_run_replays_at_its_pace_without_catching_up():
    run = RunModel()
    for i in range(100):  # recorded one after the other, 10 ms apart
        run.add_token_row({"wall_ms": TOKEN_MS, "t": i * TOKEN_MS / 1000})
    pb = Playback(run)
    pb.speed_index = SPEEDS.index(1.0)
    pb.seek(1)
    pb.toggle()
    pb.tick(0.5)  # 500 ms at 1x: 50 tokens of 10 ms, no more
    assert pb.playing and 50 <= pb.cursor <= 52


def test_slow_motion_played_on_from_a_seek_reaches_live_once_the_turn_ends():
    """Under 1x the view trails a run that streams (slow motion is what was asked), at most doubling
    its pace to close the gap, and follows live once the run stops streaming."""
    run = RunModel(LIVE)
    run.set_status(Status.GENERATING, "")
    stream(run, 0.0, 1000)
    pb = Playback(run, follow=True)
    pb.speed_index = SPEEDS.index(1.0)
    pb.tick(0.1)
    pb.seek(700)
    pb.speed_index = SPEEDS.index(0.5)
    pb.toggle()
    run.set_status(Status.READY, "")  # the turn ended: nothing more arrives
    for _ in range(100):  # 10 s: 3 s of run time behind, closed at up to twice 0.5x
        pb.tick(0.1)
        if pb.follow:
            break
    assert pb.follow and pb.behind == 0
