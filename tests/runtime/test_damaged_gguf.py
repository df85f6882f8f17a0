"""Truncated or damaged GGUF files get one line that says so (never a numpy or struct traceback),
from the layout reader and from the bmoe-run command line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.runtime.gguf_layout import ModelError, read_layout
from bmoe_top.runtime.models import make_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("damaged") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=2)


@pytest.mark.parametrize("frac", [0.0005, 0.003, 0.02, 0.2, 0.6, 0.999])
def test_truncated_file_says_truncated(model, tmp_path, frac):
    data = model.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: max(8, int(len(data) * frac))])
    with pytest.raises(ModelError, match="truncated") as err:
        read_layout(cut)
    assert "\n" not in str(err.value) and "reshape" not in str(err.value)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(4, 6000), st.integers(0, 255)), min_size=1, max_size=16))
def test_damaged_header_is_one_clear_line(model, scribbles):
    data = bytearray(model.read_bytes())
    for i, v in scribbles:  # over the key/value and tensor-info region
        data[i] = v
    bad = model.with_name("bad.gguf")
    bad.write_bytes(bytes(data))
    try:
        read_layout(bad)
    except ModelError as e:
        assert "\n" not in str(e) and "Traceback" not in str(e)


def test_cli_says_truncated_and_exits_2(model, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(cut), "-n", "2", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "truncated" in lines[0] and lines[0].startswith("bmoe-run: error:")
