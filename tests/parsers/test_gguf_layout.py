"""The GGUF layout reader (parsers/gguf_layout.py): expert byte ranges are the tensors' bytes, and
truncated or damaged files get one line that says so (never a numpy or struct traceback)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.gguf_edit import with_u32
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.gguf_layout import ModelError, read_layout
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


def test_gguf_layout_offsets_are_the_expert_bytes(tmp_path):
    import gguf

    path = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="f32", seed=1)
    lay = read_layout(path)
    assert lay.arch == "qwen3moe" and lay.n_expert == 8 and lay.n_expert_used == 2
    assert len(lay.moe_layers) == lay.n_layer
    r = gguf.GGUFReader(str(path))
    t = next(x for x in r.tensors if x.name == "blk.1.ffn_down_exps.weight")
    info = lay.tensors["blk.1.ffn_down_exps.weight"]
    raw = np.fromfile(path, dtype=np.uint8, count=info.n_bytes, offset=info.file_offset)
    assert raw.tobytes() == np.asarray(t.data).tobytes()
    e = 5
    sl = raw[e * info.expert_stride:(e + 1) * info.expert_stride].view(np.float32)
    assert np.array_equal(sl, np.asarray(t.data)[e].ravel())  # expert e = slice e of nb[2]
    assert lay.expert_bytes[1] == sum(i.expert_stride for i in lay.layers[1])


def test_gguf_layout_bad_files(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        read_layout(tmp_path / "missing.gguf")
    (tmp_path / "x.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match="not a GGUF"):
        read_layout(tmp_path / "x.bin")
    (tmp_path / "trunc.gguf").write_bytes(b"GGUF\x03\x00")
    with pytest.raises(ModelError):
        read_layout(tmp_path / "trunc.gguf")


def test_more_experts_used_than_a_layer_has_is_one_line(model, tmp_path):
    # llama.cpp aborts the process on it (GGML_ASSERT): the reader refuses it before
    bad = with_u32(model, "qwen3moe.expert_used_count", 64, tmp_path / "used64.gguf")  # of 8 experts
    with pytest.raises(ModelError, match=r"^GGUF metadata inconsistent: qwen3moe.expert_used_count=64 is more than "
                                         r"qwen3moe.expert_count=8 \(a token cannot use more experts than a layer "
                                         r"has\): "):
        read_layout(bad)
