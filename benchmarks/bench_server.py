"""Benchmark of ``bmoe-run serve`` against the http.server-based server it replaced, in the same run.

The baseline is the old ``runtime/server.py`` taken from git at benchmark time (the newest version
of the file that still used ``http.server``), written to a temporary folder and run as a module of
the installed package (so it uses today's engine, metrics and audit code): only the HTTP layer
differs. Both serve the same generated tiny model with one thread; rounds alternate old / new.

1. Completion throughput under 50 concurrent clients (each sends 4 completions of 16 tokens),
   and the ``/metrics`` latency seen by a scraper during that load (p50 / p99 / max).
2. Memory under the upload flood: five 100 MB uploads without a key to a server that needs one
   (peak RSS growth of the server process).
3. Memory under the idle-connection flood: 1,020 idle connections (RSS growth), and whether
   ``/health`` still answers within 100 ms (latency of 20 new-connection requests, 1 s timeout).

Run: ``.venv/bin/python benchmarks/bench_server.py [--rounds N]``. Numbers from a loaded shared
machine are inflated and noisy; the ratios (new / old, measured side by side) are the guide.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
LAUNCH_OLD = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('bmoe_top.runtime.server_baseline', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "sys.exit(mod.serve_main(sys.argv[2:]))\n"
)


def old_server_source() -> tuple[str, str]:
    """(commit, text) of the newest runtime/server.py in git that still used http.server."""
    revs = subprocess.run(["git", "-C", str(REPO), "rev-list", "HEAD", "--", "runtime/server.py"],
                          capture_output=True, text=True, check=True).stdout.split()
    for c in revs:
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{c}:runtime/server.py"], capture_output=True,
                              text=True).stdout
        if "ThreadingHTTPServer" in text:
            return c[:10], text
    raise SystemExit("no http.server-based runtime/server.py in this repository's history")


class Child:
    def __init__(self, cmd: list[str], name: str):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = None
        t0 = time.monotonic()
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
            if time.monotonic() - t0 > 120:
                break
        if self.url is None:
            self.proc.kill()
            raise SystemExit(f"{name} did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()  # type: ignore[union-attr]

    def rss_mib(self, key: str = "VmRSS") -> float:
        for ln in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if ln.startswith(key + ":"):
                return int(ln.split()[1]) / 1024
        return float("nan")

    def reset_peak(self) -> None:
        try:  # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        except OSError:
            pass

    def stop(self) -> None:
        t0 = time.monotonic()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        print(f"  {self.name} stopped in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


def start(kind: str, model: Path, old_path: Path, *args: str) -> Child:
    common = ["-m", str(model), "--port", "0", "-t", "1", "-c", "512", "--cache-mb", "0.5", *args]
    if kind == "old":
        return Child([PY, "-c", LAUNCH_OLD, str(old_path), *common], "old")
    return Child([PY, "-m", "bmoe_top.runtime.cli", "serve", *common,
                  "--max-connections", "4096", "--timeout-keep-alive", "600", "--timeout-header", "600"], "new")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def load_round(url: str, clients: int = 50, per_client: int = 4, n_tok: int = 16) -> dict[str, float]:
    lat: list[float] = []
    done = asyncio.Event()
    tokens = errors = 0
    limits = httpx.Limits(max_connections=clients + 5, max_keepalive_connections=clients + 5)
    async with httpx.AsyncClient(trust_env=False, timeout=300, limits=limits) as c:
        async def client(i: int) -> None:
            nonlocal tokens, errors
            for k in range(per_client):
                try:
                    r = await c.post(url + "/completion", json={"prompt": f"client {i} request {k}",
                                                                "n_predict": n_tok})
                    r.raise_for_status()
                    tokens += r.json()["tokens_predicted"]
                except httpx.HTTPError:
                    errors += 1

        async def scraper() -> None:
            async with httpx.AsyncClient(trust_env=False, timeout=30) as s:
                while not done.is_set():
                    t0 = time.perf_counter()
                    try:
                        (await s.get(url + "/metrics")).raise_for_status()
                        lat.append(time.perf_counter() - t0)
                    except httpx.HTTPError:
                        lat.append(float("inf"))
                    await asyncio.sleep(0.05)

        sc = asyncio.create_task(scraper())
        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
        done.set()
        await sc
    return {"req_s": (clients * per_client - errors) / wall, "failed": float(errors), "tok_s": tokens / wall,
            "metrics_p50_ms": 1000 * pct(lat, 0.5),
            "metrics_p99_ms": 1000 * pct(lat, 0.99), "metrics_max_ms": 1000 * max(lat)}


def upload_flood(ch: Child, n: int = 5, size: int = 100 << 20) -> dict[str, float]:
    host, port = ch.url.split("//")[1].rsplit(":", 1)  # type: ignore[union-attr]
    base = ch.rss_mib()
    ch.reset_peak()
    chunk = b"x" * (1 << 20)

    def one() -> None:
        try:
            with socket.create_connection((host, int(port)), timeout=60) as s:
                s.sendall(f"POST /completion HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {size}\r\n\r\n".encode())
                for _ in range(size // len(chunk)):
                    s.sendall(chunk)
                s.recv(4096)
        except OSError:
            pass  # refused on its head and closed: the rest of the body is never read

    t0 = time.perf_counter()
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return {"upload_peak_mib": ch.rss_mib("VmHWM") - base, "upload_s": wall}


def idle_flood(ch: Child, n: int = 1020) -> dict[str, float]:
    host, port = ch.url.split("//")[1].rsplit(":", 1)  # type: ignore[union-attr]
    base = ch.rss_mib()
    socks: list[socket.socket] = []
    try:
        # all at once, non-blocking: a server with a short accept backlog makes connect() retry its SYN
        t0 = time.perf_counter()
        pending = set()
        for _ in range(n):
            sk = socket.socket()
            sk.setblocking(False)
            sk.connect_ex((host, int(port)))
            socks.append(sk)
            pending.add(sk)
        poll = select.poll()
        by_fd = {sk.fileno(): sk for sk in socks}
        for fd in by_fd:
            poll.register(fd, select.POLLOUT)
        while pending and time.perf_counter() - t0 < 30:
            for fd, _ev in poll.poll(1000):
                sk = by_fd[fd]
                poll.unregister(fd)
                if sk.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    pending.discard(sk)
        connect_s = time.perf_counter() - t0
        time.sleep(1.0)  # let the server accept them (a benchmark, not a test)
        lat, ok = [], 0
        with httpx.Client(trust_env=False, timeout=1.0) as c:
            for _ in range(20):
                t0 = time.perf_counter()
                try:  # a new connection each time (accept is part of the answer)
                    ok += c.get(ch.url + "/health", headers={"Connection": "close"}).status_code == 200  # type: ignore[operator]
                except httpx.HTTPError:
                    pass
                lat.append(time.perf_counter() - t0)
        rss = ch.rss_mib() - base
    finally:
        for s in socks:
            s.close()
    return {"idle_connected": float(n - len(pending)), "idle_connect_s": connect_s, "idle_rss_mib": rss,
            "health_ok_of_20": float(ok), "health_p50_ms": 1000 * pct(lat, 0.5),
            "health_max_ms": 1000 * max(lat)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    from bmoe_top.runtime.models import make_model

    commit, text = old_server_source()
    with tempfile.TemporaryDirectory() as td:
        old_path = Path(td) / "server_baseline.py"
        old_path.write_text(text)
        model = make_model(Path(td) / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)
        res: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
        for r in range(args.rounds):
            for kind in (("old", "new") if r % 2 == 0 else ("new", "old")):
                ch = start(kind, model, old_path)
                try:
                    t0 = time.monotonic()
                    for k, v in asyncio.run(load_round(ch.url)).items():  # type: ignore[arg-type]
                        res[kind].setdefault(k, []).append(v)
                    t1 = time.monotonic()
                    for k, v in idle_flood(ch).items():
                        res[kind].setdefault(k, []).append(v)
                    print(f"  {kind}: load {t1 - t0:.1f} s, idle flood {time.monotonic() - t1:.1f} s", file=sys.stderr,
                          flush=True)
                finally:
                    ch.stop()
                ch = start(kind, model, old_path, "--api-key", "bench-key")
                try:
                    for k, v in upload_flood(ch).items():
                        res[kind].setdefault(k, []).append(v)
                finally:
                    ch.stop()
                print(f"round {r + 1}/{args.rounds} {kind} done", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    print(f"bmoe-run serve: uvicorn+starlette (new) vs http.server (old, {commit}), median of {args.rounds} "
          f"interleaved rounds; load average {load:.1f} on {os.cpu_count()} cores")
    rows = [("completions/s, 50 clients", "req_s"), ("failed completions of 200", "failed"),
            ("tokens/s, 50 clients", "tok_s"),
            ("/metrics p50 ms under load", "metrics_p50_ms"), ("/metrics p99 ms under load", "metrics_p99_ms"),
            ("/metrics max ms under load", "metrics_max_ms"),
            ("peak RSS growth MiB, 5x100 MB uploads", "upload_peak_mib"), ("upload flood wall s", "upload_s"),
            ("idle conns connected (30 s cap)", "idle_connected"), ("s to connect them", "idle_connect_s"),
            ("RSS growth MiB, 1,020 idle conns", "idle_rss_mib"), ("/health ok of 20, idle flood", "health_ok_of_20"),
            ("/health p50 ms, idle flood", "health_p50_ms"), ("/health max ms, idle flood", "health_max_ms")]
    print(f"{'':40s} {'old':>10s} {'new':>10s} {'new/old':>8s}")
    for label, key in rows:
        o, n = statistics.median(res["old"][key]), statistics.median(res["new"][key])
        ratio = f"{n / o:8.2f}" if o else "       -"
        print(f"{label:40s} {o:10.2f} {n:10.2f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
