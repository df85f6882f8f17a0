"""A model that llama.cpp accepts but ggml aborts on: bmoe-run's machine-read stdout stays protocol
only (ggml's gdb backtrace would land there), and the abort reason a reader shows is the assert."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from bmoe_top.runtime import arch_models


@pytest.fixture(scope="module")
def aborting_model(tmp_path_factory):
    """qwen3moe with a rope dimension count 4x its head size: it loads, then qwen3moe's graph
    asserts ``n_embd_head == n_rot`` at the first decode."""
    spec = copy.deepcopy(arch_models.arch_specs()["qwen3moe"])
    head = next(v for k, (_, v) in spec["kv"].items() if k.endswith(".attention.key_length"))
    spec["kv"]["qwen3moe.rope.dimension_count"] = ("u32", 4 * int(head))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arch_models, "arch_specs", lambda: {"qwen3moe": spec})
        return arch_models.make_arch_model(tmp_path_factory.mktemp("abort") / "abort.gguf", "qwen3moe")


def test_session_stdout_holds_only_protocol_lines_when_ggml_aborts(aborting_model):
    p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(aborting_model), "--session"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode in (-6, 134), (p.returncode, p.stderr[-500:])
    foreign = [ln for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("BMOE_")]
    assert not foreign, foreign[:5]
    last = [ln for ln in p.stderr.splitlines() if ln.strip()][-1]
    assert "GGML_ASSERT" in last, p.stderr[-500:]


def test_launch_names_the_assert_as_the_abort_reason(aborting_model):
    p = subprocess.run([sys.executable, "-m", "bmoe_top.tui.cli", "launch", "--once", "-p", "hi", "-n", "4",
                        "-m", str(aborting_model)], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 1, (p.returncode, p.stdout[-300:], p.stderr[-300:])
    assert "SIGABRT before BMOE_READY" in p.stderr and "GGML_ASSERT(n_embd_head == n_rot)" in p.stderr, p.stderr
