"""``bmoe-top sweep`` (tui/jobs/sweep.py): the orders by hand, and a real short sweep of the
bundled runtime on the tiny generated model: every run recorded in its folder, each arm's
measured tok/s beside the prediction from the reference run, the JSON document (golden, the
measured numbers masked), a second call resumes without running anything, a run whose routing was
changed is flagged and left out, and a runtime that fails is said, never a traceback."""

from __future__ import annotations

import json
import os
import statistics
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.documents import masked
from helpers.golden import check_golden
from helpers.pagecache import cached_model
from helpers.typed_json import check_typed
from helpers.waits import wait_until

from bmoe_top.tui.analysis.speed import MIB
from bmoe_top.tui.cli import main
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs.sweep import (
    MeasuredRun,
    SweepControl,
    SweepError,
    SweepPlan,
    SweepStopped,
    arm_dir,
    parse_list,
    reference_costs,
    run_sweep,
    schedule,
)
from bmoe_top.tui.jobs.whatif import run_costs
from bmoe_top.tui.present.sweep import SweepDocument, SweepProgress
from bmoe_top.tui.present.whatif import RunCosts

GOLDEN = Path(__file__).resolve().parents[1] / "present" / "golden"


def test_orders_by_hand() -> None:
    plan = SweepPlan(("x",), "m.gguf", (1.0, 2.0, 3.0), runs=3)
    assert list(schedule(plan)) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)]
    rev = SweepPlan(("x",), "m.gguf", (1.0, 2.0, 3.0), runs=3, order="reversed")
    assert [i for _, i in schedule(rev)] == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    rnd = SweepPlan(("x",), "m.gguf", (1.0, 2.0), (1, 2), runs=4, order="random", seed=7)
    got = list(schedule(rnd))
    # every arm once a round, whatever the shuffle, and the same shuffle for the same seed
    for r in range(1, 5):
        assert sorted(i for rr, i in got if rr == r) == [0, 1, 2, 3]
    assert got == list(schedule(rnd))
    assert arm_dir("out", 0.25, 2, 3) == Path("out/c0.25-l2/run3")
    assert parse_list("16, 32,16", "--cache-mb") == (16.0, 32.0)
    for bad, msg in (("x", "not a number"), ("-1", ">= 0"), (",", "no values")):
        with pytest.raises(SweepError, match=msg):
            parse_list(bad, "--cache-mb")
    with pytest.raises(SweepError, match="at least 1"):
        parse_list("0", "--io-threads", lanes=True)


def test_reference_costs_by_hand() -> None:
    """The compute a miss adds is the median of the runs' slopes of compute on misses; a token's
    compute without a miss the median of the runs' mean of compute - misses x that: a run under
    load (every token three times slower) moves neither."""
    miss = 0.5 * MIB  # a miss reads 0.5 MiB
    misses = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 2.0])

    def run(base: float, per_miss: float, noise: float = 0.0) -> MeasuredRun:
        compute = base + per_miss * misses + noise * np.array([1, -1, 0, 1, -1, 0])
        return MeasuredRun(RunCosts(float(compute.mean()), 5.0, 0.0, False, 1, 1.0), compute, misses * 0.5,
                           np.full(6, 5.0))

    c = reference_costs([run(100.0, 20.0), run(100.0, 20.0, noise=3.0), run(300.0, 60.0)], miss)
    assert c.miss_ms == pytest.approx(20.0) and c.compute_ms == pytest.approx(100.0)
    assert (c.mgmt_ms, c.stall_ms, c.overlap, c.lanes, c.measured_tok_s) == (5.0, 0.0, False, 1, None)
    # every token missed alike (a budget below T): no slope; the median of the runs' compute
    flat = [MeasuredRun(RunCosts(v, 5.0, 0.0, False, 1, 1.0), np.full(6, v), np.full(6, 2.0), np.full(6, 5.0))
            for v in (430.0, 2350.0, 520.0)]
    c = reference_costs(flat, miss)
    assert (c.compute_ms, c.miss_ms) == (520.0, 0.0)
    # misses that do not move the compute past its noise (the slope's 95 % interval reaches 0):
    # no compute a miss, a token's compute the median of the runs' mean
    noise = np.array([0.6, -0.5, 0.4, -0.6, 0.5, -0.4])
    loose = [MeasuredRun(RunCosts(v, 5.0, 0.0, False, 1, 1.0), v + noise + 0.05 * misses, misses * 0.5,
                         np.full(6, 5.0)) for v in (4.0, 4.5, 6.0)]
    c = reference_costs(loose, miss)
    assert c.miss_ms == 0.0 and c.compute_ms == pytest.approx(4.5 + noise.mean() + 0.05 * misses.mean())
    with pytest.raises(ValueError):
        reference_costs([], miss)


def test_the_mgmt_an_eviction_adds_by_hand() -> None:
    """The mgmt of a token with no eviction is the median over the reference tokens that evict
    nothing, the mgmt an eviction adds the median of (mgmt - that) / evictions over those that
    do; the median over the runs, so a run under load (three times the mgmt) moves neither."""
    miss = 0.5 * MIB
    ev = np.array([0.0, 0.0, 0.0, 2.0, 4.0, 8.0, 1.0, 3.0])

    def run(base: float, per_evict: float, spike: float = 0.0) -> MeasuredRun:
        mgmt = base + per_evict * ev
        mgmt[5] += spike  # one token met a load spike
        n = ev.shape[0]
        return MeasuredRun(RunCosts(4.0, float(mgmt.mean()), 0.0, False, 1, 1.0), np.full(n, 4.0), np.full(n, 1.0),
                           mgmt)

    c = reference_costs([run(0.1, 0.06), run(0.1, 0.06, spike=5.0), run(0.3, 0.18)], miss, ev)
    assert c.evict_ms == pytest.approx(0.06) and c.mgmt_ms == pytest.approx(0.1)
    # every token evicts (a budget far below the bank): no token tells the base, counted as 0;
    # 1.5 ms a token at 25 evictions is 0.06 ms an eviction
    all_ev = np.array([25.0, 22.0, 28.0, 25.0, 31.0])
    every = MeasuredRun(RunCosts(4.0, 1.5, 0.0, False, 1, 1.0), np.full(5, 4.0), np.full(5, 1.0), 0.06 * all_ev)
    c = reference_costs([every], miss, all_ev)
    assert c.mgmt_ms == 0.0 and c.evict_ms == pytest.approx(0.06)
    # no eviction known (evictions not given, too few evicting tokens, or rows that are not the
    # replay's tokens one to one): the median of the runs' mean mgmt a token, at every budget
    c = reference_costs([every], miss)
    assert c.mgmt_ms == pytest.approx(0.06 * all_ev.mean()) and c.evict_ms == 0.0
    few = np.array([0.0, 0.0, 0.0, 2.0, 4.0])
    assert reference_costs([every], miss, few).evict_ms == 0.0
    assert reference_costs([every], miss, all_ev[:4]) == reference_costs([every], miss)
    # mgmt not in the rows (NaN: not reported): no fit, the summary's mgmt
    blind = MeasuredRun(every.costs, every.compute_ms, every.read_mib, np.full(5, np.nan))
    c = reference_costs([blind], miss, all_ev)
    assert (c.mgmt_ms, c.evict_ms) == (1.5, 0.0)


def sweep(capsys, out: Path, model: Path, *more: str) -> tuple[int, str, str]:
    code = main(["sweep", "-m", str(model), "--cache-mb", "0.3,1.6", "--runs", "2", "-n", "6", "-p", "Hello there",
                 "-o", str(out), "--extra=--quiet", "--extra=-t", "--extra=1", "--json", *more])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_a_real_sweep_on_the_tiny_model(tmp_path, capsys) -> None:
    model = cached_model("tiny")
    out = tmp_path / "sweep"
    code, text, err = sweep(capsys, out, model)
    assert code == 0, err
    doc = orjson.loads(text)
    check_typed(doc, SweepDocument)
    # one progress line a run, with the arm and an ETA until the last
    lines = [x for x in err.splitlines() if x.startswith("sweep [")]
    assert len(lines) == 4 and "ETA" in lines[0] and "0.30 MiB, 1 lane(s), round 1" in lines[0]
    assert doc["reference"] == str(out / "c0.3-l1" / "run1")
    assert [a["cache_mb"] for a in doc["arms"]] == [0.3, 1.6]
    for a in doc["arms"]:
        assert len(a["runs"]) == 2
        for r in a["runs"]:
            d = Path(r["dir"])
            assert {p.name for p in d.iterdir()} >= {"run.csv", "run.route.csv", "run.log", "run.json"}
            rec = json.loads((d / "run.json").read_text())
            assert rec["exit"] == 0 and rec["cache_mb"] == a["cache_mb"] and "--csv" in rec["argv"]
            assert rec["machine"]["cpus"] >= 1
            assert r["tok_s"] > 0 and not r["routing_differs"] and not r["resumed"]
            # the prediction with the run's own compute and mgmt: the read model alone
            assert r["own_costs_tok_s"] > 0
            assert r["own_costs_error_pct"] == pytest.approx(100 * (r["own_costs_tok_s"] - r["tok_s"]) / r["tok_s"])
        assert a["measured_tok_s"] == pytest.approx(sorted(r["tok_s"] for r in a["runs"])[0]
                                                     + (sorted(r["tok_s"] for r in a["runs"])[1]
                                                        - sorted(r["tok_s"] for r in a["runs"])[0]) / 2)
        assert a["predicted_tok_s"] > 0
        assert a["error_pct"] == pytest.approx(100 * (a["predicted_tok_s"] - a["measured_tok_s"]) / a["measured_tok_s"])
    # the larger budget hits more: fewer flash ms predicted
    assert doc["arms"][1]["predicted_hit_pct"] > doc["arms"][0]["predicted_hit_pct"]
    assert doc["arms"][1]["predicted_flash_ms"] < doc["arms"][0]["predicted_flash_ms"]
    assert doc["reference_inputs"]["mode"] == "serial" and doc["reference_inputs"]["compute_ms"] > 0
    errs = sorted(abs(a["error_pct"]) for a in doc["arms"])
    assert doc["max_abs_error_pct"] == pytest.approx(errs[-1])
    assert doc["median_abs_error_pct"] == pytest.approx(sum(errs) / 2)
    # the prediction's costs: the reference arm's runs (both rounds), not one run's
    costs = [run_costs(open_paths([str(Path(r["dir"]) / "run.csv")])) for r in doc["arms"][0]["runs"]]
    ri = doc["reference_inputs"]
    assert ri["costs_runs"] == 2 and ri["miss_ms"] >= 0 and ri["evict_ms"] >= 0
    if ri["evict_ms"] == 0:  # the rows' mean, as for compute
        rows = [open_paths([str(Path(r["dir"]) / "run.csv")]).tokens for r in doc["arms"][0]["runs"]]
        means = [float(np.mean(t.view("mgmt_ms", 0, t.n))) for t in rows]
        assert ri["mgmt_ms"] == pytest.approx(statistics.median(means))
        assert ri["mgmt_ms"] == pytest.approx(statistics.median(c.mgmt_ms for c in costs), abs=0.05)
    else:  # a token's mgmt with no eviction: less than the reference arm's, which evicts
        assert 0 <= ri["mgmt_ms"] <= max(c.mgmt_ms for c in costs)
    if ri["miss_ms"] == 0:  # the mean of the rows (the summary's compute has 0.1 ms steps)
        rows = [open_paths([str(Path(r["dir"]) / "run.csv")]).tokens for r in doc["arms"][0]["runs"]]
        means = [float(np.mean(t.view("compute_ms", 0, t.n))) for t in rows]
        assert ri["compute_ms"] == pytest.approx(statistics.median(means))
        assert ri["compute_ms"] == pytest.approx(statistics.median(c.compute_ms for c in costs), abs=0.05)
    # the spread: (largest - smallest) / median of the arm's runs
    for a in doc["arms"]:
        t = [r["tok_s"] for r in a["runs"]]
        assert a["spread_pct"] == pytest.approx(100 * (max(t) - min(t)) / a["measured_tok_s"])
    volatile = ["arms.*.runs.*.tok_s", "arms.*.measured_tok_s", "arms.*.predicted_tok_s", "arms.*.error_pct",
                "arms.*.predicted_hit_pct", "arms.*.predicted_flash_ms", "median_abs_error_pct", "max_abs_error_pct",
                "arms.*.spread_pct",
                "arms.*.runs.*.own_costs_tok_s", "arms.*.runs.*.own_costs_error_pct", "arms.*.own_costs_error_pct",
                "own_costs_median_abs_error_pct", "own_costs_max_abs_error_pct", "reference_inputs.compute_ms",
                "reference_inputs.mgmt_ms", "reference_inputs.read_mb_s_per_lane",
                "reference_inputs.miss_ms", "reference_inputs.evict_ms"]
    check_golden(GOLDEN / "sweep_cli.json", masked(doc, {str(tmp_path): "<tmp>", str(model): "<model>"}, volatile))

    # resumable: a second call runs nothing again
    before = {p: p.stat().st_mtime_ns for p in out.rglob("run.json")}
    code, text, err = sweep(capsys, out, model)
    assert code == 0, err
    again = orjson.loads(text)
    assert all(r["resumed"] for a in again["arms"] for r in a["runs"]) and "(done before)" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("run.json")} == before
    assert [a["measured_tok_s"] for a in again["arms"]] == [a["measured_tok_s"] for a in doc["arms"]]

    # a run with another decode routing (its trace's experts changed) is flagged and left out
    trace = out / "c1.6-l1" / "run2" / "run.route.csv"
    rows = trace.read_text().splitlines()
    head = rows.index(next(r for r in rows if not r.startswith("#")))
    cols = rows[head].split(",")
    ph, ex = cols.index("phase"), cols.index("expert")
    for j in range(head + 1, len(rows)):
        cells = rows[j].split(",")
        if cells[ph] == "1":
            cells[ex] = str((int(cells[ex]) + 1) % 8)
            rows[j] = ",".join(cells)
    trace.write_text("\n".join(rows) + "\n")
    code, text, err = sweep(capsys, out, model)
    third = orjson.loads(text)
    flagged = third["arms"][1]["runs"][1]
    assert flagged["routing_differs"] and not third["arms"][1]["runs"][0]["routing_differs"]
    assert third["arms"][1]["measured_tok_s"] == third["arms"][1]["runs"][0]["tok_s"]
    assert any("routing differs" in n for n in third["notes"])


def test_a_failing_runtime_is_said(tmp_path, capsys) -> None:
    model = cached_model("tiny")
    code, text, err = sweep(capsys, tmp_path / "bad", model, "--runtime", "/bin/false")
    assert code == 1 and "Traceback" not in err
    doc = orjson.loads(text)
    assert all(r["tok_s"] is None and r["problem"] == "exited with status 1" for a in doc["arms"] for r in a["runs"])
    assert doc["reference"] is None and doc["arms"][0]["predicted_tok_s"] is None
    assert any("no reference run" in n for n in doc["notes"])
    code = main(["sweep", "-m", str(tmp_path / "none.gguf"), "--cache-mb", "1", "-o", str(tmp_path / "x")])
    assert code == 1 and "no such model file" in capsys.readouterr().err
    (tmp_path / "dir.gguf").mkdir()  # a folder said to be missing
    code = main(["sweep", "-m", str(tmp_path / "dir.gguf"), "--cache-mb", "1", "-o", str(tmp_path / "x")])
    assert code == 1 and "dir.gguf: is a directory, not a model file" in capsys.readouterr().err
    code = main(["sweep", "-m", str(model), "--cache-mb", "1", "--order", "sideways", "-o", str(tmp_path / "x")])
    assert code == 2 and "one of interleaved, reversed, random" in capsys.readouterr().err
    # the screen where standard output is not a terminal: refused, pointing to the text forms
    code = main(["sweep", "-m", str(model), "--cache-mb", "1", "-o", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "not a terminal" in err and "--once" in err
    assert not (tmp_path / "x").exists()


def test_a_pause_holds_the_next_run_and_a_stop_ends_the_running_child(tmp_path) -> None:
    """A pause takes effect before the next run; a stop ends the child that runs (its process
    gone, nothing recorded, so the run is made again next time) and raises SweepStopped."""
    pid_file = tmp_path / "child.pid"
    script = f"echo $$ > {pid_file}; exec sleep 60"
    plan = SweepPlan(("sh", "-c", script, "runtime"), "m.gguf", (1.0, 2.0), out=str(tmp_path / "out"))
    control = SweepControl()
    control.pause()
    seen: list[SweepProgress] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            run_sweep(plan, seen.append, control)
        except BaseException as e:  # the thread's outcome, read below
            failed.append(e)

    t = threading.Thread(target=work)
    t.start()
    try:
        # paused before the first run: nothing starts
        wait_until(lambda: Path(plan.out).is_dir(), what="the sweep started")
        assert t.is_alive() and not seen and not pid_file.exists()
        control.resume()
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the child started")
        assert seen and seen[-1].running == (1.0, 1, 1) and seen[-1].done == 0 and seen[-1].left == 1
        pid = int(pid_file.read_text())
        control.stop()
        t.join(30)
        assert not t.is_alive()
    finally:
        control.stop()
        t.join(30)
    assert len(failed) == 1 and isinstance(failed[0], SweepStopped)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (arm_dir(plan.out, 1.0, 1, 1) / "run.json").exists()


def test_the_environment_a_plan_adds_reaches_every_run_and_is_kept(tmp_path) -> None:
    # on crowded cores the bundled runtime's arms run with OMP_WAIT_POLICY=PASSIVE, all alike
    # (a spinning OpenMP barrier made one arm 429 then 11.4 tok/s at load 2.4 on 2 cores)
    seen = tmp_path / "seen"
    script = f'printf "%s\\n" "$OMP_WAIT_POLICY" >> {seen}; exit 1'
    plan = SweepPlan(("sh", "-c", script, "runtime"), "m.gguf", (1.0, 2.0), out=str(tmp_path / "out"),
                     env=(("OMP_WAIT_POLICY", "PASSIVE"),))
    result = run_sweep(plan, lambda p: None, SweepControl())
    assert seen.read_text().split() == ["PASSIVE", "PASSIVE"]
    for mib in (1.0, 2.0):
        rec = json.loads((arm_dir(plan.out, mib, 1, 1) / "run.json").read_text())
        assert rec["env"] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert any("OMP_WAIT_POLICY=PASSIVE" in n for n in result.notes)


def test_the_text_table_shows_each_arms_spread_as_the_document_does(tmp_path) -> None:
    # sweep --once printed no spread where the JSON said 178.7 %: the noise an error is read against
    from helpers.sweep_data import synth_sweep

    from bmoe_top.tui.model.quantities import q
    from bmoe_top.tui.present.numbers import show
    from bmoe_top.tui.present.sweep import sweep_document, sweep_lines

    result = run_sweep(synth_sweep(tmp_path / "out"), lambda p: None, SweepControl())
    doc = sweep_document(result)
    lines = sweep_lines(result)
    assert lines[1].split()[6] == "spread"
    for a, line in zip(doc["arms"], lines[2:]):
        assert a["spread_pct"] is not None and show(q("sweep.spread_pct"), a["spread_pct"]).startswith(line.split()[4])


def test_a_runtime_that_refuses_the_model_says_why_in_the_sweep(tmp_path, capsys) -> None:
    # the reason (bmoe-run: error: not a GGUF file) was only in the arm's run.log; the sweep said
    # "exited with status 2" alone
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"garbage\n")
    code, text, err = sweep(capsys, tmp_path / "out", bad)
    assert code == 1 and "Traceback" not in err
    doc = orjson.loads(text)
    problems = {r["problem"] for a in doc["arms"] for r in a["runs"]}
    assert len(problems) == 1
    [why] = problems
    assert why.startswith("exited with status 2: bmoe-run: error: not a GGUF file"), why
