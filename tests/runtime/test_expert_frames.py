"""Frame pools (docs/runtime.md "A budget below the bank: frames"): with a budget below the expert
bank, the experts of every layer share one pool of frames per tensor kind and the routed ids are
rewritten to frame numbers after the routing weights are gathered. Greedy tokens equal the
resident run's on the native and the Python callback, with multi-token prefills, appended turns,
heavy eviction, route traces and a failed read; the frame table stays a bijection between
resident experts and used frames; the layout is chosen only where it applies.
"""

from __future__ import annotations

import pytest

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.runtime.engine import Engine, GenerationError
from bmoe_top.runtime.expert_store import frame_plan
from bmoe_top.runtime.models import make_model

MIB = 1024 * 1024
PROMPT = "The quick brown fox jumps over the lazy dog."
TURNS = [(PROMPT, 12, True), (" And then?", 8, False), ("Another start", 6, True)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("frame-models")
    return {q: make_model(d / f"tiny-{q}.gguf", preset="tiny", qtype=q, seed=3) for q in ("f32", "q8_0")}


@pytest.fixture(scope="module")
def reference(models):
    with _engine(models["f32"], stream=False) as e:
        return [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]


def _engine(path, **kw):
    kw.setdefault("n_ctx", 256)
    kw.setdefault("n_batch", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("flash_attn", False)
    return Engine(path, **kw)


def _budget_mb(path, frames: int) -> float:
    """A budget in MiB that holds exactly ``frames`` frames of ``path``."""
    lay = read_layout(path)
    plan = frame_plan(lay, lay.expert_bank_bytes - 1)
    assert plan is not None
    return (frames * plan.expert_bytes + 1) / MIB


def _check_table(cache) -> None:
    """Every resident expert has its own frame, nothing else has one, and the free frames are the rest."""
    n = cache.frames.n_frames
    resident = {(il, e) for il, e in cache.lru}
    used = {}
    for il in range(cache.layout.n_layer):
        for e in range(cache.layout.n_expert):
            f = cache.frame_of(il, e)
            assert (f >= 0) == ((il, e) in resident)
            if f >= 0:
                assert 0 <= f < n and f not in used
                used[f] = (il, e)
    free = list(cache._free[: cache._n_free[0]])
    assert len(free) == len(set(free)) and set(free) | set(used) == set(range(n)) and not set(free) & set(used)


def _mapping(addr: int) -> tuple[int, list[str]]:
    """The resident bytes (``Rss``) and ``VmFlags`` of the mapping of this process that holds
    ``addr`` (``/proc/self/smaps``)."""
    inside, rss = False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                rss = int(line.split()[1]) * 1024
            elif inside and head == "VmFlags:":
                return rss, line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.mark.parametrize("huge", [True, False], ids=["2M", "4K"])
def test_frame_pools_in_either_page_size_are_faulted_in_at_load_and_equal_resident(models, reference, huge):
    """``huge_pages`` True advises the pools ``MADV_HUGEPAGE`` (``hg``), False ``MADV_NOHUGEPAGE``
    (``nh``); either way every pool is in RAM before the first token (``MADV_POPULATE_WRITE``),
    and the tokens are the resident run's."""
    with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], 9), huge_pages=huge) as e:
        store = e.streaming.store
        assert e.cache.frames is not None and store.huge is huge and store.populated
        for m in store._maps:
            rss, flags = _mapping(m.base)
            assert ("hg" in flags, "nh" in flags) == (huge, not huge)
            assert rss >= m.size
        assert [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS] == reference


@pytest.mark.parametrize("native_hook", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("frames", [8, 11], ids=["one-layer", "most"])
def test_frames_equal_resident(models, reference, native_hook, frames):
    with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], frames), native_hook=native_hook) as e:
        c = e.cache
        assert c.frames is not None and c.frames.n_frames == frames
        assert c.limit == frames * c.layout.expert_bytes[c.layout.moe_layers[0]]
        got = [e.generate(p, n, clear_kv=cl).tokens for p, n, cl in TURNS]
        assert c.evictions > 0 and c.resident_bytes <= c.limit
        _check_table(c)
    assert got == reference


def test_native_and_python_count_the_same(models):
    """The native callback's frames and counters equal the Python callback's, token by token."""
    runs = []
    for native_hook in (True, False):
        with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], 9), native_hook=native_hook) as e:
            per_token: list[tuple[int, int, int]] = []
            res = e.generate(PROMPT, 16, on_token=lambda st, c=e.cache, out=per_token: out.append(c.counters()[:3]))
            table = [e.cache.frame_of(il, x) for il in range(e.layout.n_layer) for x in range(e.n_expert)]
            runs.append((res.tokens, per_token, e.cache.evictions, table, list(e.cache.lru)))
        if native_hook:
            assert e.cache.native_misses_served > 0
    assert runs[0] == runs[1]


def test_route_trace_has_expert_ids_not_frames(models, reference):
    """Route traces read the ids and weights before the ids become frames: the same routing as in
    place, prefill and decode."""
    routes = {}
    for name, mb in (("frames", _budget_mb(models["f32"], 9)), ("in-place", 1e6)):
        with _engine(models["f32"], cache_mb=mb, route_weights=True) as e:
            assert (e.cache.frames is not None) == (name == "frames")
            rows = []
            e.route_sink = lambda phase, _turn, pos, d, rows=rows: rows.append(
                (phase, pos, {il: ids.tolist() for il, ids in sorted(d["ids"].items())},
                 {il: w.round(5).tolist() for il, w in sorted(d["w"].items())}))
            res = e.generate(PROMPT, 12)
        routes[name] = (res.tokens, rows)
    assert routes["frames"] == routes["in-place"]
    assert routes["frames"][0] == reference[0]
    rows = routes["frames"][1]
    assert rows[0][0] == "prefill" and len(rows) > 12 and all(r[2] and r[3] for r in rows)


def test_a_failed_read_fails_the_generation_and_frees_its_frames(models, reference, monkeypatch):
    monkeypatch.setenv("BMOE_INJECT_READ_ERROR", "3")
    with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], 9)) as e:
        with pytest.raises(GenerationError, match="injected"):
            e.generate(PROMPT, 12)
        _check_table(e.cache)
        got = [e.generate(p, n, clear_kv=cl).tokens for p, n, cl in TURNS]
        _check_table(e.cache)
    assert got == reference


def test_where_frames_apply(models):
    f32, q8 = read_layout(models["f32"]), read_layout(models["q8_0"])
    bank = f32.expert_bank_bytes
    plan = frame_plan(f32, bank // 2 + 4 * MIB // 10)
    assert plan is not None and plan.n_frames >= f32.n_expert
    assert plan.expert_bytes == f32.expert_bytes[f32.moe_layers[0]]
    assert frame_plan(f32, None) is None  # no budget: every expert fits in place
    assert frame_plan(f32, 0) is None  # no cache
    assert frame_plan(f32, bank) is None  # the bank fits
    assert frame_plan(f32, 7 * plan.expert_bytes) is None  # fewer frames than a layer's experts
    assert frame_plan(f32, 8 * plan.expert_bytes).n_frames == 8  # the budget over the slices
    # q8_0 slices of the tiny preset are 34,816 bytes: not a multiple of 4096
    assert q8.tensors and all(i.expert_stride % 4096 for i in q8.tensors.values())
    assert frame_plan(q8, q8.expert_bank_bytes // 2) is None
    with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], 9), early_prefetch=2) as e:
        assert e.cache.frames is None  # the early prefetch reads into the experts' own places
    with _engine(models["f32"], cache_mb=_budget_mb(models["f32"], 9), overlap=True) as e:
        assert e.cache.frames is None


def test_sequences_decoded_together_equal_alone(models):
    """Several sequences in one decode batch (multi-row routings through the Python callback):
    each one's tokens are those it gets alone, resident."""
    from bmoe_top.runtime.slots import SlotDecoder

    prompts = [PROMPT, "Two at once", "A third, shorter one?"]
    with _engine(models["f32"], stream=False) as e:
        alone = [e.generate(p, 10).tokens for p in prompts]
    with _engine(models["f32"], n_ctx=256 * 3, n_seq=3, cache_mb=_budget_mb(models["f32"], 9)) as e:
        assert e.cache.frames is not None
        dec = SlotDecoder(e)
        out = {}
        for q, p in enumerate(prompts):
            dec.start(q, p, 10)
        while dec.running:
            for q, res, err in dec.step():
                assert err is None
                out[q] = res.tokens
        _check_table(e.cache)
    assert [out[q] for q in range(3)] == alone
