"""Loading for streaming reads and keeps no expert bytes: llama.cpp loads a skeleton of the file
whose expert ranges are holes (runtime/expert_sink.py), so no expert byte comes from the disk,
into a sink that gives every page back before the next tensor is read, so at most one expert
tensor is ever resident while loading and none afterwards; the tokens are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bmoe_top.runtime.models import make_model

CODE = r"""
import json, sys
from bmoe_top.runtime.engine import Engine
e = Engine(sys.argv[1], n_ctx=256, n_batch=64, n_threads=2, cache_mb=0)
sink = e.expert_sink
after = sink.resident_bytes()
biggest = max(i.n_bytes for i in e.layout.tensors.values())
print(json.dumps({"peak": sink.peak_resident, "biggest": biggest, "after": after, "calls": sink.calls,
                  "mapped": sink.mapped_bytes(), "bank": e.layout.expert_bank_bytes, "size": e.layout.file_size,
                  "skeleton": sink.skeleton_bytes, "files": sorted(sink.files_seen), "n_tensors": len(e.layout.tensors),
                  "tokens": e.generate("sink", 6).tokens}))
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("sink") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=3)


def test_load_reads_no_expert_byte_and_keeps_at_most_one_expert_tensor(model):
    p = subprocess.run([sys.executable, "-c", CODE, str(model)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "BMOE_MEASURE_LOAD": "1"})
    assert p.returncode == 0, p.stderr[-800:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["mapped"] >= r["bank"]  # every expert tensor was loaded into the sink...
    assert 0 < r["peak"] <= r["biggest"] + (2 << 20)  # ...and at most one (in 2 MiB huge pages) at a time
    assert r["after"] == 0 and r["calls"] > len(r["tokens"])
    # llama.cpp read a skeleton of the file, not the file, and the skeleton holds no expert byte
    assert str(model) not in r["files"] and any(f.startswith("/memfd:bmoe-skeleton") for f in r["files"])
    assert 0 < r["skeleton"] <= r["size"] - r["bank"] + 4096 * (1 + 2 * r["n_tensors"])  # edge pages
    assert len(r["tokens"]) == 6


def test_sink_load_gives_the_resident_tokens(model):
    from bmoe_top.runtime.engine import Engine

    kw = dict(n_ctx=256, n_batch=64, n_threads=2, flash_attn=False)
    with Engine(model, stream=False, **kw) as e:
        assert e.expert_sink is None
        want = e.generate("The sink", 10).tokens
    with Engine(model, cache_mb=1e6, **kw) as e:
        assert e.expert_sink is not None
        got = e.generate("The sink", 10).tokens
    assert got == want


FALLBACK = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a skeleton (a memfd write) cannot be made
from bmoe_top.runtime.engine import Engine
e = Engine(sys.argv[1], n_ctx=256, n_batch=64, n_threads=2, cache_mb=1e6, flash_attn=False)
print(json.dumps({"files": sorted(e.expert_sink.files_seen), "peak": e.expert_sink.peak_resident,
                  "biggest": max(i.n_bytes for i in e.layout.tensors.values()),
                  "tokens": e.generate("The sink", 10).tokens}))
"""


def test_without_a_skeleton_llama_cpp_reads_the_file_into_the_sink(model):
    from bmoe_top.runtime.engine import Engine

    p = subprocess.run([sys.executable, "-c", FALLBACK, str(model)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "BMOE_MEASURE_LOAD": "1"})
    assert p.returncode == 0 and p.stderr == "", p.stderr[-800:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert str(model) in r["files"] and not any(f.startswith("/memfd:bmoe-skeleton") for f in r["files"])
    assert 0 < r["peak"] <= r["biggest"] + (2 << 20)
    with Engine(model, stream=False, n_ctx=256, n_batch=64, n_threads=2, flash_attn=False) as e:
        assert r["tokens"] == e.generate("The sink", 10).tokens
