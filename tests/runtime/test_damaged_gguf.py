"""A truncated GGUF stops bmoe-run with one line that says so (the layout reader's message,
parsers/gguf_layout.py), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.gguf_edit import with_u32

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



def test_more_experts_used_than_a_layer_has_is_refused_before_llama_cpp(model, tmp_path):
    bad = with_u32(model, "qwen3moe.expert_used_count", 64, tmp_path / "used64.gguf")  # of 8 experts
    why = ("GGUF metadata inconsistent: qwen3moe.expert_used_count=64 is more than qwen3moe.expert_count=8 "
           "(a token cannot use more experts than a layer has)")
    # llama.cpp's GGML_ASSERT aborted both (exit 134, a gdb backtrace on stderr)
    for argv, code, prefix in (([str(bad), "-n", "2", "--quiet", "--cache-mb", "0"], 2, "bmoe-run: error: "),
                               (["serve", "-m", str(bad), "--port", "0", "--cache-mb", "0"], 1, "bmoe-run serve: ")):
        if argv[0] != "serve":
            argv = ["-m", *argv]
        p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", *argv], capture_output=True, text=True,
                           timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == code and lines == [f"{prefix}{why}: {bad}"], p.stderr[-2000:]
