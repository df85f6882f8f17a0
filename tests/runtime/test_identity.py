"""Byte-identity of the streaming runtime: greedy tokens streamed == fully resident (same model,
same n_batch and flash-attention setting), on tiny generated MoE models in f32, q8_0 and q4_0,
with the cache off, a tiny budget (heavy eviction), the default and a big budget (filled after
the first prefill, or not), over a multi-token prefill, clear_kv true/false, and cancel (through
llama's abort callback) then resume.
A negative control (corrupted reads) proves the comparison can fail.
"""

from __future__ import annotations

import threading

import pytest

from bmoe_top.runtime.engine import Engine, GenerationError
from bmoe_top.runtime.expert_io import ExpertIOError
from bmoe_top.runtime.models import make_model

PROMPT = "The quick brown fox jumps over the lazy dog."
N = 12
CTX = 256
QTYPES = ["f32", "q8_0", "q4_0"]
BUDGETS = {
    "nocache": dict(cache_mb=0),
    "tiny-evicting": dict(cache_mb=0.01, force_cache=True),
    "default": dict(cache_mb=None),
    "big": dict(cache_mb=1e6),
    "big-no-fill": dict(cache_mb=1e6, fill=False),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt-models")
    return {q: make_model(d / f"tiny-{q}.gguf", preset="tiny", qtype=q, seed=3) for q in QTYPES}


def _engine(path, **kw):
    kw.setdefault("n_ctx", CTX)
    kw.setdefault("n_batch", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("flash_attn", False)
    return Engine(path, **kw)


def _resident_turns(path, turns):
    with _engine(path, stream=False) as e:
        return [e.generate(p, n, clear_kv=c).tokens for p, n, c in turns]


TURNS = [(PROMPT, N, True), (" And then?", 8, False), ("Another start", 6, True)]


@pytest.fixture(scope="module")
def reference(models):
    return {q: _resident_turns(models[q], TURNS) for q in QTYPES}


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("budget", list(BUDGETS))
def test_streamed_equals_resident(models, reference, qtype, budget):
    with _engine(models[qtype], **BUDGETS[budget]) as e:
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
        cs = e.cache_stats()
    assert got == reference[qtype]
    assert all(len(t) > 0 for t in got)
    assert cs.read_bytes > 0  # experts really came from the file
    if budget == "tiny-evicting":
        assert cs.evictions > 0
    if budget == "big":
        assert cs.evictions == 0


def test_io_threads_overlap_prefetch_identical(models, reference):
    with _engine(models["q8_0"], cache_mb=0.45, io_threads=3, overlap=True, prefetch=1) as e:
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
        assert e.cache.overlap and e.cache.prefetch == 1
    assert got == reference["q8_0"]


def test_page_cache_reads_identical(models, reference):
    with _engine(models["q4_0"], cache_mb=0.3, o_direct=False) as e:
        assert e.o_direct is False
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["q4_0"]


def test_negative_control_corrupt_reads_differ(models, reference):
    with _engine(models["f32"], cache_mb=0) as e:
        orig = e.reader.read_runs

        def corrupt(runs):
            t = orig(runs)
            for r in runs:
                half = r.length // 2
                r.view[:half] = bytes(half)
            return t

        e.reader.read_runs = corrupt
        got = e.generate(PROMPT, N).tokens
    assert got != reference["f32"][0]


def test_cancel_mid_decode_then_resume(models, reference):
    """Cancel fires inside a decode (from the routing callback, deterministic): llama aborts the
    step, the KV keeps only finished tokens, and the next requests match the resident run."""
    with _engine(models["q8_0"], cache_mb=0.5) as e:
        ev = threading.Event()
        calls = {"n": 0}
        e.cache.native_misses = False  # every routing with a miss reaches ensure (the cancel point)
        orig = e.cache.ensure

        def ensure(il, routed):
            calls["n"] += 1
            if calls["n"] == 2 * 4 + 1:  # prefill = 2 layers, then during the 4th decode
                ev.set()
            return orig(il, routed)

        e.cache.ensure = ensure
        r = e.generate(PROMPT, N, cancel=ev)
        assert r.cancelled and 0 < r.n_tokens < N
        assert r.tokens == reference["q8_0"][0][: r.n_tokens]
        assert len(e.kv_tokens) == r.n_past
        e.cache.ensure = orig
        # resume the same conversation: continuation equals the resident continuation of the prefix
        cont = e.generate("", N - r.n_tokens, clear_kv=False)
        assert r.tokens + cont.tokens == reference["q8_0"][0]
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["q8_0"]


def test_cancel_from_other_thread(models, reference):
    with _engine(models["f32"], cache_mb=0) as e:
        ev = threading.Event()
        seen = []

        def on_token(st):
            seen.append(st.step)
            if st.step == 3:
                threading.Thread(target=ev.set).start()

        r = e.generate(PROMPT, 200, cancel=ev, on_token=on_token)
        assert r.cancelled and r.n_tokens < 200
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["f32"]


def test_resident_cancel_polled_per_node_in_prefill_only(models, reference):
    """Resident with a cancel event: llama's abort callback polls it at every node of the prefill
    (a set event aborts it: no token, the KV as before), and is removed for the one-token decodes,
    which check the event between tokens."""
    with _engine(models["f32"], stream=False) as e:
        ev = threading.Event()
        installed = []
        r = e.generate(PROMPT, N, cancel=ev, on_token=lambda st: installed.append(e._abort_installed))
        assert r.tokens == reference["f32"][0]
        assert installed == [False] * N
        ev.set()
        r = e.generate(PROMPT, N, cancel=ev)
        assert r.cancelled and r.n_tokens == 0 and e.kv_tokens == []
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["f32"]


def test_read_error_aborts_cleanly_and_engine_survives(models, reference):
    with _engine(models["q4_0"], cache_mb=0) as e:
        orig = e.reader.read_runs
        state = {"fail": True}

        def flaky(runs):
            if state["fail"]:
                state["fail"] = False
                raise ExpertIOError("simulated EIO")
            return orig(runs)

        e.reader.read_runs = flaky
        with pytest.raises(GenerationError, match="simulated EIO"):
            e.generate(PROMPT, N)
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["q4_0"]


def test_python_eval_callback_path_identical(models, reference):
    """The pure-Python eval callback (no compiled shim) gives the same tokens as the native one."""
    from bmoe_top.runtime import native

    with _engine(models["q8_0"], cache_mb=0.45, native_hook=False) as e:
        assert e.hook.native is False
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
    assert got == reference["q8_0"]
    if native.library() is not None:
        with _engine(models["q8_0"], cache_mb=0.45) as e:
            assert e.hook.native is True


def test_prefill_in_several_batches_identical(models):
    """A prompt longer than n_batch is prefilled in several llama_decode calls (the union of routed
    experts per batch is streamed each time); resident with the same n_batch gives the same tokens."""
    long_prompt = " ".join(["streaming experts from flash"] * 6)
    with _engine(models["q8_0"], stream=False, n_batch=16) as e:
        ref = e.generate(long_prompt, 10)
    assert ref.n_prompt > 3 * 16
    with _engine(models["q8_0"], cache_mb=0.45, n_batch=16) as e:
        got = e.generate(long_prompt, 10)
        assert got.prefill_read_bytes > 0
    assert got.tokens == ref.tokens


def test_refuses_repacked_expert_tensors(models):
    """With llama.cpp's weight repacking on (q4_0 on AVX2), expert tensors are not in a plain
    CPU_Mapped buffer: streaming is refused with one line. (Own process: llama.cpp keeps repack
    state across model loads.)"""
    import subprocess
    import sys

    code = (
        "from bmoe_top.runtime.engine import Engine, EngineError\n"
        "try:\n"
        f"    Engine({str(models['q4_0'])!r}, n_ctx=256, repack=True)\n"
        "    print('STREAMING')\n"
        "except EngineError as e:\n"
        "    print('REFUSED', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    out = p.stdout.strip()
    if out == "STREAMING":
        pytest.skip("this CPU does not repack q4_0 (no AVX2): nothing to refuse")
    assert out.startswith("REFUSED") and "CPU_REPACK" in out and "refusing to stream" in out


@pytest.mark.parametrize("budget", ["tiny-evicting", "default", "big"])
def test_native_fast_paths_keep_the_lru_exact(models, reference, budget):
    """The native callback takes the all-hit layers, the one-token layers with misses (lookup,
    eviction, reads) and, with every expert resident, skips the routing nodes: the tokens and every
    cache counter, the LRU order included, equal the pure-Python callback's."""
    from bmoe_top.runtime import native

    if native.library() is None:
        pytest.skip(f"no native library: {native.native_error}")
    stats = {}
    for shim in (False, True):
        with _engine(models["q8_0"], native_hook=shim, early_prefetch=0, **BUDGETS[budget]) as e:
            got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
            cs = e.cache_stats()
            c = e.cache
            stats[shim] = (cs.hits, cs.misses, cs.evictions, cs.layer_hits, cs.layer_misses, cs.resident,
                           cs.read_bytes, c.rereads, c.resident_bytes,
                           # with every expert resident nothing is evicted: the skipped routing
                           # nodes leave the order as it was (it cannot change what is resident)
                           list(c.lru) if budget != "big" else None)
            if shim and budget == "big":
                assert not e.cache.observed  # every expert resident: routing nodes are not materialized
            if shim:
                assert c.native_misses_served > 0  # decode misses were read by the native callback
        assert got == reference["q8_0"]
    assert stats[True] == stats[False]


def _native_or_skip():
    from bmoe_top.runtime import native

    if native.library() is None:
        pytest.skip(f"no native library: {native.native_error}")


def _lru_matches_flags(c):
    """The Python LRU, the resident bytes and the resident flags the native callback reads agree."""
    ne = c.layout.n_expert
    flagged = {(i // ne, i % ne) for i in range(len(c._flags)) if c._flags[i]}
    assert flagged == set(c.lru)
    assert sum(c.lru.values()) == c.resident_bytes


@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
def test_evicted_pages_move_into_missed_slices(models, reference, qtype):
    """A native miss takes the whole pages of the slices it evicts (mremap) instead of giving them
    back and faulting fresh ones in: the same tokens, and the moves really happened."""
    _native_or_skip()
    with _engine(models[qtype], **BUDGETS["tiny-evicting"]) as e:
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
        c = e.cache
        assert c.native_misses_served > 0 and c.evictions > 0
        assert c.pages_moved > 0
        _lru_matches_flags(c)
    assert got == reference[qtype]


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("bank_share", [0.4, 0.6, None])
def test_early_prefetch_identical(models, reference, qtype, bank_share):
    """The early prefetch (the next layer's router on this layer's router input, the predicted
    experts read while the layer computes) changes what is resident, never the tokens; under a
    budget it really read experts (``spec_experts``), the budget held."""
    _native_or_skip()
    from bmoe_top.parsers.gguf_layout import read_layout

    bank_mb = read_layout(models[qtype]).expert_bank_bytes / (1 << 20)
    kw = dict(cache_mb=1e6) if bank_share is None else dict(cache_mb=bank_mb * bank_share, force_cache=True)
    with _engine(models[qtype], early_prefetch=2, **kw) as e:
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
        c = e.cache
        if bank_share is not None:
            assert c.spec_experts > 0
        assert 0 <= c.spec_useful <= c.spec_experts
        _lru_matches_flags(c)
        if c.budget is not None:
            assert c.resident_bytes <= c.budget
    assert got == reference[qtype]


def test_early_prefetch_off_reads_nothing_ahead(models, reference):
    _native_or_skip()
    with _engine(models["q8_0"], early_prefetch=0, cache_mb=0.45, force_cache=True) as e:
        got = [e.generate(p, n, clear_kv=c).tokens for p, n, c in TURNS]
        assert e.cache.spec_experts == 0
    assert got == reference["q8_0"]
