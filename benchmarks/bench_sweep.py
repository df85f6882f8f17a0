"""The tok/s model against real runs: ``bmoe-top sweep`` on a generated model at several budgets
(default 10, 50 and 100 % of the expert bank), measured tok/s against the prediction made from
the first budget's first run, per budget (docs/analysis.md "The sweep", "Measured here").

The model is ``bmoe-run make-model`` output (default the ``bench`` preset in q8_0), made in
``--dir`` when missing. Every run is a ``bmoe-run`` child with O_DIRECT reads, one lane, greedy,
the same prompt; the arms run interleaved, ``--rounds`` rounds (``bmoe-top sweep --order
interleaved``), so drift on the machine falls on every budget alike. Printed per budget: the
median measured tok/s, the predicted tok/s, the error ((predicted - measured) / measured), and the
error of a baseline predictor measured in the same run: the reference run's own tok/s at every
budget (what one would assume without the model), and the error of the prediction made with each
run's own compute and mgmt per token (the read model alone, free of how loaded the machine was
while that run computed); then the median and largest |error| of each.
The ratio of the two medians says how much the model buys over assuming nothing changes.

The machine this runs on may be shared: compute dominates a token of a small model, and compute
varies with the load, so the errors are those of the load as much as of the model.
Run: .venv/bin/python benchmarks/bench_sweep.py [--model bench-q8_0] [--budgets 10,50,100]
[--rounds 2] [-n 16] [--dir DIR]
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("--budgets", default="10,50,100", help="% of the expert bank, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=16, help="tokens per run")
    ap.add_argument("--dir", default=None, help="where the model and the runs go (default: a temporary folder)")
    ap.add_argument("--model-path", default=None, help="an existing GGUF instead of making --model")
    args = ap.parse_args()
    from bmoe_top.parsers.gguf_layout import read_layout

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
        print(f"{args.model}: expert bank {bank_mib:.0f} MiB; budgets {cache} MiB; {args.rounds} rounds of "
              f"{args.n} tokens, interleaved", flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        doc = orjson.loads(proc.stdout)
        ref = doc["arms"][0]["runs"][0]["tok_s"]
        print(f"\n{'budget':>12} {'% bank':>7} {'measured':>9} {'predicted':>10} {'error':>8} {'baseline err':>13} "
              f"{'own-costs err':>14}")
        model_err, base_err, own_err = [], [], []
        for a, s in zip(doc["arms"], shares):
            m, p = a["measured_tok_s"], a["predicted_tok_s"]
            e = a["error_pct"]
            b = None if m is None or ref is None else 100 * (ref - m) / m
            if e is not None:
                model_err.append(abs(e))
            if b is not None:
                base_err.append(abs(b))
            o = a["own_costs_error_pct"]
            own_err += [abs(r["own_costs_error_pct"]) for r in a["runs"] if r["own_costs_error_pct"] is not None]
            print(f"{a['cache_mb']:>8.1f} MiB {s:>6.0f}% {m or float('nan'):>9.3g} {p or float('nan'):>10.3g} "
                  f"{e if e is not None else float('nan'):>+7.1f}% {b if b is not None else float('nan'):>+12.1f}% "
                  f"{o if o is not None else float('nan'):>+13.1f}%")
        if model_err and base_err:
            mm, mb = statistics.median(model_err), statistics.median(base_err)
            ratio = mm / mb if mb else float("nan")
            print(f"\nmedian |error|: model {mm:.1f} %, baseline {mb:.1f} % (ratio {ratio:.2f}); "
                  f"largest: model {max(model_err):.1f} %, baseline {max(base_err):.1f} %")
        if own_err:
            print(f"with each run's own compute and mgmt (the read model alone), over {len(own_err)} runs: median "
                  f"|error| {statistics.median(own_err):.1f} %, largest {max(own_err):.1f} %")
        print(f"reference inputs: {doc['reference_inputs']}")
        for n in doc["notes"]:
            print(f"note: {n}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
