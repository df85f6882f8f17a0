"""Memory for the expert tensors: the buffers their ggml ``data`` pointers are redirected to.

Each expert tensor gets a :class:`TensorBuffer`: an address ``addr`` congruent to the tensor's
file offset modulo 4096 (so O_DIRECT reads land straight in place) inside a private anonymous
mapping. Untouched pages cost no RAM.

Two layouts (:class:`ExpertStore`):

* **in place** (a cache): one mapping per tensor. A missing expert's pages are faulted in by the
  read itself (a separate ``MADV_POPULATE_WRITE`` pass cost more than it saved); eviction
  releases with ``MADV_DONTNEED`` the whole pages that lie strictly inside the slice (slice sizes
  are not page multiples, so the edge pages shared with a neighbour stay).
* **windows** (no cache): the tensors of one kind and size share one mapping across layers, each
  at its own 4096-congruent shift. A layer's experts are read into the window just before the
  layer multiplies them; the next layer's routing (which needs this layer's output) always
  comes after, so the window is free again. Nothing is released per token: after the first
  tokens the window's pages stay committed and reads land on them (one layer's experts of RAM).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable, Iterable

from .expert_io import DIRECT_ALIGN, round_down, round_up
from .gguf_layout import ExpertTensorInfo, ModelLayout

PAGE = mmap.PAGESIZE

__all__ = ["TensorBuffer", "ExpertStore", "PAGE"]


class _Mapping:
    """One private anonymous mapping and the ctypes anchor that gives its address."""

    def __init__(self, size: int) -> None:
        self.mm = mmap.mmap(-1, round_up(max(1, size), PAGE), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.base = ctypes.addressof(self._anchor)
        self.size = len(self.mm)

    def close(self) -> None:
        try:
            del self._anchor
            self.mm.close()
        except (BufferError, ValueError):
            pass  # still exported to ctypes/ggml; the mapping dies with the process


class TensorBuffer:
    """Where one expert tensor's data lives: ``addr`` (``size`` bytes, ``shift`` bytes into its
    mapping, ``shift`` = file offset mod 4096) and ``view`` (a memoryview of exactly the tensor).
    ``shared``: the mapping is a window other tensors use too (nothing is committed or released)."""

    def __init__(self, info: ExpertTensorInfo, mapping: _Mapping, shared: bool) -> None:
        self.info = info
        self.size = info.n_bytes
        self.shift = info.file_offset % DIRECT_ALIGN
        self.shared = shared
        self._map = mapping
        self.addr = mapping.base + self.shift
        self.view = memoryview(mapping.mm)[self.shift : self.shift + self.size]

    def slice_range(self, e: int) -> tuple[int, int]:
        """Byte range [start, end) of expert ``e`` inside the tensor."""
        s = self.info.expert_stride
        return e * s, (e + 1) * s

    def inner_pages(self, e0: int, e1: int | None = None) -> tuple[int, int]:
        """Mapping offsets of the whole pages inside experts ``e0..e1`` that no neighbour shares."""
        a = self.slice_range(e0)[0]
        b = self.slice_range(e0 if e1 is None else e1)[1]
        return round_up(a + self.shift, PAGE), round_down(b + self.shift, PAGE)

    def release(self, e: int, prev_free: bool = False, next_free: bool = False) -> None:
        """Give back expert ``e``'s pages (in place only): the whole pages inside its slice, and
        the page it shares with the previous (next) expert too when that one is not resident
        either (``prev_free``/``next_free``; the first and last expert share theirs with no one)."""
        if self.shared:
            return
        lo, hi = self.slice_range(e)
        lo += self.shift
        hi += self.shift
        a, b = round_up(lo, PAGE), round_down(hi, PAGE)
        if a != lo and (prev_free or e == 0):
            a -= PAGE
        if b != hi and (next_free or e == self.info.n_expert - 1):
            b += PAGE
        if b > a:
            self._map.mm.madvise(mmap.MADV_DONTNEED, a, min(b, len(self._map.mm)) - a)

    def close(self) -> None:
        self.view.release()


class ExpertStore:
    """A :class:`TensorBuffer` for every expert tensor of ``layout`` (``buffers[name]``,
    ``layer_bufs[il]``), laid out in place or as shared windows (see module doc)."""

    def __init__(self, layout: ModelLayout, windows: bool = False) -> None:
        self.windows = bool(windows)
        self._maps: list[_Mapping] = []
        self.buffers: dict[str, TensorBuffer] = {}
        if self.windows:
            groups: dict[tuple[str, int], list[ExpertTensorInfo]] = {}
            for info in layout.tensors.values():
                groups.setdefault((info.kind, info.expert_stride), []).append(info)
            for infos in groups.values():
                m = _Mapping(max(i.n_bytes for i in infos) + DIRECT_ALIGN)
                self._maps.append(m)
                for info in infos:
                    self.buffers[info.name] = TensorBuffer(info, m, shared=True)
        else:
            for info in layout.tensors.values():
                m = _Mapping(info.n_bytes + info.file_offset % DIRECT_ALIGN)
                self._maps.append(m)
                self.buffers[info.name] = TensorBuffer(info, m, shared=False)
        self.layer_bufs: list[list[TensorBuffer]] = [[self.buffers[i.name] for i in ts] for ts in layout.layers]

    def release_experts(self, il: int, experts: Iterable[int], resident: Callable[[int, int], bool]) -> None:
        """Give back the pages of ``experts`` of layer ``il``; ``resident(il, e)`` says which
        neighbours still hold their shared edge pages."""
        for e in experts:
            prev_free = e > 0 and not resident(il, e - 1)
            next_free = not resident(il, e + 1)
            for tb in self.layer_bufs[il]:
                tb.release(e, prev_free, next_free)

    def close(self) -> None:
        for tb in self.buffers.values():
            tb.close()
        for m in self._maps:
            m.close()
        self.buffers = {}
        self._maps = []
