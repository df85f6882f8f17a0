"""Plain mmap's page cache replayed over a trace (tui/analysis/pagecache.py): reads counted by hand
on small layouts, the two eviction rules on a cyclic scan, readahead windows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.mmap_reference import replay_mmap_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.gguf_layout import ExpertTensorInfo, ModelLayout
from bmoe_top.tui.analysis.lookups import from_routing
from bmoe_top.tui.analysis.pagecache import CHUNK, expert_pieces, layout_pieces, replay_mmap, window_bytes

C = CHUNK


def layout(n_layer: int, n_expert: int, slice_chunks: int = 1, tensors: int = 1, gap_chunks: int = 0):
    """Expert tensors packed one after another (``gap_chunks`` of dense weights before each):
    every expert slice ``slice_chunks`` whole chunks."""
    offs, at = [], 0
    for _ in range(n_layer):
        layer = []
        for _ in range(tensors):
            at += gap_chunks * C
            layer.append((at, slice_chunks * C, n_expert))
            at += n_expert * slice_chunks * C
        offs.append(layer)
    return expert_pieces(offs, n_expert)


def trace(decode: list[list[list[int]]], n_expert: int, n_layer: int):
    return from_routing(np.array(decode), np.full(n_layer, C), n_expert)


def test_pieces_follow_each_tensor_slice_in_order():
    p = expert_pieces([[(1000, 10, 4), (5000, 20, 4)]], 4)
    assert p[2] == [(1020, 10), (5040, 20)]
    assert len(p) == 4


def test_layout_pieces_in_compute_order():
    def t(kind: str, off: int) -> ExpertTensorInfo:
        return ExpertTensorInfo(f"blk.1.ffn_{kind}_exps.weight", 1, kind, off, 4 * 100, 4, 100, 0, (1, 1, 4))

    lay = ModelLayout(Path("m.gguf"), "qwen3moe", 2, 4, 2, 512, 10_000,
                      layers=[[], [t("down", 1000), t("gate", 2000), t("up", 3000)]])
    p = layout_pieces(lay)
    assert len(p) == 8 and p[0] == []
    # up, gate, down, as llama.cpp computes them
    assert p[4 + 3] == [(3300, 100), (2300, 100), (1300, 100)]
    # a second shard's tensor lies after the first shard's bytes
    split = ModelLayout(Path("m.gguf"), "qwen3moe", 1, 4, 2, 512, 10_000, shard_sizes=[5000, 5000],
                        layers=[[replace(t("up", 100), shard=1)]])
    assert layout_pieces(split)[1] == [(5200, 100)]


def test_whole_file_fits_nothing_is_read_after_the_load():
    pieces = layout(2, 4)
    lk = trace([[[0], [1]], [[2], [3]], [[1], [0]]], 4, 2)
    r = replay_mmap(lk, pieces, 8 * C, C)
    assert (r.read_bytes, r.faults, r.decode_tokens) == (0, 0, 3)


def test_no_room_every_touch_reads_its_window():
    # one layer of 8 one-chunk experts; a window of 4 chunks centred on the fault: chunks c-2 .. c+1
    pieces = layout(1, 8)
    lk = trace([[[4]], [[0]], [[7]]], 8, 1)
    r = replay_mmap(lk, pieces, 0, 4 * C, async_readahead=False)
    # expert 4: chunks 2..5 (4 read); expert 0: 0..3 (4); expert 7: 5..8, chunk 8 is not an expert (3)
    assert r.faults == 3
    assert r.read_bytes == (4 + 4 + 3) * C


def test_a_file_advised_sequential_reads_windows_twice_the_readahead():
    # llama.cpp advises its model POSIX_FADV_SEQUENTIAL: the file's readahead, and so every window, doubles
    pieces = layout(1, 16)
    lk = trace([[[8]]], 16, 1)
    plain = replay_mmap(lk, pieces, 0, 2 * C, async_readahead=False)
    advised = replay_mmap(lk, pieces, 0, 2 * C, async_readahead=False, sequential=True)
    # 2 chunks centred on 8: 7..8; advised, 4 chunks: 6..9
    assert (plain.read_bytes, advised.read_bytes) == (2 * C, 4 * C)
    assert window_bytes(2 * C, True) == 4 * C and window_bytes(2 * C, False) == 2 * C


def test_a_window_skips_chunks_it_holds():
    pieces = layout(1, 8)
    # the load fills 2 chunks of room with the file's first chunks, then evicts them for later ones: 6 and 7 stay
    lk = trace([[[5]]], 8, 1)
    r = replay_mmap(lk, pieces, 2 * C, 4 * C, async_readahead=False)
    # window of expert 5: chunks 3..6; 6 is held, so 3, 4, 5 are read
    assert r.read_bytes == 3 * C


def test_cyclic_scan_lru_reads_all_two_lists_keep_part():
    # 4 layers x 8 half-chunk experts (two to a chunk), every token every expert of every layer: a cyclic
    # scan of 16 chunks in 12 of room, each chunk touched twice in a row
    offs = [[(layer * 4 * C, C // 2, 8)] for layer in range(4)]
    pieces = expert_pieces(offs, 8)
    lk = from_routing(np.array([[list(range(8))] * 4 for _ in range(10)]), np.full(4, C // 2), 8)
    lru = replay_mmap(lk, pieces, 12 * C, C, policy="lru", async_readahead=False)
    two = replay_mmap(lk, pieces, 12 * C, C, policy="two_list", async_readahead=False)
    assert lru.read_per_token == 16 * C
    # the active list (6 chunks) holds its chunks through the scan: at most 10 of 16 are read a token
    assert 0 < two.read_per_token <= 10 * C


def test_touching_a_windows_mark_reads_the_next_window():
    # one layer of 16 one-chunk experts, room for all but what the load left out; a window of 4 chunks
    pieces = layout(1, 16)
    lk = trace([[[1]], [[2]], [[3]]], 16, 1)
    # no room: expert 1 faults, its window 0..3 (centred: 1 - 2 < 0 starts at 0) is read, and marks
    # chunk 3 (a quarter of the window from its end); with no room nothing stays, every touch faults
    assert replay_mmap(lk, pieces, 0, 4 * C).read_bytes == 3 * 4 * C
    # room for everything but not loaded: start from an empty cache by a window past the file's end
    roomy = replay_mmap(trace([[[15]], [[1]], [[2]], [[3]]], 16, 1), pieces, 16 * C, 4 * C)
    # all of it was loaded before the trace: no reads, marks or not
    assert roomy.read_bytes == 0
    # 6 chunks of room, the load leaves 10..15: expert 1 reads 0..3 and marks 3; 2 hits; 3 hits the mark
    # and reads ahead 4..7 (the next window), which is counted as read though no fault waited for it
    r = replay_mmap(lk, pieces, 8 * C, 4 * C)
    plain = replay_mmap(lk, pieces, 8 * C, 4 * C, async_readahead=False)
    assert (plain.read_bytes, plain.faults) == (4 * C, 1)
    assert (r.read_bytes, r.faults) == (8 * C, 1)


def test_prefill_reads_are_not_counted():
    pieces = layout(1, 4)
    lk = from_routing(np.array([[[0]]]), np.full(1, C), 4, prefill_routing=np.array([[[3]], [[2]]]))
    r = replay_mmap(lk, pieces, 0, C, async_readahead=False)
    assert (r.read_bytes, r.decode_tokens) == (C, 1)


def test_bad_arguments_raise():
    lk = trace([[[0]]], 4, 1)
    with pytest.raises(ValueError, match="policy"):
        replay_mmap(lk, layout(1, 4), C, C, policy="mru")
    with pytest.raises(ValueError, match="readahead"):
        replay_mmap(lk, layout(1, 4), C, 0)
    with pytest.raises(ValueError, match="items"):
        replay_mmap(lk, layout(1, 2), C, C)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), min_size=2, max_size=2, unique=True), min_size=3, max_size=20),
       st.integers(0, 40), st.sampled_from([1, 2, 4, 16]), st.sampled_from(["lru", "two_list"]), st.booleans())
def test_reads_bounded_and_none_with_room_for_all(tokens, room, ra, policy, ahead):
    pieces = layout(3, 8, gap_chunks=1)
    lk = trace([[t] * 3 for t in tokens], 8, 3)
    r = replay_mmap(lk, pieces, room * C, ra * C, policy=policy, async_readahead=ahead)
    assert r.faults <= 3 * 2 * len(tokens)
    if not ahead:
        # a fault reads at most its window and at least its own chunk
        assert r.faults * C <= r.read_bytes <= r.faults * ra * C
    if room >= 24:
        assert r.read_bytes == 0 and r.faults == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 6), st.integers(2, 12), st.integers(0, 60),
       st.sampled_from([1, 2, 3, 8, 32]), st.sampled_from(["lru", "two_list"]), st.booleans(),
       st.sampled_from([C // 2, C, 3 * C]), st.booleans())
def test_the_compiled_replay_is_the_reference(seed, n_layer, n_expert, room, ra, policy, ahead, slice_bytes, seq):
    rng = np.random.default_rng(seed)
    k = min(2, n_expert)
    offs, at = [], int(rng.integers(0, 3)) * C // 4
    for _ in range(n_layer):
        layer = []
        for _ in range(int(rng.integers(1, 4))):
            at += int(rng.integers(0, 3)) * C
            layer.append((at, slice_bytes, n_expert))
            at += slice_bytes * n_expert
        offs.append(layer)
    pieces = expert_pieces(offs, n_expert)
    dec = np.array([[rng.choice(n_expert, k, replace=False) for _ in range(n_layer)] for _ in range(12)])
    pre = np.array([[rng.choice(n_expert, k, replace=False) for _ in range(n_layer)] for _ in range(3)])
    lk = from_routing(dec, np.full(n_layer, slice_bytes), n_expert, prefill_routing=pre)
    got = replay_mmap(lk, pieces, room * C, ra * C, policy=policy, async_readahead=ahead, sequential=seq)
    want = replay_mmap_reference(lk, pieces, room * C, ra * C, policy=policy, async_readahead=ahead, sequential=seq)
    assert (got.read_bytes // C, got.faults) == want
