"""The routing statistics of tools/convert_demo_model.py (the numbers in docs/demo-model.md)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import REPO

TOOL = REPO / "tools" / "convert_demo_model.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("convert_demo_model", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def trace(rows: list[list[list[int]]]) -> np.ndarray:
    return np.array(rows, dtype=np.int16)  # (tokens, layers, k)


def test_lru_hits_only_what_is_still_resident(tool) -> None:
    # one layer, top-1: A B A C A with 2 slots: A miss, B miss, A hit, C miss (evicts B), A hit
    t = trace([[[0]], [[1]], [[0]], [[2]], [[0]]])
    assert tool.lru_hit_rate(t, 2) == pytest.approx(2 / 5)
    # 1 slot: nothing repeats back to back
    assert tool.lru_hit_rate(t, 1) == 0.0
    # room for everything: only the 3 first touches miss
    assert tool.lru_hit_rate(t, 3) == pytest.approx(2 / 5)


def test_lru_keys_are_per_layer(tool) -> None:
    # expert 0 of layer 0 and expert 0 of layer 1 are different slices
    t = trace([[[0], [0]], [[0], [0]]])
    assert tool.lru_hit_rate(t, 2) == pytest.approx(2 / 4)
    assert tool.lru_hit_rate(t, 1) == 0.0  # the two slices keep evicting each other


def test_skew_uniform_and_concentrated(tool) -> None:
    n_expert = 10
    uniform = trace([[[e]] for e in range(n_expert)] * 3)
    row = tool.skew(uniform, n_expert)[0]
    assert row["entropy_vs_uniform"] == pytest.approx(1.0)
    assert row["top10pct_share"] == pytest.approx(0.1) and row["unused"] == 0
    hot = trace([[[0]]] * 9 + [[[1]]])
    row = tool.skew(hot, n_expert)[0]
    assert row["top10pct_share"] == pytest.approx(0.9) and row["max_share"] == pytest.approx(0.9)
    assert row["unused"] == 8 and row["entropy_vs_uniform"] < 0.2


def test_repeat_rate_counts_reuse_from_previous_token(tool) -> None:
    # top-2, one layer: {0,1} -> {1,2} -> {2,1}: 0 + 1 + 2 repeats of 6 routings
    t = trace([[[0, 1]], [[1, 2]], [[2, 1]]])
    assert tool.repeat_rate(t) == pytest.approx(3 / 6)
