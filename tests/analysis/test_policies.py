"""The registry of cache policies (tui/analysis/policies.py) is the one list: the kernels' codes,
the report, the doc's table of policies and the screen's legend all follow it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from helpers.routing import random_lookups

from bmoe_top.tui.analysis import _kernels as K
from bmoe_top.tui.analysis import policies as P
from bmoe_top.tui.analysis.whatif import whatif

DOC = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


def test_kernel_codes_are_the_kernels() -> None:
    assert P.KERNEL_CODES == {"lfu": K.POLICY_LFU, "fifo": K.POLICY_FIFO, "sieve": K.POLICY_SIEVE,
                              "belady": K.POLICY_BELADY}
    assert len(set(P.KERNEL_CODES.values())) == len(P.KERNEL_CODES)
    assert [p.name for p in P.POLICIES if p.ceiling] == ["belady"]


def test_the_report_has_every_policy_in_the_registry_order_with_its_description() -> None:
    lk = random_lookups(np.random.default_rng(3), n_tokens=30, n_layer=2, n_expert=6, k=2, prefill_tokens=3)
    w = whatif(lk)
    assert [c.policy for c in w.curves] == list(P.NAMES)
    assert [c.label for c in w.curves] == [p.description for p in P.POLICIES]


def test_the_doc_table_lists_the_registry() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Policies"):]
    table = table[: table.index("\n\n", table.index("| policy |"))]
    names = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert names == list(P.NAMES)
