"""``attach --pid`` on a stock llama-server serving the bench model inside a memory cgroup whose
limit is below the model's size (made by the test; it needs root and a memory controller, else it
is skipped with the reason): while requests run, the page cache cannot hold the model, so the
residency churns and the server's major faults and disk reads per generated token are above zero,
and the watcher's read counter agrees with ``/proc/PID/io`` read around it; with the limit lifted
and the file resident, faults and reads per token fall to zero."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest
from helpers.llama_server import LlamaServer, llama_server_binary
from helpers.pagecache import private_model

from bmoe_top.parsers.procfs import cgroup_mounts, parse_io
from bmoe_top.tui.feed.memory import bind_memory
from bmoe_top.tui.sources.memory import MemoryWatcher
from bmoe_top.tui.sources.metrics_poll import MetricsPoller

MIB = 1 << 20


def memory_cgroup_root() -> tuple[int, Path]:
    """(cgroup version, the folder new memory cgroups go in), or skip with the reason."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a memory cgroup")
    mounts = cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    v1 = next((m for m in mounts if m.version == 1 and "memory" in m.controllers), None)
    if v1 is not None:
        return 1, Path(v1.mount_point)
    v2 = next((m for m in mounts if m.version == 2), None)
    if v2 is not None and "memory" in (Path(v2.mount_point) / "cgroup.subtree_control").read_text():
        return 2, Path(v2.mount_point)
    pytest.skip("no memory cgroup controller this test may use")


class Cgroup:
    """A memory cgroup of its own (``limit(bytes or None)``), removed at the end."""

    def __init__(self, version: int, root: Path, name: str) -> None:
        self.version = version
        self.dir = root / name
        try:
            self.dir.mkdir()
        except OSError as e:
            pytest.skip(f"cannot make a memory cgroup in {root}: {e.strerror}")

    def limit(self, n: int | None) -> None:
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        (self.dir / name).write_text(str(n) if n is not None else ("-1" if self.version == 1 else "max"))

    def remove(self) -> None:
        self.dir.rmdir()


def complete(url: str, n: int) -> None:
    with httpx.Client(trust_env=False, timeout=600) as c:
        r = c.post(url + "/completion", json={"prompt": "The experts of every layer", "n_predict": n,
                                               "cache_prompt": False, "ignore_eos": True})
        assert r.status_code == 200, r.text


def read_bytes(pid: int) -> int:
    v = parse_io(Path(f"/proc/{pid}/io").read_text()).read_bytes
    assert v is not None
    return v


def test_a_limit_below_the_model_makes_it_read_per_token_and_lifting_it_stops_that(tmp_path):
    version, root = memory_cgroup_root()
    exe = llama_server_binary()
    path = private_model(tmp_path, "bench")
    size = path.stat().st_size
    cg = Cgroup(version, root, f"bmoe-test-{os.getpid()}")
    wrapper = tmp_path / "in-cgroup.sh"
    wrapper.write_text(f"#!/bin/sh\necho $$ > {cg.dir}/cgroup.procs\nexec {exe} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    try:
        with LlamaServer(wrapper, path, "--metrics", ctx=256) as ls:
            pid = ls.proc.pid
            assert f"/{cg.dir.name}" in Path(f"/proc/{pid}/cgroup").read_text()
            anon = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if line.startswith("RssAnon:"))) * 1024
            limit = (anon + size // 3) // 4096 * 4096  # room for a third of the model's pages
            cg.limit(limit)
            poller = MetricsPoller(ls.url + "/metrics", timeout=60)
            w = MemoryWatcher(pid=pid, poller=poller)
            m = bind_memory(w)
            try:
                churned = 0
                io0 = read_bytes(pid)
                first = w.sample_once()
                for _ in range(3):
                    complete(ls.url, 16)
                    w.sample_once()
                    f = m.figures()
                    churned += (f.slices_in or 0) + (f.slices_out or 0)
                last = w.sample_once()
                io1 = read_bytes(pid)
                assert first is not None and last is not None and first.proc and last.proc
                assert io0 <= first.proc.read_bytes <= last.proc.read_bytes <= io1  # the same counter
                tokens = last.tokens - first.tokens
                assert tokens == 48
                assert (last.proc.read_bytes - first.proc.read_bytes) / tokens > 0
                assert (last.proc.majflt - first.proc.majflt) / tokens > 0
                assert churned > 0
                cg_fig = last.cgroup
                assert cg_fig is not None and cg_fig.limit == limit and cg_fig.limit_path.endswith(cg.dir.name)
                assert m.figures().file_share < 0.9  # the page cache cannot hold the model

                cg.limit(None)
                with open(path, "rb") as fh:  # the whole file into the page cache
                    while fh.read(8 * MIB):
                        pass
                complete(ls.url, 16)  # the server maps what it touches again
                before = w.sample_once()
                complete(ls.url, 16)
                after = w.sample_once()
                assert before is not None and after is not None and before.proc and after.proc
                assert m.figures().file_share == 1.0
                assert after.tokens - before.tokens == 16
                assert after.proc.majflt - before.proc.majflt == 0
                assert after.proc.read_bytes - before.proc.read_bytes == 0
                assert m.figures().faults_per_token == 0 and m.figures().read_bytes_per_token == 0
            finally:
                w.close()
                poller.client.close()
    finally:
        cg.remove()
