"""The cache simulator against plain reference replays of the runtime's rules.

The one-pass LRU must equal the per-budget reference (``replay_lru``, an OrderedDict port of
runtime/expert_cache.py) at EVERY budget, on traces with prefill chunks, several expert sizes
and budgets below one batch. The other policies are checked against small Python references
written here from their definitions.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers.routing import random_lookups
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.layers import layer_partitioned_curve
from bmoe_top.tui.analysis.lookups import Lookups, from_routing, layer_lookups, split_decode

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw: st.DrawFn) -> Lookups:
    seed = draw(st.integers(0, 2**31))
    n_layer = draw(st.integers(1, 4))
    n_expert = draw(st.integers(2, 7))
    k = draw(st.integers(1, n_expert))
    pre = draw(st.integers(0, 6))
    pb = draw(st.one_of(st.none(), st.integers(1, 4)))
    sizes = draw(st.lists(st.integers(1, 5), min_size=n_layer, max_size=n_layer))
    return random_lookups(np.random.default_rng(seed), n_tokens=draw(st.integers(1, 25)), n_layer=n_layer,
                          n_expert=n_expert, k=k, prefill_tokens=pre, prefill_batch=pb, layer_bytes=sizes)


@SETTINGS
@given(traces())
def test_one_pass_lru_equals_the_reference_at_every_budget(lk: Lookups) -> None:
    budgets = np.arange(0, lk.bank_bytes + 2)
    flags = C.lru_hit_flags(lk, budgets)
    curve = C.lru_curve(lk, budgets)
    for j, b in enumerate(budgets.tolist()):
        ref = C.replay_lru(lk, b)
        assert np.array_equal(flags[:, j], ref), f"budget {b}"
        assert curve.decode_hits[j] == int(ref[lk.decode].sum())
        assert curve.hit_bytes[j] == int(lk.item_bytes[lk.item[lk.decode & (ref == 1)]].sum())
        per_layer = np.bincount(lk.layer[lk.decode & (ref == 1)], minlength=lk.n_layer)
        assert np.array_equal(curve.layer_hits[:, j], per_layer)


@SETTINGS
@given(traces())
def test_compiled_direct_lru_equals_the_reference(lk: Lookups) -> None:
    for b in range(0, lk.bank_bytes + 2):
        out = np.zeros(lk.n, dtype=np.uint8)
        K.lru_direct_hits(lk.item, lk.batch_first(), lk.item_bytes, b, out)
        assert np.array_equal(out, C.replay_lru(lk, b))


def test_within_batch_order_matters_and_is_reproduced() -> None:
    """Two budgets where the runtime's 'hits first, then misses' order inside a batch decides a
    later hit: a stack that kept routing order would get this wrong."""
    # one layer, 5 experts of 1 byte, top-2, budget 3 experts
    dec = np.array([[[0, 2]], [[3, 0]], [[2, 4]], [[3, 2]]])
    lk = from_routing(dec, [1], 5)
    # token 1: 0 hits and moves up first, 3 misses and lands after it (order 2, 0, 3); token 2: 2
    # hits (0, 3, 2), 4 misses and evicts 0; token 3: 3 and 2 both hit. Kept in routing order
    # (2, 3, 0), 4 would have evicted 3 instead.
    ref = C.replay_lru(lk, 3)
    assert ref.tolist() == [0, 0, 0, 1, 1, 0, 1, 1]
    assert C.lru_hit_flags(lk, [3])[:, 0].tolist() == ref.tolist()


# -- references for the other policies -----------------------------------------------------------

def _ref_policy(lk: Lookups, policy: str, budget: int) -> np.ndarray:
    """The policies from their definitions. Ties: LFU takes the least recently touched (a
    batch's hits in routing order, then its misses), Belady the entry whose key was set last."""
    hits = np.zeros(lk.n, dtype=np.uint8)
    bf = lk.batch_first().tolist()
    sizes = lk.item_bytes.tolist()
    items = lk.item.tolist()
    nxt = C._next_use(lk).tolist()
    cached: set[int] = set()
    count: dict[int, int] = {}
    touched: dict[int, int] = {}
    visited: dict[int, bool] = {}
    next_of: dict[int, int] = {}
    queue: list[int] = []  # oldest first
    hand = 0
    tick = 0
    resident = 0
    for b in range(len(bf) - 1):
        batch = items[bf[b]:bf[b + 1]]
        missing = []
        for r, x in enumerate(batch):
            count[x] = count.get(x, 0) + 1
            if x in cached:
                hits[bf[b] + r] = 1
                tick += 1
                touched[x] = tick
                visited[x] = True
                next_of[x] = nxt[bf[b] + r]
            else:
                missing.append(bf[b] + r)
        if not missing or budget == 0:
            continue
        need = sum(sizes[items[i]] for i in missing)
        prot = set(batch)
        while resident + need > budget:
            cands = [y for y in cached if y not in prot]
            if not cands:
                break
            if policy == "lfu":
                v = min(cands, key=lambda y: (count[y], touched[y]))
            elif policy == "belady":
                v = max(cands, key=lambda y: (next_of[y], touched[y]))
            elif policy == "fifo":
                v = next(y for y in queue if y not in prot)
            else:  # sieve: the hand walks from the oldest entry
                while True:
                    if hand >= len(queue):
                        hand = 0
                    y = queue[hand]
                    if y in prot:
                        hand += 1
                        continue
                    if visited[y]:
                        visited[y] = False
                        hand += 1
                        continue
                    v = y
                    break
            if policy == "sieve":
                queue.pop(hand)
                if hand >= len(queue):
                    hand = 0  # evicted the newest entry: the hand wraps to the oldest
            elif v in queue:
                queue.remove(v)
            cached.discard(v)
            resident -= sizes[v]
        for i in missing:
            x = items[i]
            cached.add(x)
            resident += sizes[x]
            tick += 1
            touched[x] = tick
            visited[x] = False
            next_of[x] = nxt[i]
            queue.append(x)  # the newest end: the hand keeps its place
    return hits


@pytest.mark.parametrize("policy", ["lfu", "fifo", "sieve", "belady"])
@SETTINGS
@given(lk=traces())
def test_policies_equal_their_reference(policy: str, lk: Lookups) -> None:
    budgets = np.arange(0, lk.bank_bytes + 2)
    curve = C.policy_curve(lk, policy, budgets)
    for j, b in enumerate(budgets.tolist()):
        ref = _ref_policy(lk, policy, b)
        assert curve.decode_hits[j] == int(ref[lk.decode].sum()), f"{policy} budget {b}"


def test_heap_policies_survive_long_traces() -> None:
    """Long enough that the lazy heaps are compacted many times."""
    rng = np.random.default_rng(5)
    lk = random_lookups(rng, n_tokens=400, n_layer=3, n_expert=16, k=4, prefill_tokens=8,
                        layer_bytes=[1, 1, 1])
    for policy in ("lfu", "belady"):
        curve = C.policy_curve(lk, policy, [0, 14, 20, 30, 48])
        for j, b in enumerate([0, 14, 20, 30, 48]):
            assert curve.decode_hits[j] == int(_ref_policy(lk, policy, b)[lk.decode].sum())


@SETTINGS
@given(traces())
def test_belady_is_the_ceiling_with_one_expert_size(lk: Lookups) -> None:
    lk = Lookups(lk.item, lk.batch, lk.decode, lk.token, lk.recorded_hit, np.ones_like(lk.item_bytes),
                 lk.n_layer, lk.n_expert, lk.top_k, lk.n_decode_tokens)
    budgets = np.arange(0, lk.bank_bytes + 1)
    bel = C.policy_curve(lk, "belady", budgets).decode_hits
    for p in ("lru", "lfu", "fifo", "sieve"):
        assert (C.policy_curve(lk, p, budgets).decode_hits <= bel).all(), p


def test_no_lru_hits_below_the_token_cycle_bound() -> None:
    """Every layer routes top-k distinct experts per token, so an expert is reused after the
    other layers' k experts each: below T - (k-1) x largest expert, LRU never hits."""
    rng = np.random.default_rng(11)
    lk = random_lookups(rng, n_tokens=60, n_layer=4, n_expert=8, k=3, layer_bytes=[2, 3, 2, 3])
    bound = lk.token_cycle_bytes - (lk.top_k - 1) * 3
    curve = C.lru_curve(lk, np.arange(0, lk.bank_bytes + 1))
    assert (curve.decode_hits[curve.budgets < bound] == 0).all()
    assert curve.decode_hits[curve.budgets >= lk.token_cycle_bytes].min() >= 0


def test_bank_budget_hits_everything_but_the_compulsory_misses() -> None:
    rng = np.random.default_rng(3)
    lk = random_lookups(rng, n_tokens=50, n_layer=3, n_expert=10, k=2, prefill_tokens=5)
    curve = C.lru_curve(lk, [0, lk.bank_bytes])
    assert curve.decode_hits[0] == 0
    assert curve.decode_hits[1] == lk.n_decode_lookups - C.compulsory_decode_misses(lk)
    # no cache: every decode lookup is read
    assert curve.read_mib_per_token[0] == pytest.approx(curve.decode_bytes / C.MIB / lk.n_decode_tokens)
    assert curve.io_s_per_token(100.0)[0] == pytest.approx(curve.read_mib_per_token[0] / 100.0)
    with pytest.raises(ValueError):
        curve.io_s_per_token(0)


def test_static_profile_scores_the_test_part() -> None:
    rng = np.random.default_rng(8)
    lk = random_lookups(rng, n_tokens=40, n_layer=2, n_expert=8, k=2, layer_bytes=[2, 3])
    train, test = split_decode(lk, 0.5)
    assert train.n_decode_tokens + test.n_decode_tokens == lk.n_decode_tokens
    pairs = C.static_ranking(train)
    budgets = [0, 5, 11, 20, lk.bank_bytes]
    curve = C.static_curve(train, test, budgets)
    for j, b in enumerate(budgets):
        pinned, used = set(), 0
        for il, e in pairs.tolist():
            s = int(test.layer_bytes()[il])
            if used + s > b:
                break
            pinned.add(il * lk.n_expert + e)
            used += s
        want = sum(1 for x, d in zip(test.item.tolist(), test.decode.tolist()) if d and x in pinned)
        assert curve.decode_hits[j] == want


def test_layer_curves_are_per_layer_lru() -> None:
    rng = np.random.default_rng(4)
    lk = random_lookups(rng, n_tokens=30, n_layer=3, n_expert=6, k=2, prefill_tokens=3, layer_bytes=[2, 3, 2])
    lc = C.layer_curves(lk)
    for il in range(3):
        sub = layer_lookups(lk, il)
        for c in range(lk.n_expert + 1):
            ref = C.replay_lru(sub, c * int(lk.layer_bytes()[il]))
            assert lc.hits[il, c] == int(ref[sub.decode].sum())
    eq = layer_partitioned_curve(lk, [lk.bank_bytes], lc)
    share = lk.bank_bytes // 3
    assert eq.decode_hits[0] == sum(lc.hits[il, min(6, share // s)] for il, s in enumerate([2, 3, 2]))


def test_evictions_by_hand() -> None:
    # one layer of four 1-byte experts, one a token: 0 1 2 0 3 1. Two bytes: 2 evicts 0, 0 evicts
    # 1, 3 evicts 2, 1 evicts 0; three bytes: 0 hits, 3 evicts 1, 1 evicts 2; four hold them all
    lk = from_routing(np.array([0, 1, 2, 0, 3, 1]).reshape(6, 1, 1), [1], 4)
    assert C.token_evictions(lk, 2).tolist() == [0, 0, 1, 1, 1, 1]
    assert C.token_evictions(lk, 3).tolist() == [0, 0, 0, 0, 1, 1]
    assert C.token_evictions(lk, 4).tolist() == [0] * 6 and C.token_evictions(lk, 0).tolist() == [0] * 6
    curve = C.lru_curve(lk, [0, 2, 3, 4])
    ev = C.decode_evictions(lk, curve.budgets_mib, curve.decode_hit_pct)
    assert ev * 6 == pytest.approx([0, 4, 2, 0])
    # a prompt that fills the cache: every decode miss evicts
    pre = from_routing(np.array([0, 1]).reshape(2, 1, 1), [1], 4, prefill_routing=np.array([2, 3]).reshape(2, 1, 1))
    assert C.token_evictions(pre, 2).tolist() == [1, 1]
    assert C.decode_evictions(lk, [2 / C.MIB], [np.nan]).tolist() == [0.0]  # a curve with no decode lookup
    with pytest.raises(ValueError, match="budgets"):
        C.decode_evictions(lk, [1.0, 2.0], [50.0])


def _reference_evictions(lk: Lookups, budget: int) -> np.ndarray:
    """Experts evicted in each decode token by bmoe-run's LRU rules written out plainly."""
    out = np.zeros(lk.n_decode_tokens)
    lru: dict[int, None] = {}
    bf = lk.batch_first().tolist()
    for b in range(lk.n_batches):
        routed = lk.item[bf[b]:bf[b + 1]].tolist()
        missing = [x for x in dict.fromkeys(routed) if x not in lru]
        for x in routed:
            if x in lru:
                lru.pop(x)
                lru[x] = None
        room = budget - len(lru) - len(missing)
        for key in list(lru):
            if room >= 0:
                break
            if key not in routed:
                del lru[key]
                room += 1
                if lk.decode[bf[b]]:
                    out[lk.token[bf[b]]] += 1
        lru.update(dict.fromkeys(missing))
    return out


@SETTINGS
@given(traces())
def test_evictions_equal_a_plain_replay_with_one_expert_size(lk: Lookups) -> None:
    one = Lookups(lk.item, lk.batch, lk.decode, lk.token, lk.recorded_hit, np.ones_like(lk.item_bytes), lk.n_layer,
                  lk.n_expert, lk.top_k, lk.n_decode_tokens)
    budgets = np.arange(one.n_expert, one.bank_bytes + 2)  # a layer's batch always fits
    curve = C.lru_curve(one, budgets)
    per_token = C.decode_evictions(one, curve.budgets_mib, curve.decode_hit_pct)
    for j, b in enumerate(budgets.tolist()):
        ev = C.token_evictions(one, b)
        assert np.array_equal(ev, _reference_evictions(one, b)), f"budget {b}"
        assert per_token[j] * one.n_decode_tokens == pytest.approx(ev.sum())


def test_budgets_are_checked() -> None:
    rng = np.random.default_rng(0)
    lk = random_lookups(rng)
    for bad in ([], [-1], [float("nan")]):
        with pytest.raises(ValueError):
            C.lru_curve(lk, bad)
    with pytest.raises(ValueError):
        C.policy_curve(lk, "mru", [1])
    curve = C.lru_curve(lk, [3, 1, 3])
    assert curve.budgets.tolist() == [1, 3]
    with pytest.raises(KeyError):
        curve.at(2)


def test_strp_profile_from_a_trace_ranks_by_lookups() -> None:
    rng = np.random.default_rng(2)
    lk = random_lookups(rng, n_tokens=30, n_layer=2, n_expert=8, k=2)
    prof = C.strp_from_lookups(lk, slots=5)
    counts = np.bincount(lk.item, minlength=lk.n_items)
    ids = prof.pairs[:, 0] * lk.n_expert + prof.pairs[:, 1]
    assert (np.diff(counts[ids]) <= 0).all()
    assert set(ids.tolist()) == set(np.flatnonzero(counts).tolist())
    assert prof.slots == 5


def test_allocation_fits_and_is_optimal_on_concave_curves() -> None:
    from bmoe_top.tui.analysis.layers import allocate, layer_table

    hits = np.array([[0, 10, 18, 24, 28, 30], [0, 4, 8, 11, 13, 14], [0, 0, 0, 0, 0, 0]], dtype=np.int64)
    lb = np.array([2, 1, 3], dtype=np.int64)
    lc = C.LayerCurves(hits, hits * lb[:, None], np.array([40, 20, 0]), lb, np.array([0, 1]))
    for budget in range(0, 16):
        a = allocate(lc, budget)
        assert a.bytes_used <= budget
        best = max(hits[0, c0] + hits[1, c1] for c0 in range(6) for c1 in range(6) if 2 * c0 + c1 <= budget)
        assert a.decode_hits == best, budget
    rng = np.random.default_rng(9)
    lk = random_lookups(rng, n_tokens=40, n_layer=3, n_expert=6, k=2, layer_bytes=[2, 3, 2])
    curve = C.lru_curve(lk, [10, 20])
    rows = layer_table(curve, 20)
    assert sum(r.misses for r in rows) == curve.decode_lookups - curve.decode_hits[1]
    assert [r.misses for r in rows] == sorted((r.misses for r in rows), reverse=True)
    alloc = layer_partitioned_curve(lk, [10, 20], by_allocation=True)
    equal = layer_partitioned_curve(lk, [10, 20])
    assert (alloc.decode_hits >= equal.decode_hits).all()


def test_binary_routing_trace_replays_like_the_same_routing() -> None:
    from bmoe_top.parsers.routing_bin import parse_routing_bin, routing_bin_bytes
    from bmoe_top.tui.analysis.lookups import from_routing_bin

    rng = np.random.default_rng(12)
    from helpers.routing import random_routing

    dec = random_routing(rng, 30, 3, 8, 2)
    layer = np.tile(np.arange(3), 30)
    data = routing_bin_bytes(layer, dec.reshape(-1, 2))
    lk = from_routing_bin(parse_routing_bin(data), 8, [2, 3, 2])
    ref = from_routing(dec, [2, 3, 2], 8)
    assert np.array_equal(lk.item, ref.item) and np.array_equal(lk.batch, ref.batch)
    slots = from_routing_bin(parse_routing_bin(data), 8)
    assert not slots.sizes_known and slots.bank_bytes == 3 * 8
    # the same routing written layer by layer (read through the records' token and layer, not
    # as they lie in the file), and a repeated id in a row (one lookup, fewer than the ids)
    dec[4, 1, 1] = dec[4, 1, 0]
    ref = from_routing(dec, [2, 3, 2], 8)
    assert ref.n == 30 * 3 * 2 - 1
    by_token = from_routing_bin(parse_routing_bin(routing_bin_bytes(layer, dec.reshape(-1, 2))), 8, [2, 3, 2])
    layer_major = routing_bin_bytes(np.repeat(np.arange(3), 30), dec.transpose(1, 0, 2).reshape(-1, 2))
    by_layer = from_routing_bin(parse_routing_bin(layer_major), 8, [2, 3, 2])
    for got in (by_token, by_layer):
        assert np.array_equal(got.item, ref.item) and np.array_equal(got.batch, ref.batch)
        assert np.array_equal(got.token, ref.token) and np.array_equal(got.decode, ref.decode)


def test_lookups_from_bytes() -> None:
    from helpers import FIXTURES

    from bmoe_top.parsers.routing_bin import routing_bin_bytes
    from bmoe_top.tui.analysis.lookups import from_bytes

    lk, notes = from_bytes((FIXTURES / "parsers" / "route_small.csv").read_bytes(), "route_small.csv")
    assert lk.n_layer == 3 and lk.sizes_known and lk.n > 0
    data = routing_bin_bytes([0, 1, 0, 1], [[1, 2], [3, 0], [2, 1], [0, 3]])
    lk2, notes2 = from_bytes(data, "t.bin")
    assert lk2.n_decode_tokens == 2 and not lk2.sizes_known
    assert any("n_expert taken as 4" in n for n in notes2) and any("expert slots" in n for n in notes2)
    with pytest.raises(ValueError, match="not a route trace"):
        from_bytes(b"step,wall_ms,io_ms,compute_ms\n1,2,3,4\n", "x.csv")


@SETTINGS
@given(lk=traces(), chunk=st.integers(1, 9))
def test_lru_state_compacted_log_changes_nothing(lk: Lookups, chunk: int) -> None:
    """A log of a few lookups, compacted again and again, and the trace fed in pieces: the same
    hit flags and counts as one feed with room for everything."""
    budgets = np.arange(0, lk.bank_bytes + 2, dtype=np.int64)
    whole = C.LruState(lk.n_items, lk.n_layer, lk.item_bytes, budgets)
    want = np.zeros((lk.n, budgets.shape[0]), dtype=np.uint8)
    whole.feed(lk.item, lk.batch_first(), lk.decode, hit_out=want)
    small = C.LruState(lk.n_items, lk.n_layer, lk.item_bytes, budgets, chunk=chunk)
    got = np.zeros_like(want)
    bf = lk.batch_first()
    cut = lk.n_batches // 2
    small.feed(lk.item, bf, lk.decode, 0, cut, hit_out=got)
    small.feed(lk.item, bf, lk.decode, cut, lk.n_batches, hit_out=got)
    assert np.array_equal(got, want)
    for a, b in zip(small.counts(), whole.counts()):
        assert np.array_equal(a, b)
    assert lk.n <= lk.n_items + chunk or small.compactions > 0


def test_run_tasks_runs_what_a_task_returns_before_what_waits() -> None:
    ran: list[str] = []

    def task(name: str, *more: C.Task) -> C.Task:
        def run() -> list[C.Task]:
            ran.append(name)
            return list(more)
        return run

    C.run_tasks([task("a", task("a1", task("a11")), task("a2")), task("b")], threads=1)
    assert ran == ["a", "a1", "a11", "a2", "b"]
    ran.clear()
    C.run_tasks([task(f"t{i}", *(task(f"t{i}.{j}") for j in range(i % 3))) for i in range(40)], threads=3)
    assert sorted(ran) == sorted([f"t{i}" for i in range(40)] + [f"t{i}.{j}" for i in range(40) for j in range(i % 3)])


@pytest.mark.parametrize("threads", [1, 2])
def test_run_tasks_raises_the_first_error(threads: int) -> None:
    ran: list[int] = []

    def bad() -> list[C.Task]:
        raise ValueError("bad budget")

    with pytest.raises(ValueError, match="bad budget"):
        C.run_tasks([bad, *(functools.partial(ran.append, i) for i in range(5))], threads=threads)
    if threads == 1:
        assert ran == []  # nothing starts after the error
