"""The alert rules for Prometheus (``bmoe-top fleet --rules``, docs/alerts.md): promtool accepts
the file, a real Prometheus loads it, and an instance that stops goes pending then firing in
``/api/v1/alerts``; the fleet's table and its ``--once --json`` document carry the alert.

Prometheus evaluates every second (the config's ``evaluation_interval``) and the settings file
sets a 5 s ``for:``: the test waits on the alert's state in the API, never on a duration."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from helpers.exporters import StrataMoeExporter
from helpers.prometheus import Prometheus, need_prometheus, need_promtool, wait_alert, wait_table

from bmoe_top.tui.fleet.rules import fleet_expr, rules_file
from bmoe_top.tui.fleet.session import FleetSession
from bmoe_top.tui.headless import fleet_once
from bmoe_top.tui.model.alerts import DEFAULT_RULES
from bmoe_top.tui.sources.prometheus import PrometheusClient, decode_alerts

JOB = '{job="strata"}'


def rules_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", "--rules", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_rules_file_is_the_default_rules_and_promtool_accepts_it(tmp_path):
    done = rules_cli("--no-config")
    assert done.returncode == 0, done.stderr
    assert done.stdout == rules_file(DEFAULT_RULES)
    doc = yaml.safe_load(done.stdout)
    (group,) = doc["groups"]
    rules = {r["alert"]: r for r in group["rules"]}
    assert set(rules) == {r.name for r in DEFAULT_RULES if r.fleet}
    assert "MemAvailableLow" in done.stdout.splitlines()[1]  # local only: named, not exported
    hit = rules["CacheHitLow"]
    assert hit["for"] == "1m" and hit["labels"] == {"severity": "warning"} and hit["expr"].endswith(") < 30")
    assert "llamacpp:moe_cache_hits_total" in hit["expr"] and set(hit["annotations"]) == {"summary", "description"}
    path = tmp_path / "rules.yml"
    path.write_text(done.stdout)
    check = subprocess.run([need_promtool(), "check", "rules", str(path)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in check.stdout, check.stdout + check.stderr


def test_the_settings_file_changes_the_exported_rules(tmp_path):
    cfg = tmp_path / "settings.toml"
    cfg.write_text('[alerts]\nhit_pct_below = 45\nfor_s = 5\n[alert_rules]\nInstanceDown = "off"\n'
                   'Broken = "fleet.hit_pct <"\nQueued = "fleet.requests_deferred > 4 for 2m critical"\n')
    done = rules_cli("--config", str(cfg), "--selector", JOB)
    assert done.returncode == 0
    assert "Broken" in done.stderr and "the rule is skipped" in done.stderr  # one line, the rest kept
    rules = {r["alert"]: r for r in yaml.safe_load(done.stdout)["groups"][0]["rules"]}
    assert "InstanceDown" not in rules and rules["CacheHitLow"]["for"] == "5s"
    assert rules["CacheHitLow"]["expr"].endswith(") < 45") and 'job="strata"' in rules["CacheHitLow"]["expr"]
    assert rules["Queued"]["for"] == "2m" and rules["Queued"]["labels"]["severity"] == "critical"


def test_an_instance_that_stops_goes_pending_then_firing_in_prometheus(tmp_path):
    need_prometheus()
    cfg = tmp_path / "settings.toml"
    cfg.write_text("[alerts]\nfor_s = 5\n")
    done = rules_cli("--config", str(cfg), "--selector", JOB)
    assert done.returncode == 0, done.stderr
    rules = tmp_path / "rules.yml"
    rules.write_text(done.stdout)
    check = subprocess.run([need_promtool(), "check", "rules", str(rules)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    a, b = StrataMoeExporter(), StrataMoeExporter()
    try:
        with Prometheus(tmp_path / "prom", {"strata": [a.target, b.target]}, rule_files=[rules]) as prom:
            groups = prom.http.get(prom.url + "/api/v1/rules").json()["data"]["groups"]
            loaded = {r["name"]: r for r in groups[0]["rules"]}
            assert loaded["InstanceDown"]["duration"] == 5 and loaded["InstanceDown"]["health"] in ("ok", "unknown")
            b.close()  # the instance stops: its next scrape fails, up = 0
            pending = wait_alert(prom, "InstanceDown", "pending", {"instance": b.target})
            firing = wait_alert(prom, "InstanceDown", "firing", {"instance": b.target})
            assert firing["activeAt"] == pending["activeAt"]  # one hold: pending for 5 s, then firing
            assert firing["labels"]["severity"] == "critical" and firing["labels"]["job"] == "strata"
            assert float(firing["value"]) == 0.0
            assert firing["annotations"]["summary"] == "Prometheus cannot scrape the instance."
            # the running instance has no alert
            alerts = decode_alerts(prom.http.get(prom.url + "/api/v1/alerts").json()["data"])
            assert all(x.labels.get("instance") != a.target for x in alerts)

            # the fleet's table and its document read them from /api/v1/alerts
            with PrometheusClient(prom.url) as client:
                session = FleetSession(client, JOB, window_s=60.0)
                table = wait_table(session, lambda t: any(x.state == "firing" for x in t.alerts), "the alert")
                (alert,) = table.alerts
                assert (alert.name, alert.labels["instance"]) == ("InstanceDown", b.target)
                assert table.alerts_error is None
            doc = fleet_once(prom.url, selector=JOB, window_s=60.0)
            (got,) = doc["table"]["alerts"]
            assert (got["alert"], got["state"], got["severity"], got["instance"]) == (
                "InstanceDown", "firing", "critical", b.target)
    finally:
        a.close()


def test_a_rule_without_a_prometheus_series_is_refused_by_name():
    mem = next(r for r in DEFAULT_RULES if r.name == "MemAvailableLow")
    with pytest.raises(ValueError, match="MemAvailableLow"):
        fleet_expr(mem)


def test_the_fleet_screen_says_the_firing_alerts_in_one_line():
    from bmoe_top.tui.screens.fleet import alerts_text

    data = {"alerts": [
        {"labels": {"alertname": "InstanceDown", "instance": "h:1\x1b[31m", "job": "j"}, "annotations": {},
         "state": "firing", "activeAt": "2026-12-05T06:00:00Z", "value": "0"},
        {"labels": {"alertname": "CacheHitLow", "instance": "h:2", "job": "j"}, "annotations": {},
         "state": "pending", "activeAt": "2026-12-05T06:00:00Z", "value": "3"}]}
    text = alerts_text(decode_alerts(data)).plain
    assert text.startswith("▲ firing 1: InstanceDown h:1") and "\x1b" not in text and "1 pending" in text
    assert alerts_text([]).plain == ""


async def test_the_fleet_screen_shows_the_alerts_prometheus_fires_and_keeps_the_focus():
    from helpers.scripted_prometheus import ScriptedPrometheus
    from helpers.waits import pilot_until

    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.screens.fleet import FleetScreen

    prom = ScriptedPrometheus(instances=("127.0.0.1:1", "127.0.0.1:2"))
    prom.alerts = [
        {"labels": {"alertname": "InstanceDown", "job": "bmoe", "instance": "127.0.0.1:2", "severity": "critical"},
         "annotations": {}, "state": "firing", "activeAt": "2026-12-05T06:00:00Z", "value": "0e+00"},
        {"labels": {"alertname": "Other", "job": "elsewhere", "instance": "10.0.0.9:1"}, "annotations": {},
         "state": "firing", "activeAt": "2026-12-05T06:00:00Z", "value": "1"}]  # not a row: left out
    screen = FleetScreen(prom.url, "", 60)
    try:
        async with BmoeTopApp(screen).run_test(size=(160, 48)) as pilot:
            await pilot_until(pilot, lambda: screen.state.table is not None and screen.state.table.alerts, "alerts")
            focused = screen.app.focused
            await pilot_until(pilot, lambda: "▲ firing 1: InstanceDown 127.0.0.1:2" in screen.status_text().plain,
                              "the status line")
            assert "Other" not in screen.status_text().plain and screen.app.focused is focused
    finally:
        prom.close()


def test_no_rules_is_an_empty_group():
    assert rules_file([]).endswith("rules: []\n")


@pytest.mark.parametrize("mode", [["--rules"], ["--prometheus", "http://127.0.0.1:9", "--once", "--json"],
                                  ["--prometheus", "http://127.0.0.1:9"]])
@pytest.mark.parametrize("selector", ['{job="x', '{job="x"', 'up{job="x"}'])
def test_a_malformed_selector_is_a_usage_error_in_every_fleet_form(mode, selector):
    """``--rules --selector '{job="x'`` printed ``{{job="x}[1m]`` and exit 0; the document and the
    screen sent it to Prometheus."""
    r = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "fleet", *mode, "--selector", selector],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:300])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bmoe-top: fleet --selector {selector}: "), r.stderr
