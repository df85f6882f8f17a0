"""The tok/s model against real runs: ``bmoe-top sweep`` on a generated model at several budgets
(default 10, 25, 50, 75 and 100 % of the expert bank), measured tok/s against the prediction made
from the first budget's arm (its first run's routing and bandwidth, its rounds' compute and mgmt
per token and per evicting miss: ``reference_costs``), per budget (docs/analysis.md "The sweep",
"Measured here").

The model is ``bmoe-run make-model`` output (default the ``bench`` preset in q8_0), made in
``--dir`` when missing. Every run is a ``bmoe-run`` child with O_DIRECT reads, one lane, greedy,
the same prompt; the arms run interleaved, ``--rounds`` rounds (``bmoe-top sweep --order
interleaved``), so drift on the machine falls on every budget alike. Printed per budget: the
median measured tok/s, the predicted tok/s, the error ((predicted - measured) / measured), and the
error of two baselines measured in the same run: the reference run's own tok/s at every budget
(what one would assume without the model), and the same model with the compute and mgmt of the
reference run alone (one run's costs, as the sweep predicted before it took the median of the
rounds); and the error of the prediction made with each run's own compute and mgmt per token (the
read model alone, free of how loaded the machine was while that run computed); then the median
and largest |error| of each, the ratios of the medians, and the load average before and after
and over the runs (each run's ``run.json``).

The machine this runs on may be shared: compute dominates a token of a small model, and compute
varies with the load, so the errors are those of the load as much as of the model.
Run: .venv/bin/python benchmarks/bench_sweep.py [--model bench-q8_0] [--budgets 10,25,50,75,100]
[--rounds 3] [-n 12] [--dir DIR]  (``--model bench-q4_k``: the bench preset in Q4_K_M)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent


def ensure_model(d: Path, name: str) -> Path:
    preset, qtype = name.split("-", 1)
    path = d / f"{name}.gguf"
    if not path.exists():
        subprocess.run([str(Path(sys.executable).with_name("bmoe-run")), "make-model", "--preset", preset,
                        "--qtype", qtype, str(path)], check=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bench-q8_0", help="PRESET-QTYPE of bmoe-run make-model")
    ap.add_argument("--budgets", default="10,25,50,75,100", help="% of the expert bank, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=12, help="tokens per run")
    ap.add_argument("--dir", default=None, help="where the model and the runs go (default: a temporary folder)")
    ap.add_argument("--model-path", default=None, help="an existing GGUF instead of making --model")
    args = ap.parse_args()
    from bmoe_top.parsers.gguf_layout import read_layout
    from bmoe_top.tui.feed.files import open_paths
    from bmoe_top.tui.jobs.whatif import run_costs

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.dir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        model = Path(args.model_path) if args.model_path else ensure_model(d, args.model)
        bank_mib = read_layout(str(model)).expert_bank_bytes / 2**20
        shares = [float(x) for x in args.budgets.split(",")]
        cache = ",".join(f"{bank_mib * s / 100:.1f}" for s in shares)
        out = d / f"sweep-{args.model}"
        cmd = [str(Path(sys.executable).with_name("bmoe-top")), "sweep", "-m", str(model), "--cache-mb", cache,
               "--runs", str(args.rounds), "-n", str(args.n), "-p", "Tell me about the sea.", "-o", str(out),
               "--extra=--quiet", "--json"]
        load0 = os.getloadavg()
        print(f"{args.model}: expert bank {bank_mib:.0f} MiB; budgets {cache} MiB; {args.rounds} rounds of "
              f"{args.n} tokens, interleaved; load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}", flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        load1 = os.getloadavg()
        doc = orjson.loads(proc.stdout)
        ref_run = doc["arms"][0]["runs"][0]
        ref = ref_run["tok_s"]
        one = run_costs(open_paths([str(Path(ref_run["dir"]) / "run.csv")]))
        nan = float("nan")
        print(f"\n{'budget':>12} {'% bank':>7} {'measured':>9} {'spread':>7} {'predicted':>10} {'error':>8} "
              f"{'baseline err':>13} {'one-run err':>12} {'own-costs err':>14}")
        model_err, base_err, one_err, own_err = [], [], [], []
        for a, s in zip(doc["arms"], shares):
            m, p = a["measured_tok_s"], a["predicted_tok_s"]
            e = a["error_pct"]
            b = None if m is None or ref is None else 100 * (ref - m) / m
            # the same model with the reference run's own compute and mgmt (serial: compute + flash + mgmt)
            f = a["predicted_flash_ms"]
            o1 = None
            if m is not None and f is not None and one is not None:
                wait = max(one.compute_ms, f) + one.stall_ms if one.overlap else one.compute_ms + f
                o1 = 100 * (1000 / (wait + one.mgmt_ms) - m) / m
            for got, into in ((e, model_err), (b, base_err), (o1, one_err)):
                if got is not None:
                    into.append(abs(got))
            o = a["own_costs_error_pct"]
            own_err += [abs(r["own_costs_error_pct"]) for r in a["runs"] if r["own_costs_error_pct"] is not None]
            sp = a["spread_pct"]
            print(f"{a['cache_mb']:>8.1f} MiB {s:>6.0f}% {m or nan:>9.3g} {sp if sp is not None else nan:>6.1f}% "
                  f"{p or nan:>10.3g} {e if e is not None else nan:>+7.1f}% {b if b is not None else nan:>+12.1f}% "
                  f"{o1 if o1 is not None else nan:>+11.1f}% {o if o is not None else nan:>+13.1f}%")
        if model_err and base_err and one_err:
            mm, mb, mo = statistics.median(model_err), statistics.median(base_err), statistics.median(one_err)
            print(f"\nmedian |error|: model {mm:.1f} %, baseline {mb:.1f} % (ratio {mm / mb if mb else nan:.2f}), "
                  f"one run's costs {mo:.1f} % (ratio {mm / mo if mo else nan:.2f}); largest: model "
                  f"{max(model_err):.1f} %, baseline {max(base_err):.1f} %, one run's costs {max(one_err):.1f} %")
        if own_err:
            print(f"with each run's own compute and mgmt (the read model alone), over {len(own_err)} runs: median "
                  f"|error| {statistics.median(own_err):.1f} %, largest {max(own_err):.1f} %")
        print(f"reference inputs: {doc['reference_inputs']}")
        loads, computes = [], []
        for a in doc["arms"]:
            for r in a["runs"]:
                c = run_costs(open_paths([str(Path(r["dir"]) / "run.csv")])) if r["tok_s"] is not None else None
                if c is not None:
                    computes.append(c.compute_ms)
                try:
                    la = json.loads((Path(r["dir"]) / "run.json").read_text())["machine"]["loadavg"]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if la:
                    loads.append(la[0])
        if computes:
            print(f"compute per token over the {len(computes)} runs: {min(computes):.0f} to {max(computes):.0f} ms "
                  f"(median {statistics.median(computes):.0f})")
        if loads:
            print(f"load average (1 min) at the runs' ends: {min(loads):.1f} to {max(loads):.1f}; before the sweep "
                  f"{load0[0]:.1f}, after {load1[0]:.1f}; {os.cpu_count()} cores")
        for n in doc["notes"]:
            print(f"note: {n}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
