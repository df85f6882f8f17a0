"""The memory tiers on the layer x expert map (docs/memory.md "The tiers on the maps"): each
BMOE_ROUTE ``tier`` goes from the feed into the route store's per (layer, expert) counts, and the
expert map's tiers view draws each cell from them: against a real ``bmoe-run`` whose reads give
known tiers (buffered after the load: the page cache; O_DIRECT: the disk), a replay of a
transcript with mixed tiers, and a replay of a file without tiers ("not reported", never zeros)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers import synth
from helpers.waits import until

from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import Playback
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.widgets.grids import Cursor, ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.palette import Look

PROMPT = "The experts of every layer"
BMOE_RUN = Path(sys.executable).with_name("bmoe-run")
#: Monochrome ASCII: every cell's meaning is its character (the page-cache share ramp "-+*#").
MONO = Look(colors="mono", ascii=True)


def expected_counts(stdout: bytes, n_layer: int, n_expert: int) -> dict[str, np.ndarray]:
    """Per (layer, expert): routed, hits, page-cache and disk misses, counted from the
    BMOE_ROUTE lines themselves (every line, prefill included)."""
    out = {k: np.zeros((n_layer, n_expert), np.int64) for k in ("routed", "hits", "pagecache", "disk")}
    for ln in stdout.decode().splitlines():
        if not ln.startswith("BMOE_ROUTE "):
            continue
        r = orjson.loads(ln.split(" ", 1)[1])
        tiers = r.get("tier") or [[-1] * len(row) for row in r["experts"]]
        for il, (row, hrow, trow) in enumerate(zip(r["experts"], r["hit"], tiers)):
            for e, h, t in zip(row, hrow, trow):
                out["routed"][il, e] += 1
                out["hits"][il, e] += h
                out["pagecache"][il, e] += t == 1
                out["disk"][il, e] += t == 2
    return out


def map_cells(run: RunModel, look: Look = MONO, width: int = 160, height: int = 30) -> tuple[list[str], list[str]]:
    """The expert map's tiers view, unfolded: its lines, and each layer row's cell characters
    (one per expert)."""
    pb = Playback(run)
    pb.end()
    em = ExpertMap(run, pb)
    em._look = look
    em.tiers = True
    lines = [s.text for s in em.build(width, height)]
    if em._groups is None:
        return lines, []
    _y0, shown, _n_rows, fl, gut = em._geom
    g_start, _g_size, cw, _left, n_cols = em._groups
    assert fl == 1 and n_cols == run.n_expert == len(g_start), "the map folded: make it wider or taller"
    return lines, [lines[2 + i][gut: gut + n_cols * cw: cw] for i in range(shown)]


def want_cells(c: dict[str, np.ndarray]) -> list[str]:
    """What each cell must show: never routed ``.``, no miss ``o``, misses without a tier ``?``,
    else the page-cache share of its misses on the ramp ``-+*#`` (quarters)."""
    rows = []
    for il in range(c["routed"].shape[0]):
        row = ""
        for e in range(c["routed"].shape[1]):
            routed, hits, pc, dk = (int(c[k][il, e]) for k in ("routed", "hits", "pagecache", "disk"))
            if routed == 0:
                row += "."
            elif pc + dk:
                row += "-+*#"[min(3, int(4 * pc / (pc + dk)))]
            else:
                row += "o" if hits == routed else "?"
        rows.append(row)
    return rows


def _bmoe_run(model: Path, out: Path, *extra: str) -> bytes:
    res = subprocess.run(
        [sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "-c", "256", "-n", "8", "-t", "2",
         "--cache-mb", "0.2", "--force-cache", "--progress", "--route-telemetry", "--quiet", "-p", PROMPT, *extra],
        capture_output=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out.write_bytes(res.stdout)
    return res.stdout


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("tiers-map") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=5))


@pytest.mark.parametrize("odirect", [False, True], ids=["buffered", "o_direct"])
def test_a_real_bmoe_run_s_tiers_fill_the_route_store_and_the_map(model, tmp_path, odirect):
    """``bmoe-run --route-telemetry``: buffered, the model was read into the page cache at load,
    so the decode's misses are page-cache ones (cells at the top of the ramp); with O_DIRECT every
    one is a disk miss (the bottom). The replayed stdout gives the route store exactly the
    counts of its BMOE_ROUTE lines, and the map's every cell follows from them."""
    out = tmp_path / "run.txt"
    stdout = _bmoe_run(model, out, *([] if odirect else ["--no-odirect"]))
    run = open_paths([str(out)])
    L, E = run.n_layer or 0, run.n_expert or 0
    assert (L, E) == (2, 8)
    want = expected_counts(stdout, L, E)
    agg = run.expert_aggregates()
    assert np.array_equal(agg.routed, want["routed"]) and np.array_equal(agg.hits, want["hits"])
    assert np.array_equal(agg.pagecache, want["pagecache"]) and np.array_equal(agg.disk, want["disk"])
    if odirect:
        assert agg.pagecache.sum() == 0 and agg.disk.sum() > 0
    else:
        # a read counts as the page cache's when ``RWF_NOWAIT`` returns all of it; the kernel may
        # make one wait (a page locked by writeback or compaction at that instant), so a few
        # misses may read as the disk's
        pc, dk = int(agg.pagecache.sum()), int(agg.disk.sum())
        assert pc > 0 and dk * 10 <= pc, (pc, dk)
    assert run.routes.tier_rows > 0
    lines, cells = map_cells(run)
    assert cells == want_cells(want)
    ramp_end = "-" if odirect else "#"
    assert any(ramp_end in row for row in cells)
    if odirect:
        assert not any(ch in "+*" for row in cells for ch in row)  # one tier served every miss
    assert "page cache share of misses" in lines[0]


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
def test_a_live_bmoe_run_session_s_tiers_reach_the_map(model):
    """A live ``bmoe-run --session --route-telemetry --no-odirect`` child bound to a run model (the
    pipes, the live feed): its decode misses reach the route store as page-cache ones (the load
    read the model through the page cache) and the tiers view draws them at the ramp's top."""
    s = ChildSession([str(BMOE_RUN), "-m", str(model), "--session", "--progress", "--route-telemetry", "--quiet",
                      "-c", "256", "--cache-mb", "0.2", "--force-cache", "--no-odirect"], ready_timeout_s=120)
    run = bind(s).run
    s.start()
    try:
        assert s.wait_state("ready", 120), s.status()
        s.generate(PROMPT, 6)
        assert until(lambda: run.tokens.n >= 6 and s.status().state == "ready", limit=120)
    finally:
        assert s.close(timeout=10) == 0
    agg = run.expert_aggregates()
    assert run.routes.tier_rows > 0 and agg.pagecache.sum() > 0 and agg.disk.sum() == 0
    _lines, cells = map_cells(run)
    flat = "".join(cells)
    assert "#" in flat and not any(ch in "-+*" for ch in flat)


def test_a_replayed_transcript_with_mixed_tiers_draws_each_cell_and_its_readout(tmp_path):
    """A transcript whose experts miss again and again, from either tier, after a prefill line
    without tiers: every cell of the map as its counts say (a mixed share on the ramp's middle,
    ``?`` for the prefill-only miss), and a cell's readout gives its misses by tier."""
    data = synth.progress_transcript(48, n_layer=4, n_expert=16, tiers=True)
    path = tmp_path / "tiers.txt"
    path.write_bytes(data)
    run = open_paths([str(path)])
    want = expected_counts(data, 4, 16)
    agg = run.expert_aggregates()
    assert np.array_equal(agg.pagecache, want["pagecache"]) and np.array_equal(agg.disk, want["disk"])
    _lines, cells = map_cells(run)
    assert cells == want_cells(want)
    flat = "".join(cells)
    assert "?" in flat and "-" in flat and "#" in flat and ("+" in flat or "*" in flat)
    # a cursor on the first cell with both tiers: its readout
    il, e = next((il, e) for il in range(4) for e in range(16) if want["pagecache"][il, e] and want["disk"][il, e])
    pb = Playback(run)
    pb.end()
    em = ExpertMap(run, pb)
    em._look = MONO
    em.tiers = True
    em.cursor.row, em.cursor.col = il, e
    text = " ".join(s.text for s in em.build(200, 30))
    pc, dk = int(want["pagecache"][il, e]), int(want["disk"][il, e])
    misses = int(want["routed"][il, e] - want["hits"][il, e])
    assert f"{100 * pc / (pc + dk):.1f} % page cache" in text and f"page cache {pc} " in text
    assert f"disk {dk} " in text and f"misses {misses} of {int(want['routed'][il, e])}" in text


def test_a_replay_of_a_file_without_tiers_says_they_are_not_reported(tmp_path):
    """bmoe-cli's routing (no ``tier``): the tiers view is one line saying the source does not
    report them, never a map of zeros; the routing heat view is unchanged."""
    path = tmp_path / "old.txt"
    path.write_bytes(synth.progress_transcript(24))
    run = open_paths([str(path)])
    assert run.routes.tier_rows == 0
    agg = run.expert_aggregates()
    assert agg.routed.sum() > 0 and agg.pagecache.sum() == 0 and agg.disk.sum() == 0
    lines, cells = map_cells(run)
    assert cells == [] and len(lines) == 1
    assert "tiers not reported by this source" in lines[0] and "%" not in lines[0] and "0" not in lines[0]
    pb = Playback(run)
    pb.end()
    heat = ExpertMap(run, pb)
    assert "routing heat" in heat.build(160, 30)[0].text


def test_the_layer_x_token_readout_splits_a_token_s_misses_by_tier(tmp_path):
    """The heatmap's cell readout (one layer, one token) gives that token's misses in that layer
    by tier, counted from its BMOE_ROUTE line; a source without tiers gives no such line."""
    data = synth.progress_transcript(48, n_layer=4, n_expert=16, tiers=True)
    path = tmp_path / "tiers.txt"
    path.write_bytes(data)
    run = open_paths([str(path)])
    routes = [orjson.loads(ln.split(" ", 1)[1]) for ln in data.decode().splitlines()
              if ln.startswith("BMOE_ROUTE ") and '"decode"' in ln]
    token, il = next((i, il) for i, r in enumerate(routes) for il in range(4) if any(r["tier"][il]))  # a miss
    tiers = routes[token]["tier"][il]
    pb = Playback(run)
    pb.end()
    hm = LayerHeatmap(run, pb)
    w = hm.window(200)
    col = w.col_of(token)
    assert col is not None and w.rows_of(col) == (token, token + 1)
    text = " ".join(t for t, _ in hm.readout(Cursor(il, col), w, 1, 4, np.zeros((4, 1)), 80))
    assert f"page cache {tiers.count(1)} · disk {tiers.count(2)}" in text, text
    old = tmp_path / "old.txt"
    old.write_bytes(synth.progress_transcript(48, n_layer=4, n_expert=16))
    run = open_paths([str(old)])
    pb = Playback(run)
    pb.end()
    hm = LayerHeatmap(run, pb)
    w = hm.window(200)
    text = " ".join(t for t, _ in hm.readout(Cursor(0, w.col_of(0) or 0), w, 1, 4, np.zeros((4, 1)), 80))
    assert "read" in text and "page cache" not in text
