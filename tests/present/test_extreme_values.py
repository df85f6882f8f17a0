"""Any float a ``/metrics`` body can hold (1e20, the largest and smallest doubles, +Inf, -Inf,
NaN) is kept in the ``attach --metrics --once --json`` document or shown as absent, never a
traceback: a count is a JSON integer only while a float holds it exactly (2**53), beyond that the
float itself (orjson has no integer above 64 bits)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import orjson
from helpers.scripted_http import Scripted
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.prom import SERIES, parse_exposition
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.present.metrics import metrics_document, metrics_panel_rows, status_parts
from bmoe_top.tui.present.numbers import to_json, whole
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


def every_series(value: str, n_layer: int = 2) -> bytes:
    """An exposition where every series bmoe-top knows (per layer too) holds ``value``."""
    lines = []
    for s in SERIES:
        lines.append(f"# TYPE {s.name} {s.type}")
        if s.per_layer:
            lines += [f'{s.name}{{layer="{il}"}} {value}' for il in range(n_layer)]
        else:
            lines.append(f"{s.name} {value}")
    lines.append(f"some_other_series {value}")
    return ("\n".join(lines) + "\n").encode()


def document(first: bytes, second: bytes) -> dict:
    p = MetricsPoller("http://127.0.0.1:9/metrics")
    run = bind(p, RunModel()).run
    p.apply(parse_exposition(first, 1.0))
    p.apply(parse_exposition(second, 2.0))
    p.client.close()
    return metrics_document(run)


def kept_or_absent(doc_value, sent: float) -> bool:
    if doc_value is None:
        return True
    return float(doc_value) == sent or (isinstance(doc_value, int) and doc_value == int(sent))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.floats(), b=st.floats())
@example(a=1e20, b=1e20)
@example(a=1.7976931348623157e308, b=-1.7976931348623157e308)
@example(a=math.inf, b=5e-324)
def test_any_float_in_every_series_is_kept_or_absent(a, b):
    doc = document(every_series(repr(a)), every_series(repr(b)))
    text = to_json(doc)  # never a TypeError ("Integer exceeds 64-bit range")
    assert orjson.loads(text)["status"] == "ok"
    for key, v in doc["totals"].items():
        if key in ("hit_pct", "layer_hit_pct", "prompt_tokens_cached"):
            continue
        assert kept_or_absent(v, b), (key, v, b)
    assert all(kept_or_absent(v, b) for v in doc["other_series"].values())
    metrics_panel_rows(doc)  # the screen's rows and status line draw it as well
    status_parts(doc)


def test_a_count_is_an_integer_only_while_a_float_holds_it_exactly():
    assert whole(9007199254740992.0) == 2 ** 53 and isinstance(whole(2.0 ** 53), int)
    assert whole(1e20) == 1e20 and isinstance(whole(1e20), float)
    assert whole(-1e20) == -1e20 and whole(float("inf")) is None and whole(float("nan")) is None
    assert whole(None) is None and whole(3.9) == 3


def test_once_json_with_extreme_counters():
    srv = Scripted()
    try:
        top = str(Path(sys.executable).with_name("bmoe-top"))
        for value in ("1e20", "-1.7976931348623157e308", "+Inf"):
            srv.default = (200, every_series(value), 0.0)
            r = subprocess.run([top, "attach", "--metrics", srv.url, "--once", "--json", "--interval", "0.1"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0 and r.stderr == "", (value, r.stderr[-500:])
            tot = orjson.loads(r.stdout)["totals"]
            sent = float(value)
            expect = sent if math.isfinite(sent) else None
            assert tot["tokens_predicted"] == expect or (expect is not None and tot["tokens_predicted"] == int(sent))
    finally:
        srv.close()


def test_replay_summary_json_with_a_huge_token_count(tmp_path):
    f = tmp_path / "run.txt"
    f.write_text('BMOE_PROGRESS {"step":1,"steps":2,"wall_ms":10,"text":"a"}\n'
                 'BMOE_DONE {"id":1,"tokens":1e20,"tok_s":1e308,"text":"a"}\n'
                 "generation: 100000000000000000000000 tokens, 0.5 s/token (2.0 tok/s)\n")
    top = str(Path(sys.executable).with_name("bmoe-top"))
    r = subprocess.run([top, "replay", "--summary", "--json", str(f)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-500:]
    assert orjson.loads(r.stdout)["tokens"] == 1e23


def test_other_series_of_one_metric_are_told_apart_by_their_labels():
    """Five series of one metric the panel does not know: one row names the metric, one row per
    series names only the labels that differ (they all read ``bmoe:http_rejected_total{…`` cut
    to the side panel's width)."""
    reasons = ["too_large", "bad_json", "unauthorized", "rate_limited", "busy"]
    text = "# TYPE bmoe:http_rejected_total counter\n" + "".join(
        f'bmoe:http_rejected_total{{code="400",reason="{r}"}} {i}\n' for i, r in enumerate(reasons))
    text += "# TYPE other_gauge gauge\nother_gauge 2.5\n"
    snap = parse_exposition(text.encode())
    run = RunModel()
    doc = {"other_series": dict(sorted(snap.others.items())), "status": "ok"}
    rows = metrics_panel_rows({**metrics_document(run), **doc})
    start = next(i for i, (label, _v, kind) in enumerate(rows) if label.startswith("other series"))
    got = [(label, value) for label, value, _k in rows[start + 1:]]
    assert got[0] == ("bmoe:http_rejected_total", "5 series")
    assert sorted(got[1:6]) == sorted((f"  reason={r}", str(i)) for i, r in enumerate(reasons))
    assert got[6] == ("other_gauge", "2.50")
    assert all(len(label) <= 30 for label, _v in got)
