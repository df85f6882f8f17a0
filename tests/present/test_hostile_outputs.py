"""The text outputs of the headless commands as real processes, on file and folder names that
carry terminal controls (helpers/hostile.py): what reaches standard output and standard error is
inert text (docs/telemetry.md "Terminal safety"), whatever the output form."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import synth
from helpers.hostile import HOSTILE_NAME, PAYLOADS, raw_controls

BMOE_TOP = [sys.executable, "-m", "bmoe_top.tui.cli"]


def top(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BMOE_TOP, *map(str, args)], capture_output=True, text=True, timeout=120)


def inert(r: subprocess.CompletedProcess[str]) -> None:
    assert raw_controls(r.stdout) == [], (raw_controls(r.stdout), r.stdout[:400])
    assert raw_controls(r.stderr) == [], (raw_controls(r.stderr), r.stderr[:400])


def _runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two runs of the same data: one under a plain name, one whose file name is hostile, and a
    third in a folder whose name is hostile (so the arms are named by their folders)."""
    plain = tmp_path / "plain"
    bad_dir = tmp_path / ("dir" + HOSTILE_NAME)
    plain.mkdir()
    bad_dir.mkdir()
    a = plain / "good.csv"
    a.write_bytes(synth.token_csv(40, seed=3))
    b = plain / f"run{HOSTILE_NAME}.csv"
    b.write_bytes(synth.token_csv(40, seed=4))
    c = bad_dir / "run.csv"
    c.write_bytes(synth.token_csv(40, seed=4))
    return a, b, c


@pytest.mark.parametrize("form", ["--md", "--csv", "--json"])
def test_compare_text_forms_carry_no_control_of_a_hostile_file_or_folder_name(tmp_path, form):
    a, b, c = _runs(tmp_path)
    for other in (b, c):  # the file's own name; then its folder's, the arms named by folder
        r = top("compare", form, a, other)
        assert r.returncode == 0, r.stderr
        inert(r)
        assert "H0ST" in r.stdout and "TSOH" in r.stdout  # the name is there, its controls shown
        assert "\u241b[31m" in r.stdout or "\\u001b[31m" in r.stdout  # ESC drawn as ␛ (escaped in JSON)


@pytest.mark.parametrize("payload", ["title", "c1"])
def test_compare_md_and_csv_show_an_osc_title_and_c1_controls_as_text(tmp_path, payload):
    a = tmp_path / "good.csv"
    a.write_bytes(synth.token_csv(40, seed=3))
    b = tmp_path / f"{PAYLOADS[payload]}.csv"
    b.write_bytes(synth.token_csv(40, seed=4))
    for form in ("--md", "--csv"):
        r = top("compare", form, a, b)
        assert r.returncode == 0, r.stderr
        inert(r)


def test_whatif_strp_line_shows_a_hostile_output_name_as_text(tmp_path):
    trace = tmp_path / "run.route.csv"
    trace.write_bytes(synth.route_trace(24, seed=5))
    out = tmp_path / f"p{HOSTILE_NAME}.strp"
    r = top("whatif", "--strp", out, trace)
    assert r.returncode == 0 and out.exists(), r.stderr
    inert(r)
    assert r.stdout.startswith("wrote ")


def test_events_and_probe_show_a_hostile_file_name_as_text(tmp_path):
    log = tmp_path / f"ev{HOSTILE_NAME}.jsonl"
    log.write_text("")
    for args in (["events", log], ["events", "--json", log], ["probe", "--seconds", "0.05", "--qd-max", "1",
                                                             "--slice-bytes", "4096", log]):
        if args[0] == "probe":
            log.write_bytes(bytes(1 << 20))
        r = top(*args)
        inert(r)
        assert "H0ST" in r.stdout + r.stderr, (args, r.stdout[:300], r.stderr[:300])
