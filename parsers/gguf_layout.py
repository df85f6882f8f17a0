"""Where each expert's bytes live in a GGUF model, one file or split (read with the ``gguf`` package).

The streaming runtime reads expert ``e`` of tensor ``blk.<il>.ffn_{gate,up,down,gate_up}_exps.weight``
as the byte range ``[file_offset + e*expert_stride, file_offset + (e+1)*expert_stride)`` of the
shard that holds it (a 3-D expert tensor is ``n_expert`` contiguous 2-D slices; ``expert_stride``
is ggml's ``nb[2]``). A split model (``name-00001-of-00004.gguf``, llama.cpp's naming) is read
from its first shard: the metadata is there, the tensors may be in any shard (the first one may
hold metadata only). Every tensor's range is checked against its shard's size, so a truncated
or damaged file is a :class:`ModelError` naming what is missing, never a numpy error.

Every other tensor (embeddings, attention, norms, the router, shared experts, the output) is a
dense tensor: :attr:`ModelLayout.dense` lists where each one's bytes are, for a reader that asks
which parts of the file are in RAM (``bmoe-top attach --pid``, docs/memory.md). Reading the
layout reads the header and the tensor table only, never the tensors' bytes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

#: the expert tensors that are streamed (the fused gate_up of some archs included)
EXPERT_RE = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.weight$")
#: the same pattern for llama.cpp's ``tensor_buft_overrides`` (std::regex, ECMAScript)
EXPERT_PATTERN = r"^blk\.[0-9]+\.ffn_(gate|up|down|gate_up)_exps\.weight$"
BLOCK_RE = re.compile(r"^blk\.(\d+)\.")
SPLIT_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class ModelError(Exception):
    """A model file the runtime cannot use; ``str(err)`` is one line for the user."""


@dataclass(frozen=True)
class ExpertTensorInfo:
    """One 3-D expert tensor as stored in the file.

    ``file_offset``/``n_bytes``/``expert_stride`` are bytes inside shard ``shard`` (0-based index
    into :attr:`ModelLayout.paths`); ``shape`` is ggml order (ne0, ne1, ne2).
    """

    name: str
    layer: int
    kind: str  # gate | up | down | gate_up
    file_offset: int
    n_bytes: int
    n_expert: int
    expert_stride: int
    ggml_type: int
    shape: tuple[int, ...]
    shard: int = 0


@dataclass(frozen=True)
class TensorRange:
    """Where one tensor's bytes are: ``[file_offset, file_offset + n_bytes)`` of shard ``shard``."""

    name: str
    shard: int
    file_offset: int
    n_bytes: int


@dataclass
class ModelLayout:
    """Model metadata and the expert tensors of a MoE GGUF (sizes in bytes)."""

    path: Path
    arch: str
    n_layer: int
    n_expert: int
    n_expert_used: int
    n_ctx_train: int
    file_size: int  # bytes of every shard together
    #: the shards in order (one entry for a single-file model)
    paths: list[Path] = field(default_factory=list)
    tensors: dict[str, ExpertTensorInfo] = field(default_factory=dict)
    #: per layer: the expert tensors (empty list for a layer with no MoE)
    layers: list[list[ExpertTensorInfo]] = field(default_factory=list)
    #: per layer: bytes of one expert (sum over its tensors' slices); 0 without MoE
    expert_bytes: list[int] = field(default_factory=list)
    #: per layer: bytes of the other (dense) tensors of ``blk.<il>.``
    dense_bytes: list[int] = field(default_factory=list)
    name: str = ""
    #: every tensor that is not an expert tensor, in file order per shard
    dense: list[TensorRange] = field(default_factory=list)
    #: bytes of each shard, in order
    shard_sizes: list[int] = field(default_factory=list)

    @property
    def expert_bank_bytes(self) -> int:
        """Bytes of every expert of every layer."""
        return sum(b * self.n_expert for b in self.expert_bytes)

    @property
    def moe_layers(self) -> list[int]:
        return [il for il, ts in enumerate(self.layers) if ts]

    def drop_layer(self, il: int) -> None:
        """Forget layer ``il``'s expert tensors (the graph does not use them)."""
        for info in self.layers[il]:
            del self.tensors[info.name]
        self.layers[il] = []
        self.expert_bytes[il] = 0

    def token_working_set_bytes(self) -> int:
        """Bytes one decoded token needs resident at once in the worst case (n_expert_used per MoE layer)."""
        return sum(b * self.n_expert_used for b in self.expert_bytes)


class _Short(Exception):
    def __init__(self, offset: int, end: int) -> None:
        super().__init__(offset, end)
        self.offset = offset
        self.end = end


class _CheckedReader(gguf.GGUFReader):
    """``gguf.GGUFReader`` whose every read is bounds-checked against the file (a cut-short
    file raises :class:`_Short` instead of a numpy reshape error)."""

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
        end = int(offset) + int(np.dtype(dtype).itemsize) * int(count)
        if int(offset) < 0 or end > len(self.data):
            raise _Short(int(offset), end)
        return super()._get(offset, dtype, count, override_order)


def _open_reader(p: Path) -> _CheckedReader:
    size = p.stat().st_size
    try:
        return _CheckedReader(str(p), "r")
    except _Short as e:
        raise ModelError(f"GGUF file is truncated or damaged: {p} has {size} bytes, its header or tensor "
                         f"table needs bytes up to {e.end}") from None
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as e:
        raise ModelError(f"GGUF file is damaged: {p}: {str(e)[:160]}") from None


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    """The value of header field ``key`` (None when absent); :class:`ModelError` when a damaged
    byte makes its text not UTF-8."""
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except UnicodeDecodeError:
        raise ModelError(f"GGUF file is damaged: header field {key} is not UTF-8: {reader.data.filename}") from None


def _int_field(reader: gguf.GGUFReader, key: str, p: Path) -> int:
    v = _field(reader, key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ModelError(f"GGUF file is damaged: {key} is not an integer: {p}")
    return int(v)


def _check_file(p: Path) -> None:
    if not p.exists():
        raise ModelError(f"model file not found: {p}")
    if not p.is_file():
        raise ModelError(f"model path is not a file: {p}")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise ModelError(f"cannot read model file {p}: {e.strerror or e}") from None
    if magic != b"GGUF":
        raise ModelError(f"not a GGUF file (bad magic {magic!r}): {p}")


def shard_paths(path: Path, reader: gguf.GGUFReader) -> list[Path]:
    """The shards of the model whose first shard is ``path`` (``[path]`` when it is not split).

    Raises :class:`ModelError` for a later shard given instead of the first, or a missing shard.
    """
    count = _int_field(reader, "split.count", path)
    if count <= 1:
        return [path]
    if count > 10000:
        raise ModelError(f"GGUF file is damaged: split.count={count}: {path}")
    no = _int_field(reader, "split.no", path)
    m = SPLIT_RE.match(path.name)
    if no != 0:
        raise ModelError(f"{path} is shard {no + 1} of {count} of a split model: give the first shard "
                         f"(...-00001-of-{count:05d}.gguf)")
    if m is None:
        raise ModelError(f"split model ({count} shards) whose first shard is not named "
                         f"<name>-00001-of-{count:05d}.gguf: {path}")
    prefix = m.group("prefix")
    out = [path]
    for i in range(2, count + 1):
        q = path.with_name(f"{prefix}-{i:05d}-of-{count:05d}.gguf")
        if not q.is_file():
            raise ModelError(f"shard {i} of {count} is missing: {q}")
        out.append(q)
    return out


def read_layout(path: str | os.PathLike[str], *, require_moe: bool = True) -> ModelLayout:
    """Read the GGUF header of ``path`` (and of every shard of a split model) and locate every
    expert tensor and every dense one.

    Raises :class:`ModelError` (one clear line) for: a missing or unreadable file, a file that
    is not GGUF, a truncated or damaged file, a missing shard, a model with no expert tensors
    (dense; unless ``require_moe`` is False: then its layout has no expert tensors, and
    ``n_expert`` is what the header says), inconsistent expert counts (``expert_used_count``
    above ``expert_count`` included).
    """
    p = Path(path)
    _check_file(p)
    reader = _open_reader(p)
    paths = shard_paths(p, reader)
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"GGUF has no general.architecture: {p}")
    n_layer = _int_field(reader, f"{arch}.block_count", p)
    n_expert = _int_field(reader, f"{arch}.expert_count", p)
    n_used = _int_field(reader, f"{arch}.expert_used_count", p)
    if n_layer <= 0 or n_layer > 4096 or n_expert < 0 or n_expert > 65536:
        raise ModelError(f"GGUF metadata out of range ({arch}.block_count={n_layer}, "
                         f"{arch}.expert_count={n_expert}): {p}")
    if n_used > n_expert:  # llama.cpp aborts the process on it (GGML_ASSERT in its top-k)
        raise ModelError(f"GGUF metadata inconsistent: {arch}.expert_used_count={n_used} is more than "
                         f"{arch}.expert_count={n_expert} (a token cannot use more experts than a layer has): {p}")
    layout = ModelLayout(
        path=p.resolve(),
        arch=arch,
        n_layer=n_layer,
        n_expert=n_expert,
        n_expert_used=n_used,
        n_ctx_train=_int_field(reader, f"{arch}.context_length", p),
        file_size=0,
        paths=[q.resolve() for q in paths],
        layers=[[] for _ in range(n_layer)],
        expert_bytes=[0] * n_layer,
        dense_bytes=[0] * n_layer,
        name=str(_field(reader, "general.name") or ""),
    )
    for shard, q in enumerate(paths):
        r = reader if shard == 0 else _open_reader(q)
        size = q.stat().st_size
        layout.file_size += size
        layout.shard_sizes.append(size)
        for t in r.tensors:
            _add_tensor(layout, t, shard, q, size)
    if require_moe and (not layout.tensors or n_expert <= 1 or n_used <= 0):
        raise ModelError(
            f"not a Mixture-of-Experts model (arch {arch}, no blk.N.ffn_*_exps tensors): {p}"
        )
    for ts in layout.layers:
        ts.sort(key=lambda i: i.name)
    return layout


def _add_tensor(layout: ModelLayout, t: Any, shard: int, q: Path, size: int) -> None:
    name = t.name
    nbytes = int(t.n_bytes)
    if int(t.data_offset) + nbytes > size:
        raise ModelError(f"GGUF file is truncated: tensor {name} ends at byte {int(t.data_offset) + nbytes}, "
                         f"{q} has {size} bytes")
    m = EXPERT_RE.match(name)
    if m:
        il = int(m.group(1))
        shape = tuple(int(x) for x in t.shape)
        ne2 = shape[2] if len(shape) > 2 else 1
        n_expert = layout.n_expert
        if il >= layout.n_layer or ne2 != n_expert or n_expert <= 0 or nbytes % ne2:
            raise ModelError(f"expert tensor {name} has {ne2} experts, metadata says {n_expert}: {q}")
        info = ExpertTensorInfo(
            name=name, layer=il, kind=m.group(2), file_offset=int(t.data_offset), n_bytes=nbytes,
            n_expert=ne2, expert_stride=nbytes // ne2, ggml_type=int(t.tensor_type), shape=shape, shard=shard,
        )
        layout.tensors[name] = info
        layout.layers[il].append(info)
        layout.expert_bytes[il] += info.expert_stride
        return
    layout.dense.append(TensorRange(name, shard, int(t.data_offset), nbytes))
    b = BLOCK_RE.match(name)
    if b and int(b.group(1)) < layout.n_layer:
        layout.dense_bytes[int(b.group(1))] += nbytes
