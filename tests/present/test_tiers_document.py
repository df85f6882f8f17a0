"""The memory tiers in the headless documents (docs/memory.md "The three tiers in bmoe-run"):
``launch --once --json`` of a real ``bmoe-run`` and ``replay --summary --json`` of its recording
carry the same ``tiers`` block, typed by ``TierDoc``; a source that sends no tiers has none."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from helpers import synth
from helpers.typed_json import check_typed

from bmoe_top.tui.cli import main
from bmoe_top.tui.present.summary import TierDoc

BMOE_RUN = Path(sys.executable).with_name("bmoe-run")
#: The live child's memory, read from /proc by the live screen only (a replay has no process).
PROCESS = ("rss_anon", "rss_file", "mem_available")


def _doc(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    return code, orjson.loads(capsys.readouterr().out)


def test_a_recording_without_tiers_has_no_tiers_block(tmp_path, capsys):
    (tmp_path / "r.rec.jsonl").write_bytes(synth.session_recording(turns=1, n=4, additive=True))
    code, doc = _doc(capsys, "replay", "--summary", "--json", str(tmp_path / "r.rec.jsonl"))
    assert code == 0 and "tiers" not in doc


def test_the_tiers_block_is_typed_and_adds_up(tmp_path, capsys):
    (tmp_path / "t.rec.jsonl").write_bytes(synth.session_recording(turns=2, n=8, additive=True, tiers=True))
    code, doc = _doc(capsys, "replay", "--summary", "--json", str(tmp_path / "t.rec.jsonl"))
    assert code == 0
    t = doc["tiers"]
    check_typed(t, TierDoc)
    assert t["routed"] == t["cache"] + t["page_cache"] + t["disk"] == 16 * 8
    assert t["cache_pct"] + t["page_cache_pct"] + t["disk_pct"] == pytest.approx(100.0)
    assert t["page_cache_mib"] + t["disk_mib"] == pytest.approx(doc["derived"]["read_mib"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("m") / "tiny.gguf", preset="tiny"))


@pytest.mark.skipif(not BMOE_RUN.exists(), reason="bmoe-run not installed")
def test_launch_of_bmoe_run_and_the_replay_of_its_recording_give_the_same_tiers(tiny, tmp_path, capsys):
    rec = tmp_path / "run.rec.jsonl"
    code, live = _doc(capsys, "launch", "--once", "--json", "-p", "The experts of every layer", "-n", "6",
                      "--record", str(rec), "--", str(BMOE_RUN), "-m", str(tiny), "--session", "--progress",
                      "--quiet", "-c", "256", "--cache-mb", "0.2", "--force-cache", "--no-odirect")
    assert code == 0, live["run"].get("status_detail")
    live = live["run"]
    code, replayed = _doc(capsys, "replay", "--summary", "--json", str(rec))
    assert code == 0
    t = live["tiers"]
    check_typed(t, TierDoc)
    check_typed(replayed["tiers"], TierDoc)
    assert t["routed"] > 0 and t["page_cache"] + t["disk"] > 0  # a 0.2 MiB cache misses
    assert {k: v for k, v in t.items() if k not in PROCESS} == replayed["tiers"]
    assert not set(PROCESS) & replayed["tiers"].keys()
