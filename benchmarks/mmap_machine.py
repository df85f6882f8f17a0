"""What the benchmarks that run stock llama.cpp with mmap share: child processes measured through a
launcher (their disk bytes from ``/proc/PID/io``, their peak RSS), the stock ``llama-server`` this
project builds (``tools/llama_server.py``) run in a memory cgroup (v1 or v2), the page cache
(drop, warm), the device's readahead and a loop-device copy of a model at another readahead.
Used by ``runtime_bench.py`` and ``bench_mmap_line.py``; runs nothing by itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
PROMPT = "Benchmarks measure what users feel: tokens per second and bytes per second."


# -- child processes ----------------------------------------------------------------------------------
#: runs one command: joins a cgroup (when given) in the forked child before exec; reports the child's
#: pid at once, then its /proc/PID/io (read while it is a zombie) and its rusage, as JSON lines on the fd
#: its first argument names
LAUNCHER = r"""
import json, os, sys
out, procs, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    if procs:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    os.execvp(cmd[0], cmd)
os.write(out, (json.dumps({"pid": pid}) + "\n").encode())
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
io = {}
with open(f"/proc/{pid}/io") as f:
    for line in f:
        k, v = line.split(":")
        io[k] = int(v)
_, status, ru = os.wait4(pid, 0)
os.write(out, (json.dumps({"io": io, "status": status, "maxrss_kib": ru.ru_maxrss}) + "\n").encode())
"""


def read_io(pid: int) -> dict[str, int]:
    """``/proc/PID/io`` as numbers (empty when the process is gone)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


@dataclass
class Run:
    """One run of one runtime on one row."""

    tok_s: float = float("nan")
    dec_tok_s: float = float("nan")  # bmoe-run: llama_decode alone (bmoe-cli's definition)
    peak_rss_mib: float = float("nan")
    disk_mib_tok: float = float("nan")  # bytes read from the disk per generated token after the first
    disk_mib_total: float = float("nan")
    load_s: float = float("nan")
    anon_mib: float = float("nan")  # the server's RssAnon at the end: its own memory beside the model's pages
    charged_mib: float = float("nan")  # what its cgroup was charged at the end (anon, kernel memory, file pages)
    model_mib: float = float("nan")  # the model's pages resident at the end (the page cache's share of the file)
    stat: dict[str, int] | None = None  # its cgroup's memory.stat at the end
    n_tokens: int = 0
    text: str = ""
    error: str = ""


def run_cli(cmd: list[str], procs: str = "", timeout: float = 1800) -> Run:
    """Run a bmoe-run/bmoe-cli one-shot command (the prompt, then the answer inline, then a blank line
    and the summary) through :data:`LAUNCHER`; the disk bytes are counted from the first generated
    piece (the first byte of output past the prompt) to the end."""
    r_fd, w_fd = os.pipe()
    errf = tempfile.TemporaryFile()  # a file, not a pipe: a child's log must never fill a pipe nobody reads
    p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(w_fd), procs, *cmd], stdout=subprocess.PIPE,
                         stderr=errf, pass_fds=(w_fd,), bufsize=0)
    os.close(w_fd)
    rep = os.fdopen(r_fd, "rb")
    pid = json.loads(rep.readline())["pid"]
    out = bytearray()
    io0: dict[str, int] = {}
    t_end = time.monotonic() + timeout
    assert p.stdout is not None
    while True:
        chunk = p.stdout.read(1 << 14) if io0 else p.stdout.read(1)
        if not chunk:
            break
        out += chunk
        if not io0 and len(out) > len(PROMPT.encode()):
            io0 = read_io(pid)
        if time.monotonic() > t_end:
            p.kill()
            break
    end = json.loads(rep.readline() or b"{}")
    p.wait()
    rep.close()
    errf.seek(0)
    err = errf.read().decode(errors="replace")
    errf.close()
    run = Run()
    text = out.decode(errors="replace")
    if end.get("status", 1) != 0 or "generation:" not in text:
        run.error = (err.strip().splitlines() or [f"exit status {end.get('status')}"])[-1][:200]
        return run
    run.peak_rss_mib = end["maxrss_kib"] / 1024
    body, _, summary = text.rpartition("\n\ngeneration:")
    run.text = body[len(PROMPT):]
    summary = "generation:" + summary
    m = re.search(r"generation:\s+(\d+) tokens?, [\d.]+ s/token \(([\d.]+) tok/s\)", summary)
    if m:
        run.n_tokens, run.tok_s = int(m.group(1)), float(m.group(2))
    m = re.search(r"([\d.]+) tok/s in llama_decode alone", summary)
    run.dec_tok_s = float(m.group(1)) if m else run.tok_s
    m = re.search(r"model load ([\d.]+) s", summary)
    if m:
        run.load_s = float(m.group(1))
    io1 = end.get("io", {})
    if io1:
        run.disk_mib_total = io1["read_bytes"] / MIB
        if io0 and run.n_tokens > 1:
            run.disk_mib_tok = (io1["read_bytes"] - io0["read_bytes"]) / MIB / (run.n_tokens - 1)
    return run


#: touches random bytes of a mapped file for a time, then prints the seconds and the touches
FAULTS = r"""
import mmap, os, random, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # as llama.cpp's llama_mmap: windows of 2 x readahead
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
rng, n, t0 = random.Random(1), 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    m[rng.randrange(size)]
    n += 1
print(time.perf_counter() - t0, n)
"""


def fault_rate(path: Path, procs: str, seconds: float = 3.0) -> float:
    """MB/s (10^6 bytes) the page cache reads ``path`` at when a process in the cgroup ``procs``
    names faults on random bytes of its mapping, advised sequential as llama.cpp advises the model:
    the read-around windows of twice the device's readahead, each read after the cgroup reclaimed
    room for it (what plain mmap's misses read at,
    which O_DIRECT's bandwidth does not say). The caller drops ``path``'s pages first."""
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(w_fd), procs, sys.executable, "-S", "-c", FAULTS,
                          str(path), str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         pass_fds=(w_fd,))
    os.close(w_fd)
    with os.fdopen(r_fd, "rb") as rep:
        rep.readline()
        out, _ = p.communicate(timeout=seconds * 10 + 60)
        end = json.loads(rep.readline() or b"{}")
    try:
        elapsed = float(out.split()[0])
        return end["io"]["read_bytes"] / 1e6 / elapsed
    except (IndexError, ValueError, KeyError):
        return float("nan")


#: maps a model as llama.cpp does (advised sequential, populated, WILLNEED), joins a cgroup, then touches
#: the pages of a list of byte ranges in order; prints the bytes read from the range marked as the first
#: measured one to the end; before each range listed in ``flush`` it reads the cgroup's memory.stat
PLAYER = r"""
import json, mmap, os, sys
import numpy as np
path, touches, procs = sys.argv[1], sys.argv[2], sys.argv[3]
t = np.load(touches)
ranges, start, flush = t["ranges"], int(t["start"]), set(t["flush"].tolist())
stat = os.path.join(os.path.dirname(procs), "memory.stat")
with open(procs, "w") as f:  # after the imports: this interpreter's own memory stays charged where it was
    f.write(str(os.getpid()))
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_WILLNEED)
v = np.frombuffer(m, dtype=np.uint8)
def io():
    with open("/proc/self/io") as f:
        return {k: int(x) for k, x in (ln.split(":") for ln in f)}["read_bytes"]
acc, io0 = 0, 0
for i, (off, n) in enumerate(ranges.tolist()):
    if i in flush:
        with open(stat) as f:
            f.read()
    if i == start:
        io0 = io()
    acc += int(v[off:off + n:4096].sum())
print(json.dumps({"read": io() - io0, "acc": acc % 7}))
"""


def play_trace(path: Path, ranges: list[tuple[int, int]], start: int, procs: str, workdir: Path,
               flush_at: Sequence[int] = ()) -> float:
    """Bytes read while a process maps ``path`` as llama.cpp does and touches the pages of ``ranges``
    (file offset, bytes) in order, from ``ranges[start]`` to the end, in the memory cgroup ``procs``
    names (it joins after its imports: its interpreter's memory is not charged there). The
    kernel's page cache on exactly a trace's page touches, without llama.cpp's compute or its own
    routing. Before each range whose index is in ``flush_at`` the player reads the cgroup's
    ``memory.stat``, which flushes the cgroup's statistics: reclaim decides from them whether the
    inactive list is low and whether a refault is recent (``inactive_is_low``,
    ``workingset_test_recent``), and otherwise they are as old as the last periodic flush (2 s),
    longer than a played trace runs; with them fresh at every token the kernel takes one state
    where without it takes one of two by chance (docs/analysis.md "Plain mmap against stock
    llama.cpp"). NaN when it fails."""
    import numpy as np

    f = workdir / f"touches-{os.getpid()}.npz"
    np.savez(f, ranges=np.array(ranges, dtype=np.int64).reshape(-1, 2), start=start,
             flush=np.array(list(flush_at), dtype=np.int64))
    try:
        p = subprocess.run([sys.executable, "-c", PLAYER, str(path), str(f), procs], capture_output=True, text=True,
                           timeout=1800)
        return float(json.loads(p.stdout.strip().splitlines()[-1])["read"]) if p.returncode == 0 else float("nan")
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError):
        return float("nan")
    finally:
        f.unlink(missing_ok=True)


# -- the mmap baseline: a stock llama-server ----------------------------------------------------------
def llama_server_binary() -> Path | None:
    """The llama-server ``make llama-server`` builds (None when it is not built)."""
    spec_path = Path(__file__).resolve().parent.parent / "tools" / "llama_server.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("bmoe_llama_server_tool", spec_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    exe = mod.binary_path()
    return exe if exe.is_file() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_mmap(exe: Path, model: Path, tokens: int, threads: int, n_ctx: int, procs: str = "",
             timeout: float = 900) -> Run:
    """One stock llama-server (mmap, no repacking, one slot) in the cgroup ``procs`` names, one
    greedy completion streamed; tok/s from the server's decode timing (or from the tokens received
    when it runs out of ``timeout``), disk bytes from the first token to the end, peak RSS from its
    VmHWM, its own memory from its RssAnon."""
    import httpx

    port = _free_port()
    cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(n_ctx),
           "-t", str(threads), "-np", "1", "--load-mode", "mmap", "--no-repack", "--no-webui"]
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(w_fd), procs, *cmd], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, pass_fds=(w_fd,))
    os.close(w_fd)
    rep = os.fdopen(r_fd, "rb")
    pid = json.loads(rep.readline())["pid"]
    run = Run()
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=5)) as c:
            while True:
                if p.poll() is not None:
                    run.error = "llama-server exited while loading"
                    return run
                try:
                    if c.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() - t0 > timeout:
                    run.error = "llama-server did not become ready"
                    return run
                time.sleep(0.05)
            run.load_s = time.monotonic() - t0
            body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 0, "top_k": 1, "cache_prompt": False,
                    "stream": True}
            io0: dict[str, int] = {}
            stamps: list[float] = []
            parts: list[str] = []
            timings: dict = {}
            t_end = time.monotonic() + timeout
            with c.stream("POST", url + "/completion", json=body) as resp:
                for line in resp.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    d = json.loads(line[6:])
                    if d.get("content"):
                        if not io0:
                            io0 = read_io(pid)
                        stamps.append(time.monotonic())
                        parts.append(d["content"])
                    if d.get("stop"):
                        timings = d.get("timings", {})
                        break
                    if time.monotonic() > t_end:
                        break
            io1 = read_io(pid)
            run.text = "".join(parts)
            run.n_tokens = int(timings.get("predicted_n", len(stamps)))
            if timings.get("predicted_per_second"):
                run.tok_s = run.dec_tok_s = float(timings["predicted_per_second"])
            elif len(stamps) > 1:
                run.tok_s = run.dec_tok_s = (len(stamps) - 1) / (stamps[-1] - stamps[0])
            if io0 and io1 and run.n_tokens > 1:
                run.disk_mib_tok = (io1["read_bytes"] - io0["read_bytes"]) / MIB / (run.n_tokens - 1)
            run.disk_mib_total = io1.get("read_bytes", 0) / MIB
            with open(f"/proc/{pid}/status") as f:
                status = {k: v.split() for k, _, v in (ln.partition(":") for ln in f)}
            run.peak_rss_mib = int(status["VmHWM"][0]) / 1024 if "VmHWM" in status else float("nan")
            run.anon_mib = int(status["RssAnon"][0]) / 1024 if "RssAnon" in status else float("nan")
            if procs:
                cg = Path(procs).parent
                run.charged_mib = cgroup_usage(cg) / MIB
                run.stat = cgroup_stat(cg)
            run.model_mib = resident_share(model) * model.stat().st_size / MIB
    except (httpx.HTTPError, OSError, ValueError) as e:
        run.error = f"{type(e).__name__}: {e}"[:200]
    finally:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)
        p.wait(timeout=60)
        rep.close()
    return run


# -- the machine: cgroups, the page cache, readahead, a loop device -----------------------------------
class MemoryCgroup:
    """Memory cgroups under this process's own (v1, or v2 where the memory controller can be
    delegated): :meth:`make` one limited to ``limit`` bytes, whose ``cgroup.procs`` the launcher
    writes the child's pid into; :meth:`drop` removes it."""

    def __init__(self) -> None:
        self.base: Path | None = None
        self.v2 = False
        self.why = ""
        self._n = 0
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError as e:
            self.why = str(e)
            return
        for line in lines:
            _, ctrls, path = line.split(":", 2)
            if "memory" in ctrls.split(","):
                for root in (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")):
                    d = root / path.lstrip("/")
                    if (d / "memory.limit_in_bytes").exists():
                        self.base = d
                        return
        for line in lines:
            if line.startswith("0::"):
                for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                    d = root / line[3:].lstrip("/")
                    if (d / "cgroup.subtree_control").exists() and "memory" in (d / "cgroup.controllers").read_text():
                        try:
                            (d / "cgroup.subtree_control").write_text("+memory")
                        except OSError as e:
                            self.why = f"cannot enable the memory controller under {d}: {e}"
                            continue
                        self.base, self.v2 = d, True
                        return
        self.why = self.why or "no memory cgroup this process can create groups in"

    def make(self, limit: int | None) -> Path:
        assert self.base is not None
        self._n += 1
        d = self.base / f"bmoe-bench-{os.getpid()}-{self._n}"
        d.mkdir()
        if limit is not None:
            (d / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(str(int(limit)))
        return d

    def page_cache_mib(self, d: Path) -> float:
        """The file pages charged to ``d`` (MiB; NaN when it cannot be read): what a server's mapped
        model held of the page cache when it ended (they stay charged after it exits)."""
        try:
            stat = dict(ln.split() for ln in (d / "memory.stat").read_text().splitlines())
            return int(stat["file" if self.v2 else "cache"]) / MIB
        except (OSError, ValueError, KeyError):
            return float("nan")

    def drop(self, d: Path) -> None:
        if not self.v2:
            with contextlib.suppress(OSError):
                (d / "memory.force_empty").write_text("0")
        for _ in range(50):
            try:
                d.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def cgroup_usage(d: Path) -> float:
    """Bytes charged to the memory cgroup ``d`` (v2 ``memory.current``, v1 ``memory.usage_in_bytes``:
    anon and file pages and kernel memory; NaN when neither can be read)."""
    for name in ("memory.current", "memory.usage_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            return float((d / name).read_text())
    return float("nan")


def cgroup_stat(d: Path) -> dict[str, int]:
    """The memory cgroup ``d``'s ``memory.stat`` (empty when it cannot be read)."""
    try:
        return {k: int(v) for k, v in (ln.split() for ln in (d / "memory.stat").read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def drop_cache(path: Path) -> float:
    """Drop ``path``'s pages from the page cache (``posix_fadvise(DONTNEED)``); returns the share of
    its pages still cached (``mincore``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_share(path)


def resident_share(path: Path) -> float:
    """The share of ``path``'s pages in the page cache (``mincore`` of a fresh mapping; NaN when
    it cannot be asked)."""
    import numpy as np

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        view = np.frombuffer(m, dtype=np.uint8)
        n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = np.zeros(n, dtype=np.uint8)
        libc = ctypes.CDLL(None)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        rc = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), ctypes.c_void_p(vec.ctypes.data))
        del view
        return float((vec & 1).mean()) if rc == 0 else float("nan")
    finally:
        m.close()


def warm_cache(path: Path) -> None:
    """Read ``path`` through the page cache (the resident rows start warm, every runtime alike)."""
    with open(path, "rb") as f:
        while f.read(64 * MIB):
            pass


def readahead_kb(path: Path) -> int | None:
    """``read_ahead_kb`` of the block device that holds ``path`` (None when it cannot be found)."""
    st = os.stat(path)
    d = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for q in (d / "queue" / "read_ahead_kb", d.resolve().parent / "queue" / "read_ahead_kb"):
        with contextlib.suppress(OSError):
            return int(q.read_text())
    return None


@contextlib.contextmanager
def loop_copy(model: Path, workdir: Path, ra_kb: int = 128) -> Iterator[Path | None]:
    """A copy of ``model`` on an ext4 loop device (direct I/O to its image, readahead ``ra_kb``),
    as root; yields its path, or None (not root, or a tool failed: the reason is printed). The
    image stays in ``workdir`` for the next run."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("losetup", "mkfs.ext4", "mount")):
        print("  (no loop device: needs root, losetup, mkfs.ext4 and mount)")
        yield None
        return
    img = workdir / f"{model.stem}.ext4"
    mnt = Path(tempfile.mkdtemp(prefix="bmoe-loop-"))
    dev = ""
    try:
        stamp = workdir / f"{model.stem}.ext4.ok"
        want = f"{model.stat().st_size} {model.stat().st_mtime_ns}"
        fresh = not (img.exists() and stamp.exists() and stamp.read_text() == want)
        if fresh:
            stamp.unlink(missing_ok=True)
            with open(img, "wb") as f:
                f.truncate(model.stat().st_size + 256 * MIB)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
        dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(img)], check=True,
                             capture_output=True, text=True).stdout.strip()
        subprocess.run(["mount", dev, str(mnt)], check=True, capture_output=True)
        copy = mnt / model.name
        if fresh:
            shutil.copyfile(model, copy)
            os.sync()
            stamp.write_text(want)
        Path(f"/sys/block/{Path(dev).name}/queue/read_ahead_kb").write_text(str(ra_kb))
        yield copy
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"  (no loop device: {e})")
        yield None
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        if dev:
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def dd_direct(path: Path) -> float:
    """MiB/s of ``dd iflag=direct bs=1M`` over ``path`` (the disk's sequential bandwidth)."""
    p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "iflag=direct", "bs=1M"], capture_output=True, text=True)
    m = re.search(r"(\d+) bytes .*? copied, ([\d.e-]+) s", p.stderr)
    return int(m.group(1)) / MIB / float(m.group(2)) if m else float("nan")


def ensure_model(d: Path, name: str) -> Path:
    preset, qtype = name.split("-", 1)
    path = d / f"{name}.gguf"
    if not path.exists():
        from bmoe_top.runtime.models import make_model

        print(f"making {path} ...", flush=True)
        make_model(path, preset=preset, qtype=qtype)
    return path


