"""parsers/residency.py: the byte ranges a residency sample counts are the model's expert slices and
dense tensors, in every shard, and their counts fold into the layer x expert map."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.parsers.residency import fold_counts, plan_residency, span_pages
from bmoe_top.runtime.models import make_model, split_gguf


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    single = make_model(d / "tiny.gguf", preset="tiny", qtype="q8_0", seed=4)
    return {"single": [single], "spread": split_gguf(single, d / "spread.gguf", 8)}


@pytest.mark.parametrize("kind", ["single", "spread"])
def test_the_ranges_are_every_expert_slice_and_every_dense_tensor(models, kind):
    lay = read_layout(models[kind][0])
    plan = plan_residency(lay, 4096)
    assert plan.paths == tuple(str(p) for p in lay.paths) and plan.sizes == tuple(p.stat().st_size for p in lay.paths)
    assert (plan.n_layer, plan.n_expert) == (lay.n_layer, lay.n_expert)
    n_runs = sum(len(s[s == plan.dense_slot]) for s in plan.slots)
    assert 0 < n_runs < len(lay.dense)  # dense tensors less than a page apart are one range
    assert plan.n_ranges == n_runs + sum(len(ts) for ts in lay.layers) * lay.n_expert
    dense_pages = {(d.shard, p) for d in lay.dense if d.n_bytes
                   for p in range(d.file_offset // 4096, (d.file_offset + d.n_bytes - 1) // 4096 + 1)}
    assert plan.dense_pages == len(dense_pages)  # each page once
    for info in lay.tensors.values():
        o, ln, s = plan.offsets[info.shard], plan.lengths[info.shard], plan.slots[info.shard]
        for e in (0, 3, lay.n_expert - 1):
            at = np.nonzero(o == info.file_offset + e * info.expert_stride)[0]
            assert len(at) == 1 and ln[at[0]] == info.expert_stride and s[at[0]] == info.layer * lay.n_expert + e
    for o in plan.offsets:
        assert np.all(np.diff(o) >= 0)  # file order
    pages = [span_pages(o, ln, 4096) for o, ln in zip(plan.offsets, plan.lengths)]
    slices, dense = fold_counts(plan, pages)  # every page resident: each expert shows all of its pages
    assert np.array_equal(slices, plan.slice_pages) and dense == plan.dense_pages
    assert plan.file_pages == sum(-(-s // 4096) for s in plan.sizes)


def test_a_slice_spans_the_pages_its_bytes_touch():
    o = np.array([0, 4095, 4096, 100, 5000], dtype=np.int64)
    ln = np.array([4096, 2, 1, 0, 8192], dtype=np.int64)
    assert span_pages(o, ln, 4096).tolist() == [1, 2, 1, 0, 3]


@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 30)), max_size=30),
       st.sampled_from([4096, 16384, 65536]))
def test_span_pages_is_the_page_count_of_each_range(ranges, page):
    o = np.array([a for a, _ in ranges], dtype=np.int64)
    ln = np.array([b for _, b in ranges], dtype=np.int64)
    got = span_pages(o, ln, page)
    for (a, b), g in zip(ranges, got):
        assert g == (0 if b == 0 else (a + b - 1) // page - a // page + 1)


def test_dimensions_over_the_caps_are_refused(models):
    lay = read_layout(models["single"][0])
    lay.n_expert = 1 << 20
    with pytest.raises(ValueError, match="over the cap"):
        plan_residency(lay, 4096)
