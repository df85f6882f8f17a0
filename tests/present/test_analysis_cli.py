"""The headless analysis commands as a user runs them (through the CLI's ``main``): ``bmoe-top
whatif --json / --budgets / --strp`` and ``bmoe-top compare --json / --md / --csv``, with golden
files (``BMOE_UPDATE_GOLDEN=1`` rewrites them), their input forms and their errors."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import synth
from helpers.documents import masked
from helpers.golden import check_golden, check_golden_text
from helpers.pagecache import cached_model
from helpers.typed_json import check_typed

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.parsers.routing_bin import routing_bin_bytes
from bmoe_top.parsers.strp import read_strp
from bmoe_top.tui.cli import main
from bmoe_top.tui.present.compare import CompareDocument
from bmoe_top.tui.present.whatif import WhatIfDocument, WhatIfProfileDocument

GOLDEN = Path(__file__).resolve().parent / "golden"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture
def run_files(tmp_path: Path) -> dict[str, str]:
    """One synthetic run: its route trace (8 layers x 32 experts of 1 MiB, top-2) and its CSV sink
    (cache_mb=64 in the header; read MiB and io_s in its summary give the read bandwidth)."""
    out = {}
    for name, data in (("run.route.csv", synth.route_trace(48, seed=5)), ("run.csv", synth.token_csv(48, seed=6))):
        (tmp_path / name).write_bytes(data)
        out[name] = str(tmp_path / name)
    return out


def test_whatif_json_golden(tmp_path, capsys, run_files) -> None:
    code, out, err = cli(capsys, "whatif", "--json", "--ram", "160M", "--dense-mib", "16", "--runtime-mib", "8",
                         "--readahead-kb", "512", *run_files.values())
    assert code == 0, err
    doc = orjson.loads(out)
    inp = doc["input"]
    assert inp["run_budget_mib"] == 64.0 and inp["run_budget_from"] == "run header cache_mb"
    assert inp["read_mib_s"] > 0 and inp["read_mib_s_from"] == "run summary read_mib_s"
    assert inp["budget_unit"] == "MiB"
    assert doc["hit_definition"].startswith("decode hits / decode lookups")
    assert doc["token_cycle_mib"] == 16.0 and doc["bank_mib"] == 256.0
    lru = next(c for c in doc["curves"] if c["policy"] == "lru")
    assert lru["budgets_mib"][0] == 16.0 and lru["budgets_mib"][-1] == 256.0 and 64.0 in lru["budgets_mib"]
    speed = doc["speed"]
    si = speed["inputs"]
    assert speed["levels"] == 2 and speed["mode"] == "serial"
    assert (si["ram_bytes"], si["ram_from"]) == (160 * 2**20, "--ram")
    assert (si["dense_bytes"], si["runtime_bytes"], si["readahead_bytes"]) == (16 * 2**20, 8 * 2**20, 512 * 1024)
    assert si["read_mb_s"] == pytest.approx(1174.0 * 1.048576 * 2) and si["missing"] == []
    assert si["read_mb_s_from"] == "the run: run summary read_mib_s x 2 lane(s)"
    sl = next(p for p in speed["policies"] if p["policy"] == "lru")
    assert sl["budgets_mib"] == lru["budgets_mib"]
    # 160 - 16 - 8 = 136 MiB for both levels: budgets past it do not fit
    assert [b <= 136 for b in sl["budgets_mib"]] == sl["fits"]
    assert speed["mmap"]["budget_mib"] == 0.0 and speed["run_check"]["budget_mib"] == 64.0
    check_golden(GOLDEN / "whatif_cli.json", masked(doc, {str(tmp_path): "<tmp>"}))
    check_typed(doc, WhatIfDocument)
    with pytest.raises(AssertionError, match=r"\$\.skew: keys missing \[\], keys not in SkewDoc \['extra'\]"):
        check_typed({**doc, "skew": {**doc["skew"], "extra": 1}}, WhatIfDocument)
    with pytest.raises(AssertionError, match=r"\$\.input: keys missing \['trace'\]"):
        check_typed({**doc, "input": {k: v for k, v in doc["input"].items() if k != "trace"}}, WhatIfDocument)


def test_whatif_speed_inputs_from_flags_settings_and_absent(tmp_path, capsys, run_files) -> None:
    """--bandwidth wins; without it and without the run's bandwidth the remembered probe is used
    (and named); with neither the tok/s is absent, named with the flags, never 0; a bad --ram is
    one sentence."""
    trace = run_files["run.route.csv"]
    code, out, err = cli(capsys, "whatif", "--json", "--bandwidth", "500", "--ram", "1G", *run_files.values())
    assert code == 0, err
    si = orjson.loads(out)["speed"]["inputs"]
    assert (si["read_mb_s"], si["read_mb_s_from"]) == (500.0, "--bandwidth")
    assert any("--dense-mib" in m for m in si["missing"])  # no dense weights: one level
    code, out, _ = cli(capsys, "whatif", "--json", "--no-config", trace)
    sp = orjson.loads(out)["speed"]
    assert sp["policies"] == [] and sp["levels"] == 0 and sp["mmap"] is None and sp["run_check"] is None
    assert any("--bandwidth MB/s" in m for m in sp["inputs"]["missing"]) and sp["inputs"]["read_mb_s"] is None
    config = tmp_path / "settings.toml"
    config.write_text('[probe]\nfile = "/m.gguf"\nslice_bytes = 1048576\ndirect_mb_s = [640.0, 900.0]\n')
    code, out, err = cli(capsys, "--config", str(config), "whatif", "--json", *run_files.values(), "--read-mib-s",
                         "100")
    si = orjson.loads(out)["speed"]["inputs"]  # the run's (here overridden) bandwidth wins over the probe
    assert code == 0 and si["read_mb_s_from"] == "--read-mib-s x 2 lane(s)"
    assert si["read_mb_s"] == pytest.approx(100 * 1.048576 * 2)
    code, out, err = cli(capsys, "--config", str(config), "whatif", "--json", trace)
    si = orjson.loads(out)["speed"]["inputs"]
    assert (si["read_mb_s"], si["read_mb_s_from"]) == (640.0, "settings [probe] O_DIRECT at queue depth 1 (/m.gguf)")
    for bad in ("lots", "-3G", "12X"):
        with pytest.raises(SystemExit) as e:
            main(["whatif", "--json", f"--ram={bad}", trace])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "is not a size" in err and "Traceback" not in err


def test_whatif_model_replays_plain_mmap_page_cache(tmp_path, capsys) -> None:
    """--model gives the file's expert offsets: plain mmap's bytes a token come from the page cache
    replayed over the trace (none once the RAM holds the file), and the input says so."""
    model = cached_model("tiny")  # 2 layers x 8 experts, top-2
    files = []
    for name, data in (("run.route.csv", synth.route_trace(24, n_layer=2, n_expert=8, seed=3)),
                       ("run.csv", synth.token_csv(24, seed=4, n_layer=2, n_expert=8))):
        (tmp_path / name).write_bytes(data)
        files.append(str(tmp_path / name))
    lay = read_layout(model)
    short = f"{(lay.file_size - lay.expert_bank_bytes + lay.expert_bank_bytes // 4) // 1024}K"  # a quarter of the bank
    got = {}
    for ram in (short, "1G"):
        code, out, err = cli(capsys, "whatif", "--json", "--no-config", "--bandwidth", "1000", "--model", str(model),
                             "--ram", ram, "--readahead-kb", "128", *files)
        assert code == 0, err
        si = orjson.loads(out)["speed"]["inputs"]
        assert si["mmap_from"].startswith("the page cache replayed over the trace")
        got[ram] = si["mmap_read_per_token"]
    assert got[short] > 0 and got["1G"] == 0


def test_whatif_budgets_and_errors(tmp_path, capsys, run_files) -> None:
    code, out, _ = cli(capsys, "whatif", "--json", "--budgets", "10, 20,40", run_files["run.route.csv"])
    assert code == 0
    doc = orjson.loads(out)
    assert {c["policy"]: c["budgets_mib"] for c in doc["curves"]}["belady"] == [10.0, 20.0, 40.0]
    assert doc["input"]["run_budget_mib"] is None and any("no run budget" in n for n in doc["input"]["notes"])
    for bad, msg in ((["--budgets", "10,x"], "'x' is not a number"), (["--budgets", "-5"], "must be a finite"),
                     (["--budgets", ","], "no values")):
        code, _, err = cli(capsys, "whatif", "--json", *bad, run_files["run.route.csv"])
        assert code == 2 and msg in err and "Traceback" not in err
    code, _, err = cli(capsys, "whatif", "--json", run_files["run.csv"])
    assert code == 1 and "no routing in these files" in err  # an input that cannot be used: 1
    code, _, err = cli(capsys, "whatif", "--json", str(tmp_path / "nope.csv"))
    assert code == 1 and "no such file" in err
    code, _, err = cli(capsys, "whatif", "--json", run_files["run.route.csv"], run_files["run.route.csv"])
    assert code == 1 and "one routing trace at a time" in err


def test_whatif_writes_a_profile_safely(tmp_path, capsys, run_files) -> None:
    out_path = tmp_path / "hot.strp"
    code, out, err = cli(capsys, "whatif", "--strp", str(out_path), *run_files.values())
    assert code == 0, err
    assert "64 slots" in out and "--moe-cache-profile" in out
    prof = read_strp(out_path)
    assert prof.slots == 64 and prof.n_layers == 8 and prof.n_expert == 32
    before = out_path.read_bytes()
    code, _, err = cli(capsys, "whatif", "--strp", str(out_path), *run_files.values())
    assert code == 1 and "already exists" in err and out_path.read_bytes() == before
    link = tmp_path / "link.strp"
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    os.symlink(target, link)
    code, _, err = cli(capsys, "whatif", "--strp", str(link), "--force", *run_files.values())
    assert code == 1 and "symbolic link" in err and target.read_bytes() == b"keep"
    code, out, _ = cli(capsys, "whatif", "--strp", str(out_path), "--force", "--json", "--run-budget", "32",
                       *run_files.values())
    assert code == 0 and orjson.loads(out)["profile"] == {"path": str(out_path), "ranked": prof.n_ranked, "slots": 32}
    check_typed(orjson.loads(out), WhatIfProfileDocument)


def test_whatif_from_bmoe_route_lines_and_a_binary_trace(tmp_path, capsys) -> None:
    t = tmp_path / "stdout.txt"
    t.write_bytes(synth.progress_transcript(24))
    code, out, err = cli(capsys, "whatif", "--json", str(t))
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["input"]["routing_from"] == "BMOE_ROUTE lines"
    assert doc["input"]["sizes"].startswith("estimated") and doc["input"]["run_budget_mib"] == 16.0
    assert doc["decode_tokens"] == 24 and doc["n_layer"] == 4
    # the binary layout: no sizes, so budgets are expert slots
    rng = np.random.default_rng(3)
    layer = np.tile(np.arange(4), 30)
    experts = np.stack([rng.choice(16, 2, replace=False) for _ in layer])
    b = tmp_path / "routing.bin"
    b.write_bytes(routing_bin_bytes(layer, experts))
    code, out, err = cli(capsys, "whatif", "--json", "--n-expert", "16", str(b))
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["input"]["budget_unit"] == "expert slots" and doc["sizes_known"] is False
    assert doc["token_cycle_mib"] == 8.0 and doc["bank_mib"] == 64.0  # 4 layers x top-2, 4 x 16 experts
    assert doc["read_mib_s"] is None


def _compare_files(tmp_path: Path) -> list[str]:
    paths = []
    for i, seed in enumerate((11, 12, 13, 14)):
        p = tmp_path / f"r{i}.csv"
        p.write_bytes(synth.token_csv(60, seed=seed))
        paths.append(str(p))
    return paths


def _close_csv(got: str, want: str) -> None:
    a, b = list(csv.reader(io.StringIO(got))), list(csv.reader(io.StringIO(want)))
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert len(ra) == len(rb)
        for x, y in zip(ra, rb):
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                assert x == y
                continue
            assert math.isclose(fx, fy, rel_tol=1e-9, abs_tol=1e-12), (x, y)


def test_compare_outputs_golden(tmp_path, capsys) -> None:
    a0, a1, b0, b1 = _compare_files(tmp_path)
    code, out, err = cli(capsys, "compare", "--json", a0, b0)
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["arms"] == ["r0", "r2"] and doc["arms_input"][0]["runs"][0]["token_rows"] == 60
    wall = next(m for m in doc["metrics"] if m["metric"] == "wall_ms")
    assert wall["deltas"][0]["label"] == "within-run only: order and thermal drift not covered"
    check_golden(GOLDEN / "compare_cli.json", masked(doc, {str(tmp_path): "<tmp>"}))
    check_typed(doc, CompareDocument)
    code, md, _ = cli(capsys, "compare", "--md", a0, b0)
    assert code == 0 and md.startswith("| metric | Δ r2 | verdict | r0 | r2 | 95% CI of Δ | p |")
    assert "Warm-up (MSER-5): r0 steady from token" in md
    check_golden_text(GOLDEN / "compare_cli.md", md)
    code, text, _ = cli(capsys, "compare", "--csv", f"{a0},{a1}", "vs", f"{b0},{b1}")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    walls = [r for r in rows if r["metric"] == "wall_ms"]
    assert [r["arm"] for r in walls] == ["r0 (2 runs)", "r2 (2 runs)"] and walls[0]["runs"] == "2"
    assert "Mann-Whitney" in walls[1]["method"]
    path = GOLDEN / "compare_cli_runs.csv"
    if os.environ.get("BMOE_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    _close_csv(text, path.read_text())


def test_compare_arm_forms_and_errors(tmp_path, capsys) -> None:
    a0, a1, b0, _ = _compare_files(tmp_path)
    side = tmp_path / "r0.metrics"
    side.write_text("cpu_temp_before_mC=41000\nmem_avail_before_kb=4000000\npeak_rss_kb=3000000\n")
    code, out, err = cli(capsys, "compare", "--json", "--arm", f"base={a0}+{side}", "--arm", f"new={b0}")
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["arms"] == ["base", "new"] and doc["arms_input"][0]["runs"][0]["files"] == [a0, str(side)]
    assert [r["key"] for r in doc["contamination"]["rows"]] == ["temperature_c", "mem_available_mib"]
    assert any(m["metric"] == "peak_rss_mib" for m in doc["metrics"])
    code, _, err = cli(capsys, "compare", "--json", a0)
    assert code == 2 and "at least two arms" in err
    code, _, err = cli(capsys, "compare", "--json", a0, str(tmp_path / "missing.csv"))
    assert code == 1 and "no such file" in err
    code, _, err = cli(capsys, "compare", "--json", "--md", a0, a1)
    assert code == 2 and "choose one of" in err
    code, _, err = cli(capsys, "compare", "--json", "--arm", "nameonly", a0)
    assert code == 2 and "NAME=FILES" in err
    empty = tmp_path / "r.route.csv"
    empty.write_bytes(synth.route_trace(8))
    code, _, err = cli(capsys, "compare", "--json", a0, str(empty))
    assert code == 1 and "no per-token rows" in err
    # rows whose times are all garbage: an empty table and exit 0 before
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"step,steps,wall_ms\n1,2,\x1b[31mRED\x1b[0m\n2,2,nan\n")
    code, out, err = cli(capsys, "compare", "--md", a0, str(garbage))
    assert code == 1 and out == "" and "no usable per-token time (2 token rows, wall_ms absent" in err


def test_compare_two_real_csvs(real_runs, capsys) -> None:
    a = real_runs / "bigmoeonedge-2026-07-21" / "bmoe-20260721-090406.csv"
    b = real_runs / "bigmoeonedge-2026-07-22" / "bmoe-20260722-142300.csv"
    code, md, err = cli(capsys, "compare", "--md", str(a), str(b))
    assert code == 0, err
    assert "| wall per token [ms/tok] |" in md and "within-run only" in md
    assert "steady from token 5 of 1469" in md
    code, out, _ = cli(capsys, "compare", "--json", str(a), str(b))
    doc = orjson.loads(out)
    assert {w["tokens"] for w in doc["warmup"]} == {67, 1469}
    hit = next(m for m in doc["metrics"] if m["metric"] == "hit_pct")
    assert hit["deltas"][0]["verdict"] == "differs"


def test_whatif_refuses_an_expert_size_out_of_range_with_one_line(tmp_path, capsys):
    trace = tmp_path / "huge.route.csv"
    trace.write_bytes(synth.route_trace(16, seed=5).replace(b"# layer=3 expert_bytes=1048576",
                                                           b"# layer=3 expert_bytes=1000000000000000000000"))
    code, out, err = cli(capsys, "whatif", "--json", str(trace))  # was an OverflowError traceback
    assert code == 0 and err == ""
    doc = orjson.loads(out)
    assert f"{trace}: line 6: layer header refused: expert_bytes=1000000000000000000000 is not a size from 0 to " \
           "1 TiB (parsers/limits.py)" in doc["input"]["notes"]
    assert doc["sizes_known"] is False  # that layer's size is unknown: budgets are expert slots
