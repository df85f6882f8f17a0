"""The Grafana dashboard of the fleet, built from the same PromQL as the table (docs/fleet.md).

:func:`dashboard` returns the dashboard JSON (``docs/grafana/bmoe-fleet.json`` is its output): the
instances table (one instant query per column, merged per instance), a time series panel per
column (one line per instance), the flash wait share, ``up``, and the per-layer hit % heatmap of one
instance (``$drill``). Every counter is read with ``rate(...[$__rate_interval])``: Grafana's
interval follows the same rule as bmoe-top's (at least four scrape intervals and one step plus
one scrape interval) provided the data source's "Scrape interval" setting is the real one.
"""

from __future__ import annotations

from typing import Any

from bmoe_top.tui.fleet.queries import COLUMN_BY_KEY, COLUMNS, DERIVED, column_text, label_matcher

__all__ = ["dashboard", "SELECTOR", "RATE"]

#: The panels' label matchers: the dashboard's ``job`` and ``instance`` variables.
SELECTOR = '{job=~"$job", instance=~"$instance"}'
DRILL_SELECTOR = '{job=~"$job", instance="$drill"}'
RATE = "$__rate_interval"

_UNITS = {"tok/s": "short", "%": "percent", "MiB/s": "MiBs", "ms/token": "ms", "experts": "short", "MiB": "mbytes",
          "requests": "short", "% of wall": "percent"}
_DS = {"type": "prometheus", "uid": "${datasource}"}


def _refid(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else "A" + chr(ord("A") + i - 26)


#: The flash wait share's header (the catalogue's ``fleet.stall_share``: flash wait / wall, %).
SHARE = DERIVED["stall_share"][0]


def stall_share_text(sel: str, range_text: str) -> str:
    """The flash wait share (flash wait / wall, %: io in serial I/O, stall under overlap) as one
    PromQL expression."""
    flash = column_text(COLUMN_BY_KEY["flash_ms"], sel, range_text)
    wall = column_text(COLUMN_BY_KEY["wall_ms"], sel, range_text)
    return f"100 * ({flash}) / ({wall})"


def _variable(name: str, query: str, multi: bool, default: str | None = None) -> dict[str, Any]:
    v: dict[str, Any] = {"name": name, "type": "query", "datasource": _DS, "query": {"query": query, "refId": name},
                         "definition": query, "refresh": 2, "multi": multi, "includeAll": multi, "sort": 1}
    if default is not None:
        v["current"] = {"selected": True, "text": default, "value": default}
    return v


def _timeseries(pid: int, title: str, expr: str, unit: str, x: int, y: int, desc: str) -> dict[str, Any]:
    return {"id": pid, "type": "timeseries", "title": title, "description": desc, "datasource": _DS,
            "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
            "targets": [{"refId": "A", "datasource": _DS, "expr": expr, "legendFormat": "{{instance}}",
                         "range": True}],
            "fieldConfig": {"defaults": {"unit": unit, "custom": {"spanNulls": False}}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
                        "tooltip": {"mode": "multi"}}}


def dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (Grafana 9 or later, schema version 39)."""
    panels: list[dict[str, Any]] = []
    table_targets = [{"refId": "A", "datasource": _DS, "expr": f"max by (job, instance) (up{SELECTOR})",
                      "instant": True, "format": "table"}]
    rename = {"Value #A": "up"}
    for i, c in enumerate(COLUMNS, 1):
        ref = _refid(i)
        table_targets.append({"refId": ref, "datasource": _DS, "expr": column_text(c, SELECTOR, RATE),
                              "instant": True, "format": "table"})
        rename[f"Value #{ref}"] = f"{c.label} ({c.unit})" if c.unit not in c.label else c.label
    ref = _refid(len(COLUMNS) + 1)
    table_targets.append({"refId": ref, "datasource": _DS, "expr": stall_share_text(SELECTOR, RATE), "instant": True,
                          "format": "table"})
    rename[f"Value #{ref}"] = SHARE
    panels.append({
        "id": 1, "type": "table", "title": "Instances", "datasource": _DS,
        "description": "One row per instance: the numbers of bmoe-top fleet (docs/fleet.md). An empty cell is a "
                       "series the instance does not export or a rate without two samples yet: never 0.",
        "gridPos": {"h": 9, "w": 24, "x": 0, "y": 0}, "targets": table_targets,
        "transformations": [{"id": "merge", "options": {}},
                            {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}}],
        "fieldConfig": {"defaults": {"decimals": 2}, "overrides": [
            {"matcher": {"id": "byName", "options": "up"},
             "properties": [{"id": "mappings", "value": [{"type": "value", "options": {
                 "0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}}}]},
                 {"id": "custom.cellOptions", "value": {"type": "color-background"}}]}]},
        "options": {"sortBy": [{"displayName": SHARE, "desc": True}]},
    })
    pid = 2
    y = 9
    items: list[tuple[str, str, str, str]] = [
        (c.label, column_text(c, SELECTOR, RATE), _UNITS.get(c.unit, "short"), " or ".join(
            "+".join(alt) for alt in c.needs)) for c in COLUMNS]
    items.append((f"{SHARE} (flash wait / wall)", stall_share_text(SELECTOR, RATE), "percent",
                  "bmoe:token_*_seconds_total"))
    items.append(("up", f"max by (job, instance) (up{SELECTOR})", "short", "up"))
    for n, (title, expr, unit, needs) in enumerate(items):
        panels.append(_timeseries(pid, title, expr, unit, (n % 3) * 8, y + (n // 3) * 8, f"reads {needs}"))
        pid += 1
    y += ((len(items) + 2) // 3) * 8
    drill = label_matcher("instance", "$drill")
    heat = (f"100 * sum by (layer) (rate(llamacpp:moe_cache_layer_hits_total{DRILL_SELECTOR}[{RATE}])) / "
            f"(sum by (layer) (rate(llamacpp:moe_cache_layer_hits_total{DRILL_SELECTOR}[{RATE}])) + "
            f"sum by (layer) (rate(llamacpp:moe_cache_layer_misses_total{DRILL_SELECTOR}[{RATE}])))")
    panels.append({
        "id": pid, "type": "heatmap", "title": "Per-layer hit % ($drill)", "datasource": _DS,
        "description": f"Expert cache hit % per MoE layer of {drill}: the layer counters summed per layer, "
                       "never per expert. Empty where a layer had no lookup.",
        "gridPos": {"h": 12, "w": 24, "x": 0, "y": y},
        "targets": [{"refId": "A", "datasource": _DS, "expr": heat, "legendFormat": "{{layer}}", "range": True,
                     "format": "time_series"}],
        "fieldConfig": {"defaults": {"unit": "percent", "min": 0, "max": 100}, "overrides": []},
        "options": {"calculate": False, "cellGap": 0, "yAxis": {"axisLabel": "layer"},
                    "color": {"mode": "scheme", "scheme": "RdYlGn", "fill": "dark-orange", "min": 0, "max": 100},
                    "rowsFrame": {"layout": "auto"}, "cellValues": {"unit": "percent"},
                    "tooltip": {"show": True, "yHistogram": False}, "legend": {"show": True}},
    })
    return {
        "title": "bmoe fleet: MoE expert streaming",
        "uid": "bmoe-fleet",
        "description": "The numbers of bmoe-top fleet for many runtimes (bmoe-run serve, llama-server with "
                       "--metrics, extended-strata-moe) scraped by Prometheus. Set the data source's scrape "
                       "interval to the real one: $__rate_interval depends on it. docs/fleet.md.",
        "tags": ["bmoe", "llama.cpp", "moe"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-30m", "to": "now"},
        "refresh": "10s",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            _variable("job", "label_values(up, job)", True, "bmoe"),
            _variable("instance", 'label_values(up{job=~"$job"}, instance)', True),
            _variable("drill", 'label_values(llamacpp:moe_cache_layer_hits_total{job=~"$job"}, instance)', False),
        ]},
        "panels": panels,
    }
