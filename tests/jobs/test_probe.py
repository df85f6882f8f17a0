"""``bmoe-top probe``'s measurement (tui/jobs/probe.py): every depth of both modes is a real round
of preads over a real file, the counts add up, the slice size comes from the GGUF, bad files are
one sentence, and an O_DIRECT round's bytes are what the device gave (against ``fio``:
benchmarks/bench_probe.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bmoe_top.runtime.models import make_model
from bmoe_top.tui.jobs import probe as P
from bmoe_top.tui.present.probe import best, probe_lines


def data_file(path: Path, mib: int) -> Path:
    with open(path, "wb") as fh:
        for _ in range(mib):
            fh.write(os.urandom(1 << 20))
    return path


@pytest.fixture(scope="module")
def eight_mib(tmp_path_factory) -> Path:
    return data_file(tmp_path_factory.mktemp("probe") / "data.bin", 8)


def test_every_depth_of_both_modes_is_measured_and_adds_up(eight_mib):
    seen: list[tuple[str, float]] = []
    r = P.probe(str(eight_mib), 10_000, qd_max=3, seconds=0.1, progress=lambda label, f: seen.append((label, f)))
    assert r.block_bytes == 12_288 and r.slice_bytes == 10_000 and r.slice_source == "--slice-bytes"
    assert r.direct is not None and r.direct_note is None
    for rows in (r.direct, r.buffered):
        assert [d.depth for d in rows] == [1, 2, 3]
        for d in rows:
            assert d.reads > 0 and d.bytes == d.reads * r.block_bytes
            assert d.mb_s == pytest.approx(d.bytes / d.seconds / 1e6)
            assert d.iops == pytest.approx(d.reads / d.seconds)
            assert d.seconds >= 0.1
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and seen[-1][0] == "done"
    assert best(r.buffered) in r.buffered
    assert seen[-2][0] == "mmap faults"
    lines = probe_lines(r)
    assert len(lines) == 1 + 1 + 3 + 2 + 1 and lines[2].split()[0] == "1"
    assert lines[-1].startswith("mmap faults (advised sequential, ")


def test_the_slice_size_is_the_gguf_expert_stride(tmp_path):
    from bmoe_top.parsers.gguf_layout import read_layout

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=2)
    strides = sorted(t.expert_stride for t in read_layout(model).tensors.values())
    got = P.gguf_slice_bytes(str(model))
    assert got in strides and got == strides[(len(strides) - 1) // 2]
    r = P.probe(str(model), qd_max=1, seconds=0.05)
    assert r.slice_source == "gguf" and r.slice_bytes == got and r.block_bytes == P.block_bytes(got)


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("make", "says"), [
    (lambda d: d / "none", "no such file"),
    (lambda d: d, "a directory, not a file"),
    (lambda d: written(d / "empty", b""), "the file is empty"),
    (lambda d: written(d / "text", b"hello\n" * 1000), "not a GGUF file"),
])
def test_a_file_it_cannot_measure_is_one_sentence(tmp_path, make, says):
    with pytest.raises(P.ProbeError, match=says):
        P.probe(str(make(tmp_path)), qd_max=1, seconds=0.05)


def test_a_file_smaller_than_one_read_is_refused(tmp_path):
    small = tmp_path / "small"
    small.write_bytes(b"x" * 5000)
    with pytest.raises(P.ProbeError, match="smaller than one read of 8,192 bytes"):
        P.probe(str(small), 5000, qd_max=1, seconds=0.05)


def test_a_file_system_without_o_direct_is_measured_buffered_only(eight_mib, monkeypatch):
    """Every file system here takes O_DIRECT (ext4, tmpfs on Linux 6.6+), so the refusal some
    (older tmpfs, some FUSE and network file systems) give is made at open(2)."""
    real_open = os.open

    def refusing(path, flags, *a, **k):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(P.os, "open", refusing)
    r = P.probe(str(eight_mib), 65536, qd_max=2, seconds=0.05)
    assert r.direct is None and len(r.buffered) == 2
    assert r.direct_note == "O_DIRECT is not supported here (invalid argument): buffered reads only"
    assert "O_DIRECT is not supported here" in "\n".join(probe_lines(r))


def process_read_bytes() -> int:
    """The bytes this process has had read from storage (``/proc/self/io`` ``read_bytes``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no read_bytes")


@pytest.mark.parametrize("depth", [1, 4])
def test_o_direct_rounds_read_from_the_device_what_they_report(tmp_path, depth):
    """Every byte an O_DIRECT round reports came from the device: the kernel's own count of this
    process's storage reads grows by the round's bytes (a probe served by the page cache would
    report bytes the device never gave). How its MB/s compares with ``fio``'s for the same pattern
    is a speed, measured in benchmarks/bench_probe.py."""
    f = data_file(tmp_path / "direct.bin", 16)
    block = P.block_bytes(208_896)  # the bench model's expert slice
    before = process_read_bytes()
    r = P.probe(str(f), block, only_depth=depth, seconds=0.2, buffered=False, faults=False)
    grown = process_read_bytes() - before
    assert r.direct is not None and [d.depth for d in r.direct] == [depth]
    got = r.direct[0]
    assert got.reads > 0 and got.bytes == got.reads * block
    # the same bytes, give or take what the interpreter itself reads meanwhile (under 1 MiB)
    assert got.bytes <= grown <= got.bytes + (1 << 20), (got.bytes, grown)


def test_the_fault_round_reads_what_it_reports_from_the_device(tmp_path):
    """Every byte the mmap round reports came from the device through page faults: the kernel's
    count of this process's storage reads grows by them, and each fault read more than the page
    it touched (its read-around window)."""
    f = data_file(tmp_path / "mapped.bin", 16)
    with open(f, "rb") as fh:
        os.fsync(fh.fileno())  # dirty pages would stay cached through the round's drops
    before = process_read_bytes()
    r = P.fault_round(str(f), 0.2)
    grown = process_read_bytes() - before
    if r is None:
        pytest.skip("this kernel does not count a thread's reads (/proc/thread-self/io)")
    assert r.faults > 0 and r.bytes > r.faults * P.ALIGN
    assert r.mb_s == pytest.approx(r.bytes / r.seconds / 1e6) and r.seconds >= 0.2
    assert r.bytes <= grown <= r.bytes + (1 << 20), (r.bytes, grown)
