"""Shared test helpers: paths every test folder uses (``tests/`` is on ``sys.path``, see conftest)."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
#: Project-written input files for parser tests.
FIXTURES = TESTS / "fixtures"
#: A scripted BMOE session emitter (a child process that speaks the session protocol).
EMITTER = str(TESTS / "helpers" / "emitter.py")
#: Real recorded runs from a real runtime (../shared beside the repo). Absent on a fresh clone.
#: ``BMOE_REAL_RUNS`` names another folder (a worktree whose ../shared is elsewhere).
REAL_RUNS = Path(os.environ.get("BMOE_REAL_RUNS") or REPO.parent / "shared" / "data" / "real-runs")


def real_run_files() -> list[Path]:
    """Every file of the real recorded runs (empty when ../shared is not beside the repo)."""
    if not REAL_RUNS.is_dir():
        return []
    return sorted(p for p in REAL_RUNS.rglob("*") if p.is_file() and p.name != "README.md")
