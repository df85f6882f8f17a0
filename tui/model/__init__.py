"""The run model: one store per run that every source feeds (through ``bmoe_top.tui.feed``) and
every view reads. No Textual or Rich import. API: docs/architecture.md "The run model"."""

from bmoe_top.tui.model.columns import ColumnsReader, ColumnStats, Series
from bmoe_top.tui.model.routes import ExpertCounts, LayerShares, RoutesReader
from bmoe_top.tui.model.run import BASE_COLUMNS, KEEP_ALL, LIVE, MAX_PROBLEMS, Retention, RunModel
from bmoe_top.tui.model.status import RowUnit, Status
from bmoe_top.tui.model.turns import TURNLESS_STATUSES, ProblemEntry, Turn, TurnlessRequest, in_session_order

__all__ = [
    "BASE_COLUMNS", "KEEP_ALL", "LIVE", "MAX_PROBLEMS", "ColumnStats", "ColumnsReader", "ExpertCounts",
    "LayerShares", "ProblemEntry", "Retention", "RoutesReader", "RowUnit", "RunModel", "Series", "Status",
    "TURNLESS_STATUSES", "Turn", "TurnlessRequest", "in_session_order",
]
