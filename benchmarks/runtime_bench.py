"""bmoe-run against its own baselines, measured in the same run: the rows of docs/runtime.md
"Benchmarks".

For each bench model (the ``bench`` preset in Q4_K_M and q8_0, made with ``make_model``):

* **bare loop**: llama.cpp alone in this process (mmap load, ``llama_decode`` and llama.cpp's
  greedy sampler chain, no eval callback, no Python per token beyond the two calls);
* **resident**: ``Engine(stream=False)``; goal: tok/s >= 0.98x the bare loop;
* **streamed** rows: the cache holds every expert, 50% and 25% of the expert bank, cache off, cache
  off with 2 read lanes; goal: streamed/resident >= the C++ runtime's ratio (``CPP_RATIOS``).
  "Every expert" is timed on a warm cache (the whole bank read before the timed tokens: the
  cache's steady state; how the C++ bench times that row is not known here); "allcold" is the same
  budget from a cold cache, so its first tokens' reads are inside the timing (no C++ figure).
  "50e1"/"25e1" are the 50% and 25% rows with ``--early-prefetch 1`` (the same-run A/B of
  docs/runtime.md "How streaming works", step 6; off by default). Every other streamed run starts from a cold cache,
  as a fresh process would (the prompt's prefill, untimed, fills it first);
* **serial limit** (cache off): a token cannot be faster than the resident compute plus its
  page-aligned expert reads at ``dd iflag=direct bs=1M`` bandwidth; goal: 0.7x of it;
* **cold reads**: the cache-off read bandwidth against ``dd iflag=direct`` at the same request
  size; goal: >= 0.8x;
* **peak RSS** of the whole process, load included (``/usr/bin/time -v`` of a ``bmoe-run`` child,
  or its VmHWM); goal: 25% of the bank < 0.5x of resident.

Rows run interleaved (the order rotates every round), several rounds; a row's ratio is the median
of its per-round ratios to the resident run of the same round, and "best" compares each row's
fastest round (on a shared machine, the rounds nobody else disturbed). tok/s is over the decode loop
(per-token wall, sampling included); ``dec tok/s`` counts the ``llama_decode`` calls alone
(bmoe-cli's definition). With ``BMOE_CLI=/path/to/bmoe-cli`` the rows resident, all (from a cold
cache), 50, 25, off and off2 also run on that binary and on ``bmoe-run`` as child processes, back
to back in each round with the same whole-MiB budgets: bmoe-run/bmoe-cli tok/s is printed per row,
and each runtime's streamed/resident ratio (``--peer-only``: that comparison alone). How to build
the binary: docs/runtime.md "Against bmoe-cli, measured here".

Usage: ``python benchmarks/runtime_bench.py [--tokens 128] [--rounds 5] [--threads 2] [--dir DIR]
[--qtypes q4_k,q8_0] [--peer-only]``. On a shared machine every figure moves: say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024
PROMPT = "Benchmarks measure what users feel: tokens per second and bytes per second."
QTYPE_NAMES = {"q4_k": "Q4_K_M", "q8_0": "q8_0"}
#: the C++ runtime's streamed/resident tok/s on the bench preset (128 greedy tokens, -t 2)
CPP_RATIOS = {
    "all": {"q4_k": 0.82, "q8_0": 0.73},
    "50": {"q4_k": 0.73, "q8_0": 0.63},
    "25": {"q4_k": 0.54, "q8_0": 0.45},
    "off": {"q4_k": 0.062, "q8_0": 0.061},
    "off2": {"q4_k": 0.094},
}
ROWS = ("bare", "resident", "all", "allcold", "50", "25", "50e1", "25e1", "off", "off2")
LABELS = {"bare": "bare llama.cpp loop", "resident": "resident (--no-moe-stream)",
          "all": "cache holds every expert", "allcold": "every expert fits, cold start",
          "50": "50% of the expert bank", "25": "25% of the expert bank",
          "50e1": "50%, --early-prefetch 1", "25e1": "25%, --early-prefetch 1",
          "off": "cache off", "off2": "cache off, 2 read threads"}


@dataclass
class RowRuns:
    tok_s: list[float] = field(default_factory=list)
    dec_tok_s: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)  # to the resident run of the same round
    mib_tok: list[float] = field(default_factory=list)
    xfer_mib_tok: list[float] = field(default_factory=list)
    hit_pct: list[float] = field(default_factory=list)
    mgmt_ms: list[float] = field(default_factory=list)
    io_ms: list[float] = field(default_factory=list)
    read_mib_s: list[float] = field(default_factory=list)
    req_kib: list[float] = field(default_factory=list)
    s_tok: list[float] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    rss_mib: float | None = None


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- the bare loop ---------------------------------------------------------------------------------
class BareLoop:
    """llama.cpp alone: mmap load, one context, the greedy sampler chain; nothing else per token."""

    def __init__(self, model: str, n_ctx: int, threads: int) -> None:
        from bmoe_top.runtime.llama_lib import L

        self.L = L
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = False  # as the Engine: no weight repacking
        self.model = L.llama_model_load_from_file(model.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = min(n_ctx, 2048)
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.smpl = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.smpl, L.llama_sampler_init_greedy())
        self.one = (L.llama_token * 1)()

    def run(self, prompt: str, n: int) -> tuple[list[int], float]:
        L = self.L
        b = prompt.encode()
        buf = (L.llama_token * (len(b) + 16))()
        k = L.llama_tokenize(self.vocab, b, len(b), buf, len(buf), True, False)
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        L.llama_decode(self.ctx, L.llama_batch_get_one(buf, k))
        out: list[int] = []
        t0 = time.perf_counter()
        for _ in range(n):
            tok = L.llama_sampler_sample(self.smpl, self.ctx, -1)
            if L.llama_vocab_is_eog(self.vocab, tok):
                break
            out.append(tok)
            self.one[0] = tok
            L.llama_decode(self.ctx, L.llama_batch_get_one(self.one, 1))
        return out, time.perf_counter() - t0

    def close(self) -> None:
        L = self.L
        L.llama_sampler_free(self.smpl)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


# -- rows -----------------------------------------------------------------------------------------
def row_flags(row: str, bank_mib: float) -> list[str]:
    """bmoe-run / bmoe-cli flags of a row (besides model, prompt, tokens, threads)."""
    every = ["--cache-mb", f"{bank_mib + 1:.1f}"]
    return {"resident": ["--no-moe-stream"], "all": every, "allcold": every,
            "50": ["--cache-mb", f"{bank_mib * 0.5:.2f}"], "25": ["--cache-mb", f"{bank_mib * 0.25:.2f}"],
            "50e1": ["--cache-mb", f"{bank_mib * 0.5:.2f}", "--early-prefetch", "1"],
            "25e1": ["--cache-mb", f"{bank_mib * 0.25:.2f}", "--early-prefetch", "1"],
            "off": ["--cache-mb", "0"], "off2": ["--cache-mb", "0", "--io-threads", "2"]}[row]


def make_engine(row: str, model: str, bank_mib: float, n_ctx: int, threads: int):
    from bmoe_top.runtime.engine import Engine

    kw = dict(n_ctx=n_ctx, n_threads=threads, quiet=True)
    if row == "resident":
        return Engine(model, stream=False, **kw)
    if row in ("all", "allcold"):
        return Engine(model, cache_mb=bank_mib + 1, **kw)
    if row in ("50", "25"):
        return Engine(model, cache_mb=bank_mib * int(row) / 100, **kw)
    if row in ("50e1", "25e1"):
        return Engine(model, cache_mb=bank_mib * int(row[:2]) / 100, early_prefetch=1, **kw)
    return Engine(model, cache_mb=0, io_threads=2 if row == "off2" else 1, **kw)


def timed_rows(model: str, rows: list[str], tokens: int, rounds: int, threads: int, n_ctx: int) -> dict[str, RowRuns]:
    from bmoe_top.parsers.gguf_layout import read_layout

    bank_mib = read_layout(model).expert_bank_bytes / MIB
    engines = {r: make_engine(r, model, bank_mib, n_ctx, threads) for r in rows if r != "bare"}
    bare = BareLoop(model, n_ctx, threads) if "bare" in rows else None
    out = {r: RowRuns() for r in rows}
    for e in engines.values():  # warm every engine once (page cache for the dense weights, code)
        e.generate(PROMPT, 4)
    if bare is not None:
        bare.run(PROMPT, 4)
    for rnd in range(rounds):
        order = rows[rnd % len(rows):] + rows[: rnd % len(rows)]
        this: dict[str, float] = {}
        for r in order:
            rr = out[r]
            if r == "bare":
                assert bare is not None
                toks, dt = bare.run(PROMPT, tokens)
                rr.tokens.append(toks)
                rr.tok_s.append(len(toks) / dt)
                this[r] = len(toks) / dt
                continue
            e = engines[r]
            if e.cache is not None:
                e.cache.clear()  # a cold start, as a fresh process
                if r == "all":
                    e.cache.preload()  # the steady state is timed; the cold start is the row "allcold"
            res = e.generate(PROMPT, tokens)
            n = max(1, res.n_tokens)
            rr.tokens.append(res.tokens)
            this[r] = res.n_tokens / res.decode_s
            rr.tok_s.append(this[r])
            rr.dec_tok_s.append(res.decode_tok_s)
            rr.s_tok.append(res.decode_s / n)
            rr.mib_tok.append(res.read_bytes / MIB / n)
            rr.xfer_mib_tok.append(res.xfer_bytes / MIB / n)
            rr.hit_pct.append(res.hit_pct)
            rr.mgmt_ms.append(res.mgmt_s / n * 1e3)
            rr.io_ms.append(res.io_s / n * 1e3)
            if res.io_s > 0:
                rr.read_mib_s.append(res.xfer_bytes / MIB / res.io_s)
            if res.n_reads:
                rr.req_kib.append(res.xfer_bytes / res.n_reads / 1024)
        if "resident" in this:
            for r, v in this.items():
                out[r].ratio.append(v / this["resident"])
        print(f"  round {rnd + 1}/{rounds}: " + " ".join(f"{r}={this[r]:.1f}" for r in rows), flush=True)
    for e in engines.values():
        e.close()
    if bare is not None:
        bare.close()
    return out


# -- processes: peak RSS and the C++ peer ---------------------------------------------------------
TIME = "/usr/bin/time"


def run_child(cmd: list[str]) -> tuple[str, float]:
    """Run ``cmd``; (stdout, peak RSS of the whole child process in MiB). Measured by
    ``/usr/bin/time -v`` when present (its own small process forks the child, so the figure is
    the child's alone: a fork of this large process would carry this process's peak into the
    child's ``getrusage`` until ``exec``), else from the child's VmHWM in its CSV ``# summary``."""
    if os.path.exists(TIME):
        p = subprocess.run([TIME, "-v", *cmd], capture_output=True, text=True, errors="replace")
        if p.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {' '.join(cmd)}")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        return p.stdout, (int(m.group(1)) / 1024.0 if m else float("nan"))
    with tempfile.TemporaryDirectory() as td:
        csv = os.path.join(td, "run.csv")
        p = subprocess.run([*cmd, "--csv", csv], capture_output=True, text=True, errors="replace")
        if p.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {' '.join(cmd)}")
        m = re.search(r"peak_rss_MiB=([\d.]+)", Path(csv).read_text())
        return p.stdout, (float(m.group(1)) if m else float("nan"))


def cli_cmd(binary: list[str], model: str, row: str, bank_mib: float, tokens: int, threads: int,
            n_ctx: int, peer: bool = False, whole_mib: bool = False) -> list[str]:
    """The command line of one row; ``peer``: for bmoe-cli, which takes whole MiB, streams only
    with ``--moe-stream``, defaults to 4 read lanes and refuses budgets under 1,500 MiB without
    ``--force-cache``; ``whole_mib``: budgets rounded to whole MiB, as bmoe-cli reads them)."""
    flags = row_flags(row, bank_mib)
    if peer or whole_mib:
        flags = [f"{float(f):.0f}" if flags[i - 1:i] == ["--cache-mb"] else f for i, f in enumerate(flags)]
    if peer:
        if row == "resident":
            flags = []
        else:
            flags = ["--moe-stream", "--force-cache", *flags]
            if "--io-threads" not in flags:
                flags += ["--io-threads", "1"]
    return [*binary, "-m", model, "-p", PROMPT, "-n", str(tokens), "-t", str(threads), "-c", str(n_ctx), *flags]


def cli_tok_s(stdout: str) -> float:
    """tok/s of a ``generation:`` line (bmoe-cli: the decode calls; bmoe-run: per-token wall)."""
    m = re.search(r"generation:\s+\d+ tokens?, [\d.]+ s/token \(([\d.]+) tok/s\)", stdout)
    return float(m.group(1)) if m else float("nan")


def decode_tok_s(stdout: str) -> float:
    """bmoe-run's ``llama_decode``-only tok/s (bmoe-cli's definition), from its ``generation:`` line."""
    m = re.search(r"([\d.]+) tok/s in llama_decode alone", stdout)
    return float(m.group(1)) if m else float("nan")


def bmoe_run() -> list[str]:
    return [sys.executable, "-m", "bmoe_top.runtime.cli"]


def peak_rss(model: str, rows: list[str], tokens: int, threads: int, n_ctx: int) -> dict[str, float]:
    from bmoe_top.parsers.gguf_layout import read_layout

    bank_mib = read_layout(model).expert_bank_bytes / MIB
    out = {}
    for r in rows:
        if r in ("bare", "allcold", "50e1", "25e1"):  # the budgets of "all", "50", "25": same peak
            continue
        _, out[r] = run_child([*cli_cmd(bmoe_run(), model, r, bank_mib, tokens, threads, n_ctx), "--quiet"])
    return out


#: rows compared with bmoe-cli (it has no warm-cache preload and no early prefetch)
PEER_ROWS = ("resident", "all", "50", "25", "off", "off2")


def versus_cli(cli: str, model: str, rows: list[str], tokens: int, rounds: int, threads: int,
               n_ctx: int) -> dict[str, dict[str, float]]:
    """bmoe-run against bmoe-cli, both as child processes, every row of a round run by both back
    to back (which goes first alternates by round), medians over rounds. Per row: ``run_cli``
    bmoe-run per-token wall / bmoe-cli tok/s, ``dec_cli`` bmoe-run ``llama_decode`` alone /
    bmoe-cli (the same definition), and each runtime's own streamed/resident ratio of the round
    (``run_ratio``, ``cli_ratio``; resident must be among ``rows``)."""
    from bmoe_top.parsers.gguf_layout import read_layout

    bank_mib = read_layout(model).expert_bank_bytes / MIB
    todo = [r for r in PEER_ROWS if r in rows]
    got: dict[str, dict[str, list[float]]] = {r: {"run": [], "dec": [], "cli": []} for r in todo}
    for rnd in range(rounds):
        for r in todo[rnd % len(todo):] + todo[: rnd % len(todo)]:
            pair = [(bmoe_run(), "run"), ([cli], "cli")]
            if rnd % 2:
                pair.reverse()
            for binary, name in pair:
                extra = ["--quiet"] if name == "run" else []
                out, _ = run_child([*cli_cmd(binary, model, r, bank_mib, tokens, threads, n_ctx, peer=name == "cli",
                                            whole_mib=True),
                                    *extra])
                got[r][name].append(cli_tok_s(out))
                if name == "run":
                    got[r]["dec"].append(decode_tok_s(out))
        print(f"  peer round {rnd + 1}/{rounds}: " + " ".join(
            f"{r}={got[r]['run'][-1]:.1f}/{got[r]['cli'][-1]:.1f}" for r in todo), flush=True)
    out: dict[str, dict[str, float]] = {}
    for r in todo:
        g = got[r]
        out[r] = {"run_cli": med([a / b for a, b in zip(g["run"], g["cli"])]),
                  "dec_cli": med([a / b for a, b in zip(g["dec"], g["cli"])])}
        if "resident" in got:
            res = got["resident"]
            out[r]["run_ratio"] = med([a / b for a, b in zip(g["run"], res["run"])])
            out[r]["cli_ratio"] = med([a / b for a, b in zip(g["cli"], res["cli"])])
    return out


# -- the disk ---------------------------------------------------------------------------------------
def dd_direct(path: str, bs: int, count: int | None = None) -> float:
    """MiB/s of ``dd iflag=direct bs=BS`` over ``path`` (bytes and seconds from dd's report)."""
    cmd = ["dd", f"if={path}", "of=/dev/null", "iflag=direct", f"bs={bs}"]
    if count:
        cmd.append(f"count={count}")
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) bytes .*? copied, ([\d.e-]+) s", p.stderr)
    if not m:
        raise RuntimeError(f"cannot parse dd output: {p.stderr!r}")
    return int(m.group(1)) / MIB / float(m.group(2))


# -- report -----------------------------------------------------------------------------------------
def report(qtype: str, model: str, runs: dict[str, RowRuns], tokens: int, rounds: int, threads: int) -> dict:
    from bmoe_top.parsers.gguf_layout import read_layout

    lay = read_layout(model)
    name = QTYPE_NAMES.get(qtype, qtype)
    print(f"\n{name} bench preset: {lay.expert_bank_bytes / MIB:.1f} MiB expert bank, {tokens} greedy tokens, "
          f"-t {threads}, {rounds} rounds interleaved, medians")
    hdr = (f"{'row':<28} {'tok/s':>7} {'best':>7} {'dec tok/s':>9} {'MiB/tok':>8} {'pages':>7} {'hit%dec':>7} "
           f"{'mgmt ms':>7} {'RSS MiB':>7} {'ratio':>6} {'best':>6}  goal")
    print(hdr)
    print("-" * len(hdr))
    summary: dict[str, dict] = {}
    for r, rr in runs.items():
        res_best = max(runs["resident"].tok_s) if "resident" in runs else float("nan")
        if r == "bare":
            ratio = med([a / b for a, b in zip(runs["resident"].tok_s, rr.tok_s)]) if "resident" in runs else None
            best = res_best / max(rr.tok_s)
            goal = "resident/bare >= 0.98"
            ratio_txt = f"{ratio:.3f}" if ratio else ""
        elif r == "resident":
            ratio, best, goal, ratio_txt = None, 1.0, "", "1.000"
        else:
            ratio = med(rr.ratio)
            best = max(rr.tok_s) / res_best
            cpp = CPP_RATIOS.get(r, {}).get(qtype)
            goal = f">= {cpp} (C++)" if cpp else "(no C++ figure)"
            ratio_txt = f"{ratio:.3f}"
        hit = med(rr.hit_pct)
        hit_txt = "-" if not rr.hit_pct or hit < 0 else f"{hit:.1f}"
        rss = f"{rr.rss_mib:.0f}" if rr.rss_mib else "-"
        def cell(xs: list[float], fmt: str) -> str:
            return format(med(xs), fmt) if xs else "-"
        print(f"{LABELS[r]:<28} {cell(rr.tok_s, '7.1f')} {max(rr.tok_s):7.1f} {cell(rr.dec_tok_s, '9.1f')} "
              f"{cell(rr.mib_tok, '8.3f')} {cell(rr.xfer_mib_tok, '7.3f')} {hit_txt:>7} {cell(rr.mgmt_ms, '7.3f')} "
              f"{rss:>7} {ratio_txt:>6} {best:6.3f}  {goal}")
        summary[r] = {"tok_s": med(rr.tok_s), "dec_tok_s": med(rr.dec_tok_s), "mib_tok": med(rr.mib_tok),
                      "xfer_mib_tok": med(rr.xfer_mib_tok), "hit_pct_decode": hit, "mgmt_ms_tok": med(rr.mgmt_ms),
                      "rss_mib": rr.rss_mib, "ratio": ratio, "ratio_of_bests": best, "tok_s_runs": rr.tok_s}
    same = all(t == runs["resident"].tokens[0] for r, rr in runs.items() for t in rr.tokens) if "resident" in runs \
        else None
    print(f"every row produced the same tokens: {same}")
    summary["identical"] = same
    if "off" in runs and "resident" in runs:
        dd1m = statistics.median(dd_direct(model, 1 << 20) for _ in range(3))
        off = runs["off"]
        compute_s = med(runs["resident"].s_tok)
        read_s = med(off.xfer_mib_tok) / dd1m
        limit = 1.0 / (compute_s + read_s)
        ratio = med(off.tok_s) / limit
        print(f"cache off serial limit: {limit:.1f} tok/s = compute {compute_s * 1e3:.2f} ms (resident) + "
              f"{med(off.xfer_mib_tok):.2f} MiB at dd iflag=direct bs=1M {dd1m:.0f} MiB/s ({read_s * 1e3:.2f} ms); "
              f"bmoe-run {med(off.tok_s):.1f} tok/s = {ratio:.3f} of it (goal >= 0.7)")
        req = int(round(med(off.req_kib))) * 1024 if off.req_kib else 1 << 20
        req = max(4096, req // 4096 * 4096)
        count = max(16, int(lay.file_size // req // 2))
        dd_req = statistics.median(dd_direct(model, req, count) for _ in range(3))
        ours = med(off.read_mib_s)
        print(f"cold reads (cache off, 1 lane): {ours:.0f} MiB/s in {req // 1024} KiB requests vs dd iflag=direct "
              f"bs={req // 1024}k {dd_req:.0f} MiB/s = {ours / dd_req:.3f} (goal >= 0.8)")
        summary["serial_limit"] = {"limit_tok_s": limit, "ratio": ratio, "dd_1m_mib_s": dd1m,
                                   "compute_ms": compute_s * 1e3, "read_ms": read_s * 1e3}
        summary["cold_reads"] = {"mib_s": ours, "request_kib": req // 1024, "dd_mib_s": dd_req,
                                 "ratio": ours / dd_req}
        if "off2" in runs:
            o2 = med(runs["off2"].read_mib_s)
            print(f"cold reads (cache off, 2 lanes): {o2:.0f} MiB/s = {o2 / dd_req:.3f} of dd at the same size")
    if runs.get("25") and runs["25"].rss_mib and runs.get("resident") and runs["resident"].rss_mib:
        q = runs["25"].rss_mib / runs["resident"].rss_mib
        print(f"peak RSS of the whole process, load included: 25% {runs['25'].rss_mib:.0f} MiB / resident "
              f"{runs['resident'].rss_mib:.0f} MiB = {q:.3f} (goal < 0.5)")
        summary["rss_25_over_resident"] = q
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--dir", default=None, help="where the bench models are (made when missing)")
    ap.add_argument("--qtypes", default="q4_k,q8_0")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child runs")
    ap.add_argument("--peer-only", action="store_true",
                    help="with BMOE_CLI: only the comparison with bmoe-cli (child processes)")
    args = ap.parse_args(argv)
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="bmoe-bench-") as td:
            return _bench(Path(td), args)
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    return _bench(d, args)


def _bench(d: Path, args: argparse.Namespace) -> int:
    from bmoe_top.runtime.models import make_model

    rows = [r for r in args.rows.split(",") if r in ROWS]
    results = {}
    cli = os.environ.get("BMOE_CLI")
    for qtype in args.qtypes.split(","):
        model = d / f"bench-{qtype}.gguf"
        if not model.exists():
            make_model(model, preset="bench", qtype=qtype)
        print(f"{QTYPE_NAMES.get(qtype, qtype)}: {model}", flush=True)
        results[qtype] = {}
        if not args.peer_only:
            runs = timed_rows(str(model), rows, args.tokens, args.rounds, args.threads, args.ctx)
            if not args.no_rss:
                for r, mib in peak_rss(str(model), rows, args.tokens, args.threads, args.ctx).items():
                    runs[r].rss_mib = mib
            results[qtype] = report(qtype, str(model), runs, args.tokens, args.rounds, args.threads)
        if cli:
            vs = versus_cli(cli, str(model), rows, args.tokens, args.rounds, args.threads, args.ctx)
            print(f"{QTYPE_NAMES.get(qtype, qtype)} against bmoe-cli ({cli}; child processes, whole-MiB budgets, "
                  f"medians over {args.rounds} rounds):")
            print(f"  {'row':<28} {'run/cli':>8} {'dec/cli':>8} {'run: row/res':>13} {'cli: row/res':>13}")
            for r, v in vs.items():
                print(f"  {LABELS[r]:<28} {v['run_cli']:8.3f} {v['dec_cli']:8.3f} "
                      f"{v.get('run_ratio', float('nan')):13.3f} {v.get('cli_ratio', float('nan')):13.3f}")
            results[qtype]["vs_bmoe_cli"] = vs
    print(json.dumps(results, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
