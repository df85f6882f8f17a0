"""``bmoe-top fleet --once --json``: one refresh (and one drill-down), as a document.

:func:`fleet_once` never raises for Prometheus trouble: the document's ``status`` says what went
wrong (docs/fleet.md "Headless"). No Textual, no Rich.
"""

from __future__ import annotations

from typing import Any

from bmoe_top.tui.fleet.document import fleet_document
from bmoe_top.tui.fleet.drill import DrillDown
from bmoe_top.tui.fleet.session import TABLE_POINTS, FleetSession
from bmoe_top.tui.fleet.table import FleetTable
from bmoe_top.tui.sources.prometheus import PromError, PrometheusClient

__all__ = ["fleet_once", "exit_code"]


def fleet_once(url: str, selector: str = "", window_s: float = 300.0, instance: str | None = None,
               job: str | None = None, api_key: str | None = None, timeout: float = 10.0,
               points: int = TABLE_POINTS, at: float | None = None) -> dict[str, Any]:
    """The table of the instances ``selector`` picks at ``at`` (``None`` = now), and with
    ``instance`` its drill-down, as the JSON-ready document of
    :func:`~bmoe_top.tui.fleet.document.fleet_document`. Raises ``ValueError`` only for a URL
    or window that cannot be used at all."""
    table: FleetTable | None = None
    drill: DrillDown | None = None
    error = drill_error = None
    with PrometheusClient(url, timeout=timeout, api_key=api_key) as client:
        session = FleetSession(client, selector=selector, window_s=window_s, points=points)
        try:
            table = session.refresh(at)
        except PromError as exc:
            error = exc
        if instance is not None and error is None:
            try:
                drill = session.drill(instance, job=job, at=table.at if table is not None else at)
            except PromError as exc:
                drill_error = exc
    return fleet_document(prometheus=url, selector=selector, window_s=window_s, table=table, error=error,
                          drill=drill, drill_error=drill_error, instance=instance)


def exit_code(doc: dict[str, Any]) -> int:
    """0 when the table (and the asked drill-down) came back, 1 otherwise."""
    if doc.get("status") != "ok":
        return 1
    return 1 if doc.get("instance") is not None and doc.get("drill") is None else 0
