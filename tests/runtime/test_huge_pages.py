"""A resident model read into 2 MiB pages (runtime/huge_pages.py): the same tokens as llama.cpp's
mmap of the file, the weights counted as read, in huge pages where the kernel gives them, and the
automatic choice kept to files that fit beside what the process may still use."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bmoe_top.runtime.demo_model import default_model_path
from bmoe_top.runtime.huge_pages import MIN_FILE_BYTES, worth_huge_pages

CODE = r"""
import json, sys
from bmoe_top.runtime.engine import Engine
with Engine(sys.argv[1], stream=False, n_ctx=256, n_batch=64, n_threads=2, huge_pages=sys.argv[2] == "on") as e:
    res = e.generate("Once upon a time", 12)
    print(json.dumps({"tokens": res.tokens, "read": e.weights_read_mib, "huge": e.load_huge_mib, "mem": e.load_mem_mib,
                      "tensors": sum(t.n_bytes for t in e.layout.tensors.values()) / 2**20,
                      "size": e.layout.file_size / 2**20}))
"""


def _load(mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CODE, str(default_model_path()), mode], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-800:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _thp() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "absent"
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else "absent"


def test_huge_page_load_decodes_the_mapped_tokens_from_weights_it_read():
    mapped, read = _load("off"), _load("on")
    assert read["tokens"] == mapped["tokens"] and len(read["tokens"]) == 12
    assert mapped["read"] is None and mapped["huge"] is None  # llama.cpp's mmap: nothing read into memory
    # every tensor was read into the load's own buffers, and nothing the size of a second copy
    assert read["tensors"] <= read["read"] <= read["size"] + 2
    assert read["read"] <= read["mem"] <= read["read"] + 8  # the buffers, and the little the load allocated beside
    assert 0 <= read["huge"] <= read["mem"]
    if _thp() in ("always", "madvise"):
        # N MiB of buffers hold at least N - 4 MiB of whole 2 MiB pages, all of which the kernel made huge
        assert read["huge"] >= read["read"] - 4


def test_the_summary_says_what_was_read_only_when_the_weights_were_read(tmp_path):
    def run(mode: str) -> str:
        p = subprocess.run([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(default_model_path()), "-p", "Hi",
                            "-n", "4", "-c", "256", "-t", "2", "--no-moe-stream", "--quiet", "--huge-pages", mode],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-800:]
        return next(ln for ln in p.stdout.splitlines() if ln.startswith("prefill:"))

    on, off = run("on"), run("off")
    assert re.search(r" \| weights read \d+ MiB into \d+ MiB, \d+ MiB in 2 MiB pages$", on), on
    assert "weights" not in off and off.endswith(" s")


@pytest.fixture
def own_cgroup(tmp_path):
    """A directory laid out as the cgroup v2 root this process's /proc/self/cgroup path points into."""
    line = next((ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")), None)
    if line is None:
        pytest.skip("no cgroup v2 line in /proc/self/cgroup")
    d = tmp_path / line[3:].strip("/")
    d.mkdir(parents=True, exist_ok=True)
    return tmp_path, d


def test_the_automatic_choice_needs_a_file_of_four_huge_pages_that_fits_twice_in_the_room(own_cgroup):
    root, d = own_cgroup
    (d / "memory.max").write_text("max\n")
    (d / "memory.current").write_text("0\n")
    assert not worth_huge_pages(MIN_FILE_BYTES - 1, str(root))  # too small to gain a TLB entry worth the read
    assert worth_huge_pages(MIN_FILE_BYTES, str(root))
    (d / "memory.max").write_text(f"{300 << 20}\n")
    (d / "memory.current").write_text(f"{100 << 20}\n")  # 200 MiB of room under the limit
    assert worth_huge_pages(100 << 20, str(root))
    assert not worth_huge_pages((100 << 20) + 1, str(root))  # mapped pages can be paged; read ones cannot


def test_without_a_readable_cgroup_the_room_is_what_the_machine_has_available(tmp_path):
    avail_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                    if ln.startswith("MemAvailable:"))
    assert worth_huge_pages(MIN_FILE_BYTES, str(tmp_path))  # no memory.max there: MemAvailable alone
    assert not worth_huge_pages(avail_kb * 1024, str(tmp_path))
    assert os.path.isdir(tmp_path)
