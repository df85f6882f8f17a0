"""A truncated GGUF stops bmoe-run with one line that says so (the layout reader's message,
parsers/gguf_layout.py), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bmoe_top.runtime.models import make_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("damaged") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=2)


def test_cli_says_truncated_and_exits_2(model, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(cut), "-n", "2", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "truncated" in lines[0] and lines[0].startswith("bmoe-run: error:")
