"""The memory watcher (tui/sources/memory.py) attached to real processes and files: a process that
maps a model and touches chosen slices shows exactly those on the map, with its faults and reads;
O_DIRECT is said; a process that exits, a file truncated or replaced while watched, a PID that is
not there, a damaged header and /proc files the kernel refuses are each one line, with the last
good picture kept and no traceback. ``--record`` replays to the same map."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson
import pytest
from helpers.mapper import Mapper
from helpers.pagecache import evict, fincore_pages, private_model
from helpers.procs import stop_process
from helpers.waits import wait_until

from bmoe_top.parsers.recording import load_recording
from bmoe_top.tui.feed.memory import bind_memory, replay_memory
from bmoe_top.tui.present.memory import memory_document
from bmoe_top.tui.sources.events import WatchState
from bmoe_top.tui.sources.memory import MemoryWatcher
from bmoe_top.tui.sources.residency import open_model

CLI = [sys.executable, "-m", "bmoe_top.tui.cli"]


def slice_ranges(path: Path) -> tuple[dict[tuple[int, int], list[tuple[int, int]]], np.ndarray]:
    """(layer, expert) -> its slices' byte ranges, and the pages each expert spans, from the sampler's plan."""
    _lay, sampler = open_model(str(path))
    try:
        plan = sampler.plan
        out: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for o, ln, s in zip(plan.offsets[0], plan.lengths[0], plan.slots[0]):
            if s < plan.dense_slot:
                out.setdefault(divmod(int(s), plan.n_expert), []).append((int(o), int(ln)))
        return out, plan.slice_pages
    finally:
        sampler.close()


def pages(ranges: list[tuple[int, int]]) -> set[int]:
    return {p for off, n in ranges for p in range(off // 4096, (off + n - 1) // 4096 + 1)}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_attach_by_pid_shows_exactly_the_slices_the_process_touched(tmp_path):
    path = private_model(tmp_path, "tiny")
    ranges, spans = slice_ranges(path)
    chosen = [(0, 2), (1, 5)]
    with Mapper(path) as child:
        w = MemoryWatcher(pid=child.pid)
        m = bind_memory(w)
        try:
            first = w.sample_once()
            assert first is not None and w.files is not None and w.files.paths == (str(path),)
            evict(path)
            before = w.sample_once()
            child.touch([r for k in chosen for r in ranges[k]])
            after = w.sample_once()
        finally:
            w.close()
    assert before is not None and after is not None and after.slices is not None
    assert before.slices is not None and int(before.slices.sum()) == 0
    hot = pages([r for k in chosen for r in ranges[k]])
    for (li, e), rs in ranges.items():  # a neighbour counts the pages it shares with a chosen slice
        assert after.slices[li, e] == (spans[li, e] if (li, e) in chosen else len(pages(rs) & hot)), (li, e)
    assert after.proc is not None and before.proc is not None
    assert after.proc.majflt - before.proc.majflt >= 1  # the pages came from disk through faults
    assert after.proc.read_bytes - before.proc.read_bytes >= int(sum(spans[k] for k in chosen)) * 4096 // 2
    doc = memory_document(m)
    assert doc["status"] == "ok" and doc["files"][0]["path"] == str(path)
    assert doc["churn"]["slices_out"] == 0
    per = doc["resident"]["per_layer"]
    assert [(li, e) for li, row in enumerate(per) for e, v in enumerate(row) if v == 1.0] == chosen
    assert doc["churn"]["slices_in"] == int((after.slices > 0).sum())
    assert doc["process"]["pid"] == child.pid and doc["process"]["majflt_per_s"] > 0


def test_o_direct_reads_are_said_and_an_exit_keeps_the_last_map(tmp_path):
    path = private_model(tmp_path, "tiny")
    ranges, _spans = slice_ranges(path)
    child = Mapper(path)
    w = MemoryWatcher(pid=child.pid)
    m = bind_memory(w)
    try:
        w.sample_once()
        evict(path)
        child.touch(ranges[(1, 3)])
        child.direct()
        w._discovered_at = -1e9  # look at the process's files now rather than in 5 s
        w.sample_once()
        assert w.files is not None and w.files.direct_io
        assert "O_DIRECT" in m.notes["direct"][1]
        kept = memory_document(m)["resident"]["per_layer"]
        assert kept[1][3] == 1.0
        child.stop()
        s = w.sample_once()
        assert w.state == WatchState.EXITED and f"process {child.pid}" in w.detail
        assert s is not None and s.proc is None
        doc = memory_document(m)
        assert doc["status"] == "exited" and doc["resident"]["per_layer"] == kept
        assert doc["process"]["pid"] == child.pid  # the last figures read stay
    finally:
        child.stop()
        w.close()


def test_a_file_truncated_then_replaced_while_watched(tmp_path):
    path = private_model(tmp_path, "tiny")
    ranges, _spans = slice_ranges(path)
    w = MemoryWatcher(gguf=str(path))
    m = bind_memory(w)
    try:
        w.sample_once()
        evict(path)
        with open(path, "rb") as f:
            f.seek(ranges[(0, 0)][0][0])
            f.read(4096)
        w.sample_once()
        good = memory_document(m)["resident"]
        assert good["per_layer"][0][0] and good["file_share"] > 0
        os.truncate(path, path.stat().st_size // 2)
        w.sample_once()
        assert w.state == WatchState.FILE_ERROR
        assert "truncated while watched" in w.detail and "\n" not in w.detail
        assert memory_document(m)["resident"] == good  # the last good map is kept
        fresh = tmp_path / "fresh.gguf"
        shutil.copyfile(private_model(tmp_path, "tiny", name="src.gguf"), fresh)
        os.replace(fresh, path)
        evict(path)
        w.sample_once()
        assert w.state == WatchState.OK
        doc = memory_document(m)
        assert doc["resident"]["file_share"] == fincore_pages(path) / w.files.total_pages
    finally:
        w.close()


def test_the_cli_says_one_line_for_a_missing_pid_and_a_damaged_header(tmp_path):
    r = cli("attach", "--pid", "999999999", "--once", "--json")
    assert r.returncode == 1 and one_line_error(r) == "bmoe-top: process 999999999 is not running"
    assert orjson.loads(r.stdout)["status"] == "error"
    good = private_model(tmp_path, "tiny")
    data = bytearray(good.read_bytes()[:4096])
    data[8:16] = b"\xff" * 8  # the tensor count
    bad = tmp_path / "bad\x1b[31m.gguf"
    bad.write_bytes(bytes(data))
    r = cli("attach", "--gguf", str(bad), "--once")
    line = one_line_error(r)
    assert r.returncode == 1 and "bad" in line and "\x1b" not in line


def test_once_json_and_a_recording_that_replays(tmp_path):
    path = private_model(tmp_path, "tiny")
    ranges, _spans = slice_ranges(path)
    evict(path)
    with open(path, "rb") as f:
        for off, n in ranges[(1, 1)]:
            f.seek(off)
            f.read(n)
    rec = tmp_path / "mem.jsonl"
    r = cli("attach", "--gguf", str(path), "--once", "--json", "--interval", "0.05", "--record", str(rec))
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["files"] == [{"path": str(path), "bytes": path.stat().st_size}]
    assert doc["model"]["n_layer"] == len(doc["resident"]["per_layer"]) == 2
    assert all(len(row) == doc["model"]["n_expert"] for row in doc["resident"]["per_layer"])
    total = sum(-(-f["bytes"] // doc["model"]["page_size"]) for f in doc["files"])
    assert doc["resident"]["file_share"] == round(fincore_pages(path) / total, 4)
    assert doc["resident"]["per_layer"][1][1] == 1.0
    entries = [(e.t, e.line) for e in load_recording(rec).entries if e.src == "memory"]
    assert len(entries) == 3  # the files, two samples
    replayed = memory_document(replay_memory(entries))
    assert replayed["resident"] == doc["resident"] and replayed["files"] == doc["files"]
    r = cli("replay", "--json", str(rec))
    assert r.returncode == 0, r.stderr
    again = orjson.loads(r.stdout)
    assert again["resident"] == doc["resident"] and again["status"] == "replayed" and again["samples"] == 2
    # a damaged line: one line on stderr naming it, exit 1, the readings around it still count
    lines = rec.read_text().splitlines()
    bad = orjson.loads(lines[-1])
    bad["line"] = '{"kind": "sample", "t": 5, "slices": [[1, 2]]}'
    rec.write_text("\n".join([*lines, orjson.dumps(bad).decode()]) + "\n")
    r = cli("replay", "--json", str(rec))
    assert r.returncode == 1 and "entry 4: slices must be 2 lists of 8 counts" in one_line_error(r)
    assert orjson.loads(r.stdout)["resident"] == doc["resident"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to watch as another user (nobody)")
def test_proc_files_the_kernel_refuses_are_one_line_each(tmp_path):
    path = private_model(tmp_path, "tiny")
    d = Path(tempfile.mkdtemp(prefix="bmoe-perm-"))
    os.chmod(d, 0o755)
    with Mapper(path) as child:
        # imports as root (the interpreter's folder may be closed to nobody), then watches as nobody
        code = ("import os, sys\nfrom bmoe_top.tui import cli, headless\nfrom bmoe_top.tui.present import numbers\n"
                "from bmoe_top.tui.sources import residency\nresidency._lib()\n"
                # what attach --pid --once imports when it runs (a clone in a folder closed to nobody)
                "import bmoe_top.tui.feed.memory, bmoe_top.tui.present.memory, bmoe_top.tui.sources.memory\n"
                "import bmoe_top.tui.sources.metrics_poll\n"
                f"args = cli.build_parser().parse_args(['attach', '--pid', '{child.pid}', '--once', '--json'])\n"
                "os.setgid(65534)\nos.setuid(65534)\nsys.exit(args.func(args))\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(d), timeout=300)
    d.rmdir()
    assert "Traceback" not in r.stderr, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["status"] == "no_model" and "cannot read" in doc["detail"] and "/maps" in doc["detail"]
    assert doc["process"]["pid"] == child.pid and doc["process"]["read_bytes"] is None  # io refused: absent
    assert any("/io" in n for n in doc["notes"])


def test_a_watch_thread_follows_a_process_to_its_end(tmp_path):
    path = private_model(tmp_path, "tiny")
    child = Mapper(path)
    w = MemoryWatcher(pid=child.pid, interval=0.05)
    m = bind_memory(w)
    w.start()
    try:
        wait_until(lambda: m.residency is not None, what="a first map")
        child.stop()
        wait_until(lambda: m.state == "exited", what="the exit")
        assert m.residency is not None  # kept
    finally:
        child.stop()
        w.stop()
        w.join(30)
    assert not w.is_alive() or m.state == "exited"


def test_a_costly_map_is_sampled_less_often_and_a_note_says_so(tmp_path):
    path = private_model(tmp_path, "tiny")
    w = MemoryWatcher(gguf=str(path), interval=0.05, cpu_budget=1e-9)
    m = bind_memory(w)
    try:
        first = w.sample_once(paced=True)
        assert first is not None and first.slices is not None
        # with a budget of a billionth of a core, any sample costs too much: the next one waits
        second = w.sample_once(paced=True)
        assert second is not None and second.slices is None and second.system is not None
        assert "residency sampled every" in m.notes["pace"][1] and "of a core" in m.notes["pace"][1]
        assert memory_document(m)["resident"]["per_layer"] is not None  # the map shown is the last one
    finally:
        w.close()


def test_attach_to_bmoe_run_finds_the_model_it_reads_with_o_direct(tmp_path):
    path = private_model(tmp_path, "tiny")
    proc = subprocess.Popen([sys.executable, "-m", "bmoe_top.runtime.cli", "-m", str(path), "--session", "-c", "256"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    w = MemoryWatcher(pid=proc.pid)
    m = bind_memory(w)
    try:
        assert proc.stdout is not None
        wait_until(lambda: "BMOE_READY" in proc.stdout.readline(), what="bmoe-run ready")
        w.sample_once()
        assert w.files is not None and w.files.paths == (str(path),), m.detail
        assert w.files.direct_io and "O_DIRECT" in m.notes["direct"][1]
        assert memory_document(m)["model"]["direct_io"] is True
    finally:
        w.close()
        stop_process(proc)
