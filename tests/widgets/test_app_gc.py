"""The collector's policy of an app that owns its process (tui/app.py ``BmoeTopApp.on_ready``):
what exists once the first screen is drawn is frozen out of the cyclic collector and the young
generations are collected less often; an app in a process shared with others (the tests) leaves
the collector as it found it."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from helpers import synth

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.screens.replay import ReplayScreen


@pytest.fixture
def restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.fixture
def csv_run(tmp_path):
    p = tmp_path / "run.csv"
    p.write_bytes(synth.token_csv(16))
    return open_paths([str(p)])


async def test_an_app_that_owns_its_process_freezes_its_startup_objects(csv_run, restore_gc, monkeypatch):
    monkeypatch.setattr(BmoeTopApp, "own_process", True)
    gc.unfreeze()
    app = BmoeTopApp(ReplayScreen(csv_run, title="gc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert gc.get_freeze_count() > 10_000  # Textual's DOM, styles and code
        assert gc.get_threshold() == BmoeTopApp.GC_THRESHOLDS


async def test_an_app_in_a_shared_process_leaves_the_collector_alone(csv_run, restore_gc):
    assert BmoeTopApp.own_process is False
    gc.unfreeze()
    before = gc.get_threshold()
    app = BmoeTopApp(ReplayScreen(csv_run, title="gc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_the_program_owns_its_process_and_a_call_with_arguments_does_not():
    """``bmoe-top`` as a program sets the policy for a command that opens a screen (a replay of a
    file that does not exist gets that far); ``main([...])`` from a test does not."""
    code = ("import sys; from bmoe_top.tui import cli; from bmoe_top.tui.app import BmoeTopApp; "
            "sys.argv = ['bmoe-top', 'replay', '/nonexistent/x.csv']\n"
            "print(cli.main(), BmoeTopApp.own_process)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "1 True", out.stderr
    from bmoe_top.tui.cli import main

    assert main(["replay", "/nonexistent/x.csv"]) == 1
    assert BmoeTopApp.own_process is False
