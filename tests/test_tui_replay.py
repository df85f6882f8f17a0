"""The replay screen over the run model: playback keys, panels, text safety, headless summary."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import orjson
import pytest
from helpers import synth

from bmoe_top.tui.app import BmoeTopApp, HelpScreen, SeekScreen
from bmoe_top.tui.run import RunModel, run_summary
from bmoe_top.tui.sources.file_replay import ReplayError, open_paths
from bmoe_top.tui.widgets.charts import BreakdownChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import visible_text


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    r = tmp_path / "run.route.csv"
    r.write_bytes(synth.route_trace(64))
    return [str(p), str(r)]


def test_csv_and_route_trace_merge_into_one_run(csv_run):
    run = open_paths(csv_run)
    assert run.tokens.n == 64
    assert run.n_layer == 8 and run.n_expert == 32 and run.top_k == 2
    share = run.hit_matrix()
    assert share.shape == (8, 64)
    assert np.nanmax(share) <= 1.0 and np.nanmin(share) >= 0.0
    counts, hits = run.expert_counts()
    # 4 prefill steps + 64 decode steps, 8 layers, top-2
    assert counts.sum() == (4 + 64) * 8 * 2
    assert (hits <= counts).all()
    s = run_summary(run)
    assert s["tokens"] == 64 and s["mode"] == "serial"


def test_overlap_never_stacks_io_on_wall(tmp_path):
    p = tmp_path / "ov.csv"
    p.write_bytes(synth.token_csv(32, overlap=True))
    run = open_paths([str(p)])
    mode, why = run.mode()
    assert mode == "overlap" and "overlap=1" in why
    b = run.breakdown()
    io = run.tokens.view("io_ms")
    assert (io > b["wall"]).all()  # lane-busy time exceeds wall under overlap
    np.testing.assert_allclose(b["flash"], run.tokens.view("stall_ms"))
    np.testing.assert_allclose(b["compute"] + b["flash"] + b["mgmt"], b["wall"], atol=0.01)


def test_progress_transcript_with_route_and_resident(tmp_path):
    p = tmp_path / "stdout.txt"
    p.write_bytes(synth.progress_transcript(24))
    run = open_paths([str(p)])
    assert run.tokens.n == 24
    assert run.resident is not None and run.resident.shape == (4, 16)
    assert run.routes.n == 24 * 4 * 2
    assert run.turns[0].text.startswith("The router picks")
    # the first token's routing is all misses, later ones hit
    share = run.hit_matrix()
    assert np.all(share[:, 0] == 0.0)
    assert np.nanmean(share[:, -1]) > 0.0


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(ReplayError, match="no such file"):
        open_paths([str(tmp_path / "nope.csv")])


def test_cli_missing_file_exits_2_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(tmp_path / "x.csv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "no such file" in r.stderr and "Traceback" not in r.stderr


def test_cli_summary_json_matches_file(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(40))
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "replay", "--summary", "--json", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = orjson.loads(r.stdout)
    assert s["tokens"] == 40
    assert s["load_s"] == 1.5 and s["prefill_s"] == 0.4
    assert s["ttft_s"] is None or s["ttft_s"] > 0  # absent is None, never 0
    assert s["mode"] == "serial"


def test_visible_text_neutralises_control_sequences():
    assert visible_text("a\x1b[31mred\x07") == "a␛[31mred␇"
    assert visible_text("line\nnext\ttab") == "line\nnext\ttab"


async def test_model_text_is_shown_literally(tmp_path):
    text = "[bold red]not markup[/] \x1b[2J cleared? "
    p = tmp_path / "t.txt"
    p.write_bytes(synth.progress_transcript(8, text=text))
    run = open_paths([str(p)])
    app = BmoeTopApp(run, title="t")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one("#answer-side")
        plain = panel.renderable_for().plain
        assert "[bold red]not markup[/]" in plain
        assert "\x1b" not in plain and "␛[2J" in plain


async def test_playback_keys(csv_run):
    run = open_paths(csv_run)
    app = BmoeTopApp(run, title="keys", fps=20)
    async with app.run_test(size=(140, 44)) as pilot:
        pb = app.playback
        assert pb.cursor == 64  # opens on the whole run
        await pilot.press("home")
        assert pb.cursor == 0
        await pilot.press("right", "right", "right")
        assert pb.cursor == 3
        await pilot.press("left")
        assert pb.cursor == 2
        await pilot.press("pagedown")
        assert pb.cursor == 52
        await pilot.press("end")
        assert pb.cursor == 64
        before = pb.speed_index
        await pilot.press("plus")
        assert pb.speed_index == before + 1
        await pilot.press("minus", "minus")
        assert pb.speed_index == before - 1
        # seek to token 10 through the dialog
        await pilot.press("g")
        assert isinstance(app.screen, SeekScreen)
        await pilot.press("1", "0", "enter")
        await pilot.pause()
        assert pb.cursor == 10
        # play from start at max speed: the cursor moves forward on its own
        await pilot.press("home")
        for _ in range(20):
            await pilot.press("plus")
        await pilot.press("space")
        assert pb.playing
        await pilot.pause(0.5)
        assert pb.cursor > 0
        await pilot.press("space")
        assert not pb.playing
        # help lists every key
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        # fold toggles both grids
        heat = app.query_one(LayerHeatmap)
        await pilot.press("f")
        assert heat.fold is False and app.query_one(ExpertMap).fold is False


async def test_breakdown_renders_cursor_token_values(csv_run):
    run = open_paths(csv_run)
    app = BmoeTopApp(run, title="b")
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("home", "right", "right")
        chart = app.query_one(BreakdownChart)
        text = "".join(s.text for line in chart.build(chart.size.width, chart.size.height) for s in line)
        wall = run.tokens.view("wall_ms")[1]
        assert "token 2" in text
        assert f"wall  {wall:,.1f} ms" in text


def test_heatmap_folds_94_layers_by_512_experts():
    run = RunModel()
    rng = np.random.default_rng(0)
    n_layer, n_expert, n_tok, k = 94, 512, 50, 8
    tok = np.repeat(np.arange(n_tok), n_layer * k)
    layer = np.tile(np.repeat(np.arange(n_layer), k), n_tok)
    expert = rng.integers(0, n_expert, size=tok.size)
    hit = rng.integers(0, 2, size=tok.size)
    run.n_layer, run.n_expert, run.top_k = n_layer, n_expert, k
    run.routes.extend(tok, layer, expert, hit)
    from bmoe_top.tui.playback import Playback

    pb = Playback(run)
    pb.end()
    assert pb.cursor == n_tok
    heat = LayerHeatmap(run, pb)
    lines = heat.build(120, 30)
    assert len(lines) <= 30  # folded to fit
    emap = ExpertMap(run, pb)
    lines = emap.build(120, 30)
    assert len(lines) <= 30 and max(ln.cell_length for ln in lines[2:]) <= 120
    emap.fold = False
    lines = emap.build(120, 30)
    assert len(lines) == 2 + n_layer  # scrolls instead


def test_recording_replays_turn_by_turn_at_original_pace(tmp_path):
    p = tmp_path / "session.rec.jsonl"
    p.write_bytes(synth.session_recording(turns=3, n=10))
    run = open_paths([str(p)])
    assert run.tokens.n == 30 and len(run.turns) == 3
    assert [t.prompt for t in run.turns] == ["question 0", "question 1", "question 2"]
    assert run.turns[1].done["n_past"] == 25
    from bmoe_top.tui.playback import Playback

    pb = Playback(run, turn_by_turn=True, speed_index=0)  # 1x: original pace
    pb.toggle()  # play from the start
    assert pb.tick(0.049) is False  # 1x: the first token takes 50 ms of recorded time
    assert pb.tick(0.002) is True and pb.cursor == 1
    pb.speed_index = len(pb_speeds()) - 1  # max speed
    while pb.playing:
        pb.tick(0.1)
    assert pb.cursor == 10  # paused at the end of turn 1
    pb.toggle()
    while pb.playing:
        pb.tick(0.1)
    assert pb.cursor == 20
    pb.turn_by_turn = False
    pb.toggle()
    while pb.playing:
        pb.tick(0.1)
    assert pb.cursor == 30


def pb_speeds():
    from bmoe_top.tui.playback import SPEEDS

    return SPEEDS


def test_strp_profile_replays_as_a_rank_map(tmp_path):
    from bmoe_top.parsers.strp import profile_from_counts, write_strp
    from bmoe_top.tui.playback import Playback

    counts = np.zeros((6, 32), dtype=np.int64)
    counts[:, :8] = np.arange(8, 0, -1)  # experts 0..7 hot in every layer, 0 hottest
    p = tmp_path / "p.strp"
    write_strp(p, profile_from_counts(counts, slots=12))
    run = open_paths([str(p)])
    assert run.n_layer == 6 and run.n_expert == 32
    assert run.expert_rank is not None and (run.expert_rank[:, 8:] == -1).all()
    pb = Playback(run)
    lines = ExpertMap(run, pb).build(60, 20)
    text = ["".join(s.text for s in ln) for ln in lines]
    assert "profile rank" in text[0]
    assert "48 ranked pairs" in text[1]
    row0 = text[2].split("│", 1)[1]
    assert row0[:8].count("█") + row0[:8].count("░") == 8 and set(row0[8:32]) == {"·"}


async def test_text_tab_shows_the_answer_when_opened(tmp_path):
    p = tmp_path / "stdout.txt"
    p.write_bytes(synth.progress_transcript(12))
    run = open_paths([str(p)])
    app = BmoeTopApp(run, title="t")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2")
        await pilot.pause(0.3)
        full = app.query_one("#answer-full")
        assert "The router picks" in str(full.render())


def test_stray_nul_byte_keeps_a_transcript_readable(tmp_path):
    p = tmp_path / "nul.txt"
    body = synth.progress_transcript(6).replace(b"=== perf ===", b"note\x00here\n=== perf ===")
    p.write_bytes(body)
    run = open_paths([str(p)])
    assert run.tokens.n == 6


def test_mode_from_summary_without_rows_and_unknown_without_either(tmp_path):
    p = tmp_path / "log.txt"
    p.write_bytes(b"generation: 10 tokens, 0.1 s/token (10.0 tok/s)\n"
                  b"moe-stream: read 5.0 MiB (0.50 MiB/token), decode 0.1 s/token (compute 0.05 + cache mgmt "
                  b"0.01 + flash I/O 0.08 s/token, 60 MiB/s) stall_s/tok=0.020\n")
    run = open_paths([str(p)])
    assert run.mode()[0] == "overlap"
    q = tmp_path / "reqs.jsonl"
    q.write_bytes(b'{"cmd":"generate","id":1,"prompt":"x"}\n{"cmd":"close"}\n')
    assert open_paths([str(q)]).mode()[0] == "unknown"
