"""Shared test fixtures. ``tests/`` is put on sys.path so tests can import ``helpers`` (and ``helpers.synth``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

#: Real recorded runs from a real runtime (../shared beside the repo). Absent on a fresh clone.
from helpers import REAL_RUNS  # noqa: E402
from helpers.llama_server import llama_server  # noqa: E402,F401  (fixture: a stock llama-server)
from helpers.scripted_http import srv  # noqa: E402,F401  (fixture: a scripted HTTP server)


@pytest.fixture
def real_runs() -> Path:
    """The real-runs folder, or skip when ../shared is not beside the repo."""
    if not REAL_RUNS.is_dir():
        pytest.skip("../shared/data/real-runs is absent")
    return REAL_RUNS
