"""What the layer x expert map says its counts cover (tui/widgets/grids.py ``as_of_words``) when the
viewed row is older than the routing a bounded run still holds: a seek back in a long live
session drew a map "as of token 0" under a title at token 100."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.model.routes import RouteStore
from bmoe_top.tui.widgets.grids import as_of_words

L, E, K = 4, 12, 2


def store(n_tok: int, window: int) -> RouteStore:
    rs = RouteStore(window_tokens=window)
    rs._cap = 64  # small storage: the window evicts often, leaving checkpoints behind
    for name in ("_tok", "_layer", "_expert", "_hit", "_tier", "_cummax"):
        setattr(rs, name, getattr(rs, name)[:64].copy())
    rng = np.random.default_rng(7)
    for t in range(n_tok):
        rs.extend(np.full(L * K, t), np.repeat(np.arange(L), K), rng.integers(0, E, L * K),
                  rng.integers(0, 2, L * K), None)
    return rs


def test_the_viewed_row_held_is_named_as_the_title_names_it():
    assert as_of_words("token", None, 100)[0] == "as of token 100"


def test_a_checkpoint_is_named_by_the_last_token_it_counts():
    rs = store(300, window=20)
    got = rs.expert_counts(L, E, 150)
    assert got.as_of is not None and 0 < got.as_of <= 150
    # the counts are those of tokens 1..as_of (rows of tokens before index as_of): the routed total
    assert int(got.routed.sum()) == got.as_of * L * K
    assert as_of_words("token", got.as_of, 150)[0] == f"as of token {got.as_of:,}: later routing not held"


def test_no_routing_held_that_far_back_says_so():
    rs = store(300, window=20)
    got = rs.expert_counts(L, E, 5)  # before the first checkpoint: nothing counted
    assert got.as_of == -1 and int(got.routed.sum()) == 0
    assert as_of_words("token", got.as_of, 5)[0] == "routing of token 5 not held"
    assert as_of_words("token", -1, 100) == ["routing of token 100 not held", "routing not held", "not held"]
