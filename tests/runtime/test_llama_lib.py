"""runtime/llama_lib.py loads llama.cpp's bindings with OpenMP's passive waiting (its threads sleep
at a barrier instead of spinning), as libgomp itself reports it (``OMP_DISPLAY_ENV=VERBOSE``); a
user's own ``OMP_WAIT_POLICY`` is kept."""

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


def test_llama_cpp_threads_wait_passively():
    got = _gomp_settings()
    assert got["OMP_WAIT_POLICY"] == "PASSIVE" and got["GOMP_SPINCOUNT"] == "0", got


def test_a_users_wait_policy_is_kept():
    got = _gomp_settings(OMP_WAIT_POLICY="ACTIVE")
    assert got["OMP_WAIT_POLICY"] == "ACTIVE" and got["GOMP_SPINCOUNT"] != "0", got
