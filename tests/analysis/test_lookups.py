"""Lookups from routing arrays: replay order, a row's repeated expert counted once, empty slots
and rows skipped, batch and token ids, and an id past the model refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bmoe_top.tui.analysis.lookups import from_routing


def _reference(dec: np.ndarray, n_expert: int) -> tuple[list[int], list[int], list[int]]:
    """Item, batch and token of every decode lookup, row by row in Python."""
    items, batches, tokens = [], [], []
    nb = nt = 0
    for t in range(dec.shape[0]):
        any_row = False
        for ly in range(dec.shape[1]):
            seen: list[int] = []
            for e in dec[t, ly].tolist():
                if e >= 0 and e not in seen:
                    seen.append(e)
            for e in seen:
                items.append(ly * n_expert + e)
                batches.append(nb)
                tokens.append(nt)
            if seen:
                nb += 1
                any_row = True
        nt += any_row
    return items, batches, tokens


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_from_routing_matches_a_row_by_row_reading(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    dec = rng.integers(-1, 6, size=(40, 5, 4)).astype(dtype)  # repeats and -1 slots in most rows
    dec[3] = -1  # a token without a lookup is no token
    dec[7, 2] = -1  # a row without a lookup is no batch
    lk = from_routing(dec, np.arange(1, 6) * 10, 6)
    items, batches, tokens = _reference(dec, 6)
    assert lk.item.tolist() == items and lk.batch.tolist() == batches and lk.token.tolist() == tokens
    assert lk.decode.all() and lk.n_decode_tokens == 39 and lk.n_batches == batches[-1] + 1


def test_from_routing_refuses_an_id_past_the_model() -> None:
    dec = np.zeros((3, 2, 2), dtype=np.int64)
    dec[2, 1, 1] = 9
    with pytest.raises(ValueError, match="expert id 9 >= n_expert 8"):
        from_routing(dec, [1, 1], 8)


def test_item_counts_count_every_lookup_and_refuse_an_item_past_the_model() -> None:
    rng = np.random.default_rng(3)
    dec = rng.integers(-1, 6, size=(40, 5, 4))
    lk = from_routing(dec, np.arange(1, 6) * 10, 6)
    half = dataclasses.replace(lk, decode=np.arange(lk.n) % 3 > 0)  # some prefill lookups
    dec_n, every = half.item_counts()
    assert every.tolist() == np.bincount(lk.item, minlength=30).tolist()
    assert dec_n.tolist() == np.bincount(lk.item[half.decode], minlength=30).tolist()
    bad = dataclasses.replace(lk, item=np.where(np.arange(lk.n) == 5, 30, lk.item))
    with pytest.raises(ValueError, match=r"an item id outside 0\.\.29"):
        bad.item_counts()
