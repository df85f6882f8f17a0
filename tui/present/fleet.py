"""The ``bmoe-top fleet --once --json`` document (docs/fleet.md "Headless").

Pure: JSON-ready typed dicts (:class:`FleetDocument` and the shapes it holds) from a
:class:`~bmoe_top.tui.fleet.table.FleetTable`, a :class:`~bmoe_top.tui.fleet.drill.DrillDown`
and the errors a refresh raised. Numbers that are absent or undefined are ``null`` (never 0);
every cell carries its state and age. Label values, messages and bodies are copied as received:
JSON escapes every control character, and a screen sanitises them before drawing.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import NotRequired, Protocol, TypedDict

import numpy as np

from bmoe_top.tui.fleet.drill import DrillDown
from bmoe_top.tui.fleet.queries import COLUMNS, DERIVED
from bmoe_top.tui.fleet.table import Cell, FleetTable, InstanceRow, column_keys

__all__ = ["SCHEMA", "AlertDoc", "CellDoc", "ColumnDoc", "DrillDoc", "ErrorDoc", "FleetAlert", "FleetDocument",
           "InstanceDoc", "TableDoc", "WorstDoc", "columns_document", "drill_document", "error_document",
           "fleet_document", "table_document"]

#: Version of the document's shape.
SCHEMA = 1


class FleetError(Protocol):
    """What the document reads of a failed request
    (:class:`~bmoe_top.tui.sources.prometheus.PromError` has it)."""

    @property
    def kind(self) -> enum.Enum: ...
    @property
    def message(self) -> str: ...
    @property
    def query(self) -> str | None: ...
    @property
    def http_status(self) -> int | None: ...
    @property
    def error_type(self) -> str | None: ...
    @property
    def body(self) -> str | None: ...


class ErrorDoc(TypedDict):
    """A failed request: its kind (docs/fleet.md "Errors, as such"), Prometheus' message, the
    PromQL it carried, the HTTP status, Prometheus' ``errorType``, the raw body (``http``,
    ``malformed``)."""

    kind: str
    message: str
    query: str | None
    http_status: int | None
    error_type: str | None
    body: str | None


class CellDoc(TypedDict):
    value: float | None
    state: str
    age_s: float | None


class ColumnDoc(TypedDict):
    key: str
    label: str
    unit: str
    series: list[str]
    needs: list[list[str]]
    derived: bool
    doc: NotRequired[str]


class InstanceDoc(TypedDict):
    job: str
    instance: str
    labels: dict[str, str]
    state: str
    rank: int
    flags: list[str]
    last_up_age_s: float | None
    restarts: int | None
    cells: dict[str, CellDoc]
    spark: dict[str, list[float | None]]


class WorstDoc(TypedDict):
    job: str
    instance: str
    labels: dict[str, str]
    flags: list[str]


class AlertDoc(TypedDict):
    alert: str
    state: str
    severity: str | None
    job: str
    instance: str
    labels: dict[str, str]
    value: float | None
    active_at: float | None
    summary: str | None


class TableDoc(TypedDict):
    at: float
    window_s: float
    step_s: float
    rate_interval_s: float
    scrape_interval_s: float
    by: list[str]
    detail_rows: int
    queries_per_refresh: int
    queries: dict[str, str]
    errors: dict[str, ErrorDoc]
    warnings: list[str]
    t: list[float]
    instances: list[InstanceDoc]
    worst: WorstDoc | None
    alerts: list[AlertDoc]
    alerts_error: ErrorDoc | None


class DrillDoc(TypedDict):
    job: str
    instance: str
    labels: dict[str, str]
    at: float
    window_s: float
    step_s: float
    rate_interval_s: float
    scrape_interval_s: float
    first_t: float | None
    queries_per_refresh: int
    queries: dict[str, str]
    errors: dict[str, ErrorDoc]
    t: list[float]
    series: dict[str, list[float | None]]
    not_exported: list[str]
    no_data: list[str]
    layers: list[int]
    layer_hits_per_s: list[list[float | None]]
    layer_misses_per_s: list[list[float | None]]
    layer_hit_pct: list[list[float | None]]
    totals: dict[str, float | None]


class FleetDocument(TypedDict):
    schema: int
    prometheus: str
    selector: str
    window_s: float
    status: str
    error: ErrorDoc | None
    columns: list[ColumnDoc]
    table: TableDoc | None
    instance: NotRequired[str]
    drill: NotRequired[DrillDoc | None]
    drill_error: NotRequired[ErrorDoc | None]


def _num(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _arr(a: np.ndarray) -> list[float | None]:
    return [x if math.isfinite(x) else None for x in a.tolist()]


def _cell(c: Cell) -> CellDoc:
    return {"value": _num(c.value), "state": c.state.value, "age_s": _num(c.age_s)}


def error_document(err: FleetError) -> ErrorDoc:
    """A failed request as JSON (bodies and messages as received)."""
    return {"kind": str(err.kind.value), "message": err.message, "query": err.query,
            "http_status": err.http_status, "error_type": err.error_type, "body": err.body}


def columns_document() -> list[ColumnDoc]:
    """Every column: ``key``, ``label``, ``unit``, ``series`` (what it reads), ``needs`` (the
    alternatives, each a list of series that must all be exported), ``derived``."""
    out: list[ColumnDoc] = [{"key": c.key, "label": c.label, "unit": c.unit, "series": list(c.series),
                             "needs": [list(a) for a in c.needs], "derived": False} for c in COLUMNS]
    out += [{"key": k, "label": label, "unit": unit, "series": [], "needs": [], "derived": True, "doc": doc}
            for k, (label, unit, doc) in DERIVED.items()]
    return out


def _row(r: InstanceRow) -> InstanceDoc:
    return {"job": r.job, "instance": r.instance, "labels": dict(r.labels), "state": r.state.value, "rank": r.rank,
            "flags": list(r.flags), "last_up_age_s": _num(r.last_up_age_s), "restarts": r.restarts,
            "cells": {k: _cell(r.cells[k]) for k in column_keys()},
            "spark": {k: _arr(v) for k, v in r.spark.items()}}


def table_document(table: FleetTable) -> TableDoc:
    """The table: its times and rules, the queries behind it, the rows in rank order (a row not
    read in detail, in a fleet past ``FleetSession.detail_rows``, has no sparklines: ``spark``
    empty; ``detail_rows`` counts the others), the worst, and Prometheus's pending and firing
    alerts on its rows (``alerts``, firing first; ``alerts_error`` when they could not be read)."""
    worst = table.worst
    return {
        "at": table.at, "window_s": table.window_s, "step_s": table.step_s,
        "rate_interval_s": table.rate_interval_s, "scrape_interval_s": table.scrape_interval_s,
        "by": list(table.by), "detail_rows": len(table.detail),
        "queries_per_refresh": table.n_queries, "queries": dict(table.queries),
        "errors": {k: error_document(e) for k, e in table.errors.items()}, "warnings": list(table.warnings),
        "t": table.t.tolist(),
        "instances": [_row(r) for r in table.rows],
        "worst": None if worst is None else {"job": worst.job, "instance": worst.instance,
                                             "labels": dict(worst.labels), "flags": list(worst.flags)},
        "alerts": [_alert(a) for a in table.alerts],
        "alerts_error": None if table.alerts_error is None else error_document(table.alerts_error),
    }


class FleetAlert(Protocol):
    """What the document reads of one of Prometheus's alerts (``sources.prometheus.PromAlert``)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...
    @property
    def active_at(self) -> float | None: ...


def _alert(a: FleetAlert) -> AlertDoc:
    return {"alert": a.name, "state": a.state, "severity": a.labels.get("severity"), "job": a.labels.get("job", ""),
            "instance": a.labels.get("instance", ""), "labels": dict(a.labels), "value": _num(a.value),
            "active_at": a.active_at, "summary": a.annotations.get("summary")}


def drill_document(d: DrillDown) -> DrillDoc:
    """The drill-down's numbers: times and rules, time series, heatmap, totals, queries."""
    return {
        "job": d.job, "instance": d.instance, "labels": dict(d.labels), "at": d.at, "window_s": d.window_s,
        "step_s": d.step_s, "rate_interval_s": d.rate_interval_s, "scrape_interval_s": d.scrape_interval_s,
        "first_t": d.first_t, "queries_per_refresh": d.n_queries, "queries": dict(d.queries),
        "errors": {k: error_document(e) for k, e in d.errors.items()},
        "t": d.t.tolist(), "series": {k: _arr(v) for k, v in d.series.items()},
        "not_exported": list(d.not_exported), "no_data": list(d.no_data),
        "layers": list(d.layers),
        "layer_hits_per_s": [_arr(row) for row in d.layer_hits],
        "layer_misses_per_s": [_arr(row) for row in d.layer_misses],
        "layer_hit_pct": [_arr(row) for row in d.layer_hit_pct],
        "totals": {k: _num(v) for k, v in d.totals.items()},
    }


def fleet_document(*, prometheus: str, selector: str, window_s: float, table: FleetTable | None = None,
                   error: FleetError | None = None, drill: DrillDown | None = None,
                   drill_error: FleetError | None = None, instance: str | None = None) -> FleetDocument:
    """The whole document. ``status`` is ``ok``, or the error kind of the failed refresh
    (``unreachable``, ``bad_data``, ``empty``, ...) with ``error`` saying more; with an
    ``instance``, ``drill`` holds its numbers or ``drill_error`` why not."""
    doc: FleetDocument = {
        "schema": SCHEMA, "prometheus": prometheus, "selector": selector, "window_s": window_s,
        "status": "ok" if error is None else str(error.kind.value),
        "error": None if error is None else error_document(error),
        "columns": columns_document(),
        "table": None if table is None else table_document(table),
    }
    if instance is not None:
        doc["instance"] = instance
        doc["drill"] = None if drill is None else drill_document(drill)
        doc["drill_error"] = None if drill_error is None else error_document(drill_error)
    return doc
