"""Which columns fit (tui/widgets/tables.py ``fit_columns``): a last column of prose shows its
words whole (``cancelled``), only text longer than ``PROSE_WHOLE`` may run off the right edge.
The live Turns table at 80 columns drew ``cancell``."""

from __future__ import annotations

from bmoe_top.tui.present.tables import Column
from bmoe_top.tui.widgets.tables import PROSE_WHOLE, fit_columns

COLS = [Column("turn", "turn"), Column("tokens", "tokens"), Column("end", "end", numeric=False)]
LONG = "rejected: generate: 'prompt' must be a string"


def test_a_word_in_the_last_prose_column_is_shown_whole_or_the_column_goes():
    rows = [["1", "10", "done"], ["2", "5", "cancelled"]]
    need = (4 + 2) + (6 + 2) + (len("cancelled") + 2)
    assert fit_columns(COLS, rows, need)[1] == [0, 1, 2]
    assert fit_columns(COLS, rows, need - 1)[1] == [0, 1]  # it drew "cancell" here: now it goes


def test_longer_prose_needs_only_its_first_cells():
    rows = [["1", "10", "done"], ["3", "7", LONG]]
    need = (4 + 2) + (6 + 2) + (PROSE_WHOLE + 2)
    assert len(LONG) > PROSE_WHOLE
    assert fit_columns(COLS, rows, need)[1] == [0, 1, 2]  # the rest of the sentence runs off the edge
    assert fit_columns(COLS, rows, need - 1)[1] == [0, 1]
