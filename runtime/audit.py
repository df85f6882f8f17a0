"""The audit log writer of ``bmoe-run serve --moe-cache-audit FILE`` (moe-cache-reference.md
"Audit log"): one JSON object per line, each written with a single open-append-close (one
``os.write`` on an ``O_APPEND`` descriptor), so the log survives a crash up to the last record and
several processes can share one file. Records are serialized with orjson, which writes a
non-finite float as ``null``: a record never holds a bare NaN.

The file is only ever appended to, never truncated, and never reached through a symbolic link:
every open goes through ``bmoe_top.outfile.open_output`` (``O_NOFOLLOW``, append) and the
descriptor must be a regular file (a FIFO, a device or a directory is refused), so a link
planted at the path cannot redirect the records into another file. :meth:`AuditWriter.check`
opens the file once at start-up so a bad path is refused before the model loads; a later write
error raises :class:`AuditError` (the server reports it and exits non-zero).

Events: ``load`` (right after the context is created), ``ready`` (the server accepts requests),
``request`` (one per finished request, with its own ``req_*`` counters = the context counters'
difference across the request; with several slots busy, the lookups charged to it, docs/metrics.md
"Parallel slots") and ``exit`` (the engine is freed). The request records add up exactly to exit
minus ready (:func:`bmoe_top.parsers.audit.check_exact_sum`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bmoe_top.outfile import OutputFile, OutputFileError, open_output

from .cache_policy import CacheCounters

__all__ = ["AuditWriter", "AuditError", "utc_now_ms", "profile_info", "REQ_KEYS"]

# request record key -> CacheCounters.audit_counters() key
REQ_KEYS = {"req_hits": "hits", "req_hits_profile": "hits_profile", "req_misses": "misses",
            "req_bytes_upload": "bytes_upload", "req_bytes_cpu": "bytes_cpu"}


def utc_now_ms() -> str:
    """UTC ISO 8601 to the millisecond, ``2026-11-29T12:00:00.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def profile_info(path: str | None, error: str | None = None) -> dict[str, Any] | None:
    """``profile`` of the load record: ``{path, bytes, sha256}``, ``{path, error}`` or ``None``."""
    if not path:
        return None
    if error:
        return {"path": str(path), "error": error}
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return {"path": str(path), "error": exc.strerror or str(exc)}
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class AuditError(OSError):
    """The audit log cannot be opened or written: a symbolic link, not a regular file, or an OS
    error (permission, disk full, read-only file system). ``str()`` is one line with the path."""

    def __str__(self) -> str:
        return str(self.strerror or super().__str__())


def _open_append(path: str) -> OutputFile:
    """The regular file ``path`` open for appending (created 0644 if absent; every write at once),
    never through a symbolic link (``bmoe_top.outfile.open_output``). Raises :class:`AuditError`."""
    try:
        out = open_output(path, append=True, buffer_size=0, mode=0o644)
    except OutputFileError as exc:
        raise AuditError(exc.errno or errno.EINVAL, str(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(out.fileno()).st_mode):
            raise AuditError(errno.EINVAL, f"cannot write {path}: it is not a regular file: refused")
    except BaseException:
        _close(out)
        raise
    return out


def _close(out: OutputFile) -> None:
    try:
        out.close()
    except OutputFileError:
        pass


def _drop_torn_tail(fd: int, n: int) -> None:
    """After a failed write that left ``n`` bytes of a record at the end of the file: cut them off
    when nothing was appended after them (another writer's records are never touched), so the
    log holds whole lines only."""
    try:
        end = os.lseek(fd, 0, os.SEEK_CUR)
        if os.fstat(fd).st_size == end:
            os.ftruncate(fd, end - n)
    except OSError:
        pass


class AuditWriter:
    """Appends audit records to ``path``. ``hybrid`` goes into every record. ``write`` (and every
    event method) raises :class:`AuditError` when the file cannot be opened or written."""

    def __init__(self, path: str | os.PathLike, hybrid: bool = False):
        self.path = os.fspath(path)
        self.hybrid = bool(hybrid)
        self.pid = os.getpid()
        self.n_written = 0

    def base(self, event: str, counters: CacheCounters) -> dict[str, Any]:
        rec: dict[str, Any] = {"event": event, "time": utc_now_ms(), "pid": self.pid, "hybrid": self.hybrid}
        rec.update(counters.audit_counters())
        rec.update(counters.tier_counters())  # additive: docs/memory.md "The three tiers in bmoe-run"
        return rec

    def check(self) -> None:
        """Open the file as :meth:`write` does, writing nothing (start-up check). Raises :class:`AuditError`."""
        _open_append(self.path).close()

    def write(self, rec: dict[str, Any]) -> None:
        line = orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        out = _open_append(self.path)
        try:
            out.write(line)  # the whole line, or OutputFileError with what went out in bytes_written
        except OutputFileError as exc:
            if out.bytes_written:
                _drop_torn_tail(out.fileno(), out.bytes_written)
            raise AuditError(exc.errno or errno.EIO, str(exc)) from None
        finally:
            _close(out)
        self.n_written += 1

    # -- the four events ------------------------------------------------------------------
    def load(self, counters: CacheCounters, *, model: dict, params: dict, cache: dict, load_ms: float,
             profile: dict | None, layers: list[dict]) -> dict:
        rec = self.base("load", counters)
        rec.update(model=model, params=params, cache=cache, load_ms=round(load_ms, 3), devices=[],
                   profile=profile, layers=layers)
        self.write(rec)
        return rec

    def ready(self, counters: CacheCounters) -> dict:
        rec = self.base("ready", counters)
        self.write(rec)
        return rec

    def request(self, before: CacheCounters, after: CacheCounters, *, slot: int, task: int, n_prompt: int,
                n_gen: int, t_prompt_ms: float, t_gen_ms: float) -> dict:
        """One slot: the request's own counters are the context counters' difference across it."""
        a, b = before.audit_counters(), after.audit_counters()
        return self.request_own(after, {k: b[k] - a[k] for k in b}, slot=slot, task=task, n_prompt=n_prompt,
                                n_gen=n_gen, t_prompt_ms=t_prompt_ms, t_gen_ms=t_gen_ms)

    def request_own(self, counters: CacheCounters, own: dict[str, int], *, slot: int, task: int, n_prompt: int,
                    n_gen: int, t_prompt_ms: float, t_gen_ms: float) -> dict:
        """A request record with the context's ``counters`` now and the request's own ``req_*``
        counters ``own`` (keys of :meth:`CacheCounters.audit_counters`; with several slots, the
        lookups charged to it: docs/metrics.md "Parallel slots")."""
        rec = self.base("request", counters)
        rec.update(slot=slot, task=task, n_prompt=n_prompt, n_gen=n_gen, t_prompt_ms=round(t_prompt_ms, 3),
                   t_gen_ms=round(t_gen_ms, 3))
        for rk, ck in REQ_KEYS.items():
            rec[rk] = own[ck]
        self.write(rec)
        return rec

    def exit(self, counters: CacheCounters, *, layers: list[dict], perf: dict) -> dict:
        rec = self.base("exit", counters)
        rec.update(layers=layers, perf=perf)
        self.write(rec)
        return rec
