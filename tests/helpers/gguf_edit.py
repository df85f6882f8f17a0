"""Editing a GGUF's metadata in place, for models whose header says something a generator never
writes (``expert_used_count`` above ``expert_count``)."""

from __future__ import annotations

import struct
from pathlib import Path


def with_u32(model: Path, key: str, value: int, out: Path) -> Path:
    """A copy of ``model`` at ``out`` whose u32 metadata ``key`` says ``value``."""
    data = bytearray(model.read_bytes())
    name = key.encode()
    i = data.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    assert struct.unpack_from("<I", data, i)[0] == 4  # GGUF type u32
    struct.pack_into("<I", data, i + 4, value)
    out.write_bytes(bytes(data))
    return out
