"""parsers/strp.py: STRP read/validate/write (moe-cache-reference.md "Profile format")."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from bmoe_top.parsers.strp import (
    StrpError,
    StrpProfile,
    check_dims,
    parse_strp,
    profile_from_counts,
    read_strp,
    strp_bytes,
    write_strp,
)


def test_roundtrip_layout(tmp_path):
    prof = StrpProfile(n_layers=3, n_expert=8, slots=4, pairs=np.array([[1, 7], [0, 0], [2, 3]]))
    p = tmp_path / "p.strp"
    n = write_strp(p, prof)
    data = p.read_bytes()
    assert n == len(data) == 24 + 3 * 4 + 3 * 8 * 4
    # byte layout as the reference gives it
    assert data[:4] == b"STRP"
    assert struct.unpack_from("<IIIII", data, 4) == (1, 3, 8, 4, 3)
    assert struct.unpack_from("<HHHHHH", data, 24) == (1, 7, 0, 0, 2, 3)
    ranks = np.frombuffer(data, "<i4", offset=36).reshape(3, 8)
    assert ranks[1, 7] == 0 and ranks[0, 0] == 1 and ranks[2, 3] == 2 and (ranks == -1).sum() == 21
    back = read_strp(p)
    assert (back.n_layers, back.n_expert, back.slots, back.n_ranked) == (3, 8, 4, 3)
    assert back.pairs.tolist() == [[1, 7], [0, 0], [2, 3]]
    assert np.array_equal(back.ranks, back.rank_map())
    assert back.per_layer() == {1: [7], 0: [0], 2: [3]}
    assert back.warnings == []


def _raw(magic=b"STRP", version=1, nl=2, ne=4, slots=2, pairs=((0, 1),), n_ranked=None, table=True):
    n_ranked = len(pairs) if n_ranked is None else n_ranked
    b = struct.pack("<4sIIIII", magic, version, nl, ne, slots, n_ranked)
    b += b"".join(struct.pack("<HH", *p) for p in pairs)
    if table:
        b += b"\xff" * (nl * ne * 4)
    return b


@pytest.mark.parametrize("data,needle", [
    (b"STR", "too short"),
    (_raw(magic=b"GGUF"), "not an STRP"),
    (_raw(version=2), "version 2"),
    (_raw(nl=0), "bad dimensions"),
    (_raw(n_ranked=9, pairs=()), "exceeds"),
    (_raw(n_ranked=3, pairs=((0, 1),), table=False), "truncated"),
    (_raw(pairs=((2, 0),)), "layer 2"),
    (_raw(pairs=((0, 4),)), "expert 4"),
    (_raw(pairs=((0, 1), (0, 1))), "twice"),
])
def test_invalid_profiles_clear_errors(data, needle):
    with pytest.raises(StrpError) as ei:
        parse_strp(data, "x.strp")
    assert needle in str(ei.value) and "x.strp" in str(ei.value)


def test_missing_file_is_strp_error(tmp_path):
    with pytest.raises(StrpError, match="cannot read"):
        read_strp(tmp_path / "nope.strp")


def test_rank_table_optional_with_warning():
    p = parse_strp(_raw(table=False))
    assert p.ranks is None and p.warnings


def test_check_dims():
    p = parse_strp(_raw())
    assert check_dims(p, 2, 4) is None
    msg = check_dims(p, 3, 4)
    assert "refused" in msg and "2 layers x 4 experts" in msg


def test_profile_from_counts_hottest_first():
    c = np.array([[0, 5, 1, 0], [9, 0, 5, 2]])
    p = profile_from_counts(c, slots=3)
    assert p.pairs.tolist() == [[1, 0], [0, 1], [1, 2], [1, 3], [0, 2]]
    assert parse_strp(strp_bytes(p)).pairs.tolist() == p.pairs.tolist()


def test_write_never_follows_a_symlink_and_can_refuse_to_replace(tmp_path):
    from bmoe_top.outfile import OutputFileError

    prof = StrpProfile(n_layers=1, n_expert=2, slots=1, pairs=np.array([[0, 1]]))
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "p.strp").symlink_to(victim)
    with pytest.raises(OutputFileError, match="symbolic link"):
        write_strp(tmp_path / "p.strp", prof)
    assert victim.read_bytes() == b"keep"
    (tmp_path / "p.strp.tmp").symlink_to(victim)  # the old fixed temp name: not used any more
    write_strp(tmp_path / "q.strp", prof)
    with pytest.raises(OutputFileError, match="already exists"):
        write_strp(tmp_path / "q.strp", prof, force=False)
    assert victim.read_bytes() == b"keep" and read_strp(tmp_path / "q.strp").pairs.tolist() == [[0, 1]]
