"""docs/fleet.md and the Grafana dashboard say the PromQL the code asks: every column's
expression appears verbatim on the page, and docs/grafana/bmoe-fleet.json is
``bmoe_top.tui.fleet.grafana.dashboard()`` (rewrite it with ``BMOE_UPDATE_GOLDEN=1``)."""

from __future__ import annotations

import os

import orjson
from helpers import REPO

from bmoe_top.tui.fleet.grafana import RATE, SELECTOR, dashboard
from bmoe_top.tui.fleet.queries import COLUMNS, DRILL_COLUMNS, column_text

DASHBOARD = REPO / "docs" / "grafana" / "bmoe-fleet.json"


def test_page_lists_every_column_query():
    page = (REPO / "docs" / "fleet.md").read_text()
    sel = '{job="bmoe"}'
    for c in COLUMNS + DRILL_COLUMNS:
        assert "`" + column_text(c, sel, "$__rate_interval") + "`" in page, c.key
        assert f"| `{c.key}` |" in page


def test_dashboard_file_is_the_generated_one():
    text = orjson.dumps(dashboard(), option=orjson.OPT_INDENT_2).decode() + "\n"
    if os.environ.get("BMOE_UPDATE_GOLDEN"):
        DASHBOARD.write_text(text)
    assert DASHBOARD.read_text() == text, "docs/grafana/bmoe-fleet.json is stale (see this module's docstring)"


def test_dashboard_panels_use_the_columns_queries():
    d = dashboard()
    table = next(p for p in d["panels"] if p["type"] == "table")
    exprs = [t["expr"] for t in table["targets"]]
    for c in COLUMNS:
        assert column_text(c, SELECTOR, RATE) in exprs, c.key
    assert all(t["instant"] for t in table["targets"])
    heat = next(p for p in d["panels"] if p["type"] == "heatmap")
    assert "sum by (layer)" in heat["targets"][0]["expr"] and "expert" not in heat["targets"][0]["expr"]
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "job", "instance", "drill"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
