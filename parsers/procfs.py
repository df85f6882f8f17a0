"""Linux's ``/proc`` and cgroup files, as text in, records out (docs/memory.md "What each number
counts"). Pure: the readers that open the files are ``bmoe_top.tui.sources.procfs``.

Each parser takes the file's text and never raises on bad content except where it says so:
a line it cannot read is left out (the others still count), a field that is missing is None
(absent is not zero). Sizes are integers of bytes (``kB`` fields times 1024); times in clock
ticks or microseconds as the kernel gives them (the field's name says which).

* ``/proc/PID/maps`` -> :func:`parse_maps` -> :class:`MapEntry` per mapping;
* ``/proc/PID/stat`` -> :func:`parse_stat` -> :class:`ProcStat` (:class:`ProcFormatError` when
  it is not a stat line: the process is named by its comm between parentheses, which may itself
  hold spaces and parentheses);
* ``/proc/PID/io`` -> :func:`parse_io` -> :class:`ProcIO`;
* ``/proc/PID/smaps_rollup``, ``/proc/meminfo``, ``/proc/PID/status`` -> :func:`parse_kb` (``Key:
  N kB`` lines, in bytes);
* ``/proc/pressure/memory`` (PSI) -> :func:`parse_psi` -> :class:`Pressure`;
* ``/proc/PID/cgroup`` -> :func:`parse_cgroup` -> :class:`CgroupLine` per hierarchy;
  ``memory.max`` / ``memory.limit_in_bytes`` -> :func:`parse_limit`; ``memory.current`` /
  ``memory.usage_in_bytes`` -> :func:`parse_int`; ``memory.stat`` -> :func:`parse_flat`;
* ``/proc/self/mountinfo`` -> :func:`cgroup_mounts` (where the cgroup hierarchies are mounted);
* ``/proc/PID/fdinfo/N`` -> :func:`parse_fdinfo_flags` (the open flags, octal in the file; the
  reader tests them against its own ``os.O_DIRECT``: the bit differs between architectures).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "NO_LIMIT_V1",
    "CgroupLine",
    "CgroupMount",
    "MapEntry",
    "Pressure",
    "ProcFormatError",
    "ProcIO",
    "ProcStat",
    "cgroup_mounts",
    "kb_fields",
    "parse_cgroup",
    "parse_fdinfo_flags",
    "parse_flat",
    "parse_int",
    "parse_io",
    "parse_kb",
    "parse_limit",
    "parse_maps",
    "parse_psi",
    "parse_stat",
]

#: cgroup v1 says "no limit" with the largest page-aligned signed 64-bit number (9223372036854771712);
#: anything from here up is no limit.
NO_LIMIT_V1 = 1 << 62


class ProcFormatError(ValueError):
    """A ``/proc`` file whose text is not what its kernel format says (one line for the user)."""


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One line of ``/proc/PID/maps``: addresses ``[start, end)``, ``perms`` (``r-xp``), the file
    ``offset``, the device ``(major, minor)`` and ``inode`` of the file (0 for an anonymous
    mapping), its ``path`` ("" when anonymous; ``[heap]`` and the like for special ones) and
    ``deleted`` (the kernel appended `` (deleted)``: the file was unlinked or replaced)."""

    start: int
    end: int
    perms: str
    offset: int
    dev: tuple[int, int]
    inode: int
    path: str
    deleted: bool

    @property
    def size(self) -> int:
        return self.end - self.start


_MAPS_RE = re.compile(
    r"^([0-9a-f]+)-([0-9a-f]+)\s+([-rwxsp]{4})\s+([0-9a-f]+)\s+([0-9a-f]+):([0-9a-f]+)\s+(\d+)(?:\s+(.*))?$")
_DELETED = " (deleted)"


def parse_maps(text: str) -> list[MapEntry]:
    """Every well-formed line of ``/proc/PID/maps`` (others are left out)."""
    out: list[MapEntry] = []
    for line in text.splitlines():
        m = _MAPS_RE.match(line)
        if m is None:
            continue
        path = m.group(8) or ""
        deleted = path.endswith(_DELETED)
        if deleted:
            path = path[: -len(_DELETED)]
        out.append(MapEntry(int(m.group(1), 16), int(m.group(2), 16), m.group(3), int(m.group(4), 16),
                            (int(m.group(5), 16), int(m.group(6), 16)), int(m.group(7)), path, deleted))
    return out


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` a memory view reads: ``comm`` (the name, up to 15 bytes),
    ``state`` (R, S, D, Z, ...), ``minflt``/``majflt`` (page faults since the process started:
    minor ones found the page in memory, major ones read it from disk), ``utime``/``stime`` (CPU
    clock ticks), ``num_threads``, ``starttime`` (clock ticks after boot: with the PID it names
    one process, so a reused PID is told apart) and ``rss_pages`` (the kernel's RSS count, pages)."""

    pid: int
    comm: str
    state: str
    minflt: int
    majflt: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    rss_pages: int


def parse_stat(text: str) -> ProcStat:
    """``/proc/PID/stat`` (one line). Raises :class:`ProcFormatError` when it is not one."""
    head, sep, tail = text.strip().rpartition(")")
    pid_text, lp, comm = head.partition(" (")
    fields = tail.split()
    if not sep or not lp or len(fields) < 22 or not pid_text.isdigit():
        raise ProcFormatError(f"not a /proc/PID/stat line: {text[:80]!r}")
    try:
        nums = [int(x) for x in fields[1:22]]
    except ValueError:
        raise ProcFormatError(f"not a /proc/PID/stat line: {text[:80]!r}") from None
    # fields after ')': 0 state, 1 ppid, ..., 7 minflt, 9 majflt, 11 utime, 12 stime, 17 num_threads,
    # 19 starttime, 21 rss (man 5 proc numbers them 3.. from the start of the line)
    return ProcStat(pid=int(pid_text), comm=comm, state=fields[0], minflt=nums[6], majflt=nums[8],
                    utime=nums[10], stime=nums[11], num_threads=nums[16], starttime=nums[18],
                    rss_pages=int(fields[21]) if fields[21].lstrip("-").isdigit() else 0)


@dataclass(frozen=True, slots=True)
class ProcIO:
    """``/proc/PID/io`` (bytes and calls since the process started; None = not in the file):
    ``rchar`` (bytes the process asked ``read`` and the like for, page cache hits included),
    ``read_bytes`` (bytes the process caused to be fetched from the storage layer: disk reads,
    page faults of mapped files included), ``syscr`` (read calls), and the write side."""

    rchar: int | None
    wchar: int | None
    syscr: int | None
    syscw: int | None
    read_bytes: int | None
    write_bytes: int | None
    cancelled_write_bytes: int | None


def parse_io(text: str) -> ProcIO:
    """``/proc/PID/io`` (``key: value`` lines; a line that is not one is left out)."""
    v = parse_flat(text.replace(":", " "))
    return ProcIO(v.get("rchar"), v.get("wchar"), v.get("syscr"), v.get("syscw"), v.get("read_bytes"),
                  v.get("write_bytes"), v.get("cancelled_write_bytes"))


_KB_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_()]*):\s+(\d+)(?:\s+([kKmMgG]B))?\s*$")
_UNIT = {"kb": 1024, "mb": 1 << 20, "gb": 1 << 30}


def _kb_line(line: str) -> tuple[str, int] | None:
    """One ``Key: N kB`` line -> (key, bytes; a value without a unit as it is), None otherwise."""
    m = _KB_RE.match(line.strip())
    if m is None:
        return None
    unit = m.group(3)
    return m.group(1), int(m.group(2)) * (_UNIT[unit.lower()] if unit else 1)


def parse_kb(text: str) -> dict[str, int]:
    """``Key: N kB`` lines (``/proc/meminfo``, ``/proc/PID/smaps_rollup``, ``/proc/PID/status``)
    -> ``{key: bytes}`` (a value without a unit, a page count such as ``HugePages_Total``, is
    kept as it is). Other lines (smaps_rollup's address header, status's text fields) are left out."""
    return dict(kv for kv in map(_kb_line, text.splitlines()) if kv is not None)


def kb_fields(text: str, names: tuple[str, ...]) -> dict[str, int]:
    """The ``Key: N kB`` lines of ``names`` only, as :func:`parse_kb` reads them (a name absent
    or not such a line is left out): a reading that wants two figures of ``/proc/meminfo`` or
    ``/proc/PID/status`` matches two lines, not fifty."""
    out: dict[str, int] = {}
    for name in names:
        at = text.find(name + ":")
        while at > 0 and text[at - 1] != "\n":
            at = text.find(name + ":", at + 1)
        if at < 0:
            continue
        end = text.find("\n", at)
        kv = _kb_line(text[at:end if end >= 0 else len(text)])
        if kv is not None:
            out[kv[0]] = kv[1]
    return out


@dataclass(frozen=True, slots=True)
class Pressure:
    """Pressure stall information of one resource (``/proc/pressure/memory``, a cgroup's
    ``memory.pressure``): the share of wall time in which ``some`` task (``full``: every
    non-idle task) stalled waiting for it, in percent averaged over 10, 60 and 300 s, and the
    total stall time in microseconds since boot. None where the file has no such line."""

    some_avg10: float | None
    some_avg60: float | None
    some_avg300: float | None
    some_total_us: int | None
    full_avg10: float | None
    full_avg60: float | None
    full_avg300: float | None
    full_total_us: int | None


def parse_psi(text: str) -> Pressure:
    """A PSI file's ``some ...`` and ``full ...`` lines (``avg10=0.12 avg60=... total=N``)."""
    got: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind in ("some", "full"):
            got[kind] = dict(p.split("=", 1) for p in rest.split() if "=" in p)

    def f(kind: str, key: str) -> float | None:
        try:
            return float(got[kind][key])
        except (KeyError, ValueError):
            return None

    def i(kind: str) -> int | None:
        v = got.get(kind, {}).get("total", "")
        return int(v) if v.isdigit() else None

    return Pressure(f("some", "avg10"), f("some", "avg60"), f("some", "avg300"), i("some"),
                    f("full", "avg10"), f("full", "avg60"), f("full", "avg300"), i("full"))


@dataclass(frozen=True, slots=True)
class CgroupLine:
    """One line of ``/proc/PID/cgroup``: the hierarchy id (0 = the unified cgroup v2 hierarchy),
    its controllers (``("memory",)`` on v1; empty on v2) and the cgroup's path in it."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str


def parse_cgroup(text: str) -> list[CgroupLine]:
    """``/proc/PID/cgroup`` (``id:controllers:path`` lines; others are left out)."""
    out: list[CgroupLine] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            continue
        out.append(CgroupLine(int(parts[0]), tuple(c for c in parts[1].split(",") if c), parts[2]))
    return out


def parse_int(text: str) -> int | None:
    """A file holding one integer (``memory.current``), None when it does not."""
    t = text.strip()
    return int(t) if t.isdigit() else None


def parse_limit(text: str) -> int | None:
    """A memory limit in bytes: cgroup v2's ``memory.max`` (``max`` = no limit) or v1's
    ``memory.limit_in_bytes`` (:data:`NO_LIMIT_V1` and above = no limit). None = no limit (or
    not a limit)."""
    v = parse_int(text)
    return v if v is not None and v < NO_LIMIT_V1 else None


def parse_flat(text: str) -> dict[str, int]:
    """``key value`` lines of integers (``memory.stat``, ``/proc/vmstat``); others are left out."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_fdinfo_flags(text: str) -> int | None:
    """The ``flags:`` of ``/proc/PID/fdinfo/N`` (octal in the file), None when absent."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            try:
                return int(value.strip(), 8)
            except ValueError:
                return None
    return None



@dataclass(frozen=True, slots=True)
class CgroupMount:
    """A mounted cgroup hierarchy: ``version`` 1 (with its ``controllers``) or 2, the mount
    point and the ``root`` of the hierarchy it shows (``/`` unless a container mounts a subtree)."""

    version: int
    controllers: tuple[str, ...]
    mount_point: str
    root: str


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space) back to characters."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup mounts listed in ``/proc/self/mountinfo`` (other lines are left out)."""
    out: list[CgroupMount] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 5 or len(b) < 3:
            continue
        if b[0] == "cgroup2":
            out.append(CgroupMount(2, (), _unescape(a[4]), _unescape(a[3])))
        elif b[0] == "cgroup":
            opts = tuple(o for o in b[2].split(",") if o not in ("rw", "ro") and "=" not in o)
            out.append(CgroupMount(1, opts, _unescape(a[4]), _unescape(a[3])))
    return out
