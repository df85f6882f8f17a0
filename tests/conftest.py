"""Shared test fixtures. ``tests/`` is put on sys.path so tests can import ``helpers`` (and ``helpers.synth``)."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

# llama.cpp's OpenMP threads wait passively at their barriers in every test and every child a test
# starts (bmoe-run, serve, make-model): the suite shares its cores with its own workers and other
# jobs, where a spinning thread holds the core the late one needs (docs/runtime.md "Threads"). Set
# before any test imports llama.cpp's bindings: libgomp reads it once, when it is loaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

#: Real recorded runs from a real runtime (../shared beside the repo). Absent on a fresh clone.
from helpers import REAL_RUNS  # noqa: E402
from helpers.llama_server import llama_server  # noqa: E402,F401  (fixture: a stock llama-server)
from helpers.scripted_http import srv  # noqa: E402,F401  (fixture: a scripted HTTP server)

# Hypothesis (docs/architecture.md "Tests"). "gate", the default (make test, make check): every
# property runs the same examples on every run and every machine (derandomized, no example
# database), and the machine's speed never fails one (no deadline, no too-slow health check).
# "fuzz" (make fuzz, --hypothesis-profile=fuzz): random seeds and FUZZ_FACTOR times the examples;
# every case it finds becomes an @example of its test.
FUZZ_FACTOR = 10
_SPEED_FREE = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("gate", derandomize=True, database=None, print_blob=True, **_SPEED_FREE)
settings.register_profile("fuzz", derandomize=False, print_blob=True, max_examples=100 * FUZZ_FACTOR, **_SPEED_FREE)
settings.load_profile("gate")  # before any test module is imported: their @settings inherit from it


def _import_every_project_module() -> None:
    """Hypothesis draws some examples from the constants of the project's modules imported so far;
    with every one imported before the first property runs, a property draws the same examples
    whatever ran before it (a folder alone, the whole suite, any split over xdist workers)."""
    from helpers import REPO

    for pkg, root in (("bmoe_top", "bmoe_top"), ("bmoe_top.parsers", "parsers"), ("bmoe_top.runtime", "runtime"),
                      ("bmoe_top.tui", "tui")):
        for f in sorted((REPO / root).rglob("*.py")):
            parts = f.relative_to(REPO / root).with_suffix("").parts
            importlib.import_module(".".join([pkg, *(p for p in parts if p != "__init__")]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every project module imported when a property is to run; under the fuzz profile, a property
    with its own ``max_examples`` runs FUZZ_FACTOR times as many (Hypothesis lets an explicit
    @settings value win over the profile's)."""
    tests = {id(t): t for t in (getattr(item, "obj", None) for item in items) if is_hypothesis_test(t)}
    if tests:
        _import_every_project_module()
    if settings.get_current_profile_name() != "fuzz":
        return
    fuzz = settings.get_profile("fuzz")
    for test in tests.values():
        own = test._hypothesis_internal_use_settings  # where @given keeps the test's settings
        if own.max_examples != fuzz.max_examples:
            test._hypothesis_internal_use_settings = settings(own, max_examples=own.max_examples * FUZZ_FACTOR)
#: No test reads or writes the user's settings or event log: the config and state folders
#: (platformdirs, XDG on Linux) are folders of this session's, for this process and every child it
#: starts.
_CONFIG_HOME = tempfile.TemporaryDirectory(prefix="bmoe-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME.name
_STATE_HOME = tempfile.TemporaryDirectory(prefix="bmoe-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME.name


@pytest.fixture(autouse=True)
def _own_state_folder(tmp_path, monkeypatch):
    """Each test's event log (docs/events.md) is its own: a live screen reads back the events of
    earlier sessions from the state folder, and another test's would be among them."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(autouse=True)
def _no_settings_between_tests():
    """The settings a command line gave an app (``BmoeTopApp.settings_store``) end with the test."""
    yield
    app = sys.modules.get("bmoe_top.tui.app")
    if app is not None:
        app.BmoeTopApp.settings_store = None


@pytest.fixture
def real_runs() -> Path:
    """The real-runs folder, or skip when ../shared is not beside the repo."""
    if not REAL_RUNS.is_dir():
        pytest.skip("../shared/data/real-runs is absent")
    return REAL_RUNS
