"""tui/settings.py with real files: a damaged or unknown entry is one line and its default, the rest
kept; the file is written whole and atomically, never through a symbolic link; two bmoe-tops
changing different settings keep both; hypothesis damages files line by line and byte by byte."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bmoe_top.tui import settings as S
from bmoe_top.tui.settings import Settings, SettingsStore, SortSetting

#: Every entry set to a value other than its default (the sort of one table too).
CHANGED = {
    "look.theme": "nord", "look.colour_scale": "cividis", "view.refresh_s": 2.0, "view.fold_maps": False,
    "view.compact_map": "experts", "view.expert_map": "tiers", "panels.trends": False, "panels.answer": False,
    "panels.maps": False,
    "fleet.window": "15m", "fleet.sort": "hit_pct", "fleet.descending": True, "fleet.sparklines": False,
    "fleet.hidden_columns": ("job",), "whatif.metric": "io", "whatif.all_policies": True, "whatif.whole_bank": True,
    "compare.token_metric": "flash", "alerts.hit_pct_below": 50.0, "alerts.flash_share_pct_above": 40.0,
    "alerts.tok_s_below": 5.0, "alerts.rss_mib_above": 4096.0, "alerts.temp_c_above": 80.0,
    "alerts.quiet_s_above": 30.0, "alerts.stall_share_pct_above": 60.0, "alerts.mem_available_mib_below": 256.0,
    "alerts.tok_s_collapse_pct_below": 40.0, "alerts.for_s": 5.0, "screenshots.folder": "/tmp/shots",
    "probe.file": "/m/model.gguf", "probe.slice_bytes": 208896.0, "probe.direct_mb_s": (310.5, 820.0),
    "probe.buffered_mb_s": (150.25, 400.0), "probe.mmap_mb_s": 1235.5, "probe.mmap_readahead_kb": 8192.0,
}


def changed() -> Settings:
    s = Settings()
    for name, value in CHANGED.items():
        s = s.with_value(name, value)
    s = s.with_value("alert_rules.SlowToken", "token.wall_ms > 500 for 2m critical")
    return s.with_value("sort.turns", SortSetting("tok/s", True))


def test_every_entry_is_in_the_change_table():
    names = {f"{sec}.{f.name}" for sec, cls in S.SECTIONS.items() for f in dataclasses.fields(cls)}
    assert names == set(CHANGED)


def test_the_defaults_and_a_changed_file_read_back_as_written():
    for s in (Settings(), changed()):
        got, problems, unknown = S.parse(S.dumps(s))
        assert got == s and problems == [] and unknown == {}
    text = S.dumps(changed())
    assert "[sort.turns]" in text and 'column = "tok/s"' in text and "hit_pct_below = 50.0" in text
    # an alert left out is written commented out: the file lists every entry
    assert "# hit_pct_below =" in S.dumps(Settings())


def test_a_store_writes_on_a_change_and_the_next_start_reads_it(tmp_path):
    path = tmp_path / "cfg" / "settings.toml"
    store = SettingsStore.open(path, create_folder=True)
    assert store.settings == Settings() and store.problems == [] and not path.exists()
    assert store.set("view.refresh_s", 2.0) is None
    assert store.set("sort.requests", SortSetting("tokens", True)) is None
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    again = SettingsStore.open(path)
    assert again.settings.view.refresh_s == 2.0 and again.settings.sort["requests"] == SortSetting("tokens", True)
    assert again.problems == []
    # a change to the value already held writes nothing
    writes = again.writes
    again.set("view.refresh_s", 2.0)
    assert again.writes == writes


def test_a_value_an_entry_refuses_is_the_callers_mistake(tmp_path):
    store = SettingsStore.open(tmp_path / "s.toml")
    with pytest.raises(ValueError):
        store.set("view.refresh_s", 99.0)
    with pytest.raises(ValueError):
        store.set("view.nothing", 1)
    with pytest.raises(ValueError):
        store.set("look.colour_scale", "rainbow")
    assert not (tmp_path / "s.toml").exists()


DAMAGE = [
    ("refresh_s = 1.0", 'refresh_s = "fast"',
     '[view] refresh_s = "fast": must be a number of seconds from 0.1 to 10; the default 1.0 is used'),
    ("refresh_s = 1.0", "refresh_s = 0.01",
     "[view] refresh_s = 0.01: must be a number of seconds from 0.1 to 10; the default 1.0 is used"),
    ('colour_scale = "viridis"', 'colour_scale = "rainbow"',
     '[look] colour_scale = "rainbow": must be one of viridis, cividis, classic; the default "viridis" is used'),
    ("fold_maps = true", "fold_maps = yes", "not a setting"),
    ("fold_maps = true", "fold_maps = 1", "[view] fold_maps = 1: must be true or false; the default true is used"),
    ('window = "5m"', 'window = "soon"', '[fleet] window = "soon": must be a duration'),
    ("sparklines = true", "sparkles = true", "unknown setting [fleet] sparkles; ignored"),
    ("[panels]", "[panes]", "unknown section [panes]; ignored"),
    ('folder = ""', 'folder = "a\\u001b[2Jb"', "[screenshots] folder = "),
]


@pytest.mark.parametrize(("good", "bad", "said"), DAMAGE)
def test_a_damaged_entry_is_one_line_and_its_default_the_rest_kept(tmp_path, good, bad, said):
    text = S.dumps(changed())
    # the changed file holds other values than the defaults' at these places
    text = (text.replace("refresh_s = 2.0", "refresh_s = 1.0")
            .replace('colour_scale = "cividis"', 'colour_scale = "viridis"')
            .replace("fold_maps = false", "fold_maps = true").replace('window = "15m"', 'window = "5m"')
            .replace("sparklines = false", "sparklines = true").replace('folder = "/tmp/shots"', 'folder = ""'))
    assert good in text
    path = tmp_path / "settings.toml"
    path.write_text(text.replace(good, bad, 1))
    store = SettingsStore.open(path)
    assert len(store.problems) == 1, store.problems
    line = str(store.problems[0])
    assert said in line and "\x1b" not in line and "\n" not in line
    want_line = text.split("\n").index(good) + 1
    if not bad.startswith("["):
        assert line.startswith(f"line {want_line}: ")
    s = store.settings
    # every entry the damage did not touch keeps its (non-default) value
    assert s.look.theme == "nord" and s.whatif.metric == "io" and s.alerts.hit_pct_below == 50.0
    assert s.sort["turns"] == SortSetting("tok/s", True)
    if bad.startswith("[panes]"):
        assert s.panels == S.PanelSettings()
    else:
        assert s.panels.trends is False


def test_unknown_entries_and_a_newer_version_are_kept_when_the_file_is_written(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('version = 7\n[view]\nrefresh_s = 5.0\nsparkle = "on"\n[gpu]\nfan = 3\n')
    store = SettingsStore.open(path)
    said = [str(p) for p in store.problems]
    assert said == ["line 1: written by a newer bmoe-top (version 7; this one reads 1): the entries it does not know "
                    "are kept, unused", "line 4: unknown setting [view] sparkle; ignored",
                    "unknown section [gpu]; ignored"]
    store.set("look.colour_scale", "classic")
    text = path.read_text()
    assert "version = 7" in text and 'sparkle = "on"' in text and "fan = 3" in text and "refresh_s = 5.0" in text
    again = SettingsStore.open(path)
    assert again.settings.look.colour_scale == "classic" and again.settings.view.refresh_s == 5.0


def test_two_stores_changing_different_settings_keep_both(tmp_path):
    path = tmp_path / "settings.toml"
    a, b = SettingsStore.open(path), SettingsStore.open(path)
    a.set("view.refresh_s", 5.0)
    b.set("look.colour_scale", "classic")
    s = SettingsStore.open(path).settings
    assert s.view.refresh_s == 5.0 and s.look.colour_scale == "classic"


def test_a_symbolic_link_is_read_but_never_written_through(tmp_path):
    target = tmp_path / "dotfiles" / "settings.toml"
    target.parent.mkdir()
    target.write_text("[view]\nrefresh_s = 5.0\n")
    link = tmp_path / "settings.toml"
    link.symlink_to(target)
    store = SettingsStore.open(link)
    assert store.settings.view.refresh_s == 5.0
    said = store.set("view.fold_maps", False)
    assert said is not None and "symbolic link" in said and said.startswith("settings not saved: cannot write ")
    assert store.set("view.compact_map", "experts") is None  # the same refusal again: said once
    assert target.read_text() == "[view]\nrefresh_s = 5.0\n" and link.is_symlink()
    assert store.settings.view.compact_map == "experts"  # in use for this run all the same


@pytest.mark.parametrize("kind", ["directory", "too big"])
def test_a_file_that_cannot_be_read_is_one_line_the_defaults_and_no_writes(tmp_path, kind):
    path = tmp_path / "settings.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "too big":
        path.write_text("# " + "x" * S.MAX_BYTES + "\n")
    else:
        path.write_bytes(b"[view]\nrefresh_s = 5.0\n\0\0\0")
    before = path.stat().st_mtime_ns
    store = SettingsStore.open(path)
    assert store.settings == Settings() and len(store.problems) == 1 and not store.writable
    assert "the defaults are used and changes are not saved" in str(store.problems[0])
    store.set("view.refresh_s", 5.0)
    assert path.stat().st_mtime_ns == before and store.settings.view.refresh_s == 5.0


def test_a_line_that_is_not_utf8_is_damaged_alone(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_bytes(b'[look]\ncolour_scale = "classic"\ntheme = "\xff\xfe"\n[view]\nrefresh_s = 5.0\n')
    store = SettingsStore.open(path)
    assert [str(p) for p in store.problems] == ["line 3: not UTF-8 text; skipped"]
    assert store.settings.look.colour_scale == "classic" and store.settings.view.refresh_s == 5.0


def test_a_sort_without_a_column_is_no_sort(tmp_path):
    got, problems, _ = S.parse('[sort.turns]\ndescending = true\n[sort.fleet]\ncolumn = "tok_s"\ndescending = 3\n')
    assert got.sort == {"fleet": SortSetting("tok_s", False)}
    assert [str(p) for p in problems] == [
        "line 5: [sort.fleet] descending = 3: must be true or false; ascending is used",
        "[sort.turns] has no column; the table is not sorted"]


def test_the_default_path_is_in_the_config_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert S.default_path() == tmp_path / "bmoe-top" / "settings.toml"
    store = S.load(S.default_path())
    store.set("view.refresh_s", 0.5)
    assert (tmp_path / "bmoe-top" / "settings.toml").is_file()


# ------------------------------------------------------------------------------------ hypothesis
_KEY_LINES = [i for i, line in enumerate(S.dumps(changed()).split("\n"))
              if line and not line.startswith(("#", "[")) and "=" in line and not line.startswith("version")]
_GARBAGE = st.tuples(st.sampled_from("!@$%^&*=;:,.?"), st.text(max_size=40)).map(lambda t: t[0] + t[1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damaged=st.dictionaries(st.sampled_from(_KEY_LINES), _GARBAGE, max_size=8))
def test_damaged_lines_lose_only_their_own_entries(tmp_path, damaged):
    lines = S.dumps(changed()).split("\n")
    lost = set()
    section = ""
    for i, line in enumerate(lines):
        if line.startswith("["):
            section = line.strip("[]")
        if i in damaged:
            lost.add((section, line.split(" =")[0]))
            lines[i] = damaged[i].replace("\n", " ").replace("\r", " ")
    path = tmp_path / "settings.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    store = SettingsStore.open(path)
    # a sort table's column line lost: the table is not sorted, which is said too
    assert len(store.problems) == len(damaged) + (("sort.turns", "column") in lost)
    want, got = changed(), store.settings
    for name in CHANGED:
        section, key = name.split(".")
        expect = Settings().get(name) if (section, key) in lost else want.get(name)
        assert got.get(name) == expect, name
    if ("sort.turns", "column") not in lost:
        assert got.sort["turns"].column == "tok/s"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bytes_read_never_raise_and_every_value_passes_its_check(tmp_path, data):
    base = bytearray(S.dumps(changed()).encode())
    for _ in range(data.draw(st.integers(0, 12))):
        at = data.draw(st.integers(0, len(base) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            base[at] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del base[at: at + data.draw(st.integers(1, 30))]
        else:
            base[at:at] = data.draw(st.binary(max_size=20))
        if not base:
            break
    path = tmp_path / "settings.toml"
    path.write_bytes(bytes(base))
    store = SettingsStore.open(path)
    s = store.settings
    for name in CHANGED:
        value = s.get(name)
        assert Settings().with_value(name, value).get(name) == value  # passes its own check
    for line in map(str, store.problems):
        assert "\n" not in line and "\x1b" not in line
    # a store over a damaged file still writes a file that reads back without problems
    if store.writable:
        store.set("view.refresh_s", 7.0 if s.view.refresh_s != 7.0 else 8.0)
        again = SettingsStore.open(path)
        assert again.settings.view.refresh_s in (7.0, 8.0)
        assert all("unknown" in str(p) or "newer" in str(p) for p in again.problems), again.problems


def test_writing_leaves_no_temporary_file_behind(tmp_path):
    path = tmp_path / "settings.toml"
    store = SettingsStore.open(path)
    for v in (0.5, 2.0, 5.0):
        store.set("view.refresh_s", v)
    assert sorted(os.listdir(tmp_path)) == ["settings.toml"]
    assert Path(path).read_text().count("refresh_s = 5.0") == 1


def test_alert_rules_read_back_and_a_damaged_rule_is_one_line_skipped(tmp_path):
    from bmoe_top.tui.model.alerts import DEFAULT_RULES

    text = S.dumps(changed())
    assert '[alert_rules]' in text and 'SlowToken = "token.wall_ms > 500 for 2m critical"' in text
    text = text.replace("[alert_rules]\n", '[alert_rules]\nBroken = "token.nope < 3"\nAlsoBroken = '
                        '"token.cache_hit_pct << 3"\nTemperatureHigh = "off"\n'
                        'LowHit = "token.cache_hit_pct < 40 for 1m30s"\n')
    got, problems, unknown = S.parse(text)
    assert [p.text.split(" = ")[0] for p in problems] == ["[alert_rules] Broken", "[alert_rules] AlsoBroken"]
    assert all(p.line is not None and "the rule is skipped" in p.text for p in problems) and unknown == {}
    rules = {r.name: r for r in got.rules()}
    assert "Broken" not in rules and "TemperatureHigh" not in rules
    assert rules["LowHit"].for_s == 90.0 and rules["LowHit"].threshold == 40.0
    assert rules["SlowToken"].severity == "critical" and rules["SlowToken"].for_s == 120.0
    # [alerts]: thresholds and for: of the defaults, the extra rules when set
    assert rules["CacheHitLow"].threshold == 50.0 and rules["MemAvailableLow"].threshold == 256.0
    assert rules["TokSCollapse"].threshold == 40.0 and all(rules[r.name].for_s == 5.0 for r in DEFAULT_RULES
                                                            if r.name != "TemperatureHigh")
    assert rules["TokSLow"].threshold == 5.0 and rules["RssHigh"].threshold == 4096.0
    assert {r.name for r in Settings().rules()} == {r.name for r in DEFAULT_RULES}
    assert Settings().rules() == DEFAULT_RULES


def test_thresholds_and_rules_persist_through_the_store(tmp_path):
    path = tmp_path / "settings.toml"
    store = SettingsStore.open(path)
    assert store.set("alerts.hit_pct_below", 45.0) is None
    assert store.set("alert_rules.Hot", "device.cpu_temp_max > 70 for 10s critical") is None
    with pytest.raises(ValueError):
        store.set("alert_rules.Bad", "token.cache_hit_pct ~ 3")
    again = SettingsStore.open(path)
    assert again.problems == []
    rules = {r.name: r for r in again.settings.rules()}
    assert rules["CacheHitLow"].threshold == 45.0 and rules["Hot"].threshold == 70.0
    assert again.set("alert_rules.Hot", None) is None
    assert "Hot" not in {r.name for r in SettingsStore.open(path).settings.rules()}


@settings(max_examples=300)
@given(text=st.text(max_size=80))
def test_a_rule_line_of_any_text_parses_or_says_why(text):
    try:
        S.parse_rule("R", text)
    except (ValueError, KeyError) as e:
        assert str(e)
    got, problems, _unknown = S.parse(f"[alert_rules]\nR = {tomli_w_quote(text)}\nKept = \"token.rss_mib > 1\"\n")
    assert "Kept" in got.alert_rules and len(problems) <= 1  # a damaged rule never takes its neighbour


def tomli_w_quote(text: str) -> str:
    import tomli_w

    return tomli_w.dumps({"v": text}).partition("=")[2].strip()


@settings(max_examples=200)
@given(key=st.sampled_from(["token.cache_hit_pct", "recent.tok_s", "fleet.up", "device.cpu_temp_max"]),
       op=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
       threshold=st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: float(f"{x:g}")),
       for_s=st.sampled_from([0.0, 1.0, 90.0, 3600.0]), severity=st.sampled_from(["info", "warning", "critical"]))
def test_a_written_rule_reads_back(key, op, threshold, for_s, severity):
    rule = S.parse_rule("R", f"{key} {op} {threshold:g} for {for_s:g}s {severity}")
    assert rule is not None
    assert (rule.key, rule.op, rule.threshold, rule.for_s, rule.severity) == (key, op, threshold, for_s, severity)


def test_the_best_probed_bandwidth_is_what_the_diagnosis_compares_with():
    assert S.ProbeSettings().best_mb_s is None  # nothing probed: the flash rule does not fire
    assert S.ProbeSettings(direct_mb_s=(900.0, 2400.0), buffered_mb_s=(1800.0,)).best_mb_s == 2400.0
