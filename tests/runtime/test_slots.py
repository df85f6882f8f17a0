"""Several sequences decoded together (:class:`SlotDecoder`): each request's greedy tokens are
those it gets alone, with the expert cache streaming (multi-row decode batches route through the
eval callback) or every expert resident; a request joins a running batch at the next step; the
cache's lookups of a shared step are charged once each, to the row that routed them first.
"""

from __future__ import annotations

import threading

import pytest

from bmoe_top.runtime.engine import Engine, RequestError
from bmoe_top.runtime.models import make_model
from bmoe_top.runtime.sampling import Sampling
from bmoe_top.runtime.slots import SlotDecoder

PROMPTS = ["The quick brown fox jumps over the lazy dog.", "Two at once", "A third, shorter one?"]
N = 14
CTX = 256
BUDGETS = {
    "nocache": dict(cache_mb=0),
    "tiny-evicting": dict(cache_mb=0.01, force_cache=True),
    "default": dict(cache_mb=None),
    "python-hook": dict(cache_mb=None, native_hook=False),
    "overlap-prefetch": dict(cache_mb=0.01, force_cache=True, overlap=True, prefetch=1),
    "resident": dict(stream=False),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("slots") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=3)


def _engine(path, **kw):
    kw.setdefault("n_batch", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("flash_attn", False)
    return Engine(path, **kw)


@pytest.fixture(scope="module")
def alone(model):
    """Each prompt's greedy tokens, run alone on a one-sequence engine."""
    with _engine(model, n_ctx=CTX, stream=False) as e:
        return [e.generate(p, N).tokens for p in PROMPTS]


def _run_together(dec: SlotDecoder, join_after: int = 0) -> dict[int, list]:
    """Sequence 0 starts; after ``join_after`` steps the others join; run until all end."""
    stats: dict[int, list] = {q: [] for q in range(len(PROMPTS))}
    out = {}
    dec.start(0, PROMPTS[0], N, on_token=stats[0].append)
    for _ in range(join_after):
        for q, res, err in dec.step():
            assert err is None
            out[q] = res
    for q in range(1, len(PROMPTS)):
        dec.start(q, PROMPTS[q], N, on_token=stats[q].append)
    widths = []
    while dec.running:
        widths.append(dec.running)
        for q, res, err in dec.step():
            assert err is None
            out[q] = res
    assert max(widths) == len(PROMPTS)  # the three were decoded in one batch
    return {q: [res, stats[q]] for q, res in out.items()}


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_together_equals_alone(model, alone, budget):
    with _engine(model, n_ctx=CTX * len(PROMPTS), n_seq=len(PROMPTS), **BUDGETS[budget]) as e:
        assert e.n_ctx_seq == CTX
        got = _run_together(SlotDecoder(e), join_after=3)
    for q, tokens in enumerate(alone):
        res, stats = got[q]
        assert res.tokens == tokens, (budget, q)
        assert [st.token for st in stats] == tokens
        assert [st.pos for st in stats] == list(range(res.n_prompt, res.n_prompt + len(tokens)))


def test_greedy_control_differs(model, alone):
    """The comparison can fail: a different prompt in sequence 1 gives different tokens."""
    with _engine(model, n_ctx=CTX * 2, n_seq=2, stream=False) as e:
        dec = SlotDecoder(e)
        dec.start(0, PROMPTS[0], N)
        dec.start(1, PROMPTS[0] + " Not the same.", N)
        out = {}
        while dec.running:
            out.update({q: r for q, r, _ in dec.step()})
    assert out[0].tokens == alone[0] and out[1].tokens != alone[0]


@pytest.mark.parametrize("prefetch", [0, 1])
def test_shared_steps_charge_each_lookup_once(model, prefetch):
    """The hits and misses of the rows of every step add up to the cache's counters, and each
    routed expert of a layer is charged to exactly one row (with speculative reads too: what no
    row routed goes to the first)."""
    with _engine(model, n_ctx=CTX * 2, n_seq=2, cache_mb=0.01, force_cache=True, route_telemetry=True,
                 prefetch=prefetch) as e:
        dec = SlotDecoder(e)
        rows: list = []
        for q in range(2):
            dec.start(q, PROMPTS[q], N, on_token=rows.append)
        shared = 0
        while dec.running:
            before = e.cache_stats()
            n0 = len(rows)
            ends = dec.step()
            after = e.cache_stats()
            step = rows[n0:]
            if not step:
                assert ends
                continue
            assert sum(st.hits for st in step) == after.hits - before.hits
            assert sum(st.misses for st in step) == after.misses - before.misses
            assert sum(st.read_bytes for st in step) == after.read_bytes - before.read_bytes
            if len(step) == 2:
                shared += 1
                assert len({st.wall_ms for st in step}) == 1  # one step: one time for both rows
                for il in range(e.n_layer):
                    a, b = (set(st.route[il][0]) if st.route and st.route[il] else set() for st in step)
                    assert not a & b, il
                # the second row only owns what the first did not route
                assert sum(dec.shares[q].misses for q in (0, 1)) == after.misses - before.misses
        assert shared >= N - 1


def test_slot_context_is_split(model):
    with _engine(model, n_ctx=CTX * 2, n_seq=2, stream=False) as e:
        dec = SlotDecoder(e)
        assert e.n_ctx_seq == CTX
        with pytest.raises(RequestError, match="slot's context"):
            dec.start(0, PROMPTS[0], CTX - 5)
        assert dec.free() == [0, 1]


def test_cancel_ends_one_sequence_only(model, alone):
    with _engine(model, n_ctx=CTX * 2, n_seq=2, stream=False) as e:
        dec = SlotDecoder(e)
        stop = threading.Event()
        dec.start(0, PROMPTS[0], N)
        dec.start(1, PROMPTS[1], N, cancel=stop, on_token=lambda st: stop.set() if st.step == 3 else None)
        out = {}
        while dec.running:
            out.update({q: r for q, r, _ in dec.step()})
    assert out[1].cancelled and out[1].n_tokens == 3
    assert out[0].tokens == alone[0] and not out[0].cancelled


def test_serial_generate_on_a_slotted_engine_keeps_to_one_slot(model):
    """``generate`` uses sequence 0, whose context is one slot's."""
    with _engine(model, n_ctx=CTX * 2, n_seq=2, stream=False) as e:
        with pytest.raises(RequestError, match=f"exceeds n_ctx \\({CTX}\\)"):
            e.generate(PROMPTS[0], CTX - 5)
        assert e.generate(PROMPTS[1], 4).n_tokens == 4


def test_seeded_sampling_together_equals_alone(model):
    """Each slot samples from its own row with its own generator and context."""
    sm = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.2, seed=7)
    with _engine(model, n_ctx=CTX, stream=False, sampling=sm) as e:
        ref = [e.generate(p, N).tokens for p in PROMPTS[:2]]
    with _engine(model, n_ctx=CTX * 2, n_seq=2, stream=False) as e:
        dec = SlotDecoder(e)
        for q in range(2):
            dec.start(q, PROMPTS[q], N, sampling=sm)
        out = {}
        while dec.running:
            out.update({q: r for q, r, _ in dec.step()})
    assert [out[0].tokens, out[1].tokens] == ref
    assert len(ref[0]) == N


def test_a_batch_smaller_than_the_slots_grows_to_hold_a_row_of_each(model):
    k = len(PROMPTS)
    with _engine(model, n_ctx=CTX, n_batch=k, stream=False) as e:  # the prompts in batches of k, alone
        ref = [e.generate(p, N).tokens for p in PROMPTS]
    with _engine(model, n_ctx=CTX * k, n_seq=k, n_batch=1, stream=False) as e:
        assert e.n_batch == k
        got = _run_together(SlotDecoder(e))
    assert [got[q][0].tokens for q in range(k)] == ref
