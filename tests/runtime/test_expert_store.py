"""The expert store's page releases: a batch of evicted experts (one ``process_madvise`` where
the kernel allows it, ``madvise`` per range otherwise) gives back exactly the pages the experts
alone held, keeps every byte of the experts still resident, and frees the page two evicted
neighbours shared. Real private anonymous memory, read back through the tensors' views."""

from __future__ import annotations

import pytest

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.runtime import expert_store
from bmoe_top.runtime.expert_store import PAGE, ExpertStore
from bmoe_top.runtime.models import make_model


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    path = make_model(tmp_path_factory.mktemp("store") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=5)
    return read_layout(path)


def _fill(store: ExpertStore, il: int) -> None:
    for tb in store.layer_bufs[il]:
        tb.view[:] = b"\x5a" * len(tb.view)


def _page_count(tb, byte_lo: int, byte_hi: int) -> int:
    """Pages of [byte_lo, byte_hi) of the tensor whose bytes are no longer the fill (zeroed)."""
    n = 0
    for p0 in range(byte_lo, byte_hi, PAGE):
        if tb.view[p0] == 0:
            n += 1
    return n


@pytest.mark.parametrize("batch", [True, False])
def test_release_pairs_frees_only_the_evicted_experts(layout, batch, monkeypatch):
    if not batch:  # the madvise-per-range path (kernels without process_madvise)
        monkeypatch.setattr(expert_store, "_SYS_PROCESS_MADVISE", None)
        monkeypatch.setattr(expert_store, "_BATCH", None)
    store = ExpertStore(layout)
    try:
        il = layout.moe_layers[0]
        _fill(store, il)
        resident = {e for e in range(layout.n_expert)} - {1, 2}
        store.release_pairs([(il, 1), (il, 2)], lambda li, e: li == il and e in resident)
        for tb in store.layer_bufs[il]:
            s = tb.info.expert_stride
            # experts 0 and 3 (resident) keep every byte
            assert bytes(tb.view[0:s]) == b"\x5a" * s
            assert bytes(tb.view[3 * s : 4 * s]) == b"\x5a" * s
            # experts 1 and 2 are zero wherever a whole page was theirs alone (their shared page too)
            lo, hi = tb.inner_pages(1, 2)
            assert hi > lo
            a, b = lo - tb.shift, hi - tb.shift
            assert bytes(tb.view[a:b]) == bytes(b - a)
            assert _page_count(tb, a, b) == (b - a) // PAGE
    finally:
        store.close()


def test_windows_release_nothing(layout):
    store = ExpertStore(layout, windows=True)
    try:
        il = layout.moe_layers[0]
        _fill(store, il)
        store.release_pairs([(il, 1)], lambda li, e: False)
        for tb in store.layer_bufs[il]:
            assert bytes(tb.view) == b"\x5a" * len(tb.view)
    finally:
        store.close()
