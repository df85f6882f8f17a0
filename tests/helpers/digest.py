"""A compact, exact digest of what the parsers read from a file (row counts, column sums, summaries,
metadata, answers), so a golden file can prove a real run still parses to the same numbers."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.route_trace import expert_counts, hit_matrix, load_route_trace
from bmoe_top.parsers.sniff import sniff
from bmoe_top.parsers.token_csv import load_token_csv
from bmoe_top.parsers.transcript import parse_transcript


def _num(v: float) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


def _col(a: np.ndarray) -> dict[str, Any]:
    f = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    return {"n": int(a.shape[0]), "finite": int(f.shape[0]), "sum": _num(float(np.sum(f, dtype=np.float64))),
            "sha": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]}


def _h(s: str | None) -> str | None:
    return None if s is None else hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def digest(data: bytes, name: str = "") -> dict[str, Any]:
    kind = sniff(data, name)
    out: dict[str, Any] = {"kind": kind}
    if kind == "token_csv":
        t = load_token_csv(data)
        out.update(n_rows=t.n_rows, header=t.header, meta=t.meta, comments=t.comments,
                   columns={k: _col(v) for k, v in t.columns.items()},
                   summaries=[{"row": s["row"], "lineno": s["lineno"], "raw": s["raw"],
                               "summary": {k: _num(v) for k, v in s["summary"].items()}} for s in t.summaries],
                   problems=[(p.lineno, p.reason) for p in t.problems])
    elif kind == "route_trace":
        r = load_route_trace(data)
        steps, share = hit_matrix(r)
        out.update(n_rows=r.n_rows, meta=r.meta, layer_info={str(k): v for k, v in r.layer_info.items()},
                   dims=[r.n_layer, r.n_expert, r.top_k],
                   columns={k: _col(getattr(r, k)) for k in ("turn", "phase", "step", "layer", "slot", "expert",
                                                              "weight", "residency", "expert_bytes")},
                   hit=_col(share.ravel()), steps=_col(steps), counts=_col(expert_counts(r).ravel()),
                   problems=[(p.lineno, p.reason) for p in r.problems])
    elif kind in ("transcript", "sidecar"):
        tr = parse_transcript(data)
        out.update(records=len(tr.records), record_lines=_h(",".join(map(str, tr.record_lines))),
                   summary={k: _num(v) for k, v in tr.summary.items()}, info=tr.info, sidecar=tr.sidecar,
                   answer=_h(tr.answer), reasoning=_h(tr.reasoning), prompt=_h(tr.prompt),
                   text_lines=len(tr.text_lines), summary_lines=[(n, s.kind) for n, s in tr.summary_lines],
                   generations=len(tr.generations), problems=[(p.lineno, p.reason) for p in tr.problems])
    elif kind == "requests":
        reqs, problems = parse_requests(data)
        out.update(n=len(reqs), cmds=[r.cmd for r in reqs], prompts=_h("\x00".join(r.prompt or "" for r in reqs)),
                   problems=[(p.lineno, p.reason) for p in problems])
    return out
