"""The repaint clock alone (tui/screens/clock.py), on a made-up clock: the views every
``refresh_s`` while data streams and at every tick while something animates, new rows alone
repaint the answer's tail at most every FAST_S (the whole screen at once when it follows rows), any other
change repaints the title at the next tick, and a tick with nothing new does nothing."""

from __future__ import annotations

from dataclasses import replace

from bmoe_top.tui.screens.clock import FAST_S, ChangeKey, Repaint, RepaintClock, Scene

SCENE = Scene(selected=None, playing=False, follow=True, speed_index=5, per_col=1.0, fit=False, quiet_s=0,
              turn_by_turn=False, status_word="generating", look="look", size=(120, 40))


def key(version: int, cursor: int = 0, **scene: object) -> ChangeKey:
    return ChangeKey(version, cursor, replace(SCENE, **scene))  # type: ignore[arg-type]


def started(refresh_s: float = 1.0, **kw: bool) -> RepaintClock:
    clock = RepaintClock(refresh_s, now=0.0, **kw)
    clock.views_painted(0.0, key(1))  # the first paint, at mount
    return clock


def test_the_first_tick_paints_everything():
    clock = RepaintClock(1.0, now=100.0)
    assert clock.tick(100.0, key(1), animating=False) is Repaint.VIEWS


def test_nothing_new_is_no_work():
    clock = started()
    for t in (0.25, 0.5, 1.0, 5.0):
        assert clock.tick(t, key(1), animating=False) is Repaint.NOTHING


def test_new_rows_repaint_the_tail_in_the_fast_tier_and_the_views_every_refresh():
    clock = started(refresh_s=1.0)
    assert clock.tick(0.25, key(2, 1), animating=False) is Repaint.NOTHING  # younger than FAST_S: waits
    assert clock.tick(FAST_S, key(3, 2), animating=False) is Repaint.TAILS  # follows: the cursor moved too
    assert clock.tick(0.75, key(3, 2), animating=False) is Repaint.NOTHING
    assert clock.tick(1.0, key(4, 3), animating=False) is Repaint.VIEWS
    clock.views_painted(1.0, key(4, 3))
    assert clock.tick(1.25, key(4, 3), animating=False) is Repaint.NOTHING


def test_a_screen_that_follows_rows_repaints_its_views_with_each_row():
    """The title followed rows in the fast tier while the views waited for ``refresh_s``: the
    attach screens' title counted 16 intervals while the breakdown still drew 15."""
    clock = started(refresh_s=600.0, follows_rows=True)
    assert clock.tick(0.25, key(2, 1), animating=False) is Repaint.VIEWS
    clock.views_painted(0.25, key(2, 1))
    assert clock.tick(0.5, key(2, 1), animating=False) is Repaint.NOTHING
    assert clock.tick(0.75, key(3, 2), animating=False) is Repaint.VIEWS


def test_a_memory_reading_alone_repaints_the_run_panel_in_the_views_place():
    """Between turns a live child's memory is read every second: when nothing else is new since
    the views' last repaint, their repaint is the run panel's alone, on the views' schedule."""
    clock = started(refresh_s=1.0)
    mem = replace(key(1), memory=1)
    assert clock.tick(0.25, mem, animating=False) is Repaint.NOTHING  # younger than FAST_S
    assert clock.tick(0.5, mem, animating=False) is Repaint.TAILS
    assert clock.tick(0.75, mem, animating=False) is Repaint.NOTHING
    assert clock.tick(1.0, mem, animating=False) is Repaint.MEMORY
    clock.views_painted(1.0, mem)
    assert clock.tick(1.5, mem, animating=False) is Repaint.NOTHING
    # a reading and new rows since the last repaint: the whole repaint
    both = replace(key(2, 1), memory=2)
    assert clock.tick(1.75, both, animating=False) is Repaint.TAILS
    assert clock.tick(2.0, both, animating=False) is Repaint.VIEWS
    # a change that came and went, then a reading: only the reading is new
    clock.views_painted(2.0, both)
    assert clock.tick(2.5, replace(both, scene=replace(both.scene, size=(80, 24))), animating=False) is Repaint.FAST
    assert clock.tick(3.0, replace(both, memory=3), animating=False) is Repaint.MEMORY


def test_any_other_change_repaints_the_title_at_the_next_tick():
    clock = started()
    assert clock.tick(0.25, key(1, size=(80, 24)), animating=False) is Repaint.FAST
    assert clock.tick(0.3, key(1, size=(80, 24), status_word="ready"), animating=False) is Repaint.FAST
    # a cursor that moves while not following is the user's move, not new data
    still = started()
    assert still.tick(0.25, key(1, 7, follow=False), animating=False) is Repaint.FAST


def test_an_animation_repaints_the_views_at_every_tick_that_changed_something():
    clock = started(refresh_s=10.0)
    for i, t in enumerate((0.1, 0.2, 0.3), start=1):
        k = key(1, i, playing=True, follow=False)
        assert clock.tick(t, k, animating=True) is Repaint.VIEWS
        clock.views_painted(t, k)
    assert clock.tick(0.4, key(1, 3, playing=True, follow=False), animating=True) is Repaint.NOTHING


def test_the_change_key_names_what_changed():
    old = key(1, 4)
    assert key(2, 5).only_data(old)  # following: new rows move the cursor
    assert not key(2, 5, follow=False).only_data(key(1, 4, follow=False))
    assert not key(1, 4, per_col=2.0).only_data(old)


def test_elapsed_is_the_time_between_ticks():
    clock = RepaintClock(1.0, now=10.0)
    assert clock.elapsed(10.5) == 0.5 and clock.elapsed(10.75) == 0.25
