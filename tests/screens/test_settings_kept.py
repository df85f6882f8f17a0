"""Settings that persist (docs/user-guide.md "Settings"): a key changes a setting on a screen, the
app is started again over the same file, and the setting is there; ``--config FILE`` and
``--no-config``; a damaged file is one line on stderr and a notice on the screen, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import synth
from helpers.waits import pilot_until

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.settings import SettingsStore, load
from bmoe_top.tui.widgets.charts import TrendChart
from bmoe_top.tui.widgets.grids import ExpertMap, LayerHeatmap

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(64))
    return [str(p)]


def start(path: Path, csv_run: list[str]) -> BmoeTopApp:
    """A new bmoe-top over the settings file ``path``, as the command line starts one."""
    BmoeTopApp.settings_store = load(path)
    return BmoeTopApp(ReplayScreen(open_paths(csv_run), title="kept"))


async def test_keys_that_change_a_setting_are_kept_for_the_next_start(tmp_path, csv_run):
    path = tmp_path / "settings.toml"
    app = start(path, csv_run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.main
        assert screen.refresh_s == 1.0 and app.look.scale == "viridis"
        await pilot.press("right_curly_bracket")  # } refresh more often: 0.5 s
        await pilot.press("c")  # cividis
        await pilot.press("f")  # the maps scroll instead of folding
        await pilot.pause()
        assert screen.refresh_s == 0.5 and app.look.scale == "cividis"
        assert all(not m.fold for m in (*app.query(LayerHeatmap), *app.query(ExpertMap)))
        app.theme = "nord"  # what the palette's "Change theme" does
        await pilot.pause()
    assert path.is_file()
    again = start(path, csv_run)
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.main.refresh_s == 0.5 and again.look.scale == "cividis" and again.theme == "nord"
        assert all(not m.fold for m in (*again.query(LayerHeatmap), *again.query(ExpertMap)))
        await pilot.press("f")
        await pilot.pause()
    third = start(path, csv_run)
    async with third.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert all(m.fold for m in (*third.query(LayerHeatmap), *third.query(ExpertMap)))


async def test_the_map_kept_when_only_one_fits_is_kept(tmp_path, csv_run):
    path = tmp_path / "settings.toml"
    routes = tmp_path / "run.route.csv"
    routes.write_bytes(synth.route_trace(64, n_layer=8, n_expert=32, seed=4))
    paths = [*csv_run, str(routes)]
    app = start(path, paths)
    async with app.run_test(size=(60, 15)) as pilot:  # the smallest screen: one map fits
        await pilot.pause()
        assert app.query_one(LayerHeatmap).display and not app.query_one(ExpertMap).display
        await pilot.press("m")
        await pilot_until(pilot, lambda: app.query_one(ExpertMap).display, "the expert map shown")
        assert not app.query_one(LayerHeatmap).display
    again = start(path, paths)
    async with again.run_test(size=(60, 15)) as pilot:
        await pilot.pause()
        assert again.query_one(ExpertMap).display and not again.query_one(LayerHeatmap).display


async def test_panels_the_file_leaves_out_are_not_shown(tmp_path, csv_run):
    path = tmp_path / "settings.toml"
    path.write_text("[panels]\ntrends = false\n")
    app = start(path, csv_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.query_one(TrendChart).display
        assert app.query_one(LayerHeatmap).display


async def test_no_file_keeps_nothing_and_a_damaged_one_is_said_on_screen(tmp_path, csv_run):
    BmoeTopApp.settings_store = SettingsStore(None)  # --no-config
    app = BmoeTopApp(ReplayScreen(open_paths(csv_run), title="none"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert app.look.scale == "cividis"
    assert list(tmp_path.glob("*.toml")) == []
    path = tmp_path / "settings.toml"
    path.write_text('[look]\ncolour_scale = "rainbow"\ntheme = "no-such-theme"\n[view]\nrefresh_s = 5.0\n')
    app = start(path, csv_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("colour_scale" in m and "rainbow" in m and "theme" in m for m in said), said
        assert app.main.refresh_s == 5.0 and app.look.scale == "viridis"


def test_config_flags_on_the_command_line(tmp_path, capsys):
    from bmoe_top.tui.cli import _apply_settings, build_parser

    path = tmp_path / "mine.toml"
    path.write_text("[view]\nrefresh_s = 0.01\nfold_maps = false\n")
    for argv in (["--config", str(path), "replay", "x.csv"], ["replay", "x.csv", "--config", str(path)]):
        assert _apply_settings(build_parser().parse_args(argv)) is None
        store = BmoeTopApp.settings_store
        assert store is not None and store.path == path and store.settings.view.fold_maps is False
        err = capsys.readouterr().err.splitlines()
        assert err == [f"bmoe-top: settings {path}: line 2: [view] refresh_s = 0.01: must be a number of seconds "
                       "from 0.1 to 10; the default 1.0 is used"]
    assert _apply_settings(build_parser().parse_args(["replay", "x.csv", "--no-config"])) is None
    assert BmoeTopApp.settings_store is not None and BmoeTopApp.settings_store.path is None
    # a text form reads no settings
    BmoeTopApp.settings_store = None
    assert _apply_settings(build_parser().parse_args(["replay", "--summary", "x.csv", "--config", str(path)])) is None
    assert BmoeTopApp.settings_store is None
    for argv, code, said in ((["--config", str(path), "--no-config", "replay", "x.csv"], 2, "exclude each other"),
                             (["replay", "x.csv", "--config", str(tmp_path)], 1, "it is a directory"),
                             (["replay", "x.csv", "--config", str(tmp_path / "no" / "s.toml")], 1, "does not exist")):
        assert _apply_settings(build_parser().parse_args(argv)) == code
        assert said in capsys.readouterr().err


def test_a_damaged_default_file_is_one_line_on_stderr_never_a_traceback(tmp_path):
    config = tmp_path / "xdg"
    (config / "bmoe-top").mkdir(parents=True)
    (config / "bmoe-top" / "settings.toml").write_bytes(b"[view\nrefresh_s = \xff\n[look]\ncolour_scale = 3\n")
    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(8))
    env = {"XDG_CONFIG_HOME": str(config), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(BMOE_TOP), "replay", str(csv)], capture_output=True, text=True, timeout=60, env=env)
    lines = out.stderr.splitlines()
    assert "Traceback" not in out.stderr
    assert [ln.split(": ", 2)[2] for ln in lines[:3]] == [
        "line 1: not a setting (Expected ']' at the end of a table declaration): [view; skipped",
        "line 2: not UTF-8 text; skipped",
        'line 4: [look] colour_scale = 3: must be one of viridis, cividis, classic; the default "viridis" is used']
    assert out.returncode == 2 and "not a terminal" in lines[-1]


# ------------------------------------------------------------------------------ the other screens
def whatif_app(tmp_path: Path) -> BmoeTopApp:
    from bmoe_top.tui.jobs.whatif import analyse_input, load_whatif
    from bmoe_top.tui.screens.whatif import whatif_app

    (tmp_path / "run.route.csv").write_bytes(synth.route_trace(48, seed=5))
    (tmp_path / "run.csv").write_bytes(synth.token_csv(48, seed=6))
    inp = load_whatif([str(tmp_path / "run.route.csv"), str(tmp_path / "run.csv")])
    report, replay = analyse_input(inp)
    return whatif_app(inp, report, replay, "whatif")


async def test_whatif_keeps_its_chart_choices_and_table_sorts(tmp_path):
    from bmoe_top.tui.widgets.tables import SortTable

    path = tmp_path / "settings.toml"
    BmoeTopApp.settings_store = load(path)
    app = whatif_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("y", "a", "z", "2")
        await pilot.pause()
        s = app.main
        table = s.query_one("#policy-table", SortTable)
        table.data_table.focus()
        await pilot.press("s", "s")
        assert s.all_policies and s.whole_bank and table.sort_col == 1
        sorted_by = (table.table.columns[1].key, table.descending)
    BmoeTopApp.settings_store = load(path)
    again = whatif_app(tmp_path)
    async with again.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        s = again.main
        assert s.all_policies and s.whole_bank and s._lower_metrics()[s.metric] == "io"
        await pilot.press("2")
        await pilot.pause()
        table = s.query_one("#policy-table", SortTable)
        assert (table.table.columns[table.sort_col].key, table.descending) == sorted_by
        assert "sorted by" in str(table.query_one(".sort-head").render())


async def test_compare_keeps_its_token_metric(tmp_path):
    from bmoe_top.tui.analysis.compare import compare
    from bmoe_top.tui.jobs import compare as J
    from bmoe_top.tui.screens.compare import TOKEN_METRICS, compare_app

    paths = []
    for i in range(2):
        p = tmp_path / f"r{i}.csv"
        p.write_bytes(synth.token_csv(50, seed=20 + i))
        paths.append(str(p))

    def make() -> BmoeTopApp:
        loaded = J.load_arms(J.parse_arms(paths, []))
        return compare_app(loaded, compare(J.arm_inputs(loaded)), "compare")

    path = tmp_path / "settings.toml"
    BmoeTopApp.settings_store = load(path)
    app = make()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("y")
        await pilot.pause()
    BmoeTopApp.settings_store = load(path)
    again = make()
    async with again.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert TOKEN_METRICS[again.main.metric][0] == "flash"
    path.write_text('[compare]\ntoken_metric = "tokens"\n')
    BmoeTopApp.settings_store = load(path)
    third = make()
    async with third.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.pause()
        said = " ".join(n.message for n in third._notifications)
        assert "[compare] token_metric = 'tokens': must be one of wall_ms, flash, cache_hit_pct" in said
        assert third.main.metric == 0


async def test_fleet_keeps_its_sort_and_sparklines(tmp_path):
    from bmoe_top.tui.screens.fleet import FleetScreen

    path = tmp_path / "settings.toml"

    def make() -> BmoeTopApp:
        BmoeTopApp.settings_store = load(path)
        # nothing listens on port 9: the table stays empty, the keys work all the same
        return BmoeTopApp(FleetScreen("http://127.0.0.1:9", timeout=0.5))

    app = make()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("s", "s", "i", "v")
        await pilot.pause()
        kept = (app.main.sort, app.main.descending)
        assert kept[0] != "rank" and not app.main.sparks
    again = make()
    async with again.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert (again.main.sort, again.main.descending) == kept and not again.main.sparks


# ------------------------------------------------------------------------------ screenshots
async def test_ctrl_s_saves_a_screenshot_in_the_user_data_folder_and_says_where(tmp_path, csv_run, monkeypatch):
    """Screenshots landed in the working directory (the repository's folder, when bmoe-top was run
    from it), which .gitignore did not cover: they go to the user's data folder now."""
    work, data = tmp_path / "repo", tmp_path / "data"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))  # platformdirs' user data folder on Linux
    BmoeTopApp.settings_store = SettingsStore(None)
    app = BmoeTopApp(ReplayScreen(open_paths(csv_run), title="shot"))
    folder = data / "bmoe-top" / "screenshots"
    assert app.screenshot_folder() == folder
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        shot = app.last_screenshot
        assert shot is not None and shot.parent == folder and shot.suffix == ".svg"
        assert shot.read_text().startswith("<svg") and "bmoe-top" in shot.read_text()
        said = [n for n in app._notifications if n.title == "screenshot saved"]
        assert said and str(shot) in said[-1].message
        await pilot.press("ctrl+s")  # a second one in the same second: a new name, the first kept
        await pilot.pause()
        assert app.last_screenshot != shot and shot.is_file() and len(list(folder.glob("*.svg"))) == 2
    assert list(work.iterdir()) == []  # nothing in the folder it was started in
    assert set(app.screenshots) == set(folder.glob("*.svg"))


def test_gitignore_covers_a_screenshot_that_lands_in_the_repository():
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "bmoe-top-20261205-101500.svg"])
    assert r.returncode == 0


async def test_the_palettes_screenshot_goes_to_the_settings_folder(tmp_path, csv_run):
    folder = tmp_path / "shots"
    folder.mkdir()
    path = tmp_path / "settings.toml"
    path.write_text(f'[screenshots]\nfolder = "{folder}"\n')
    app = start(path, csv_run)
    async with app.run_test(size=(100, 30)) as pilot:
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Screenshot")
        assert str(folder) in command.help
        command.callback()
        shot = await pilot_until(pilot, lambda: app.last_screenshot, "the screenshot written")
        assert shot.parent == folder
        assert not any(n.severity == "error" for n in app._notifications)


async def test_a_screenshot_folder_that_does_not_exist_is_said_not_a_crash(tmp_path, csv_run):
    path = tmp_path / "settings.toml"
    path.write_text(f'[screenshots]\nfolder = "{tmp_path / "gone"}"\n')
    app = start(path, csv_run)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        errors = [n for n in app._notifications if n.title == "screenshot not saved"]
        assert errors and "the folder does not exist" in errors[0].message and app.last_screenshot is None
