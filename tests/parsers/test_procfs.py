"""parsers/procfs.py: the /proc and cgroup texts the memory watcher reads, real shapes and damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bmoe_top.parsers.procfs import (
    ProcFormatError,
    cgroup_mounts,
    kb_fields,
    parse_cgroup,
    parse_fdinfo_flags,
    parse_flat,
    parse_int,
    parse_io,
    parse_kb,
    parse_limit,
    parse_maps,
    parse_psi,
    parse_stat,
)

MAPS = """\
55d4c0a00000-55d4c0a2f000 r--p 00000000 fd:01 1234567                    /usr/bin/llama-server
7f1c00000000-7f1c14000000 r--s 00000000 fd:01 7654321                    /models/big model.gguf
7f1c20000000-7f1c24000000 r--s 00000000 08:10 42                         /models/old.gguf (deleted)
7ffd2c1e0000-7ffd2c201000 rw-p 00000000 00:00 0                          [stack]
7f1c30000000-7f1c30021000 rw-p 00000000 00:00 0
this is not a maps line
"""


def test_maps_lines_with_spaces_deleted_files_and_anonymous_mappings():
    m = parse_maps(MAPS)
    assert [e.path for e in m] == ["/usr/bin/llama-server", "/models/big model.gguf", "/models/old.gguf", "[stack]", ""]
    big = m[1]
    assert (big.start, big.end, big.perms, big.dev, big.inode) == (0x7F1C00000000, 0x7F1C14000000, "r--s", (0xFD, 1),
                                                                    7654321)
    assert big.size == 0x14000000 and not big.deleted
    assert m[2].deleted and m[2].dev == (8, 16)
    assert m[4].inode == 0


def test_stat_of_a_comm_with_spaces_and_parentheses():
    fields = ["S"] + [str(i) for i in range(1, 50)]
    s = parse_stat(f"4242 (llama (server) x) {' '.join(fields)}\n")
    # after ')': state, ppid(1) ... minflt is field 7 (value 7), majflt 9, utime 11, stime 12, threads 17,
    # starttime 19, rss 21
    assert (s.pid, s.comm, s.state) == (4242, "llama (server) x", "S")
    assert (s.minflt, s.majflt, s.utime, s.stime, s.num_threads, s.starttime, s.rss_pages) == (7, 9, 11, 12, 17, 19, 21)


def test_stat_of_this_process_is_read():
    s = parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert s.pid == os.getpid() and s.state in "RS" and s.starttime > 0


@pytest.mark.parametrize("text", ["", "1234", "1234 (x) S 1 2", "abc (x) " + "1 " * 40, "1 (x) S " + "a " * 40])
def test_stat_that_is_not_one_is_one_error(text):
    with pytest.raises(ProcFormatError):
        parse_stat(text)


def test_io_kb_psi_and_flat_files():
    io = parse_io("rchar: 100\nwchar: 5\nsyscr: 3\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 0\n"
                  "cancelled_write_bytes: 0\n")
    assert (io.rchar, io.read_bytes, io.syscr, io.write_bytes) == (100, 4096, 3, 0)
    assert parse_io("garbage").read_bytes is None  # absent, not zero
    kb = parse_kb("7f0-7f1 ---p 00000000 00:00 0   [rollup]\nRss:     1024 kB\nAnonymous:  12 kB\n"
                  "HugePages_Total:       0\nName:\tllama-server\n")
    assert kb == {"Rss": 1024 * 1024, "Anonymous": 12 * 1024, "HugePages_Total": 0}
    p = parse_psi("some avg10=1.50 avg60=0.20 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
                  "total=99\n")
    assert (p.some_avg10, p.some_total_us, p.full_total_us, p.full_avg60) == (1.5, 123456, 99, 0.0)
    assert parse_psi("some avg10=x total=\n").some_avg10 is None
    assert parse_flat("cache 754503680\nrss 2068480\nbad line here\n") == {"cache": 754503680, "rss": 2068480}


def test_kb_fields_read_the_named_lines_as_parse_kb_does():
    # the real files of this machine: the named lines only, the same bytes as the whole parse
    for path, names in (("/proc/meminfo", ("MemAvailable", "Cached", "MemTotal")),
                        (f"/proc/{os.getpid()}/status", ("RssAnon", "RssFile", "VmRSS"))):
        text = Path(path).read_text()
        whole = parse_kb(text)
        assert kb_fields(text, names) == {k: whole[k] for k in names if k in whole}
        assert set(kb_fields(text, names)) == set(names)
    # a name inside another line's key (SwapCached: before Cached:) is not that line; an absent
    # name, or a line that is not a kB line, is left out
    text = "SwapCached:   7 kB\nName:\tCached: x\nCached:  2 MB\nHugePages_Total:  3\n"
    assert kb_fields(text, ("Cached", "HugePages_Total", "Missing", "Name")) == {
        "Cached": 2 << 20, "HugePages_Total": 3}
    assert kb_fields("Cached: 5 kB", ("Cached",)) == {"Cached": 5 * 1024}  # the last line, no newline


def test_limits_and_cgroup_lines():
    assert parse_limit("max\n") is None and parse_limit("9223372036854771712\n") is None
    assert parse_limit("268435456\n") == 268435456 and parse_int("12\n") == 12 and parse_int("x") is None
    lines = parse_cgroup("12:memory:/a/b\n4:cpu,cpuacct:/\n0::/user.slice/x.scope\nbad\n9:name=systemd:/\n")
    assert [(c.hierarchy, c.controllers, c.path) for c in lines] == [
        (12, ("memory",), "/a/b"), (4, ("cpu", "cpuacct"), "/"), (0, (), "/user.slice/x.scope"),
        (9, ("name=systemd",), "/")]


def test_cgroup_mounts_v1_v2_and_escaped_paths():
    info = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
            "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
            "41 31 0:38 /docker/abc /sys/fs/cgroup/uni\\040fied rw shared:9 - cgroup2 cgroup2 rw\n")
    m = cgroup_mounts(info)
    assert [(x.version, x.controllers, x.mount_point, x.root) for x in m] == [
        (1, ("memory",), "/sys/fs/cgroup/memory", "/"), (1, (), "/sys/fs/cgroup/systemd", "/"),
        (2, (), "/sys/fs/cgroup/uni fied", "/docker/abc")]


def test_fdinfo_flags_are_octal():
    assert parse_fdinfo_flags("pos:\t0\nflags:\t0140000\nmnt_id:\t25\n") == 0o140000
    assert parse_fdinfo_flags("pos: 0\n") is None and parse_fdinfo_flags("flags: 9z\n") is None
    with open(__file__, "rb") as f:
        flags = parse_fdinfo_flags(Path(f"/proc/self/fdinfo/{f.fileno()}").read_text())
    assert flags is not None and not flags & os.O_DIRECT and (flags & os.O_ACCMODE) == os.O_RDONLY


@given(st.text(max_size=400))
@example("1 (x) S " + "1 " * 19 + "-5 7")
@example("7f-8f r--s 0 fd:01 12 /a (deleted)\n0-1 ---p 1 0:0 0")
def test_no_text_makes_a_parser_raise_anything_but_its_own_error(text):
    for fn in (parse_maps, parse_io, parse_kb, parse_psi, parse_cgroup, parse_limit, parse_int, parse_flat,
               parse_fdinfo_flags, cgroup_mounts):
        fn(text)
    try:
        parse_stat(text)
    except ProcFormatError:
        pass
