"""The simulator against the runtime: a real ``bmoe-run --route-trace`` run on a generated model.

The replayed LRU at the run's budget must give exactly the hits the runtime recorded: every
lookup's residency flag in the trace (prefill and decode), the decode hit % of the run's CSV
summary, and the ``moe-cache:`` line. Budgets are chosen so the prompt's batches overflow the
budget and decode evicts all the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bmoe_top.parsers.route_trace import load_route_trace
from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.tui.analysis import cachesim as C
from bmoe_top.tui.analysis.lookups import from_route_trace

MIB = 1024 * 1024
PROMPT = ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
          "print([fib(i) for i in range(12)])\n")


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "demo.gguf", preset="demo", qtype="q8_0", seed=2))


def _bmoe_run(*args: str, stdin: str | None = None) -> str:
    p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", *args], input=stdin, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def _check(trace_path: Path, budget: int, prefill_batch: int | None) -> tuple[float, float]:
    tr = load_route_trace(trace_path.read_bytes())
    assert not tr.problems
    lk = from_route_trace(tr, prefill_batch=prefill_batch)
    assert (lk.recorded_hit >= 0).all()
    flags = C.lru_hit_flags(lk, [budget])[:, 0]
    # every lookup, prefill and decode, as the runtime recorded it
    bad = np.flatnonzero(flags != lk.recorded_hit)
    assert bad.size == 0, f"{bad.size} of {lk.n} lookups differ (first at {bad[:5].tolist()})"
    assert lk.n_decode_lookups > 0 and (flags[lk.decode] == 0).any() and (flags[lk.decode] == 1).any()
    curve = C.lru_curve(lk, [budget])
    return float(curve.decode_hit_pct[0]), float(100.0 * lk.recorded_hit[lk.decode].mean())


@pytest.mark.parametrize("batch", [None, 16])
def test_one_shot_run_replays_exactly(demo_model: Path, tmp_path: Path, batch: int | None) -> None:
    cache_mb = 2.5
    trace, csv = tmp_path / "route.csv", tmp_path / "tokens.csv"
    args = ["-m", str(demo_model), "-p", PROMPT, "-n", "48", "-c", "512", "-t", "1", "--quiet",
            "--cache-mb", str(cache_mb), "--route-trace", str(trace), "--csv", str(csv), "--temp", "0.8",
            "--seed", "3"]
    if batch:
        args += ["-b", str(batch)]
    out = _bmoe_run(*args)
    replay, recorded = _check(trace, int(cache_mb * MIB), batch)
    assert replay == pytest.approx(recorded, rel=1e-12)  # the same lookups, the mean taken two ways
    table = load_token_csv(csv.read_bytes())
    summary_pct = float(table.summary["cache_hit_pct"])
    assert round(replay, 2) == pytest.approx(summary_pct, abs=1e-9)
    line = next(ln for ln in out.splitlines() if ln.startswith("moe-cache:") and "% hit" in ln)
    assert line.startswith(f"moe-cache: {replay:.2f}% hit")


def test_session_turns_share_the_cache(demo_model: Path, tmp_path: Path) -> None:
    """Two turns of a session (the second continues the conversation): the cache carries over,
    the second prompt is its own prefill batch."""
    cache_mb = 3.0
    trace = tmp_path / "route.csv"
    reqs = [
        {"cmd": "generate", "id": 1, "prompt": PROMPT, "n_predict": 24},
        {"cmd": "generate", "id": 2, "prompt": "\nprint(fib(20))\n", "n_predict": 24, "clear_kv": False},
        {"cmd": "close"},
    ]
    out = _bmoe_run("-m", str(demo_model), "--session", "-c", "512", "-t", "1", "--quiet", "--cache-mb", str(cache_mb),
                    "--route-trace", str(trace), stdin="".join(json.dumps(r) + "\n" for r in reqs))
    assert out.count("BMOE_DONE") == 2
    tr = load_route_trace(trace.read_bytes())
    assert sorted(set(tr.turn.tolist())) == [0, 1]
    replay, recorded = _check(trace, int(cache_mb * MIB), None)
    assert replay == pytest.approx(recorded, rel=1e-12)  # the same lookups, the mean taken two ways


def test_strp_from_a_trace_feeds_the_runtime(demo_model: Path, tmp_path: Path) -> None:
    """Write a profile from one run's trace, start a second run from it: the second run's
    residency equals the LRU replay warm-started from that profile, lookup for lookup."""
    from bmoe_top.parsers.strp import read_strp, write_strp
    from bmoe_top.tui.analysis.lookups import with_profile

    cache_mb = 2.5
    first = tmp_path / "first.csv"
    _bmoe_run("-m", str(demo_model), "-p", PROMPT, "-n", "32", "-c", "512", "-t", "1", "--quiet", "--cache-mb",
              str(cache_mb), "--route-trace", str(first))
    lk1 = from_route_trace(load_route_trace(first.read_bytes()))
    prof = C.strp_from_lookups(lk1, slots=int(cache_mb * MIB) // int(lk1.layer_bytes().max()))
    path = tmp_path / "hot.strp"
    write_strp(path, prof)
    assert np.array_equal(read_strp(path).pairs, prof.pairs)
    second = tmp_path / "second.csv"
    _bmoe_run("-m", str(demo_model), "-p", "def", "-n", "32", "-c", "512", "-t", "1",
              "--quiet", "--cache-mb", str(cache_mb), "--route-trace", str(second), "--moe-cache-profile", str(path))
    lk2 = from_route_trace(load_route_trace(second.read_bytes()))
    warm = with_profile(lk2, prof.pairs)
    flags = C.lru_hit_flags(warm, [int(cache_mb * MIB)])[:, 0]
    real = warm.recorded_hit >= 0
    assert np.array_equal(flags[real], warm.recorded_hit[real])
    # and the fill mattered: replayed cold, the short prompt's lookups could not have hit
    cold = C.lru_hit_flags(lk2, [int(cache_mb * MIB)])[:, 0]
    assert int(flags[real].sum()) > int(cold.sum())
