"""Every numeric option of every sub-command refuses a value out of its range, NaN and the
infinities as usage errors (exit 2, one line naming the option and what it takes) before anything
runs: ``attach --interval nan`` scraped ~18 times a second, ``--interval 0`` was read as 1 s and
``--timeout -1`` waited -1 s (docs/user-guide.md "Exit status")."""

from __future__ import annotations

import subprocess
import sys

import pytest

BMOE_TOP = [sys.executable, "-m", "bmoe_top.tui.cli"]
URL = "http://127.0.0.1:9/metrics"  # never asked: the value is refused first


@pytest.mark.parametrize("argv, says", [
    (["attach", "--metrics", URL, "--interval", "nan"], "--interval: must be between 0.01 and 3600 seconds, got nan"),
    (["attach", "--metrics", URL, "--interval", "0", "--once"], "--interval: must be between 0.01 and 3600 seconds"),
    (["attach", "--metrics", URL, "--interval", "inf"], "--interval: must be between 0.01 and 3600 seconds"),
    (["attach", "--metrics", URL, "--timeout", "-1", "--once", "--json"], "--timeout: must be a number above 0 s"),
    (["attach", "--metrics", URL, "--timeout", "nan", "--once"], "--timeout: must be a number above 0 seconds"),
    (["attach", "--session", "/nonexistent.sock", "--timeout", "0", "--once"], "--timeout: must be a number above 0"),
    (["attach", "--pid", "0", "--once"], "--pid: must be a whole number 1 or more, got 0"),
    (["attach", "--metrics", URL, "--max-body-mb", "inf", "--once"], "--max-body-mb: must be a number above 0"),
    (["attach", "--metrics", URL, "-n", "0"], "--n-predict: must be a whole number 1 or more"),
    (["launch", "--ready-timeout", "nan", "--once", "--", "true"], "--ready-timeout: must be a number above 0"),
    (["launch", "--turn-timeout=-inf", "--once", "--", "true"], "--turn-timeout: must be a number above 0"),
    (["fleet", "--prometheus", URL, "--timeout", "0", "--once", "--json"], "--timeout: must be a number above 0"),
    (["fleet", "--prometheus", URL, "--points", "0", "--once", "--json"], "--points: must be between 1 and 11000"),
    (["fleet", "--prometheus", URL, "--at", "nan", "--once", "--json"], "--at: must be a number 0 or more"),
    (["compare", "--noise-floor", "nan", "--md", "a", "b"], "--noise-floor: must be a number 0 or more percent"),
    (["whatif", "--json", "--run-budget", "-1", "t.route.csv"], "--run-budget: must be a number above 0"),
    (["whatif", "--json", "--read-mib-s", "inf", "t.route.csv"], "--read-mib-s: must be a number above 0"),
    (["whatif", "--json", "--n-expert", "0", "t.bin"], "--n-expert: must be between 1 and 4096"),
    (["whatif", "--json", "--prefill-batch", "-2", "t.bin"], "--prefill-batch: must be a whole number 1 or more"),
    (["sweep", "-m", "m.gguf", "--cache-mb", "1", "-o", "out", "--runs", "0", "--once"],
     "--runs: must be a whole number 1 or more"),
    (["sweep", "-m", "m.gguf", "--cache-mb", "1", "-o", "out", "--timeout", "nan", "--once"],
     "--timeout: must be a number above 0"),
    (["play", "--speed", "nan", "rec.jsonl"], "--speed: must be a number 0 or more, got nan"),
    (["events", "--since", "nan"], "--since: 'nan'"),
    (["replay", "--refresh", "inf", "x.csv"], "--refresh: must be between 0.1 and 10 seconds"),
    (["--fps", "inf", "replay", "x.csv"], "--fps: must be between 1 and 100 ticks a second"),
])
def test_a_numeric_option_out_of_its_range_is_a_usage_error(tmp_path, argv, says):
    r = subprocess.run([*BMOE_TOP, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    # one line, as the exit table promises (argparse printed its usage block before it)
    why = r.stderr.splitlines()
    assert len(why) == 1 and says in why[0] and why[0].endswith("--help)"), r.stderr


def test_a_wrong_argument_is_quoted_inert(tmp_path):
    # argparse's message quotes what was typed; an escape sequence in it reached the terminal raw
    r = subprocess.run([*BMOE_TOP, "replay", "x.csv", "--bo\x1b[31mgus"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "\x1b" not in r.stderr and "␛[31m" in r.stderr, r.stderr
