"""``bmoe-run serve``'s residency gauges (``llamacpp:moe_cache_resident``, ``..._resident_bytes``,
docs/metrics.md) as a real process over real HTTP: what the cache holds after each request, the
same experts its audit ``exit`` record lists, never over the budget, and not exported without a
cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.serve import Serve, complete, scrape_value

from bmoe_top.parsers.audit import read_audit_file
from bmoe_top.parsers.gguf_layout import read_layout

RESIDENT = "llamacpp:moe_cache_resident"
RESIDENT_BYTES = "llamacpp:moe_cache_resident_bytes"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


def test_resident_gauges_follow_the_cache(tiny, tmp_path):
    audit = tmp_path / "a.jsonl"
    s = Serve(tiny, "--cache-mb", "0.4", "--moe-cache-audit", str(audit))
    try:
        assert scrape_value(s.url, RESIDENT) == 0 and scrape_value(s.url, RESIDENT_BYTES) == 0  # nothing read yet
        slots = scrape_value(s.url, "llamacpp:moe_cache_slots")
        budget = scrape_value(s.url, "llamacpp:moe_cache_bytes")
        seen = []
        for i, n in enumerate((6, 12)):
            assert complete(s.url, f"fill the cache {i}", n).status_code == 200
            seen.append((scrape_value(s.url, RESIDENT), scrape_value(s.url, RESIDENT_BYTES)))
    finally:
        assert s.stop() == 0
    lay = read_layout(str(tiny))
    run = read_audit_file(audit).runs[0]
    resident = run.resident()  # the exit record's lists: the cache after the last request
    n_res, n_bytes = seen[-1]
    assert n_res == sum(len(v) for v in resident.values()) > 0
    assert n_bytes == sum(lay.expert_bytes[il] * len(v) for il, v in resident.items())
    for n, b in seen:
        assert 0 < n <= slots and 0 < b <= budget


def test_no_cache_no_resident_gauges(tiny):
    s = Serve(tiny, "--no-moe-stream")
    try:
        assert complete(s.url, "no cache", 4).status_code == 200
        assert scrape_value(s.url, RESIDENT) is None and scrape_value(s.url, RESIDENT_BYTES) is None
    finally:
        s.stop()


def test_attach_metrics_reads_the_resident_bytes(tiny, capsys):
    # the run document's resident is the server's llamacpp:moe_cache_resident_bytes in MiB
    # (the catalogue's summary.resident_mib), never "not exported" while the server exports it
    import orjson

    from bmoe_top.tui.cli import main

    s = Serve(tiny, "--cache-mb", "0.4")
    try:
        assert complete(s.url, "fill the cache", 6).status_code == 200
        resident_bytes = scrape_value(s.url, RESIDENT_BYTES)
        assert main(["attach", "--metrics", f"{s.url}/metrics", "--once", "--json"]) == 0
    finally:
        assert s.stop() == 0
    run = orjson.loads(capsys.readouterr().out)["run"]
    assert resident_bytes and resident_bytes > 0
    assert run["resident_mib"] == resident_bytes / 2**20
    assert "resident_mib" not in run["absent"]
