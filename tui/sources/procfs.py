"""Reading ``/proc`` and the cgroup file system for the memory watcher (docs/memory.md "What each
number counts"). The text is parsed by :mod:`bmoe_top.parsers.procfs`; this module opens the
files and turns what the kernel refuses into one line that says why. No Textual.

* :class:`ProcReader` (one process): :meth:`~ProcReader.figures` ->
  :class:`~bmoe_top.parsers.memory_sample.ProcessFigures` from ``stat``, ``status`` and ``io``
  (``io`` needs the permission to trace the process: the same user, or root);
  :meth:`~ProcReader.mapped_files` / :meth:`~ProcReader.open_files` what it maps and holds open.
  :class:`ProcessGone` when the process is not there (or its PID now names another process:
  its start time changed).
* :func:`system_figures`: ``/proc/meminfo`` and ``/proc/pressure/memory`` (absent on kernels
  without PSI: None).
* :class:`CgroupReader`: the memory cgroup of a process, v1 or v2, the tightest limit on it
  (its own or an ancestor's), that cgroup's usage and page cache.

The RSS split is read from ``/proc/PID/status`` (``RssAnon``, ``RssFile``, ``RssShmem``: the
kernel's counters) rather than ``smaps_rollup``, which walks every page table entry of the
process: for a model mapped whole that walk costs milliseconds a sample, and it needs the
permission to trace the process. Both count the same pages (a test checks them against each other
on a real llama-server).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from bmoe_top.parsers.memory_sample import CgroupFigures, ProcessFigures, SystemFigures
from bmoe_top.parsers.procfs import (
    CgroupMount,
    MapEntry,
    ProcFormatError,
    ProcStat,
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

__all__ = ["CgroupReader", "OpenFile", "ProcReader", "ProcessGone", "device_readahead", "mem_available",
           "ram_limit", "read_text", "system_figures"]

#: The most of a /proc or cgroup file read (maps of a process with a hundred thousand mappings).
MAX_READ = 32 << 20


class ProcessGone(Exception):
    """The watched process is not there any more (one line: which, and since when)."""


def read_text(path: str, cap: int = MAX_READ) -> str:
    """A small kernel file's text (up to ``cap`` bytes). Raises ``OSError`` as ``open`` does."""
    with open(path, "rb", buffering=0) as f:
        chunks: list[bytes] = []
        left = cap
        while left > 0:
            b = f.read(min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    return b"".join(chunks).decode("utf-8", "replace")


def _denied(e: OSError) -> bool:
    return e.errno in (errno.EACCES, errno.EPERM)


@dataclass(frozen=True, slots=True)
class OpenFile:
    """A file the process holds open: descriptor ``fd``, the link's ``path``, the file's device
    and inode, and its open ``flags`` (None when ``fdinfo`` could not be read)."""

    fd: int
    path: str
    dev: int
    ino: int
    flags: int | None


class ProcReader:
    """The files of process ``pid`` under ``root`` (``/proc``). The first :meth:`stat` fixes
    which process this is (its start time); from then on a different start time under the same
    PID is :class:`ProcessGone`. ``denied``: the files the kernel refused, with the reason, as
    they were last refused (a view says so once)."""

    def __init__(self, pid: int, root: str = "/proc") -> None:
        self.pid = pid
        self.dir = f"{root}/{pid}"
        self.starttime: int | None = None
        self.comm = ""
        self.denied: dict[str, str] = {}

    def _read(self, name: str) -> str:
        try:
            return read_text(f"{self.dir}/{name}")
        except FileNotFoundError:
            raise ProcessGone(f"process {self.pid} is not running") from None
        except ProcessLookupError:
            raise ProcessGone(f"process {self.pid} has exited") from None

    def _optional(self, name: str) -> str | None:
        """``name``'s text, None when the kernel refuses it (the reason goes to :attr:`denied`)."""
        try:
            text = self._read(name)
        except PermissionError as e:
            self.denied[name] = f"cannot read {self.dir}/{name}: {e.strerror} (a process of another user: run " \
                                f"bmoe-top as its user or as root)"
            return None
        except OSError as e:
            if _denied(e):
                self.denied[name] = f"cannot read {self.dir}/{name}: {e.strerror}"
                return None
            raise
        self.denied.pop(name, None)
        return text

    def stat(self) -> ProcStat:
        """``/proc/PID/stat``; raises :class:`ProcessGone` (also for a reused PID or a zombie)."""
        try:
            st = parse_stat(self._read("stat"))
        except ProcFormatError as e:
            raise ProcessGone(f"process {self.pid}: {e}") from None
        if self.starttime is None:
            self.starttime = st.starttime
            self.comm = st.comm
        elif st.starttime != self.starttime:
            raise ProcessGone(f"process {self.pid} ({self.comm}) has exited; the PID now names another process "
                              f"({st.comm})")
        if st.state in ("Z", "X"):
            raise ProcessGone(f"process {self.pid} ({self.comm}) has exited (a zombie waiting for its parent)")
        return st

    def figures(self) -> ProcessFigures:
        """The process's counters now (see :class:`~bmoe_top.parsers.memory_sample.ProcessFigures`);
        the ones the kernel refuses are None. Raises :class:`ProcessGone`."""
        st = self.stat()
        status = self._optional("status")
        kb = parse_kb(status) if status is not None else {}
        io_text = self._optional("io")
        io = parse_io(io_text) if io_text is not None else None
        return ProcessFigures(
            pid=self.pid, comm=st.comm, state=st.state, majflt=st.majflt, minflt=st.minflt,
            cpu_ticks=st.utime + st.stime, read_bytes=io.read_bytes if io else None, rchar=io.rchar if io else None,
            rss=kb.get("VmRSS"), rss_anon=kb.get("RssAnon"), rss_file=kb.get("RssFile"),
            rss_shmem=kb.get("RssShmem"), swap=kb.get("VmSwap"))

    def rss_split(self) -> tuple[int | None, int | None]:
        """(``RssAnon``, ``RssFile``) now, as :meth:`figures` reads them, each None when the
        kernel refuses it: ``stat`` (the process is still the one read) and two lines of
        ``status``, for a reading every second. Raises :class:`ProcessGone`."""
        self.stat()
        status = self._optional("status")
        kb = kb_fields(status, ("RssAnon", "RssFile")) if status is not None else {}
        return kb.get("RssAnon"), kb.get("RssFile")

    def mapped_files(self) -> list[MapEntry]:
        """Mappings of files (inode not 0), as ``/proc/PID/maps`` lists them; [] when refused."""
        text = self._optional("maps")
        return [] if text is None else [m for m in parse_maps(text) if m.inode and m.path.startswith("/")]

    def open_files(self) -> list[OpenFile]:
        """Regular files the process holds open; [] when refused."""
        try:
            names = os.listdir(f"{self.dir}/fd")
        except FileNotFoundError:
            raise ProcessGone(f"process {self.pid} is not running") from None
        except OSError as e:
            if _denied(e):
                self.denied["fd"] = f"cannot list {self.dir}/fd: {e.strerror}"
                return []
            raise
        out: list[OpenFile] = []
        for name in names:
            if not name.isdigit():
                continue
            link = f"{self.dir}/fd/{name}"
            try:
                target = os.readlink(link)
                st = os.stat(link)
            except OSError:
                continue  # closed since the listing, or not a file we may see
            if not target.startswith("/") or not os.path.isfile(link):
                continue
            try:
                flags = parse_fdinfo_flags(read_text(f"{self.dir}/fdinfo/{name}", 4096))
            except OSError:
                flags = None
            out.append(OpenFile(int(name), target, st.st_dev, st.st_ino, flags))
        return out

    def cgroup_lines(self) -> str | None:
        return self._optional("cgroup")


def mem_available(root: str = "/proc") -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (bytes), as :func:`system_figures` reads it; None
    when absent or unreadable."""
    try:
        return kb_fields(read_text(f"{root}/meminfo"), ("MemAvailable",)).get("MemAvailable")
    except OSError:
        return None


def system_figures(root: str = "/proc") -> SystemFigures:
    """``/proc/meminfo`` and ``/proc/pressure/memory`` now (PSI absent: its fields None)."""
    try:
        kb = parse_kb(read_text(f"{root}/meminfo"))
    except OSError:
        kb = {}
    try:
        psi = parse_psi(read_text(f"{root}/pressure/memory"))
    except OSError:
        psi = None
    return SystemFigures(
        mem_total=kb.get("MemTotal"), mem_available=kb.get("MemAvailable"), cached=kb.get("Cached"),
        psi_some_avg10=psi.some_avg10 if psi else None, psi_full_avg10=psi.full_avg10 if psi else None,
        psi_some_total_us=psi.some_total_us if psi else None, psi_full_total_us=psi.full_total_us if psi else None)


class CgroupReader:
    """The memory cgroup of a process: ``cgroup_text`` is its ``/proc/PID/cgroup``, ``mountinfo``
    ``/proc/self/mountinfo`` (where the hierarchies are mounted). A memory controller on a v1
    hierarchy is read there, else the v2 hierarchy (where ``memory.max`` exists). ``dir`` is
    None when the process has no memory cgroup this reader can see."""

    def __init__(self, cgroup_text: str, mountinfo: str) -> None:
        self.version = 0
        self.path = ""
        self.dir: str | None = None
        self.mount_point = ""
        lines = parse_cgroup(cgroup_text)
        mounts = cgroup_mounts(mountinfo)
        v1 = next((m for m in mounts if m.version == 1 and "memory" in m.controllers), None)
        line1 = next((c for c in lines if "memory" in c.controllers), None)
        if v1 is not None and line1 is not None:
            self._place(1, v1, line1.path)
            return
        v2 = next((m for m in mounts if m.version == 2), None)
        line2 = next((c for c in lines if c.hierarchy == 0), None)
        if v2 is not None and line2 is not None:
            self._place(2, v2, line2.path)
            if not os.path.exists(f"{self.dir}/memory.current") and self.path != "/":
                self.dir = None  # the v2 hierarchy has no memory controller here

    def _place(self, version: int, mount: CgroupMount, path: str) -> None:
        rel = path
        if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
            rel = path[len(mount.root):] or "/"
        self.version, self.path, self.mount_point = version, path, mount.mount_point
        self.dir = mount.mount_point.rstrip("/") + (rel if rel != "/" else "")

    def _names(self) -> tuple[str, str]:
        return ("memory.limit_in_bytes", "memory.usage_in_bytes") if self.version == 1 else \
            ("memory.max", "memory.current")

    def figures(self) -> CgroupFigures | None:
        """The cgroup's figures now (None without one): the tightest limit from the cgroup up to
        the mount's root, and that cgroup's usage and page cache (``memory.stat``: v2 ``file``,
        v1 ``total_cache``)."""
        if self.dir is None:
            return None
        limit_name, usage_name = self._names()
        best: tuple[int, str, str] | None = None  # limit, dir, path
        d, path = self.dir, self.path
        top = self.mount_point.rstrip("/")
        while True:
            try:
                limit = parse_limit(read_text(f"{d}/{limit_name}", 4096))
            except OSError:
                limit = None
            if limit is not None and (best is None or limit < best[0]):
                best = (limit, d, path)
            if len(d) <= len(top) or d == top:
                break
            d = os.path.dirname(d)
            path = os.path.dirname(path) or "/"
        at_dir, at_path = (best[1], best[2]) if best else (self.dir, self.path)
        try:
            usage = parse_int(read_text(f"{at_dir}/{usage_name}", 4096))
        except OSError:
            usage = None
        try:
            stat = parse_flat(read_text(f"{at_dir}/memory.stat", 1 << 16))
        except OSError:
            stat = {}
        file = stat.get("file") if self.version == 2 else stat.get("total_cache", stat.get("cache"))
        return CgroupFigures(self.version, self.path, best[0] if best else None, at_path if best else "", usage, file)


def ram_limit(pid: int | str = "self", root: str = "/proc") -> tuple[int | None, str]:
    """The RAM a process can use (bytes) and where it came from: the smaller of the machine's
    ``MemTotal`` and the tightest limit of the process's memory cgroup, v1 or v2
    (:class:`CgroupReader`); (None, "") when neither can be read."""
    total = system_figures(root).mem_total
    try:
        text = read_text(f"{root}/{pid}/cgroup")
        mountinfo = read_text(f"{root}/self/mountinfo")
    except OSError:
        text = mountinfo = ""
    cg = CgroupReader(text, mountinfo).figures() if text else None
    if cg is not None and cg.limit is not None and (total is None or cg.limit < total):
        return cg.limit, f"the memory cgroup limit (v{cg.version}, {cg.limit_path})"
    if total is not None:
        return total, "this machine's MemTotal" + (" (no memory cgroup limit below it)" if cg is not None else "")
    return None, ""


def device_readahead(path: str, sys_root: str = "/sys") -> int | None:
    """The readahead (bytes) of the block device holding ``path``: its ``queue/read_ahead_kb``
    (a partition's is its disk's) x 1024; None when the file or the device cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    dev = f"{sys_root}/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for queue in (f"{dev}/queue/read_ahead_kb", f"{dev}/../queue/read_ahead_kb"):
        try:
            kb = parse_int(read_text(queue, 64))
        except OSError:
            continue
        if kb is not None and kb >= 0:
            return kb * 1024
    return None
