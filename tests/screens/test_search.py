"""The one ``/`` search on every screen kind (tui/widgets/search.py): a replay's answer text, a
live-style table (the audit Requests), the analysis screens' tables (whatif, compare) and the
fleet's instances. Typing filters or marks live with a count; Enter keeps the query and gives the
focus back where it was; ``n`` / ``N`` go round the ends and say so; a query with no match says
"no match"; Escape in the box clears the query and does nothing else; a query with regex
characters or an escape sequence is literal text, shown with its controls made visible."""

from __future__ import annotations

from pathlib import Path

from helpers import synth
from helpers.pagecache import private_model
from helpers.screen_cases import SCREENS
from helpers.scripted_prometheus import ScriptedPrometheus
from helpers.waits import pilot_until
from textual.widgets import TabbedContent

from bmoe_top.parsers.recording import load_recording, memory_entries
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
from bmoe_top.tui.screens.attach_memory import MemoryPanel, MemoryScreen
from bmoe_top.tui.screens.fleet import FleetScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.screens.whatif import whatif_app
from bmoe_top.tui.sources.memory import MemoryPlayer, MemoryWatcher
from bmoe_top.tui.sources.recorder import Recorder
from bmoe_top.tui.widgets.fleet_table import FleetTableView
from bmoe_top.tui.widgets.panels import AnswerPanel
from bmoe_top.tui.widgets.search import SearchBar
from bmoe_top.tui.widgets.tables import SortTable

SIZE = (120, 40)


def _status(app: BmoeTopApp) -> str:
    return str(app.screen.query_one(".search-status").render())


def _bar(app: BmoeTopApp) -> SearchBar:
    return app.screen.query_one(SearchBar)


async def test_replay_text_search_counts_goes_round_both_ends_and_escape_clears(tmp_path: Path):
    (tmp_path / "stdout.txt").write_bytes(synth.progress_transcript(24))
    app = BmoeTopApp(ReplayScreen(open_paths([str(tmp_path / "stdout.txt")]), title="r"))
    async with app.run_test(size=SIZE) as pilot:
        bar, panel = _bar(app), app.query_one(AnswerPanel)
        await pilot.press("slash")  # from the Overview, nothing focused: the Text tab's search
        await pilot_until(pilot, lambda: bar.editing and app.focused is bar.box, "the box open")
        assert app.query_one("#tabs", TabbedContent).active == "text"
        await pilot.press(*"EXPERTS")
        n = panel.renderable_for().plain.lower().count("experts")
        assert n >= 2 and panel.matches() == n
        assert f"/EXPERTS: match 1 of {n}" in _status(app)  # counted while typing
        await pilot.press("enter")
        assert app.focused is None and not bar.editing  # the focus where it was: nowhere
        assert f"/EXPERTS: match 1 of {n}" in _status(app) and "n next" in _status(app)
        for i in range(2, n + 1):
            await pilot.press("n")
            assert f"match {i} of {n}" in _status(app) and "wrapped" not in _status(app)
        await pilot.press("n")
        assert f"match 1 of {n} (wrapped to the first)" in _status(app)
        await pilot.press("N")
        assert f"match {n} of {n} (wrapped to the last)" in _status(app)
        assert panel.current == n - 1
        # the current match is marked apart from the others
        text = panel.renderable_for()
        a, b = [(s.start, s.end) for s in text.spans if s.style and "underline" in str(s.style)][-1]
        assert text.plain[a:b].lower() == "experts"
        # the box opens on the kept query, selected: typing replaces it; a query that matches
        # nothing says so; Escape in the box clears it and closes the box
        await pilot.press("slash")
        assert bar.box.value == "EXPERTS"
        await pilot.press(*"zzz")
        assert "/zzz: no match" in _status(app)
        await pilot.press("escape")
        assert not bar.editing and panel.matches() == 0 and panel.query_text == ""
        assert not bar.has_class("-kept") and _status(app) == ""
        assert app.screen is app.main  # Escape did nothing else
        await pilot.press("n")  # no query: n says so and moves nothing
        assert panel.current == -1




async def test_whatif_table_filter_counts_rows_and_n_moves_the_cursor(tmp_path: Path):
    (tmp_path / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp_path / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp_path / "run.route.csv"), str(tmp_path / "run.csv")])
    report, replay = analyse_input(inp)
    app = whatif_app(inp, report, replay, "whatif")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#policy-table", SortTable)
        table.data_table.focus()
        await pilot.pause()
        await pilot.press("slash", *"lRu")
        names = [r.cells[0] for r in table.shown]
        assert names and all("lru" in x.lower() for x in names)
        assert f"/lRu: match 1 of {len(names)}" in _status(app)
        await pilot.press("enter")
        assert app.focused is table.data_table  # back in the table
        await pilot.press("n", "n")
        assert table.data_table.cursor_row == 2 % len(names)
        assert f"match {2 % len(names) + 1} of {len(names)}" in _status(app)
        # regex characters are text: ".*" is in no policy name
        await pilot.press("slash", *".*")
        assert table.shown == [] and "/.*: no match" in _status(app)
        await pilot.press("escape")
        assert len(table.shown) == 9 and table.filter_text == "" and app.focused is table.data_table
        # each tab keeps its own query: the Layers table is not filtered by the Policies one
        await pilot.press("slash", *"LRU", "enter", "3")
        await pilot.pause()
        layers = app.screen.query_one("#layer-table", SortTable)
        assert layers.filter_text == "" and _status(app) == ""
        await pilot.press("2")
        await pilot.pause()
        assert "/LRU: match" in _status(app)


async def test_compare_search_from_every_focus_returns_the_focus(tmp_path: Path):
    app, _end, _done = SCREENS["compare"](tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one("#summary-table", SortTable)
        focuses = [None, *[w for w in screen.focus_chain if w is not _bar(app).box]]
        assert table.data_table in focuses
        for focus in focuses:
            screen.set_focus(focus)
            await pilot.pause()
            await pilot.press("slash", *"hit", "enter")
            assert app.focused is focus, f"focus {focus!r} not given back"
            assert table.filter_text == "hit" and "/hit: match 1 of" in _status(app)
            await pilot.press("slash", "escape")
            assert table.filter_text == "" and app.focused is focus


async def test_fleet_search_filters_instances_escape_in_the_box_and_on_the_table():
    prom = ScriptedPrometheus(instances=("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"))
    screen = FleetScreen(prom.url, "", 60)
    app = BmoeTopApp(screen)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: len(screen.shown) == 3, "three instances")
            view = screen.query_one(FleetTableView)
            assert app.focused is view
            await pilot.press("slash", *"127.0.0.1:")
            assert len(screen.shown) == 3 and "match 1 of 3" in _status(app)
            await pilot.press("enter")
            assert app.focused is view
            await pilot.press("N")
            assert view.cursor_row == 2 and "match 3 of 3 (wrapped to the last)" in _status(app)
            await pilot.press("slash", *":2", "enter")
            assert [r.instance for r in screen.shown] == ["127.0.0.1:2"] and "match 1 of 1" in _status(app)
            await pilot_until(pilot, lambda: screen.n_applied >= 3, "refreshes keep the filter")
            assert [r.instance for r in screen.shown] == ["127.0.0.1:2"]
            await pilot.press("escape")  # on the table: the fleet's Escape clears the search
            assert screen.filter_text == "" and len(screen.shown) == 3 and _status(app) == ""
    finally:
        prom.close()


async def test_a_query_with_an_escape_sequence_is_shown_inert(tmp_path: Path):
    (tmp_path / "stdout.txt").write_bytes(synth.progress_transcript(8))
    app = BmoeTopApp(ReplayScreen(open_paths([str(tmp_path / "stdout.txt")]), title="r"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        await pilot_until(pilot, lambda: _bar(app).editing, "the box open")
        _bar(app).box.insert_text_at_cursor("\x1b[31mred")
        await pilot.press("enter")
        status = _status(app)
        assert "\x1b" not in status and "␛[31mred: no match" in status




async def test_memory_panel_rows_are_searched_and_the_letter_keys_type_in_the_box(tmp_path: Path):
    rec_path = tmp_path / "mem.jsonl"
    rec = Recorder(rec_path)
    w = MemoryWatcher(gguf=str(private_model(tmp_path, "tiny")), recorder=rec)
    for _ in range(3):
        w.sample_once()
    w.close()
    rec.close()
    entries = memory_entries(load_recording(rec_path))
    assert entries is not None
    screen = MemoryScreen(MemoryPlayer(entries, speed=float("inf")), fps=20)
    async with BmoeTopApp(screen).run_test(size=SIZE) as pilot:
        panel = screen.query_one(MemoryPanel)
        await pilot_until(pilot, lambda: len(panel.rows) > 3, "the panel's rows")
        want = [r for r in panel.rows if "resident" in (r[0] + r[1]).lower()]
        assert 0 < len(want) < len(panel.rows)
        await pilot.press("slash", *"Resident", "q", "p")  # q and p type here: no quit, no pause
        assert app_running(screen) and not screen.paused and _bar(screen.app).box.value == "Residentqp"
        await pilot.press(*["backspace"] * 2, "enter")
        assert panel.shown == want and f"/Resident: match 1 of {len(want)}" in _status(screen.app)
        await pilot.press("N")
        assert f"match {len(want)} of {len(want)} (wrapped to the last)" in _status(screen.app)
        await pilot.press("slash", "escape")
        assert panel.shown == panel.rows and _status(screen.app) == ""


def app_running(screen: MemoryScreen) -> bool:
    return screen.app.is_running and screen.app.screen is screen
