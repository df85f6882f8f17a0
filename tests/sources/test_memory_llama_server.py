"""``attach --pid`` against a real, stock llama-server (built from the vendored llama.cpp; skipped
only without a compiler) serving a generated bench model with ``--metrics``: the watcher finds the
model the server maps, its layout is the file's, the map covers every layer and expert, the RSS
splits into anonymous and file-backed pages (the model's mapped pages are file-backed: VmRSS is not
what the server allocated), and with ``--metrics`` the reads and faults are divided by the tokens
the server generated between two samples."""

from __future__ import annotations

from pathlib import Path

import httpx
from helpers.llama_server import LlamaServer, llama_server_binary
from helpers.pagecache import private_model

from bmoe_top.parsers.gguf_layout import read_layout
from bmoe_top.parsers.procfs import parse_kb
from bmoe_top.tui.feed.memory import bind_memory
from bmoe_top.tui.present.memory import memory_document
from bmoe_top.tui.sources.memory import MemoryWatcher
from bmoe_top.tui.sources.metrics_poll import MetricsPoller


def test_attach_by_pid_to_llama_server_on_the_bench_model(tmp_path):
    exe = llama_server_binary()
    path = private_model(tmp_path, "bench")
    lay = read_layout(path)
    with LlamaServer(exe, path, "--metrics") as ls:
        poller = MetricsPoller(ls.url + "/metrics", timeout=30)
        w = MemoryWatcher(pid=ls.proc.pid, poller=poller)
        m = bind_memory(w)
        try:
            first = w.sample_once()
            with httpx.Client(trust_env=False, timeout=300) as c:
                r = c.post(ls.url + "/completion", json={"prompt": "Hello", "n_predict": 8, "ignore_eos": True})
                assert r.status_code == 200, r.text
            second = w.sample_once()
            pid = ls.proc.pid
            rollup = parse_kb(Path(f"/proc/{pid}/smaps_rollup").read_text())
            status = parse_kb(Path(f"/proc/{pid}/status").read_text())
        finally:
            w.close()
            poller.client.close()
    assert first is not None and second is not None
    doc = memory_document(m)
    assert doc["status"] == "ok", doc["detail"]
    assert doc["files"] == [{"path": str(path), "bytes": path.stat().st_size}]
    assert doc["model"]["n_layer"] == lay.n_layer and doc["model"]["n_expert"] == lay.n_expert
    per = doc["resident"]["per_layer"]
    assert len(per) == lay.n_layer and all(len(row) == lay.n_expert for row in per)
    assert doc["resident"]["file_share"] > 0.5  # the server loaded it through its mapping
    p = doc["process"]
    assert p["comm"].startswith("llama-server") and p["rss_file"] > 0 and p["rss_anon"] > 0
    assert p["rss"] >= p["rss_anon"] + p["rss_file"] - 4096 * 1024
    # the kernel's counters (status, what the watcher reads) and the page-table walk (smaps_rollup)
    # count the same pages; the counters are kept per thread and may lag by 64 pages a thread
    slack = 64 * 4096 * (status["Threads"] + 1)
    assert abs(status["RssAnon"] - rollup["Anonymous"]) <= slack
    assert abs(status["VmRSS"] - rollup["Rss"]) <= slack
    assert second.tokens is not None and first.tokens is not None and second.tokens - first.tokens == 8
    assert p["faults_per_token"] is not None and p["read_bytes_per_token"] is not None
    assert p["faults_per_token"] == (second.proc.majflt - first.proc.majflt) / 8
