"""The replay screen over the run model: playback keys, panels, text safety, grid folding, the
playback clock over a recording, an STRP profile as a rank map."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import synth
from helpers.hostile import screen_text
from helpers.waits import pilot_until
from textual.widgets import Static

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.headless import replay
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.playback import SPEEDS, Playback
from bmoe_top.tui.present.numbers import ms
from bmoe_top.tui.screens.modals import HelpScreen, SeekScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.widgets.charts import BreakdownChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap
from bmoe_top.tui.widgets.panels import safe_text


def replay_app(run: RunModel, title: str, fps: float = 10.0) -> BmoeTopApp:
    return BmoeTopApp(ReplayScreen(run, title=title, fps=fps))


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    r = tmp_path / "run.route.csv"
    r.write_bytes(synth.route_trace(64))
    return [str(p), str(r)]


def test_safe_text_neutralises_control_sequences():
    assert safe_text("a\x1b[31mred\x07").plain == "a␛[31mred␇"
    assert safe_text("line\nnext\ttab").plain == "line\nnext\ttab"
    assert safe_text("line\nnext\ttab", multiline=False).plain == "line␤next tab"


async def test_model_text_is_shown_literally(tmp_path):
    text = "[bold red]not markup[/] \x1b[2J cleared? "
    p = tmp_path / "t.txt"
    p.write_bytes(synth.progress_transcript(8, text=text))
    run = open_paths([str(p)])
    app = replay_app(run, "t")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one("#answer-side")
        shown = [panel.render_line(y).text for y in range(panel.content_region.height)]
        words = " ".join(" ".join(shown).split())  # the lines drawn, joined where they wrapped
        assert "[bold red]not markup[/]" in words
        assert not any("\x1b" in line for line in shown) and "␛[2J" in words


async def test_playback_keys(csv_run):
    run = open_paths(csv_run)
    app = replay_app(run, "keys", fps=20)
    async with app.run_test(size=(140, 44)) as pilot:
        pb = app.main.playback
        assert pb.cursor == 64 and pb.sel == 63  # opens with every token revealed, at the end
        assert pb.fit and pb.state() == "ended"  # the whole run in the window
        await pilot.press("home")
        assert pb.sel == 0 and pb.cursor == 64
        await pilot.press("right", "right", "right")
        assert pb.sel == 3
        await pilot.press("left")
        assert pb.sel == 2
        await pilot.press("pagedown")
        assert pb.sel == 52
        await pilot.press("end")
        assert pb.sel == 63 and pb.state() == "ended"
        # +/- zoom the time window (from the whole run: its nearest zoom first); ] and [ change the speed
        await pilot.press("minus")
        assert pb.per_col == 1 and not pb.fit
        await pilot.press("minus")
        assert pb.per_col == 2
        await pilot.press("plus", "plus")
        assert pb.per_col == 0.5
        before = pb.speed_index
        await pilot.press("right_square_bracket")
        assert pb.speed_index == before + 1
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert pb.speed_index == before - 1
        # seek to token 10 through the dialog
        await pilot.press("g")
        assert isinstance(app.screen, SeekScreen)
        await pilot.press("1", "0", "enter")
        await pilot.pause()
        assert pb.sel == 9
        # play from the start at max speed: the cursor moves forward on its own
        await pilot.press("home")
        for _ in range(12):
            await pilot.press("right_square_bracket")
        await pilot.press("space")
        assert pb.playing and pb.state() == "replay"
        await pilot_until(pilot, lambda: pb.cursor > 1, "the cursor playing forward")
        await pilot.press("p")  # p pauses too (the tabs are on 1-4)
        assert not pb.playing and pb.state() == "paused"
        # help lists every key, on ? and on F1; keys for the same action share one row
        rows = app.main.key_rows()
        quit_rows = [k for k, d in rows if d == "quit"]
        assert quit_rows == ["q / ctrl+c"], rows
        screen_rows = [k for k, d in rows if not d.startswith(("on a map", "in a table", "on a scrolling panel"))]
        assert len(set(screen_rows)) == len(screen_rows)
        for key in ("question_mark", "f1"):
            await pilot.press(key)
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
        # fold toggles both grids
        heat = app.query_one(LayerHeatmap)
        await pilot.press("f")
        assert heat.fold is False and app.query_one(ExpertMap).fold is False


async def test_breakdown_renders_cursor_token_values(csv_run):
    run = open_paths(csv_run)
    app = replay_app(run, "b")
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.press("home", "right", "right")
        chart = app.query_one(BreakdownChart)
        text = "".join(s.text for line in chart.build(chart.size.width, chart.size.height) for s in line)
        wall = run.tokens.view("wall_ms")[2]
        assert "token 3" in text  # Home selects token 1, two steps right token 3
        assert f"wall  {ms(wall)}" in text


def test_a_routing_row_ahead_of_its_token_row_is_not_a_row_yet():
    """A live source sends a token's BMOE_ROUTE before its BMOE_PROGRESS: between the two the
    run has one more routed token than token rows, and the views (which read token columns over
    the window) must not be handed a window past the token rows (an IndexError in the
    breakdown took the app down at 30 tokens/s)."""
    run = RunModel()
    n_tok = 130
    run.add_token_rows({"wall_ms": np.full(n_tok, 20.0), "io_ms": np.full(n_tok, 5.0)}, n_tok)
    tok = np.repeat(np.arange(n_tok + 1), 2)
    run.add_routes(tok, np.zeros_like(tok), tok % 8, np.ones_like(tok))
    assert run.route_token_count() == n_tok + 1
    pb = Playback(run, follow=True)
    pb.tick(0.0)
    assert pb.n == n_tok
    chart = BreakdownChart(run, pb)
    assert len(chart.build(152, 14)) == 14  # a full window of one token per column, newest selected
    routes_only = RunModel()
    routes_only.add_routes(tok, np.zeros_like(tok), tok % 8, np.ones_like(tok))
    assert Playback(routes_only).n == n_tok + 1  # a route trace alone: its routed tokens are the rows


def test_heatmap_folds_94_layers_by_512_experts():
    run = RunModel()
    rng = np.random.default_rng(0)
    n_layer, n_expert, n_tok, k = 94, 512, 50, 8
    tok = np.repeat(np.arange(n_tok), n_layer * k)
    layer = np.tile(np.repeat(np.arange(n_layer), k), n_tok)
    expert = rng.integers(0, n_expert, size=tok.size)
    hit = rng.integers(0, 2, size=tok.size)
    run.set_dims(n_layer=n_layer, n_expert=n_expert, top_k=k)
    run.add_routes(tok, layer, expert, hit)
    pb = Playback(run)
    pb.end()
    assert pb.cursor == n_tok
    heat = LayerHeatmap(run, pb)
    lines = heat.build(120, 30)
    assert len(lines) <= 30  # folded to fit
    emap = ExpertMap(run, pb)
    lines = emap.build(120, 30)
    assert len(lines) <= 30 and max(ln.cell_length for ln in lines[2:]) <= 120
    emap.fold = False  # one layer per row, scrolled with the cell cursor
    text = [ln.text for ln in emap.build(120, 30)]
    assert len(text) <= 30 and text[2].split("│")[0].strip() == "L0" and text[3].split("│")[0].strip() == "L1"
    emap.cursor.row = 60
    rows = [t.split("│")[0].strip() for t in (ln.text for ln in emap.build(120, 30)[2:])]
    assert "L60" in rows and "L0" not in rows


def test_recording_replays_turn_by_turn_at_original_pace(tmp_path):
    p = tmp_path / "session.rec.jsonl"
    p.write_bytes(synth.session_recording(turns=3, n=10))
    run = open_paths([str(p)])
    assert run.tokens.n == 30 and len(run.turns) == 3
    assert [t.prompt for t in run.turns] == ["question 0", "question 1", "question 2"]
    assert run.turns[1].done["n_past"] == 25
    pb = Playback(run, turn_by_turn=True, speed_index=SPEEDS.index(1.0))  # 1x: original pace
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
    return SPEEDS


def test_strp_profile_replays_as_a_rank_map(tmp_path):
    from bmoe_top.parsers.strp import profile_from_counts, write_strp

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
    # the 8 ranked experts: the 2 hottest resident (12 slots over 6 layers), the others ranked
    assert row0[:8] == "██" + "●" * 6 and set(row0[8:32]) == {"·"}


async def test_text_tab_shows_the_answer_when_opened(tmp_path):
    p = tmp_path / "stdout.txt"
    p.write_bytes(synth.progress_transcript(12))
    run = open_paths([str(p)])
    app = replay_app(run, "t")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2")
        full = app.query_one("#answer-full")
        await pilot_until(pilot, lambda: "The router picks" in str(full.render()), "the answer in the Text tab")


@pytest.mark.parametrize("size", [(59, 24), (80, 14)])
async def test_below_the_minimum_size_the_screen_says_so(csv_run, size):
    app = replay_app(open_paths(csv_run), "small")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert app.main.has_class("-tiny")
        text = str(app.main.query_one("#too-small", Static).render())
        assert "too small" in text and f"width = {size[0]}" in text and "width = 60" in text
        assert not app.main.query_one("#body").display or not app.main.query_one("#body").region.area


async def test_the_too_small_notice_is_not_covered_by_a_toast(csv_run):
    """A notification shown when the terminal shrinks below the minimum (50x12) does not cover
    the notice that says so; it is drawn again once the terminal is large enough."""
    app = replay_app(open_paths(csv_run), "toast")
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        app.notify("the turn is sent to the server and answered in a while", timeout=600)
        await pilot_until(pilot, lambda: "answered in a while" in screen_text(app), "the toast drawn")
        await pilot.resize_terminal(50, 12)
        await pilot_until(pilot, lambda: "Terminal size too small" in screen_text(app), "the notice drawn")
        await pilot.pause()
        text = screen_text(app)
        assert "answered in a while" not in text, text
        for line in ("width = 50  height = 12", "Needed for this screen:", "width = 60  height = 15"):
            assert line in text, text
        await pilot.resize_terminal(120, 30)
        await pilot_until(pilot, lambda: "answered in a while" in screen_text(app), "the toast drawn again")


@pytest.mark.parametrize("size", [(60, 15), (80, 24), (120, 40), (200, 60)])
async def test_every_size_shows_the_breakdown_and_a_map(csv_run, size):
    app = replay_app(open_paths(csv_run), "sizes")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.main
        assert not screen.has_class("-tiny")
        assert screen.has_class("-compact") == (size[0] < 100 or size[1] < 30)
        bd, heat = screen.query_one("#breakdown"), screen.query_one("#heatmap")
        assert bd.region.height >= 4 and heat.region.height >= 3, (bd.region, heat.region)
        assert "wall" in bd.text(bd.content_size.width, bd.content_size.height)
        if screen.has_class("-compact"):  # one header line: the numbers are in the title
            assert not screen.query_one("#side").display or not screen.query_one("#side").region.area
            assert "tok/s" in screen.query_one("#title").plain


async def test_command_palette_lists_the_screens_own_actions(csv_run):
    app = replay_app(open_paths(csv_run), "palette")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for want in ("Follow live / last token", "Zoom in", "Zoom out", "Seek to a token…", "Tab: Problems",
                     "Palette: next colour scale", "Fold / scroll the layer maps"):
            assert want in titles
        assert [t for t in titles if t.startswith("Keys")] == ["Keys (help)"]  # it also listed Textual's "Keys"
        await pilot.press("ctrl+c")  # quits a replay at once (no "press ctrl+q" notice)
    assert app.return_code == 0 and not app.is_running


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_search_box_is_drawn_where_the_user_types(csv_run, size):
    """`/` opens a box the user sees while typing (it was docked under the footer, so every key
    went in blind), and neither typing nor Enter stacks a notification: the count stays on the
    status line above the footer while the query is kept."""
    app = replay_app(open_paths(csv_run), "s")
    notes: list[str] = []  # every notification posted (a shown one expires after its timeout)
    notify = app.notify

    def counted(message: str, *args: Any, **kwargs: Any) -> None:
        notes.append(str(message))
        notify(message, *args, **kwargs)

    app.notify = counted  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        await pilot.press("slash", *"tok")
        await pilot.pause()
        screen = app.screen
        lines = ["".join(seg.text for seg in s) for s in screen._compositor.render_strips()]
        assert any("tok" in line and "^p" not in line for line in lines[-3:]), lines[-3:]
        assert notes == []
        await pilot.press("enter")
        await pilot.pause()
        lines = ["".join(seg.text for seg in s) for s in screen._compositor.render_strips()]
        assert any("/tok: " in line and "match" in line for line in lines[-3:]), lines[-3:]
        assert notes == []


async def test_files_of_another_run_are_named_in_the_banner_at_80x24(tmp_path):
    a = tmp_path / "a.csv"
    a.write_bytes(synth.token_csv(40))
    b = tmp_path / "b.csv"
    b.write_bytes(synth.token_csv(30, seed=9, n_layer=4))
    run, _ = replay([str(a), str(b)], keep_first=True)  # what `bmoe-top replay a.csv b.csv` opens on
    app = replay_app(run, "replay a.csv + b.csv")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        banner = app.query_one("#banner")
        assert banner.display and "b.csv left out" in str(banner.render())
        assert run.tokens.n == 40


async def test_impossible_values_are_in_the_banner_and_listed_by_4_at_80x24(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_bytes(b"step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                  b"1,4,100,40,60,1000,10,0\n2,4,-5,40,60,1000,20,0\n3,4,inf,40,60,1e99,200,0\n"
                  b"4,4,1e99,40,60,1000,30,0\n")
    other = tmp_path / "other.csv"  # a second alert: the banner shows the newest and says where the rest are
    other.write_bytes(synth.token_csv(30, seed=9, n_layer=4))
    run, _ = replay([str(p), str(other)], keep_first=True)
    app = replay_app(run, "replay bad.csv")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        banner = str(app.query_one("#banner").render())
        assert "bad.csv: 5 impossible values" in banner and "+1 more: 4 lists them" in banner
        await pilot.press("4")
        await pilot.pause()
        text = app.query_one("#problems-panel").renderable_for().plain
        assert "bad.csv: 5 impossible values read as missing" in text and "other.csv left out" in text
        assert "impossible wall_ms: a time per token is 0 to 24 h" in text and "bad.csv:3:" in text
    alone, _ = replay([str(p)], keep_first=True)  # the one alert: the banner still points to the tab
    async with replay_app(alone, "replay bad.csv").run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        banner = str(pilot.app.query_one("#banner").render())
        assert "bad.csv: 5 impossible values read as missing (4 lists them)" in banner, banner


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_a_replay_opens_on_the_whole_run_at_its_end_at_any_width(csv_run, size):
    # like `less +G`: the last token, "ended", every view the whole run; not a width-dependent token
    app = replay_app(open_paths(csv_run), "replay run.csv")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        pb = app.main.playback
        assert pb.state() == "ended" and pb.sel == 63 and pb.fit
        title = app.query_one("#title").plain
        assert "ended" in title and "token 64/64" in title and "whole run" in title
        w = pb.window(40)
        assert (w.lo, w.hi) == (0, 64)
        pb.toggle()  # space: plays from the first token (called here: no tick moves it before the check)
        assert pb.playing and pb.cursor == 0


async def test_a_session_replay_lists_its_requests_with_their_prompts_in_a_turns_tab(tmp_path):
    from helpers.cli_session import cli_session, six_requests
    from textual.widgets import DataTable, TabbedContent

    s = cli_session(six_requests())
    paths = []
    for name, data in (("r.jsonl", s.requests), ("s.stdout", s.stdout), ("s.csv", s.csv)):
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    app = replay_app(open_paths(paths), "session")
    async with app.run_test(size=(160, 44)) as pilot:
        await pilot.press("5")
        assert app.query_one("#tabs", TabbedContent).active == "turns"
        assert ("Tab: Turns", "5") in [c[:2] for c in app.main.commands()]  # ctrl+p offers it too
        table = app.query_one("#turns-table DataTable", DataTable)
        await pilot_until(pilot, lambda: table.row_count == 6, "the six requests")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(6)]
        assert [r[0] for r in rows] == ["1", "2", "3", "-", "4", "5"] and [r[1] for r in rows] == list("123456")
        assert rows[0][5].endswith("How many are left?") and rows[0][6] == "done"
        assert rows[3][6].startswith("rejected: prompt + n_predict exceeds the session n_ctx")
        await pilot.press("slash", *"rejected", "enter")  # / filters the table
        await pilot_until(pilot, lambda: table.row_count == 1, "the filtered table")
        assert str(table.get_row_at(0)[1]) == "4"
        await pilot.press("escape", "2")  # the Text tab: each turn under its prompt (the request log's)
        await pilot_until(pilot, lambda: "── turn 4 (id 5)" in screen_text(app), "the Text tab")
        text = screen_text(app)
        assert "> Solve this grade-school" in text and "── turn 1 (id 1)" in text


async def test_a_one_shot_replay_has_no_turns_tab(csv_run):
    from textual.widgets import TabbedContent

    app = replay_app(open_paths(csv_run), "one")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("5")  # no such tab: nothing happens
        assert not app.query("#turns-table") and app.query_one("#tabs", TabbedContent).active == "overview"
        assert "Tab: Turns" not in [c[0] for c in app.main.commands()]
