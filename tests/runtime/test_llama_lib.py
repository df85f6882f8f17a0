"""runtime/llama_lib.py leaves libgomp's waiting to the environment: without one, libgomp's own
default (a brief spin at a barrier, then sleep; docs/runtime.md "Threads"), and a user's
``OMP_WAIT_POLICY`` reaches libgomp, as libgomp itself reports it (``OMP_DISPLAY_ENV=VERBOSE``).
The test suite runs with ``OMP_WAIT_POLICY=PASSIVE`` (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def _gomp_settings(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    r = subprocess.run([sys.executable, "-c", "import bmoe_top.runtime.llama_lib"], capture_output=True, text=True,
                       env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env}, timeout=120)
    assert r.returncode == 0, r.stderr
    return dict(re.findall(r"^\s*(\w+) = '([^']*)'", r.stderr, re.M))


def test_llama_cpp_threads_wait_as_libgomp_does_by_default():
    got = _gomp_settings()
    assert got["GOMP_SPINCOUNT"] != "0", got  # libgomp spins at a barrier before it sleeps


def test_a_users_wait_policy_is_kept():
    assert _gomp_settings(OMP_WAIT_POLICY="PASSIVE")["GOMP_SPINCOUNT"] == "0"
    got = _gomp_settings(OMP_WAIT_POLICY="ACTIVE")
    assert got["OMP_WAIT_POLICY"] == "ACTIVE" and got["GOMP_SPINCOUNT"] != "0", got


def test_the_suite_runs_with_passive_waiting():
    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"
