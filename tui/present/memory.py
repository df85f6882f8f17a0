"""What the memory view shows, as data: the ``attach --pid``/``--gguf --once --json`` document,
the panel's rows and the status words (docs/memory.md "What each number counts"). Every number
comes from :meth:`~bmoe_top.tui.model.memory.MemoryModel.figures` or the newest sample; None is
"not known", never 0. No Textual.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bmoe_top.parsers.memory_sample import MemorySample
from bmoe_top.tui.model.diagnosis import diagnose_memory
from bmoe_top.tui.model.memory import MemoryFigures, MemoryModel
from bmoe_top.tui.present.diagnosis import diagnosis_document
from bmoe_top.tui.present.numbers import MISSING, count, fmt, sig, size, text_line

__all__ = ["MEMORY_STATUS_WORDS", "SHARE_DIGITS", "memory_document", "memory_lines", "memory_panel_rows"]

#: How each watcher state reads on the status line.
MEMORY_STATUS_WORDS = {
    "starting": "… starting", "ok": "● sampling", "no_model": "◔ no GGUF mapped", "exited": "✖ process exited",
    "file_error": "⚠ file unreadable", "error": "✖ cannot watch", "replayed": "■ replayed",
}
#: Decimal places of a resident share in the JSON document.
SHARE_DIGITS = 4
MIB = 1 << 20


def _r(v: float | None, digits: int = SHARE_DIGITS) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def _shares(a: np.ndarray | None) -> list[list[float | None]] | None:
    if a is None:
        return None
    r = np.round(a, SHARE_DIGITS)
    return [[None if not math.isfinite(x) else float(x) for x in row] for row in r.tolist()]


def _process(s: MemorySample | None, f: MemoryFigures) -> dict[str, Any] | None:
    if s is None or s.proc is None:
        return None
    p = s.proc
    return {"pid": p.pid, "comm": text_line(p.comm), "state": p.state, "rss": p.rss, "rss_anon": p.rss_anon,
            "rss_file": p.rss_file, "rss_shmem": p.rss_shmem, "swap": p.swap, "majflt": p.majflt,
            "minflt": p.minflt, "read_bytes": p.read_bytes, "rchar": p.rchar,
            "majflt_per_s": _r(f.majflt_per_s, 3), "read_bytes_per_s": _r(f.read_bytes_per_s, 1),
            "tokens": s.tokens, "tokens_per_s": _r(f.tokens_per_s, 3),
            "faults_per_token": _r(f.faults_per_token, 3), "read_bytes_per_token": _r(f.read_bytes_per_token, 1)}


def memory_document(m: MemoryModel) -> dict[str, Any]:
    """The headless document (docs/memory.md "The JSON document"): ``status``/``detail``, the
    ``files`` watched (paths, bytes), ``resident`` (whole-file, dense and expert shares, bytes,
    and ``per_layer``: ``n_layer`` lists of ``n_expert`` shares, None in a layer without
    experts), ``churn``, ``process``, ``system``, ``cgroup``, ``notes``, ``problems`` and ``diagnosis``
    (docs/diagnosis.md: plain mmap's rules)."""
    with m.lock:
        f = m._figures()
        w, r, newest = m.files, m.residency, m.newest
        doc: dict[str, Any] = {"status": m.state, "detail": m.detail or None, "samples": m.history.samples}
        if w is not None:
            doc["files"] = [{"path": text_line(p), "bytes": n} for p, n in zip(w.paths, w.sizes)]
            doc["model"] = {"arch": text_line(w.arch), "name": text_line(w.name), "n_layer": w.n_layer,
                            "n_expert": w.n_expert, "page_size": w.page_size, "method": w.method,
                            "pid": w.pid, "direct_io": w.direct_io}
        else:
            doc["files"] = []
            doc["model"] = None
        doc["resident"] = {
            "t": round(r.t, 3) if r is not None else None,
            "file_share": _r(f.file_share), "file_bytes": f.file_bytes,
            "dense_share": _r(f.dense_share), "dense_bytes": f.dense_bytes,
            "expert_share": _r(f.expert_share), "per_layer": _shares(f.slice_share),
        }
        doc["churn"] = {"slices_in": f.slices_in, "slices_out": f.slices_out}
        doc["process"] = _process(m.figures_at, f)
        sy = newest.system if newest is not None else None
        doc["system"] = None if sy is None else {
            "mem_total": sy.mem_total, "mem_available": sy.mem_available, "cached": sy.cached,
            "psi_some_avg10": sy.psi_some_avg10, "psi_full_avg10": sy.psi_full_avg10}
        cg = newest.cgroup if newest is not None else None
        doc["cgroup"] = None if cg is None else {
            "version": cg.version, "path": text_line(cg.path), "limit": cg.limit,
            "limit_path": text_line(cg.limit_path), "usage": cg.usage, "file": cg.file}
        doc["notes"] = [text_line(t) for _k, (_t, t) in sorted(m.notes.items())]
        doc["problems"] = [text_line(p) for p in m.problems]
        doc["diagnosis"] = diagnosis_document(diagnose_memory(m)[1])
    return doc


def _pct(v: float | None) -> str:
    return MISSING if v is None else f"{100 * v:.1f} %"


def _mib(v: float | int | None) -> str:
    """Bytes through the one size formatter (MiB, then GiB: as the run panel's memory tiers show
    the same RSS and MemAvailable)."""
    return MISSING if v is None else size(v)


def _mib_s(v: float | int | None) -> str:
    """Bytes a second in MiB/s, 3 significant digits (the catalogue's MiB/s form)."""
    return MISSING if v is None else sig(v / MIB, 3, "MiB/s")


def memory_panel_rows(m: MemoryModel) -> list[tuple[str, str]]:
    """(label, value) rows of the memory panel, the same figures as :func:`memory_document`."""
    with m.lock:
        f = m._figures()
        w, newest, at = m.files, m.newest, m.figures_at
    rows: list[tuple[str, str]] = []
    if w is not None:
        rows.append(("model, L x E", f"{sum(w.sizes) / MIB:,.0f} MiB, {w.n_layer} x {w.n_expert}"))
    rows += [("file resident", f"{_pct(f.file_share)} ({_mib(f.file_bytes)})"),
             ("dense resident", _pct(f.dense_share)), ("experts resident", _pct(f.expert_share)),
             ("churn in/out", f"{count(f.slices_in)} / {count(f.slices_out)}")]
    p = at.proc if at is not None else None
    if p is not None:
        rows += [("RSS anon/file", f"{_mib(p.rss_anon)} / {_mib(p.rss_file)}"),
                 ("major faults/s", fmt(f.majflt_per_s, 1)), ("read/s", _mib_s(f.read_bytes_per_s))]
        if f.read_bytes_per_token is not None or (at is not None and at.tokens is not None):
            rows += [("read/token", _mib(f.read_bytes_per_token)),
                     ("faults/token", fmt(f.faults_per_token, 2))]
    sy = newest.system if newest is not None else None
    if sy is not None:
        rows.append(("MemAvailable", _mib(sy.mem_available)))
        rows.append(("PSI some/full 10s", f"{fmt(sy.psi_some_avg10, 2)} / {fmt(sy.psi_full_avg10, 2)} %"
                     if sy.psi_some_avg10 is not None else "not in this kernel"))
    cg = newest.cgroup if newest is not None else None
    if cg is not None:
        rows.append((f"cgroup v{cg.version}", f"{_mib(cg.usage)} of {_mib(cg.limit) if cg.limit else 'no limit'}"))
    return rows


def memory_lines(m: MemoryModel) -> list[str]:
    """The text form of ``--once`` without ``--json``: the status, the panel rows, the notes."""
    with m.lock:
        head = f"memory: {m.state}" + (f": {m.detail}" if m.detail else "")
        notes = [t for _t, t in m.notes.values()]
    return [head, *(f"  {k:<18} {v}" for k, v in memory_panel_rows(m)), *(f"  note: {n}" for n in notes)]
