"""The three tiers of bmoe-run (docs/memory.md "The three tiers in bmoe-run"): every routed
expert is served by the expert cache (a hit), the page cache (a buffered read of bytes the
kernel held) or the disk. Real model files, their page-cache residency set on purpose with
``posix_fadvise(POSIX_FADV_DONTNEED)``, real reads, and a real ``bmoe-run`` process."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys

import orjson
import pytest
from helpers.pagecache import evict
from helpers.serve import Serve, complete, scrape_value

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.runtime import native
from bmoe_top.runtime.engine import Engine
from bmoe_top.runtime.expert_io import ExpertReader, Run
from bmoe_top.runtime.models import make_model

PROMPT = "The experts of every layer"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiers")
    return make_model(d / "tiny.gguf", preset="tiny", qtype="q8_0", seed=5)


def _slice(path):
    """(offset, length) of expert 1's slice of the first expert tensor."""
    lay = read_layout(str(path))
    info = lay.tensors[sorted(lay.tensors)[0]]
    return info.file_offset + info.expert_stride, info.expert_stride


@pytest.mark.parametrize("use_native", [True, False], ids=["native-lanes", "python-reads"])
def test_a_buffered_slice_read_twice_after_dontneed_is_disk_then_page_cache(model, use_native):
    if use_native and native.library() is None:
        pytest.skip(f"no native library: {native.native_error}")
    off, n = _slice(model)
    reader = ExpertReader([model], o_direct=False, use_native=use_native)
    buf = bytearray(n)
    run = Run(0, off, n, 0, memoryview(buf))
    if use_native:
        dst = (ctypes.c_char * n).from_buffer(buf)
        run = Run(0, off, n, ctypes.addressof(dst), memoryview(buf))
    try:
        assert reader.tiers and reader.nowait and not reader.direct
        evict(model)
        _busy, first = reader.read_runs([run])
        _busy, second = reader.read_runs([run])
    finally:
        reader.close()
    assert first == [0]  # its first page was not in the page cache: the disk served it
    assert second == [n]  # every byte came from the page cache
    with open(model, "rb") as fh:
        fh.seek(off)
        assert bytes(buf) == fh.read(n)


def test_with_o_direct_every_read_is_disk(model):
    off, n = _slice(model)
    reader = ExpertReader([model], o_direct=True)
    if not reader.direct:
        reader.close()
        pytest.skip("this file system refuses O_DIRECT")
    buf = mmap.mmap(-1, n + 8192)
    view = memoryview(buf)[:n]
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    try:
        with open(model, "rb") as fh:
            fh.seek(off)
            fh.read(n)  # the slice is in the page cache now; O_DIRECT reads still go to disk
        assert reader.tiers and not reader.nowait
        cached = [reader.read_runs([Run(0, off, n, addr, view)])[1] for _ in range(2)]
    finally:
        view.release()
        reader.close()
        buf.close()
    assert cached == [[0], [0]]


def _engine(path, **kw):
    return Engine(path, n_ctx=256, n_batch=64, n_threads=2, flash_attn=False, **kw)


def test_the_engine_counts_a_miss_by_the_tier_that_served_it(model):
    """One expert, missed twice with the page cache dropped before the first miss: disk, then page
    cache; the counters since load and per layer say the same."""
    with _engine(model, cache_mb=None, o_direct=False) as e:
        c = e.cache
        assert c is not None and c.tiers
        il = c.layout.moe_layers[0]
        seen = []
        for drop in (True, False):
            c.clear()
            if drop:
                evict(model)
            c.begin_token()
            c.ensure(il, [3])
            seen.append((c.tok.misses, c.tok.pagecache_misses, c.tok.pagecache_bytes, c.tok.read_bytes))
        eb = c.layout.expert_bytes[il]
        assert seen == [(1, 0, 0, eb), (1, 1, eb, eb)]
        assert c.layer_pagecache[il] == 1 and c.pagecache_misses == 1
        assert e.cache_stats().layer_pagecache[il] == 1


def test_the_native_miss_path_counts_tiers_too(model):
    """Decode tokens whose misses the native callback serves: after the file is dropped from the
    page cache some bytes come from disk; the same generation again, the cache cleared and the
    file now cached, reads every byte from the page cache."""
    with _engine(model, cache_mb=None, o_direct=False) as e:
        c = e.cache
        assert c is not None and native.library() is not None
        runs, since_load = [], []
        for drop in (True, False):
            c.clear()
            if drop:
                evict(model)
            rb0, pc0 = c.read_bytes, c.pagecache_bytes
            r = e.generate(PROMPT, 6)
            runs.append([(s.read_bytes, s.pagecache_bytes, s.misses, s.pagecache_misses) for s in r.stats])
            since_load.append((c.read_bytes - rb0, c.pagecache_bytes - pc0))  # the prompt's reads too
        assert c.native_misses_served > 0
    (cold_read, cold_pc), (warm_read, warm_pc) = since_load
    assert cold_pc < cold_read  # the disk served some of the first generation's reads
    assert warm_pc == warm_read > 0  # the page cache every byte of the second's
    read = [t for t in runs[1] if t[0] > 0]
    assert read, "the second generation's decode tokens read nothing"
    assert all(pc == rb and pm == m for rb, pc, m, pm in read)


def _bmoe_run(model, *extra):
    out = subprocess.run(
        [sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "-c", "256", "-n", "8", "-t", "2",
         "--cache-mb", "0.2", "--force-cache", "--progress", "--quiet", "-p", PROMPT, *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [orjson.loads(ln.split(" ", 1)[1]) for ln in out.stdout.splitlines() if ln.startswith("BMOE_PROGRESS ")]


def test_bmoe_run_progress_carries_pagecache_mb(model):
    """``--no-odirect``: the model was just loaded through the page cache, so the page cache served
    every miss (pagecache_mb == read_mb); O_DIRECT: the disk served every one (pagecache_mb 0)."""
    buffered = _bmoe_run(model, "--no-odirect")
    direct = _bmoe_run(model)
    assert buffered and direct
    assert any(p["read_mb"] > 0 for p in buffered)
    assert all(p["pagecache_mb"] == p["read_mb"] for p in buffered)
    assert any(p["read_mb"] > 0 for p in direct)
    assert all(p["pagecache_mb"] == 0 for p in direct)


@pytest.mark.parametrize("odirect", [False, True], ids=["buffered", "o_direct"])
def test_serve_metrics_and_audit_split_the_experts_by_tier(model, tmp_path, odirect):
    """``bmoe:expert_tier_total{layer,tier}`` of a real ``bmoe-run serve``: per layer cache = the
    layer's hits, page_cache + disk = its misses; the audit log's exit record carries the same
    page-cache misses, in all and per layer. With O_DIRECT the page cache served none."""
    audit = tmp_path / "a.jsonl"
    args = ["--cache-mb", "0.2", "--force-cache", "--moe-cache-audit", str(audit)]
    s = Serve(model, *args, *([] if odirect else ["--no-odirect"]))
    try:
        assert complete(s.url, PROMPT, 8).status_code == 200
        layers = read_layout(str(model)).moe_layers
        got = {il: {t: scrape_value(s.url, "bmoe:expert_tier_total", {"layer": str(il), "tier": t})
                    for t in ("cache", "page_cache", "disk")} for il in layers}
        hits = {il: scrape_value(s.url, "llamacpp:moe_cache_layer_hits_total", {"layer": str(il)}) for il in layers}
        misses = {il: scrape_value(s.url, "llamacpp:moe_cache_layer_misses_total", {"layer": str(il)})
                  for il in layers}
    finally:
        assert s.stop() == 0
    for il in layers:
        assert got[il]["cache"] == hits[il]
        assert got[il]["page_cache"] + got[il]["disk"] == misses[il]
    assert sum(misses.values()) > 0
    pc = sum(v["page_cache"] for v in got.values())
    if odirect:
        assert pc == 0
    else:
        assert pc > 0
    exit_rec = [orjson.loads(ln) for ln in audit.read_text().splitlines() if '"exit"' in ln][-1]
    assert exit_rec["misses_pagecache"] == pc
    assert {row["il"]: row["misses_pagecache"] for row in exit_rec["layers"]} == {
        il: int(v["page_cache"]) for il, v in got.items()}


def _lines(model, *extra):
    out = subprocess.run(
        [sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(model), "-c", "256", "-n", "8", "-t", "2",
         "--cache-mb", "0.2", "--force-cache", "--progress", "--route-telemetry", "--quiet", "-p", PROMPT, *extra],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    recs: dict[str, list[dict]] = {"PROGRESS": [], "ROUTE": []}
    for ln in out.stdout.splitlines():
        tag, _, body = ln.partition(" ")
        if tag.removeprefix("BMOE_") in recs:
            recs[tag.removeprefix("BMOE_")].append(orjson.loads(body))
    return recs


@pytest.mark.parametrize("odirect", [False, True], ids=["buffered", "o_direct"])
def test_route_lines_name_each_experts_tier(model, odirect):
    """``BMOE_ROUTE`` decode lines carry ``tier`` aligned with ``experts``: 0 exactly where ``hit``
    is 1; buffered (the file in the page cache since the load) a miss is 1, with O_DIRECT 2;
    each token's 1s are its ``misses_pagecache``. A buffered read is the page cache's when
    ``preadv2(RWF_NOWAIT)`` returns all of it, and the kernel may make a cached read wait (a
    page being read ahead or locked): a tenth of the buffered misses may read as the disk's."""
    recs = _lines(model, *([] if odirect else ["--no-odirect"]))
    decode = [r for r in recs["ROUTE"] if r["phase"] == "decode"]
    assert decode and all("tier" in r for r in decode)
    miss_tier = 2 if odirect else 1
    waited = misses = 0
    for r in decode:
        for hits, tiers in zip(r["hit"], r["tier"]):
            assert [0 if h else miss_tier for h in hits] == tiers or (
                not odirect and [0 if h else 1 for h in hits] == [min(t, 1) for t in tiers]), (hits, tiers)
            misses += sum(1 for h in hits if not h)
            waited += sum(1 for t in tiers if t == 2) if not odirect else 0
    assert waited * 10 <= misses, (waited, misses)
    by_step = {p["step"]: p for p in recs["PROGRESS"]}
    assert any(2 in sum(r["tier"], []) or 1 in sum(r["tier"], []) for r in decode)
    for r in decode:
        p = by_step[r["step"]]
        assert sum(t == 1 for t in sum(r["tier"], [])) == p["misses_pagecache"]
        assert sum(t != 0 for t in sum(r["tier"], [])) == p["misses"]
