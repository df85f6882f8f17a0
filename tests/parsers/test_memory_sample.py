"""parsers/memory_sample.py: memory records written and read back, keyframes, damaged lines."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.memory_sample import (
    KEYFRAME,
    CgroupFigures,
    MemorySample,
    ProcessFigures,
    SampleDecoder,
    SampleEncoder,
    SystemFigures,
    WatchedFiles,
)


def files(L=3, E=4) -> WatchedFiles:
    return WatchedFiles(("/m/a-00001-of-00002.gguf", "/m/a-00002-of-00002.gguf"), (8192, 409600), 4096, L, E,
                        np.full((L, E), 9, dtype=np.int64), 12, (2, 100), "qwen3moe", "tiny", "cachestat", 77, True)


def sample(t, slices, tokens=None) -> MemorySample:
    return MemorySample(t, slices, 5, (1, 40), ProcessFigures(77, "llama-server", "S", majflt=3, read_bytes=4096,
                                                             rss=100, rss_anon=60, rss_file=40, rss_shmem=0),
                        SystemFigures(mem_total=1 << 30, mem_available=1 << 29, psi_some_avg10=0.5),
                        CgroupFigures(1, "/x", 1 << 28, "/x", 1 << 27, 1 << 26), tokens)


def test_a_recording_reads_back_to_the_same_records_with_changes_between_keyframes():
    enc, dec = SampleEncoder(), SampleDecoder()
    w = files()
    got = dec.read(enc.files(w))
    assert isinstance(got, WatchedFiles) and got.paths == w.paths and got.direct_io and got.pid == 77
    assert np.array_equal(got.slice_pages, w.slice_pages) and got.file_pages == (2, 100)
    rng = np.random.default_rng(1)
    m = np.zeros((3, 4), dtype=np.int64)
    lines = []
    for i in range(KEYFRAME + 5):
        m = m.copy()
        m[rng.integers(3), rng.integers(4)] = rng.integers(10)
        s = sample(100.0 + i, m, tokens=i)
        line = enc.sample(s)
        lines.append(orjson.loads(line))
        back = dec.read(line)
        assert isinstance(back, MemorySample)
        assert back.slices is not None and np.array_equal(back.slices, m)
        assert (back.t, back.dense, back.files, back.tokens) == (s.t, 5, (1, 40), i)
        assert back.proc == s.proc and back.system == s.system and back.cgroup == s.cgroup
    whole = [i for i, d in enumerate(lines) if "slices" in d]
    assert whole == [0, KEYFRAME + 1]  # the first one, then every KEYFRAME changes
    assert all("changed" in d for i, d in enumerate(lines) if i not in whole)


def test_a_lost_line_leaves_the_map_unknown_until_the_next_whole_one():
    enc, dec = SampleEncoder(), SampleDecoder()
    dec.read(enc.files(files()))
    m = np.ones((3, 4), dtype=np.int64)
    dec.read(enc.sample(sample(1.0, m)))
    with pytest.raises(ValueError, match="changed names layer 7"):
        dec.read('{"kind":"sample","t":2.0,"changed":[[7,0,1]]}')
    m2 = m.copy()
    m2[0, 0] = 3
    after = dec.read(enc.sample(sample(3.0, m2)))  # a change against a base the decoder lost
    assert isinstance(after, MemorySample) and after.slices is None and after.dense == 5
    enc._since_key = KEYFRAME  # the next one is whole
    back = dec.read(enc.sample(sample(4.0, m2)))
    assert isinstance(back, MemorySample) and back.slices is not None and back.slices[0, 0] == 3


def test_notes_and_samples_without_residency():
    dec = SampleDecoder()
    assert dec.read(SampleEncoder.note("process 7 exited", 5.0)) == (5.0, "process 7 exited")
    s = dec.read('{"kind":"sample","t":1.5,"system":{"mem_available":10}}')
    assert isinstance(s, MemorySample) and s.slices is None and s.proc is None and s.system is not None
    assert s.system.mem_available == 10 and s.system.mem_total is None


@pytest.mark.parametrize("line, why", [
    ("not json", "not JSON"),
    ("[1]", "not a memory record"),
    ('{"kind":"sample"}', "needs its time"),
    ('{"kind":"sample","t":1,"slices":[[1]]}', "before any files"),
    ('{"kind":"files","n_layer":5000,"n_expert":2}', "over the cap"),
    ('{"kind":"files","n_layer":2,"n_expert":2,"paths":["a"],"sizes":[1],"file_pages":[1],"page_size":0,'
     '"slice_pages":[[1,1],[1,1]],"dense_pages":0}', "page_size"),
    ('{"kind":"files","n_layer":2,"n_expert":2,"paths":["a"],"sizes":[1],"file_pages":[1],"page_size":4096,'
     '"slice_pages":[[1,1]],"dense_pages":0}', "2 lists of 2"),
    ('{"kind":"sample","t":1,"proc":{"pid":-1}}', "pid"),
    ('{"kind":"sample","t":1,"system":{"mem_available":1e300}}', "mem_available"),
    ('{"kind":"sample","t":1,"cgroup":{"version":3}}', "version 1 or 2"),
])
def test_a_bad_line_is_one_error(line, why):
    with pytest.raises(ValueError, match=why):
        SampleDecoder().read(line)


@settings(max_examples=200)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(
                        ["kind", "t", "slices", "changed", "proc", "pid", "n_layer", "n_expert", "paths", "sizes",
                         "page_size", "dense", "files", "system", "cgroup", "version", "tokens"]), c, max_size=6),
                    max_leaves=20))
def test_any_json_is_a_record_or_one_value_error(value):
    dec = SampleDecoder()
    dec.read(SampleEncoder().files(files()))
    for kind in ("sample", "files", "note"):
        obj = {**value, "kind": kind} if isinstance(value, dict) else value
        try:
            dec.read(json.dumps(obj))
        except ValueError:
            pass
