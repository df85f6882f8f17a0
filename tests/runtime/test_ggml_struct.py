"""The ctypes ``ggml_tensor`` layout against the loaded library's own getters, and the GGUF
expert layout against the file. The getters read real memory we fill, so a shifted field is caught."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from bmoe_top.runtime import ggml_struct as G
from bmoe_top.runtime.gguf_layout import ModelError, read_layout
from bmoe_top.runtime.models import make_model


def _fake(cls, ne=(8, 4, 3, 1)):
    t = cls()
    t.type = 0  # f32
    for i, n in enumerate(ne):
        t.ne[i] = n
    t.nb[0] = 4
    for i in range(1, 4):
        t.nb[i] = t.nb[i - 1] * ne[i - 1]
    buf = (ctypes.c_char * (t.nb[3] * ne[3]))()
    t.data = ctypes.addressof(buf)
    t.name = b"blk.0.ffn_up_exps.weight"
    return t, buf


def test_layout_matches_library_getters():
    lib = G.GGMLLib()
    t, _buf = _fake(G.GGMLTensor)
    G.check_layout(lib, [ctypes.addressof(t)])
    assert G.tensor_name(ctypes.addressof(t)) == b"blk.0.ffn_up_exps.weight"
    assert int(lib.lib.ggml_nbytes(ctypes.addressof(t))) == 8 * 4 * 3 * 4


def test_shifted_layout_is_refused():
    class Shifted(ctypes.Structure):  # one pointer too many before ``data``: every later field moves
        _fields_ = [f for f in G.GGMLTensor._fields_ if f[0] not in ("data", "name", "extra", "padding")] + [
            ("bogus", ctypes.c_void_p), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
            ("extra", ctypes.c_void_p)]

    lib = G.GGMLLib()
    t, _buf = _fake(G.GGMLTensor)  # memory laid out as the library does
    with pytest.raises(G.LayoutError, match="name offset"):
        G.check_layout(lib, [ctypes.addressof(t)], cls=Shifted)


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
