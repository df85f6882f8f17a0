"""A view's frame key names its parts (version, cursor, the rest): a repaint that only new rows
asked for may wait for the view's ``min_interval``; anything the user moved repaints at once,
whatever a view adds to its key."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.widgets.base import FrameKey
from bmoe_top.tui.widgets.grids import ExpertMap


def _rows(run: RunModel, n: int) -> None:
    run.add_token_rows({"step": np.arange(run.tokens.n + 1, run.tokens.n + n + 1, dtype=float),
                        "wall_ms": np.full(n, 10.0), "cache_hit_pct": np.full(n, 50.0)}, n)


def test_frame_key_parts_are_named_and_extended_views_compare_their_own_state():
    a = FrameKey(3, 7, ("sel", 1.0))
    assert a.extended("fold").view == ("sel", 1.0, "fold") and a.extended("fold").cursor == 7
    assert FrameKey(4, 7, ("sel", 1.0)).only_data(a, following=False)  # rows added, nothing moved
    assert FrameKey(4, 8, ("sel", 1.0)).only_data(a, following=True)  # the cursor follows the newest row
    assert not FrameKey(4, 8, ("sel", 1.0)).only_data(a, following=False)  # the user moved it
    assert not FrameKey(3, 7, ("sel", 2.0)).only_data(a, following=True)  # the zoom changed
    assert not a.extended("fold").only_data(a.extended("flat"), following=True)


def test_a_map_following_live_waits_for_new_rows_but_not_for_its_own_state():
    run = RunModel()
    _rows(run, 20)
    pb = Playback(run, follow=True)
    pb.tick(0.0)
    emap = ExpertMap(run, pb)
    first = emap.frame_key()
    emap._polled = first
    _rows(run, 5)
    pb.tick(0.0)
    grown = emap.frame_key()
    assert grown.version != first.version and grown.cursor == first.cursor + 5
    assert emap._only_data_changed(grown)  # new rows while following: may wait
    emap.fold = not emap.fold
    assert not emap._only_data_changed(emap.frame_key())  # a key folded the map: at once
