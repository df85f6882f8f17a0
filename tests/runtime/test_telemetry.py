"""Telemetry conformance of a real ``bmoe-run`` process: every line it writes parses with
``bmoe_top.parsers`` into the numbers its own summary reports (tokens, read MiB, hit %), the CSV
sink and the route trace agree with the BMOE lines, and stdout carries only the protocol.
Bad input gets one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from bmoe_top.parsers.bmoe_lines import Load, Progress, Resident, Route, parse_line
from bmoe_top.parsers.route_trace import load_route_trace
from bmoe_top.parsers.summary_lines import parse_summary_line
from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.runtime.models import make_model

RUN = [sys.executable, "-m", "bmoe_top.runtime.cli"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("rt-tel") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=5)


def run(args, timeout=120, **kw):
    return subprocess.run(RUN + args, capture_output=True, text=True, timeout=timeout, **kw)


def _summary(lines):
    out = {}
    for ln in lines:
        s = parse_summary_line(ln)
        if s is not None and s.kind not in ("banner", "unparsed"):
            out.setdefault(s.kind, {}).update(s.values)
    return out


def test_progress_csv_route_trace_conform(model, tmp_path):
    csv = tmp_path / "run.csv"
    trace = tmp_path / "run.route.csv"
    n = 16
    p = run(["-m", str(model), "-p", "Hello, streaming world", "-n", str(n), "-c", "256", "--progress",
             "--cache-mb", "0.45", "--csv", str(csv), "--route-trace", str(trace), "--route-telemetry",
             "--resident-every", "4"])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    i_ans = lines.index("=== answer ===")
    recs = [parse_line(ln) for ln in lines[:i_ans]]  # BMOE lines escape control characters
    assert all(isinstance(r, (Load, Progress, Route, Resident)) for r in recs), [
        ln for ln, r in zip(lines, recs) if not isinstance(r, (Load, Progress, Route, Resident))]
    prog = [r for r in recs if isinstance(r, Progress)]
    loads = [r for r in recs if isinstance(r, Load)]
    routes = [r for r in recs if isinstance(r, Route)]
    res = [r for r in recs if isinstance(r, Resident)]
    summ = _summary(p.stdout.rsplit("=== perf ===", 1)[1].split("\n"))
    ntok = int(summ["generation"]["tokens"])
    assert len(prog) == ntok and [r.step for r in prog] == list(range(1, ntok + 1))
    assert all(r.steps == n for r in prog)
    # BMOE_LOAD only when bytes were read, and it matches the token's read_mb
    load_mb = sum(r.mb for r in loads)
    assert math.isclose(load_mb, sum(r.read_mb for r in prog), abs_tol=1e-3)
    assert all(r.mb > 0 for r in loads)
    assert math.isclose(summ["moe-stream"]["read_mib"], load_mb, abs_tol=2e-3)
    assert math.isclose(summ["moe-cache"]["cache_hit_pct"], prog[-1].cache_hit_pct, abs_tol=0.01)
    assert "cache_evictions" in summ["moe-cache"] and "cache_rereads" in summ["moe-cache"]
    # compute is the residual wall - io - mgmt (serial)
    for r in prog:
        assert math.isclose(r.compute_ms, r.wall_ms - r.io_ms - r.mgmt_ms, abs_tol=0.01)
        assert r.stall_ms == 0
    # text is cumulative and ends as the answer
    answer = p.stdout.split("=== answer ===\n", 1)[1].rsplit("\n=== perf ===", 1)[0]
    assert prog[-1].text == answer
    # route telemetry: one prefill BMOE_ROUTE (union over the prompt), then one per token;
    # hits recomputed from the decode routes give the hit %
    assert routes[0].phase == "prefill" and routes[0].step == 0
    assert all(len(ex) > 0 for ex in routes[0].experts)
    assert all(h == 0 for hl in routes[0].hit for h in hl)  # first prompt: nothing resident yet
    routes = routes[1:]
    assert all(r.phase == "decode" for r in routes)
    assert [r.step for r in routes] == list(range(1, ntok + 1))
    hits = sum(sum(h) for r in routes for h in r.hit)
    total = sum(len(h) for r in routes for h in r.hit)
    assert math.isclose(100.0 * hits / total, summ["moe-cache"]["cache_hit_pct"], abs_tol=0.01)
    assert [r.step for r in res] == [4, 8, 12, 16][: len(res)] and res
    assert res[-1].budget_mib == pytest.approx(0.45) and res[-1].resident_mib <= 0.45 + 1e-6
    assert math.isclose(res[-1].resident_mib, summ["moe-cache"]["resident_mib"], abs_tol=1e-3)

    # CSV sink: header metadata, 9 columns, same numbers as the BMOE lines
    tab = load_token_csv(csv.read_bytes())
    assert not tab.problems
    assert tab.header[:9] == ["step", "steps", "wall_ms", "io_ms", "compute_ms", "read_bytes", "cache_hit_pct",
                              "stall_ms", "mgmt_ms"]  # the contract's nine first, then the additive columns
    assert {"decode_ms", "xfer_bytes", "hit_pct_since_load", "rss_mib", "majflt", "cpu_ms"} <= set(tab.header)
    for k in ("model", "arch", "n_layer", "n_expert", "n_expert_used", "cache_mb", "io_threads", "o_direct"):
        assert k in tab.meta
    assert tab.meta["arch"] == "qwen3moe" and tab.meta["n_expert"] == "8"
    assert tab.n_rows == ntok
    assert math.isclose(tab.columns["read_bytes"].sum() / 2**20, load_mb, abs_tol=1e-3)
    assert np.allclose(tab.columns["cache_hit_pct"], [r.cache_hit_pct for r in prog], atol=0.01)
    s = tab.summary
    assert s["tokens"] == ntok
    assert math.isclose(s["read_mib"], load_mb, abs_tol=2e-3)
    assert math.isclose(s["cache_hit_pct"], summ["moe-cache"]["cache_hit_pct"], abs_tol=0.01)

    # route trace: decode rows agree with BMOE_ROUTE
    tr = load_route_trace(trace.read_bytes())
    assert not tr.problems
    assert tr.n_layer == 2 and tr.n_expert == 8
    dec = tr.phase == 1
    assert int(dec.sum()) == ntok * 2 * 2  # tokens x layers x top-2
    assert np.array_equal(tr.residency[dec].astype(int),
                          np.array([h for r in routes for hl in r.hit for h in hl]))
    assert (tr.phase == 0).any()  # the prompt was traced too
    w = tr.weight[dec].reshape(-1, 2).sum(axis=1)
    assert np.allclose(w, 1.0, atol=1e-4)  # qwen3moe normalizes top-k weights


def test_inline_mode_and_resident_mode(model):
    p = run(["-m", str(model), "-p", "Hi", "-n", "6", "-c", "256", "--quiet", "--no-moe-stream"])
    assert p.returncode == 0, p.stderr
    assert "BMOE_" not in p.stdout and "===" not in p.stdout
    assert p.stdout.startswith("Hi")
    summ = _summary(p.stdout.splitlines())
    assert "generation" in summ and "moe-stream" not in summ and "moe-cache" not in summ
    q = run(["-m", str(model), "-p", "Hi", "-n", "6", "-c", "256", "--progress", "--no-moe-stream"])
    assert q.returncode == 0
    recs = [parse_line(ln) for ln in q.stdout.splitlines()]
    assert not any(isinstance(r, Load) for r in recs)
    assert all(r.cache_hit_pct == -1 for r in recs if isinstance(r, Progress))
    assert "llama" in q.stderr.lower() or q.stderr == ""  # the library's log never on stdout
    assert not any(ln.startswith(("llama_", "load_", "print_info")) for ln in q.stdout.splitlines())


def test_early_prefetch_line(model):
    """``--early-prefetch`` reads ahead (natively) and says so, tagged; the answer is the resident one."""
    from bmoe_top.runtime import native

    if native.library() is None:
        pytest.skip(f"no native library: {native.native_error}")
    base = ["-m", str(model), "-p", "Another start", "-n", "24", "-c", "256", "--progress", "--quiet"]
    p = run([*base, "--cache-mb", "0.6", "--force-cache", "--early-prefetch", "2"])
    assert p.returncode == 0, p.stderr
    summ = _summary(p.stdout.splitlines())
    assert summ["moe-prefetch"]["prefetch_mode"] == "early-router"
    assert summ["moe-prefetch"]["prefetch_total"] > 0
    q = run([*base, "--no-moe-stream"])
    assert p.stdout.split("=== perf ===")[0].split("=== answer ===")[1] == \
        q.stdout.split("=== perf ===")[0].split("=== answer ===")[1]


def test_overlap_prefetch_lines(model):
    p = run(["-m", str(model), "-p", "Hello there", "-n", "12", "-c", "256", "--progress", "--quiet",
             "--cache-mb", "0.6", "--overlap", "--prefetch", "1", "--io-threads", "2"])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    summ = _summary(lines)
    assert "stall_s_tok" in summ["moe-stream"]
    assert "prefetch_total" in summ["moe-prefetch"]
    prog = [r for r in map(parse_line, lines) if isinstance(r, Progress)]
    for r in prog:  # overlap residual: wall - stall - mgmt
        assert math.isclose(r.compute_ms, max(0.0, r.wall_ms - r.stall_ms - r.mgmt_ms), abs_tol=0.01)


def test_no_cache_mode(model):
    p = run(["-m", str(model), "-p", "Hello", "-n", "5", "-c", "256", "--progress", "--quiet", "--cache-mb", "0"])
    assert p.returncode == 0, p.stderr
    prog = [r for r in map(parse_line, p.stdout.splitlines()) if isinstance(r, Progress)]
    assert prog and all(r.cache_hit_pct == -1 and r.read_mb > 0 for r in prog)
    assert "moe-cache" not in _summary(p.stdout.splitlines())


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-m", "/nonexistent/model.gguf"], "not found"),
        (["-m", "__SELF__"], "not a GGUF"),
        (["-m", "__DENSE__"], "not a Mixture-of-Experts"),
        (["-m", "__MODEL__", "--cache-mb", "0.05"], "working set"),
        (["-m", "__MODEL__", "-c", "256", "-n", "250", "-p", "x" * 40], "exceeds n_ctx"),
        (["-m", "__MODEL__", "--io-threads", "0"], "--io-threads"),
        (["-m", "__MODEL__", "--early-prefetch", "9"], "--early-prefetch"),
        (["-m", "__MODEL__", "--bogus"], "unrecognized"),
    ],
)
def test_bad_input_one_line(model, tmp_path, args, needle):
    dense = tmp_path / "dense.gguf"
    if "__DENSE__" in args:
        import gguf

        w = gguf.GGUFWriter(str(dense), "llama")
        w.add_block_count(1)
        w.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 4), np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    sub = {"__SELF__": os.path.abspath(__file__), "__DENSE__": str(dense), "__MODEL__": str(model)}
    p = run([sub.get(a, a) for a in args] + ["--quiet"])
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], p.stderr
    assert p.stdout == ""


def test_moe_cache_profile_prefills_the_cache(model, tmp_path):
    """An STRP profile traced over the prompt (bmoe-run make-profile) fills the cache at load: the
    prompt's routing then hits where a cold start misses everything."""
    text = tmp_path / "t.txt"
    prompt = "profile me, please"
    text.write_text(prompt)
    prof = tmp_path / "p.strp"
    mk = run(["make-profile", str(model), str(text), "-o", str(prof), "--cache-mb", "1.2"])
    assert mk.returncode == 0, mk.stderr
    base = ["-m", str(model), "-p", prompt, "-n", "4", "-c", "256", "--quiet", "--cache-mb", "1.2",
            "--route-telemetry"]
    cold = run(base)
    warm = run(base + ["--moe-cache-profile", str(prof)])
    assert cold.returncode == 0 and warm.returncode == 0, warm.stderr

    def prefill_hits(out):
        r = next(r for r in map(parse_line, out.splitlines()) if isinstance(r, Route) and r.phase == "prefill")
        return sum(map(sum, r.hit)), sum(map(len, r.hit))

    hc, nc = prefill_hits(cold.stdout)
    hw, nw = prefill_hits(warm.stdout)
    assert hc == 0 and nc == nw and hw > nw // 2
    bad = run(["-m", str(model), "--moe-cache-profile", str(text), "--quiet"])
    assert bad.returncode == 2 and "STRP" in bad.stderr and "Traceback" not in bad.stderr


def test_every_screen_value_from_the_first_token(model, tmp_path):
    """bmoe-run sends what the screen can show: resident/budget, RSS, major faults, CPU time,
    the decode call's time and the page-aligned transfer beside the payload on every token; the
    two hit rates (decode only, since load) and the two tok/s definitions, TTFT and the per-token
    compute / I/O in BMOE_DONE; the no-cache value spelled -1.0 where bmoe-cli consumers read it."""
    import orjson

    from bmoe_top.parsers.bmoe_lines import Done

    req = orjson.dumps({"cmd": "generate", "id": 1, "prompt": "Hello there", "n_predict": 6}).decode()
    p = run(["-m", str(model), "-c", "256", "--session", "--cache-mb", "0.45", "--quiet"], input=req + "\n")
    assert p.returncode == 0, p.stderr
    recs = [parse_line(ln) for ln in p.stdout.splitlines()]
    prog = [r for r in recs if isinstance(r, Progress)]
    first = prog[0].extra
    for k in ("decode_ms", "xfer_mb", "hit_pct_decode", "hit_pct_since_load", "resident_mib", "budget_mib",
              "rss_mib", "majflt", "cpu_ms"):
        assert k in first, k
    assert first["budget_mib"] == pytest.approx(0.45) and first["rss_mib"] > 0 and first["majflt"] >= 0
    assert all(r.extra["xfer_mb"] >= r.read_mb for r in prog)
    assert all(0 < r.extra["decode_ms"] <= r.wall_ms + 1e-3 for r in prog)
    done = next(r for r in recs if isinstance(r, Done))
    d = done.extra
    assert d["tok_s_def"] == "token_wall" and d["decode_tok_s"] >= done.tok_s > 0
    assert d["ttft_s"] > 0 and d["prefill_tps"] > 0 and d["xfer_mib"] >= d["read_mib"] > 0
    assert d["compute_s_tok"] > 0 and d["io_s_tok"] > 0 and d["hit_pct_decode"] == done.cache_hit_pct
    assert 0 <= d["hit_pct_since_load"] <= 100 and d["peak_rss_mib"] >= d["rss_mib"] > 0

    csv = tmp_path / "off.csv"
    q = run(["-m", str(model), "-p", "Hello", "-n", "4", "-c", "256", "--cache-mb", "0", "--csv", str(csv), "--quiet"])
    assert q.returncode == 0, q.stderr
    text = csv.read_text()
    rows = [ln.split(",") for ln in text.splitlines() if ln and ln[0].isdigit()]
    col = text.splitlines()[4].split(",").index("cache_hit_pct")
    assert rows and all(r[col] == "-1.0" for r in rows)
    assert " cache_hit_pct=-1.0 " in text and " hit_pct_since_load=-1.0 " in text
    summ = _summary(q.stdout.splitlines())
    assert summ["prefill"]["ttft_s"] > 0 and summ["generation"]["tok_s"] > 0
    assert "cpu_occupancy_pct" in summ["compute"]
