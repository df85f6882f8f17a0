"""The ctypes ``ggml_tensor`` layout against the loaded library's own getters, and the GGUF
expert layout against the file. The getters read real memory we fill, so a shifted field is caught."""

from __future__ import annotations

import ctypes

import pytest

from bmoe_top.runtime import ggml_struct as G


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
