"""Any float a Prometheus API answer can hold, in any sample value or timestamp of any query the
fleet asks (a restart count of 1e20, the largest doubles, +Inf, NaN, a time of 1e300 s, a
``layer`` label of 10**23), is kept in ``fleet --once --json`` or shown as absent, never a
traceback. The answers come from a real HTTP server on loopback that speaks the API
(helpers/scripted_prometheus.py): no real Prometheus computes such values."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.scripted_prometheus import ScriptedPrometheus

from bmoe_top.tui.headless import fleet_once
from bmoe_top.tui.present.numbers import to_json
from bmoe_top.tui.widgets.fleet_table import spark_text

INSTANCE = "127.0.0.1:1"
VALUES = ["1e20", "-1e20", "1.7976931348623157e308", "-1.7976931348623157e308", "4.9e-324", "+Inf", "-Inf",
          "NaN", "3"]


@pytest.mark.parametrize("t", [None, 1e300, -1e300])
@pytest.mark.parametrize("value", VALUES)
def test_any_value_and_time_is_kept_or_absent(value, t):
    prom = ScriptedPrometheus(value, instances=(INSTANCE,), t=t, layer="100000000000000000000000")
    try:
        doc = fleet_once(prom.url, instance=INSTANCE, window_s=60)
    finally:
        prom.close()
    back = orjson.loads(to_json(doc))  # never a TypeError ("Integer exceeds 64-bit range")
    assert back["status"] == "ok" and back["drill"] is not None
    (row,) = back["table"]["instances"]
    sent = float(value)
    exact = math.isfinite(sent) and sent.is_integer() and 0 <= sent <= 2 ** 53
    assert row["restarts"] == (int(sent) if exact else None)  # a count, or absent
    for cell in row["cells"].values():
        assert cell["value"] is None or math.isfinite(cell["value"])
    assert back["drill"]["layers"] == []  # a layer label past the cap is no layer
    for v in back["drill"]["totals"].values():
        assert v is None or v == sent


def test_the_cli_prints_a_huge_count():
    prom = ScriptedPrometheus("1e20", instances=(INSTANCE,))
    try:
        top = str(Path(sys.executable).with_name("bmoe-top"))
        r = subprocess.run([top, "fleet", "--prometheus", prom.url, "--once", "--json", "--instance", INSTANCE],
                           capture_output=True, text=True, timeout=120)
    finally:
        prom.close()
    assert r.returncode == 0 and r.stderr == "", r.stderr[-800:]
    doc = orjson.loads(r.stdout)
    assert doc["table"]["instances"][0]["cells"]["tok_s"]["value"] == 1e20
    assert doc["drill"]["totals"]["tokens_predicted"] == 1e20


def test_a_sparkline_spans_the_whole_double_range():
    assert spark_text(np.array([-1.7976931348623157e308, 0.0, 1.7976931348623157e308]), 3) == "▁▅█"
