"""The diagnosis rules (docs/diagnosis.md): each fires on a run that shows it (a real recorded run
where one does, else a run model built here) and stays quiet on one that must not; absent inputs
never fire; the line fits its width."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import REAL_RUNS
from helpers.typed_json import check_typed
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.tui.headless import replay
from bmoe_top.tui.model import KEEP_ALL, RunModel
from bmoe_top.tui.model import diagnosis as D
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.model.quantities import CATALOGUE
from bmoe_top.tui.present.diagnosis import NO_PROBLEM, FindingDoc, diagnosis_document, diagnosis_line

GEMMA_SERIAL = ("bigmoeonedge-2026-07-12/gemma_stream.csv", "bigmoeonedge-2026-07-12/gemma_stream.log")
QWEN_OVERLAP = ("bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.csv", "bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.log",
                "bigmoeonedge-2026-07-12/qwen_c4000_l4_ov.metrics")
PHONE_2026_07_22 = ("bigmoeonedge-2026-07-22/bmoe-20260722-142300.csv",)
EVERY_REAL_RUN = (GEMMA_SERIAL, QWEN_OVERLAP, PHONE_2026_07_22, ("bigmoeonedge-2026-07-12-pr23/gemma_base.csv",),
                  ("bigmoeonedge-2026-07-21/bmoe-20260721-090406.csv",))


def real(files: tuple[str, ...]) -> RunModel:
    if not REAL_RUNS.is_dir():
        pytest.skip("../shared/data/real-runs is not beside the repo")
    run, bad = replay([str(REAL_RUNS / f) for f in files])
    assert not bad
    return run


def synth(n: int = 96, **columns: object) -> RunModel:
    """A run of ``n`` token rows; each column a constant, or a function of the row index array."""
    run = RunModel(KEEP_ALL)
    i = np.arange(n, dtype=np.float64)
    cols = {k: (v(i) if callable(v) else np.full(n, float(v))) for k, v in columns.items()}  # type: ignore[arg-type]
    run.add_token_rows(cols, n)
    return run


def rules_of(run: RunModel, probe: float | None = None) -> list[str]:
    return [x.rule for x in D.diagnose(run, probe)[1]]


# -- the path and the bottleneck ----------------------------------------------------------------

def test_the_path_and_the_bottleneck_of_real_runs():
    serial = D.facts(real(GEMMA_SERIAL))
    assert (serial.path, serial.bottleneck) == ("streaming serial", "flash wait")
    overlap = D.facts(real(QWEN_OVERLAP))
    assert (overlap.path, overlap.bottleneck) == ("streaming with overlap", "compute")


def test_the_path_from_the_run_header_and_the_bottleneck_of_each_kind():
    resident = synth(wall_ms=50, compute_ms=45, mgmt_ms=1)
    resident.update_meta({"moe_stream": "0"})
    assert D.running_path(resident) == "resident"
    pre = synth(wall_ms=50, io_ms=60, stall_ms=30, compute_ms=15, mgmt_ms=5)
    pre.update_meta({"moe_stream": "1", "overlap": "1", "prefetch": "1"})
    f = D.facts(pre)
    assert (f.path, f.bottleneck) == ("streaming with overlap, prefetch on", "stall")
    mgmt = synth(wall_ms=50, io_ms=10, compute_ms=10, mgmt_ms=30)
    assert D.facts(mgmt).bottleneck == "cache management"
    faults = synth(wall_ms=50, compute_ms=50, majflt=400)
    assert D.facts(faults).bottleneck == "page faults"
    assert D.facts(RunModel()).path is None and D.facts(RunModel()).bottleneck is None


def test_plain_mmap_for_a_process_attached_by_pid():
    m = MemoryModel()
    f, found = D.diagnose_memory(m)
    assert f.path == "plain mmap" and found == []  # nothing read yet: nothing fires


# -- each rule: one run that fires it, one that must not -------------------------------------

def test_budget_below_one_tokens_cycle():
    dead = synth(wall_ms=200, io_ms=150, read_mib=400, cache_hit_pct=2.0)
    dead.set_cache_mib(budget_mib=100.0)
    f = D.facts(dead)
    assert f.cycle_mib == pytest.approx(400 / 0.98)
    x = D.budget_below_cycle(f)
    assert x is not None and x.value == 100.0 and x.threshold == pytest.approx(400 / 0.98)
    # a real run whose budget (3000 MiB) holds several tokens' experts, at 77 % hits
    assert D.budget_below_cycle(D.facts(real(PHONE_2026_07_22))) is None
    big = synth(wall_ms=200, io_ms=150, read_mib=400, cache_hit_pct=2.0)
    big.set_cache_mib(budget_mib=1000.0)
    assert D.budget_below_cycle(D.facts(big)) is None


def test_cache_management_over_its_share():
    x = D.mgmt_share(D.facts(synth(wall_ms=100, io_ms=30, compute_ms=40, mgmt_ms=30)))
    assert x is not None and x.value == pytest.approx(30.0) and x.quantity == "recent.mgmt_pct"
    # gemma_base (overlap, mgmt 14 % of wall): under the share
    assert D.mgmt_share(D.facts(real(("bigmoeonedge-2026-07-12-pr23/gemma_base.csv",)))) is None


def test_flash_wait_far_below_the_probed_bandwidth():
    run = real(GEMMA_SERIAL)  # serial, 71 % of wall waiting on flash at about 2.1 GB/s
    x = D.flash_below_probe(D.facts(run, probe_mb_s=5000.0))
    assert x is not None and x.value == pytest.approx(2115, rel=0.01) and x.against == 5000.0
    assert D.flash_below_probe(D.facts(run, probe_mb_s=3000.0)) is None  # over half of the probe
    assert D.flash_below_probe(D.facts(run)) is None  # nothing probed: no guess


def test_page_cache_starved():
    starved = synth(wall_ms=100, compute_ms=100, mem_available_mib=lambda i: np.where(i < 60, 3000.0, 300.0),
                    majflt=lambda i: np.where(i < 60, 2.0, 40.0))
    x = D.page_cache_starved(D.facts(starved))
    assert x is not None and x.value == 300.0
    # the phone run of 2026-07-22: MemAvailable 1.2 GiB, faults flat
    assert D.page_cache_starved(D.facts(real(PHONE_2026_07_22))) is None
    flat = synth(wall_ms=100, compute_ms=100, mem_available_mib=300.0, majflt=40.0)
    assert D.page_cache_starved(D.facts(flat)) is None  # low, but faults not rising


def test_thermal_and_memory_events_of_the_device_sidecar():
    assert D.device_thermal(D.facts(real(QWEN_OVERLAP))) is None  # CPU 70.2 °C, battery 39.4 °C
    assert D.device_memory(D.facts(real(QWEN_OVERLAP))) is None  # floor 2.0 GiB
    hot = synth(wall_ms=100)
    hot.update_sidecar({"cpu_temp_max_mC": "91000", "mem_avail_floor_kb": "150000"})
    x = D.device_thermal(D.facts(hot))
    assert x is not None and x.value == 91.0 and x.quantity == "device.cpu_temp_max"
    y = D.device_memory(D.facts(hot))
    assert y is not None and y.value == pytest.approx(150000 / 1024)


def test_tok_s_collapse_against_the_first_steady_window():
    falls = synth(200, wall_ms=lambda i: np.where(i < 120, 66.0, 1000.0), compute_ms=60)
    x = D.tok_s_collapse(D.facts(falls))
    assert x is not None and x.value == pytest.approx(1.0) and x.against == pytest.approx(1000 / 66)
    # the phone run of 2026-07-22: faster at its end than at its start
    assert D.tok_s_collapse(D.facts(real(PHONE_2026_07_22))) is None
    short = synth(40, wall_ms=lambda i: np.where(i < 20, 66.0, 1000.0))
    assert D.tok_s_collapse(D.facts(short)) is None  # no steady window apart from the newest


def _profile_run(late_in_profile: bool) -> RunModel:
    run = synth(128, wall_ms=100, compute_ms=100)
    n_layer, n_expert = 4, 16
    rank = np.full((n_layer, n_expert), -1, dtype=np.int32)
    rank[:, :4] = np.arange(4)  # the profile ranks experts 0-3 of each layer
    run.set_dims(n_layer=n_layer, n_expert=n_expert, top_k=2)
    run.set_expert_rank(rank)
    tok = np.repeat(np.arange(128), n_layer * 2)
    layer = np.tile(np.repeat(np.arange(n_layer), 2), 128)
    early = np.tile([0, 1], 128 * n_layer)
    late = early + (0 if late_in_profile else 8)
    expert = np.where(tok < 64, early, late)
    run.add_routes(tok, layer, expert, np.zeros_like(tok))
    return run


def test_a_profile_that_no_longer_matches_the_routing():
    x = D.profile_stale(D.facts(_profile_run(late_in_profile=False)))
    assert x is not None and x.value == 0.0 and x.against == 100.0
    assert D.profile_stale(D.facts(_profile_run(late_in_profile=True))) is None


def test_no_real_run_is_misdiagnosed():
    """Every real recorded run is healthy by these rules (nothing probed)."""
    for files in EVERY_REAL_RUN:
        f, found = D.diagnose(real(files))
        assert found == [], (files, found)
        assert diagnosis_line(f, found, 80).endswith(NO_PROBLEM)


# -- the line and the document ----------------------------------------------------------------

def test_the_line_names_path_bottleneck_and_the_number_and_fits():
    dead = synth(wall_ms=200, io_ms=150, read_mib=400, cache_hit_pct=2.0, mgmt_ms=45)
    dead.set_cache_mib(budget_mib=100.0)
    f, found = D.diagnose(dead)
    assert [x.rule for x in found] == ["budget_below_cycle", "mgmt_share"]
    wide = diagnosis_line(f, found, 200)
    assert wide.startswith("streaming serial · flash wait · cache off (--cache-mb 0)")
    assert "budget 100 MiB < 408 MiB" in wide and wide.endswith("+1 more")
    for width in (80, 60, 30, 5):
        assert len(diagnosis_line(f, found, width)) <= width
    assert "budget 100 MiB < 408 MiB" in diagnosis_line(f, found, 30)  # the number stays
    doc = diagnosis_document(found)
    assert doc[0]["rule"] == "budget_below_cycle" and doc[0]["value"] == 100.0
    assert "budget 100 MiB" in doc[0]["text"]
    for d in doc:
        check_typed(d, FindingDoc)


def test_every_finding_names_a_catalogue_quantity():
    for x in (D.budget_below_cycle, D.mgmt_share, D.flash_below_probe, D.page_cache_starved, D.device_thermal,
              D.device_memory, D.tok_s_collapse, D.profile_stale):
        assert x in D.RULES
    keys = {"summary.budget_mib", "recent.mgmt_pct", "recent.read_mb_s", "token.mem_available_mib",
            "device.cpu_temp_max", "device.batt_temp_max", "device.mem_floor", "recent.tok_s",
            "recent.profile_cover_pct"}
    assert keys <= CATALOGUE.keys()


# -- absent is not zero ------------------------------------------------------------------------

_opt = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False))
facts_st = st.builds(
    D.Facts, path=st.sampled_from([None, "resident", "streaming serial"]),
    mode=st.sampled_from(["serial", "overlap", "none", "unknown"]), rows=st.integers(0, 64),
    **{f.name: _opt for f in dataclasses.fields(D.Facts) if f.name not in ("path", "mode", "rows", "steady_rows")})

#: The inputs each rule reads: with any one of them absent it must not fire.
INPUTS = {
    D.budget_below_cycle: ("budget_mib", "read_mib", "hit_pct"),
    D.mgmt_share: ("mgmt_ms", "wall_ms"),
    D.flash_below_probe: ("flash_ms", "wall_ms", "probe_mb_s", "read_mib"),
    D.page_cache_starved: ("mem_available_mib", "majflt", "steady_majflt"),
    D.device_thermal: (("cpu_temp_c", "batt_temp_c"),),
    D.device_memory: ("mem_floor_mib",),
    D.tok_s_collapse: ("tok_s", "steady_tok_s"),
    D.profile_stale: ("cover_pct", "steady_cover_pct"),
}


@given(facts_st)
def test_absent_inputs_never_fire(f):
    for rule, needs in INPUTS.items():
        rule(f)  # never raises on any state
        for need in needs:
            names = need if isinstance(need, tuple) else (need,)
            assert rule(dataclasses.replace(f, **dict.fromkeys(names))) is None, (rule.__name__, need)
    found = D.evaluate(f)
    assert len(diagnosis_line(f, found, 80)) <= 80


_col = st.one_of(st.none(), st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1,
                                     max_size=5))


@given(st.integers(0, 150), st.dictionaries(
    st.sampled_from(["wall_ms", "io_ms", "stall_ms", "compute_ms", "mgmt_ms", "read_mib", "cache_hit_pct", "majflt",
                     "mem_available_mib", "cache_budget_mib"]), _col, max_size=10),
    st.dictionaries(st.sampled_from(["moe_stream", "overlap", "prefetch", "cache_mb"]),
                    st.sampled_from(["0", "1", "x", "", "nan", "-5"]), max_size=4))
def test_random_run_models_never_raise(n, columns, meta):
    run = RunModel(KEEP_ALL)
    run.update_meta(meta)
    cols = {k: np.resize(np.asarray(v, dtype=np.float64), n) for k, v in columns.items() if v is not None}
    if n:
        run.add_token_rows(cols, n)
    f, found = D.diagnose(run, probe_mb_s=1000.0)
    assert all(x.path == f.path for x in found)
    for x in found:
        assert np.isfinite(x.value) and np.isfinite(x.threshold)
    assert len(diagnosis_line(f, found, 80)) <= 80
