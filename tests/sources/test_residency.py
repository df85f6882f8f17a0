"""The residency sampler (tui/sources/residency.py) on real files: after slices are made resident
(buffered reads of chosen slices, no readahead) and the rest evicted (POSIX_FADV_DONTNEED), the
layer x expert map shows exactly those slices, with every method; the whole file's resident
pages equal util-linux fincore's; a file it may not see, a truncated or damaged file is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import pytest
from helpers.pagecache import evict, fincore_pages, make_resident, private_model

from bmoe_top.parsers.gguf_layout import EXPERT_RE, ModelError
from bmoe_top.tui.sources import residency as R
from bmoe_top.tui.sources.residency import ResidencyError, open_model

PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return private_model(tmp_path_factory.mktemp("res"), "tiny")


def slices_of(path: Path) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(layer, expert) -> byte ranges of its slices, read with the gguf package itself."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        m = EXPERT_RE.match(t.name)
        if m:
            n_expert = int(t.shape[2])
            stride = int(t.n_bytes) // n_expert
            for e in range(n_expert):
                out.setdefault((int(m.group(1)), e), []).append((int(t.data_offset) + e * stride, stride))
    return out


def pages(ranges: list[tuple[int, int]]) -> set[int]:
    return {p for off, n in ranges for p in range(off // PAGE, (off + n - 1) // PAGE + 1)}


def expected_map(sl: dict[tuple[int, int], list[tuple[int, int]]], chosen: list[tuple[int, int]], n_layer: int,
                 n_expert: int, also: list[tuple[int, int]] = ()) -> np.ndarray:
    """Resident pages of every expert once ``chosen`` experts' bytes (and the byte ranges ``also``),
    and only those, were read (``sl``: :func:`slices_of` the model, read before it was evicted:
    reading the header through a mapping brings in the pages around it)."""
    hot = pages([r for k in chosen for r in sl[k]] + list(also))
    out = np.zeros((n_layer, n_expert), dtype=np.int64)
    for (li, e), ranges in sl.items():
        out[li, e] = sum(len(pages([r]) & hot) for r in ranges)
    return out


@pytest.fixture(params=["cachestat", "mincore", "mincore-numpy"])
def method(request, monkeypatch):
    if request.param == "mincore-numpy":  # a machine without a C compiler
        monkeypatch.setattr(R, "_native", None)
        monkeypatch.setattr(R, "_tried", True)
        return "mincore"
    if R._lib() is None:
        pytest.skip(f"no C compiler: {R.native_error}")
    return request.param


def test_the_map_shows_exactly_the_slices_made_resident(tiny, method):
    lay, sampler = open_model(str(tiny), method)
    sl = slices_of(tiny)
    try:
        assert sampler.method == method
        chosen = [(0, 1), (1, 6), (1, 7)]
        evict(tiny)
        before = sampler.sample()
        assert before.file_total == 0 and before.slices.sum() == 0 and before.dense == 0
        make_resident(tiny, [r for k in chosen for r in sl[k]])
        got = sampler.sample()
        want = expected_map(sl, chosen, lay.n_layer, lay.n_expert)
        assert np.array_equal(got.slices, want)
        for k in chosen:  # whole
            assert got.slices[k] == sampler.plan.slice_pages[k]
        hot = pages([r for k in chosen for r in sl[k]])
        assert got.dense == len(hot & pages([(d.file_offset, d.n_bytes) for d in lay.dense]))  # pages shared
        assert got.file_total == len(hot)
        assert got.file_total == fincore_pages(tiny)
    finally:
        sampler.close()


def test_the_bench_model_map_and_the_whole_file_equal_fincore(tmp_path, method):
    path = private_model(tmp_path, "bench")
    lay, sampler = open_model(str(path), method)
    sl = slices_of(path)
    try:
        evict(path)
        rng = np.random.default_rng(7)
        chosen = sorted({(int(rng.integers(lay.n_layer)), int(rng.integers(lay.n_expert))) for _ in range(40)})
        dense = [(d.file_offset, d.n_bytes) for d in lay.dense[::3]]
        make_resident(path, [r for k in chosen for r in sl[k]] + dense)
        got = sampler.sample()
        assert np.array_equal(got.slices, expected_map(sl, chosen, lay.n_layer, lay.n_expert, dense))
        hot = pages([r for k in chosen for r in sl[k]] + dense)
        assert got.dense == len(hot & pages([(d.file_offset, d.n_bytes) for d in lay.dense]))
        assert got.file_total == fincore_pages(path)
        # half of them leave: all evicted, the others read again (DONTNEED of a range keeps its partial
        # end pages and any large folio that crosses them, so a range alone is not a clean cut)
        evict(path)
        make_resident(path, [r for k in chosen[1::2] for r in sl[k]])
        left = sampler.sample()
        assert np.array_equal(left.slices, expected_map(sl, chosen[1::2], lay.n_layer, lay.n_expert))
        assert left.file_total == fincore_pages(path) == len(pages([r for k in chosen[1::2] for r in sl[k]]))
    finally:
        sampler.close()


def test_a_split_model_is_sampled_over_every_shard(tmp_path):
    from bmoe_top.runtime.models import split_gguf

    single = private_model(tmp_path, "tiny")
    shards = split_gguf(single, tmp_path / "spread.gguf", 8)
    lay, sampler = open_model(str(shards[0]))
    try:
        assert len(sampler.plan.paths) == len(shards) == 4
        for s in shards:
            evict(s)
        make_resident(shards[-1], [(0, s) for s in [shards[-1].stat().st_size]])
        got = sampler.sample()
        assert got.files[:-1] == (0, 0, 0) and got.files[-1] == fincore_pages(shards[-1]) > 0
        in_last = {i for i, t in enumerate(lay.tensors.values()) if t.shard == 3}
        assert in_last and got.slices.sum() > 0
    finally:
        sampler.close()


def test_a_file_truncated_while_watched_is_one_line(tmp_path):
    path = private_model(tmp_path, "tiny")
    _lay, sampler = open_model(str(path))
    try:
        os.truncate(path, path.stat().st_size // 2)
        with pytest.raises(ResidencyError, match=r"was truncated while watched: [\d,]+ bytes, its tensors need"):
            sampler.sample()
    finally:
        sampler.close()


def test_a_damaged_header_is_one_line(tmp_path):
    path = private_model(tmp_path, "tiny")
    data = bytearray(path.read_bytes()[:4096])
    data[8:16] = b"\xff" * 8  # the tensor count
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError) as e:
        open_model(str(bad))
    assert "\n" not in str(e.value) and "bad.gguf" in str(e.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a check as another user (nobody)")
def test_a_file_this_user_may_not_see_is_refused_not_shown_resident():
    # the kernel reports every page resident to a reader who neither owns nor may write the file;
    # the sampler says so instead of showing a full map
    d = Path(tempfile.mkdtemp(prefix="bmoe-perm-"))
    try:
        os.chmod(d, 0o755)
        path = private_model(d, "tiny")
        os.chmod(path, 0o644)
        # the interpreter lives where nobody may not read it: the check imports as root, then drops to nobody
        code = ("import os, sys\nfrom bmoe_top.tui.sources import residency as R\nR._lib()\n"
                "os.setgid(65534)\nos.setuid(65534)\n"
                f"try:\n    R.open_model({str(path)!r}, sys.argv[1])\nexcept R.ResidencyError as e:\n"
                "    print(e)\n    sys.exit(3)\n")
        for method in ("cachestat", "mincore"):
            r = subprocess.run([sys.executable, "-c", code, method], capture_output=True, text=True, cwd="/")
            assert r.returncode == 3, r.stderr
            assert "only to its owner, to whoever may write it, or to root" in r.stdout
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
