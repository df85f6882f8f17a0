"""The user guide's keys, screen by screen, are the key tables (tui/widgets/keymap.py): the
section between the ``keys:`` markers of docs/user-guide.md is made from them, and this test
fails when the two differ (``BMOE_UPDATE_GOLDEN=1`` writes the section again)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.screens.attach_metrics import MetricsAttachScreen
from bmoe_top.tui.screens.compare import CompareScreen
from bmoe_top.tui.screens.fleet import FleetDrillScreen, FleetScreen
from bmoe_top.tui.screens.live import LiveScreen
from bmoe_top.tui.screens.replay import ReplayScreen
from bmoe_top.tui.screens.sweep import SweepScreen
from bmoe_top.tui.screens.whatif import WhatIfScreen
from bmoe_top.tui.widgets.keymap import markdown

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
SCREENS = {"replay": ReplayScreen, "live": LiveScreen, "attach --metrics": MetricsAttachScreen,
           "attach --audit": AuditAttachScreen, "whatif": WhatIfScreen, "compare": CompareScreen,
           "sweep": SweepScreen,
           "fleet": FleetScreen, "fleet drill-down": FleetDrillScreen}
BLOCK = re.compile(r"(<!-- keys: (?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- /keys -->)", re.S)


def test_the_guides_keys_are_the_screens_tables():
    text = GUIDE.read_text(encoding="utf-8")
    found = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
    assert set(found) == set(SCREENS), f"the guide's key sections: {sorted(found)}, the screens: {sorted(SCREENS)}"
    want = {name: markdown(cls.KEYS) for name, cls in SCREENS.items()}
    if os.environ.get("BMOE_UPDATE_GOLDEN") == "1":
        GUIDE.write_text(BLOCK.sub(lambda m: m.group(1) + want[m.group("name")] + m.group(4), text), encoding="utf-8")
        return
    for name, body in found.items():
        assert body == want[name], f"docs/user-guide.md keys of {name!r} differ from the screen's table"
