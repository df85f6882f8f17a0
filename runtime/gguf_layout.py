"""Where each expert's bytes live in a GGUF file (read with the ``gguf`` package).

The streaming runtime reads expert ``e`` of tensor ``blk.<il>.ffn_{gate,up,down}_exps.weight`` as
the byte range ``[file_offset + e*expert_stride, file_offset + (e+1)*expert_stride)`` of the file
(a 3-D expert tensor is ``n_expert`` contiguous 2-D slices; ``expert_stride`` is ggml's ``nb[2]``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: expert tensors we stream; fused gate_up (some newer archs) is accepted as well.
EXPERT_RE = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.weight$")
BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


class ModelError(Exception):
    """A model file the runtime cannot use; ``str(err)`` is one line for the user."""


@dataclass(frozen=True)
class ExpertTensorInfo:
    """One 3-D expert tensor as stored in the file.

    ``file_offset``/``n_bytes``/``expert_stride`` are bytes; ``shape`` is ggml order (ne0, ne1, ne2).
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


@dataclass
class ModelLayout:
    """Model metadata and the expert tensors of a MoE GGUF (sizes in bytes)."""

    path: Path
    arch: str
    n_layer: int
    n_expert: int
    n_expert_used: int
    n_ctx_train: int
    file_size: int
    tensors: dict[str, ExpertTensorInfo] = field(default_factory=dict)
    #: per layer: the expert tensors (empty list for a layer with no MoE)
    layers: list[list[ExpertTensorInfo]] = field(default_factory=list)
    #: per layer: bytes of one expert (sum over its tensors' slices); 0 without MoE
    expert_bytes: list[int] = field(default_factory=list)
    #: per layer: bytes of the other (dense) tensors of ``blk.<il>.``
    dense_bytes: list[int] = field(default_factory=list)

    @property
    def expert_bank_bytes(self) -> int:
        """Bytes of every expert of every layer."""
        return sum(b * self.n_expert for b in self.expert_bytes)

    @property
    def moe_layers(self) -> list[int]:
        return [il for il, ts in enumerate(self.layers) if ts]

    def token_working_set_bytes(self) -> int:
        """Bytes one decoded token needs resident at once in the worst case (n_expert_used per MoE layer)."""
        return sum(b * self.n_expert_used for b in self.expert_bytes)


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # older gguf: parts/data
        return f.parts[f.data[0]].tolist()[0] if f.data else None


def read_layout(path: str | os.PathLike) -> ModelLayout:
    """Read the GGUF header of ``path`` and locate every expert tensor.

    Raises :class:`ModelError` (one clear line) for: a missing or unreadable file, a file that
    is not GGUF, a model with no expert tensors (dense), inconsistent expert counts.
    """
    p = Path(path)
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
    try:
        import gguf

        reader = gguf.GGUFReader(str(p), "r")
    except Exception as e:  # corrupt header, truncated file
        raise ModelError(f"cannot parse GGUF header of {p}: {e}") from None

    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"GGUF has no general.architecture: {p}")
    n_layer = int(_field(reader, f"{arch}.block_count") or 0)
    n_expert = int(_field(reader, f"{arch}.expert_count") or 0)
    n_used = int(_field(reader, f"{arch}.expert_used_count") or 0)
    n_ctx_train = int(_field(reader, f"{arch}.context_length") or 0)

    layout = ModelLayout(
        path=p.resolve(),
        arch=arch,
        n_layer=n_layer,
        n_expert=n_expert,
        n_expert_used=n_used,
        n_ctx_train=n_ctx_train,
        file_size=p.stat().st_size,
        layers=[[] for _ in range(n_layer)],
        expert_bytes=[0] * n_layer,
        dense_bytes=[0] * n_layer,
    )
    for t in reader.tensors:
        name = t.name
        m = EXPERT_RE.match(name)
        if m:
            il = int(m.group(1))
            shape = tuple(int(x) for x in t.shape)
            ne2 = shape[2] if len(shape) > 2 else 1
            nbytes = int(t.n_bytes)
            if il >= n_layer or ne2 != n_expert or n_expert <= 0 or nbytes % ne2:
                raise ModelError(
                    f"expert tensor {name} has {ne2} experts, metadata says {n_expert}: {p}"
                )
            info = ExpertTensorInfo(
                name=name,
                layer=il,
                kind=m.group(2),
                file_offset=int(t.data_offset),
                n_bytes=nbytes,
                n_expert=ne2,
                expert_stride=nbytes // ne2,
                ggml_type=int(t.tensor_type),
                shape=shape,
            )
            layout.tensors[name] = info
            layout.layers[il].append(info)
            layout.expert_bytes[il] += info.expert_stride
            continue
        b = BLOCK_RE.match(name)
        if b and int(b.group(1)) < n_layer:
            layout.dense_bytes[int(b.group(1))] += int(t.n_bytes)
    if not layout.tensors or n_expert <= 1 or n_used <= 0:
        raise ModelError(
            f"not a Mixture-of-Experts model (arch {arch}, no blk.N.ffn_*_exps tensors): {p}"
        )
    for ts in layout.layers:
        ts.sort(key=lambda i: i.name)
    return layout
