"""The title's numbers (tui/widgets/panels.py ``header_parts``): the scope its first part names
is what the figures cover, as of the viewed row."""

from __future__ import annotations

from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import header_parts


def run_of(n: int, live: bool) -> RunModel:
    run = RunModel()
    run.set_status(Status.GENERATING if live else Status.DONE)
    run.add_token_rows({"wall_ms": [10.0] * n, "cache_hit_pct": [50.0] * n}, n)
    return run


def first(run: RunModel, stop: int | None) -> str:
    return header_parts(run, Look(), stop=stop)[0][0]


def test_a_live_run_viewed_at_an_early_row_names_those_rows_not_the_run():
    # paused at token 2 of a long live session the title said "run: ..." over tokens 1-2,
    # while the run panel beside it said "tokens 1-2"
    run = run_of(500, live=True)
    assert first(run, 2) == "tokens 1-2:"
    assert first(run, 200) == first(run, None) == "last 32:"  # the newest 32 rows up to the viewed one
    assert first(run_of(10, live=True), None) == "run:"  # the newest row of a short live run: all of it


def test_a_finished_run_names_the_run_at_its_end_and_the_rows_before_it():
    run = run_of(300, live=False)
    assert first(run, None) == "run:" and first(run, 120) == "tokens 1-120:"
