"""bmoe-run against bmoe-cli and stock llama.cpp with mmap, measured in the same interleaved rounds:
the tables of docs/runtime.md "Benchmarks".

For each model (``--models``, made with ``bmoe-run make-model`` in ``--dir`` when missing; default
the ``bench`` preset in Q4_K_M and q8_0, the ``demo`` preset in q8_0 and the ``large`` preset in
Q4_K, three sizes up to a 2.5 GiB expert bank), every row runs as child processes:

* rows: ``resident`` (bmoe-run ``--no-moe-stream``; bmoe-cli without ``--moe-stream``),
  ``all`` (a budget that holds every expert, from a cold cache), ``50`` and ``25`` (% of the expert
  bank), ``off`` (no cache) and ``off2`` (no cache, 2 read lanes); budgets in whole MiB, as bmoe-cli
  reads them, one read lane unless the row says 2;
* runtimes: **bmoe-run** (``python -m bmoe_top.runtime.cli``), **bmoe-cli** when ``BMOE_CLI`` names
  the binary (docs/runtime.md "Against bmoe-cli, measured here" builds it), and **mmap**: the
  stock ``llama-server`` this project builds (``tools/llama_server.py``, ``make llama-server``;
  ``--load-mode mmap --no-repack``, one slot, greedy) in a memory cgroup (v1 or v2) limited to
  bmoe-run's peak RSS in the same row and round (unlimited in the resident row). The mmap rows run
  at the model's device readahead (recorded) and, as root, again from a loop device set to
  128 KiB (an ext4 image in ``--dir`` holding a copy of the model, read with direct I/O so the
  image's own page cache does not serve it): a thrashing mmap reads a readahead window per page
  fault, so its figures hold for one disk setting only;
* every streamed and mmap run starts cold: the model's pages are dropped from the page cache
  first (``posix_fadvise(DONTNEED)``; the share still cached is printed); resident runs start warm
  from one read of the whole file in order after such a drop, every runtime alike (the page cache
  then holds it in large folios, which a runtime that maps the file maps 2 MiB at a time; on
  2026-12-06, with 1.75 GiB of the large preset's 2.6 mapped so (``FilePmdMapped``) after earlier
  runs, bmoe-run / bmoe-cli resident was 1.14 over 6 rounds, and 1.009 over 10 after a read in
  order (2.5 GiB mapped so);
* per run: tok/s as each runtime defines its decode rate (bmoe-run: ``llama_decode`` calls alone,
  and the per-token wall beside it, which adds sampling and printing; bmoe-cli: its
  ``generation:`` figure, the ``llama_decode`` calls alone; mmap: the server's decode timing), peak
  RSS of the process (``wait4``; the server's VmHWM), bytes read from the disk per generated token
  after the first (``/proc/PID/io`` ``read_bytes``, from the first generated piece to the end: a
  win that comes from extra RAM shows as fewer bytes), bmoe-run's and bmoe-cli's model load
  seconds, and whether the text equals bmoe-run's resident text.

Rounds are interleaved: each round runs every row (the row order rotates); in each row bmoe-run
runs before the mmap runs (its peak RSS sets their limit), bmoe-cli first in every other round
and after bmoe-run in the rest, and the others in an order that rotates. Figures are
medians over rounds; a ratio is the median of the per-round ratios.

In the same process, before the child runs (``--inproc-rounds``, 0 to skip): the bare llama.cpp
loop (mmap load, ``llama_decode`` and llama.cpp's greedy sampler) against ``Engine(stream=False)``
given a cancel event as bmoe-run's one-shot gives it, interleaved: resident / bare tok/s and the
host's work per token around ``llama_decode`` (per-token wall minus the ``llama_decode`` call, in
each).

Usage::

    BMOE_CLI=/path/to/bmoe-cli python benchmarks/runtime_bench.py [--models large-q4_k,...]
        [--rows resident,all,50,25,off,off2] [--tokens 128] [--mmap-tokens 32] [--rounds 5]
        [--threads 2] [--dir DIR] [--inproc-rounds 5] [--no-loop] [--json OUT [--force]]

On a quiet 2-core machine the default (four models, 5 rounds) takes about an hour, most of it the
large model's mmap rows at 25 % and cache off; ``--models large-q4_k --rounds 5`` about 35 minutes.
On a shared machine every figure moves: say so when quoting them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mmap_machine import (
    MIB,
    PROMPT,
    MemoryCgroup,
    Run,
    dd_direct,
    drop_cache,
    ensure_model,
    llama_server_binary,
    loop_copy,
    readahead_kb,
    run_cli,
    run_mmap,
    warm_cache,
)

from bmoe_top.outfile import OutputFileError, check_output, write_atomic

MODELS = ("bench-q4_k", "bench-q8_0", "demo-q8_0", "large-q4_k")
ROWS = ("resident", "all", "50", "25", "off", "off2")
LABELS = {"resident": "resident", "all": "every expert fits", "50": "50% of the bank", "25": "25% of the bank",
          "off": "cache off", "off2": "cache off, 2 lanes"}
QTYPE_NAMES = {"q4_k": "Q4_K", "q8_0": "q8_0"}


# -- the in-process part: the bare llama.cpp loop against the resident Engine -------------------------
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

    def run(self, prompt: str, n: int) -> tuple[list[int], float, float]:
        """(tokens, seconds of the loop, seconds in llama_decode)."""
        L = self.L
        b = prompt.encode()
        buf = (L.llama_token * (len(b) + 16))()
        k = L.llama_tokenize(self.vocab, b, len(b), buf, len(buf), True, False)
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        L.llama_decode(self.ctx, L.llama_batch_get_one(buf, k))
        out: list[int] = []
        dec = 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            tok = L.llama_sampler_sample(self.smpl, self.ctx, -1)
            if L.llama_vocab_is_eog(self.vocab, tok):
                break
            out.append(tok)
            self.one[0] = tok
            td = time.perf_counter()
            L.llama_decode(self.ctx, L.llama_batch_get_one(self.one, 1))
            dec += time.perf_counter() - td
        return out, time.perf_counter() - t0, dec

    def close(self) -> None:
        L = self.L
        L.llama_sampler_free(self.smpl)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


def in_process(model: Path, tokens: int, rounds: int, threads: int, n_ctx: int) -> dict:
    """Bare loop against ``Engine(stream=False)`` in this process, interleaved: tok/s, the ratio,
    and the host's microseconds per token outside ``llama_decode`` in each. The Engine gets a
    cancel event, as bmoe-run's one-shot passes one (its polling is part of what bmoe-run runs)."""
    from bmoe_top.runtime.engine import Engine

    eng = Engine(model, stream=False, n_ctx=n_ctx, n_threads=threads, quiet=True)
    bare = BareLoop(str(model), n_ctx, threads)
    eng.generate(PROMPT, 4)
    bare.run(PROMPT, 4)
    got: dict[str, list[float]] = {"bare": [], "resident": [], "ratio": [], "bare_host_us": [], "res_host_us": []}
    same = True
    for rnd in range(rounds):
        order = ("bare", "resident") if rnd % 2 == 0 else ("resident", "bare")
        this = {}
        for name in order:
            if name == "bare":
                toks, dt, dec = bare.run(PROMPT, tokens)
                this["bare"] = len(toks) / dt
                got["bare_host_us"].append((dt - dec) / max(1, len(toks)) * 1e6)
                bare_toks = toks
            else:
                res = eng.generate(PROMPT, tokens, cancel=threading.Event())
                this["resident"] = res.n_tokens / res.decode_s
                got["res_host_us"].append((res.decode_s - res.decode_call_s) / max(1, res.n_tokens) * 1e6)
                res_toks = res.tokens
        same = same and bare_toks == res_toks
        got["bare"].append(this["bare"])
        got["resident"].append(this["resident"])
        got["ratio"].append(this["resident"] / this["bare"])
    eng.close()
    bare.close()
    out = {k: statistics.median(v) for k, v in got.items()}
    out["same_tokens"] = same
    return out


# -- rows ------------------------------------------------------------------------------------------------
def row_flags(row: str, bank_mib: float, peer: bool) -> list[str]:
    """The flags of a row for bmoe-run (``peer`` False) or bmoe-cli: whole-MiB budgets for both;
    bmoe-cli streams only with ``--moe-stream`` and refuses budgets under 1,500 MiB without
    ``--force-cache``."""
    if row == "resident":
        return [] if peer else ["--no-moe-stream"]
    mib = {"all": bank_mib + 1, "50": bank_mib * 0.5, "25": bank_mib * 0.25}.get(row, 0.0)
    flags = ["--cache-mb", f"{mib:.0f}", "--io-threads", "2" if row == "off2" else "1"]
    if peer:
        flags = ["--moe-stream", "--force-cache", *flags]
    elif row in ("50", "25"):
        flags.append("--force-cache")
    return flags


def bmoe_run_cmd() -> list[str]:
    return [sys.executable, "-m", "bmoe_top.runtime.cli"]


def common_args(model: Path, tokens: int, threads: int, n_ctx: int) -> list[str]:
    return ["-m", str(model), "-p", PROMPT, "-n", str(tokens), "-t", str(threads), "-c", str(n_ctx)]


@dataclass
class Cell:
    runs: list[Run] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)  # bmoe-run decode tok/s over this runtime's, per round


def bench_model(path: Path, args: argparse.Namespace, cli: str | None, server: Path | None,
                cg: MemoryCgroup) -> dict:
    from bmoe_top.parsers.gguf_layout import read_layout

    lay = read_layout(path)
    bank = lay.expert_bank_bytes / MIB
    rows = [r for r in args.rows.split(",") if r in ROWS]
    print(f"\n{path.stem}: {lay.n_layer} layers x {lay.n_expert} experts, top-{lay.n_expert_used}, expert bank "
          f"{bank:.0f} MiB, file {lay.file_size / MIB:.0f} MiB", flush=True)
    ra = readahead_kb(path)
    print(f"  disk: read_ahead_kb {ra} (the model's device), dd iflag=direct bs=1M {dd_direct(path):.0f} MiB/s",
          flush=True)
    result: dict = {"model": path.stem, "bank_mib": bank, "file_mib": lay.file_size / MIB, "read_ahead_kb": ra}
    if args.inproc_rounds:
        ip = in_process(path, args.tokens, args.inproc_rounds, args.threads, args.ctx)
        print(f"  in process: bare llama.cpp loop {ip['bare']:.1f} tok/s, resident Engine {ip['resident']:.1f} "
              f"tok/s = {ip['ratio']:.3f} of it; host work per token outside llama_decode: bare "
              f"{ip['bare_host_us']:.0f} us, Engine {ip['res_host_us']:.0f} us; same tokens {ip['same_tokens']}",
              flush=True)
        result["in_process"] = ip
    runtimes = ["run"] + (["cli"] if cli else []) + (["mmap"] if server and cg.base else [])
    if server is None:
        print("  (no mmap baseline: llama-server is not built; make llama-server)")
    elif cg.base is None:
        print(f"  (no mmap baseline: {cg.why})")
    with contextlib.ExitStack() as stack:
        loop = stack.enter_context(loop_copy(path, path.parent)) if "mmap" in runtimes and args.loop else None
        if loop is not None:
            runtimes.append("mmap128")
        cells = {(r, rt): Cell() for r in rows for rt in runtimes}
        cached: list[float] = []
        for rnd in range(args.rounds):
            for row in rows[rnd % len(rows):] + rows[: rnd % len(rows)]:
                others = runtimes[1:]
                k = rnd % max(1, len(others))
                order = ["run"] + others[k:] + others[:k]
                if "cli" in order and rnd % 2:  # every other round bmoe-cli goes first: a warm-up or drift
                    order.remove("cli")         # that favours the first run of a row favours neither
                    order.insert(0, "cli")
                this: dict[str, Run] = {}
                for rt in order:
                    src = loop if rt == "mmap128" and loop is not None else path
                    if row == "resident":
                        drop_cache(src)
                        warm_cache(src)
                    else:
                        cached.append(drop_cache(src))
                    if rt == "run":
                        cmd = [*bmoe_run_cmd(), *common_args(path, args.tokens, args.threads, args.ctx),
                               *row_flags(row, bank, peer=False), "--quiet"]
                        run = run_cli(cmd)
                    elif rt == "cli":
                        assert cli is not None
                        run = run_cli([cli, *common_args(path, args.tokens, args.threads, args.ctx),
                                       *row_flags(row, bank, peer=True)])
                    else:
                        assert server is not None
                        limit = None if row == "resident" else this["run"].peak_rss_mib * MIB
                        model = loop if rt == "mmap128" and loop is not None else path
                        d = cg.make(limit if limit == limit else None)
                        try:
                            run = run_mmap(server, model, args.mmap_tokens, args.threads, args.ctx,
                                           procs=str(d / "cgroup.procs"), timeout=args.mmap_timeout)
                        finally:
                            cg.drop(d)
                    this[rt] = run
                    cells[(row, rt)].runs.append(run)
                for rt, run in this.items():
                    if rt != "run":
                        cells[(row, rt)].ratios.append(this["run"].dec_tok_s / run.dec_tok_s if run.dec_tok_s
                                                       else float("nan"))
                print(f"  round {rnd + 1} {row:>8}: " + "  ".join(
                    f"{rt} {r.dec_tok_s:.1f} tok/s {r.peak_rss_mib:.0f} MiB" + (f" [{r.error}]" if r.error else "")
                    for rt, r in this.items()), flush=True)
    result["cached_after_drop_max"] = max(cached) if cached else None
    if cached:
        print(f"  page cache after each drop: at most {100 * max(cached):.1f} % of the file still cached")
    result["rows"], result["load_s"], result["same_text"] = report(path.stem, rows, runtimes, cells, args)
    return result


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def report(name: str, rows: list[str], runtimes: list[str], cells: dict[tuple[str, str], Cell],
           args: argparse.Namespace) -> tuple[dict, dict, dict]:
    """Print the tables; return the rows (per row and runtime, :func:`summarize`), the median model
    load seconds per runtime, and whether each runtime's text equals bmoe-run's resident text."""
    cols = {"run": "bmoe-run", "cli": "bmoe-cli", "mmap": "mmap", "mmap128": "mmap 128K"}
    others = runtimes[1:]
    print(f"\n{name}: {args.tokens} greedy tokens (mmap {args.mmap_tokens}), -t {args.threads}, {args.rounds} rounds "
          "interleaved, medians; decode tok/s (llama_decode alone; bmoe-run's per-token wall beside it); "
          "ratio = bmoe-run over the other, median of the rounds")
    hdr = f"{'row':<20} {'bmoe-run':>9} {'(wall)':>8}" + "".join(f" {cols[o]:>10} {'ratio':>7}" for o in others)
    print(hdr)
    print("-" * len(hdr))
    out: dict = {}
    base_text = next((r.text for r in cells[("resident", "run")].runs if r.text), None) if "resident" in rows else None
    for row in rows:
        run = cells[(row, "run")]
        line = f"{LABELS[row]:<20} {med([r.dec_tok_s for r in run.runs]):9.2f} {med([r.tok_s for r in run.runs]):8.2f}"
        out[row] = {"run": summarize(run)}
        for o in others:
            c = cells[(row, o)]
            line += f" {med([r.dec_tok_s for r in c.runs]):10.2f} {med(c.ratios):7.3f}"
            out[row][o] = summarize(c)
        print(line)
    print(f"\n{'row':<20} " + " ".join(f"{cols[r] + ' RSS':>13}" for r in runtimes) + "   disk MiB/token: "
          + " ".join(f"{cols[r]:>9}" for r in runtimes))
    for row in rows:
        line = f"{LABELS[row]:<20} " + " ".join(f"{med([r.peak_rss_mib for r in cells[(row, rt)].runs]):13.0f}"
                                                 for rt in runtimes)
        line += "                   " + " ".join(f"{med([r.disk_mib_tok for r in cells[(row, rt)].runs]):9.3f}"
                                                 for rt in runtimes)
        print(line)
    loads = {rt: med([r.load_s for row in rows for r in cells[(row, rt)].runs if row != "resident"])
             for rt in runtimes if rt in ("run", "cli")}
    print("model load s (streamed rows, medians): " + ", ".join(f"{cols[k]} {v:.2f}" for k, v in loads.items()))
    # the mmap runs make fewer tokens, and the server holds back a last incomplete UTF-8 character
    same = {rt: all((r.text == base_text) if not rt.startswith("mmap") else base_text.startswith(r.text)
                    for row in rows for r in cells[(row, rt)].runs)
            for rt in runtimes} if base_text is not None else {}
    print("same text as bmoe-run resident in every run (mmap: its first tokens; the server is built without "
          "-march=native, so its sums may round otherwise): "
          + ", ".join(f"{cols[k]} {v}" for k, v in same.items()))
    return out, loads, same


def summarize(c: Cell) -> dict:
    return {"tok_s": med([r.tok_s for r in c.runs]), "dec_tok_s": med([r.dec_tok_s for r in c.runs]),
            "ratio": med(c.ratios) if c.ratios else None, "peak_rss_mib": med([r.peak_rss_mib for r in c.runs]),
            "disk_mib_tok": med([r.disk_mib_tok for r in c.runs]), "load_s": med([r.load_s for r in c.runs]),
            "errors": [r.error for r in c.runs if r.error], "runs": [asdict(r) | {"text": None} for r in c.runs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="preset-qtype names (made in --dir when missing)")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--mmap-tokens", type=int, default=32,
                    help="tokens of the mmap baseline (it thrashes when limited)")
    ap.add_argument("--mmap-timeout", type=float, default=600, help="seconds an mmap run may take")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inproc-rounds", type=int, default=5, help="rounds of the bare loop against resident (0: skip)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--dir", default=None, help="where the models (and loop images) are kept")
    ap.add_argument("--no-loop", dest="loop", action="store_false", help="skip the 128 KiB loop-device mmap runs")
    ap.add_argument("--json", default=None, help="also write the results as JSON here (a new file)")
    ap.add_argument("--force", action="store_true", help="replace an existing --json file")
    args = ap.parse_args(argv)
    if args.json:
        try:
            check_output(args.json, force=args.force)  # refused before an hour of runs, not after
        except OutputFileError as e:
            print(f"runtime_bench: {e}", file=sys.stderr)
            return 2
    d = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / "bmoe-bench-models"
    d.mkdir(parents=True, exist_ok=True)
    cli = os.environ.get("BMOE_CLI")
    server = llama_server_binary()
    cg = MemoryCgroup()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; bmoe-cli: {cli or '-'}; "
          f"llama-server: {server or '-'}; memory cgroup: {cg.base or cg.why} ({'v2' if cg.v2 else 'v1'})", flush=True)
    results = [bench_model(ensure_model(d, name), args, cli, server, cg) for name in args.models.split(",")]
    if args.json:
        write_atomic(args.json, json.dumps(results, default=float, indent=1).encode(), force=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
